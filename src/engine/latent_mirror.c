// Latent attention's decoded cache for the fast evaluator (latent_mirror.h).
#include "latent_mirror.h"

#include <stdlib.h>
#include <string.h>

#include "calloc_lines.h"

// Whether a slot's scores sum as a read back does: read back (the codec says so), or the float
// codec's key mirror, which reads x̂ itself and has neither query transform nor factor, and sums in
// order of d a form that never changes.
static int scores_read_back(const KVStream *rule, const MirrorOps **ops) {
    const CodecOps *o = rule->ops;
    *ops = NULL;
    if (o->reads_back || (o->by_read && (o->by_read(rule->state) & CODEC_SCORES_BY_READ))) return 1;
    const MirrorOps *k = o->key_mirror ? o->key_mirror(rule->state) : NULL;
    if (k && !k->query && !k->has_factor && !k->has_offset && !k->fix_scores && !k->has_second && !k->settles &&
        k->settled_key_sum == MIRROR_KEYS_IN_ORDER)
        *ops = k;
    return *ops != NULL;
}

static int mix_read_back(const KVStream *rule) {
    const CodecOps *o = rule->ops;
    return o->reads_back || (o->by_read && (o->by_read(rule->state) & CODEC_MIX_BY_READ));
}

int latent_mirror_init(LatentMirror *m, const KVPool *pool, int context) {
    memset(m, 0, sizeof *m);
    m->n_layers = pool->n_layers, m->latent = pool->layout.head_dim[0], m->rope = pool->layout.head_dim[1];
    m->context = context;
    for (int s = 0; s < 2; s++) m->scores[s] = scores_read_back(&pool->rule[s], &m->ops[s]);
    // The latent's rows come from its codec's read; a key mirror's read is the same x̂ (float's).
    m->mix = mix_read_back(&pool->rule[0]);
    m->needed[0] = m->scores[0] || m->mix, m->needed[1] = m->scores[1];
    for (int s = 0; s < 2; s++) m->settles[s] = pool->rule[s].ops->settle != NULL;
    const size_t L = (size_t)m->n_layers;
    int failed = !(m->count = calloc(L * 2, sizeof(int))) || !(m->final = calloc(L * 2, sizeof(int)));
    if (m->scores[0]) failed |= !(m->latent_t = calloc_lines(L * key_panel_floats(m->latent, context), sizeof(float)));
    if (m->mix) failed |= !(m->latent_rows = calloc_lines(L * m->latent * (size_t)context, sizeof(float)));
    if (m->scores[1]) failed |= !(m->rope_t = calloc_lines(L * key_panel_floats(m->rope, context), sizeof(float)));
    if (failed) {
        latent_mirror_free(m);
        return -1;
    }
    return 0;
}

void latent_mirror_free(LatentMirror *m) {
    free(m->count);
    free(m->final);
    free(m->latent_t);
    free(m->latent_rows);
    free(m->rope_t);
    memset(m, 0, sizeof *m);
}

// Token j of one slot, decoded into its mirrors.
static void read_token(LatentMirror *m, const PagedStream *ps, int slot, int layer, int j) {
    const int w = slot ? m->rope : m->latent;
    float x[MICRO_MAX_WIDTH];
    if (m->ops[slot]) {
        const KVStream *blk = &ps->blocks[j / ps->blocks[0].capacity];
        float factor = 1.0f, offset = 0.0f;
        m->ops[slot]->read(blk->state, 0, j % blk->capacity, x, &factor, &offset);
    } else {
        paged_read(ps, 0, j, x);
    }
    if (m->scores[slot]) {
        float *t = (float *)(slot ? latent_mirror_rope_t(m, layer) : latent_mirror_latent_t(m, layer));
        for (int d = 0; d < w; d++) t[key_panel_at(w, d, j)] = x[d];
    }
    if (!slot && m->mix) memcpy((float *)latent_mirror_rows(m, layer) + (size_t)j * w, x, sizeof(float) * (size_t)w);
}

void latent_mirror_update(LatentMirror *m, const KVSeq *seq, int layer, int first) {
    if (m->seq != seq) {
        m->seq = seq;
        memset(m->count, 0, sizeof(int) * (size_t)m->n_layers * 2);
        memset(m->final, 0, sizeof(int) * (size_t)m->n_layers * 2);
    }
    for (int s = 0; s < 2; s++) {
        if (!m->needed[s]) continue;
        const PagedStream *ps = s ? &seq->v[layer] : &seq->k[layer];
        int *done = &m->count[layer * 2 + s], *fin = &m->final[layer * 2 + s];
        *done = *done < first ? *done : first;
        *fin = *fin < *done ? *fin : *done;
        for (; *done < ps->length; (*done)++) read_token(m, ps, s, layer, *done);
    }
}

void latent_mirror_settle(LatentMirror *m, const KVSeq *seq, int layer) {
    for (int s = 0; s < 2; s++) {
        if (!m->needed[s] || !m->settles[s]) continue;
        const PagedStream *ps = s ? &seq->v[layer] : &seq->k[layer];
        int *fin = &m->final[layer * 2 + s];
        for (; *fin < ps->settled; (*fin)++) read_token(m, ps, s, layer, *fin);
    }
}
