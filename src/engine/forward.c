// The decode step: rows of (sequence, position) in, each row's key and value encoded into its
// sequence's cache, logits out. Read batch_forward top to bottom: it is the path in
// docs/architecture.md, "The line a token travels", for every row at once.
#include "forward.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>


#include "calloc_lines.h"
#include "cpu.h"
#include "forward_kernels.h"
#include "rope.h"
#include "threadpool.h"

// ---------------------------------------------------------------------------------------------
// Kernels. The hot ones (matvec_rows, scaled_softmax) are in forward_kernels.c, built once per
// kernel set; the build this CPU runs is chosen once.

const ForwardKernels *forward_kernels_for(Isa isa) {
    if (isa > cpu_isa_supported()) return NULL;
    switch (isa) {
#ifdef MICRO_KERNELS_AVX2
    case ISA_AVX2: return &forward_kernels_avx2;
#endif
#ifdef MICRO_KERNELS_AVX512
    case ISA_AVX512: return &forward_kernels_avx512;
#endif
    case ISA_PORTABLE: return &forward_kernels_portable;
    default: return NULL;
    }
}

const ForwardKernels *forward_kernels(void) {
    for (int isa = (int)cpu_isa();; isa--) {
        const ForwardKernels *k = forward_kernels_for((Isa)isa);
        if (k) return k;
    }
}


// rmsnorm and rope stay here: little work per token, each in a fixed (sequential) order.

// out = x / rms(x) · gain, from the sum of squares ss (in order of i).
static void rmsnorm_scale(float *out, const float *x, const float *gain, int n, float eps, float ss) {
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    // A sum of squares that overflowed makes inv 0 and the output 0, so an overflowing model would
    // give finite nonsense (uniform logits). NaN carries the overflow to the logits, where the
    // commands report it; finite sums are untouched.
    if (isinf(ss)) inv = NAN;
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * gain[i];
}

static void rmsnorm(float *out, const float *x, const float *gain, int n, float eps) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    rmsnorm_scale(out, x, gain, n, eps, ss);
}

// What an architecture does to a row's q, k and v between their products and RoPE: Qwen2's biases,
// Qwen3's RMSNorm of each head (ModelConfig); nothing in micro's models.
static void attention_inputs(const ModelConfig *p, const ModelWeights *w, int l, float *q, float *k, float *v) {
    const size_t qd = (size_t)p->n_heads * p->head_dim, kd = (size_t)p->n_kv_heads * p->head_dim;
    if (p->qkv_bias) {
        const float *bq = w->bq + (size_t)l * qd, *bk = w->bk + (size_t)l * kd, *bv = w->bv + (size_t)l * kd;
        for (size_t i = 0; i < qd; i++) q[i] += bq[i];
        for (size_t i = 0; i < kd; i++) k[i] += bk[i], v[i] += bv[i];
    }
    if (p->qk_norm) {
        const float *qn = w->q_norm + (size_t)l * p->head_dim, *kn = w->k_norm + (size_t)l * p->head_dim;
        const size_t hd = (size_t)p->head_dim;
        for (int h = 0; h < p->n_heads; h++) rmsnorm(q + h * hd, q + h * hd, qn, p->head_dim, p->norm_eps);
        for (int h = 0; h < p->n_kv_heads; h++) rmsnorm(k + h * hd, k + h * hd, kn, p->head_dim, p->norm_eps);
    }
}

// rmsnorm of n_rows rows `stride` apart (out and x alike): eight rows' sums of squares side by side,
// each still in order of i, so that their chains of adds overlap (one row's waited on each add).
static void rmsnorm_rows(float *out, const float *x, const float *gain, int n, float eps, int n_rows, size_t stride) {
    enum { SIDE = 8 };
    int r = 0;
    for (; r + SIDE <= n_rows; r += SIDE) {
        float ss[SIDE] = {0};
        const float *xr = x + (size_t)r * stride;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < SIDE; k++) ss[k] += xr[(size_t)k * stride + i] * xr[(size_t)k * stride + i];
        for (int k = 0; k < SIDE; k++)
            rmsnorm_scale(out + (size_t)(r + k) * stride, xr + (size_t)k * stride, gain, n, eps, ss[k]);
    }
    for (; r < n_rows; r++) rmsnorm(out + (size_t)r * stride, x + (size_t)r * stride, gain, n, eps);
}

// Rotates the pairs (rope.h) of every head of vec by the angles of position pos.
static void rope(float *vec, int n_heads, int head_dim, int halves, const float *cos_t, const float *sin_t) {
    for (int h = 0; h < n_heads; h++) rope_head(vec + h * head_dim, head_dim, halves, cos_t, sin_t);
}

int attention_head(const PagedStream *ks, const PagedStream *vs, const PagedStream *next_k, const PagedStream *next_v,
                   int kv_head, const float *q, int rope_halves, const float *rope_cos, const float *rope_sin, float *att,
                   float *out, int n) {
    if (ks->blocks[0].prerope) // keys kept before RoPE: rotated as they are read
        paged_scores_rope(ks, kv_head, q, rope_halves, rope_cos, rope_sin, att, n);
    else
        paged_scores_then(ks, next_k, kv_head, q, att, n);
    const int top = forward_kernels()->scaled_softmax(att, n, 1.0f / sqrtf((float)ks->blocks[0].head_dim));
    paged_mix_then(vs, next_v, kv_head, att, out, n);
    return top;
}

int attention_heads_fit(const ModelConfig *p, const PagedStream *ks) {
    return p->n_kv_heads == p->n_heads && p->latent_dim == 0 && !ks->blocks[0].prerope;
}

void attention_heads(const PagedStream *ks, const PagedStream *vs, const PagedStream *next_k, const PagedStream *next_v,
                     int n_heads, const float *q, float *att, size_t stride, float *out, int n, int *top) {
    const float scale = 1.0f / sqrtf((float)ks->blocks[0].head_dim);
    paged_scores_heads(ks, next_k, n_heads, q, att, stride, n);
    for (int h = 0; h < n_heads; h++) {
        const int t = forward_kernels()->scaled_softmax(att + (size_t)h * stride, n, scale);
        if (top) top[h] = t;
    }
    paged_mix_heads(vs, next_v, n_heads, att, stride, out, n);
}

// ---------------------------------------------------------------------------------------------
// Matrix products for all rows: forward_kernels' matmul_rows, whose every output is matvec_rows's
// dot product, so a row's numbers are the same in any batch and any split of weight rows between
// threads. The kernel takes four weight rows at a time against every batch row, so those four stay
// in L1 whatever the range; one call takes a thread's whole range so that the kernel asks for the
// next weight rows ahead all the way through it (in tiles of 64 rows it asked for none at each
// tile's end, and the next tile's first rows came from DRAM unasked: a 135M-parameter model's
// products on one thread, weights not in cache, ran ~5% faster without the tiles).

// out[r·os + o] = W[o,:] · x[r·xs, n] for weight rows o in [o0, o1) and rows r in [0, n_rows).
static void matmul_rows(float *out, size_t os, const float *W, const float *x, size_t xs, int n, int n_rows, int o0,
                        int o1) {
    const ForwardKernels *k = forward_kernels();
    if (n_rows == 1) { // one row: the matrix-vector loop, which prefetches the next weight rows
        k->matvec_rows(out, W, x, n, o0, o1);
        return;
    }
    if (o0 < o1) k->matmul_rows(out, os, W, x, xs, n, n_rows, o0, o1);
}

