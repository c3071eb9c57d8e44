// fp8: every number stored as one FP8 byte, OCP E4M3FN or E5M2 (quant.h), round to nearest even,
// saturating. Spec `fp8:e4m3` or `fp8:e5m2` (the format is required), optionally `scale=token`:
//   scale=none  (default) numbers are cast as they are, as inference servers ship an unscaled
//               fp8 KV cache;
//   scale=token one fp16 scale per head per token, absmax / largest finite value, so that the
//               largest number of the vector lands on the format's largest value; numbers are
//               divided by the stored (fp16-rounded) scale before the cast.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codecs.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))

typedef struct {
    int n_heads, head_dim, capacity, length;
    QuantFp8Format format;
    int scaled;
    uint8_t *codes;   // [head][token][head_dim]
    uint16_t *scales; // [head][token] fp16, only with scale=token
} Fp8State;

static void *fp8_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                        size_t normalised_len, char *err, size_t errlen) {
    (void)spec_string(spec, "role"); // keys and values are stored alike
    const char *e4 = spec_string(spec, "e4m3");
    const char *e5 = spec_string(spec, "e5m2");
    if ((e4 && *e4) || (e5 && *e5)) {
        snprintf(err, errlen, "fp8: the format is a bare option (fp8:e4m3 or fp8:e5m2), not key=value");
        return NULL;
    }
    if (!e4 == !e5) {
        snprintf(err, errlen, "fp8: give exactly one format: fp8:e4m3 or fp8:e5m2");
        return NULL;
    }
    const char *scale = spec_string(spec, "scale");
    int scaled;
    if (!scale || strcmp(scale, "none") == 0) {
        scaled = 0;
    } else if (strcmp(scale, "token") == 0) {
        scaled = 1;
    } else {
        snprintf(err, errlen, "fp8: scale must be none or token (got '%s')", scale);
        return NULL;
    }
    if (n_heads < 1 || capacity < 1 || head_dim < 2 || head_dim % 2) {
        snprintf(err, errlen, "fp8: needs an even head_dim >= 2 and at least one head and token (got %d, %d, %d)",
                 head_dim, n_heads, capacity);
        return NULL;
    }
    Fp8State *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->codes = malloc((size_t)n_heads * (size_t)capacity * (size_t)head_dim);
    if (!s->codes) goto oom;
    if (scaled) {
        s->scales = malloc(sizeof(uint16_t) * (size_t)n_heads * (size_t)capacity);
        if (!s->scales) goto oom;
    }
    s->n_heads = n_heads;
    s->head_dim = head_dim;
    s->capacity = capacity;
    s->format = e5 ? QUANT_FP8_E5M2 : QUANT_FP8_E4M3;
    s->scaled = scaled;
    snprintf(normalised, normalised_len, "fp8:%s,scale=%s", e5 ? "e5m2" : "e4m3", scaled ? "token" : "none");
    return s;
oom:
    if (s) {
        free(s->codes);
        free(s);
    }
    snprintf(err, errlen, "out of memory allocating an fp8 cache stream");
    return NULL;
}

static inline size_t fp8_index(const Fp8State *s, int head, int token) {
    return (size_t)head * s->capacity + (size_t)token;
}

static inline float fp8_scale(const Fp8State *s, int head, int token) {
    return s->scaled ? quant_fp16_to_fp32(s->scales[fp8_index(s, head, token)]) : 1.0f;
}

static void fp8_append(void *state, const float *vec) {
    Fp8State *s = state;
    const int hd = s->head_dim;
    for (int h = 0; h < s->n_heads; h++) {
        const float *x = vec + h * hd;
        uint8_t *row = s->codes + fp8_index(s, h, s->length) * hd;
        float sd = 1.0f;
        if (s->scaled) {
            float amax = 0.0f;
            for (int d = 0; d < hd; d++) amax = fmaxf(amax, fabsf(x[d]));
            uint16_t code = quant_fp32_to_fp16_sat(amax / quant_fp8_max(s->format));
            sd = quant_fp16_to_fp32(code);
            // An all-zero vector (or one whose scale underflows fp16) keeps scale 1: no 0/0.
            if (!(sd > 0.0f)) {
                code = quant_fp32_to_fp16(1.0f);
                sd = 1.0f;
            }
            s->scales[fp8_index(s, h, s->length)] = code;
        }
        for (int d = 0; d < hd; d++) row[d] = quant_fp32_to_fp8(x[d] / sd, s->format);
    }
    s->length++;
}

