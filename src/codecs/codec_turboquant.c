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
//   mode=mse   B bits a coordinate (B = 1..4): B + 16/d bits a number (B + 0.5 at d = 32).
//   mode=prod  B − 1 bits of mse (B = 2..5), then one bit a coordinate of QJL on the residual
//              r = y − ŷ: sign(S·r) for a seeded d × d Gaussian S and γ = ‖r‖ (fp16), read back as
//              ŷ + √(π/2)/d · γ · Sᵀ·sign(S·r), an unbiased estimate of y whatever ŷ was. The residual
//              is taken in the rotated space (S·R is as Gaussian as S): B + 32/d bits a number.
// Attention never rotates a cached vector: scores rotate the query once (q·x̂ = ‖x‖ (R·q)·ŷ) and
// mix sums in the rotated space and rotates the sum back once.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kvtransform.h"
#include "../quant.h"
#include "codec_core.h"
#include "codecs.h"
#include "formats.h"

typedef struct {
    int n_heads, head_dim, length;
    int prod, cbits;          // prod mode; bits of a centroid index (B, or B − 1 with prod)
    const float *rot, *sketch; // R (d × d), S (d × d, prod)
    const float *levels;       // 2^cbits centroids, sorted
    float alpha;               // √(π/2) / d
    size_t code_bytes, sign_bytes, row_bytes; // [fp16 ‖x‖][codes][fp16 γ][signs] (the last two: prod)
    uint8_t *rows;                            // [token][head][row_bytes]
} TqState;

static void tq_destroy(void *state) {
    TqState *s = state;
    if (s) free(s->rows);
    free(s);
}

static int nearest(const float *levels, int n, float y) {
    int i = 0;
    while (i + 1 < n && y > 0.5f * (levels[i] + levels[i + 1])) i++;
    return i;
}

static void tq_append(void *state, const float *x) {
    TqState *s = state;
    const int hd = s->head_dim, n = 1 << s->cbits;
    float u[1024], y[1024], sr[1024];
    uint8_t codes[1024];
    for (int h = 0; h < s->n_heads; h++) {
        const float *v = x + h * hd;
        uint8_t *row = s->rows + ((size_t)s->length * s->n_heads + h) * s->row_bytes;
        double sq = 0.0;
        for (int d = 0; d < hd; d++) sq += (double)v[d] * v[d];
        const float norm = (float)sqrt(sq);
        const uint16_t nh = quant_fp32_to_fp16_sat(norm);
        memcpy(row, &nh, 2);
        for (int d = 0; d < hd; d++) u[d] = norm > 0.0f ? v[d] / norm : 0.0f;
        tq_project(s->rot, hd, hd, u, y);
        for (int d = 0; d < hd; d++) codes[d] = (uint8_t)nearest(s->levels, n, y[d]);
        quant_pack(row + 2, codes, (size_t)hd, s->cbits);
        if (!s->prod) continue;
        double rr = 0.0;
        for (int d = 0; d < hd; d++) {
            y[d] -= s->levels[codes[d]];
            rr += (double)y[d] * y[d];
        }
        const uint16_t gh = quant_fp32_to_fp16_sat((float)sqrt(rr));
        memcpy(row + 2 + s->code_bytes, &gh, 2);
        tq_project(s->sketch, hd, hd, y, sr);
        tq_signs(sr, hd, row + 4 + s->code_bytes);
    }
    s->length++;
}

static const uint8_t *tq_row(const TqState *s, int head, int t) {
    return s->rows + ((size_t)t * s->n_heads + head) * s->row_bytes;
}

static float fp16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return quant_fp16_to_fp32(h);
}

// The rotated estimate ŷ (+ the QJL term) of one cached vector, before the norm.
static void tq_rotated(const TqState *s, const uint8_t *row, float *y) {
    const int hd = s->head_dim;
    uint8_t codes[1024];
    quant_unpack(row + 2, codes, (size_t)hd, s->cbits);
    for (int d = 0; d < hd; d++) y[d] = s->levels[codes[d]];
    if (!s->prod) return;
    const float g = s->alpha * fp16_at(row + 2 + s->code_bytes);
    const uint8_t *signs = row + 4 + s->code_bytes;
    float pm[1024], back[1024];
    for (int d = 0; d < hd; d++) pm[d] = (signs[d / 8] >> (d % 8)) & 1 ? g : -g;
    tq_project_back(s->sketch, hd, hd, pm, back);
    for (int d = 0; d < hd; d++) y[d] += back[d];
}

static void tq_read(const void *state, int head, int t, float *out) {
    const TqState *s = state;
    const uint8_t *row = tq_row(s, head, t);
    float y[1024], x[1024];
    tq_rotated(s, row, y);
    tq_project_back(s->rot, s->head_dim, s->head_dim, y, x);
    const float norm = fp16_at(row);
    for (int d = 0; d < s->head_dim; d++) out[d] = norm * x[d];
}

