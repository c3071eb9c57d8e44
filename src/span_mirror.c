// The fast evaluator's decoded copy of a sequence's cache (span_mirror.h).
#include "span_mirror.h"

#include <stdlib.h>
#include <string.h>

#include "rope.h"

int span_mirror_reads_back(const KVPool *pool, KVRole role) {
    const KVStream *rule = &pool->rule[role];
    // Keys kept before RoPE are read back and rotated (paged_scores_rope), whatever their codec; keys
    // whose codec's scores sum as a read back does give the same bits from the mirror.
    if (rule->ops->reads_back) return 1;
    if (role == KV_ROLE_VALUE) return rule->ops->value_mirror && rule->ops->value_mirror(rule->state);
    return rule->prerope || (rule->ops->key_mirror && rule->ops->key_mirror(rule->state));
}

int span_mirror_init(SpanMirror *m, const KVPool *pool, int context) {
    memset(m, 0, sizeof *m);
    m->n_layers = pool->n_layers, m->n_heads = pool->n_heads, m->head_dim = pool->head_dim, m->context = context;
    m->stride = context + 16;
    for (int r = 0; r < 2; r++) m->mirrored[r] = span_mirror_reads_back(pool, (KVRole)r);
    const KVStream *krule = &pool->rule[KV_ROLE_KEY];
    if (m->mirrored[KV_ROLE_KEY] && !krule->ops->reads_back && !krule->prerope)
        m->key_ops = krule->ops->key_mirror(krule->state), m->key_rule = krule->state;
    const KVStream *vrule = &pool->rule[KV_ROLE_VALUE];
    if (m->mirrored[KV_ROLE_VALUE] && !vrule->ops->reads_back)
        m->value_ops = vrule->ops->value_mirror(vrule->state), m->value_rule = vrule->state;
    const size_t heads = (size_t)m->n_layers * m->n_heads * m->head_dim;
    const size_t per_token = (size_t)m->n_layers * m->n_heads * (size_t)context;
    const int factors = m->key_ops && m->key_ops->has_factor, vfactors = m->value_ops && m->value_ops->has_factor;
    m->count = calloc((size_t)m->n_layers * 2, sizeof(int));
    if (m->count && m->mirrored[KV_ROLE_KEY]) m->keys = malloc(sizeof(float) * heads * (size_t)m->stride);
    if (m->count && factors) m->factors = malloc(sizeof(float) * per_token);
    if (m->count && vfactors) m->value_factors = malloc(sizeof(float) * per_token);
    if (m->count && m->mirrored[KV_ROLE_VALUE]) m->values = malloc(sizeof(float) * heads * (size_t)context);
    if (!m->count || (m->mirrored[KV_ROLE_KEY] && !m->keys) || (factors && !m->factors) ||
        (m->mirrored[KV_ROLE_VALUE] && !m->values) || (vfactors && !m->value_factors)) {
        span_mirror_free(m);
        return -1;
    }
    return 0;
}

void span_mirror_free(SpanMirror *m) {
    free(m->count);
    free(m->keys);
    free(m->factors);
    free(m->values);
    free(m->value_factors);
    memset(m, 0, sizeof *m);
}

// Token j of one stream, every head, decoded: keys into their channel rows (rotated at position j
// when kept before RoPE, as paged_scores_rope rotates them), values as a row.
static void read_token(SpanMirror *m, const PagedStream *ps, KVRole role, int layer, int j, const float *rope_cos,
                       const float *rope_sin) {
    const int hd = m->head_dim, half = hd / 2;
    float x[1024];
    for (int h = 0; h < m->n_heads; h++) {
        if (role == KV_ROLE_VALUE) {
            float *row = (float *)span_mirror_values(m, layer, h) + (size_t)j * hd;
            if (m->value_ops) { // x̃ and the factor, from the token's block
                const KVStream *blk = &ps->blocks[j / ps->blocks[0].capacity];
                float factor = 1.0f;
                m->value_ops->read(blk->state, h, j % blk->capacity, row, &factor);
                if (m->value_factors) ((float *)span_mirror_value_factors(m, layer, h))[j] = factor;
            } else {
                paged_read(ps, h, j, row);
            }
            continue;
        }
        if (m->key_ops) { // x̃ and the factor, from the token's block
            const KVStream *blk = &ps->blocks[j / ps->blocks[0].capacity];
            float factor = 1.0f;
            m->key_ops->read(blk->state, h, j % blk->capacity, x, &factor);
            if (m->factors) ((float *)span_mirror_factors(m, layer, h))[j] = factor;
        } else {
            paged_read(ps, h, j, x);
            if (ps->blocks[0].prerope) rope_head(x, hd, rope_cos + (size_t)j * half, rope_sin + (size_t)j * half);
        }
        float *kt = (float *)span_mirror_keys(m, layer, h);
        for (int d = 0; d < hd; d++) kt[(size_t)d * m->stride + j] = x[d];
    }
}

void span_mirror_update(SpanMirror *m, const KVSeq *seq, int layer, int first, const float *rope_cos,
                        const float *rope_sin) {
    if (m->seq != seq) {
        m->seq = seq;
        memset(m->count, 0, sizeof(int) * (size_t)m->n_layers * 2);
    }
    for (int r = 0; r < 2; r++) {
        if (!m->mirrored[r]) continue;
        const PagedStream *ps = r == KV_ROLE_KEY ? &seq->k[layer] : &seq->v[layer];
        int *done = &m->count[layer * 2 + r];
        *done = *done < first ? *done : first;
        for (; *done < ps->length; (*done)++)
            read_token(m, ps, (KVRole)r, layer, *done, rope_cos, rope_sin);
    }
}
