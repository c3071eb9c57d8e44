// int: the plate's scheme. Each head's vector at every token is quantised on its own, symmetric
// round-to-nearest (ties to even) with one scale per head per token:
//   levels=sym  (default) codes -L..L, L = 2^(B-1) - 1, scale d = absmax / L;
//   levels=full codes -2^(B-1)..2^(B-1)-1; the signed extreme maps to -2^(B-1), d = extreme / -2^(B-1)
//               (the rule of llama.cpp's q4_0; d is negative when the extreme is positive);
//   bits=1      (levels=sign, the only choice) one bit per number, its sign, and one scale, the mean
//               |x| of the vector: x̂ = sign(x) · mean|x| (x >= 0 counts as +).
// The scale is stored as fp16 (scale=fp16, default, saturating) or exactly (scale=fp32); numbers
// are quantised with the stored scale so that decode is consistent. An all-zero vector stores scale
// 0 and decodes to zeros. Codes are packed densely, B bits each (quant.h), code = q + 2^(B-1).
// Bytes per head per token: ceil(head_dim·B / 8) + 2 (or + 4), e.g. bits=4: 16 + 2 = 18.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codecs.h"

enum { LEVELS_SYM, LEVELS_FULL, LEVELS_SIGN };

typedef struct {
    int n_heads, head_dim, capacity, length;
    int bits, levels, scale_fp32;
    size_t row_bytes;  // packed codes of one head at one token
    uint8_t *codes;    // [head][token][row_bytes]
    uint16_t *scale16; // [head][token] with scale=fp16
    float *scale32;    // [head][token] with scale=fp32
} IntState;

static const char *levels_name[] = {"sym", "full", "sign"};

static void *int_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                        size_t normalised_len, char *err, size_t errlen) {
    (void)spec_string(spec, "role"); // keys and values are quantised alike
    const char *bits_text = spec_string(spec, "bits");
    if (!bits_text) {
        snprintf(err, errlen, "int: give the width, e.g. int:bits=4 (bits=1..8)");
        return NULL;
    }
    int bits;
    if (spec_int(spec, "bits", 0, 1, 8, &bits, err, errlen)) return NULL;
    const char *lv = spec_string(spec, "levels");
    int levels;
    if (bits == 1) {
        if (lv && strcmp(lv, "sign") != 0) {
            snprintf(err, errlen, "int: bits=1 stores sign x mean|x| (levels=sign); levels=%s needs bits >= 2", lv);
            return NULL;
        }
        levels = LEVELS_SIGN;
    } else if (!lv || strcmp(lv, "sym") == 0) {
        levels = LEVELS_SYM;
    } else if (strcmp(lv, "full") == 0) {
        levels = LEVELS_FULL;
    } else {
        snprintf(err, errlen, "int: levels must be sym or full (got '%s')", lv);
        return NULL;
    }
    const char *sc = spec_string(spec, "scale");
    int scale_fp32;
    if (!sc || strcmp(sc, "fp16") == 0) {
        scale_fp32 = 0;
    } else if (strcmp(sc, "fp32") == 0) {
        scale_fp32 = 1;
    } else {
        snprintf(err, errlen, "int: scale must be fp16 or fp32 (got '%s')", sc);
        return NULL;
    }
    if (n_heads < 1 || capacity < 1 || head_dim < 2 || head_dim % 2) {
        snprintf(err, errlen, "int: needs an even head_dim >= 2 and at least one head and token (got %d, %d, %d)",
                 head_dim, n_heads, capacity);
        return NULL;
    }
    IntState *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->n_heads = n_heads;
    s->head_dim = head_dim;
    s->capacity = capacity;
    s->bits = bits;
    s->levels = levels;
    s->scale_fp32 = scale_fp32;
    s->row_bytes = quant_packed_bytes((size_t)head_dim, bits);
    const size_t slots = (size_t)n_heads * (size_t)capacity;
    s->codes = malloc(slots * s->row_bytes);
    if (scale_fp32)
        s->scale32 = malloc(slots * sizeof(float));
    else
        s->scale16 = malloc(slots * sizeof(uint16_t));
    if (!s->codes || (!s->scale32 && !s->scale16)) goto oom;
    snprintf(normalised, normalised_len, "int:bits=%d,levels=%s,scale=%s", bits, levels_name[levels],
             scale_fp32 ? "fp32" : "fp16");
    return s;
oom:
    if (s) {
        free(s->codes);
        free(s->scale16);
        free(s->scale32);
        free(s);
    }
    snprintf(err, errlen, "out of memory allocating an int cache stream");
    return NULL;
}

static inline size_t int_slot(const IntState *s, int head, int token) {
    return (size_t)head * s->capacity + (size_t)token;
}

