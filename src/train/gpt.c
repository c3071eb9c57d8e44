// Batched forward and backward of micro (see gpt.h). Each layer's backward sits beside its forward.
#include "gpt.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calloc_lines.h"
#include "rope.h"

#define ROW_CHUNK 256   // tokens per row task (fixed, so results do not depend on the thread count)
#define WROW_CHUNK 96   // output rows per weight-gradient task
#define ATT_BLOCK TRAIN_ATT_BLOCK

// ---------------------------------------------------------------------------------------------
// Elementwise helpers

// exp(x) for any float, vectorisable (Cephes' expf: range reduction by ln 2, degree-5 polynomial,
// about 1 ulp). Softmax, attention and SiLU all use it, forward and backward alike. NaN gives NaN.
static inline float fexp(float x) {
    x = x > 88.0f ? 88.0f : x; // keeps 2^n finite
    x = x < -87.3365447504f ? -87.3365447504f : x;
    // n = round(x / ln 2): adding 1.5 * 2^23 rounds to an integer (exact, no libm call, vectorises)
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    // A NaN passes both clamps; its n would make the conversion below undefined. The polynomial
    // keeps the NaN, so any n in range gives the same NaN result.
    n = n == n ? n : 0.0f;
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    union {
        int32_t i;
        float f;
    } s;
    s.i = ((int32_t)n + 127) << 23;
    return y * s.f;
}

static inline float sigmoidf(float x) {
    return 1.0f / (1.0f + fexp(-x));
}

// C[M,N] = alpha * A[M,K] B[N,K]^T + beta C
static void mm_nt(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
// C[M,N] = alpha * A[M,K] B[K,N] + beta C
static void mm_nn(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
// C[M,N] = alpha * A[K,M]^T B[K,N] + beta C
static void mm_tn(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// ---------------------------------------------------------------------------------------------
// Layers, forward and backward side by side. Row functions handle rows [r0, r1) of N.

// encoder: x[n] = E[token[n]]
static void encoder_forward(float *x, const int *tok, const float *emb, int r0, int r1, int D) {
    for (int n = r0; n < r1; n++) memcpy(x + (size_t)n * D, emb + (size_t)tok[n] * D, (size_t)D * sizeof(float));
}
// dE[token[n]] += dx[n], in token order (one thread: rows may share a token)
static void encoder_backward(float *demb, const float *dx, const int *tok, int N, int D) {
    for (int n = 0; n < N; n++) {
        float *d = demb + (size_t)tok[n] * D;
        const float *s = dx + (size_t)n * D;
        for (int i = 0; i < D; i++) d[i] += s[i];
    }
}

// rmsnorm: y = x * rstd * g, rstd = 1/sqrt(mean(x²) + eps)
static void rmsnorm_forward(float *y, float *rstd, const float *x, const float *g, int r0, int r1, int D, float eps) {
    for (int n = r0; n < r1; n++) {
        const float *xr = x + (size_t)n * D;
        float *yr = y + (size_t)n * D;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < D; i++) ss += xr[i] * xr[i];
        float r = 1.0f / sqrtf(ss / (float)D + eps);
        rstd[n] = r;
        for (int i = 0; i < D; i++) yr[i] = xr[i] * r * g[i];
    }
}
// dx (= or +=) rstd*g*dy - rstd³/D * x * Σ(g*dy*x); the gain's gradient is a column sum (below)
static void rmsnorm_backward(float *dx, const float *dx_in, const float *dy, const float *x, const float *rstd,
                             const float *g, int r0, int r1, int D) {
    for (int n = r0; n < r1; n++) {
        const float *xr = x + (size_t)n * D, *dyr = dy + (size_t)n * D;
        const float *in = dx_in ? dx_in + (size_t)n * D : NULL;
        float *dxr = dx + (size_t)n * D;
        float r = rstd[n];
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int i = 0; i < D; i++) dot += g[i] * dyr[i] * xr[i];
        float c = r * r * r * dot / (float)D;
        for (int i = 0; i < D; i++) {
            float d = r * g[i] * dyr[i] - c * xr[i];
            dxr[i] = in ? in[i] + d : d;
        }
    }
}
// dg[i] += Σ_n dy[n,i] * x[n,i] * rstd[n] for columns [c0, c1), tokens in order
static void rmsnorm_gain_backward(float *dg, const float *dy, const float *x, const float *rstd, int N, int D,
                                  int c0, int c1) {
    float acc[WROW_CHUNK];
    for (int i = c0; i < c1; i++) acc[i - c0] = 0.0f;
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * D, *dyr = dy + (size_t)n * D;
        float r = rstd[n];
        for (int i = c0; i < c1; i++) acc[i - c0] += dyr[i] * (xr[i] * r);
    }
    for (int i = c0; i < c1; i++) dg[i] += acc[i - c0];
}

// RoPE on the pairs of the first `dims` numbers of each head (heads `stride` apart): adjacent
// (2i, 2i+1), or (i, i + dims/2) under GPT-NeoX's order (halves, rope.h); angle pos * theta^(-2i/dims)
// (divided by Llama 3's factors, in the tables). Both pairings do the same arithmetic on a pair.
static void rope_forward(float *v, int ld, int n_heads, int stride, int dims, int halves, const float *cs,
                         const float *sn, int r0, int r1, int T) {
    const int half = dims / 2, step = halves ? 1 : 2, other = halves ? half : 1;
    for (int n = r0; n < r1; n++) {
        int pos = n % T;
        const float *c = cs + (size_t)pos * half, *s = sn + (size_t)pos * half;
        for (int h = 0; h < n_heads; h++) {
            float *p = v + (size_t)n * ld + h * stride;
            if (!halves) {
                for (int i = 0; i < half; i++) {
                    float a = p[2 * i], b = p[2 * i + 1];
                    p[2 * i] = a * c[i] - b * s[i];
                    p[2 * i + 1] = a * s[i] + b * c[i];
                }
                continue;
            }
            for (int i = 0; i < half; i++) {
                float *x = p + i * step, a = x[0], b = x[other];
                x[0] = a * c[i] - b * s[i];
                x[other] = a * s[i] + b * c[i];
            }
        }
    }
}
// the rotation is orthogonal: its backward rotates the gradient by -angle
static void rope_backward(float *d, int ld, int n_heads, int stride, int dims, int halves, const float *cs,
                          const float *sn, int r0, int r1, int T) {
    const int half = dims / 2, step = halves ? 1 : 2, other = halves ? half : 1;
    for (int n = r0; n < r1; n++) {
        int pos = n % T;
        const float *c = cs + (size_t)pos * half, *s = sn + (size_t)pos * half;
        for (int h = 0; h < n_heads; h++) {
            float *p = d + (size_t)n * ld + h * stride;
            if (!halves) {
                for (int i = 0; i < half; i++) {
                    float a = p[2 * i], b = p[2 * i + 1];
                    p[2 * i] = a * c[i] + b * s[i];
                    p[2 * i + 1] = -a * s[i] + b * c[i];
                }
                continue;
            }
            for (int i = 0; i < half; i++) {
                float *x = p + i * step, a = x[0], b = x[other];
                x[0] = a * c[i] + b * s[i];
                x[other] = -a * s[i] + b * c[i];
            }
        }
    }
}

