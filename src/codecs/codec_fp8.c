// fp8: every number stored as one FP8 byte, OCP E4M3FN or E5M2 (quant.h), round to nearest even,
// saturating. Spec `fp8:e4m3` or `fp8:e5m2` (the format is required), optionally `scale=token`:
//   scale=none  (default) numbers are cast as they are, as inference servers ship an unscaled
//               fp8 KV cache;
//   scale=token one fp16 scale per head per token, absmax / largest finite value, so that the
//               largest number of the vector lands on the format's largest value; numbers are
//               divided by the stored (fp16-rounded) scale before the cast.
//
// Keys lie in tiles of 16 tokens, dimension-major ([tile][d][16 lanes], as the fp32 codec's), values
// one row per token: the score kernel runs one lane per token with no horizontal sums, the mix
// kernel 16 numbers per vector.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codecs.h"

#define TILE QUANT_TILE
#define ALWAYS_INLINE QUANT_ALWAYS_INLINE

typedef struct {
    int n_heads, head_dim, capacity, length, is_key;
    QuantFp8Format format;
    int scaled;
    int tiles, slots; // per head: key tiles, and scale slots (capacity rounded up to whole tiles)
    int special;      // a NaN (or infinity) code was stored: the AVX-512 kernels leave the stream alone
    uint8_t *codes;   // keys: [head][tile][d][16 lanes]; values: [head][token][head_dim]
    uint16_t *scales; // [head][slot] fp16, only with scale=token (zero past the last token)
} Fp8State;

static void *fp8_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                        size_t normalised_len, char *err, size_t errlen) {
    const char *role = spec_string(spec, "role");
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
    s->is_key = !role || strcmp(role, "v") != 0;
    s->tiles = (capacity + TILE - 1) / TILE;
    s->slots = s->tiles * TILE;
    // Zeroed: the lanes of a partial tile hold finite numbers.
    s->codes = calloc((size_t)n_heads * (size_t)(s->is_key ? s->slots : capacity), (size_t)head_dim);
    if (!s->codes) goto oom;
    if (scaled) {
        s->scales = calloc((size_t)n_heads * (size_t)s->slots, sizeof(uint16_t));
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

static inline size_t fp8_slot(const Fp8State *s, int head, int token) {
    return (size_t)head * (size_t)s->slots + (size_t)token;
}

static inline float fp8_scale(const Fp8State *s, int head, int token) {
    return s->scaled ? quant_fp16_to_fp32(s->scales[fp8_slot(s, head, token)]) : 1.0f;
}

static inline uint8_t *fp8_tile(const Fp8State *s, int head, int tile) {
    return s->codes + ((size_t)head * (size_t)s->tiles + (size_t)tile) * TILE * (size_t)s->head_dim;
}

static inline uint8_t *fp8_row(const Fp8State *s, int head, int token) {
    return s->codes + ((size_t)head * (size_t)s->capacity + (size_t)token) * (size_t)s->head_dim;
}

// Where number d of one head at one token is stored.
static inline uint8_t *fp8_code(const Fp8State *s, int head, int token, int d) {
    if (s->is_key) return fp8_tile(s, head, token / TILE) + (size_t)d * TILE + (size_t)(token % TILE);
    return fp8_row(s, head, token) + d;
}

static void fp8_append(void *state, const float *vec) {
    Fp8State *s = state;
    const int hd = s->head_dim;
    for (int h = 0; h < s->n_heads; h++) {
        const float *x = vec + h * hd;
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
            s->scales[fp8_slot(s, h, s->length)] = code;
        }
        for (int d = 0; d < hd; d++) {
            const uint8_t c = quant_fp32_to_fp8(x[d] / sd, s->format);
            s->special |= s->format == QUANT_FP8_E4M3 ? (c & 0x7f) == 0x7f : (c & 0x7f) >= 0x7c;
            *fp8_code(s, h, s->length, d) = c;
        }
    }
    s->length++;
}

static ALWAYS_INLINE float fp8_decode(uint8_t c, const QuantFp8Format format) {
    return format == QUANT_FP8_E5M2 ? quant_e5m2_to_fp32(c) : quant_e4m3_to_fp32(c);
}

// The AVX-512 kernels decode 16 codes at a time to fp32s divided by a power of two, the unit, which
// the query or weights carry instead: each product is then the same real number as q · v and rounds
// the same (the portable code computes q · v).
//   E5M2 is the top byte of an fp16: sign-extended, shifted and masked, its exponent and fraction
//   land where an fp32's are with the bias 15 instead of 127: the number · 2^-112 (unit 2^112). Its
//   subnormal codes (below 2^-14, rare) become subnormal fp32s: slower to multiply, still exact.
//   E4M3 has common subnormal codes (below 2^-6), so it goes through fp16 instead, whose range
//   holds every E4M3 number: ((c + (c & 0x80)) << 7) is the fp16 of the number · 2^-8, converted by
//   vcvtph2ps (unit 2^8).
// NaN codes (and infinities) are not decoded this way, so a stream holding one, or a query or
// weight of 2^15 or more (E5M2; 2^100 for E4M3) takes the portable code.
static ALWAYS_INLINE float fp8_unit(const QuantFp8Format format) {
    return format == QUANT_FP8_E5M2 ? 0x1p112f : 0x1p8f;
}

static ALWAYS_INLINE int fp8_fast(const Fp8State *s, const float *x, int n) {
    if (s->special) return 0;
    float m = 0.0f;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m < (s->format == QUANT_FP8_E5M2 ? 0x1p15f : 0x1p100f);
}

#ifdef QUANT_AVX512
static ALWAYS_INLINE __m512 fp8_decode16(__m128i codes, const QuantFp8Format format) {
    if (format == QUANT_FP8_E5M2) {
        const __m512i v = _mm512_cvtepi8_epi32(codes);
        return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(v, 21), _mm512_set1_epi32((int)0x8fe00000u)));
    }
    const __m256i h = _mm256_cvtepu8_epi16(codes);
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_add_epi16(h, _mm256_and_si256(h, _mm256_set1_epi16(0x80))), 7));
}
#endif

