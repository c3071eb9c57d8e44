// TurboQuant (Zandieh et al. 2025, arXiv 2504.19874) as a cache codec:
// turboquant:bits=B,mode=mse|prod[,seed=S].
//
// A head's vector x is stored as its norm (fp16) and the direction u = x/‖x‖ rotated, y = R·u, each
// coordinate of y the index of its nearest centroid. After a random rotation every coordinate of a
// unit vector has the density f(x) ∝ (1 − x²)^((d−3)/2) on [−1, 1] (d = head_dim), whatever u was;
// the centroids are that density's Lloyd-Max quantiser (formats.c computes it once per d and
// width). R is the Haar-random orthogonal matrix of `seed` (kvtransform.c: QR of a seeded Gaussian,
// the matrix rot=random:SEED uses), one matrix for every head and layer: the density argument
// needs R random, not different per head.
//   mode=mse   B bits a coordinate (B = 1..8): B + 16/d bits a number (B + 0.5 at d = 32).
//   mode=prod  B − 1 bits of mse (B = 2..9), then one bit a coordinate of QJL on the residual
//              r = y − ŷ: sign(S·r) for a seeded d × d Gaussian S and γ = ‖r‖ (fp16), read back as
//              ŷ + √(π/2)/d · γ · Sᵀ·sign(S·r), an unbiased estimate of y whatever ŷ was. The residual
//              is taken in the rotated space (S·R is as Gaussian as S): B + 32/d bits a number.
//   nc         (mse) the centroid vector renormalised before the inverse rotation, so that x̂ keeps
//              x's norm: the stored norm is ‖x‖/‖ŷ‖, at no cost in bytes (vLLM's "_nc").
//   preset=P   vLLM's cache types: keys TurboQuant mse, values uniform — asymmetric per head per
//              token, 2^B even levels between min and max, fp16 scale and zero (B + 1 bits):
//              k8v4 (K 8, V 4), 4bit_nc (K 4, V 4), k3v4_nc (K 3, V 4), 3bit_nc (K 3, V 3); the _nc
//              ones with nc. k8v4 here is TurboQuant's own reading of vLLM's type, keys by its
//              256-level Lloyd-Max codebook (8.5 bits); vLLM's own k8v4 stores keys as plain FP8
//              E4M3 instead (no rotation, no norm: its config.py, key_fp8 = key_quant_bits == 8),
//              which is `--k fp8:e4m3 --v turboquant:preset=k8v4` here.
// Attention never rotates a cached vector: scores rotate the query once (q·x̂ = ‖x‖ (R·q)·ŷ) and
// mix sums in the rotated space and rotates the sum back once.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtransform.h"
#include "quant.h"
#include "codec_core.h"
#include "codecs.h"
#include "formats.h"
#include "row_kernels.h"

typedef struct {
    CodecRows r;      // a head at a token, formats.h: [fp16 ‖x‖][codes][fp16 γ][signs] (the last two: prod)
    int uniform;      // a preset's value stream: [fp16 scale][fp16 zero][B-bit codes] (c.cbits = B)
    TqCoder c;        // its rotation, sketch and levels are shared (transform_rotation, tq_gaussian, tq_codebook)
    float alpha;      // √(π/2) / d
} TqState;