static ALWAYS_INLINE float fp8_decode(uint8_t c, const QuantFp8Format format) {
    return format == QUANT_FP8_E5M2 ? quant_e5m2_to_fp32(c) : quant_e4m3_to_fp32(c);
}

// Written once with head_dim and the format as parameters, instantiated for micro's 32 (constant
// trip counts) and for any other head_dim.
static ALWAYS_INLINE void fp8_scores_impl(const Fp8State *s, int head, const float *q, float *out, int n, const int hd,
                                          const QuantFp8Format format) {
    for (int j = 0; j < n; j++) {
        const uint8_t *k = s->codes + fp8_index(s, head, j) * hd;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < hd; d++) acc += q[d] * fp8_decode(k[d], format);
        out[j] = acc * fp8_scale(s, head, j);
    }
}

static ALWAYS_INLINE void fp8_mix_impl(const Fp8State *s, int head, const float *p, float *out, int n, const int hd,
                                       const QuantFp8Format format) {
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int j = 0; j < n; j++) {
        const uint8_t *v = s->codes + fp8_index(s, head, j) * hd;
        const float w = p[j] * fp8_scale(s, head, j);
#pragma omp simd
        for (int d = 0; d < hd; d++) out[d] += w * fp8_decode(v[d], format);
    }
}

#define FP8_DISPATCH(s, KERNEL)                                                                    \
    if ((s)->head_dim == 32 && (s)->format == QUANT_FP8_E4M3)                                      \
        KERNEL(32, QUANT_FP8_E4M3);                                                                \
    else if ((s)->head_dim == 32)                                                                  \
        KERNEL(32, QUANT_FP8_E5M2);                                                                \
    else if ((s)->format == QUANT_FP8_E4M3)                                                        \
        KERNEL((s)->head_dim, QUANT_FP8_E4M3);                                                     \
    else                                                                                           \
        KERNEL((s)->head_dim, QUANT_FP8_E5M2);

static void fp8_scores(const void *state, int head, const float *q, float *out, int n) {
    const Fp8State *s = state;
#define SCORES(hd, format) fp8_scores_impl(s, head, q, out, n, hd, format)
    FP8_DISPATCH(s, SCORES)
#undef SCORES
}

static void fp8_mix(const void *state, int head, const float *p, float *out, int n) {
    const Fp8State *s = state;
#define MIX(hd, format) fp8_mix_impl(s, head, p, out, n, hd, format)
    FP8_DISPATCH(s, MIX)
#undef MIX
}

static void fp8_read(const void *state, int head, int token, float *out) {
    const Fp8State *s = state;
    const uint8_t *v = s->codes + fp8_index(s, head, token) * s->head_dim;
    const float sd = fp8_scale(s, head, token);
    for (int d = 0; d < s->head_dim; d++) out[d] = fp8_decode(v[d], s->format) * sd;
}

static size_t fp8_bytes(const void *state) {
    const Fp8State *s = state;
    const size_t per_head_token = (size_t)s->head_dim + (s->scaled ? sizeof(uint16_t) : 0);
    return per_head_token * (size_t)s->length * s->n_heads;
}

static void fp8_destroy(void *state) {
    Fp8State *s = state;
    if (!s) return;
    free(s->codes);
    free(s->scales);
    free(s);
}

static const CodecOps fp8_ops = {
    .append = fp8_append,
    .end_step = NULL,
    .scores = fp8_scores,
    .mix = fp8_mix,
    .read = fp8_read,
    .bytes = fp8_bytes,
    .destroy = fp8_destroy,
};

const CodecFamily codec_fp8 = {
    .name = "fp8",
    .help = "fp8:e4m3|e5m2        OCP FP8 (E4M3FN, max 448 / E5M2, max 57344), saturating, 8 bits; "
            "scale=token adds an fp16 absmax scale per head per token",
    .ops = &fp8_ops,
    .create = fp8_create,
};