// Scores on key tiles: per lane (token) Σ_d q_d · v_d in order of d, times the token's scale; four
// tiles at a time (independent chains hide the latency of the adds). qu: the query times the unit
// when the AVX-512 kernel may run, else NULL.
static ALWAYS_INLINE void fp8_scores_tiles(const Fp8State *s, int head, const float *q, const float *qu, int t0,
                                           const int nt, const int hd, const QuantFp8Format format,
                                           float (*acc)[TILE]) {
    const uint8_t *tile = fp8_tile(s, head, t0 / TILE);
    const size_t tb = (size_t)TILE * hd;
#ifdef QUANT_AVX512
    if (nt == 4 && qu) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < hd; d++) {
            const __m512 qd = _mm512_set1_ps(qu[d]);
            const uint8_t *k = tile + (size_t)d * TILE;
#define FP8_LANES(i) fp8_decode16(_mm_loadu_si128((const __m128i *)(const void *)(k + (i) * tb)), format)
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(qd, FP8_LANES(0)));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(qd, FP8_LANES(1)));
            a2 = _mm512_add_ps(a2, _mm512_mul_ps(qd, FP8_LANES(2)));
            a3 = _mm512_add_ps(a3, _mm512_mul_ps(qd, FP8_LANES(3)));
#undef FP8_LANES
        }
        _mm512_storeu_ps(acc[0], a0);
        _mm512_storeu_ps(acc[1], a1);
        _mm512_storeu_ps(acc[2], a2);
        _mm512_storeu_ps(acc[3], a3);
        return;
    }
#endif
    (void)qu;
    for (int k = 0; k < nt; k++)
        for (int d = 0; d < hd; d++) {
            const float qd = q[d];
            const uint8_t *row = tile + (size_t)k * tb + (size_t)d * TILE;
#pragma omp simd
            for (int l = 0; l < TILE; l++) acc[k][l] += qd * fp8_decode(row[l], format);
        }
}