// A preset's values: min and max of the head, 2^B − 1 steps between them, rounded to nearest.
static void uniform_encode(const TqState *s, const float *x, uint8_t *row) {
    const int d = s->c.d, top = (1 << s->c.cbits) - 1;
    float lo = x[0], hi = x[0];
    for (int i = 1; i < d; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
    fmt_fp16_store(row, (hi - lo) / (float)top);
    fmt_fp16_store(row + 2, lo);
    const float scale = fmt_fp16_load(row), zero = fmt_fp16_load(row + 2);
    uint8_t codes[MICRO_MAX_WIDTH];
    for (int i = 0; i < d; i++) codes[i] = (uint8_t)(scale > 0.0f ? quant_round_clamp((x[i] - zero) / scale, 0, top) : 0);
    quant_pack(row + 4, codes, (size_t)d, s->c.cbits);
}

static void uniform_decode(const TqState *s, const uint8_t *row, float *x) {
    const float scale = fmt_fp16_load(row), zero = fmt_fp16_load(row + 2);
    uint8_t codes[MICRO_MAX_WIDTH];
    quant_unpack(row + 4, codes, (size_t)s->c.d, s->c.cbits);
    for (int i = 0; i < s->c.d; i++) x[i] = zero + (float)codes[i] * scale;
}

static void tq_append(void *state, const float *x) {
    TqState *s = state;
    uint8_t *rows[TQ_SIDE];
    for (int h0 = 0; h0 < s->r.n_heads; h0 += TQ_SIDE) { // the heads side by side (tq_encode_heads)
        const int nv = s->r.n_heads - h0 < TQ_SIDE ? s->r.n_heads - h0 : TQ_SIDE;
        for (int v = 0; v < nv; v++) rows[v] = codec_row(&s->r, h0 + v, s->r.length);
        if (s->uniform)
            for (int v = 0; v < nv; v++) uniform_encode(s, x + (h0 + v) * s->c.d, rows[v]);
        else
            tq_encode_heads(&s->c, x + h0 * s->c.d, nv, rows);
    }
    s->r.length++;
}

static void tq_read(const void *state, int head, int t, float *out) {
    const TqState *s = state;
    if (s->uniform)
        uniform_decode(s, codec_row(&s->r, head, t), out);
    else
        tq_decode(&s->c, codec_row(&s->r, head, t), out);
}

// The coder of a stream whose attention reads its codes directly; NULL for a preset's uniform value
// stream, which is read back. Token j's row, from its block.
static const TqCoder *tq_direct(const CodecBlocks *b) {
    const TqState *s0 = b->states[0];
    return s0->uniform ? NULL : &s0->c;
}

static const uint8_t *tq_row_at(const CodecBlocks *b, int head, int j) {
    int local;
    const TqState *s = codec_block(b, j, &local);
    return codec_row(&s->r, head, local);
}

// A token's score from the sum of its q_d · level and (prod) its QJL sign dot Σ ±qs_i: the QJL term,
// then the norm.
static inline float tq_score(const TqCoder *c, const uint8_t *row, float acc, float alpha, float sign_dot) {
    if (c->prod) acc += alpha * fmt_fp16_load(row + tq_gamma_at(c)) * sign_dot;
    return fmt_fp16_load(row) * acc;
}

static void tq_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    if (n <= 0) return;
    const TqCoder *c = tq_direct(b);
    if (!c) {
        codec_scores_by_read(b, tq_read, b->head_dim, head, q, out, n);
        return;
    }
    const int hd = b->head_dim;
    const float alpha = ((const TqState *)b->states[0])->alpha;
    float qr[MICRO_MAX_WIDTH] __attribute__((aligned(64))), qs[MICRO_MAX_WIDTH];
    uint8_t codes[MICRO_MAX_WIDTH];
    tq_project(c->rot, hd, hd, q, qr);
    if (c->prod) tq_project(c->sketch, hd, hd, qr, qs);
#ifdef ROW_KERNELS
    if (hd == 32) { // sixteen tokens at a time, each qr_d · level summed in order of d
        RowLevels rl;
        row_levels_init(&rl, c->levels, c->cbits);
        const __m512 q0 = _mm512_load_ps(qr), q1 = _mm512_load_ps(qr + 16);
        const __m512 zero = _mm512_setzero_ps(); // (prod) a sign bit picks +qs or −qs
        const __m512 s0 = c->prod ? _mm512_loadu_ps(qs) : zero, s1 = c->prod ? _mm512_loadu_ps(qs + 16) : zero;
        const __m512 minus = _mm512_set1_ps(-1.0f); // tq_sign's −1 · qs_i, as the C loop multiplies
        const __m512 n0 = _mm512_mul_ps(minus, s0), n1 = _mm512_mul_ps(minus, s1);
        for (int j0 = 0; j0 < n; j0 += 16) {
            const int m = n - j0 < 16 ? n - j0 : 16;
            float v[16][32] __attribute__((aligned(64))), sv[16][32] __attribute__((aligned(64)));
            float acc[16] __attribute__((aligned(64))), dot[16] __attribute__((aligned(64)));
            const uint8_t *rows[16];
            for (int t = 0; t < 16; t++) {
                if (t < m) rows[t] = tq_row_at(b, head, j0 + t);
                const uint8_t *codes_t = t < m ? rows[t] + tq_codes_at() : NULL;
                _mm512_store_ps(v[t], t < m ? _mm512_mul_ps(q0, row_levels16(&rl, codes_t, 0)) : _mm512_setzero_ps());
                _mm512_store_ps(v[t] + 16, t < m ? _mm512_mul_ps(q1, row_levels16(&rl, codes_t, 1)) : _mm512_setzero_ps());
                if (!c->prod) continue;
                const uint8_t *signs = t < m ? rows[t] + tq_signs_at(c) : (const uint8_t[4]){0};
                _mm512_store_ps(sv[t], _mm512_mask_blend_ps((__mmask16)(signs[0] | signs[1] << 8), n0, s0));
                _mm512_store_ps(sv[t] + 16, _mm512_mask_blend_ps((__mmask16)(signs[2] | signs[3] << 8), n1, s1));
            }
            _mm512_store_ps(acc, row_sums16((const float(*)[32])v));
            if (c->prod) _mm512_store_ps(dot, row_sums16((const float(*)[32])sv));
            for (int t = 0; t < m; t++) out[j0 + t] = tq_score(c, rows[t], acc[t], alpha, c->prod ? dot[t] : 0.0f);
        }
        return;
    }
#endif
    for (int j = 0; j < n; j++) {
        const uint8_t *row = tq_row_at(b, head, j);
        quant_unpack(row + tq_codes_at(), codes, (size_t)hd, c->cbits);
        float acc = 0.0f;
        for (int d = 0; d < hd; d++) acc += qr[d] * c->levels[codes[d]];
        out[j] = tq_score(c, row, acc, alpha, c->prod ? tq_sign_dot(row + tq_signs_at(c), qs, hd) : 0.0f);
    }
}

