// llama.cpp's block formats along each head: q8_0, q4_0, q4_1, q5_0, q5_1 and iq4_nl. A block is
// 32 consecutive numbers of one head's vector (one block per head per token at head_dim 32), with
// llama.cpp's byte layout (fp16 d [, fp16 m] [, qh[4]], qs) and the rounding rules of its reference
// quantisers (ggml-quants.c), rewritten here:
//   q8_0   d = absmax/127, q = roundf(x/d) (half away from zero)             34 bytes per block
//   q4_0   d = extreme/−8, q = min(15, trunc(x/d + 8.5)), x̂ = (q − 8)·d       18
//   q4_1   d = (max−min)/15, m = min, q = min(15, trunc((x−min)/d + 0.5))    20
//   q5_0   d = extreme/−16, q = min(31, trunc(x/d + 16.5)), x̂ = (q − 16)·d    22
//   q5_1   d = (max−min)/31, m = min, q = min(31, trunc((x−min)/d + 0.5))    24
//   iq4_nl non-uniform codebook {−127 … 113}, llama.cpp's weighted scale search 18
// As in llama.cpp, codes are computed with the fp32 scale (1/d) and d, m are stored as fp16 (round
// to nearest even); decode uses the stored fp16 values. Nibbles: number j in the low nibble of
// qs[j], number j+16 in the high one; q5's fifth bits in qh (bit j for number j).
// head_dim must be a multiple of 32.
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codecs.h"

#define QK 32

typedef enum { FMT_Q8_0, FMT_Q4_0, FMT_Q4_1, FMT_Q5_0, FMT_Q5_1, FMT_IQ4_NL } BlockFormat;

typedef struct {
    const char *name;
    size_t block_bytes;
} BlockInfo;

static const BlockInfo block_info[] = {
    [FMT_Q8_0] = {"q8_0", 34}, [FMT_Q4_0] = {"q4_0", 18}, [FMT_Q4_1] = {"q4_1", 20},
    [FMT_Q5_0] = {"q5_0", 22}, [FMT_Q5_1] = {"q5_1", 24}, [FMT_IQ4_NL] = {"iq4_nl", 18},
};

// iq4_nl's codebook (kvalues_iq4nl).
static const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

typedef struct {
    BlockFormat format;
    int n_heads, head_dim, capacity, length;
    int blocks;           // per head per token: head_dim / 32
    size_t block_bytes;
    uint8_t *data;        // [head][token][blocks][block_bytes]
} BlockState;

// ---- Block layout helpers -------------------------------------------------------------------
static inline float load_f16(const uint8_t *p) {
    uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
    return quant_fp16_to_fp32(h);
}

static inline void store_f16(uint8_t *p, float x) {
    uint16_t h = quant_fp32_to_fp16(x);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

static inline uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// llama.cpp converts `x + 8.5f` etc. with a truncating cast; the operand is never negative here
// beyond rounding noise, and the clamp keeps it in 0..hi.
static inline int trunc_clamp(float v, int hi) {
    if (!(v > 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

// ---- Quantisers: one block of 32 numbers --------------------------------------------------
static void quantise_q8_0(const float *x, uint8_t *b) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    for (int j = 0; j < QK; j++) {
        float v = roundf(x[j] * id); // |x·id| <= 127 up to rounding noise
        v = fminf(127.0f, fmaxf(-127.0f, v));
        b[2 + j] = (uint8_t)(int8_t)v;
    }
}

// q4_0 (bits 4) and q5_0 (bits 5): d = signed extreme / −2^(bits−1).
static void quantise_qx_0(const float *x, uint8_t *b, int bits) {
    const int half = 1 << (bits - 1), top = (1 << bits) - 1;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    const float d = max / (float)-half;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    uint8_t q[QK];
    for (int j = 0; j < QK; j++) q[j] = (uint8_t)trunc_clamp(x[j] * id + ((float)half + 0.5f), top);
    uint8_t *qs = b + (bits == 5 ? 6 : 2);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + QK / 2] & 0x0f) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + QK / 2] >> 4) & 1) << (j + QK / 2);
    }
    if (bits == 5)
        for (int i = 0; i < 4; i++) b[2 + i] = (uint8_t)(qh >> (8 * i));
}

