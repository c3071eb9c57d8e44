// micro bench --batch's floor: what a batched decode step would take if no read of the cache waited
// on DRAM. A step is the work every row does whatever its cache (weight products, norms, the
// classifier) plus attention over the cache, which costs a fixed time per (head, cached token) when
// the bytes are at hand. Both are measured here, in the same run as the step they bound:
//   - attention per head and token: every head of one conversation's cache of up to 1,024 tokens,
//     one layer at a time (a layer's blocks fit in L2), through the step's own attention_heads
//     (or attention_head head by head, as the step runs a cache of grouped queries or of keys
//     rotated as read; attention_latent_head under latent attention), after a pass that brings the
//     blocks in: the kernels' own speed;
//   - the rest of the step: the same conversations decoded at a few positions, less their (small)
//     attention at that cost.
// A cache whose floor lies above its roofline time is held back by its kernels, not by DRAM: no
// prefetching makes it faster than its floor.
#include "bench_floor.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "kvpool.h"
#include "membw.h"

// Fills a sequence of `pool` with the recording's first n tokens. 0, or -1 with err set.
static int fill_recording(KVSeq *seq, const KVRecording *rec, int n, char *err, size_t errlen) {
    for (int t = 0; t < n; t++) {
        if (kvseq_reserve(seq, t + 1, err, errlen)) return -1;
        for (int l = 0; l < rec->n_layers; l++) {
            const size_t row = (size_t)t * rec->n_layers + l;
            kvseq_append(seq, l, rec->k + row * rec->k_dim, rec->v + row * rec->v_dim);
            kvseq_end_step(seq, l);
        }
    }
    return 0;
}

// One layer's queries: for multi-head and grouped-query attention, the keys each head's stream was
// given last; for latent attention, a latent-width slice of the last latent with the last RoPE key
// after it (vectors of the model's own scale: the numbers do not matter, the kernels' time does).
static void layer_queries(const ModelConfig *c, const KVRecording *rec, int n, int l, float *q) {
    const int H = c->n_heads, hd = c->head_dim, L = c->n_layers;
    const size_t row = (size_t)(n - 1) * L + l;
    if (c->latent_dim > 0) {
        for (int i = 0; i < model_qk_dim(c); i++)
            q[i] = i < hd ? rec->k[row * rec->k_dim + (size_t)i % (size_t)c->latent_dim]
                          : rec->v[row * rec->v_dim + (size_t)(i - hd)];
        return;
    }
    const int group = c->n_heads / c->n_kv_heads;
    for (int h = 0; h < H; h++)
        memcpy(q + (size_t)h * hd, rec->k + row * rec->k_dim + (size_t)(h / group) * hd, sizeof(float) * (size_t)hd);
}

int attention_in_cache(const Model *m, const KVRecording *rec, const CodecSpec *k_spec, const CodecSpec *v_spec, int block,
                       int repeat, double *seconds, char *err, size_t errlen) {
    const ModelConfig *c = &m->config;
    const int L = c->n_layers, H = c->n_heads, hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    const int lat = c->latent_dim, n = rec->n < 1024 ? rec->n : 1024;
    KVPool pool;
    if (kvpool_init_model(&pool, c, block, c->max_seq_len, SIZE_MAX / 2, k_spec, v_spec, err, errlen))
        return -1;
    KVSeq seq;
    kvseq_init(&seq, &pool);
    BatchForward fwd = {0}; // for its RoPE tables (a cache that keeps keys before RoPE)
    // att: every head's weights (latent attention: one head's and its RoPE scores); scratch: the
    // latent-space query and mix of latent attention.
    const size_t att_n = (size_t)(H > 2 ? H : 2) * n, q_n = (size_t)H * hd > (size_t)model_qk_dim(c) ? (size_t)H * hd : (size_t)model_qk_dim(c);
    float *att = malloc(sizeof(float) * att_n), *out = malloc(sizeof(float) * (size_t)H * hd);
    float *q_all = malloc(sizeof(float) * q_n), *scratch = malloc(sizeof(float) * (2 * (size_t)lat + 1));
    int rc = batch_init(&fwd, m, 1, n > 0 ? n : 1, 1, err, errlen); // tables for the n positions read
    if (!rc && (!att || !out || !q_all || !scratch)) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    if (!rc) rc = fill_recording(&seq, rec, n, err, errlen);
    double total = 0;
    for (int l = 0; l < L && !rc; l++) {
        double best = 0;
        layer_queries(c, rec, n, l, q_all);
        const int together = attention_heads_fit(c, &seq.k[l]); // as the step's rows
        for (int r = 0; r <= repeat; r++) { // pass 0 brings the layer's blocks in
            const double t0 = seconds_now();
            if (lat > 0)
                for (int h = 0; h < H; h++)
                    attention_latent_head(m, l, h, &seq.k[l], &seq.v[l], q_all, scratch, scratch + lat, att, att + n,
                                          out, n);
            else if (together)
                attention_heads(&seq.k[l], &seq.v[l], NULL, NULL, H, q_all, att, (size_t)n, out, n, NULL);
            for (int h = 0; h < H && !together && lat == 0; h++)
                attention_head(&seq.k[l], &seq.v[l], NULL, NULL, h / group, q_all + (size_t)h * hd, m->config.rope_halves, fwd.rope_cos,
                               fwd.rope_sin, att, out, n);
            const double dt = seconds_now() - t0;
            if (r == 1 || (r > 1 && dt < best)) best = dt;
        }
        total += best;
    }
    if (!rc) *seconds = total / ((double)L * H * n);
    if (seq.pool) kvseq_release(&seq);
    kvpool_free(&pool);
    if (fwd.model) batch_free(&fwd);
    free(att), free(out), free(q_all), free(scratch);
    return rc;
}