// A preset's uniform values, read back (codec_mix_by_read's order): out[d] = Σ_j p_j · (zero_j + code · scale_j).
static void tq_mix_uniform(const CodecBlocks *b, int head, const float *p, float *out, int n) {
#ifdef ROW_KERNELS
    const TqState *s0 = b->states[0];
    if (b->head_dim == 32) { // the codes as levels 0, 1, 2, ... and each token's x̂ in registers
        float ramp[256];
        for (int i = 0; i < 256; i++) ramp[i] = (float)i;
        RowLevels rl;
        row_levels_init(&rl, ramp, s0->c.cbits);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        for (int j = 0; j < n; j++) {
            const uint8_t *row = tq_row_at(b, head, j);
            const __m512 scale = _mm512_set1_ps(fmt_fp16_load(row)), zero = _mm512_set1_ps(fmt_fp16_load(row + 2));
            const __m512 pj = _mm512_set1_ps(p[j]);
            const __m512 x0 = _mm512_add_ps(zero, _mm512_mul_ps(row_levels16(&rl, row + 4, 0), scale));
            const __m512 x1 = _mm512_add_ps(zero, _mm512_mul_ps(row_levels16(&rl, row + 4, 1), scale));
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(pj, x0));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(pj, x1));
        }
        _mm512_storeu_ps(out, a0), _mm512_storeu_ps(out + 16, a1);
        return;
    }
#endif
    codec_mix_by_read(b, tq_read, b->head_dim, head, p, out, n);
}

static void tq_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    const TqCoder *c = tq_direct(b);
    if (!c) {
        tq_mix_uniform(b, head, p, out, n);
        return;
    }
    uint8_t codes[MICRO_MAX_WIDTH];
    float ay[MICRO_MAX_WIDTH] __attribute__((aligned(64))) = {0}, as[MICRO_MAX_WIDTH] __attribute__((aligned(64))) = {0}, back[MICRO_MAX_WIDTH];
    const int hd = b->head_dim;
    const float alpha = ((const TqState *)b->states[0])->alpha;