// swiglu: g = silu(h1) * h3
static void swiglu_forward(float *g, const float *h1, const float *h3, size_t count) {
#pragma omp simd
    for (size_t i = 0; i < count; i++) {
        float a = h1[i];
        g[i] = a * sigmoidf(a) * h3[i];
    }
}
static void swiglu_backward(float *dh1, float *dh3, const float *dg, const float *h1, const float *h3, size_t count) {
#pragma omp simd
    for (size_t i = 0; i < count; i++) {
        float a = h1[i], s = sigmoidf(a);
        dh1[i] = dg[i] * h3[i] * (s * (1.0f + a * (1.0f - s)));
        dh3[i] = dg[i] * a * s;
    }
}

// classifier + softmax + cross-entropy for rows [r0, r1): probs = softmax(xn W^T), loss = -log p[target];
// probs holds those rows only (row r0 first), W is the classifier (the embedding when tied)
static void classifier_forward(float *probs, float *losses, const float *xn, const float *W, const int *targets,
                               int r0, int r1, int D, int V) {
    int rows = r1 - r0;
    mm_nt(rows, V, D, 1.0f, xn + (size_t)r0 * D, D, W, D, 0.0f, probs, V);
    for (int n = r0; n < r1; n++) {
        float *p = probs + (size_t)(n - r0) * V;
        float m = p[0];
        for (int i = 1; i < V; i++) m = p[i] > m ? p[i] : m;
        float logit_t = targets ? p[targets[n]] : 0.0f;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; i++) {
            p[i] = fexp(p[i] - m);
            sum += p[i];
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < V; i++) p[i] *= inv;
        if (targets) losses[n] = logf(sum) + m - logit_t;
    }
}
// dlogits = (probs - onehot(target)) * scale, in place (probs: rows [r0, r1), row r0 first)
static void classifier_backward(float *probs, const int *targets, int r0, int r1, int V, float scale) {
    for (int n = r0; n < r1; n++) {
        float *p = probs + (size_t)(n - r0) * V;
        for (int i = 0; i < V; i++) p[i] *= scale;
        p[targets[n]] -= scale;
    }
}

// Causal attention of one (batch row, query head): O = softmax(Q K^T / sqrt(hd), causal) V, done in
// blocks of ATT_BLOCK query rows that read keys only up to the block's last row. Keeps each row's
// log-sum-exp so the backward can rebuild the weights instead of storing T x T of them.
typedef struct {
    const float *q, *k, *v; // this (batch, head)'s column of each buffer
    float *o;               // attention output (forward) / its gradient (backward: do_)
    int ldq, ldk, ldv, ldo;
    int T, hd;              // hd: numbers per query and key
    int vd;                 // numbers per value (hd but under latent attention)
    int block;              // query rows per block
    float *lse;             // [T]
    float *S, *dS;          // scratch [ATT_BLOCK, T] each
} AttHead;

static void attention_forward(const AttHead *h) {
    float scale = 1.0f / sqrtf((float)h->hd);
    for (int r0 = 0; r0 < h->T; r0 += h->block) {
        int r1 = r0 + h->block < h->T ? r0 + h->block : h->T, rows = r1 - r0, e = r1;
        float *S = h->S;
        mm_nt(rows, e, h->hd, scale, h->q + (size_t)r0 * h->ldq, h->ldq, h->k, h->ldk, 0.0f, S, e);
        for (int r = 0; r < rows; r++) {
            int t = r0 + r;
            float *s = S + (size_t)r * e;
            float m = s[0];
#pragma omp simd reduction(max : m)
            for (int j = 1; j <= t; j++) m = s[j] > m ? s[j] : m;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j <= t; j++) {
                s[j] = fexp(s[j] - m);
                sum += s[j];
            }
            float inv = 1.0f / sum;
#pragma omp simd
            for (int j = 0; j <= t; j++) s[j] *= inv;
            for (int j = t + 1; j < e; j++) s[j] = 0.0f;
            h->lse[t] = m + logf(sum);
        }
        mm_nn(rows, h->vd, e, 1.0f, S, e, h->v, h->ldv, 0.0f, h->o + (size_t)r0 * h->ldo, h->ldo);
    }
}

// Backward of one (batch, head): given dO (in ->o) and O, accumulates dQ, dK, dV.
// dS = P ⊙ (dP − rowsum(dO ⊙ O)), dQ = s·dS K, dK += s·dSᵀ Q, dV += Pᵀ dO.
// first: this task is the first to write dK/dV of this (batch, kv head) (beta 0 on the full block).
static void attention_backward(const AttHead *h, const float *out, float *dq, float *dk, float *dv, int first) {
    float scale = 1.0f / sqrtf((float)h->hd);
    int nb = (h->T + h->block - 1) / h->block;
    for (int b = nb - 1; b >= 0; b--) { // the last block spans all keys: it initialises dK/dV
        int r0 = b * h->block;
        int r1 = r0 + h->block < h->T ? r0 + h->block : h->T, rows = r1 - r0, e = r1;
        float beta = (first && b == nb - 1) ? 0.0f : 1.0f;
        float *P = h->S, *dP = h->dS;
        const float *qb = h->q + (size_t)r0 * h->ldq, *dob = h->o + (size_t)r0 * h->ldo;
        mm_nt(rows, e, h->hd, scale, qb, h->ldq, h->k, h->ldk, 0.0f, P, e);
        mm_nt(rows, e, h->vd, 1.0f, dob, h->ldo, h->v, h->ldv, 0.0f, dP, e);
        for (int r = 0; r < rows; r++) {
            int t = r0 + r;
            float *p = P + (size_t)r * e, *dp = dP + (size_t)r * e;
            const float *o = out + (size_t)t * h->ldo, *dor = h->o + (size_t)t * h->ldo;
            float di = 0.0f;
            for (int d = 0; d < h->vd; d++) di += dor[d] * o[d];
            float lse = h->lse[t];
#pragma omp simd
            for (int j = 0; j <= t; j++) {
                p[j] = fexp(p[j] - lse);
                dp[j] = p[j] * (dp[j] - di);
            }
            for (int j = t + 1; j < e; j++) p[j] = dp[j] = 0.0f;
        }
        mm_nn(rows, h->hd, e, scale, dP, e, h->k, h->ldk, 0.0f, dq + (size_t)r0 * h->ldq, h->ldq);
        mm_tn(e, h->hd, rows, scale, dP, e, qb, h->ldq, beta, dk, h->ldk);
        mm_tn(e, h->vd, rows, 1.0f, P, e, dob, h->ldo, beta, dv, h->ldv);
    }
}

