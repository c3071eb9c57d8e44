#include "calibrate.h"
#include "value_outliers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codebook.h"
#include "gpt.h"

// What the backward hook fills while the sequences run.
typedef struct {
    int seq, n_seq, T, C, hd, np;
    const uint32_t *percents;
    float *keys;   // [L][n_seq·T][C] pre-RoPE keys (thresholds need every number of a channel)
    float *kgrad2; // [L][n_seq·T][C] their squared gradients
    NormHist *vhist; // [L][np] values: normalised per vector as they arrive
    double value_out[KVQ_MAX_PERCENTS], value_total;
    float *stream_max;     // [L][KvqStream] the output's maxima, raised as the sequences run
    float *scratch;        // [hd]
    unsigned char *flags;  // [hd]
} Gather;

void calib_key_thresholds(float *sorted, size_t n, uint32_t percent_hundredths, float *lo, float *hi) {
    // round(n·P/200) with P = hundredths/100: (n·hundredths + 10000) / 20000 in integers
    size_t m = (size_t)(((unsigned long long)n * percent_hundredths + 10000) / 20000);
    if (m > (n - 1) / 2) m = (n - 1) / 2;
    *lo = sorted[m];
    *hi = sorted[n - 1 - m];
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void add_value_vectors(Gather *g, int l, const float *v, const float *dv, int rows, int heads) {
    unsigned char *out = g->flags;
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < heads; h++) {
            const float *x = v + ((size_t)r * heads + h) * g->hd, *d = dv + ((size_t)r * heads + h) * g->hd;
            for (int pi = 0; pi < g->np; pi++) {
                g->value_out[pi] += calib_value_outliers(x, g->hd, g->percents[pi], out, g->scratch);
                float lo = INFINITY, hi = -INFINITY;
                for (int i = 0; i < g->hd; i++)
                    if (!out[i]) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
                double z = 0.5 * ((double)hi + lo), rr = 0.5 * ((double)hi - lo);
                if (!(rr > 0)) continue; // a constant vector: any signpost reconstructs it exactly
                for (int i = 0; i < g->hd; i++)
                    if (!out[i]) normhist_add(&g->vhist[l * g->np + pi], (x[i] - z) / rr, (double)d[i] * d[i]);
            }
            g->value_total += g->hd;
        }
}

// Raises *m to the largest magnitude of x[n].
static void raise_max(float *m, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) *m = fmaxf(*m, fabsf(x[i]));
}

static void on_layer_grads(void *ctx, const TrainNet *n, int l) {
    Gather *g = ctx;
    size_t rows = (size_t)g->T, at = ((size_t)l * g->n_seq + (size_t)g->seq) * rows * g->C;
    train_net_keys_pre_rope(n, l, g->keys + at);
    for (size_t i = 0; i < rows * g->C; i++) g->kgrad2[at + i] = n->a.dk[i] * n->a.dk[i];
    size_t off = (size_t)l * rows * g->C; // this layer's keys and values in the forward's activations (B = 1)
    // The maxima of what each stream's codec is given: keys after RoPE by default (the forward's),
    // before RoPE under the prerope transform, values.
    float *mx = g->stream_max + (size_t)l * KVQ_N_MAX;
    raise_max(&mx[KVQ_MAX_KEY], n->a.k + off, rows * g->C);
    raise_max(&mx[KVQ_MAX_KEY_PREROPE], g->keys + at, rows * g->C);
    raise_max(&mx[KVQ_MAX_VALUE], n->a.v + off, rows * g->C);
    add_value_vectors(g, l, n->a.v + off, n->a.dv, g->T, g->C / g->hd);
}

// One layer's keys: per channel, the thresholds at every percent (from the sorted column), then each
// inlier normalised by its channel's (lo, hi) into that percent's histogram.
static int key_layer(const Gather *g, int l, Kvq *out, NormHist *hist, double *outliers) {
    size_t M = (size_t)g->n_seq * g->T, C = (size_t)g->C;
    const float *keys = g->keys + (size_t)l * M * C, *w = g->kgrad2 + (size_t)l * M * C;
    float *col = malloc(sizeof(float) * M);
    if (!col) return -1;
    for (size_t c = 0; c < C; c++) {
        for (size_t i = 0; i < M; i++) col[i] = keys[i * C + c];
        qsort(col, M, sizeof(float), cmp_float);
        for (int pi = 0; pi < g->np; pi++) {
            float *r = kvq_key_range_mut(out, l, pi, (int)c);
            calib_key_thresholds(col, M, g->percents[pi], &r[0], &r[1]);
            double z = 0.5 * ((double)r[1] + r[0]), rr = 0.5 * ((double)r[1] - r[0]);
            for (size_t i = 0; i < M; i++) {
                float x = keys[i * C + c];
                if (x < r[0] || x > r[1]) {
                    outliers[pi] += 1;
                    continue;
                }
                if (rr > 0) normhist_add(&hist[pi], (x - z) / rr, w[i * C + c]);
            }
        }
    }
    free(col);
    return 0;
}

