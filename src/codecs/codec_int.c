// int: the plate's scheme. Each head's vector at every token is quantised on its own, symmetric
// round-to-nearest (ties to even) with one scale per head per token:
//   levels=sym  (default) codes -L..L, L = 2^(B-1) - 1, scale d = absmax / L;
//   levels=full codes -2^(B-1)..2^(B-1)-1; the signed extreme maps to -2^(B-1), d = extreme / -2^(B-1)
//               (the rule of llama.cpp's q4_0; d is negative when the extreme is positive);
//   bits=1      (levels=sign, the only choice) one bit per number, its sign, and one scale, the mean
//               |x| of the vector: x̂ = sign(x) · mean|x| (x >= 0 counts as +).
// The scale is stored as fp16 (scale=fp16, default, saturating) or exactly (scale=fp32); numbers
// are quantised with the stored scale so that decode is consistent. An all-zero vector stores scale
// 0 and decodes to zeros. Codes are packed densely, B bits each (quant.h): the level q as a B-bit
// two's complement number (q mod 2^B), and at B = 1 the sign bit (1 for x < 0).
// Bytes per head per token: ceil(head_dim·B / 8) + 2 (or + 4), e.g. bits=4: 16 + 2 = 18.
//
// Layout: with head_dim a multiple of 32 (micro's 32) the codes lie in token tiles (quant.h): 16
// tokens per tile, each token's 32-number chunk as B 32-bit words, word-interleaved, so that the
// kernels run one SIMD lane per token with constant shifts (no horizontal sums), for keys and values
// alike. Any other head_dim keeps one packed row per token. Scales are [head][token].
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codecs.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#define TILE QUANT_TILE
#define ALWAYS_INLINE inline __attribute__((always_inline))

enum { LEVELS_SYM, LEVELS_FULL, LEVELS_SIGN };

typedef struct {
    int n_heads, head_dim, capacity, length;
    int bits, levels, scale_fp32;
    int tiled;         // head_dim % 32 == 0: codes in token tiles
    int tiles;         // tiles per head (capacity rounded up to whole tiles)
    size_t row_bytes;  // packed codes of one head at one token
    size_t tile_words; // tiled: words per tile, (head_dim / 32) · B · 16
    uint32_t *words;   // tiled: [head][tile][chunk of 32 numbers][B words][16 lanes]
    uint8_t *codes;    // untiled: [head][token][row_bytes]
    uint16_t *scale16; // [head][tiles · 16] with scale=fp16 (zero past the last token)
    float *scale32;    // [head][tiles · 16] with scale=fp32
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
    s->tiled = head_dim % 32 == 0;
    s->tiles = (capacity + TILE - 1) / TILE;
    const size_t slots = (size_t)n_heads * (size_t)s->tiles * TILE;
    if (s->tiled) {
        s->tile_words = (size_t)(head_dim / 32) * (size_t)bits * TILE;
        // Zeroed: the lanes of a partial tile past the last token decode to finite numbers.
        s->words = calloc((size_t)n_heads * (size_t)s->tiles * s->tile_words, sizeof(uint32_t));
    } else {
        s->codes = malloc((size_t)n_heads * (size_t)capacity * s->row_bytes);
    }
    if (scale_fp32)
        s->scale32 = calloc(slots, sizeof(float));
    else
        s->scale16 = calloc(slots, sizeof(uint16_t));
    if ((!s->words && !s->codes) || (!s->scale32 && !s->scale16)) goto oom;
    snprintf(normalised, normalised_len, "int:bits=%d,levels=%s,scale=%s", bits, levels_name[levels],
             scale_fp32 ? "fp32" : "fp16");
    return s;
oom:
    if (s) {
        free(s->words);
        free(s->codes);
        free(s->scale16);
        free(s->scale32);
        free(s);
    }
    snprintf(err, errlen, "out of memory allocating an int cache stream");
    return NULL;
}

static inline size_t int_slot(const IntState *s, int head, int token) {
    return (size_t)head * (size_t)s->tiles * TILE + (size_t)token;
}