static ALWAYS_INLINE void fp8_scores_keys(const Fp8State *s, int head, const float *q, float *out, int n, const int hd,
                                          const QuantFp8Format format) {
    float scaled[256];
    const float *qu = NULL;
    if (hd <= 256 && fp8_fast(s, q, hd)) {
        for (int d = 0; d < hd; d++) scaled[d] = q[d] * fp8_unit(format);
        qu = scaled;
    }
    for (int t0 = 0; t0 < n; t0 += 4 * TILE) {
        const int nt = n - t0 >= 4 * TILE ? 4 : (n - t0 + TILE - 1) / TILE;
        float acc[4][TILE] = {{0}};
        if (nt == 4)
            fp8_scores_tiles(s, head, q, qu, t0, 4, hd, format, acc);
        else
            fp8_scores_tiles(s, head, q, qu, t0, nt, hd, format, acc);
        for (int k = 0; k < nt; k++) {
            float sc[TILE];
            if (s->scaled) quant_fp16_to_fp32_16(s->scales + fp8_slot(s, head, t0 + k * TILE), sc);
            const int m = n - t0 - k * TILE < TILE ? n - t0 - k * TILE : TILE;
            for (int l = 0; l < m; l++) out[t0 + k * TILE + l] = s->scaled ? acc[k][l] * sc[l] : acc[k][l];
        }
    }
}

// Mix on value rows: out = even + odd, the sums over even and odd tokens of w_j · v with
// w_j = p_j · scale_j (and, for the AVX-512 kernel, · unit). Weights of 64 tokens are made ahead
// of their use: a broadcast that reads a vector store still in flight would wait for it.
static ALWAYS_INLINE void fp8_weights(const Fp8State *s, int head, const float *p, int n, int j0, float unit,
                                      float *w) {
    for (int i = 0; i < 4 * TILE && j0 + i < n; i += TILE) {
        float sc[TILE];
        if (s->scaled)
            quant_fp16_to_fp32_16(s->scales + fp8_slot(s, head, j0 + i), sc);
        else
            for (int l = 0; l < TILE; l++) sc[l] = 1.0f;
        if (n - j0 - i >= TILE) {
#pragma omp simd
            for (int l = 0; l < TILE; l++) w[i + l] = (s->scaled ? p[j0 + i + l] * sc[l] : p[j0 + i + l]) * unit;
        } else {
            for (int l = 0; l < TILE; l++)
                w[i + l] = j0 + i + l < n ? (s->scaled ? p[j0 + i + l] * sc[l] : p[j0 + i + l]) * unit : 0.0f;
        }
    }
}

static ALWAYS_INLINE void fp8_mix_rows(const Fp8State *s, int head, const float *p, float *out, int n, const int hd,
                                       const QuantFp8Format format) {
    float even[64] __attribute__((aligned(64))) = {0}, odd[64] __attribute__((aligned(64))) = {0};
    float wbuf[2][4 * TILE] __attribute__((aligned(64)));
    int fast = 0;
#ifdef QUANT_AVX512
    if (hd == 32 && !s->special) { // the largest weight decides (scale=token can make them large)
        float m = 0.0f;
        for (int j0 = 0; j0 < n; j0 += 4 * TILE) {
            fp8_weights(s, head, p, n, j0, 1.0f, wbuf[0]);
#pragma omp simd reduction(max : m)
            for (int i = 0; i < 4 * TILE; i++) m = fabsf(wbuf[0][i]) > m ? fabsf(wbuf[0][i]) : m;
        }
        fast = m < (format == QUANT_FP8_E5M2 ? 0x1p15f : 0x1p100f);
    }
    __m512 e0 = _mm512_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
#endif
    const float unit = fast ? fp8_unit(format) : 1.0f;
    fp8_weights(s, head, p, n, 0, unit, wbuf[0]);
    for (int j0 = 0; j0 < n; j0 += 4 * TILE) {
        if (j0 + 4 * TILE < n) fp8_weights(s, head, p, n, j0 + 4 * TILE, unit, wbuf[(j0 / (4 * TILE) + 1) % 2]);
        const float *w = wbuf[(j0 / (4 * TILE)) % 2];
        const int cnt = n - j0 < 4 * TILE ? n - j0 : 4 * TILE;
        const uint8_t *row = fp8_row(s, head, j0);
#ifdef QUANT_AVX512
        if (fast) {
            __asm__("" ::: "memory"); // the weights broadcast from memory
            int k = 0;
#define FP8_ROW(r, h) fp8_decode16(_mm_loadu_si128((const __m128i *)(const void *)((r) + 16 * (h))), format)
            for (; k + 2 <= cnt; k += 2, row += 64) {
                const __m512 w0 = _mm512_set1_ps(w[k]), w1 = _mm512_set1_ps(w[k + 1]);
                e0 = _mm512_add_ps(e0, _mm512_mul_ps(w0, FP8_ROW(row, 0)));
                e1 = _mm512_add_ps(e1, _mm512_mul_ps(w0, FP8_ROW(row, 1)));
                o0 = _mm512_add_ps(o0, _mm512_mul_ps(w1, FP8_ROW(row + 32, 0)));
                o1 = _mm512_add_ps(o1, _mm512_mul_ps(w1, FP8_ROW(row + 32, 1)));
            }
            if (k < cnt) {
                const __m512 w0 = _mm512_set1_ps(w[k]);
                e0 = _mm512_add_ps(e0, _mm512_mul_ps(w0, FP8_ROW(row, 0)));
                e1 = _mm512_add_ps(e1, _mm512_mul_ps(w0, FP8_ROW(row, 1)));
            }
#undef FP8_ROW
            continue;
        }
#endif
        for (int k = 0; k < cnt; k++, row += hd) {
            float *acc = k % 2 ? odd : even;
            const float wk = w[k];
#pragma omp simd
            for (int d = 0; d < hd; d++) acc[d] += wk * fp8_decode(row[d], format);
        }
    }
#ifdef QUANT_AVX512
    if (fast) {
        _mm512_store_ps(even, e0);
        _mm512_store_ps(even + 16, e1);
        _mm512_store_ps(odd, o0);
        _mm512_store_ps(odd + 16, o1);
    }
#endif
    for (int d = 0; d < hd; d++) out[d] = even[d] + odd[d];
}