// Store a scale in the stream's format; returns the value decode will use.
static float int_store_scale(IntState *s, size_t slot, float d) {
    if (s->scale_fp32) {
        s->scale32[slot] = d;
        return d;
    }
    s->scale16[slot] = quant_fp32_to_fp16_sat(d);
    return quant_fp16_to_fp32(s->scale16[slot]);
}

static inline float int_scale(const IntState *s, size_t slot) {
    return s->scale_fp32 ? s->scale32[slot] : quant_fp16_to_fp32(s->scale16[slot]);
}

static void int_encode(IntState *s, int head, const float *x) {
    const int hd = s->head_dim;
    const size_t slot = int_slot(s, head, s->length);
    uint8_t q[32];
    uint8_t *row = s->codes + slot * s->row_bytes;
    if (s->levels == LEVELS_SIGN) {
        float sum = 0.0f;
        for (int d = 0; d < hd; d++) sum += fabsf(x[d]);
        (void)int_store_scale(s, slot, sum / (float)hd);
        for (int c = 0; c < hd; c += 32) {
            const int n = hd - c < 32 ? hd - c : 32;
            for (int i = 0; i < n; i++) q[i] = x[c + i] >= 0.0f ? 1 : 0;
            quant_pack(row + quant_packed_bytes((size_t)c, 1), q, (size_t)n, 1);
        }
        return;
    }
    const int half = 1 << (s->bits - 1);
    int lo, hi;
    float d;
    if (s->levels == LEVELS_SYM) {
        float amax = 0.0f;
        for (int i = 0; i < hd; i++) amax = fmaxf(amax, fabsf(x[i]));
        lo = -(half - 1);
        hi = half - 1;
        d = amax / (float)hi;
    } else {
        float amax = 0.0f, extreme = 0.0f;
        for (int i = 0; i < hd; i++) {
            if (fabsf(x[i]) > amax) {
                amax = fabsf(x[i]);
                extreme = x[i];
            }
        }
        lo = -half;
        hi = half - 1;
        d = extreme / (float)-half;
    }
    const float ds = int_store_scale(s, slot, d);
    // Chunks of 32 numbers start on a byte boundary (32·B bits), so each packs on its own.
    for (int c = 0; c < hd; c += 32) {
        const int n = hd - c < 32 ? hd - c : 32;
        for (int i = 0; i < n; i++) {
            const int v = ds != 0.0f ? quant_round_clamp(x[c + i] / ds, lo, hi) : 0;
            q[i] = (uint8_t)(v + half);
        }
        quant_pack(row + quant_packed_bytes((size_t)c, s->bits), q, (size_t)n, s->bits);
    }
}

static void int_append(void *state, const float *vec) {
    IntState *s = state;
    for (int h = 0; h < s->n_heads; h++) int_encode(s, h, vec + h * s->head_dim);
    s->length++;
}

// Decode numbers [c, c + n) of one head at one token (c a multiple of 32, n <= 32), unscaled:
// out = q, the signed level; the caller multiplies by the scale. bits = 1 is sign x 1.
#define ALWAYS_INLINE inline __attribute__((always_inline))
static ALWAYS_INLINE void int_levels(const uint8_t *row, int c, int n, const int bits, float *out) {
    const size_t at = quant_packed_bytes((size_t)c, bits);
    if (bits == 1)
        quant_unpack_float(row + at, n, 1, 2.0f, 1.0f, out);
    else
        quant_unpack_float(row + at, n, bits, 1.0f, (float)(1 << (bits - 1)), out);
}

// The kernels are written once with head_dim and bits as parameters and instantiated for micro's
// head_dim 32 at each width, where the compiler unrolls the unpacking with constant shifts and
// vectorises with constant trip counts; another head_dim takes the generic instance.
// Widths 2 and 4 hold 8/B whole codes per byte: number e·i + k is bits [kB, kB+B) of byte i
// (e = 8/B). The score kernel then walks the bytes and decodes in registers against q permuted to
// the same order, qp[k][i] = q[e·i + k] (measured faster there; 1 bit and the mix kernel are not).
static ALWAYS_INLINE void int_scores_bytes(const IntState *s, int head, const float *q, float *out, int n,
                                           const int hd, const int bits) {
    const int e = 8 / bits, nb = hd / e;
    const unsigned mask = (1u << bits) - 1;
    const float mul = bits == 1 ? 2.0f : 1.0f, off = bits == 1 ? 1.0f : (float)(1 << (bits - 1));
    float qp[8][32];
    for (int i = 0; i < nb; i++)
        for (int k = 0; k < e; k++) qp[k][i] = q[e * i + k];
    for (int j = 0; j < n; j++) {
        const size_t slot = int_slot(s, head, j);
        const uint8_t *row = s->codes + slot * s->row_bytes;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int i = 0; i < nb; i++)
            for (int k = 0; k < e; k++) acc += qp[k][i] * ((float)((row[i] >> (k * bits)) & mask) * mul - off);
        out[j] = acc * int_scale(s, slot);
    }
}