// ---------------------------------------------------------------------------------------------
// Allocation

// A layer's attention widths (gpt.h): QK numbers per query head, QD/KD/VD/OD the buffers' widths,
// att_kv_heads the key/value heads attention sees, rope the numbers RoPE rotates in each head.
typedef struct {
    int mla, QK, QD, KD, VD, OD, LAT, DR, att_kv_heads, rope, wkv; // wkv: rows of wk and wv
} AttDims;

static AttDims att_dims(const ModelConfig *c) {
    AttDims a;
    a.mla = c->latent_dim > 0;
    a.QK = model_qk_dim(c);
    a.QD = c->n_heads * a.QK;
    a.OD = c->n_heads * c->head_dim;
    a.KD = a.mla ? a.QD : c->n_kv_heads * c->head_dim;
    a.VD = a.mla ? a.OD : a.KD;
    a.LAT = c->latent_dim;
    a.DR = c->rope_dim;
    a.att_kv_heads = a.mla ? c->n_heads : c->n_kv_heads;
    a.rope = a.mla ? c->rope_dim : c->head_dim;
    a.wkv = a.mla ? 0 : a.KD;
    return a;
}

typedef struct {
    float **ptr;
    size_t count;
} Slot;

// Rows of the classifier's block when only the activations' gradients are kept (fwd_head): as many
// as keep a thread's block of logits within 16 MiB, up to ROW_CHUNK (micro's 256-byte vocabulary
// takes ROW_CHUNK rows, as the full backward does, so its numbers are that backward's).
#define HEAD_BLOCK_FLOATS ((size_t)1 << 22)

int train_net_init(TrainNet *n, Model *m, int B, int T, int n_threads, char *err, size_t errlen) {
    return train_net_init_grads(n, m, B, T, n_threads, TRAIN_GRADS_PARAMS, err, errlen);
}

int train_net_init_grads(TrainNet *n, Model *m, int B, int T, int n_threads, TrainGrads grads, char *err,
                         size_t errlen) {
    memset(n, 0, sizeof *n);
    const ModelConfig *c = &m->config;
    if (B < 1 || T < 1 || T > c->max_seq_len) {
        snprintf(err, errlen, "batch %d x seq %d: need batch >= 1 and 1 <= seq <= %d", B, T, c->max_seq_len);
        return -1;
    }
    if (c->head_dim % 2 != 0 || c->n_heads % c->n_kv_heads != 0) {
        snprintf(err, errlen, "trainer needs an even head_dim and n_kv_heads dividing n_heads");
        return -1;
    }
    if ((size_t)B * (size_t)T > (size_t)TRAIN_MAX_STEP_TOKENS) {
        snprintf(err, errlen, "batch %d x seq %d is too many tokens per step", B, T);
        return -1;
    }
    // Our pool splits the work into tasks; each sgemm runs on the calling thread. (Process-wide.)
    openblas_set_num_threads(1);
    n->c = *c;
    n->B = B;
    n->T = T;
    n->model = m;
    n->n_threads = n_threads < 1 ? 1 : n_threads;
    n->att_block = ATT_BLOCK;
    n->grads_kind = grads;
    const AttDims ad = att_dims(c);
    size_t N = (size_t)B * T, L = (size_t)c->n_layers, D = (size_t)c->dim;
    size_t QD = (size_t)ad.QD, KD = (size_t)ad.KD, VD = (size_t)ad.VD, OD = (size_t)ad.OD, LAT = (size_t)ad.LAT;
    size_t F = (size_t)c->hidden_dim, V = (size_t)c->vocab_size, H = (size_t)c->n_heads;
    const int params = grads == TRAIN_GRADS_PARAMS;
    n->head_rows = params || (size_t)ROW_CHUNK * V <= HEAD_BLOCK_FLOATS ? ROW_CHUNK
                   : V >= HEAD_BLOCK_FLOATS                              ? 1
                                                                         : (int)(HEAD_BLOCK_FLOATS / V);
    const size_t QN = c->qk_norm ? 1 : 0; // the q/k norms' inputs and 1/rms, and their gradients
    TrainActs *a = &n->a;
    Slot slots[] = {
        {&a->x, (2 * L + 1) * N * D},
        {&a->attn_rstd, L * N},
        {&a->attn_xn, L * N * D},
        {&a->q, L * N * QD},
        {&a->k, L * N * KD},
        {&a->v, L * N * VD},
        {&a->kv_pre, L * N * LAT},
        {&a->kv_rstd, ad.mla ? L * N : 0},
        {&a->ckv, L * N * LAT},
        {&a->att_lse, L * N * H},
        {&a->att_out, L * N * OD},
        {&a->ffn_rstd, L * N},
        {&a->ffn_xn, L * N * D},
        {&a->h1, L * N * F},
        {&a->h3, L * N * F},
        {&a->hg, L * N * F},
        {&a->final_rstd, N},
        {&a->final_xn, N * D},
        {&a->probs, params ? N * V : 0},
        {&a->logit_block, params ? 0 : (size_t)n->n_threads * (size_t)n->head_rows * V},
        {&a->q_pre, QN * L * N * QD},
        {&a->k_pre, QN * L * N * KD},
        {&a->q_rstd, QN * L * N * H},
        {&a->k_rstd, QN * L * N * (size_t)c->n_kv_heads},
        {&a->dq_pre, QN * N * QD},
        {&a->dk_pre, QN * N * KD},
        {&a->losses, N},
        {&a->dx, N * D},
        {&a->dx2, N * D},
        {&a->dxn, N * D},
        {&a->datt, N * OD},
        {&a->dq, N * QD},
        {&a->dk, N * KD},
        {&a->dv, N * VD},
        {&a->dknope, ad.mla ? N * OD : 0},
        {&a->dkr, N * (size_t)ad.DR},
        {&a->dckv, N * LAT},
        {&a->dckv_pre, N * LAT},
        {&a->dhg, N * F},
        {&a->dh1, N * F},
        {&a->dh3, N * F},
        {&a->att_scratch, (size_t)n->n_threads * 2 * ATT_BLOCK * (size_t)T},
        {&a->rope_cos, (size_t)T * (size_t)(ad.rope / 2)},
        {&a->rope_sin, (size_t)T * (size_t)(ad.rope / 2)},
    };
    size_t total = 0, nslots = sizeof slots / sizeof slots[0];
    for (size_t i = 0; i < nslots; i++) total += (slots[i].count + 15) & ~(size_t)15; // 64-byte aligned
    n->act_memory = calloc_lines(total, sizeof(float));
    n->grads = params ? calloc_lines(m->n_params, sizeof(float)) : NULL;
    n->pool = pool_create(n->n_threads);
    if (!n->act_memory || (params && !n->grads) || !n->pool) {
        snprintf(err, errlen, "out of memory for %zu activation floats (batch %d x seq %d)", total, B, T);
        train_net_free(n);
        return -1;
    }
    n->act_floats = total;
    float *p = n->act_memory;
    for (size_t i = 0; i < nslots; i++) {
        *slots[i].ptr = p;
        p += (slots[i].count + 15) & ~(size_t)15;
    }
    memset(n->act_memory, 0, total * sizeof(float));
    if (!params) a->probs = NULL; // never held in this mode (fwd_head)
    if (params) model_point_weights(c, n->grads, &n->g);
    train_net_zero_grad(n);
    rope_table(a->rope_cos, a->rope_sin, T, ad.rope, c->rope_theta, c->rope_factors ? m->w.rope_freqs : NULL);
    return 0;
}

