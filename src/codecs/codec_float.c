// fp16, bf16 and fp8: one codec for every float format, driven by a format description. Each
// number is stored as one code of the format, rounded to nearest even (quant.h); fp8 saturates.
// Specs: `fp16`, `bf16`, `fp8:e4m3`, `fp8:e5m2` (fp8 needs its format), each optionally with
//   scale=none  (default) numbers are cast as they are, as inference servers ship a float cache;
//   scale=token one fp16 scale per head per token, absmax / the format's largest finite value, so
//               that the largest number of the vector lands on it; numbers are divided by the
//               stored (fp16-rounded) scale before the cast.
//
// Keys lie in tiles of 16 tokens, dimension-major ([tile][d][16 lanes], as the fp32 codec's),
// values one row per token: the score kernel runs one lane per token with no horizontal sums, the
// mix kernel 16 numbers per vector. Both sum in the same order in their portable and AVX-512 forms
// (per token Σ_d q_d · x_d in order of d, then · scale; per number even and odd tokens apart, then
// added), and the AVX-512 decoders are exact, so both give the same bits.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codec_core.h"
#include "codecs.h"

#define TILE QUANT_TILE
#define ALWAYS_INLINE QUANT_ALWAYS_INLINE

typedef enum { FMT_FP16, FMT_BF16, FMT_E4M3, FMT_E5M2 } FloatFormat;

// What a format is: its name in a spec, the bytes of a code, the largest finite value (scale=token
// maps absmax there) and how to tell a code that holds an infinity or NaN.
typedef struct {
    const char *option; // fp8's format option; NULL for the families named after their format
    int bytes;
    float max;
    uint32_t special_mask, special_min; // (code & mask) >= min: an infinity or NaN
} FloatFormatInfo;

static const FloatFormatInfo formats[] = {
    [FMT_FP16] = {NULL, 2, 65504.0f, 0x7fff, 0x7c00},
    [FMT_BF16] = {NULL, 2, 0x1.fep127f, 0x7fff, 0x7f80},
    [FMT_E4M3] = {"e4m3", 1, 448.0f, 0x7f, 0x7f},
    [FMT_E5M2] = {"e5m2", 1, 57344.0f, 0x7f, 0x7c},
};

typedef struct {
    FloatFormat format;
    int n_heads, head_dim, capacity, length, is_key;
    int scaled;
    int tiles, slots; // per head: key tiles, and scale slots (capacity rounded up to whole tiles)
    int special;      // an infinity or NaN was stored: the AVX-512 kernels leave the stream alone
    size_t bytes;     // of one code
    uint8_t *codes;   // keys: [head][tile][d][16 lanes]; values: [head][token][head_dim]
    uint16_t *scales; // [head][slot] fp16, only with scale=token (zero past the last token)
} FloatState;

static uint32_t float_encode(float x, FloatFormat f) {
    switch (f) {
    case FMT_FP16: return quant_fp32_to_fp16(x);
    case FMT_BF16: return quant_fp32_to_bf16(x);
    case FMT_E4M3: return quant_fp32_to_fp8(x, QUANT_FP8_E4M3);
    default: return quant_fp32_to_fp8(x, QUANT_FP8_E5M2);
    }
}

// Code i of an array of codes of format f (constant in the kernels, so the switch folds away).
static ALWAYS_INLINE float float_decode(const uint8_t *codes, size_t i, const FloatFormat f) {
    switch (f) {
    case FMT_FP16: return quant_fp16_to_fp32(((const uint16_t *)(const void *)codes)[i]);
    case FMT_BF16: return quant_bf16_to_fp32(((const uint16_t *)(const void *)codes)[i]);
    case FMT_E4M3: return quant_e4m3_to_fp32(codes[i]);
    default: return quant_e5m2_to_fp32(codes[i]);
    }
}