static inline uint32_t *int_tile(const IntState *s, int head, int tile) {
    return s->words + ((size_t)head * (size_t)s->tiles + (size_t)tile) * s->tile_words;
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

// The level of a sign-extended code: q itself, or at B = 1 the sign: 0 -> +1, -1 -> -1.
static ALWAYS_INLINE int32_t int_level(int32_t code, const int bits) { return bits == 1 ? code | 1 : code; }

// Packs one 32-number chunk of codes (or fewer, the tail of an untiled row) where it belongs.
static void int_store_chunk(IntState *s, int head, int c, const uint8_t *q, int n) {
    if (s->tiled) {
        uint8_t packed[32];
        quant_pack(packed, q, 32, s->bits);
        const int t = s->length;
        quant_tile_put(int_tile(s, head, t / TILE) + (size_t)c * s->bits * TILE, t % TILE, packed, s->bits);
    } else {
        uint8_t *row = s->codes + ((size_t)head * s->capacity + (size_t)s->length) * s->row_bytes;
        quant_pack(row + quant_packed_bytes((size_t)c, s->bits), q, (size_t)n, s->bits);
    }
}

static void int_encode(IntState *s, int head, const float *x) {
    const int hd = s->head_dim;
    const size_t slot = int_slot(s, head, s->length);
    const unsigned mask = (1u << s->bits) - 1u;
    uint8_t q[32];
    if (s->levels == LEVELS_SIGN) {
        float sum = 0.0f;
        for (int d = 0; d < hd; d++) sum += fabsf(x[d]);
        (void)int_store_scale(s, slot, sum / (float)hd);
        for (int c = 0; c < hd; c += 32) {
            const int n = hd - c < 32 ? hd - c : 32;
            for (int i = 0; i < n; i++) q[i] = x[c + i] >= 0.0f ? 0 : 1;
            int_store_chunk(s, head, c / 32, q, n);
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
            q[i] = (uint8_t)((unsigned)v & mask);
        }
        for (int i = n; i < 32; i++) q[i] = 0;
        int_store_chunk(s, head, c / 32, q, n);
    }
}

static void int_append(void *state, const float *vec) {
    IntState *s = state;
    for (int h = 0; h < s->n_heads; h++) int_encode(s, h, vec + h * s->head_dim);
    s->length++;
}

// Levels of numbers [c, c + n) of one head at one token (c a multiple of 32, n <= 32), unscaled.
static void int_levels(const IntState *s, int head, int token, int c, int n, float *out) {
    if (s->tiled) {
        const uint32_t *w = int_tile(s, head, token / TILE) + (size_t)(c / 32) * s->bits * TILE;
        for (int i = 0; i < n; i++) out[i] = (float)int_level(quant_tile_code_signed(w, token % TILE, i, s->bits), s->bits);
        return;
    }
    const uint8_t *row = s->codes + ((size_t)head * s->capacity + (size_t)token) * s->row_bytes;
    uint8_t q[32];
    quant_unpack(row + quant_packed_bytes((size_t)c, s->bits), q, (size_t)n, s->bits);
    const int sh = 32 - s->bits;
    for (int i = 0; i < n; i++) out[i] = (float)int_level((int32_t)((uint32_t)q[i] << sh) >> sh, s->bits);
}

// ---- Kernels on token tiles -----------------------------------------------------------------
// Written once with head_dim and bits as parameters and instantiated for micro's head_dim 32 at
// each width, where every shift is a constant and the lane loops vectorise (16 tokens per vector).
// Scores: acc_l = Σ_d q_d · level(l, d) in order of d, then times the token's scale; NT tiles at a
// time so that their independent chains hide the latency of the adds.
#define NT 4

static ALWAYS_INLINE void int_scales(const IntState *s, size_t slot, float *sc) {
    if (s->scale_fp32) {
        for (int l = 0; l < TILE; l++) sc[l] = s->scale32[slot + l];
    } else {
#pragma omp simd
        for (int l = 0; l < TILE; l++) sc[l] = quant_fp16_to_fp32(s->scale16[slot + l]);
    }
}

static ALWAYS_INLINE void int_scores_tiles(const IntState *s, int head, const float *q, float *out, int t0, const int nt,
                                           const int hd, const int bits) {
    const uint32_t *tile = int_tile(s, head, t0 / TILE);
    const size_t tw = s->tile_words;
    float acc[NT][TILE] = {{0}};
    for (int c = 0; c < hd / 32; c++) {
        const uint32_t *w = tile + (size_t)c * bits * TILE;
#pragma GCC unroll 32
        for (int d = 0; d < 32; d++) {
            const float qd = q[32 * c + d];
#pragma GCC unroll 4
            for (int k = 0; k < nt; k++) {
#pragma omp simd
                for (int l = 0; l < TILE; l++)
                    acc[k][l] += qd * (float)int_level(quant_tile_code_signed(w + k * tw, l, d, bits), bits);
            }
        }
    }
    for (int k = 0; k < nt; k++) {
        float sc[TILE];
        int_scales(s, int_slot(s, head, t0 + k * TILE), sc);
#pragma omp simd
        for (int l = 0; l < TILE; l++) out[k * TILE + l] = acc[k][l] * sc[l];
    }
}

static ALWAYS_INLINE void int_scores_tiled(const IntState *s, int head, const float *q, float *out, int n, const int hd,
                                           const int bits) {
    int t0 = 0;
    for (; t0 + NT * TILE <= n; t0 += NT * TILE) int_scores_tiles(s, head, q, out + t0, t0, NT, hd, bits);
    for (; t0 < n; t0 += TILE) {
        float part[TILE];
        int_scores_tiles(s, head, q, part, t0, 1, hd, bits);
        memcpy(out + t0, part, sizeof(float) * (size_t)(n - t0 < TILE ? n - t0 : TILE));
    }
}

// Mix: per number d and lane l, acc[d][l] = Σ over the lane's tokens of (p_j · scale_j) · level, in
// token order; then out[d] = the 16 lanes summed pairwise (a fixed tree).
static ALWAYS_INLINE void int_mix_tiled(const IntState *s, int head, const float *p, float *out, int n, const int hd,
                                        const int bits) {
    for (int c = 0; c < hd / 32; c++) {
        float acc[32][TILE] = {{0}};
        for (int t0 = 0; t0 < n; t0 += TILE) {
            const uint32_t *w = int_tile(s, head, t0 / TILE) + (size_t)c * bits * TILE;
            float wt[TILE];
            int_scales(s, int_slot(s, head, t0), wt);
            if (n - t0 >= TILE) {
#pragma omp simd
                for (int l = 0; l < TILE; l++) wt[l] *= p[t0 + l];
            } else {
                for (int l = 0; l < TILE; l++) wt[l] = t0 + l < n ? wt[l] * p[t0 + l] : 0.0f;
            }
#pragma GCC unroll 32
            for (int d = 0; d < 32; d++) {
#pragma omp simd
                for (int l = 0; l < TILE; l++)
                    acc[d][l] += wt[l] * (float)int_level(quant_tile_code_signed(w, l, d, bits), bits);
            }
        }
        for (int d = 0; d < 32; d++) {
            float *a = acc[d];
            for (int width = TILE / 2; width >= 1; width /= 2)
                for (int l = 0; l < width; l++) a[l] += a[l + width];
            out[32 * c + d] = a[0];
        }
    }
}

// ---- Kernels on rows (head_dim not a multiple of 32) ----------------------------------------
static void int_scores_rows(const IntState *s, int head, const float *q, float *out, int n) {
    const int hd = s->head_dim;
    float lv[32];
    for (int j = 0; j < n; j++) {
        float acc = 0.0f;
        for (int c = 0; c < hd; c += 32) {
            const int m = hd - c < 32 ? hd - c : 32;
            int_levels(s, head, j, c, m, lv);
            for (int i = 0; i < m; i++) acc += q[c + i] * lv[i];
        }
        out[j] = acc * int_scale(s, int_slot(s, head, j));
    }
}

static void int_mix_rows(const IntState *s, int head, const float *p, float *out, int n) {
    const int hd = s->head_dim;
    float lv[32];
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int j = 0; j < n; j++) {
        const float w = p[j] * int_scale(s, int_slot(s, head, j));
        for (int c = 0; c < hd; c += 32) {
            const int m = hd - c < 32 ? hd - c : 32;
            int_levels(s, head, j, c, m, lv);
            for (int i = 0; i < m; i++) out[c + i] += w * lv[i];
        }
    }
}