static void tq_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    if (n <= 0) return;
    const TqState *s0 = b->states[0];
    const int hd = b->head_dim;
    float qr[1024], qs[1024];
    uint8_t codes[1024];
    tq_project(s0->rot, hd, hd, q, qr);
    if (s0->prod) tq_project(s0->sketch, hd, hd, qr, qs);
    for (int j = 0; j < n; j++) {
        int local;
        const TqState *s = codec_block(b, j, &local);
        const uint8_t *row = tq_row(s, head, local);
        quant_unpack(row + 2, codes, (size_t)hd, s->cbits);
        float acc = 0.0f;
        for (int d = 0; d < hd; d++) acc += qr[d] * s->levels[codes[d]];
        if (s->prod)
            acc += s->alpha * fp16_at(row + 2 + s->code_bytes) * tq_sign_dot(row + 4 + s->code_bytes, qs, hd);
        out[j] = fp16_at(row) * acc;
    }
}

static void tq_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    const TqState *s0 = b->states[0];
    const int hd = b->head_dim;
    float ay[1024], as[1024], back[1024];
    uint8_t codes[1024];
    memset(ay, 0, sizeof(float) * (size_t)hd);
    memset(as, 0, sizeof(float) * (size_t)hd);
    for (int j = 0; j < n; j++) {
        int local;
        const TqState *s = codec_block(b, j, &local);
        const uint8_t *row = tq_row(s, head, local);
        const float w = p[j] * fp16_at(row);
        quant_unpack(row + 2, codes, (size_t)hd, s->cbits);
        for (int d = 0; d < hd; d++) ay[d] += w * s->levels[codes[d]];
        if (!s->prod) continue;
        const float g = w * s->alpha * fp16_at(row + 2 + s->code_bytes);
        const uint8_t *signs = row + 4 + s->code_bytes;
        for (int d = 0; d < hd; d++) as[d] += (signs[d / 8] >> (d % 8)) & 1 ? g : -g;
    }
    if (s0->prod) {
        tq_project_back(s0->sketch, hd, hd, as, back);
        for (int d = 0; d < hd; d++) ay[d] += back[d];
    }
    tq_project_back(s0->rot, hd, hd, ay, out);
}

static size_t tq_bytes(const void *state) {
    const TqState *s = state;
    return (size_t)s->length * (size_t)s->n_heads * s->row_bytes;
}

CODEC_OPS(tq, NULL, NULL);

static void *tq_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                       size_t normalised_len, char *err, size_t errlen) {
    const char *mode = spec_string(spec, "mode");
    if (mode && strcmp(mode, "mse") != 0 && strcmp(mode, "prod") != 0) {
        snprintf(err, errlen, "turboquant: mode=%.20s: expected mse or prod", mode);
        return NULL;
    }
    const int prod = mode && strcmp(mode, "prod") == 0;
    int bits, seed;
    if (spec_int(spec, "bits", prod ? 4 : 3, prod ? 2 : 1, prod ? 5 : 4, &bits, err, errlen) ||
        spec_int(spec, "seed", 1, 0, 1 << 30, &seed, err, errlen) ||
        codec_check_shape("turboquant", n_heads, head_dim, capacity, 1, err, errlen))
        return NULL;
    if (head_dim < 3) {
        snprintf(err, errlen, "turboquant: needs head_dim >= 3 (got %d)", head_dim);
        return NULL;
    }
    snprintf(normalised, normalised_len, "turboquant:bits=%d,mode=%s,seed=%d", bits, prod ? "prod" : "mse", seed);
    TqState *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory allocating a cache stream");
        return NULL;
    }
    s->n_heads = n_heads, s->head_dim = head_dim, s->prod = prod, s->cbits = prod ? bits - 1 : bits;
    s->alpha = (float)(sqrt(M_PI / 2.0) / head_dim);
    s->code_bytes = quant_packed_bytes((size_t)head_dim, s->cbits);
    s->sign_bytes = prod ? (size_t)(head_dim + 7) / 8 : 0;
    s->row_bytes = 2 + s->code_bytes + (prod ? 2 + s->sign_bytes : 0);
    s->rot = transform_rotation(2, (unsigned long)seed, head_dim);
    s->sketch = prod ? tq_gaussian((unsigned long)seed, head_dim, head_dim) : NULL;
    s->levels = tq_codebook(head_dim, s->cbits);
    s->rows = calloc((size_t)capacity * n_heads, s->row_bytes);
    if (!s->rot || (prod && !s->sketch) || !s->levels || !s->rows) {
        tq_destroy(s);
        snprintf(err, errlen, "out of memory allocating a cache stream");
        return NULL;
    }
    return s;
}

const CodecFamily CODEC_FAMILY(codec_turboquant) = {
    .name = "turboquant", .ops = &tq_ops, .create = tq_create,
    .help = "turboquant:bits=B    TurboQuant: seeded random rotation, Lloyd-Max levels for the rotated "
            "coordinate, fp16 norm; mode=mse (B=1..4) or prod (B−1 bits + 1-bit QJL residual, B=2..5), seed=S"};