// Which format a spec names: the family gives fp16 and bf16, fp8 takes exactly one bare option.
static int float_format(const char *family, CodecSpec *spec, FloatFormat *f, char *err, size_t errlen) {
    if (strcmp(family, "fp16") == 0 || strcmp(family, "bf16") == 0) {
        *f = family[0] == 'f' ? FMT_FP16 : FMT_BF16;
        return 0;
    }
    const char *e4 = spec_string(spec, "e4m3"), *e5 = spec_string(spec, "e5m2");
    if ((e4 && *e4) || (e5 && *e5)) {
        snprintf(err, errlen, "fp8: the format is a bare option (fp8:e4m3 or fp8:e5m2), not key=value");
        return -1;
    }
    if (!e4 == !e5) {
        snprintf(err, errlen, "fp8: give exactly one format: fp8:e4m3 or fp8:e5m2");
        return -1;
    }
    *f = e5 ? FMT_E5M2 : FMT_E4M3;
    return 0;
}

static void *float_create(const char *family, CodecSpec *spec, int n_heads, int head_dim, int capacity,
                          char *normalised, size_t normalised_len, char *err, size_t errlen) {
    FloatFormat f;
    if (float_format(family, spec, &f, err, errlen)) return NULL;
    const char *scale = spec_string(spec, "scale");
    const int scaled = scale && strcmp(scale, "token") == 0;
    if (scale && !scaled && strcmp(scale, "none") != 0) {
        snprintf(err, errlen, "%s: scale must be none or token (got '%s')", family, scale);
        return NULL;
    }
    if (codec_check_shape(family, n_heads, head_dim, capacity, 2, err, errlen)) return NULL;
    const char *role = spec_string(spec, "role");
    FloatState *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->format = f;
    s->n_heads = n_heads, s->head_dim = head_dim, s->capacity = capacity;
    s->scaled = scaled;
    s->bytes = (size_t)formats[f].bytes;
    s->is_key = !role || strcmp(role, "v") != 0;
    s->tiles = (capacity + TILE - 1) / TILE;
    s->slots = s->tiles * TILE;
    // Zeroed: the lanes of a partial tile hold finite numbers.
    s->codes = calloc((size_t)n_heads * (size_t)(s->is_key ? s->slots : capacity) * (size_t)head_dim, s->bytes);
    if (!s->codes) goto oom;
    if (scaled && !(s->scales = calloc((size_t)n_heads * (size_t)s->slots, sizeof(uint16_t)))) goto oom;
    // fp8 always names its format and scale (its normalised form since it was written); fp16 and
    // bf16 name the scale only when it is not the default, so that `fp16` stays `fp16`.
    if (formats[f].option)
        snprintf(normalised, normalised_len, "%s:%s,scale=%s", family, formats[f].option, scaled ? "token" : "none");
    else
        snprintf(normalised, normalised_len, scaled ? "%s:scale=token" : "%s", family);
    return s;
oom:
    if (s) free(s->codes);
    free(s);
    snprintf(err, errlen, "out of memory allocating a %s cache stream", family);
    return NULL;
}

// Where number d of one head at one token is stored, counted in codes.
static inline size_t float_at(const FloatState *s, int head, int token, int d) {
    if (s->is_key)
        return (((size_t)head * (size_t)s->tiles + (size_t)(token / TILE)) * (size_t)s->head_dim + (size_t)d) * TILE +
               (size_t)(token % TILE);
    return ((size_t)head * (size_t)s->capacity + (size_t)token) * (size_t)s->head_dim + (size_t)d;
}

static inline size_t float_slot(const FloatState *s, int head, int token) {
    return (size_t)head * (size_t)s->slots + (size_t)token;
}

static inline float float_scale(const FloatState *s, int head, int token) {
    return s->scaled ? quant_fp16_to_fp32(s->scales[float_slot(s, head, token)]) : 1.0f;
}