#ifdef ROW_KERNELS
    if (hd == 32) { // the sums in vectors, token after token as below; a sign bit picks +g or −g
        RowLevels rl;
        row_levels_init(&rl, c->levels, c->cbits);
        __m512 y0 = _mm512_setzero_ps(), y1 = y0, s0 = y0, s1 = y0;
        for (int j = 0; j < n; j++) {
            const uint8_t *row = tq_row_at(b, head, j);
            const float w = p[j] * fmt_fp16_load(row);
            const __m512 wv = _mm512_set1_ps(w);
            y0 = _mm512_add_ps(y0, _mm512_mul_ps(wv, row_levels16(&rl, row + tq_codes_at(), 0)));
            y1 = _mm512_add_ps(y1, _mm512_mul_ps(wv, row_levels16(&rl, row + tq_codes_at(), 1)));
            if (!c->prod) continue;
            const float g = w * alpha * fmt_fp16_load(row + tq_gamma_at(c));
            const uint8_t *signs = row + tq_signs_at(c);
            const __m512 pos = _mm512_set1_ps(g), neg = _mm512_mul_ps(_mm512_set1_ps(-1.0f), pos); // tq_sign · g
            s0 = _mm512_add_ps(s0, _mm512_mask_blend_ps((__mmask16)(signs[0] | signs[1] << 8), neg, pos));
            s1 = _mm512_add_ps(s1, _mm512_mask_blend_ps((__mmask16)(signs[2] | signs[3] << 8), neg, pos));
        }
        _mm512_store_ps(ay, y0), _mm512_store_ps(ay + 16, y1), _mm512_store_ps(as, s0), _mm512_store_ps(as + 16, s1);
    } else
#endif
        for (int j = 0; j < n; j++) {
            const uint8_t *row = tq_row_at(b, head, j);
            const float w = p[j] * fmt_fp16_load(row);
            quant_unpack(row + tq_codes_at(), codes, (size_t)hd, c->cbits);
            for (int d = 0; d < hd; d++) ay[d] += w * c->levels[codes[d]];
            if (!c->prod) continue;
            const float g = w * alpha * fmt_fp16_load(row + tq_gamma_at(c));
            const uint8_t *signs = row + tq_signs_at(c);
            for (int d = 0; d < hd; d++) as[d] += tq_sign(signs, d) * g;
        }
    if (c->prod) {
        tq_project_back(c->sketch, hd, hd, as, back);
        for (int d = 0; d < hd; d++) ay[d] += back[d];
    }
    tq_project_back(c->rot, hd, hd, ay, out);
}

// The state begins with its rows: the shared destroy() and bytes() serve it.
#define tq_destroy codec_rows_destroy
#define tq_bytes codec_rows_bytes

// The fast evaluator's mirror (MirrorOps), for mse: tq_scores sums R·q times the centroids in
// order of d from 0 and multiplies by the norm; tq_mix sums (p_j · norm_j) · centroid in order of j
// from 0 and rotates the sum back. A preset's uniform values are read back (tq_mix_uniform's
// order); prod's QJL term is the mirror's second sum (below).
static void tq_mirror_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    (void)offset;
    const TqState *s = state;
    const uint8_t *row = codec_row(&s->r, head, token);
    if (s->uniform) {
        uniform_decode(s, row, x);
        return;
    }
    uint8_t codes[MICRO_MAX_WIDTH];
    quant_unpack(row + tq_codes_at(), codes, (size_t)s->c.d, s->c.cbits);
    for (int d = 0; d < s->c.d; d++) x[d] = s->c.levels[codes[d]];
    *factor = fmt_fp16_load(row);
}

static void tq_mirror_query(const void *state, const float *q, float *out) {
    const TqState *s = state;
    tq_project(s->c.rot, s->c.d, s->c.d, q, out);
}

