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
    int n_heads, length;
    TqCoder c;
    float alpha;      // √(π/2) / d
    size_t row_bytes; // formats.h: [fp16 ‖x‖][codes][fp16 γ][signs] (the last two: prod)
    uint8_t *rows;    // [token][head][row_bytes]
} TqState;

static void tq_destroy(void *state) {
    TqState *s = state;
    if (s) free(s->rows);
    free(s);
}

static uint8_t *tq_row(const TqState *s, int head, int t) {
    return s->rows + ((size_t)t * s->n_heads + head) * s->row_bytes;
}

static void tq_append(void *state, const float *x) {
    TqState *s = state;
    for (int h = 0; h < s->n_heads; h++) tq_encode(&s->c, x + h * s->c.d, tq_row(s, h, s->length));
    s->length++;
}

static float fp16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return quant_fp16_to_fp32(h);
}

static void tq_read(const void *state, int head, int t, float *out) {
    const TqState *s = state;
    tq_decode(&s->c, tq_row(s, head, t), out);
}

static void tq_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    if (n <= 0) return;
    const TqState *s0 = b->states[0];
    const TqCoder *c = &s0->c;
    const int hd = b->head_dim;
    float qr[1024], qs[1024];
    uint8_t codes[1024];
    tq_project(c->rot, hd, hd, q, qr);
    if (c->prod) tq_project(c->sketch, hd, hd, qr, qs);
    for (int j = 0; j < n; j++) {
        int local;
        const TqState *s = codec_block(b, j, &local);
        const uint8_t *row = tq_row(s, head, local);
        quant_unpack(row + tq_codes_at(), codes, (size_t)hd, c->cbits);
        float acc = 0.0f;
        for (int d = 0; d < hd; d++) acc += qr[d] * c->levels[codes[d]];
        if (c->prod) acc += s0->alpha * fp16_at(row + tq_gamma_at(c)) * tq_sign_dot(row + tq_signs_at(c), qs, hd);
        out[j] = fp16_at(row) * acc;
    }
}

static void tq_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    const TqState *s0 = b->states[0];
    const TqCoder *c = &s0->c;
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
        quant_unpack(row + tq_codes_at(), codes, (size_t)hd, c->cbits);
        for (int d = 0; d < hd; d++) ay[d] += w * c->levels[codes[d]];
        if (!c->prod) continue;
        const float g = w * s0->alpha * fp16_at(row + tq_gamma_at(c));
        const uint8_t *signs = row + tq_signs_at(c);
        for (int d = 0; d < hd; d++) as[d] += (signs[d / 8] >> (d % 8)) & 1 ? g : -g;
    }
    if (c->prod) {
        tq_project_back(c->sketch, hd, hd, as, back);
        for (int d = 0; d < hd; d++) ay[d] += back[d];
    }
    tq_project_back(c->rot, hd, hd, ay, out);
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
    TqCoder *c = &s->c;
    s->n_heads = n_heads, c->d = head_dim, c->prod = prod, c->cbits = prod ? bits - 1 : bits;
    s->alpha = (float)(sqrt(M_PI / 2.0) / head_dim); // as tq_decode's
    s->row_bytes = tq_row_bytes(c);
    c->rot = transform_rotation(2, (unsigned long)seed, head_dim);
    c->sketch = prod ? tq_gaussian((unsigned long)seed, head_dim, head_dim) : NULL;
    c->levels = tq_codebook(head_dim, c->cbits);
    s->rows = calloc((size_t)capacity * n_heads, s->row_bytes);
    if (!c->rot || (prod && !c->sketch) || !c->levels || !s->rows) {
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
