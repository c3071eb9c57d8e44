// Latent attention's decoded cache for the fast evaluator: span_mirror.h's idea for the two slots of
// a latent cache. A span's rows and heads all attend over one sequence's latents and RoPE keys; the
// codecs' read-back paths decode every token for every (row, head), so each token is decoded once
// here instead, into floats, and the span's products run in the read-back order (Σ_d q_d·x̂_d in
// order of d; Σ_j p_j·x̂_j in order of j): the decode loop's bits. Mirrored only what reads back
// (CodecOps.by_read or reads_back) or sums as it does (the float codec's key mirror, without query
// or factor); the rest stays with the codecs' kernels.
#ifndef MICRO_LATENT_MIRROR_H
#define MICRO_LATENT_MIRROR_H

#include "forward_kernels.h"
#include "kvpool.h"

typedef struct {
    int n_layers, latent, rope, context;
    int scores[2];    // [slot]: the latent's (0) and the RoPE key's (1) scores read the mirror
    int mix;          // the latent's mix reads the mirror
    int needed[2];    // [slot]: decoded at all
    const MirrorOps *ops[2]; // [slot]: decoded through a key mirror's read (NULL: the codec's read)
    const KVSeq *seq; // the sequence mirrored
    int settles[2];   // [slot]: its tokens change form (KIVI): read again once final
    int *count;       // [layer][slot]: tokens [0, n) are decoded
    int *final;       // [layer][slot]: tokens [0, n) are decoded in their final form (settles)
    float *latent_t;  // [layer][the context in panels]: the latents transposed in panels (key_panel_at; scores)
    float *latent_rows; // [layer][context][latent]: the latents as rows (mix)
    float *rope_t;    // [layer][the context in panels]: the RoPE keys transposed in panels
} LatentMirror;

// Buffers for a latent pool's sequences up to `context` tokens, for what reads back (nothing: no
// buffers, every flag 0). -1 when out of memory.
int latent_mirror_init(LatentMirror *m, const KVPool *pool, int context);
void latent_mirror_free(LatentMirror *m);
// After a span's rows, the first at position `first`, were appended to `seq` at this layer: decodes
// the tokens not yet decoded (those from `first` on again; another sequence from its start).
void latent_mirror_update(LatentMirror *m, const KVSeq *seq, int layer, int first);
// After kvseq_end_step at this layer: the tokens that took their final form, decoded again.
void latent_mirror_settle(LatentMirror *m, const KVSeq *seq, int layer);

static inline const float *latent_mirror_latent_t(const LatentMirror *m, int layer) {
    return m->latent_t + (size_t)layer * key_panel_floats(m->latent, m->context);
}
static inline const float *latent_mirror_rows(const LatentMirror *m, int layer) {
    return m->latent_rows + (size_t)layer * m->latent * (size_t)m->context;
}
static inline const float *latent_mirror_rope_t(const LatentMirror *m, int layer) {
    return m->rope_t + (size_t)layer * key_panel_floats(m->rope, m->context);
}

#endif