static void float_append(void *state, const float *vec) {
    FloatState *s = state;
    const int hd = s->head_dim;
    const FloatFormatInfo *info = &formats[s->format];
    for (int h = 0; h < s->n_heads; h++) {
        const float *x = vec + h * hd;
        float sd = 1.0f;
        if (s->scaled) {
            float amax = 0.0f;
            for (int d = 0; d < hd; d++) amax = fmaxf(amax, fabsf(x[d]));
            uint16_t code = quant_fp32_to_fp16_sat(amax / info->max);
            sd = quant_fp16_to_fp32(code);
            // An all-zero vector (or one whose scale underflows fp16) keeps scale 1: no 0/0.
            if (!(sd > 0.0f)) {
                code = quant_fp32_to_fp16(1.0f);
                sd = 1.0f;
            }
            s->scales[float_slot(s, h, s->length)] = code;
        }
        for (int d = 0; d < hd; d++) {
            const uint32_t c = float_encode(s->scaled ? x[d] / sd : x[d], s->format);
            s->special |= (c & info->special_mask) >= info->special_min;
            const size_t at = float_at(s, h, s->length, d);
            if (s->bytes == 2)
                ((uint16_t *)(void *)s->codes)[at] = (uint16_t)c;
            else
                s->codes[at] = (uint8_t)c;
        }
    }
    s->length++;
}

static void float_read(const void *state, int head, int token, float *out) {
    const FloatState *s = state;
    const float sd = float_scale(s, head, token);
    for (int d = 0; d < s->head_dim; d++) {
        const size_t at = float_at(s, head, token, d);
        float x;
        switch (s->format) {
        case FMT_FP16: x = float_decode(s->codes, at, FMT_FP16); break;
        case FMT_BF16: x = float_decode(s->codes, at, FMT_BF16); break;
        case FMT_E4M3: x = float_decode(s->codes, at, FMT_E4M3); break;
        default: x = float_decode(s->codes, at, FMT_E5M2); break;
        }
        out[d] = s->scaled ? x * sd : x;
    }
}

#ifdef QUANT_AVX512
// Sixteen codes from p to their exact values. fp16 by vcvtph2ps, bf16 by a shift; E5M2 is the top
// byte of an fp16; E4M3 becomes the fp16 of its value · 2^-8 by ((c + (c & 0x80)) << 7) (every E4M3
// number fits fp16's range), then · 2^8, exact. The stream's infinities and NaNs would not survive
// every one of these, so a stream holding one takes the portable code.
static ALWAYS_INLINE __m512 float_decode16(const uint8_t *p, const FloatFormat f) {
    switch (f) {
    case FMT_FP16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
    case FMT_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p)), 16));
    case FMT_E5M2:
        return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p)), 8));
    default: {
        const __m256i h = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
        const __m256i half = _mm256_slli_epi16(_mm256_add_epi16(h, _mm256_and_si256(h, _mm256_set1_epi16(0x80))), 7);
        return _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(0x1p8f));
    }
    }
}
#endif

// Scores on key tiles: per lane (token) Σ_d q_d · x_d in order of d, four tiles at a time (their
// independent chains hide the latency of the adds), then times the token's scale.
static ALWAYS_INLINE void float_score_tiles(const FloatState *s, int head, const float *q, int t0, const int nt,
                                            const FloatFormat f, float (*acc)[TILE]) {
    const int hd = s->head_dim;
    const size_t tile_codes = (size_t)TILE * (size_t)hd, es = (size_t)formats[f].bytes;
    const uint8_t *tile = s->codes + float_at(s, head, t0, 0) * es;
#ifdef QUANT_AVX512
    if (nt == 4 && !s->special) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        const size_t tb = tile_codes * es;
        for (int d = 0; d < hd; d++) {
            const __m512 qd = _mm512_set1_ps(q[d]);
            const uint8_t *k = tile + (size_t)d * TILE * es;
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(qd, float_decode16(k, f)));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(qd, float_decode16(k + tb, f)));
            a2 = _mm512_add_ps(a2, _mm512_mul_ps(qd, float_decode16(k + 2 * tb, f)));
            a3 = _mm512_add_ps(a3, _mm512_mul_ps(qd, float_decode16(k + 3 * tb, f)));
        }
        quant_store4(acc[0], acc[2], a0, a1, a2, a3); // acc[k] follows acc[k - 1]
        return;
    }
#endif
    for (int k = 0; k < nt; k++)
        for (int d = 0; d < hd; d++) {
            const float qd = q[d];
            const size_t row = (size_t)k * tile_codes + (size_t)d * TILE;
#pragma omp simd
            for (int l = 0; l < TILE; l++) acc[k][l] += qd * float_decode(tile, row + (size_t)l, f);
        }
}