static void tq_mirror_post(const CodecBlocks *b, int head, const float *p, const float *acc, const float *acc2,
                           float *out, int n) {
    (void)head, (void)p, (void)n;
    const TqState *s = b->states[0];
    if (!s->c.prod) {
        tq_project_back(s->c.rot, s->c.d, s->c.d, acc, out);
        return;
    }
    float back[MICRO_MAX_WIDTH], sum[MICRO_MAX_WIDTH];
    tq_project_back(s->c.sketch, s->c.d, s->c.d, acc2, back);
    for (int d = 0; d < s->c.d; d++) sum[d] = acc[d] + back[d];
    tq_project_back(s->c.rot, s->c.d, s->c.d, sum, out);
}

// prod's QJL term as the mirror's second sum: the signs as ±1 (tq_sign), q̃2 = S·(R·q); a key's
// aux is α·γ (tq_score's α · γ · Σ ±qs_i), a value's γ, and its weight ((p_j · norm_j) · α) · γ_j
// (tq_mix's g).
static void tq_mirror_read2(const TqState *s, int head, int token, float *x2, float *gamma) {
    const uint8_t *row = codec_row(&s->r, head, token);
    for (int i = 0; i < s->c.d; i++) x2[i] = tq_sign(row + tq_signs_at(&s->c), i);
    *gamma = fmt_fp16_load(row + tq_gamma_at(&s->c));
}

static void tq_key_read2(const void *state, int head, int token, float *x2, float *aux) {
    const TqState *s = state;
    float gamma;
    tq_mirror_read2(s, head, token, x2, &gamma);
    *aux = s->alpha * gamma;
}

static void tq_value_read2(const void *state, int head, int token, float *x2, float *aux) {
    tq_mirror_read2(state, head, token, x2, aux);
}

static void tq_mirror_query2(const void *state, const float *q, float *out) {
    const TqState *s = state;
    float qr[MICRO_MAX_WIDTH];
    tq_project(s->c.rot, s->c.d, s->c.d, q, qr);
    tq_project(s->c.sketch, s->c.d, s->c.d, qr, out);
}

static void tq_mirror_weights2(const void *state, const float *w, const float *gamma, float *w2, int n) {
    const TqState *s = state;
    for (int j = 0; j < n; j++) w2[j] = w[j] * s->alpha * gamma[j];
}

static const MirrorOps tq_mirror_ops = {.read = tq_mirror_read, .query = tq_mirror_query, .post = tq_mirror_post,
                                        .has_factor = 1},
                       tq_uniform_mirror_ops = {.read = tq_mirror_read};
#define TQ_PROD_MIRROR .read = tq_mirror_read, .query = tq_mirror_query, .post = tq_mirror_post, .has_factor = 1
static const MirrorOps tq_prod_key_ops = {TQ_PROD_MIRROR, .has_second = 1, .read2 = tq_key_read2, .query2 = tq_mirror_query2},
                       tq_prod_value_ops = {TQ_PROD_MIRROR, .has_second = 1, .read2 = tq_value_read2,
                                             .weights2 = tq_mirror_weights2};
#undef TQ_PROD_MIRROR

static const MirrorOps *tq_key_mirror(const void *state) {
    const TqState *s = state;
    return s->uniform ? NULL : s->c.prod ? &tq_prod_key_ops : &tq_mirror_ops;
}

static const MirrorOps *tq_value_mirror(const void *state) {
    const TqState *s = state;
    return s->uniform ? &tq_uniform_mirror_ops : s->c.prod ? &tq_prod_value_ops : &tq_mirror_ops;
}

static const CodecOps tq_ops = {.append = tq_append, .scores = tq_scores, .mix = tq_mix, .read = tq_read,
                                .key_mirror = tq_key_mirror, .value_mirror = tq_value_mirror, .bytes = tq_bytes,
                                .copy = codec_rows_copy, .destroy = tq_destroy};

static const struct {
    const char *name;
    int key_bits, value_bits;
    int nc;
} tq_presets[] = {{"k8v4", 8, 4, 0}, {"4bit_nc", 4, 4, 1}, {"k3v4_nc", 3, 4, 1}, {"3bit_nc", 3, 3, 1}};