// ---------------------------------------------------------------------------------------------
// Parallel tasks. Each gets the step and the layer it works on.

typedef struct {
    BatchForward *b;
    const BatchRow *rows;
    int n_rows;
    int layer;
    int first_row; // task_row_heads' row
} StepCtx;

// A step's attention widths: qw a row's queries (n_heads·(head_dim + rope_dim)), kw and vw what it
// appends to the key and value slots (kv_layout_of), ow the heads' outputs (n_heads·head_dim); rot
// the numbers RoPE turns in each head (head_dim, or rope_dim under latent attention).
typedef struct {
    int qw, kw, vw, ow, rot, mla;
} StepDims;

static StepDims step_dims(const ModelConfig *p) {
    const KVLayout l = kv_layout_of(p);
    return (StepDims){p->n_heads * model_qk_dim(p), l.n_heads[0] * l.head_dim[0], l.n_heads[1] * l.head_dim[1],
                      p->n_heads * p->head_dim, p->latent_dim > 0 ? p->rope_dim : p->head_dim, p->latent_dim > 0};
}

// q, and what the cache's two slots take: keys and values, or under latent attention the latent
// before its norm (W_dkv) and the RoPE key before RoPE (W_kr).
static void task_qkv(void *arg, int t, int nt) {
    StepCtx *c = arg;
    const ModelConfig *p = &c->b->model->config;
    const ModelWeights *w = &c->b->model->w;
    const StepDims sd = step_dims(p);
    const int qd = sd.qw, kd = sd.kw, vd = sd.vw, dim = p->dim;
    const size_t l = (size_t)c->layer;
    const float *wk = sd.mla ? w->w_dkv : w->wk, *wv = sd.mla ? w->w_kr : w->wv;
    int b, e;
    // One row range over the stacked [q; k; v] outputs keeps both threads equally busy.
    pool_share(qd + kd + vd, t, nt, &b, &e);
    int qb = b < qd ? b : qd, qe = e < qd ? e : qd;
    matmul_rows(c->b->q, (size_t)qd, w->wq + l * qd * dim, c->b->xb, (size_t)dim, dim, c->n_rows, qb, qe);
    int kb = b - qd, ke = e - qd;
    kb = kb < 0 ? 0 : kb > kd ? kd : kb;
    ke = ke < 0 ? 0 : ke > kd ? kd : ke;
    matmul_rows(c->b->k, (size_t)kd, wk + l * kd * dim, c->b->xb, (size_t)dim, dim, c->n_rows, kb, ke);
    int vb = b - qd - kd, ve = e - qd - kd;
    vb = vb < 0 ? 0 : vb;
    ve = ve < 0 ? 0 : ve;
    matmul_rows(c->b->v, (size_t)vd, wv + l * vd * dim, c->b->xb, (size_t)dim, dim, c->n_rows, vb, ve);
}

// The codec encodes here, once per row: each row writes only its own sequence's blocks.
static void task_append(void *arg, int r, int thread) {
    (void)thread;
    StepCtx *c = arg;
    const ModelConfig *p = &c->b->model->config;
    const StepDims sd = step_dims(p);
    kvseq_append(c->rows[r].seq, c->layer, c->b->k + r * (size_t)sd.kw, c->b->v + r * (size_t)sd.vw);
}

// What eval and micro attention keep of a (row, head)'s weights att[0, n): the layer micro attention
// draws, and top, which position this head attends to most (the evaluator's measure of whether
// quantised keys still pick out the right tokens; the first of equal weights wins, so it is well
// defined), as scaled_softmax found it.
static void note_attention(BatchForward *b, int r, int layer, int h, const float *att, int n, int top) {
    const ModelConfig *p = &b->model->config;
    if (r == 0 && layer == b->keep_layer) memcpy(b->kept_att + (size_t)h * b->context, att, sizeof(float) * (size_t)n);
    if (b->track_top) b->top_position[((size_t)r * p->n_layers + layer) * p->n_heads + h] = top;
}

// Heads per attention task: a row's heads together when there are rows enough to keep every thread
// busy, so that one core reads a row's cache blocks and its heads after the first find them in cache
// (the codecs' kernels ask for the next head's bytes as they read their own); else one head per task
// (a single sequence's heads shared between the threads).
static int attention_heads_per_task(const StepCtx *c) {
    return c->n_rows >= 4 * pool_threads(c->b->pool) ? c->b->model->config.n_heads : 1;
}

// The sequence of the row this thread most likely attends after row r, when each task is a row: the
// task queue hands out rows in order, one to each thread in turn (NULL past the last).
static const KVSeq *next_row_seq(const StepCtx *c, int r) {
    const int next = r + pool_threads(c->b->pool);
    return next < c->n_rows ? c->rows[next].seq : NULL;
}

// One (row, head) under latent attention, absorbed as DeepSeek-V2 decodes: the head's query taken
// into the latent's space (q̃ = W_uk,hᵀ q), scores q̃·c_j + q^R·k^R_j from the two slots' codecs,
// the latents mixed by the weights, and the mix taken out through W_uv,h. A step reads only the
// latent and the RoPE key.
// The head's query in the latent's space, q̃ = W_uk,hᵀ q (each q̃_a summed in order of i) ...
static void latent_query(const Model *m, int layer, int head, const float *q, float *qt) {
    const ModelConfig *p = &m->config;
    const int hd = p->head_dim, lat = p->latent_dim;
    const float *w_uk = m->w.w_uk + ((size_t)layer * p->n_heads * hd + (size_t)head * hd) * lat;
    for (int a = 0; a < lat; a++) qt[a] = 0.0f;
    for (int i = 0; i < hd; i++)
        for (int a = 0; a < lat; a++) qt[a] += w_uk[(size_t)i * lat + a] * q[i];
}

// ... and the head's output from the mixed latents, W_uv,h · mix.
static void latent_output(const Model *m, int layer, int head, const float *mix, float *out) {
    const ModelConfig *p = &m->config;
    const int hd = p->head_dim, lat = p->latent_dim;
    const float *w_uv = m->w.w_uv + ((size_t)layer * p->n_heads * hd + (size_t)head * hd) * lat;
    forward_kernels()->matvec_rows(out, w_uv, mix, lat, 0, hd);
}

int attention_latent_head(const Model *m, int layer, int head, const PagedStream *latent, const PagedStream *rope_key,
                          const float *q, float *qt, float *mix, float *att, float *att_rope, float *out, int n) {
    const ModelConfig *p = &m->config;
    latent_query(m, layer, head, q, qt);
    paged_scores(latent, 0, qt, att, n);
    paged_scores(rope_key, 0, q + p->head_dim, att_rope, n);
    for (int j = 0; j < n; j++) att[j] += att_rope[j];
    const int top = forward_kernels()->scaled_softmax(att, n, 1.0f / sqrtf((float)model_qk_dim(p)));
    paged_mix(latent, 0, att, mix, n);
    latent_output(m, layer, head, mix, out);
    return top;
}