// q4_1 (bits 4) and q5_1 (bits 5): d = (max − min) / (2^bits − 1), m = min.
static void quantise_qx_1(const float *x, uint8_t *b, int bits) {
    const int top = (1 << bits) - 1;
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < QK; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / (float)top;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    store_f16(b + 2, min);
    uint8_t q[QK];
    for (int j = 0; j < QK; j++) q[j] = (uint8_t)trunc_clamp((x[j] - min) * id + 0.5f, top);
    uint8_t *qs = b + (bits == 5 ? 8 : 4);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + QK / 2] & 0x0f) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + QK / 2] >> 4) & 1) << (j + QK / 2);
    }
    if (bits == 5)
        for (int i = 0; i < 4; i++) b[4 + i] = (uint8_t)(qh >> (8 * i));
}

// The codebook index nearest to v (ties to the upper entry), as llama.cpp's best_index_int8.
static int iq4nl_nearest(float v) {
    if (v <= iq4nl_values[0]) return 0;
    if (v >= iq4nl_values[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < iq4nl_values[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - iq4nl_values[hi - 1] < iq4nl_values[hi] - v ? hi - 1 : hi;
}

// iq4_nl: llama.cpp's quantize_row_iq4_nl_impl for one block of 32 without an importance matrix
// (weights x², ntry = 7): start from d = max/127 (mapping the signed extreme to +127, clipped to
// 113), take the weighted least-squares scale of that assignment, then try the 15 scales that map
// the extreme to −127 + t (t = −7..7) and keep the best weighted fit Σw·q·x)²/Σw·q²; finally
// re-assign every number to its nearest codebook entry under the chosen scale.
static void quantise_iq4_nl(const float *x, uint8_t *b) {
    const int ntry = 7;
    float w[QK];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++) {
        w[j] = x[j] * x[j];
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    float d = 0.0f;
    if (amax >= 1e-15f) {
        const float d0 = -max / (float)iq4nl_values[0]; // max/127: the extreme maps to +127
        float id = 1.0f / d0;
        float sumqx = 0.0f, sumq2 = 0.0f;
        for (int j = 0; j < QK; j++) {
            const float q = iq4nl_values[iq4nl_nearest(id * x[j])];
            sumqx += w[j] * q * x[j];
            sumq2 += w[j] * q * q;
        }
        d = sumqx / sumq2;
        float best = d * sumqx;
        for (int t = -ntry; t <= ntry; t++) {
            id = ((float)t + iq4nl_values[0]) / max;
            sumqx = sumq2 = 0.0f;
            for (int j = 0; j < QK; j++) {
                const float q = iq4nl_values[iq4nl_nearest(id * x[j])];
                sumqx += w[j] * q * x[j];
                sumq2 += w[j] * q * q;
            }
            if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
    }
    store_f16(b, d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t L[QK];
    for (int j = 0; j < QK; j++) L[j] = (uint8_t)iq4nl_nearest(id * x[j]);
    for (int j = 0; j < QK / 2; j++) b[2 + j] = (uint8_t)(L[j] | (L[j + QK / 2] << 4));
}

static void quantise_block(BlockFormat f, const float *x, uint8_t *b) {
    switch (f) {
    case FMT_Q8_0: quantise_q8_0(x, b); break;
    case FMT_Q4_0: quantise_qx_0(x, b, 4); break;
    case FMT_Q5_0: quantise_qx_0(x, b, 5); break;
    case FMT_Q4_1: quantise_qx_1(x, b, 4); break;
    case FMT_Q5_1: quantise_qx_1(x, b, 5); break;
    case FMT_IQ4_NL: quantise_iq4_nl(x, b); break;
    }
}

// ---- Decoding ------------------------------------------------------------------------------
// Numbers j and j + 16 of a block (j < 16) share a byte of qs, so every kernel walks j over 16 and
// decodes the pair in registers: lo = x̂_j, hi = x̂_{j+16}. The block's scale (and minimum, high
// bits) are read once per block into BlockHead.
typedef struct {
    float d, m;
    uint32_t qh;
} BlockHead;

#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE BlockHead block_head(BlockFormat f, const uint8_t *b) {
    BlockHead h = {load_f16(b), 0.0f, 0};
    if (f == FMT_Q4_1 || f == FMT_Q5_1) h.m = load_f16(b + 2);
    if (f == FMT_Q5_0) h.qh = load_u32(b + 2);
    if (f == FMT_Q5_1) h.qh = load_u32(b + 4);
    return h;
}

static ALWAYS_INLINE void block_pair(BlockFormat f, const uint8_t *b, BlockHead h, int j, float *lo, float *hi) {
    switch (f) {
    case FMT_Q8_0:
        *lo = (float)(int8_t)b[2 + j] * h.d;
        *hi = (float)(int8_t)b[2 + QK / 2 + j] * h.d;
        break;
    case FMT_Q4_0:
        *lo = (float)((b[2 + j] & 0x0f) - 8) * h.d;
        *hi = (float)((b[2 + j] >> 4) - 8) * h.d;
        break;
    case FMT_Q4_1:
        *lo = (float)(b[4 + j] & 0x0f) * h.d + h.m;
        *hi = (float)(b[4 + j] >> 4) * h.d + h.m;
        break;
    case FMT_Q5_0:
        *lo = (float)((int)((b[6 + j] & 0x0f) | (((h.qh >> j) & 1) << 4)) - 16) * h.d;
        *hi = (float)((int)((b[6 + j] >> 4) | (((h.qh >> (j + QK / 2)) & 1) << 4)) - 16) * h.d;
        break;
    case FMT_Q5_1:
        *lo = (float)((b[8 + j] & 0x0f) | (((h.qh >> j) & 1) << 4)) * h.d + h.m;
        *hi = (float)((b[8 + j] >> 4) | (((h.qh >> (j + QK / 2)) & 1) << 4)) * h.d + h.m;
        break;
    case FMT_IQ4_NL:
        *lo = (float)iq4nl_values[b[2 + j] & 0x0f] * h.d;
        *hi = (float)iq4nl_values[b[2 + j] >> 4] * h.d;
        break;
    }
}

// ---- The codec ------------------------------------------------------------------------------
static void *block_create(BlockFormat f, CodecSpec *spec, int n_heads, int head_dim, int capacity,
                          char *normalised, size_t normalised_len, char *err, size_t errlen) {
    (void)spec_string(spec, "role"); // keys and values are quantised alike
    const char *name = block_info[f].name;
    if (n_heads < 1 || capacity < 1 || head_dim < QK || head_dim % QK) {
        snprintf(err, errlen, "%s: blocks of 32 need head_dim a multiple of 32 and at least one head and token "
                 "(got %d, %d, %d)", name, head_dim, n_heads, capacity);
        return NULL;
    }
    BlockState *s = calloc(1, sizeof *s);
    if (s) {
        s->block_bytes = block_info[f].block_bytes;
        s->blocks = head_dim / QK;
        s->data = malloc((size_t)n_heads * (size_t)capacity * (size_t)s->blocks * s->block_bytes);
    }
    if (!s || !s->data) {
        free(s);
        snprintf(err, errlen, "out of memory allocating a %s cache stream", name);
        return NULL;
    }
    s->format = f;
    s->n_heads = n_heads;
    s->head_dim = head_dim;
    s->capacity = capacity;
    snprintf(normalised, normalised_len, "%s", name);
    return s;
}

static inline const uint8_t *block_row(const BlockState *s, int head, int token) {
    return s->data + ((size_t)head * s->capacity + (size_t)token) * s->blocks * s->block_bytes;
}

static void block_append(void *state, const float *vec) {
    BlockState *s = state;
    for (int h = 0; h < s->n_heads; h++) {
        uint8_t *row = (uint8_t *)block_row(s, h, s->length);
        for (int i = 0; i < s->blocks; i++)
            quantise_block(s->format, vec + h * s->head_dim + i * QK, row + i * s->block_bytes);
    }
    s->length++;
}

// The kernels are written once with the format as a parameter and instantiated per format, so
// each inner loop is straight-line decoding the compiler vectorises.
static ALWAYS_INLINE void block_scores_impl(const BlockState *s, int head, const float *q, float *out, int n,
                                            const BlockFormat f) {
    for (int j = 0; j < n; j++) {
        const uint8_t *row = block_row(s, head, j);
        float acc = 0.0f;
        for (int i = 0; i < s->blocks; i++) {
            const uint8_t *b = row + i * s->block_bytes;
            const BlockHead h = block_head(f, b);
            const float *qb = q + i * QK;
#pragma omp simd reduction(+ : acc)
            for (int k = 0; k < QK / 2; k++) {
                float lo, hi;
                block_pair(f, b, h, k, &lo, &hi);
                acc += qb[k] * lo + qb[k + QK / 2] * hi;
            }
        }
        out[j] = acc;
    }
}

static ALWAYS_INLINE void block_mix_impl(const BlockState *s, int head, const float *p, float *out, int n,
                                         const BlockFormat f) {
    memset(out, 0, sizeof(float) * (size_t)s->head_dim);
    for (int j = 0; j < n; j++) {
        const uint8_t *row = block_row(s, head, j);
        const float pj = p[j];
        for (int i = 0; i < s->blocks; i++) {
            const uint8_t *b = row + i * s->block_bytes;
            const BlockHead h = block_head(f, b);
            float *ob = out + i * QK;
#pragma omp simd
            for (int k = 0; k < QK / 2; k++) {
                float lo, hi;
                block_pair(f, b, h, k, &lo, &hi);
                ob[k] += pj * lo;
                ob[k + QK / 2] += pj * hi;
            }
        }
    }
}

#define BLOCK_DISPATCH(s, KERNEL)                                                                  \
    switch ((s)->format) {                                                                         \
    case FMT_Q8_0: KERNEL(FMT_Q8_0); break;                                                        \
    case FMT_Q4_0: KERNEL(FMT_Q4_0); break;                                                        \
    case FMT_Q4_1: KERNEL(FMT_Q4_1); break;                                                        \
    case FMT_Q5_0: KERNEL(FMT_Q5_0); break;                                                        \
    case FMT_Q5_1: KERNEL(FMT_Q5_1); break;                                                        \
    case FMT_IQ4_NL: KERNEL(FMT_IQ4_NL); break;                                                    \
    }

static void block_scores(const void *state, int head, const float *q, float *out, int n) {
    const BlockState *s = state;
#define SCORES(f) block_scores_impl(s, head, q, out, n, f)
    BLOCK_DISPATCH(s, SCORES)
#undef SCORES
}

static void block_mix(const void *state, int head, const float *p, float *out, int n) {
    const BlockState *s = state;
#define MIX(f) block_mix_impl(s, head, p, out, n, f)
    BLOCK_DISPATCH(s, MIX)
#undef MIX
}

static void block_read(const void *state, int head, int token, float *out) {
    const BlockState *s = state;
    const uint8_t *row = block_row(s, head, token);
    for (int i = 0; i < s->blocks; i++) {
        const uint8_t *b = row + i * s->block_bytes;
        const BlockHead h = block_head(s->format, b);
        for (int k = 0; k < QK / 2; k++) block_pair(s->format, b, h, k, &out[i * QK + k], &out[i * QK + k + QK / 2]);
    }
}

static size_t block_bytes(const void *state) {
    const BlockState *s = state;
    return s->block_bytes * (size_t)s->blocks * (size_t)s->length * s->n_heads;
}

static void block_destroy(void *state) {
    BlockState *s = state;
    if (!s) return;
    free(s->data);
    free(s);
}

static const CodecOps block_ops = {
    .append = block_append,
    .end_step = NULL,
    .scores = block_scores,
    .mix = block_mix,
    .read = block_read,
    .bytes = block_bytes,
    .destroy = block_destroy,
};

#define BLOCK_FAMILY(id, fmt, help_text)                                                             \
    static void *create_##id(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised, \
                             size_t normalised_len, char *err, size_t errlen) {                      \
        return block_create(fmt, spec, n_heads, head_dim, capacity, normalised, normalised_len, err, errlen); \
    }                                                                                                \
    const CodecFamily codec_##id = {.name = #id, .help = help_text, .ops = &block_ops, .create = create_##id};

BLOCK_FAMILY(q8_0, FMT_Q8_0, "q8_0                 llama.cpp q8_0: blocks of 32, int8 codes, fp16 absmax/127 scale (8.5 bits)")
BLOCK_FAMILY(q4_0, FMT_Q4_0, "q4_0                 llama.cpp q4_0: blocks of 32, 4-bit codes, fp16 scale extreme/-8 (4.5 bits)")
BLOCK_FAMILY(q4_1, FMT_Q4_1, "q4_1                 llama.cpp q4_1: blocks of 32, 4-bit codes, fp16 scale and minimum (5 bits)")
BLOCK_FAMILY(q5_0, FMT_Q5_0, "q5_0                 llama.cpp q5_0: blocks of 32, 5-bit codes, fp16 scale extreme/-16 (5.5 bits)")
BLOCK_FAMILY(q5_1, FMT_Q5_1, "q5_1                 llama.cpp q5_1: blocks of 32, 5-bit codes, fp16 scale and minimum (6 bits)")
BLOCK_FAMILY(iq4_nl, FMT_IQ4_NL, "iq4_nl               llama.cpp iq4_nl: blocks of 32, 16-level non-uniform codebook, fp16 scale (4.5 bits)")