static int fit_codebooks(Kvq *out, int l, KvqRole role, const NormHist *hist) {
    for (int pi = 0; pi < out->n_percents; pi++)
        for (int bi = 0; bi < out->n_bits; bi++)
            if (codebook_fit(&hist[pi], (int)out->bits[bi], kvq_codebook_mut(out, l, role, bi, pi, KVQ_PLAIN),
                             kvq_codebook_mut(out, l, role, bi, pi, KVQ_QNORM)))
                return -1;
    return 0;
}

int calibrate_model(Model *m, const int *inputs, const int *targets, int n_seq, int len, const CalibSettings *s,
                    Kvq *out, CalibSummary *summary, char *err, size_t errlen) {
    const ModelConfig *c = &m->config;
    int L = c->n_layers, np = s->n_percents;
    if (c->latent_dim > 0) {
        snprintf(err, errlen, "calibration reads keys and values of multi-head or grouped-query models only");
        return -1;
    }
    if (kvq_init(out, L, c->n_kv_heads, c->head_dim, s->percents, np, s->bits, s->n_bits, err, errlen)) return -1;
    out->model_checksum = kvq_model_checksum(m);
    out->sequences = (uint32_t)n_seq, out->length = (uint32_t)len;
    Gather g = {.n_seq = n_seq, .T = len, .C = c->n_kv_heads * c->head_dim, .hd = c->head_dim, .np = np,
                .percents = s->percents, .stream_max = out->stream_max};
    size_t per = (size_t)L * n_seq * len * g.C;
    // Keys and their weights stay in memory until every sequence has run (a channel's thresholds need
    // all of its numbers): 8 bytes a number, 200 MB for micro's 16 x 2048 tokens.
    if (per > CALIB_MAX_KEY_NUMBERS) {
        kvq_free(out);
        snprintf(err, errlen, "%d sequences of %d tokens would keep %.1f GB of keys in memory (at most %.1f GB)", n_seq,
                 len, 8e-9 * (double)per, 8e-9 * (double)CALIB_MAX_KEY_NUMBERS);
        return -1;
    }
    TrainNet net = {0};
    int net_ok = 0, status = -1;
    double loss = 0, key_out[KVQ_MAX_PERCENTS] = {0};
    NormHist *khist = calloc((size_t)np, sizeof(NormHist));
    g.keys = malloc(sizeof(float) * per);
    g.kgrad2 = malloc(sizeof(float) * per);
    g.vhist = calloc((size_t)L * np, sizeof(NormHist));
    g.scratch = malloc(sizeof(float) * (size_t)g.hd);
    g.flags = malloc((size_t)g.hd);
    if (!khist || !g.keys || !g.kgrad2 || !g.vhist || !g.scratch || !g.flags) goto oom;
    for (int i = 0; i < L * np; i++)
        if (normhist_init(&g.vhist[i])) goto oom;
    for (int i = 0; i < np; i++)
        if (normhist_init(&khist[i])) goto oom;
    // One sequence at a time (B = 1): the activations of 16 × 2048 tokens at once would take a
    // gigabyte, and each sequence's gradient is then that of its own mean loss, the same scale for all.
    // Only the activations' gradients: no parameter's is read, and at a large vocabulary the
    // classifier's [tokens, vocab] probabilities are never held (train_net_init_grads).
    if (train_net_init_grads(&net, m, 1, len, s->threads, TRAIN_GRADS_INPUTS, err, errlen)) goto done;
    net_ok = 1;
    net.layer_grad_hook = on_layer_grads;
    net.hook_ctx = &g;
    for (g.seq = 0; g.seq < n_seq; g.seq++) {
        loss += train_net_forward(&net, inputs + (size_t)g.seq * len, targets + (size_t)g.seq * len);
        train_net_zero_grad(&net);
        train_net_backward(&net);
    }
    train_net_free(&net);
    net_ok = 0;
    for (int l = 0; l < L; l++) {
        for (int pi = 0; pi < np; pi++) normhist_free(&khist[pi]);
        for (int pi = 0; pi < np; pi++)
            if (normhist_init(&khist[pi])) goto oom;
        if (key_layer(&g, l, out, khist, key_out) || fit_codebooks(out, l, KVQ_KEY, khist) ||
            fit_codebooks(out, l, KVQ_VALUE, g.vhist + (size_t)l * np))
            goto oom;
    }
    if (summary) {
        summary->mean_loss = loss / n_seq;
        for (int pi = 0; pi < np; pi++) {
            summary->key_outliers[pi] = key_out[pi] / (double)per;
            summary->value_outliers[pi] = g.value_total > 0 ? g.value_out[pi] / g.value_total : 0;
        }
    }
    status = 0;
    goto done;
oom:
    snprintf(err, errlen, "out of memory for calibration (%d sequences of %d tokens)", n_seq, len);
done:
    if (net_ok) train_net_free(&net);
    if (g.vhist)
        for (int i = 0; i < L * np; i++) normhist_free(&g.vhist[i]);
    if (khist)
        for (int i = 0; i < np; i++) normhist_free(&khist[i]);
    free(khist), free(g.keys), free(g.kgrad2), free(g.vhist), free(g.scratch), free(g.flags);
    if (status) kvq_free(out);
    return status;
}