static void attend_latent(StepCtx *c, int r, int h) {
    BatchForward *b = c->b;
    const ModelConfig *p = &b->model->config;
    const StepDims sd = step_dims(p);
    const int H = p->n_heads, lat = p->latent_dim, l = c->layer;
    const KVSeq *seq = c->rows[r].seq;
    const int n = c->rows[r].pos + 1;
    const size_t xs = (size_t)(sd.ow > p->dim ? sd.ow : p->dim), at = (size_t)r * H + h;
    float *att = b->att + at * b->context;
    const int top = attention_latent_head(b->model, l, h, &seq->k[l], &seq->v[l],
                                          b->q + (size_t)r * sd.qw + (size_t)h * model_qk_dim(p), b->latent_q + at * lat,
                                          b->latent_mix + at * lat, att, b->att_rope + at * b->context,
                                          b->xb2 + (size_t)r * xs + (size_t)h * p->head_dim, n);
    note_attention(b, r, l, h, att, n, top);
}

// One (row, head): attention over the row's own sequence, read from what its codec stored.
static void attend(StepCtx *c, int r, int h) {
    BatchForward *b = c->b;
    const ModelConfig *p = &b->model->config;
    if (p->latent_dim > 0) {
        attend_latent(c, r, h);
        return;
    }
    const int H = p->n_heads, hd = p->head_dim, group = p->n_heads / p->n_kv_heads;
    const KVSeq *seq = c->rows[r].seq;
    const int n = c->rows[r].pos + 1;
    float *att = b->att + ((size_t)r * H + h) * b->context;
    const size_t qd = (size_t)H * hd, xs = qd > (size_t)p->dim ? qd : (size_t)p->dim;
    const KVSeq *nseq = attention_heads_per_task(c) == H ? next_row_seq(c, r) : NULL;
    const int top = attention_head(&seq->k[c->layer], &seq->v[c->layer], nseq ? &nseq->k[c->layer] : NULL,
                                   nseq ? &nseq->v[c->layer] : NULL, h / group, b->q + r * qd + h * hd, p->rope_halves,
                                   b->rope_cos, b->rope_sin, att, b->xb2 + r * xs + h * hd, n);
    note_attention(b, r, c->layer, h, att, n, top);
}

// One task of the fast evaluator's attention: a tile of up to SPAN_TILE consecutive rows at one
// head, its queries, scores and weights (rows `as` apart) and outputs (rows `xs` apart). Row t
// attends over the tile's first n0 positions and t more: its ends[t] = n0 + t.
typedef struct {
    BatchForward *b;
    const KVSeq *seq;
    int layer, g, hd, nt, n0, thread;
    const float *q;
    size_t qd, as, xs;
    float *att, *out;
    int ends[SPAN_TILE];
    // [role][t]: of a role whose tokens settle (SpanMirror.settles), the tokens settled when row t
    // attended (its codec's settled() at the row's position, which never decreases: row 0's is the
    // least).
    int settled[2][SPAN_TILE];
} SpanTile;

static ScoreOrder score_order(MirrorKeySum sum) {
    return sum == MIRROR_KEYS_IN_PAIRS ? SCORE_IN_PAIRS : sum == MIRROR_KEYS_EVEN_ODD ? SCORE_EVEN_ODD : SCORE_IN_ORDER;
}

// A tile's scores from the key mirror (span_mirror.h): plain products with the transposed x̃, then
// the codec's form (factor, offset, second sum, sink tokens scored again).
static void span_tile_scores(const SpanTile *st) {
    BatchForward *b = st->b;
    const SpanMirror *mm = &b->mirror;
    const ForwardKernels *fk = forward_kernels();
    const int hd = st->hd, nt = st->nt, n0 = st->n0, l = st->layer, g = st->g, thread = st->thread;
    const KVSeq *seq = st->seq;
    const float *q = st->q;
    const size_t qd = st->qd, as = st->as;
    float *att = st->att;
    const float *kt = span_mirror_keys(mm, l, g), *qm = q;
    size_t qms = qd;
    float qt[SPAN_TILE * MICRO_MAX_WIDTH]; // the rows' q̃ (MirrorOps.query); a codec's head_dim is ≤ MICRO_MAX_WIDTH
    const MirrorOps *ops = mm->ops[KV_ROLE_KEY];
    if (mm->settles[KV_ROLE_KEY]) { // the open forms over the tile's open positions, then each row's settled ones
        fk->scores_transposed(att, as, q, qd, nt, span_mirror_keys_open(mm, l, g), hd, st->settled[KV_ROLE_KEY][0],
                              st->ends, score_order(ops->open_key_sum));
        fk->scores_transposed(att, as, q, qd, nt, kt, hd, 0, st->settled[KV_ROLE_KEY],
                              score_order(ops->settled_key_sum));
        return;
    }
    if (ops && ops->query) {
        for (int t = 0; t < nt; t++) ops->query(mm->rule[KV_ROLE_KEY], q + t * qd, qt + t * hd);
        qm = qt, qms = (size_t)hd;
    }
    fk->scores_transposed(att, as, qm, qms, nt, kt, hd, 0, st->ends,
                          ops ? score_order(ops->settled_key_sum) : SCORE_IN_ORDER);
    if (ops && ops->has_second) { // factor_j · (the sum + aux_j · the second sum), as the codec's kernel
        const float *kt2 = span_mirror_keys2(mm, l, g), *fac = span_mirror_factors(mm, KV_ROLE_KEY, l, g);
        const float *aux = span_mirror_aux(mm, KV_ROLE_KEY, l, g);
        float *att2 = b->att2 + (size_t)thread * SPAN_TILE * b->att2_span;
        const size_t as2 = b->att2_span;
        for (int t = 0; t < nt; t++) ops->query2(mm->rule[KV_ROLE_KEY], q + t * qd, qt + t * hd);
        fk->scores_transposed(att2, as2, qt, (size_t)hd, nt, kt2, hd, 0, st->ends, SCORE_IN_ORDER);
        fk->factor_rows(att, as, att2, as2, nt, st->ends, fac, aux, NULL, FACTOR_SECOND);
    } else if (mm->offsets[KV_ROLE_KEY]) { // factor_j · the sum + offset_j · Σ_d q̃_d, as the codec's kernel
        const float *fac = span_mirror_factors(mm, KV_ROLE_KEY, l, g);
        const float *off = span_mirror_offsets(mm, KV_ROLE_KEY, l, g);
        float qsum[SPAN_TILE];
        for (int t = 0; t < nt; t++) {
            qsum[t] = 0.0f;
            for (int d = 0; d < hd; d++) qsum[t] += qm[t * qms + d];
        }
        fk->factor_rows(att, as, NULL, 0, nt, st->ends, fac, off, qsum, FACTOR_OFFSET);
    } else if (mm->factors[KV_ROLE_KEY]) { // factor_j · the sum (plus_zero: 0 + that), as the codec's kernel
        fk->factor_rows(att, as, NULL, 0, nt, st->ends, span_mirror_factors(mm, KV_ROLE_KEY, l, g), NULL, NULL,
                        ops->plus_zero ? FACTOR_PLUS_ZERO : FACTOR_TIMES);
    }
    if (ops && ops->fix_scores) // a transform's sink tokens scored again, its outlier entries put right
        for (int t = 0; t < nt; t++) paged_mirror_fix_scores(&seq->k[l], ops, g, q + t * qd, att + t * as, n0 + t);
}

