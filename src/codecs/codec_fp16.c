// fp16: every number stored as IEEE binary16 (round to nearest even), 16 bits per number.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codecs.h"

typedef struct {
    int n_heads, head_dim, capacity, length;
    uint16_t *data; // [head][token][head_dim]
} Fp16State;

static void *fp16_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                         size_t normalised_len, char *err, size_t errlen) {
    (void)spec_string(spec, "role"); // keys and values are stored alike
    if (n_heads < 1 || capacity < 1 || head_dim < 2 || head_dim % 2) {
        snprintf(err, errlen, "fp16: needs an even head_dim >= 2 and at least one head and token (got %d, %d, %d)",
                 head_dim, n_heads, capacity);
        return NULL;
    }
    Fp16State *s = calloc(1, sizeof *s);
    if (s) s->data = malloc(sizeof(uint16_t) * (size_t)n_heads * (size_t)capacity * (size_t)head_dim);
    if (!s || !s->data) {
        free(s);
        snprintf(err, errlen, "out of memory allocating an fp16 cache stream");
        return NULL;
    }
    s->n_heads = n_heads;
    s->head_dim = head_dim;
    s->capacity = capacity;
    snprintf(normalised, normalised_len, "fp16");
    return s;
}

static inline const uint16_t *fp16_row(const Fp16State *s, int head, int token) {
    return s->data + ((size_t)head * s->capacity + (size_t)token) * s->head_dim;
}

static void fp16_append(void *state, const float *vec) {
    Fp16State *s = state;
    for (int h = 0; h < s->n_heads; h++) {
        uint16_t *row = (uint16_t *)fp16_row(s, h, s->length);
        for (int d = 0; d < s->head_dim; d++) row[d] = quant_fp32_to_fp16(vec[h * s->head_dim + d]);
    }
    s->length++;
}

// The kernels are written once with head_dim as a parameter and instantiated for micro's 32, where
// the compiler unrolls and vectorises with constant trip counts, and for any other head_dim.
static inline __attribute__((always_inline)) void fp16_scores_hd(const Fp16State *s, int head, const float *q,
                                                                 float *out, int n, const int hd) {
    for (int j = 0; j < n; j++) {
        const uint16_t *k = fp16_row(s, head, j);
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < hd; d++) acc += q[d] * quant_fp16_to_fp32(k[d]);
        out[j] = acc;
    }
}

static void fp16_scores(const void *state, int head, const float *q, float *out, int n) {
    const Fp16State *s = state;
    if (s->head_dim == 32)
        fp16_scores_hd(s, head, q, out, n, 32);
    else
        fp16_scores_hd(s, head, q, out, n, s->head_dim);
}

static inline __attribute__((always_inline)) void fp16_mix_hd(const Fp16State *s, int head, const float *p,
                                                              float *out, int n, const int hd) {
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int j = 0; j < n; j++) {
        const uint16_t *v = fp16_row(s, head, j);
        const float pj = p[j];
#pragma omp simd
        for (int d = 0; d < hd; d++) out[d] += pj * quant_fp16_to_fp32(v[d]);
    }
}

static void fp16_mix(const void *state, int head, const float *p, float *out, int n) {
    const Fp16State *s = state;
    if (s->head_dim == 32)
        fp16_mix_hd(s, head, p, out, n, 32);
    else
        fp16_mix_hd(s, head, p, out, n, s->head_dim);
}

static void fp16_read(const void *state, int head, int token, float *out) {
    const Fp16State *s = state;
    const uint16_t *v = fp16_row(s, head, token);
    for (int d = 0; d < s->head_dim; d++) out[d] = quant_fp16_to_fp32(v[d]);
}

static size_t fp16_bytes(const void *state) {
    const Fp16State *s = state;
    return sizeof(uint16_t) * (size_t)s->length * s->n_heads * s->head_dim;
}

static void fp16_destroy(void *state) {
    Fp16State *s = state;
    if (!s) return;
    free(s->data);
    free(s);
}

static const CodecOps fp16_ops = {
    .append = fp16_append,
    .end_step = NULL,
    .scores = fp16_scores,
    .mix = fp16_mix,
    .read = fp16_read,
    .bytes = fp16_bytes,
    .destroy = fp16_destroy,
};

const CodecFamily codec_fp16 = {
    .name = "fp16",
    .help = "fp16                 IEEE half precision, round to nearest even (16 bits per number)",
    .ops = &fp16_ops,
    .create = fp16_create,
};