static void *tq_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                       size_t normalised_len, char *err, size_t errlen) {
    const char *mode = spec_string(spec, "mode"), *preset = spec_string(spec, "preset");
    if (mode && strcmp(mode, "mse") != 0 && strcmp(mode, "prod") != 0) {
        snprintf(err, errlen, "turboquant: mode=%.20s: expected mse or prod", mode);
        return NULL;
    }
    int p = -1;
    for (int i = 0; preset && i < (int)(sizeof tq_presets / sizeof tq_presets[0]); i++)
        if (strcmp(preset, tq_presets[i].name) == 0) p = i;
    if (preset && p < 0) {
        snprintf(err, errlen, "turboquant: preset=%.20s: expected k8v4, 4bit_nc, k3v4_nc or 3bit_nc", preset);
        return NULL;
    }
    const int prod = mode && strcmp(mode, "prod") == 0, nc = spec_flag(spec, "nc");
    int bits, seed;
    if (spec_int(spec, "bits", prod ? 4 : 3, prod ? 2 : 1, prod ? 9 : 8, &bits, err, errlen) ||
        spec_int(spec, "seed", 1, 0, 1 << 30, &seed, err, errlen) ||
        codec_check_shape("turboquant", n_heads, head_dim, capacity, 1, err, errlen))
        return NULL;
    if (head_dim < 3) {
        snprintf(err, errlen, "turboquant: needs head_dim >= 3 (got %d)", head_dim);
        return NULL;
    }
    if (p >= 0 && (mode || spec_string(spec, "bits") || nc)) {
        snprintf(err, errlen, "turboquant: preset=%s sets bits, mode and nc itself", preset);
        return NULL;
    }
    if (prod && nc) {
        snprintf(err, errlen, "turboquant: nc is for mode=mse (prod's estimate is unbiased as it is)");
        return NULL;
    }
    const int uniform = p >= 0 && spec_is_value(spec);
    if (p >= 0) {
        snprintf(normalised, normalised_len, "turboquant:preset=%s,seed=%d", preset, seed);
        bits = uniform ? tq_presets[p].value_bits : tq_presets[p].key_bits;
    } else {
        snprintf(normalised, normalised_len, "turboquant:bits=%d,mode=%s%s,seed=%d", bits, prod ? "prod" : "mse",
                 nc ? ",nc" : "", seed);
    }
    TqState *s = calloc(1, sizeof *s);
    if (!s) return codec_created(NULL, 0, codec_rows_destroy, err, errlen);
    TqCoder *c = &s->c;
    s->uniform = uniform;
    c->d = head_dim, c->prod = prod, c->nc = nc || (p >= 0 && tq_presets[p].nc), c->cbits = prod ? bits - 1 : bits;
    s->alpha = (float)(sqrt(M_PI / 2.0) / head_dim); // as tq_decode's
    c->rot = uniform ? NULL : transform_rotation(2, (unsigned long)seed, head_dim);
    c->sketch = prod ? tq_gaussian((unsigned long)seed, head_dim, head_dim) : NULL;
    c->levels = uniform ? NULL : tq_codebook(head_dim, c->cbits);
    codec_rows_alloc(&s->r, n_heads, uniform ? 4 + quant_packed_bytes((size_t)head_dim, bits) : tq_row_bytes(c), capacity);
    return codec_created(s, (uniform || (c->rot && c->levels)) && (!prod || c->sketch) && s->r.rows, codec_rows_destroy,
                         err, errlen);
}

const CodecFamily CODEC_FAMILY(codec_turboquant) = {
    .name = "turboquant", .ops = &tq_ops, .create = tq_create,
    .help = "turboquant:bits=B    TurboQuant: seeded random rotation, Lloyd-Max levels for the rotated "
            "coordinate, fp16 norm; mode=mse (B=1..8, nc) or prod (B−1 bits + 1-bit QJL residual, B=2..9), seed=S; "
            "preset=k8v4|4bit_nc|k3v4_nc|3bit_nc (vLLM's: values uniform)",
    .examples = (const char *const[]){"turboquant:bits=2", "turboquant:bits=3,mode=prod", "turboquant:preset=k3v4_nc",
                                      "turboquant:preset=k8v4", "turboquant:bits=1|turboquant:bits=4",
                                      "turboquant:bits=8,nc|fp32", "turboquant:bits=3,mode=prod|turboquant:bits=2", NULL}};