// A tile's weighted sums from the value mirror, in the codec's form (factors, offsets, a second
// sum, correction rows, post), into out.
static void span_tile_mix(const SpanTile *st) {
    BatchForward *b = st->b;
    const SpanMirror *mm = &b->mirror;
    const ForwardKernels *fk = forward_kernels();
    const int hd = st->hd, nt = st->nt, n0 = st->n0, l = st->layer, g = st->g, thread = st->thread;
    const KVSeq *seq = st->seq;
    const size_t as = st->as, xs = st->xs;
    float *att = st->att, *out = st->out;
    const float *v = span_mirror_values(mm, l, g);
    const MirrorOps *ops = mm->ops[KV_ROLE_VALUE];
    enum { HD = 64 }; // a split codec's head_dim is <= 64
    if (mm->settles[KV_ROLE_VALUE]) { // each row's settled tokens, then its open ones, on in the same two chains
        float even[SPAN_TILE * HD] = {0}, odd[SPAN_TILE * HD] = {0};
        const int *settled = st->settled[KV_ROLE_VALUE];
        if (ops->pair_groups)
            fk->mix_rows_pairs(even, odd, HD, att, as, nt, v, hd, settled);
        else
            fk->mix_rows_split(even, odd, HD, att, as, nt, v, hd, 0, NULL, settled);
        fk->mix_rows_split(even, odd, HD, att, as, nt, span_mirror_values_open(mm, l, g), hd,
                           settled[0], settled, st->ends);
        for (int t = 0; t < nt; t++)
            for (int d = 0; d < hd; d++) out[t * xs + d] = even[t * HD + d] + odd[t * HD + d];
        return;
    }
    float p_first[SPAN_TILE][MIRROR_MAX_FIRST]; // the first tokens' weights for post, before the factors
    for (int t = 0; ops && t < nt; t++)
        for (int j = 0; j < ops->first && j < n0 + t; j++) p_first[t][j] = att[t * as + j];
    // Or every token's (all_weights): in att2, which such a mirror has for nothing else (span_mirror.c).
    float *p_all = ops && ops->all_weights ? b->att2 + (size_t)thread * SPAN_TILE * b->att2_span : NULL;
    for (int t = 0; p_all && t < nt; t++) memcpy(p_all + t * b->att2_span, att + t * as, sizeof(float) * (size_t)(n0 + t));
    float offset_sum[SPAN_TILE] = {0}; // Σ_j p_j · offset_j, from the weights before the factors
    if (mm->offsets[KV_ROLE_VALUE]) {
        const float *off = span_mirror_offsets(mm, KV_ROLE_VALUE, l, g);
        int t = 0;
        for (; t + 4 <= nt; t += 4) { // four rows' sums side by side in registers, each in order of j
            const float *a = att + t * as;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
            for (int j = 0; j < n0; j++) {
                const float o = off[j];
                s0 += a[j] * o, s1 += a[as + j] * o, s2 += a[2 * as + j] * o, s3 += a[3 * as + j] * o;
            }
            offset_sum[t] = s0, offset_sum[t + 1] = s1, offset_sum[t + 2] = s2, offset_sum[t + 3] = s3;
        }
        for (; t < nt; t++)
            for (int j = 0; j < n0; j++) offset_sum[t] += att[t * as + j] * off[j];
        for (int t = 1; t < nt; t++)
            for (int j = n0; j < n0 + t; j++) offset_sum[t] += att[t * as + j] * off[j];
    }
    // The weights the mix reads: att, or with correction rows (p_j · factor_j, p_j) a token in att2.
    float *att2 = b->att2 ? b->att2 + (size_t)thread * SPAN_TILE * b->att2_span : NULL;
    const size_t as2 = b->att2_span;
    const int per = mm->value_rows;
    const float *w = per > 1 ? att2 : att;
    const size_t ws = per > 1 ? as2 : as;
    const float *vfac = mm->factors[KV_ROLE_VALUE] ? span_mirror_factors(mm, KV_ROLE_VALUE, l, g) : NULL;
    if (per > 1) // in one pass: p_j · factor_j, as the codec's kernel forms each token's weight, then p_j
        fk->factor_rows(att, as, att2, as2, nt, st->ends, vfac, NULL, NULL, FACTOR_PAIRS);
    else if (vfac) // p_j · factor_j (as factor_j · p_j: one product)
        fk->factor_rows(att, as, NULL, 0, nt, st->ends, vfac, NULL, NULL, FACTOR_TIMES);
    float acc2[SPAN_TILE * MICRO_MAX_WIDTH]; // the second sums (has_second), a codec's head_dim is ≤ MICRO_MAX_WIDTH
    if (ops && ops->has_second) {
        const float *aux = span_mirror_aux(mm, KV_ROLE_VALUE, l, g), *v2 = span_mirror_values2(mm, l, g);
        for (int t = 0; t < nt; t++) ops->weights2(mm->rule[KV_ROLE_VALUE], att + t * as, aux, att2 + t * as2, n0 + t);
        memset(acc2, 0, sizeof(float) * (size_t)(nt * hd));
        fk->mix_rows(acc2, (size_t)hd, att2, as2, nt, v2, hd, 0, st->ends);
    }
    int rows_end[SPAN_TILE]; // each row's value rows: `per` a token
    for (int t = 0; t < nt; t++) rows_end[t] = per * st->ends[t];
    if (ops && ops->split_mix) { // even and odd tokens apart (or pairs of tokens), then added, as the codec's mix does
        float even[SPAN_TILE * HD] = {0}, odd[SPAN_TILE * HD] = {0};
        if (ops->pair_groups)
            fk->mix_rows_pairs(even, odd, HD, w, ws, nt, v, hd, rows_end);
        else
            fk->mix_rows_split(even, odd, HD, w, ws, nt, v, hd, 0, NULL, rows_end);
        for (int t = 0; t < nt; t++)
            for (int d = 0; d < hd; d++) out[t * xs + d] = even[t * HD + d] + odd[t * HD + d];
    } else {
        for (int t = 0; t < nt; t++) memset(out + t * xs, 0, sizeof(float) * (size_t)hd);
        fk->mix_rows(out, xs, w, ws, nt, v, hd, 0, rows_end);
    }
    if (mm->offsets[KV_ROLE_VALUE])
        for (int t = 0; t < nt; t++)
            for (int d = 0; d < hd; d++) out[t * xs + d] = out[t * xs + d] + offset_sum[t];
    if (ops && ops->post)
        for (int t = 0; t < nt; t++) {
            float acc[MICRO_MAX_WIDTH]; // a codec's head_dim is ≤ MICRO_MAX_WIDTH
            memcpy(acc, out + t * xs, sizeof(float) * (size_t)hd);
            paged_mirror_post(&seq->v[l], ops, g, p_all ? p_all + t * b->att2_span : p_first[t], acc, acc2 + t * hd,
                              out + t * xs, n0 + t);
        }
}