#ifdef __AVX512F__
static void int_scores_perm4(const IntState *s, int head, const float *q, float *out, int n) {
    float T[32][16] __attribute__((aligned(64)));
    for (int d = 0; d < 32; d++)
        for (int c = 0; c < 16; c++) T[d][c] = q[d] * (float)(c < 8 ? c : c - 16);
    int t0 = 0;
    for (; t0 + 4 * TILE <= n; t0 += 4 * TILE) {
        const uint32_t *w = int_tile(s, head, t0 / TILE);
        for (int i = 0; i < 256; i += 16) _mm_prefetch((const char *)(w + 512 + i), _MM_HINT_T0);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int g = 0; g < 4; g++) {
            const __m512i w0 = _mm512_loadu_si512(w + g * TILE), w1 = _mm512_loadu_si512(w + 64 + g * TILE),
                          w2 = _mm512_loadu_si512(w + 128 + g * TILE), w3 = _mm512_loadu_si512(w + 192 + g * TILE);
#define STEP(k)                                                                                    \
    {                                                                                              \
        const __m512 t = _mm512_load_ps(T[8 * g + k]);                                             \
        a0 = _mm512_add_ps(a0, _mm512_permutexvar_ps(_mm512_srli_epi32(w0, 4 * k), t));            \
        a1 = _mm512_add_ps(a1, _mm512_permutexvar_ps(_mm512_srli_epi32(w1, 4 * k), t));            \
        a2 = _mm512_add_ps(a2, _mm512_permutexvar_ps(_mm512_srli_epi32(w2, 4 * k), t));            \
        a3 = _mm512_add_ps(a3, _mm512_permutexvar_ps(_mm512_srli_epi32(w3, 4 * k), t));            \
    }
            STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)
#undef STEP
        }
        float sc[4][TILE];
        for (int k = 0; k < 4; k++) int_scales(s, int_slot(s, head, t0 + k * TILE), sc[k]);
        _mm512_storeu_ps(out + t0, _mm512_mul_ps(a0, _mm512_loadu_ps(sc[0])));
        _mm512_storeu_ps(out + t0 + 16, _mm512_mul_ps(a1, _mm512_loadu_ps(sc[1])));
        _mm512_storeu_ps(out + t0 + 32, _mm512_mul_ps(a2, _mm512_loadu_ps(sc[2])));
        _mm512_storeu_ps(out + t0 + 48, _mm512_mul_ps(a3, _mm512_loadu_ps(sc[3])));
    }
    for (; t0 < n; t0 += TILE) {
        float part[TILE];
        int_scores_tiles(s, head, q, part, t0, 1, 32, 4);
        memcpy(out + t0, part, sizeof(float) * (size_t)(n - t0 < TILE ? n - t0 : TILE));
    }
}
#endif

