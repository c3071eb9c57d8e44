// Stream transforms: options any codec can sit under, written once (docs/architecture.md and
// docs/cache-specs.md). A stream whose spec names one of them is a transform layer around the
// codec of the rest of the spec; the layer keeps what it adds (exact sink tokens, outlier entries)
// and counts those bytes with the codec's.
//
//   rot=none         no rotation (turns off a family's default, as quarot's)
//   rot=hadamard     the normalised Sylvester Hadamard (head_dim a power of two) applied per head
//                    before encoding; the query rotated alike (q·k unchanged), the attention output
//                    rotated back. rot=random:SEED: a seeded random orthogonal matrix (QR of a
//                    Gaussian) instead.
//   prerope          keys only: the codec gets keys before RoPE; attention applies RoPE to each key
//                    as it reads it back (paged_scores_rope), as KVQuant does.
//   sink=N           the sequence's first N tokens (N <= 64) also kept exact in fp16: attention reads
//                    them from there (KVQuant's attention sink, IntactKV).
//   outliers=P       dense-and-sparse, per token (all heads of the stream, n numbers): the
//                    round(n·P/200) smallest and as many largest entries are kept exact (fp16 value
//                    and a 1-byte index, 2 bytes when n > 256); in the codec's copy each is clamped
//                    to the range of the rest of its head, so the codec's range is computed without
//                    it. P is a percent in (0, 20], e.g. 1 or 0.5.
//
// Order on the way in: sink copy (the vector as given) → rotation → outliers → codec. Reading back
// undoes it: codec → outliers restored → rotated back; sink tokens come from their exact copy.
#ifndef MICRO_KVTRANSFORM_H
#define MICRO_KVTRANSFORM_H

#include <stddef.h>

#include "kvcache.h"

typedef struct {
    int rot;            // 0 none, 1 hadamard, 2 random
    unsigned long seed; // rot=random
    int prerope;
    int sink;           // tokens
    double outliers;    // percent; 0 none
} TransformOptions;

// Reads and marks the transform options of spec (rot, prerope, sink, outliers), except those the
// codec family owns (a comma-separated list, or NULL). 0 with *t filled (all zero when none is
// given); -1 with one line in err on a bad value.
int transform_options(CodecSpec *spec, KVRole role, int n_heads, int head_dim, const char *owned, TransformOptions *t,
                      char *err, size_t errlen);
// 1 when t asks for any transform.
int transform_any(const TransformOptions *t);
// Appends the options to a normalised spec ("int:bits=4" -> "int:bits=4,rot=hadamard,sink=1"), and
// the family's defaults (CodecFamily.key_transforms / value_transforms) that t turns off (rot=none,
// sink=0), so that the normalised spec reads back as itself.
void transform_normalise(const TransformOptions *t, const char *defaults, char *spec, size_t len);

// Wraps a created codec state: the stream's ops become the layer's, its state the layer's. The
// stream is one block of its sequence holding tokens [first, first + capacity). -1 when out of memory
// (the inner state is then destroyed).
int transform_wrap(KVStream *s, const TransformOptions *t, int first, char *err, size_t errlen);

// The rotation matrix of a transform (row-major head_dim × head_dim, orthogonal) followed by its
// transpose (so that M x runs down Mᵀ's rows, the loop over outputs vectorised), shared by every
// stream that uses it; NULL when out of memory. kind 1: hadamard, 2: random with seed.
const float *transform_rotation(int kind, unsigned long seed, int head_dim);
// y = M x (to the rotated space) or y = Mᵀ x (back) for one head of n numbers, each y_i summed in
// order of j from 0; m as transform_rotation gives it (M, then Mᵀ); y and x distinct.
void transform_rotate(const float *m, int n, const float *x, float *y, int back);
// The unnormalised Sylvester Hadamard matrix (entries ±1) of order n, a power of two (tests).
void transform_sylvester(int n, signed char *h);

// The specs the tests and fuzzers cover the transforms with (spec_catalog.h), NULL-terminated: sink
// tokens spanning two blocks, outliers, rotations, pre-RoPE keys, on several families.
extern const char *const transform_examples[];

#endif