// A span's (tile of up to SPAN_TILE consecutive rows, head), once every row's key and value is in
// the cache: each row attends over its first pos + 1 tokens as they were at its step (a stream
// whose tokens settle reads each in the form the row's step saw, from the mirror's two). Streams
// that read back go through the mirror, the tile's common positions together and each row's last
// few alone (every sum in its codec's order); other streams through their codec's kernels, row by
// row.
static void task_span_attention(void *arg, int i, int thread) {
    StepCtx *c = arg;
    BatchForward *b = c->b;
    const ForwardKernels *fk = forward_kernels();
    const ModelConfig *p = &b->model->config;
    const int n_tiles = (c->n_rows + SPAN_TILE - 1) / SPAN_TILE;
    const int H = p->n_heads, hd = p->head_dim, h = i / n_tiles, g = h / (p->n_heads / p->n_kv_heads), l = c->layer;
    const int r0 = i % n_tiles * SPAN_TILE, nt = c->n_rows - r0 < SPAN_TILE ? c->n_rows - r0 : SPAN_TILE;
    const SpanMirror *mm = &b->mirror;
    const KVSeq *seq = c->rows[0].seq;
    const size_t as = (size_t)H * b->context, qd = (size_t)H * hd, xs = qd > (size_t)p->dim ? qd : (size_t)p->dim;
    const float *q = b->q + r0 * qd + h * hd;
    float *att = b->att + ((size_t)r0 * H + h) * b->context, *out = b->xb2 + r0 * xs + h * hd;
    const int n0 = c->rows[r0].pos + 1; // the tile's first row attends over the fewest
    SpanTile st = {b, seq, l, g, hd, nt, n0, thread, q, qd, as, xs, att, out, {0}, {{0}}};
    for (int t = 0; t < nt; t++) st.ends[t] = n0 + t;
    for (int r = 0; r < 2; r++) {
        if (!mm->settles[r]) continue;
        const KVStream *rule = &seq->pool->rule[r];
        for (int t = 0; t < nt; t++) st.settled[r][t] = rule->ops->settled(rule->state, n0 + t - 1);
    }
    if (mm->mirrored[KV_ROLE_KEY])
        span_tile_scores(&st);
    else
        for (int t = 0; t < nt; t++) paged_scores(&seq->k[l], g, q + t * qd, att + t * as, n0 + t);
    // The weights as they are, before a value mirror's factors scale them in place.
    for (int t = 0; t < nt; t++)
        note_attention(b, r0 + t, l, h, att + t * as, n0 + t,
                       fk->scaled_softmax(att + t * as, n0 + t, 1.0f / sqrtf((float)hd)));
    if (mm->mirrored[KV_ROLE_VALUE])
        span_tile_mix(&st);
    else
        for (int t = 0; t < nt; t++) paged_mix(&seq->v[l], g, att + t * as, out + t * xs, n0 + t);
}

// A span's (tile of rows from first_row on, head) under latent attention: attention_latent_head's
// steps for each row, with the scores and the mix of the slots that read back taken from the latent
// mirror, the tile's common positions together and each row's last few alone, in the read-back
// order (the decode loop's bits); the other slots through their codecs' kernels, row by row.
static void task_span_latent(void *arg, int i, int thread) {
    (void)thread;
    StepCtx *c = arg;
    BatchForward *b = c->b;
    const ForwardKernels *fk = forward_kernels();
    const ModelConfig *p = &b->model->config;
    const StepDims sd = step_dims(p);
    const LatentMirror *lm = &b->latent_mirror;
    const int n_tiles = (c->n_rows - c->first_row + SPAN_TILE - 1) / SPAN_TILE, H = p->n_heads, lat = p->latent_dim;
    const int h = i / n_tiles, r0 = c->first_row + i % n_tiles * SPAN_TILE, l = c->layer;
    const int nt = c->n_rows - r0 < SPAN_TILE ? c->n_rows - r0 : SPAN_TILE, n0 = c->rows[r0].pos + 1;
    const KVSeq *seq = c->rows[0].seq;
    const size_t as = (size_t)H * b->context, ls = (size_t)H * lat, at = (size_t)r0 * H + h;
    const size_t xs = (size_t)(sd.ow > p->dim ? sd.ow : p->dim), qs = (size_t)sd.qw;
    const float *q = b->q + (size_t)r0 * qs + (size_t)h * model_qk_dim(p), *q_rope = q + p->head_dim;
    float *att = b->att + at * b->context, *att_rope = b->att_rope + at * b->context;
    float *qt = b->latent_q + at * lat, *mix = b->latent_mix + at * lat;
    int ends[SPAN_TILE]; // row t attends over n0 + t positions
    for (int t = 0; t < nt; t++) ends[t] = n0 + t;
    for (int t = 0; t < nt; t++) latent_query(b->model, l, h, q + t * qs, qt + t * ls);
    if (lm->scores[0]) {
        const float *kt = latent_mirror_latent_t(lm, l);
        fk->scores_transposed(att, as, qt, ls, nt, kt, lat, 0, ends, SCORE_IN_ORDER);
    } else
        for (int t = 0; t < nt; t++) paged_scores(&seq->k[l], 0, qt + t * ls, att + t * as, n0 + t);
    if (lm->scores[1]) {
        const float *kt = latent_mirror_rope_t(lm, l);
        fk->scores_transposed(att_rope, as, q_rope, qs, nt, kt, p->rope_dim, 0, ends, SCORE_IN_ORDER);
    } else
        for (int t = 0; t < nt; t++) paged_scores(&seq->v[l], 0, q_rope + t * qs, att_rope + t * as, n0 + t);
    for (int t = 0; t < nt; t++) {
        float *a = att + t * as;
        for (int j = 0; j < n0 + t; j++) a[j] += att_rope[t * as + j];
        note_attention(b, r0 + t, l, h, a, n0 + t, fk->scaled_softmax(a, n0 + t, 1.0f / sqrtf((float)model_qk_dim(p))));
    }
    if (lm->mix) {
        const float *rows = latent_mirror_rows(lm, l);
        for (int t = 0; t < nt; t++) memset(mix + t * ls, 0, sizeof(float) * (size_t)lat);
        fk->mix_rows(mix, ls, att, as, nt, rows, lat, 0, ends);
    } else
        for (int t = 0; t < nt; t++) paged_mix(&seq->k[l], 0, att + t * as, mix + t * ls, n0 + t);
    for (int t = 0; t < nt; t++)
        latent_output(b->model, l, h, mix + t * ls, b->xb2 + (size_t)(r0 + t) * xs + (size_t)h * p->head_dim);
}

// A row's every head (a task of a whole row): the codec may read each block once for all its heads
// (CodecOps.scores_heads), giving each head the numbers attend() gives it.
static void attend_row(StepCtx *c, int r) {
    BatchForward *b = c->b;
    const ModelConfig *p = &b->model->config;
    const int H = p->n_heads, hd = p->head_dim, l = c->layer;
    const KVSeq *seq = c->rows[r].seq;
    if (!attention_heads_fit(p, &seq->k[l])) {
        for (int h = 0; h < H; h++) attend(c, r, h);
        return;
    }
    const int n = c->rows[r].pos + 1;
    float *att = b->att + (size_t)r * H * b->context;
    const size_t qd = (size_t)H * hd, xs = qd > (size_t)p->dim ? qd : (size_t)p->dim;
    const KVSeq *nseq = next_row_seq(c, r);
    // The heads' top positions straight into their places (note_attention writes the same again).
    int *top = b->track_top ? b->top_position + ((size_t)r * p->n_layers + l) * H : NULL;
    attention_heads(&seq->k[l], &seq->v[l], nseq ? &nseq->k[l] : NULL, nseq ? &nseq->v[l] : NULL, H, b->q + r * qd, att,
                    b->context, b->xb2 + r * xs, n, top);
    for (int h = 0; h < H; h++) note_attention(b, r, l, h, att + (size_t)h * b->context, n, top ? top[h] : 0);
}