static ALWAYS_INLINE void float_scores_keys(const FloatState *s, int head, const float *q, float *out, int n,
                                            const FloatFormat f) {
    for (int t0 = 0; t0 < n; t0 += 4 * TILE) {
        const int nt = n - t0 >= 4 * TILE ? 4 : (n - t0 + TILE - 1) / TILE;
        float acc[4][TILE] = {{0}};
        if (nt == 4)
            float_score_tiles(s, head, q, t0, 4, f, acc);
        else
            float_score_tiles(s, head, q, t0, nt, f, acc);
        for (int k = 0; k < nt; k++) {
            float sc[TILE];
            if (s->scaled) quant_fp16_to_fp32_16(s->scales + float_slot(s, head, t0 + k * TILE), sc);
            const int m = n - t0 - k * TILE < TILE ? n - t0 - k * TILE : TILE;
            for (int l = 0; l < m; l++) out[t0 + k * TILE + l] = s->scaled ? acc[k][l] * sc[l] : acc[k][l];
        }
    }
}

// Mix on value rows: out = even + odd, the sums over even and odd tokens of w_j · x_j with
// w_j = p_j · scale_j. The weights of 64 tokens are made ahead of their use: a broadcast that reads
// a vector store still in flight would wait for it.
static ALWAYS_INLINE void float_weights(const FloatState *s, int head, const float *p, int n, int j0, float *w) {
    for (int i = 0; i < 4 * TILE && j0 + i < n; i += TILE) {
        float sc[TILE];
        if (s->scaled) quant_fp16_to_fp32_16(s->scales + float_slot(s, head, j0 + i), sc);
        const int m = n - j0 - i < TILE ? n - j0 - i : TILE;
        for (int l = 0; l < TILE; l++) w[i + l] = l < m ? (s->scaled ? p[j0 + i + l] * sc[l] : p[j0 + i + l]) : 0.0f;
    }
}

static ALWAYS_INLINE void float_mix_rows(const FloatState *s, int head, const float *p, float *out, int n,
                                         const FloatFormat f) {
    const int hd = s->head_dim;
    const size_t es = (size_t)formats[f].bytes;
    float even[64] __attribute__((aligned(64))) = {0}, odd[64] __attribute__((aligned(64))) = {0};
    float wbuf[2][4 * TILE] __attribute__((aligned(64)));
    const int fast = hd == 32 && !s->special && QUANT_SIMD;
    (void)fast; // the portable build has no fast path
#ifdef QUANT_AVX512
    __m512 e0 = _mm512_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
#endif
    float_weights(s, head, p, n, 0, wbuf[0]);
    for (int j0 = 0; j0 < n; j0 += 4 * TILE) {
        if (j0 + 4 * TILE < n) float_weights(s, head, p, n, j0 + 4 * TILE, wbuf[(j0 / (4 * TILE) + 1) % 2]);
        const float *w = wbuf[(j0 / (4 * TILE)) % 2];
        const int cnt = n - j0 < 4 * TILE ? n - j0 : 4 * TILE;
        const uint8_t *row = s->codes + float_at(s, head, j0, 0) * es;
#ifdef QUANT_AVX512
        if (fast) {
            __asm__("" ::: "memory"); // the weights broadcast from memory
            const size_t rb = 32 * es;
            int k = 0;
            for (; k + 2 <= cnt; k += 2, row += 2 * rb) {
                const __m512 w0 = _mm512_set1_ps(w[k]), w1 = _mm512_set1_ps(w[k + 1]);
                e0 = _mm512_add_ps(e0, _mm512_mul_ps(w0, float_decode16(row, f)));
                e1 = _mm512_add_ps(e1, _mm512_mul_ps(w0, float_decode16(row + 16 * es, f)));
                o0 = _mm512_add_ps(o0, _mm512_mul_ps(w1, float_decode16(row + rb, f)));
                o1 = _mm512_add_ps(o1, _mm512_mul_ps(w1, float_decode16(row + rb + 16 * es, f)));
            }
            if (k < cnt) {
                const __m512 w0 = _mm512_set1_ps(w[k]);
                e0 = _mm512_add_ps(e0, _mm512_mul_ps(w0, float_decode16(row, f)));
                e1 = _mm512_add_ps(e1, _mm512_mul_ps(w0, float_decode16(row + 16 * es, f)));
            }
            continue;
        }
#endif
        for (int k = 0; k < cnt; k++, row += (size_t)hd * es) {
            float *acc = k % 2 ? odd : even;
            const float wk = w[k];
#pragma omp simd
            for (int d = 0; d < hd; d++) acc[d] += wk * float_decode(row, (size_t)d, f);
        }
    }
#ifdef QUANT_AVX512
    if (fast) {
        quant_store4(even, odd, e0, e1, o0, o1);
    }
#endif
    for (int d = 0; d < hd; d++) out[d] = even[d] + odd[d];
}

