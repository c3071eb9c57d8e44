// bf16: every number stored as bfloat16 (fp32 with its mantissa rounded to 7 bits, nearest even).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codecs.h"

typedef struct {
    int n_heads, head_dim, capacity, length;
    uint16_t *data; // [head][token][head_dim]
} Bf16State;

static void *bf16_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                         size_t normalised_len, char *err, size_t errlen) {
    (void)spec_string(spec, "role"); // keys and values are stored alike
    if (n_heads < 1 || capacity < 1 || head_dim < 2 || head_dim % 2) {
        snprintf(err, errlen, "bf16: needs an even head_dim >= 2 and at least one head and token (got %d, %d, %d)",
                 head_dim, n_heads, capacity);
        return NULL;
    }
    Bf16State *s = calloc(1, sizeof *s);
    if (s) s->data = malloc(sizeof(uint16_t) * (size_t)n_heads * (size_t)capacity * (size_t)head_dim);
    if (!s || !s->data) {
        free(s);
        snprintf(err, errlen, "out of memory allocating a bf16 cache stream");
        return NULL;
    }
    s->n_heads = n_heads;
    s->head_dim = head_dim;
    s->capacity = capacity;
    snprintf(normalised, normalised_len, "bf16");
    return s;
}

static inline const uint16_t *bf16_row(const Bf16State *s, int head, int token) {
    return s->data + ((size_t)head * s->capacity + (size_t)token) * s->head_dim;
}

static void bf16_append(void *state, const float *vec) {
    Bf16State *s = state;
    for (int h = 0; h < s->n_heads; h++) {
        uint16_t *row = (uint16_t *)bf16_row(s, h, s->length);
        for (int d = 0; d < s->head_dim; d++) row[d] = quant_fp32_to_bf16(vec[h * s->head_dim + d]);
    }
    s->length++;
}

// The kernels are written once with head_dim as a parameter and instantiated for micro's 32, where
// the compiler unrolls and vectorises with constant trip counts, and for any other head_dim.
static inline __attribute__((always_inline)) void bf16_scores_hd(const Bf16State *s, int head, const float *q,
                                                                 float *out, int n, const int hd) {
    for (int j = 0; j < n; j++) {
        const uint16_t *k = bf16_row(s, head, j);
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < hd; d++) acc += q[d] * quant_bf16_to_fp32(k[d]);
        out[j] = acc;
    }
}

static void bf16_scores(const void *state, int head, const float *q, float *out, int n) {
    const Bf16State *s = state;
    if (s->head_dim == 32)
        bf16_scores_hd(s, head, q, out, n, 32);
    else
        bf16_scores_hd(s, head, q, out, n, s->head_dim);
}

static inline __attribute__((always_inline)) void bf16_mix_hd(const Bf16State *s, int head, const float *p,
                                                              float *out, int n, const int hd) {
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int j = 0; j < n; j++) {
        const uint16_t *v = bf16_row(s, head, j);
        const float pj = p[j];
#pragma omp simd
        for (int d = 0; d < hd; d++) out[d] += pj * quant_bf16_to_fp32(v[d]);
    }
}

static void bf16_mix(const void *state, int head, const float *p, float *out, int n) {
    const Bf16State *s = state;
    if (s->head_dim == 32)
        bf16_mix_hd(s, head, p, out, n, 32);
    else
        bf16_mix_hd(s, head, p, out, n, s->head_dim);
}

static void bf16_read(const void *state, int head, int token, float *out) {
    const Bf16State *s = state;
    const uint16_t *v = bf16_row(s, head, token);
    for (int d = 0; d < s->head_dim; d++) out[d] = quant_bf16_to_fp32(v[d]);
}

static size_t bf16_bytes(const void *state) {
    const Bf16State *s = state;
    return sizeof(uint16_t) * (size_t)s->length * s->n_heads * s->head_dim;
}

static void bf16_destroy(void *state) {
    Bf16State *s = state;
    if (!s) return;
    free(s->data);
    free(s);
}

static const CodecOps bf16_ops = {
    .append = bf16_append,
    .end_step = NULL,
    .scores = bf16_scores,
    .mix = bf16_mix,
    .read = bf16_read,
    .bytes = bf16_bytes,
    .destroy = bf16_destroy,
};

const CodecFamily codec_bf16 = {
    .name = "bf16",
    .help = "bf16                 bfloat16, round to nearest even (16 bits per number)",
    .ops = &bf16_ops,
    .create = bf16_create,
};