// Scoring a value stream or mixing a key stream (not what attention does), and head_dims past the
// kernels' buffers: number by number.
static void fp8_scores_general(const Fp8State *s, int head, const float *q, float *out, int n) {
    for (int j = 0; j < n; j++) {
        float acc = 0.0f;
        for (int d = 0; d < s->head_dim; d++) acc += q[d] * fp8_decode(*fp8_code(s, head, j, d), s->format);
        out[j] = acc * fp8_scale(s, head, j);
    }
}

static void fp8_mix_general(const Fp8State *s, int head, const float *p, float *out, int n) {
    memset(out, 0, sizeof(float) * (size_t)s->head_dim);
    for (int j = 0; j < n; j++) {
        const float w = p[j] * fp8_scale(s, head, j);
        for (int d = 0; d < s->head_dim; d++) out[d] += w * fp8_decode(*fp8_code(s, head, j, d), s->format);
    }
}

// Instances: micro's head_dim 32 per format; other head_dims up to 64 (values) or 256 (keys) with
// run-time values.
#define FP8_INSTANCE(id, fmt)                                                                      \
    static void fp8_scores_##id(const Fp8State *s, int head, const float *q, float *out, int n) {   \
        fp8_scores_keys(s, head, q, out, n, 32, fmt);                                              \
    }                                                                                              \
    static void fp8_mix_##id(const Fp8State *s, int head, const float *p, float *out, int n) {     \
        fp8_mix_rows(s, head, p, out, n, 32, fmt);                                                 \
    }
FP8_INSTANCE(e4m3, QUANT_FP8_E4M3)
FP8_INSTANCE(e5m2, QUANT_FP8_E5M2)
#undef FP8_INSTANCE

static void fp8_scores(const void *state, int head, const float *q, float *out, int n) {
    const Fp8State *s = state;
    if (!s->is_key || s->head_dim > 256)
        fp8_scores_general(s, head, q, out, n);
    else if (s->head_dim == 32)
        (s->format == QUANT_FP8_E5M2 ? fp8_scores_e5m2 : fp8_scores_e4m3)(s, head, q, out, n);
    else
        fp8_scores_keys(s, head, q, out, n, s->head_dim, s->format);
}

static void fp8_mix(const void *state, int head, const float *p, float *out, int n) {
    const Fp8State *s = state;
    if (s->is_key || s->head_dim > 64)
        fp8_mix_general(s, head, p, out, n);
    else if (s->head_dim == 32)
        (s->format == QUANT_FP8_E5M2 ? fp8_mix_e5m2 : fp8_mix_e4m3)(s, head, p, out, n);
    else
        fp8_mix_rows(s, head, p, out, n, s->head_dim, s->format);
}

static void fp8_read(const void *state, int head, int token, float *out) {
    const Fp8State *s = state;
    const float sd = fp8_scale(s, head, token);
    for (int d = 0; d < s->head_dim; d++) out[d] = fp8_decode(*fp8_code(s, head, token, d), s->format) * sd;
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