static void task_attention(void *arg, int i, int thread) {
    (void)thread;
    StepCtx *c = arg;
    const int H = c->b->model->config.n_heads, per = attention_heads_per_task(c);
    if (per == H) {
        attend_row(c, i);
        return;
    }
    for (int h = i * per % H; h < i * per % H + per; h++) attend(c, i * per / H, h);
}

// Head i of one row (first_row), for a span whose codec re-forms tokens (KIVI): its rows attend one
// after another, each between its append and its settle.
static void task_row_heads(void *arg, int i, int thread) {
    (void)thread;
    StepCtx *c = arg;
    attend(c, c->first_row, i);
}

// x += Wo · xb2 for this thread's output rows.
static void task_wo(void *arg, int t, int nt) {
    StepCtx *c = arg;
    const ModelConfig *p = &c->b->model->config;
    const int qd = p->n_heads * p->head_dim, dim = p->dim; // the heads' outputs
    const size_t hs = (size_t)(p->hidden_dim > dim ? p->hidden_dim : dim), xs = (size_t)(qd > dim ? qd : dim);
    int b, e;
    pool_share(dim, t, nt, &b, &e);
    float *out = c->b->hb; // free until the FFN
    matmul_rows(out, hs, c->b->model->w.wo + (size_t)c->layer * dim * qd, c->b->xb2, xs, qd, c->n_rows, b, e);
    for (int r = 0; r < c->n_rows; r++)
        for (int i = b; i < e; i++) c->b->x[(size_t)r * dim + i] += out[(size_t)r * hs + i];
}

// hb = silu(W1 h) * (W3 h) for this thread's hidden units.
static void task_w1w3(void *arg, int t, int nt) {
    StepCtx *c = arg;
    const ModelConfig *p = &c->b->model->config;
    const int dim = p->dim;
    const size_t off = (size_t)c->layer * p->hidden_dim * dim, hs = (size_t)(p->hidden_dim > dim ? p->hidden_dim : dim);
    int b, e;
    pool_share(p->hidden_dim, t, nt, &b, &e);
    matmul_rows(c->b->hb, hs, c->b->model->w.w1 + off, c->b->xb, (size_t)dim, dim, c->n_rows, b, e);
    matmul_rows(c->b->hb2, (size_t)p->hidden_dim, c->b->model->w.w3 + off, c->b->xb, (size_t)dim, dim, c->n_rows, b,
                e);
    // SwiGLU, g / (1 + e^-g) · h3: e^-g a run at a time (libm's expf to the bit, vectorised), then
    // the rest a vector at a time.
    const ForwardKernels *fk = forward_kernels();
    enum { RUN = 256 };
    for (int r = 0; r < c->n_rows; r++) {
        float *h1 = c->b->hb + (size_t)r * hs;
        const float *h3 = c->b->hb2 + (size_t)r * p->hidden_dim;
        for (int i0 = b; i0 < e; i0 += RUN) {
            const int n = e - i0 < RUN ? e - i0 : RUN;
            float ex[RUN];
            fk->exp_negated(ex, h1 + i0, n);
#pragma omp simd
            for (int i = 0; i < n; i++) h1[i0 + i] = h1[i0 + i] / (1.0f + ex[i]) * h3[i0 + i];
        }
    }
}

// x += W2 · hb for this thread's output rows.
static void task_w2(void *arg, int t, int nt) {
    StepCtx *c = arg;
    const ModelConfig *p = &c->b->model->config;
    const int dim = p->dim, qd = p->n_heads * p->head_dim;
    const size_t hs = (size_t)(p->hidden_dim > dim ? p->hidden_dim : dim), xs = (size_t)(qd > dim ? qd : dim);
    int b, e;
    pool_share(dim, t, nt, &b, &e);
    matmul_rows(c->b->xb2, xs, c->b->model->w.w2 + (size_t)c->layer * dim * p->hidden_dim, c->b->hb, hs,
                p->hidden_dim, c->n_rows, b, e);
    for (int r = 0; r < c->n_rows; r++)
        for (int i = b; i < e; i++) c->b->x[(size_t)r * dim + i] += c->b->xb2[(size_t)r * xs + i];
}

static void task_classifier(void *arg, int t, int nt) {
    StepCtx *c = arg;
    const ModelConfig *p = &c->b->model->config;
    int b, e;
    pool_share(p->vocab_size, t, nt, &b, &e);
    const float *classifier = p->separate_output ? c->b->model->w.output : c->b->model->w.token_embedding;
    matmul_rows(c->b->logits, (size_t)p->vocab_size, classifier, c->b->xb, (size_t)p->dim, p->dim,
                c->n_rows, b, e);
}

// ---------------------------------------------------------------------------------------------

// A caller's mistake: NULL, the reason in b->err.
__attribute__((format(printf, 2, 3))) static float *batch_refuse(BatchForward *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, sizeof b->err, fmt, ap);
    va_end(ap);
    return NULL;
}