// One instance of each kernel per format (a constant format folds the decoder's switch away).
#define FLOAT_INSTANCE(id, fmt)                                                                    \
    static void scores_##id(const FloatState *s, int head, const float *q, float *out, int n) {    \
        float_scores_keys(s, head, q, out, n, fmt);                                                \
    }                                                                                              \
    static void mix_##id(const FloatState *s, int head, const float *p, float *out, int n) {       \
        float_mix_rows(s, head, p, out, n, fmt);                                                   \
    }
FLOAT_INSTANCE(fp16, FMT_FP16)
FLOAT_INSTANCE(bf16, FMT_BF16)
FLOAT_INSTANCE(e4m3, FMT_E4M3)
FLOAT_INSTANCE(e5m2, FMT_E5M2)
#undef FLOAT_INSTANCE
typedef void (*FloatKernel)(const FloatState *, int, const float *, float *, int);
static const FloatKernel float_scores_fn[] = {scores_fp16, scores_bf16, scores_e4m3, scores_e5m2};
static const FloatKernel float_mix_fn[] = {mix_fp16, mix_bf16, mix_e4m3, mix_e5m2};

// Scoring a value stream or mixing a key stream is not what attention does: read back. The mix
// kernel's buffers hold head_dims up to 64.
static void float_scores(const void *state, int head, const float *q, float *out, int n) {
    const FloatState *s = state;
    if (s->is_key)
        float_scores_fn[s->format](s, head, q, out, n);
    else
        codec_scores_by_read(state, float_read, s->head_dim, head, q, out, n);
}

static void float_mix(const void *state, int head, const float *p, float *out, int n) {
    const FloatState *s = state;
    if (!s->is_key && s->head_dim <= 64)
        float_mix_fn[s->format](s, head, p, out, n);
    else
        codec_mix_by_read(state, float_read, s->head_dim, head, p, out, n);
}

static size_t float_bytes(const void *state) {
    const FloatState *s = state;
    const size_t per_head_token = (size_t)s->head_dim * s->bytes + (s->scaled ? sizeof(uint16_t) : 0);
    return per_head_token * (size_t)s->length * (size_t)s->n_heads;
}

static void float_destroy(void *state) {
    FloatState *s = state;
    if (s) free(s->codes), free(s->scales);
    free(s);
}

CODEC_OPS(float, NULL);

#define FLOAT_FAMILY(id, help_text)                                                                \
    static void *create_##id(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised, \
                             size_t normalised_len, char *err, size_t errlen) {                      \
        return float_create(#id, spec, n_heads, head_dim, capacity, normalised, normalised_len, err, errlen); \
    }                                                                                                \
    const CodecFamily CODEC_FAMILY(codec_##id) = {.name = #id, .help = help_text, .ops = &float_ops, .create = create_##id};

FLOAT_FAMILY(fp16, "fp16                 IEEE half precision, round to nearest even (16 bits per number); "
                   "scale=token adds an fp16 absmax scale per head per token")
FLOAT_FAMILY(bf16, "bf16                 bfloat16, round to nearest even (16 bits per number); scale=token as fp16")
FLOAT_FAMILY(fp8, "fp8:e4m3|e5m2        OCP FP8 (E4M3FN, max 448 / E5M2, max 57344), saturating, 8 bits; "
                  "scale=token adds an fp16 absmax scale per head per token")
