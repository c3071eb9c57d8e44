// The fast evaluator's decoded copy of a sequence's cache (span_mirror.h).
#include "span_mirror.h"

#include <stdlib.h>
#include <string.h>

#include "calloc_lines.h"
#include "rope.h"

// The codec's MirrorOps for a role's streams (NULL: none).
static const MirrorOps *mirror_ops(const KVStream *rule, KVRole role) {
    const CodecOps *ops = rule->ops;
    if (role == KV_ROLE_KEY) return ops->key_mirror ? ops->key_mirror(rule->state) : NULL;
    return ops->value_mirror ? ops->value_mirror(rule->state) : NULL;
}

// Whether a role's streams are read back whole: the codec says so, or keys kept before RoPE, which
// are read back and rotated (paged_scores_rope) whatever their codec.
static int read_whole(const KVStream *rule, KVRole role) {
    return rule->ops->reads_back || (role == KV_ROLE_KEY && rule->prerope);
}

int span_mirror_reads_back(const KVPool *pool, KVRole role) {
    const KVStream *rule = &pool->rule[role];
    return read_whole(rule, role) || mirror_ops(rule, role);
}

int span_mirror_init(SpanMirror *m, const KVPool *pool, int context) {
    memset(m, 0, sizeof *m);
    // Multi-head and grouped-query caches only (keys and values alike): latent attention has no mirror.
    m->n_layers = pool->n_layers, m->n_heads = pool->layout.n_heads[0], m->head_dim = pool->layout.head_dim[0];
    m->context = context;
    m->key_floats = key_panel_floats(m->head_dim, context);
    const size_t heads = (size_t)m->n_layers * m->n_heads * m->head_dim, key_heads = (size_t)m->n_layers * m->n_heads;
    const size_t tokens = (size_t)m->n_layers * m->n_heads * (size_t)context;
    m->count = calloc((size_t)m->n_layers * 2, sizeof(int));
    int failed = !m->count;
    for (int r = 0; r < 2; r++) {
        const KVStream *rule = &pool->rule[r];
        const int whole = read_whole(rule, (KVRole)r);
        m->ops[r] = whole ? NULL : mirror_ops(rule, (KVRole)r), m->rule[r] = rule->state;
        const MirrorOps *o = m->ops[r];
        if (o && o->corrections && (o->has_second || o->split_mix))
            m->ops[r] = NULL; // one scratch of weights (BatchForward's att2) for one of them
        if (o && o->all_weights && (o->corrections || o->has_second)) m->ops[r] = NULL; // the same
        // Settling forms are of the plain sums alone (kvcache.h), and values within a split's chains.
        if (o && o->settles &&
            (o->query || o->post || o->fix_scores || o->first || o->all_weights || o->corrections || o->has_second ||
             o->has_factor || o->has_offset || (r == KV_ROLE_VALUE && (!o->split_mix || m->head_dim > 64))))
            m->ops[r] = NULL;
        m->settles[r] = m->ops[r] && m->ops[r]->settles;
        m->all_weights |= m->ops[r] && m->ops[r]->all_weights;
        m->mirrored[r] = whole || m->ops[r];
        if (m->ops[r] && m->ops[r]->has_factor) failed |= !(m->factors[r] = calloc_lines(tokens, sizeof(float)));
        if (m->ops[r] && m->ops[r]->has_offset) failed |= !(m->offsets[r] = calloc_lines(tokens, sizeof(float)));
        if (m->ops[r] && m->ops[r]->has_second) {
            m->second = 1;
            failed |= !(m->aux[r] = calloc_lines(tokens, sizeof(float)));
            if (r == KV_ROLE_KEY) failed |= !(m->keys2 = calloc_lines(key_heads * m->key_floats, sizeof(float)));
            if (r == KV_ROLE_VALUE) failed |= !(m->values2 = calloc_lines(heads * (size_t)context, sizeof(float)));
        }
    }
    // calloc_lines: in 2 MiB pages where they are big (faulting a 6 MB mirror in by 4 KiB pages showed).
    if (m->mirrored[KV_ROLE_KEY]) failed |= !(m->keys = calloc_lines(key_heads * m->key_floats, sizeof(float)));
    m->value_rows = m->ops[KV_ROLE_VALUE] && m->ops[KV_ROLE_VALUE]->corrections ? 2 : 1;
    if (m->mirrored[KV_ROLE_VALUE])
        failed |= !(m->values = calloc_lines(heads * (size_t)context * m->value_rows, sizeof(float)));
    if (m->settles[KV_ROLE_KEY] || m->settles[KV_ROLE_VALUE])
        failed |= !(m->count_open = calloc((size_t)m->n_layers * 2, sizeof(int)));
    if (m->settles[KV_ROLE_KEY]) failed |= !(m->keys_open = calloc_lines(key_heads * m->key_floats, sizeof(float)));
    if (m->settles[KV_ROLE_VALUE]) failed |= !(m->values_open = calloc_lines(heads * (size_t)context, sizeof(float)));
    if (failed) {
        span_mirror_free(m);
        return -1;
    }
    return 0;
}