float *batch_forward(BatchForward *b, const BatchRow *rows, int n_rows) {
    const ModelConfig *p = &b->model->config;
    const ModelWeights *w = &b->model->w;
    const StepDims sd = step_dims(p);
    const int dim = p->dim, half = sd.rot / 2, qk = model_qk_dim(p);
    const size_t qd = (size_t)sd.qw, kd = (size_t)sd.kw, vd = (size_t)sd.vw;
    StepCtx c = {b, rows, n_rows, 0, 0};
    const int span = n_rows > 1 && rows[0].seq == rows[n_rows - 1].seq;
    const int settles = span && (rows[0].seq->pool->rule[KV_ROLE_KEY].ops->settle ||
                                 rows[0].seq->pool->rule[KV_ROLE_VALUE].ops->settle);
    // A caller's mistakes, not an input's: refused with a message (batch_error), nothing computed.
    if (span && !b->spans) return batch_refuse(b, "a span without batch_enable_spans");
    if (n_rows < 1 || n_rows > b->max_rows) return batch_refuse(b, "%d rows outside 1..%d", n_rows, b->max_rows);
    for (int r = 0; r < n_rows; r++) {
        if (rows[r].pos < 0 || rows[r].pos >= b->context) // its attention row and RoPE angles are not there
            return batch_refuse(b, "position %d outside the %d served", rows[r].pos, b->context);
        if (rows[r].pos >= rows[r].seq->reserved) // its cache has no room there
            return batch_refuse(b, "position %d beyond the %d tokens its sequence reserved", rows[r].pos, rows[r].seq->reserved);
    }

    for (int r = 0; r < n_rows; r++)
        memcpy(b->x + (size_t)r * dim, w->token_embedding + (size_t)rows[r].token * dim, sizeof(float) * (size_t)dim);
    for (int l = 0; l < p->n_layers; l++) {
        c.layer = l;
        rmsnorm_rows(b->xb, b->x, w->attn_norm + (size_t)l * dim, dim, p->norm_eps, n_rows, (size_t)dim);
        pool_run(b->pool, task_qkv, &c);
        for (int r = 0; r < n_rows; r++) {
            const size_t at = (size_t)rows[r].pos * half;
            if (sd.mla) { // each head's RoPE part and the RoPE key rotated; the latent normalised
                for (int h = 0; h < p->n_heads; h++)
                    rope_head(b->q + r * qd + (size_t)h * qk + p->head_dim, p->rope_dim, 0, b->rope_cos + at,
                              b->rope_sin + at);
                rope_head(b->v + r * vd, p->rope_dim, 0, b->rope_cos + at, b->rope_sin + at);
                rmsnorm(b->k + r * kd, b->k + r * kd, w->kv_norm + (size_t)l * p->latent_dim, p->latent_dim,
                        p->norm_eps);
                continue;
            }
            attention_inputs(p, w, l, b->q + r * qd, b->k + r * kd, b->v + r * vd);
            rope(b->q + r * qd, p->n_heads, p->head_dim, p->rope_halves, b->rope_cos + at, b->rope_sin + at);
            if (!rows[r].seq->pool->rule[KV_ROLE_KEY].prerope) // else the cache keeps keys before RoPE
                rope(b->k + r * kd, p->n_kv_heads, p->head_dim, p->rope_halves, b->rope_cos + at, b->rope_sin + at);
        }
        if (span && settles && !sd.mla && span_mirror_attends_at_once(&b->mirror, rows[0].seq->pool)) {
            // Tokens change form step by step (KIVI): appended and settled row after row, as the
            // decode loop does, each mirrored as appended; then every row attends at once, each token
            // in the form its step saw (the mirror keeps both).
            for (int r = 0; r < n_rows; r++) {
                kvseq_append(rows[r].seq, l, b->k + r * kd, b->v + r * vd);
                span_mirror_update_open(&b->mirror, rows[r].seq, l, rows[r].pos);
                kvseq_end_step(rows[r].seq, l);
            }
            span_mirror_update(&b->mirror, rows[0].seq, l, rows[0].pos, p->rope_halves, b->rope_cos, b->rope_sin);
            pool_run_tasks(b->pool, (n_rows + SPAN_TILE - 1) / SPAN_TILE * p->n_heads, task_span_attention, &c);
        } else if (span && settles) { // the same, each row attending between its append and its settle
            for (int r = 0; r < n_rows; r++) {
                StepCtx one = {b, rows, r + 1, l, r};
                kvseq_append(rows[r].seq, l, b->k + r * kd, b->v + r * vd);
                if (sd.mla) { // the latent mirror, each token read again as it takes its final form
                    latent_mirror_update(&b->latent_mirror, rows[r].seq, l, rows[r].pos);
                    pool_run_tasks(b->pool, p->n_heads, task_span_latent, &one);
                } else
                    pool_run_tasks(b->pool, p->n_heads, task_row_heads, &one);
                kvseq_end_step(rows[r].seq, l);
                if (sd.mla) latent_mirror_settle(&b->latent_mirror, rows[r].seq, l);
            }
        } else if (span && sd.mla) { // every row appended in order, then all rows attend at once
            for (int r = 0; r < n_rows; r++) kvseq_append(rows[r].seq, l, b->k + r * kd, b->v + r * vd);
            latent_mirror_update(&b->latent_mirror, rows[0].seq, l, rows[0].pos);
            pool_run_tasks(b->pool, (n_rows + SPAN_TILE - 1) / SPAN_TILE * p->n_heads, task_span_latent, &c);
            for (int r = 0; r < n_rows; r++) kvseq_end_step(rows[r].seq, l);
        } else if (span) { // every row appended in order, then all rows attend at once
            for (int r = 0; r < n_rows; r++) kvseq_append(rows[r].seq, l, b->k + r * kd, b->v + r * vd);
            span_mirror_update(&b->mirror, rows[0].seq, l, rows[0].pos, p->rope_halves, b->rope_cos, b->rope_sin);
            pool_run_tasks(b->pool, (n_rows + SPAN_TILE - 1) / SPAN_TILE * p->n_heads, task_span_attention, &c);
            for (int r = 0; r < n_rows; r++) kvseq_end_step(rows[r].seq, l);
        } else {
            pool_run_tasks(b->pool, n_rows, task_append, &c);
            pool_run_tasks(b->pool, n_rows * p->n_heads / attention_heads_per_task(&c), task_attention, &c);
            // After the step's attention: KIVI's window slides (its oldest tokens quantised) here.
            for (int r = 0; r < n_rows; r++) kvseq_end_step(rows[r].seq, l);
        }
        pool_run(b->pool, task_wo, &c);
        rmsnorm_rows(b->xb, b->x, w->ffn_norm + (size_t)l * dim, dim, p->norm_eps, n_rows, (size_t)dim);
        pool_run(b->pool, task_w1w3, &c);
        pool_run(b->pool, task_w2, &c);
    }
    rmsnorm_rows(b->xb, b->x, w->final_norm, dim, p->norm_eps, n_rows, (size_t)dim);
    pool_run(b->pool, task_classifier, &c);
    return b->logits;
}

// ---------------------------------------------------------------------------------------------

int batch_init(BatchForward *b, const Model *m, int max_rows, int context, int n_threads, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    const ModelConfig *p = &m->config;
    if (max_rows < 1 || max_rows > 4096) {
        snprintf(err, errlen, "batch of %d rows is outside 1..4096", max_rows);
        return -1;
    }
    if (n_threads < 1 || n_threads > 256) {
        snprintf(err, errlen, "thread count %d is outside 1..256", n_threads);
        return -1;
    }
    if (context < 1 || context > p->max_seq_len) {
        snprintf(err, errlen, "context of %d positions is outside 1..%d (the model's)", context, p->max_seq_len);
        return -1;
    }
    b->model = m;
    b->track_top = 1;
    b->keep_layer = -1;
    b->max_rows = max_rows;
    b->context = context;
    b->n_threads = n_threads;
    const StepDims sd = step_dims(p);
    const size_t R = (size_t)max_rows, dim = (size_t)p->dim, od = (size_t)sd.ow;
    const size_t half = (size_t)sd.rot / 2, ctx = (size_t)context, H = (size_t)p->n_heads;
    const size_t hid = (size_t)p->hidden_dim > dim ? (size_t)p->hidden_dim : dim;
    b->x = calloc_lines(R * dim, sizeof(float));
    b->xb = calloc_lines(R * dim, sizeof(float));
    b->xb2 = calloc_lines(R * (od > dim ? od : dim), sizeof(float));
    b->q = calloc_lines(R * (size_t)sd.qw, sizeof(float));
    b->k = calloc_lines(R * (size_t)sd.kw, sizeof(float));
    b->v = calloc_lines(R * (size_t)sd.vw, sizeof(float));
    if (sd.mla) {
        b->att_rope = calloc_lines(R * H * ctx, sizeof(float));
        b->latent_q = calloc_lines(R * H * (size_t)p->latent_dim, sizeof(float));
        b->latent_mix = calloc_lines(R * H * (size_t)p->latent_dim, sizeof(float));
        if (!b->att_rope || !b->latent_q || !b->latent_mix) {
            batch_free(b);
            snprintf(err, errlen, "out of memory allocating the forward pass's buffers");
            return -1;
        }
    }
    b->hb = calloc_lines(R * hid, sizeof(float));
    b->hb2 = calloc_lines(R * (size_t)p->hidden_dim, sizeof(float));
    b->att = calloc_lines(R * (size_t)p->n_heads * ctx, sizeof(float));
    b->logits = calloc_lines(R * (size_t)p->vocab_size, sizeof(float));
    b->top_position = calloc_lines(R * (size_t)p->n_layers * p->n_heads, sizeof(int));
    b->kept_att = calloc_lines((size_t)p->n_heads * ctx, sizeof(float));
    b->rope_cos = calloc_lines(ctx * half, sizeof(float));
    b->rope_sin = calloc_lines(ctx * half, sizeof(float));
    b->pool = pool_create(n_threads);
    if (!b->x || !b->xb || !b->xb2 || !b->q || !b->k || !b->v || !b->hb || !b->hb2 || !b->att ||
        !b->logits || !b->top_position || !b->kept_att || !b->rope_cos || !b->rope_sin || !b->pool) {
        batch_free(b);
        snprintf(err, errlen, "out of memory allocating the forward pass's buffers");
        return -1;
    }
    rope_table(b->rope_cos, b->rope_sin, (int)ctx, sd.rot, p->rope_theta, p->rope_factors ? m->w.rope_freqs : NULL);
    return 0;
}