void train_net_free(TrainNet *n) {
    free(n->act_memory);
    free(n->grads);
    pool_destroy(n->pool);
    memset(n, 0, sizeof *n);
}

void train_net_zero_grad(TrainNet *n) {
    if (n->grads) memset(n->grads, 0, n->model->n_params * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// Forward

typedef struct {
    TrainNet *n;
    int l;
} Job;

#define DIMS                                                                                                 \
    const ModelConfig *c = &n->c;                                                                            \
    const int N = n->B * n->T, T = n->T, D = c->dim, F = c->hidden_dim, V = c->vocab_size, hd = c->head_dim; \
    const AttDims ad = att_dims(c);                                                                          \
    const int QD = ad.QD, KD = ad.KD, VD = ad.VD, OD = ad.OD;                                                \
    (void)N, (void)T, (void)D, (void)F, (void)V, (void)hd, (void)QD, (void)KD, (void)VD, (void)OD

// layer l's weights
typedef struct {
    const float *wq, *wk, *wv, *wo, *w1, *w2, *w3, *an, *fn;
    const float *w_dkv, *kv_norm, *w_kr, *w_uk, *w_uv; // latent attention's
    const float *bq, *bk, *bv, *qn, *kn;               // a GGUF architecture's (NULL when it has none)
} LayerW;
static LayerW layer_weights(const ModelConfig *c, const ModelWeights *w, int l) {
    const AttDims ad = att_dims(c);
    size_t D = (size_t)c->dim, QD = (size_t)ad.QD, KW = (size_t)ad.wkv, OD = (size_t)ad.OD;
    size_t F = (size_t)c->hidden_dim, LAT = (size_t)ad.LAT, DR = (size_t)ad.DR;
    LayerW r = {w->wq + l * QD * D,   w->wk + l * KW * D,   w->wv + l * KW * D,     w->wo + l * D * OD,
                w->w1 + l * F * D,    w->w2 + l * D * F,    w->w3 + l * F * D,      w->attn_norm + l * D,
                w->ffn_norm + l * D,  w->w_dkv + l * LAT * D, w->kv_norm + l * LAT, w->w_kr + l * DR * D,
                w->w_uk + l * OD * LAT, w->w_uv + l * OD * LAT, NULL, NULL, NULL, NULL, NULL};
    const size_t HD = (size_t)c->head_dim;
    if (c->qkv_bias) r.bq = w->bq + l * QD, r.bk = w->bk + l * KW, r.bv = w->bv + l * KW;
    if (c->qk_norm) r.qn = w->q_norm + l * HD, r.kn = w->k_norm + l * HD;
    return r;
}

// Latent attention's rows [r0, r1) of layer l, once the queries are made: RoPE on each head's last
// rope_dim numbers; the latent c = RMSNorm(W_dkv h); each head's key [W_uk,h c | the RoPE key
// W_kr h, rotated, the same in every head] and value W_uv,h c.
static void fwd_latent_in(TrainNet *n, int l, int r0, int r1) {
    DIMS;
    TrainActs *a = &n->a;
    LayerW w = layer_weights(c, &n->model->w, l);
    const int rows = r1 - r0, H = c->n_heads, QK = ad.QK, LAT = ad.LAT, DR = ad.DR;
    const float *xn = a->attn_xn + (size_t)l * N * D + (size_t)r0 * D;
    float *q = a->q + (size_t)l * N * QD, *k = a->k + (size_t)l * N * KD, *v = a->v + (size_t)l * N * VD;
    float *kv_pre = a->kv_pre + (size_t)l * N * LAT, *ckv = a->ckv + (size_t)l * N * LAT;
    rope_forward(q + hd, QD, H, QK, DR, c->rope_halves, a->rope_cos, a->rope_sin, r0, r1, T);
    mm_nt(rows, LAT, D, 1.0f, xn, D, w.w_dkv, D, 0.0f, kv_pre + (size_t)r0 * LAT, LAT);
    rmsnorm_forward(ckv, a->kv_rstd + (size_t)l * N, kv_pre, w.kv_norm, r0, r1, LAT, c->norm_eps);
    for (int h = 0; h < H; h++)
        mm_nt(rows, hd, LAT, 1.0f, ckv + (size_t)r0 * LAT, LAT, w.w_uk + (size_t)h * hd * LAT, LAT, 0.0f,
              k + (size_t)r0 * KD + (size_t)h * QK, KD);
    mm_nt(rows, DR, D, 1.0f, xn, D, w.w_kr, D, 0.0f, k + (size_t)r0 * KD + hd, KD);
    rope_forward(k + hd, KD, 1, QK, DR, c->rope_halves, a->rope_cos, a->rope_sin, r0, r1, T);
    for (int r = r0; r < r1; r++)
        for (int h = 1; h < H; h++)
            memcpy(k + (size_t)r * KD + (size_t)h * QK + hd, k + (size_t)r * KD + hd, sizeof(float) * (size_t)DR);
    mm_nt(rows, VD, LAT, 1.0f, ckv + (size_t)r0 * LAT, LAT, w.w_uv, LAT, 0.0f, v + (size_t)r0 * VD, VD);
}

// Rows [r0, r1) of layer l between the projections and RoPE: what a GGUF architecture adds there, as
// the inference forward's attention_inputs applies it: q, k and v biases, then each head's q and k
// RMS-normalised with the layer's gain (the norm's input and 1/rms kept: the backward needs them).
static void fwd_qk_parts(TrainNet *n, int l, int r0, int r1) {
    DIMS;
    TrainActs *a = &n->a;
    LayerW w = layer_weights(c, &n->model->w, l);
    float *q = a->q + (size_t)l * N * QD, *k = a->k + (size_t)l * N * KD, *v = a->v + (size_t)l * N * VD;
    const int H = c->n_heads, KVH = c->n_kv_heads;
    if (c->qkv_bias)
        for (int r = r0; r < r1; r++) {
            float *qr = q + (size_t)r * QD, *kr = k + (size_t)r * KD, *vr = v + (size_t)r * VD;
            for (int i = 0; i < QD; i++) qr[i] += w.bq[i];
            for (int i = 0; i < KD; i++) kr[i] += w.bk[i], vr[i] += w.bv[i];
        }
    if (c->qk_norm) { // heads are rows of head_dim: rows [r0·H, r1·H) of the [N·H, head_dim] view
        float *qp = a->q_pre + (size_t)l * N * QD, *kp = a->k_pre + (size_t)l * N * KD;
        memcpy(qp + (size_t)r0 * QD, q + (size_t)r0 * QD, sizeof(float) * (size_t)(r1 - r0) * QD);
        memcpy(kp + (size_t)r0 * KD, k + (size_t)r0 * KD, sizeof(float) * (size_t)(r1 - r0) * KD);
        rmsnorm_forward(q, a->q_rstd + (size_t)l * N * H, qp, w.qn, r0 * H, r1 * H, hd, c->norm_eps);
        rmsnorm_forward(k, a->k_rstd + (size_t)l * N * KVH, kp, w.kn, r0 * KVH, r1 * KVH, hd, c->norm_eps);
    }
}

// rows: (embedding for l == 0), attention norm, Q K V projections, RoPE
static void fwd_attn_in(void *ctx, int task, int thread) {
    (void)thread;
    Job *j = ctx;
    TrainNet *n = j->n;
    DIMS;
    int l = j->l, r0 = task * ROW_CHUNK, r1 = r0 + ROW_CHUNK < N ? r0 + ROW_CHUNK : N, rows = r1 - r0;
    TrainActs *a = &n->a;
    LayerW w = layer_weights(c, &n->model->w, l);
    float *x = a->x + (size_t)2 * l * N * D;
    if (l == 0) encoder_forward(x, n->inputs, n->model->w.token_embedding, r0, r1, D);
    float *xn = a->attn_xn + (size_t)l * N * D;
    float *q = a->q + (size_t)l * N * QD, *k = a->k + (size_t)l * N * KD, *v = a->v + (size_t)l * N * VD;
    rmsnorm_forward(xn, a->attn_rstd + (size_t)l * N, x, w.an, r0, r1, D, c->norm_eps);
    mm_nt(rows, QD, D, 1.0f, xn + (size_t)r0 * D, D, w.wq, D, 0.0f, q + (size_t)r0 * QD, QD);
    if (ad.mla) {
        fwd_latent_in(n, l, r0, r1);
        return;
    }
    mm_nt(rows, KD, D, 1.0f, xn + (size_t)r0 * D, D, w.wk, D, 0.0f, k + (size_t)r0 * KD, KD);
    mm_nt(rows, VD, D, 1.0f, xn + (size_t)r0 * D, D, w.wv, D, 0.0f, v + (size_t)r0 * VD, VD);
    fwd_qk_parts(n, l, r0, r1);
    rope_forward(q, QD, c->n_heads, hd, hd, c->rope_halves, a->rope_cos, a->rope_sin, r0, r1, T);
    rope_forward(k, KD, c->n_kv_heads, hd, hd, c->rope_halves, a->rope_cos, a->rope_sin, r0, r1, T);
}

static AttHead att_head(TrainNet *n, int l, int b, int h, int thread, int backward) {
    DIMS;
    TrainActs *a = &n->a;
    int g = h / (c->n_heads / ad.att_kv_heads);
    size_t row0 = (size_t)b * T;
    AttHead ah;
    ah.q = a->q + (size_t)l * N * QD + row0 * QD + (size_t)h * ad.QK;
    ah.k = a->k + (size_t)l * N * KD + row0 * KD + (size_t)g * ad.QK;
    ah.v = a->v + (size_t)l * N * VD + row0 * VD + (size_t)g * hd;
    ah.o = (backward ? a->datt : a->att_out + (size_t)l * N * OD) + row0 * OD + (size_t)h * hd;
    ah.ldq = QD;
    ah.ldk = KD;
    ah.ldv = VD;
    ah.ldo = OD;
    ah.T = T;
    ah.hd = ad.QK;
    ah.vd = hd;
    ah.block = n->att_block;
    ah.lse = a->att_lse + (((size_t)l * n->B + b) * c->n_heads + h) * T;
    ah.S = a->att_scratch + (size_t)thread * 2 * ATT_BLOCK * T;
    ah.dS = ah.S + (size_t)ATT_BLOCK * T;
    return ah;
}

// one task per (batch row, kv head): its query heads in order
static void fwd_attention(void *ctx, int task, int thread) {
    Job *j = ctx;
    TrainNet *n = j->n;
    const int kvh = att_dims(&n->c).att_kv_heads, group = n->c.n_heads / kvh, b = task / kvh, g = task % kvh;
    for (int h = g * group; h < (g + 1) * group; h++) {
        AttHead ah = att_head(n, j->l, b, h, thread, 0);
        attention_forward(&ah);
    }
}

// rows: x += Wo·att; FFN norm; x += W2·swiglu
static void fwd_attn_out_ffn(void *ctx, int task, int thread) {
    (void)thread;
    Job *j = ctx;
    TrainNet *n = j->n;
    DIMS;
    int l = j->l, r0 = task * ROW_CHUNK, r1 = r0 + ROW_CHUNK < N ? r0 + ROW_CHUNK : N, rows = r1 - r0;
    TrainActs *a = &n->a;
    LayerW w = layer_weights(c, &n->model->w, l);
    const float *x0 = a->x + (size_t)2 * l * N * D;
    float *x1 = a->x + (size_t)(2 * l + 1) * N * D, *x2 = a->x + (size_t)(2 * l + 2) * N * D;
    memcpy(x1 + (size_t)r0 * D, x0 + (size_t)r0 * D, (size_t)rows * D * sizeof(float));
    mm_nt(rows, D, OD, 1.0f, a->att_out + (size_t)l * N * OD + (size_t)r0 * OD, OD, w.wo, OD, 1.0f,
          x1 + (size_t)r0 * D, D);
    float *xn = a->ffn_xn + (size_t)l * N * D;
    rmsnorm_forward(xn, a->ffn_rstd + (size_t)l * N, x1, w.fn, r0, r1, D, c->norm_eps);
    float *h1 = a->h1 + (size_t)l * N * F + (size_t)r0 * F, *h3 = a->h3 + (size_t)l * N * F + (size_t)r0 * F;
    float *hg = a->hg + (size_t)l * N * F + (size_t)r0 * F;
    mm_nt(rows, F, D, 1.0f, xn + (size_t)r0 * D, D, w.w1, D, 0.0f, h1, F);
    mm_nt(rows, F, D, 1.0f, xn + (size_t)r0 * D, D, w.w3, D, 0.0f, h3, F);
    swiglu_forward(hg, h1, h3, (size_t)rows * F);
    memcpy(x2 + (size_t)r0 * D, x1 + (size_t)r0 * D, (size_t)rows * D * sizeof(float));
    mm_nt(rows, D, F, 1.0f, hg, F, w.w2, F, 1.0f, x2 + (size_t)r0 * D, D);
}

// The classifier: its own matrix, or the token embedding when tied.
static const float *classifier_weights(const TrainNet *n) {
    return n->c.separate_output ? n->model->w.output : n->model->w.token_embedding;
}

// rows: final norm, classifier, softmax, loss. Keeping every parameter's gradient, the probabilities
// of all rows stay for the backward; with the activations' gradients only, each block of head_rows
// rows is turned into dlogits and d final_xn = dlogits·W at once in this thread's block, so that
// no [tokens, vocab] array is ever held (at Qwen's 152k vocabulary 2,048 tokens' would be 1.2 GB).
static void fwd_head(void *ctx, int task, int thread) {
    Job *j = ctx;
    TrainNet *n = j->n;
    DIMS;
    int r0 = task * n->head_rows, r1 = r0 + n->head_rows < N ? r0 + n->head_rows : N;
    TrainActs *a = &n->a;
    const float *x = a->x + (size_t)2 * c->n_layers * N * D, *W = classifier_weights(n);
    rmsnorm_forward(a->final_xn, a->final_rstd, x, n->model->w.final_norm, r0, r1, D, c->norm_eps);
    if (n->grads_kind == TRAIN_GRADS_PARAMS) {
        classifier_forward(a->probs + (size_t)r0 * V, a->losses, a->final_xn, W, n->targets, r0, r1, D, V);
        return;
    }
    float *P = a->logit_block + (size_t)thread * n->head_rows * V;
    classifier_forward(P, a->losses, a->final_xn, W, n->targets, r0, r1, D, V);
    if (!n->targets) return;
    classifier_backward(P, n->targets, r0, r1, V, 1.0f / (float)N);
    mm_nn(r1 - r0, D, V, 1.0f, P, V, W, D, 0.0f, a->dxn + (size_t)r0 * D, D);
}

float train_net_forward(TrainNet *n, const int *inputs, const int *targets) {
    DIMS;
    n->inputs = inputs;
    n->targets = targets;
    int row_tasks = (N + ROW_CHUNK - 1) / ROW_CHUNK;
    for (int l = 0; l < c->n_layers; l++) {
        Job j = {n, l};
        pool_run_tasks(n->pool, row_tasks, fwd_attn_in, &j);
        pool_run_tasks(n->pool, n->B * ad.att_kv_heads, fwd_attention, &j);
        pool_run_tasks(n->pool, row_tasks, fwd_attn_out_ffn, &j);
    }
    Job j = {n, 0};
    pool_run_tasks(n->pool, (N + n->head_rows - 1) / n->head_rows, fwd_head, &j);
    n->mean_loss = 0.0f;
    if (targets) {
        double sum = 0.0;
        for (int i = 0; i < N; i++) sum += n->a.losses[i];
        n->mean_loss = (float)(sum / N);
    }
    return n->mean_loss;
}

// ---------------------------------------------------------------------------------------------
// Backward

// Weight gradients: dW[out, in] += dY[N, out]^T X[N, in] (split over output rows), and norm gains
// dg[D] += Σ_n dY ⊙ x·rstd (split over columns). Each task owns its rows/columns: no races.
typedef struct {
    const float *dy, *x, *rstd; // rstd != NULL: a norm gain (dy: the norm output's gradient, x: its input)
    float *dw;
    int out, in;
    int rows; // rows of dy summed over: the tokens (0), or a per-head norm's tokens × heads
    int bias; // a bias: db[out] += Σ_n dy[n, out]
} GradItem;

#define GRAD_ITEMS 12
typedef struct {
    TrainNet *n;
    GradItem items[GRAD_ITEMS];
    int n_items;
    int first_task[GRAD_ITEMS + 1];
} GradJob;

static GradItem *grad_job_add(GradJob *j, const float *dy, const float *x, const float *rstd, float *dw, int out,
                              int in) {
    GradItem *it = &j->items[j->n_items];
    *it = (GradItem){0};
    it->dy = dy;
    it->x = x;
    it->rstd = rstd;
    it->dw = dw;
    it->out = out;
    it->in = in;
    j->first_task[j->n_items + 1] = j->first_task[j->n_items] + (out + WROW_CHUNK - 1) / WROW_CHUNK;
    j->n_items++;
    return it;
}

// A bias's gradient: the column sums of dy[N, out] over the rows in order.
static void grad_job_add_bias(GradJob *j, const float *dy, float *db, int out) {
    grad_job_add(j, dy, NULL, NULL, db, out, 0)->bias = 1;
}

// db[i] += Σ_n dy[n,i] for columns [c0, c1), rows in order
static void bias_backward(float *db, const float *dy, int N, int D, int c0, int c1) {
    float acc[WROW_CHUNK];
    for (int i = c0; i < c1; i++) acc[i - c0] = 0.0f;
    for (int n = 0; n < N; n++)
        for (int i = c0; i < c1; i++) acc[i - c0] += dy[(size_t)n * D + i];
    for (int i = c0; i < c1; i++) db[i] += acc[i - c0];
}

static void grad_task(void *ctx, int task, int thread) {
    (void)thread;
    GradJob *j = ctx;
    int i = 0;
    while (task >= j->first_task[i + 1]) i++;
    const GradItem *it = &j->items[i];
    int N = it->rows ? it->rows : j->n->B * j->n->T;
    int o0 = (task - j->first_task[i]) * WROW_CHUNK, o1 = o0 + WROW_CHUNK < it->out ? o0 + WROW_CHUNK : it->out;
    if (it->bias)
        bias_backward(it->dw, it->dy, N, it->out, o0, o1);
    else if (it->rstd)
        rmsnorm_gain_backward(it->dw, it->dy, it->x, it->rstd, N, it->out, o0, o1);
    else
        mm_tn(o1 - o0, it->in, N, 1.0f, it->dy + o0, it->out, it->x, it->in, 1.0f, it->dw + (size_t)o0 * it->in,
              it->in);
}

static void grad_job_run(GradJob *j) {
    pool_run_tasks(j->n->pool, j->first_task[j->n_items], grad_task, j);
}

// rows: dlogits, d final_xn = dlogits·E, final norm backward into dx
static void bwd_head(void *ctx, int task, int thread) {
    (void)thread;
    Job *j = ctx;
    TrainNet *n = j->n;
    DIMS;
    int r0 = task * ROW_CHUNK, r1 = r0 + ROW_CHUNK < N ? r0 + ROW_CHUNK : N, rows = r1 - r0;
    TrainActs *a = &n->a;
    if (n->grads_kind == TRAIN_GRADS_PARAMS) { // else the forward has made dxn (fwd_head)
        classifier_backward(a->probs + (size_t)r0 * V, n->targets, r0, r1, V, 1.0f / (float)N);
        mm_nn(rows, D, V, 1.0f, a->probs + (size_t)r0 * V, V, classifier_weights(n), D, 0.0f, a->dxn + (size_t)r0 * D,
              D);
    }
    rmsnorm_backward(a->dx, NULL, a->dxn, a->x + (size_t)2 * c->n_layers * N * D, a->final_rstd,
                     n->model->w.final_norm, r0, r1, D);
}

// rows of layer l's FFN sublayer and the gradient at the attention output:
// dhg = dx W2; swiglu backward; dxn = dh1 W1 + dh3 W3; dx2 = dx + norm backward; datt = dx2 Wo
static void bwd_ffn(void *ctx, int task, int thread) {
    (void)thread;
    Job *j = ctx;
    TrainNet *n = j->n;
    DIMS;
    int l = j->l, r0 = task * ROW_CHUNK, r1 = r0 + ROW_CHUNK < N ? r0 + ROW_CHUNK : N, rows = r1 - r0;
    TrainActs *a = &n->a;
    LayerW w = layer_weights(c, &n->model->w, l);
    size_t rf = (size_t)r0 * F, rd = (size_t)r0 * D;
    mm_nn(rows, F, D, 1.0f, a->dx + rd, D, w.w2, F, 0.0f, a->dhg + rf, F);
    swiglu_backward(a->dh1 + rf, a->dh3 + rf, a->dhg + rf, a->h1 + (size_t)l * N * F + rf,
                    a->h3 + (size_t)l * N * F + rf, (size_t)rows * F);
    mm_nn(rows, D, F, 1.0f, a->dh1 + rf, F, w.w1, D, 0.0f, a->dxn + rd, D);
    mm_nn(rows, D, F, 1.0f, a->dh3 + rf, F, w.w3, D, 1.0f, a->dxn + rd, D);
    rmsnorm_backward(a->dx2, a->dx, a->dxn, a->x + (size_t)(2 * l + 1) * N * D, a->ffn_rstd + (size_t)l * N, w.fn,
                     r0, r1, D);
    mm_nn(rows, OD, D, 1.0f, a->dx2 + rd, D, w.wo, OD, 0.0f, a->datt + (size_t)r0 * OD, OD);
}

static void bwd_attention(void *ctx, int task, int thread) {
    Job *j = ctx;
    TrainNet *n = j->n;
    DIMS;
    const int kvh = ad.att_kv_heads, group = c->n_heads / kvh, b = task / kvh, g = task % kvh;
    size_t row0 = (size_t)b * T;
    const float *out = n->a.att_out + (size_t)j->l * N * OD + row0 * OD;
    for (int h = g * group; h < (g + 1) * group; h++) {
        AttHead ah = att_head(n, j->l, b, h, thread, 1);
        attention_backward(&ah, out + (size_t)h * hd, n->a.dq + row0 * QD + (size_t)h * ad.QK,
                           n->a.dk + row0 * KD + (size_t)g * ad.QK, n->a.dv + row0 * VD + (size_t)g * hd,
                           h == g * group);
    }
}

// Latent attention's rows [r0, r1) of layer l, back from the heads' dq, dk, dv to dxn: the RoPE
// key's gradient summed over the heads (in order), the latent's from every head's key and value,
// through its norm, then dxn = dq Wq + dc_pre W_dkv + dk_rope W_kr.
static void bwd_latent_in(TrainNet *n, int l, int r0, int r1) {
    DIMS;
    TrainActs *a = &n->a;
    LayerW w = layer_weights(c, &n->model->w, l);
    const int rows = r1 - r0, H = c->n_heads, QK = ad.QK, LAT = ad.LAT, DR = ad.DR;
    const size_t rd = (size_t)r0 * D;
    rope_backward(a->dq + hd, QD, H, QK, DR, c->rope_halves, a->rope_cos, a->rope_sin, r0, r1, T);
    for (int r = r0; r < r1; r++) {
        const float *dk = a->dk + (size_t)r * KD;
        for (int i = 0; i < DR; i++) {
            float s = dk[hd + i];
            for (int h = 1; h < H; h++) s += dk[(size_t)h * QK + hd + i];
            a->dkr[(size_t)r * DR + i] = s;
        }
        for (int h = 0; h < H; h++)
            memcpy(a->dknope + (size_t)r * OD + (size_t)h * hd, dk + (size_t)h * QK, sizeof(float) * (size_t)hd);
    }
    rope_backward(a->dkr, DR, 1, DR, DR, c->rope_halves, a->rope_cos, a->rope_sin, r0, r1, T);
    float *dckv = a->dckv + (size_t)r0 * LAT;
    mm_nn(rows, LAT, OD, 1.0f, a->dknope + (size_t)r0 * OD, OD, w.w_uk, LAT, 0.0f, dckv, LAT);
    mm_nn(rows, LAT, VD, 1.0f, a->dv + (size_t)r0 * VD, VD, w.w_uv, LAT, 1.0f, dckv, LAT);
    rmsnorm_backward(a->dckv_pre, NULL, a->dckv, a->kv_pre + (size_t)l * N * LAT, a->kv_rstd + (size_t)l * N,
                     w.kv_norm, r0, r1, LAT);
    mm_nn(rows, D, QD, 1.0f, a->dq + (size_t)r0 * QD, QD, w.wq, D, 0.0f, a->dxn + rd, D);
    mm_nn(rows, D, LAT, 1.0f, a->dckv_pre + (size_t)r0 * LAT, LAT, w.w_dkv, D, 1.0f, a->dxn + rd, D);
    mm_nn(rows, D, DR, 1.0f, a->dkr + (size_t)r0 * DR, DR, w.w_kr, D, 1.0f, a->dxn + rd, D);
}

// rows: RoPE backward; dxn = dq Wq + dk Wk + dv Wv; dx = dx2 + attention-norm backward
static void bwd_attn_in(void *ctx, int task, int thread) {
    (void)thread;
    Job *j = ctx;
    TrainNet *n = j->n;
    DIMS;
    int l = j->l, r0 = task * ROW_CHUNK, r1 = r0 + ROW_CHUNK < N ? r0 + ROW_CHUNK : N, rows = r1 - r0;
    TrainActs *a = &n->a;
    LayerW w = layer_weights(c, &n->model->w, l);
    size_t rd = (size_t)r0 * D;
    if (ad.mla) {
        bwd_latent_in(n, l, r0, r1);
    } else {
        rope_backward(a->dq, QD, c->n_heads, hd, hd, c->rope_halves, a->rope_cos, a->rope_sin, r0, r1, T);
        rope_backward(a->dk, KD, c->n_kv_heads, hd, hd, c->rope_halves, a->rope_cos, a->rope_sin, r0, r1, T);
        const float *dq = a->dq, *dk = a->dk; // the gradients at the projections' outputs (biases added)
        if (c->qk_norm) { // through each head's norm, into buffers of their own: a.dk stays the hook's
            const int H = c->n_heads, KVH = c->n_kv_heads;
            rmsnorm_backward(a->dq_pre, NULL, a->dq, a->q_pre + (size_t)l * N * QD, a->q_rstd + (size_t)l * N * H, w.qn,
                             r0 * H, r1 * H, hd);
            rmsnorm_backward(a->dk_pre, NULL, a->dk, a->k_pre + (size_t)l * N * KD, a->k_rstd + (size_t)l * N * KVH,
                             w.kn, r0 * KVH, r1 * KVH, hd);
            dq = a->dq_pre, dk = a->dk_pre;
        }
        mm_nn(rows, D, QD, 1.0f, dq + (size_t)r0 * QD, QD, w.wq, D, 0.0f, a->dxn + rd, D);
        mm_nn(rows, D, KD, 1.0f, dk + (size_t)r0 * KD, KD, w.wk, D, 1.0f, a->dxn + rd, D);
        mm_nn(rows, D, VD, 1.0f, a->dv + (size_t)r0 * VD, VD, w.wv, D, 1.0f, a->dxn + rd, D);
    }
    rmsnorm_backward(a->dx, a->dx2, a->dxn, a->x + (size_t)2 * l * N * D, a->attn_rstd + (size_t)l * N, w.an, r0,
                     r1, D);
}

void train_net_backward(TrainNet *n) {
    DIMS;
    TrainActs *a = &n->a;
    int row_tasks = (N + ROW_CHUNK - 1) / ROW_CHUNK;
    const int params = n->grads_kind == TRAIN_GRADS_PARAMS;
    Job j = {n, 0};
    pool_run_tasks(n->pool, row_tasks, bwd_head, &j);
    if (params) {
        GradJob gj = {.n = n};
        grad_job_add(&gj, a->probs, a->final_xn, NULL, c->separate_output ? n->g.output : n->g.token_embedding, V, D);
        grad_job_add(&gj, a->dxn, a->x + (size_t)2 * c->n_layers * N * D, a->final_rstd, n->g.final_norm, D, 0);
        grad_job_run(&gj);
    }
    for (int l = c->n_layers - 1; l >= 0; l--) {
        j.l = l;
        pool_run_tasks(n->pool, row_tasks, bwd_ffn, &j);
        if (!params) { // the activations' gradients only: the hook's (no parameter gradients to point into)
            pool_run_tasks(n->pool, n->B * ad.att_kv_heads, bwd_attention, &j);
            pool_run_tasks(n->pool, row_tasks, bwd_attn_in, &j);
            if (n->layer_grad_hook) n->layer_grad_hook(n->hook_ctx, n, l);
            continue;
        }
        LayerW gw = layer_weights(c, &n->g, l);
        GradJob g1 = {.n = n};
        grad_job_add(&g1, a->dx, a->hg + (size_t)l * N * F, NULL, (float *)gw.w2, D, F);
        grad_job_add(&g1, a->dh1, a->ffn_xn + (size_t)l * N * D, NULL, (float *)gw.w1, F, D);
        grad_job_add(&g1, a->dh3, a->ffn_xn + (size_t)l * N * D, NULL, (float *)gw.w3, F, D);
        grad_job_add(&g1, a->dx2, a->att_out + (size_t)l * N * OD, NULL, (float *)gw.wo, D, OD);
        grad_job_add(&g1, a->dxn, a->x + (size_t)(2 * l + 1) * N * D, a->ffn_rstd + (size_t)l * N, (float *)gw.fn, D,
                     0);
        grad_job_run(&g1);
        pool_run_tasks(n->pool, n->B * ad.att_kv_heads, bwd_attention, &j);
        pool_run_tasks(n->pool, row_tasks, bwd_attn_in, &j);
        if (n->layer_grad_hook) n->layer_grad_hook(n->hook_ctx, n, l);
        GradJob g2 = {.n = n};
        const float *xn = a->attn_xn + (size_t)l * N * D;
        // Wq's and Wk's gradients are taken before the q and k norms (and at the biases)
        const float *dq_in = c->qk_norm ? a->dq_pre : a->dq, *dk_in = c->qk_norm ? a->dk_pre : a->dk;
        grad_job_add(&g2, dq_in, xn, NULL, (float *)gw.wq, QD, D);
        if (ad.mla) {
            const float *kv_pre = a->kv_pre + (size_t)l * N * ad.LAT, *ckv = a->ckv + (size_t)l * N * ad.LAT;
            grad_job_add(&g2, a->dckv_pre, xn, NULL, (float *)gw.w_dkv, ad.LAT, D);
            grad_job_add(&g2, a->dckv, kv_pre, a->kv_rstd + (size_t)l * N, (float *)gw.kv_norm, ad.LAT, 0);
            grad_job_add(&g2, a->dkr, xn, NULL, (float *)gw.w_kr, ad.DR, D);
            grad_job_add(&g2, a->dknope, ckv, NULL, (float *)gw.w_uk, OD, ad.LAT);
            grad_job_add(&g2, a->dv, ckv, NULL, (float *)gw.w_uv, VD, ad.LAT);
        } else {
            grad_job_add(&g2, dk_in, xn, NULL, (float *)gw.wk, KD, D);
            grad_job_add(&g2, a->dv, xn, NULL, (float *)gw.wv, VD, D);
            if (c->qkv_bias) {
                grad_job_add_bias(&g2, dq_in, (float *)gw.bq, QD);
                grad_job_add_bias(&g2, dk_in, (float *)gw.bk, KD);
                grad_job_add_bias(&g2, a->dv, (float *)gw.bv, VD);
            }
            if (c->qk_norm) { // one gain for every head: rows of head_dim, tokens × heads of them
                grad_job_add(&g2, a->dq, a->q_pre + (size_t)l * N * QD, a->q_rstd + (size_t)l * N * c->n_heads,
                             (float *)gw.qn, hd, 0)->rows = N * c->n_heads;
                grad_job_add(&g2, a->dk, a->k_pre + (size_t)l * N * KD, a->k_rstd + (size_t)l * N * c->n_kv_heads,
                             (float *)gw.kn, hd, 0)->rows = N * c->n_kv_heads;
            }
        }
        grad_job_add(&g2, a->dxn, a->x + (size_t)2 * l * N * D, a->attn_rstd + (size_t)l * N, (float *)gw.an, D, 0);
        grad_job_run(&g2);
    }
    if (params) encoder_backward(n->g.token_embedding, a->dx, n->inputs, N, D);
}

void train_net_keys_pre_rope(const TrainNet *n, int l, float *out) {
    const ModelConfig *c = &n->c;
    int N = n->B * n->T, KD = c->n_kv_heads * c->head_dim;
    memcpy(out, n->a.k + (size_t)l * N * KD, sizeof(float) * (size_t)N * KD);
    // RoPE's backward is its inverse: the rotation is orthogonal.
    rope_backward(out, KD, c->n_kv_heads, c->head_dim, c->head_dim, c->rope_halves, n->a.rope_cos, n->a.rope_sin, 0, N,
                  n->T);
}
