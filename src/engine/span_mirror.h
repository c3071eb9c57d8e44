// The fast evaluator's decoded copy of a sequence's cache, for the streams whose attention reads
// each token back whole (a codec flagged reads_back, kvcache.h; keys kept before RoPE): every token
// decoded from its codec once, into floats, so that a span of rows (consecutive positions of one
// sequence, pushed through the forward together) attends with plain products instead of decoding
// every token again for every row. The products run in the read-back fallback's order (Σ_d q_d·x̂_d
// in order of d; Σ_j p_j·x̂_j in order of j), so they give the decode loop's numbers bit for bit.
// Streams with kernels of their own are not mirrored: a span's rows call those kernels.
#ifndef MICRO_SPAN_MIRROR_H
#define MICRO_SPAN_MIRROR_H

#include "forward_kernels.h"
#include "kvpool.h"

typedef struct {
    int n_layers, n_heads, head_dim, context;
    size_t key_floats;  // floats of one layer and head's keys: the context in panels (forward_kernels.h)
    int mirrored[2];    // [role]: this role's streams are mirrored
    const MirrorOps *ops[2]; // [role]: mirrored as their codec's MirrorOps say (NULL: read back)
    const void *rule[2];     // [role]: a block's state, for ops' query (the pool's shared coder)
    const KVSeq *seq;   // the sequence mirrored
    int *count;         // [layer][role]: tokens [0, n) are mirrored
    float *keys;        // [layer][head][key_floats]: keys (x̃ for ops) transposed in panels
                        // (key_panel_at), RoPE'd
    float *values;      // [layer][head][context][head_dim] (x̃ for ops)
    float *factors[2];  // [role][layer][head][context]: ops' factor of each token (has_factor), else NULL
    float *offsets[2];  // the same for ops' offsets (has_offset)
    // ops' second sums (has_second): keys2 and values2 as keys and values, aux[role] as factors
    float *keys2, *values2, *aux[2];
    int second;         // either role has a second sum
    int all_weights;    // the values' post reads every token's weight (MirrorOps.all_weights)
    int value_rows;     // rows a token in values: 1, or 2 with a correction row after each (ops' corrections)
    // Ops whose tokens settle (MirrorOps.settles, KIVI): keys and values above hold the settled forms
    // (count: tokens [0, n) settled and mirrored); these the forms tokens had when appended.
    int settles[2];     // [role]
    int *count_open;    // [layer][role]: tokens [0, n) mirrored as appended
    float *keys_open, *values_open; // as keys and values
} SpanMirror;

// Whether attention over this pool's streams of a role reads every token back whole, in the order
// span_mirror's products follow, or its codec's MirrorOps say how to mirror them: then a span's
// rows read the mirror.
int span_mirror_reads_back(const KVPool *pool, KVRole role);

// Buffers for sequences of `pool`'s shape up to `context` tokens, for the roles that read back (none:
// nothing allocated). -1 when out of memory.
int span_mirror_init(SpanMirror *m, const KVPool *pool, int context);
void span_mirror_free(SpanMirror *m);

// After a span's rows, the first at position `first`, were appended to `seq` at this layer: decodes
// the tokens not yet mirrored (those from `first` on again; a sequence other than the last one, from
// its start); of a role whose tokens settle, those settled.
void span_mirror_update(SpanMirror *m, const KVSeq *seq, int layer, int first, int rope_halves, const float *rope_cos,
                        const float *rope_sin);
// Of the roles whose tokens settle: decodes the tokens appended and not yet mirrored in the form
// they were appended in (from `first` on again, as above), before the step's end settles them.
void span_mirror_update_open(SpanMirror *m, const KVSeq *seq, int layer, int first);
// Whether a span's rows may append and settle one after another and then attend together: every role
// whose tokens settle is mirrored in both forms.
int span_mirror_attends_at_once(const SpanMirror *m, const KVPool *pool);

// The factors and offsets of one role's streams of one layer and head (ops with has_factor, has_offset).
static inline const float *span_mirror_factors(const SpanMirror *m, KVRole role, int layer, int head) {
    return m->factors[role] + ((size_t)layer * m->n_heads + head) * (size_t)m->context;
}

static inline const float *span_mirror_offsets(const SpanMirror *m, KVRole role, int layer, int head) {
    return m->offsets[role] + ((size_t)layer * m->n_heads + head) * (size_t)m->context;
}

static inline const float *span_mirror_aux(const SpanMirror *m, KVRole role, int layer, int head) {
    return m->aux[role] + ((size_t)layer * m->n_heads + head) * (size_t)m->context;
}

// The mirrored keys (transposed, in panels) and values of one layer and head.
static inline const float *span_mirror_keys(const SpanMirror *m, int layer, int head) {
    return m->keys + ((size_t)layer * m->n_heads + head) * m->key_floats;
}
static inline const float *span_mirror_values(const SpanMirror *m, int layer, int head) {
    return m->values + ((size_t)layer * m->n_heads + head) * m->head_dim * (size_t)m->context * m->value_rows;
}
// The open forms of one layer and head (settles).
static inline const float *span_mirror_keys_open(const SpanMirror *m, int layer, int head) {
    return m->keys_open + ((size_t)layer * m->n_heads + head) * m->key_floats;
}
static inline const float *span_mirror_values_open(const SpanMirror *m, int layer, int head) {
    return m->values_open + ((size_t)layer * m->n_heads + head) * m->head_dim * (size_t)m->context;
}
// The same of the second sums.
static inline const float *span_mirror_keys2(const SpanMirror *m, int layer, int head) {
    return m->keys2 + ((size_t)layer * m->n_heads + head) * m->key_floats;
}
static inline const float *span_mirror_values2(const SpanMirror *m, int layer, int head) {
    return m->values2 + ((size_t)layer * m->n_heads + head) * m->head_dim * (size_t)m->context;
}

#endif
