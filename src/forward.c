// The decode step: one token in, its key and value encoded into the cache, logits out.
// Read decoder_forward top to bottom: it is the path in DESIGN.md, "The line a token travels".
#include "forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "forward_kernels.h"
#include "threadpool.h"

// ---------------------------------------------------------------------------------------------
// Kernels. The hot ones (matvec_rows, scaled_softmax) are in forward_kernels.c, built portable and
// for AVX-512; the build this CPU runs is chosen once.

const ForwardKernels *forward_kernels_simd(void) {
#ifdef MICRO_FORWARD_SIMD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return &forward_kernels_avx512;
#endif
    return NULL;
}

static const ForwardKernels *chosen_kernels;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose_kernels(void) {
    const char *env = getenv("MICRO_PORTABLE");
    int portable = env && *env && strcmp(env, "0") != 0;
    const ForwardKernels *simd = portable ? NULL : forward_kernels_simd();
    chosen_kernels = simd ? simd : &forward_kernels_portable;
}

const ForwardKernels *forward_kernels(void) {
    pthread_once(&chosen_once, choose_kernels);
    return chosen_kernels;
}

static void matvec_rows(float *restrict out, const float *restrict W, const float *restrict x, int n, int r0,
                        int r1) {
    forward_kernels()->matvec_rows(out, W, x, n, r0, r1);
}

// rmsnorm and rope stay here: little work per token, each in a fixed (sequential) order.

static void rmsnorm(float *out, const float *x, const float *gain, int n, float eps) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    // A sum of squares that overflowed makes inv 0 and the output 0, so an overflowing model would
    // give finite nonsense (uniform logits). NaN carries the overflow to the logits, where the
    // commands report it; finite sums are untouched.
    if (isinf(ss)) inv = NAN;
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * gain[i];
}