static ALWAYS_INLINE void int_scores_impl(const IntState *s, int head, const float *q, float *out, int n,
                                          const int hd, const int bits) {
    if (hd == 32 && (bits == 2 || bits == 4)) {
        int_scores_bytes(s, head, q, out, n, 32, bits);
        return;
    }
    float lv[32];
    for (int j = 0; j < n; j++) {
        const size_t slot = int_slot(s, head, j);
        const uint8_t *row = s->codes + slot * s->row_bytes;
        float acc = 0.0f;
        if (bits == 8) { // bytes: unpack and multiply in one pass
#pragma omp simd reduction(+ : acc)
            for (int i = 0; i < hd; i++) acc += q[i] * ((float)row[i] - 128.0f);
        } else {
            for (int c = 0; c < hd; c += 32) {
                const int m = hd - c < 32 ? hd - c : 32;
                int_levels(row, c, m, bits, lv);
#pragma omp simd reduction(+ : acc)
                for (int i = 0; i < m; i++) acc += q[c + i] * lv[i];
            }
        }
        out[j] = acc * int_scale(s, slot);
    }
}

static ALWAYS_INLINE void int_mix_impl(const IntState *s, int head, const float *p, float *out, int n, const int hd,
                                       const int bits) {
    float lv[32];
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int j = 0; j < n; j++) {
        const size_t slot = int_slot(s, head, j);
        const uint8_t *row = s->codes + slot * s->row_bytes;
        const float w = p[j] * int_scale(s, slot);
        if (bits == 8) {
#pragma omp simd
            for (int i = 0; i < hd; i++) out[i] += w * ((float)row[i] - 128.0f);
        } else {
            for (int c = 0; c < hd; c += 32) {
                const int m = hd - c < 32 ? hd - c : 32;
                int_levels(row, c, m, bits, lv);
#pragma omp simd
                for (int i = 0; i < m; i++) out[c + i] += w * lv[i];
            }
        }
    }
}

// Calls KERNEL(hd, bits) with compile-time constants at head_dim 32.
#define INT_DISPATCH(s, KERNEL)                                                                    \
    switch ((s)->head_dim == 32 ? (s)->bits : 0) {                                                 \
    case 1: KERNEL(32, 1); break;                                                                  \
    case 2: KERNEL(32, 2); break;                                                                  \
    case 3: KERNEL(32, 3); break;                                                                  \
    case 4: KERNEL(32, 4); break;                                                                  \
    case 5: KERNEL(32, 5); break;                                                                  \
    case 6: KERNEL(32, 6); break;                                                                  \
    case 7: KERNEL(32, 7); break;                                                                  \
    case 8: KERNEL(32, 8); break;                                                                  \
    default: KERNEL((s)->head_dim, (s)->bits); break;                                              \
    }

static void int_scores(const void *state, int head, const float *q, float *out, int n) {
    const IntState *s = state;
#define SCORES(hd, bits) int_scores_impl(s, head, q, out, n, hd, bits)
    INT_DISPATCH(s, SCORES)
#undef SCORES
}

static void int_mix(const void *state, int head, const float *p, float *out, int n) {
    const IntState *s = state;
#define MIX(hd, bits) int_mix_impl(s, head, p, out, n, hd, bits)
    INT_DISPATCH(s, MIX)
#undef MIX
}

static void int_read(const void *state, int head, int token, float *out) {
    const IntState *s = state;
    const size_t slot = int_slot(s, head, token);
    const uint8_t *row = s->codes + slot * s->row_bytes;
    const float ds = int_scale(s, slot);
    for (int c = 0; c < s->head_dim; c += 32) {
        const int m = s->head_dim - c < 32 ? s->head_dim - c : 32;
        int_levels(row, c, m, s->bits, out + c);
        for (int i = 0; i < m; i++) out[c + i] *= ds;
    }
}

static size_t int_bytes(const void *state) {
    const IntState *s = state;
    const size_t scale_bytes = s->scale_fp32 ? sizeof(float) : sizeof(uint16_t);
    return (s->row_bytes + scale_bytes) * (size_t)s->length * s->n_heads;
}

static void int_destroy(void *state) {
    IntState *s = state;
    if (!s) return;
    free(s->codes);
    free(s->scale16);
    free(s->scale32);
    free(s);
}

static const CodecOps int_ops = {
    .append = int_append,
    .end_step = NULL,
    .scores = int_scores,
    .mix = int_mix,
    .read = int_read,
    .bytes = int_bytes,
    .destroy = int_destroy,
};

const CodecFamily codec_int = {
    .name = "int",
    .help = "int:bits=B           round to nearest per head per token, B=1..8, one scale (scale=fp16|fp32), "
            "levels=sym|full; B=1 stores sign x mean|x|",
    .ops = &int_ops,
    .create = int_create,
};