void span_mirror_free(SpanMirror *m) {
    free(m->count);
    free(m->keys);
    free(m->values);
    for (int r = 0; r < 2; r++) free(m->factors[r]), free(m->offsets[r]), free(m->aux[r]);
    free(m->keys2);
    free(m->values2);
    free(m->count_open);
    free(m->keys_open);
    free(m->values_open);
    memset(m, 0, sizeof *m);
}

int span_mirror_attends_at_once(const SpanMirror *m, const KVPool *pool) {
    for (int r = 0; r < 2; r++)
        if (pool->rule[r].ops->settle && !m->settles[r]) return 0;
    return 1;
}

// Token j of one stream, every head, decoded: keys into their channel rows (rotated at position j
// when kept before RoPE, as paged_scores_rope rotates them), values as a row; or x̃ and its factor
// as the role's MirrorOps say.
static void read_token(SpanMirror *m, const PagedStream *ps, KVRole role, int layer, int j, int rope_halves, const float *rope_cos,
                       const float *rope_sin, int open) {
    const int hd = m->head_dim, half = hd / 2;
    const MirrorOps *ops = m->ops[role];
    const KVStream *blk = &ps->blocks[j / ps->blocks[0].capacity];
    float x[MICRO_MAX_WIDTH];
    for (int h = 0; h < m->n_heads; h++) {
        float *row = x;
        if (role == KV_ROLE_VALUE) // (a role not mirrored has no buffer to point into)
            row = (float *)(open ? span_mirror_values_open(m, layer, h) : span_mirror_values(m, layer, h)) +
                  (size_t)j * m->value_rows * hd;
        if (ops) {
            float factor = 1.0f, offset = 0.0f;
            ops->read(blk->state, h, j % blk->capacity, row, &factor, &offset);
            if (m->factors[role]) ((float *)span_mirror_factors(m, role, layer, h))[j] = factor;
            if (m->offsets[role]) ((float *)span_mirror_offsets(m, role, layer, h))[j] = offset;
            if (role == KV_ROLE_VALUE && ops->corrections) ops->read_correction(blk->state, h, j % blk->capacity, row + hd);
            if (ops->has_second) {
                float x2[MICRO_MAX_WIDTH], aux = 0.0f;
                ops->read2(blk->state, h, j % blk->capacity, x2, &aux);
                ((float *)span_mirror_aux(m, role, layer, h))[j] = aux;
                if (role == KV_ROLE_VALUE)
                    memcpy((float *)span_mirror_values2(m, layer, h) + (size_t)j * hd, x2, sizeof(float) * (size_t)hd);
                else
                    for (int d = 0; d < hd; d++) ((float *)span_mirror_keys2(m, layer, h))[key_panel_at(hd, d, j)] = x2[d];
            }
        } else {
            paged_read(ps, h, j, row);
            if (role == KV_ROLE_KEY && ps->blocks[0].prerope)
                rope_head(x, hd, rope_halves, rope_cos + (size_t)j * half, rope_sin + (size_t)j * half);
        }
        if (role == KV_ROLE_VALUE) continue;
        float *kt = (float *)(open ? span_mirror_keys_open(m, layer, h) : span_mirror_keys(m, layer, h));
        for (int d = 0; d < hd; d++) kt[key_panel_at(hd, d, j)] = x[d];
    }
}

// A sequence other than the one mirrored: every count from its start.
static void mirror_sequence(SpanMirror *m, const KVSeq *seq) {
    if (m->seq == seq) return;
    m->seq = seq;
    memset(m->count, 0, sizeof(int) * (size_t)m->n_layers * 2);
    if (m->count_open) memset(m->count_open, 0, sizeof(int) * (size_t)m->n_layers * 2);
}

void span_mirror_update(SpanMirror *m, const KVSeq *seq, int layer, int first, int rope_halves, const float *rope_cos,
                        const float *rope_sin) {
    mirror_sequence(m, seq);
    for (int r = 0; r < 2; r++) {
        if (!m->mirrored[r]) continue;
        const PagedStream *ps = r == KV_ROLE_KEY ? &seq->k[layer] : &seq->v[layer];
        int *done = &m->count[layer * 2 + r];
        *done = *done < first ? *done : first;
        for (const int end = m->settles[r] ? ps->settled : ps->length; *done < end; (*done)++)
            read_token(m, ps, (KVRole)r, layer, *done, rope_halves, rope_cos, rope_sin, 0);
    }
}

void span_mirror_update_open(SpanMirror *m, const KVSeq *seq, int layer, int first) {
    mirror_sequence(m, seq);
    for (int r = 0; r < 2; r++) {
        if (!m->settles[r]) continue;
        const PagedStream *ps = r == KV_ROLE_KEY ? &seq->k[layer] : &seq->v[layer];
        int *done = &m->count_open[layer * 2 + r];
        *done = *done < first ? *done : first;
        for (; *done < ps->length; (*done)++) read_token(m, ps, (KVRole)r, layer, *done, 0, NULL, NULL, 1);
    }
}