// One instance per width at micro's head_dim 32 (constant shifts and trip counts) and one generic.
typedef void (*IntScoresFn)(const IntState *, int, const float *, float *, int);
#define INT_INSTANCE(B)                                                                            \
    static void int_scores_32_##B(const IntState *s, int head, const float *q, float *out, int n) { \
        int_scores_tiled(s, head, q, out, n, 32, B);                                               \
    }                                                                                              \
    static void int_mix_32_##B(const IntState *s, int head, const float *p, float *out, int n) {   \
        int_mix_tiled(s, head, p, out, n, 32, B);                                                  \
    }
INT_INSTANCE(1)
INT_INSTANCE(2)
INT_INSTANCE(3)
INT_INSTANCE(4)
INT_INSTANCE(5)
INT_INSTANCE(6)
INT_INSTANCE(7)
INT_INSTANCE(8)
#undef INT_INSTANCE
static const IntScoresFn int_scores_32[9] = {NULL, int_scores_32_1, int_scores_32_2, int_scores_32_3, int_scores_32_4,
                                             int_scores_32_5, int_scores_32_6, int_scores_32_7, int_scores_32_8};
static const IntScoresFn int_mix_32[9] = {NULL, int_mix_32_1, int_mix_32_2, int_mix_32_3, int_mix_32_4,
                                          int_mix_32_5, int_mix_32_6, int_mix_32_7, int_mix_32_8};

static void int_scores(const void *state, int head, const float *q, float *out, int n) {
    const IntState *s = state;
    if (!s->tiled)
        int_scores_rows(s, head, q, out, n);
#ifdef __AVX512F__
    else if (s->head_dim == 32 && s->bits == 4 && getenv("PERM"))
        int_scores_perm4(s, head, q, out, n);
#endif
    else if (s->head_dim == 32)
        int_scores_32[s->bits](s, head, q, out, n);
    else
        int_scores_tiled(s, head, q, out, n, s->head_dim, s->bits);
}

static void int_mix(const void *state, int head, const float *p, float *out, int n) {
    const IntState *s = state;
    if (!s->tiled)
        int_mix_rows(s, head, p, out, n);
    else if (s->head_dim == 32)
        int_mix_32[s->bits](s, head, p, out, n);
    else
        int_mix_tiled(s, head, p, out, n, s->head_dim, s->bits);
}

static void int_read(const void *state, int head, int token, float *out) {
    const IntState *s = state;
    const float ds = int_scale(s, int_slot(s, head, token));
    for (int c = 0; c < s->head_dim; c += 32) {
        const int m = s->head_dim - c < 32 ? s->head_dim - c : 32;
        int_levels(s, head, token, c, m, out + c);
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
    free(s->words);
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