// Rotates adjacent pairs (2i, 2i+1) of every head of vec by the angles of position pos.
static void rope(float *vec, int n_heads, int head_dim, const float *cos_t, const float *sin_t) {
    for (int h = 0; h < n_heads; h++) {
        float *v = vec + h * head_dim;
        for (int i = 0; i < head_dim / 2; i++) {
            float a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * cos_t[i] - b * sin_t[i];
            v[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
        }
    }
}

void attention_head(const KVStream *ks, const KVStream *vs, int kv_head, const float *q, float *att, float *out,
                    int n) {
    ks->ops->scores(ks->state, kv_head, q, att, n);
    forward_kernels()->scaled_softmax(att, n, 1.0f / sqrtf((float)ks->head_dim));
    vs->ops->mix(vs->state, kv_head, att, out, n);
}

// ---------------------------------------------------------------------------------------------
// Parallel tasks. Each gets the decoder and the layer it works on.

typedef struct {
    Decoder *d;
    int layer;
    int n_pos; // tokens in the cache, this one included
} StepCtx;

static void task_qkv(void *arg, int t, int nt) {
    StepCtx *c = arg;
    const ModelConfig *p = &c->d->model->config;
    const ModelWeights *w = &c->d->model->w;
    int qd = p->n_heads * p->head_dim, kvd = p->n_kv_heads * p->head_dim;
    size_t l = (size_t)c->layer;
    int b, e;
    // One row range over the stacked [q; k; v] outputs keeps both threads equally busy.
    pool_share(qd + 2 * kvd, t, nt, &b, &e);
    int qb = b < qd ? b : qd, qe = e < qd ? e : qd;
    matvec_rows(c->d->q, w->wq + l * qd * p->dim, c->d->xb, p->dim, qb, qe);
    int kb = b - qd, ke = e - qd;
    kb = kb < 0 ? 0 : kb > kvd ? kvd : kb;
    ke = ke < 0 ? 0 : ke > kvd ? kvd : ke;
    matvec_rows(c->d->k, w->wk + l * kvd * p->dim, c->d->xb, p->dim, kb, ke);
    int vb = b - qd - kvd, ve = e - qd - kvd;
    vb = vb < 0 ? 0 : vb;
    ve = ve < 0 ? 0 : ve;
    matvec_rows(c->d->v, w->wv + l * kvd * p->dim, c->d->xb, p->dim, vb, ve);
}

static void task_attention(void *arg, int t, int nt) {
    StepCtx *c = arg;
    Decoder *d = c->d;
    const ModelConfig *p = &d->model->config;
    const KVStream *ks = &d->cache.k[c->layer], *vs = &d->cache.v[c->layer];
    int group = p->n_heads / p->n_kv_heads, hd = p->head_dim;
    int b, e;
    pool_share(p->n_heads, t, nt, &b, &e);
    for (int h = b; h < e; h++) {
        float *att = d->att + (size_t)h * d->capacity;
        attention_head(ks, vs, h / group, d->q + h * hd, att, d->xb2 + h * hd, c->n_pos);
        // Which position this head attends to most: the evaluator's measure of whether quantised keys
        // still pick out the right tokens. The first of equal weights wins, so it is well defined.
        int top = 0;
        for (int j = 1; j < c->n_pos; j++) top = att[j] > att[top] ? j : top;
        d->top_position[c->layer * p->n_heads + h] = top;
    }
}

// x += Wo · xb2 for this thread's rows.
static void task_wo(void *arg, int t, int nt) {
    StepCtx *c = arg;
    const ModelConfig *p = &c->d->model->config;
    int qd = p->n_heads * p->head_dim, b, e;
    pool_share(p->dim, t, nt, &b, &e);
    float *out = c->d->hb; // free until the FFN
    matvec_rows(out, c->d->model->w.wo + (size_t)c->layer * p->dim * qd, c->d->xb2, qd, b, e);
    for (int i = b; i < e; i++) c->d->x[i] += out[i];
}

// hb = silu(W1 h) * (W3 h) for this thread's hidden units.
static void task_w1w3(void *arg, int t, int nt) {
    StepCtx *c = arg;
    const ModelConfig *p = &c->d->model->config;
    size_t off = (size_t)c->layer * p->hidden_dim * p->dim;
    int b, e;
    pool_share(p->hidden_dim, t, nt, &b, &e);
    matvec_rows(c->d->hb, c->d->model->w.w1 + off, c->d->xb, p->dim, b, e);
    matvec_rows(c->d->hb2, c->d->model->w.w3 + off, c->d->xb, p->dim, b, e);
    for (int i = b; i < e; i++) {
        float g = c->d->hb[i];
        c->d->hb[i] = g / (1.0f + expf(-g)) * c->d->hb2[i];
    }
}

// x += W2 · hb for this thread's rows.
static void task_w2(void *arg, int t, int nt) {
    StepCtx *c = arg;
    const ModelConfig *p = &c->d->model->config;
    int b, e;
    pool_share(p->dim, t, nt, &b, &e);
    matvec_rows(c->d->xb2, c->d->model->w.w2 + (size_t)c->layer * p->dim * p->hidden_dim, c->d->hb,
                p->hidden_dim, b, e);
    for (int i = b; i < e; i++) c->d->x[i] += c->d->xb2[i];
}

static void task_classifier(void *arg, int t, int nt) {
    StepCtx *c = arg;
    const ModelConfig *p = &c->d->model->config;
    int b, e;
    pool_share(p->vocab_size, t, nt, &b, &e);
    matvec_rows(c->d->logits, c->d->model->w.token_embedding, c->d->xb, p->dim, b, e);
}

// ---------------------------------------------------------------------------------------------

float *decoder_forward(Decoder *d, int token, int pos) {
    const ModelConfig *p = &d->model->config;
    const ModelWeights *w = &d->model->w;
    int dim = p->dim, half = p->head_dim / 2;
    StepCtx c = {d, 0, pos + 1};

    memcpy(d->x, w->token_embedding + (size_t)token * dim, sizeof(float) * (size_t)dim);
    for (int l = 0; l < p->n_layers; l++) {
        c.layer = l;
        rmsnorm(d->xb, d->x, w->attn_norm + (size_t)l * dim, dim, p->norm_eps);
        pool_run(d->pool, task_qkv, &c);
        rope(d->q, p->n_heads, p->head_dim, d->rope_cos + (size_t)pos * half, d->rope_sin + (size_t)pos * half);
        rope(d->k, p->n_kv_heads, p->head_dim, d->rope_cos + (size_t)pos * half, d->rope_sin + (size_t)pos * half);
        // The codec encodes here, once; attention below reads only what it stored.
        kvstream_append(&d->cache.k[l], d->k);
        kvstream_append(&d->cache.v[l], d->v);
        pool_run(d->pool, task_attention, &c);
        if (d->cache.k[l].ops->end_step) d->cache.k[l].ops->end_step(d->cache.k[l].state);
        if (d->cache.v[l].ops->end_step) d->cache.v[l].ops->end_step(d->cache.v[l].state);
        pool_run(d->pool, task_wo, &c);
        rmsnorm(d->xb, d->x, w->ffn_norm + (size_t)l * dim, dim, p->norm_eps);
        pool_run(d->pool, task_w1w3, &c);
        pool_run(d->pool, task_w2, &c);
    }
    rmsnorm(d->xb, d->x, w->final_norm, dim, p->norm_eps);
    pool_run(d->pool, task_classifier, &c);
    return d->logits;
}

// ---------------------------------------------------------------------------------------------

int decoder_init(Decoder *d, const Model *m, const char *k_spec, const char *v_spec, int capacity,
                 int n_threads, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    const ModelConfig *p = &m->config;
    if (capacity < 1 || capacity > p->max_seq_len) {
        snprintf(err, errlen, "cache capacity %d is outside 1..%d (the model's context)", capacity, p->max_seq_len);
        return -1;
    }
    if (n_threads < 1 || n_threads > 256) {
        snprintf(err, errlen, "thread count %d is outside 1..256", n_threads);
        return -1;
    }
    d->model = m;
    d->capacity = capacity;
    d->n_threads = n_threads;
    if (kvcache_init(&d->cache, p->n_layers, p->n_kv_heads, p->head_dim, capacity, k_spec, v_spec,
                     err, errlen))
        return -1;
    size_t qd = (size_t)p->n_heads * p->head_dim, kvd = (size_t)p->n_kv_heads * p->head_dim;
    size_t half = (size_t)p->head_dim / 2;
    d->x = calloc((size_t)p->dim, sizeof(float));
    d->xb = calloc((size_t)p->dim, sizeof(float));
    d->xb2 = calloc(qd > (size_t)p->dim ? qd : (size_t)p->dim, sizeof(float));
    d->q = calloc(qd, sizeof(float));
    d->k = calloc(kvd, sizeof(float));
    d->v = calloc(kvd, sizeof(float));
    size_t hid = (size_t)p->hidden_dim > (size_t)p->dim ? (size_t)p->hidden_dim : (size_t)p->dim;
    d->hb = calloc(hid, sizeof(float));
    d->hb2 = calloc(hid, sizeof(float));
    d->att = calloc((size_t)p->n_heads * capacity, sizeof(float));
    d->logits = calloc((size_t)p->vocab_size, sizeof(float));
    d->top_position = calloc((size_t)p->n_layers * p->n_heads, sizeof(int));
    d->rope_cos = calloc((size_t)capacity * half, sizeof(float));
    d->rope_sin = calloc((size_t)capacity * half, sizeof(float));
    d->pool = pool_create(n_threads);
    if (!d->x || !d->xb || !d->xb2 || !d->q || !d->k || !d->v || !d->hb || !d->hb2 || !d->att ||
        !d->logits || !d->top_position || !d->rope_cos || !d->rope_sin || !d->pool) {
        decoder_free(d);
        snprintf(err, errlen, "out of memory allocating the decoder");
        return -1;
    }
    // Angles in double so the table does not depend on float rounding of large pos * freq products.
    for (int pos = 0; pos < capacity; pos++) {
        for (size_t i = 0; i < half; i++) {
            double freq = pow((double)p->rope_theta, -2.0 * (double)i / p->head_dim);
            double angle = pos * freq;
            d->rope_cos[(size_t)pos * half + i] = (float)cos(angle);
            d->rope_sin[(size_t)pos * half + i] = (float)sin(angle);
        }
    }
    return 0;
}

int decoder_reset(Decoder *d, char *err, size_t errlen) {
    char k_spec[SPEC_NORMALISED], v_spec[SPEC_NORMALISED];
    snprintf(k_spec, sizeof k_spec, "%s", d->cache.k[0].spec);
    snprintf(v_spec, sizeof v_spec, "%s", d->cache.v[0].spec);
    const ModelConfig *p = &d->model->config;
    kvcache_free(&d->cache);
    return kvcache_init(&d->cache, p->n_layers, p->n_kv_heads, p->head_dim, d->capacity, k_spec, v_spec,
                        err, errlen);
}

void decoder_free(Decoder *d) {
    if (d->cache.k) kvcache_free(&d->cache);
    pool_destroy(d->pool);
    free(d->x);
    free(d->xb);
    free(d->xb2);
    free(d->q);
    free(d->k);
    free(d->v);
    free(d->hb);
    free(d->hb2);
    free(d->att);
    free(d->logits);
    free(d->top_position);
    free(d->rope_cos);
    free(d->rope_sin);
    memset(d, 0, sizeof *d);
}