int batch_enable_spans(BatchForward *b, const KVPool *pool, char *err, size_t errlen) {
    if (b->spans) return 0;
    const int latent = b->model->config.latent_dim > 0;
    if (latent ? latent_mirror_init(&b->latent_mirror, pool, b->context) : span_mirror_init(&b->mirror, pool, b->context)) {
        snprintf(err, errlen, "out of memory allocating the evaluator's decoded cache");
        return -1;
    }
    b->att2_span = (size_t)b->context * (size_t)(latent ? 1 : b->mirror.value_rows);
    if (!latent && (b->mirror.second || b->mirror.value_rows > 1 || b->mirror.all_weights) &&
        !(b->att2 = calloc_lines((size_t)pool_threads(b->pool) * SPAN_TILE * b->att2_span, sizeof(float)))) {
        span_mirror_free(&b->mirror);
        snprintf(err, errlen, "out of memory allocating the evaluator's decoded cache");
        return -1;
    }
    b->spans = 1;
    return 0;
}

void batch_free(BatchForward *b) {
    if (b->spans) span_mirror_free(&b->mirror);
    if (b->spans) latent_mirror_free(&b->latent_mirror);
    pool_destroy(b->pool);
    free(b->x);
    free(b->xb);
    free(b->xb2);
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->hb);
    free(b->hb2);
    free(b->att);
    free(b->att2);
    free(b->logits);
    free(b->top_position);
    free(b->kept_att);
    free(b->rope_cos);
    free(b->rope_sin);
    free(b->att_rope);
    free(b->latent_q);
    free(b->latent_mix);
    memset(b, 0, sizeof *b);
}

// ---------------------------------------------------------------------------------------------
// The single-sequence decoder.

static int decoder_init_rows(Decoder *d, const Model *m, const CodecSpec *k_spec, const CodecSpec *v_spec, int capacity,
                             int block, int rows, int n_threads, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    const ModelConfig *p = &m->config;
    if (capacity < 1 || capacity > p->max_seq_len) {
        snprintf(err, errlen, "cache capacity %d is outside 1..%d (the model's context)", capacity, p->max_seq_len);
        return -1;
    }
    // One sequence of at most `capacity` tokens: the budget is never what stops it.
    if (kvpool_init_model(&d->cache, p, block, capacity, SIZE_MAX / 2, k_spec, v_spec, err, errlen)) return -1;
    if (rows > 1 && !(d->span_rows = malloc(sizeof(BatchRow) * (size_t)rows))) {
        kvpool_free(&d->cache);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (batch_init(&d->fwd, m, rows, capacity, n_threads, err, errlen) ||
        (rows > 1 && batch_enable_spans(&d->fwd, &d->cache, err, errlen))) {
        if (d->fwd.model) batch_free(&d->fwd);
        kvpool_free(&d->cache);
        free(d->span_rows);
        return -1;
    }
    kvseq_init(&d->seq, &d->cache);
    // Every block the sequence can use, taken now, where a failure can be reported: a step then
    // never has to allocate (decoder_forward cannot fail for a position below the capacity).
    if (kvseq_reserve(&d->seq, capacity, err, errlen)) {
        decoder_free(d);
        return -1;
    }
    d->capacity = capacity;
    d->n_threads = n_threads;
    d->q = d->fwd.q, d->xb2 = d->fwd.xb2, d->att = d->fwd.att, d->logits = d->fwd.logits;
    d->rope_cos = d->fwd.rope_cos, d->rope_sin = d->fwd.rope_sin, d->top_position = d->fwd.top_position;
    return 0;
}

int decoder_init_paged(Decoder *d, const Model *m, const CodecSpec *k_spec, const CodecSpec *v_spec, int capacity, int block,
                       int n_threads, char *err, size_t errlen) {
    return decoder_init_rows(d, m, k_spec, v_spec, capacity, block, 1, n_threads, err, errlen);
}

int decoder_init_spans(Decoder *d, const Model *m, const CodecSpec *k_spec, const CodecSpec *v_spec, int capacity, int rows,
                       int n_threads, char *err, size_t errlen) {
    return decoder_init_rows(d, m, k_spec, v_spec, capacity, capacity, rows, n_threads, err, errlen);
}

int decoder_init(Decoder *d, const Model *m, const CodecSpec *k_spec, const CodecSpec *v_spec, int capacity, int n_threads,
                 char *err, size_t errlen) {
    return decoder_init_paged(d, m, k_spec, v_spec, capacity, capacity, n_threads, err, errlen);
}

int decoder_reset(Decoder *d, char *err, size_t errlen) {
    kvseq_release(&d->seq);
    return kvseq_reserve(&d->seq, d->capacity, err, errlen);
}

float *decoder_forward(Decoder *d, int token, int pos) {
    BatchRow row = {&d->seq, token, pos};
    return batch_forward(&d->fwd, &row, 1);
}

float *decoder_forward_span(Decoder *d, const int *tokens, int pos, int n) {
    if (!d->span_rows || n < 1 || n > d->fwd.max_rows) return batch_refuse(&d->fwd, "a span of %d rows outside 1..%d", n, d->fwd.max_rows);
    for (int i = 0; i < n; i++) d->span_rows[i] = (BatchRow){&d->seq, tokens[i], pos + i};
    return batch_forward(&d->fwd, d->span_rows, n);
}

void decoder_free(Decoder *d) {
    if (d->cache.n_layers) {
        kvseq_release(&d->seq);
        kvpool_free(&d->cache);
    }
    if (d->fwd.model) batch_free(&d->fwd);
    free(d->span_rows);
    memset(d, 0, sizeof *d);
}

size_t decoder_cache_bytes(const Decoder *d) { return kvseq_bytes(&d->seq); }

double decoder_bits_per_element(const Decoder *d) {
    const KVPool *p = &d->cache;
    const KVLayout *l = &p->layout;
    const double per_token = (double)l->n_heads[0] * l->head_dim[0] + (double)l->n_heads[1] * l->head_dim[1];
    const double elements = kvseq_length(&d->seq) * (double)p->n_layers * per_token;
    return elements > 0 ? 8.0 * (double)decoder_cache_bytes(d) / elements : 0.0;
}

const char *decoder_spec(const Decoder *d, KVRole role) { return d->cache.cost[role].spec; }
