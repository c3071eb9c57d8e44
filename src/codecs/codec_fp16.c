// fp16: every number stored as IEEE binary16 (round to nearest even), 16 bits per number.
// Keys lie in tiles of 16 tokens with numbers 2i and 2i+1 of a token sharing a 32-bit word
// ([tile][i][16 lanes], as the fp32 codec's keys but in pairs), so the score kernel decodes 16
// tokens' numbers at once with no horizontal sums; values one row per token, read 32 numbers at a
// time the same way (even and odd numbers in separate vectors).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codecs.h"

#define TILE QUANT_TILE
#define ALWAYS_INLINE QUANT_ALWAYS_INLINE

typedef struct {
    int n_heads, head_dim, capacity, length, is_key;
    int tiles;      // per head (keys)
    int special;    // an infinity or NaN was stored (the shifts of the AVX-512 kernels would get it wrong)
    uint16_t *data; // keys: [head][tile][d / 2][2][16 lanes]; values: [head][token][head_dim]
} Fp16State;

static void *fp16_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                         size_t normalised_len, char *err, size_t errlen) {
    const char *role = spec_string(spec, "role");
    if (n_heads < 1 || capacity < 1 || head_dim < 2 || head_dim % 2) {
        snprintf(err, errlen, "fp16: needs an even head_dim >= 2 and at least one head and token (got %d, %d, %d)",
                 head_dim, n_heads, capacity);
        return NULL;
    }
    Fp16State *s = calloc(1, sizeof *s);
    if (s) {
        s->is_key = !role || strcmp(role, "v") != 0;
        s->tiles = (capacity + TILE - 1) / TILE;
        const size_t per_head = s->is_key ? (size_t)s->tiles * TILE * head_dim : (size_t)capacity * head_dim;
        // Zeroed: the lanes of a partial tile hold finite numbers.
        s->data = calloc((size_t)n_heads * per_head, sizeof(uint16_t));
    }
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

static inline uint16_t *fp16_tile(const Fp16State *s, int head, int tile) {
    return s->data + ((size_t)head * s->tiles + (size_t)tile) * TILE * s->head_dim;
}

static inline uint16_t *fp16_row(const Fp16State *s, int head, int token) {
    return s->data + ((size_t)head * s->capacity + (size_t)token) * s->head_dim;
}

// Where number d of a key token sits in its tile.
static inline size_t fp16_key_at(int d, int lane) {
    return ((size_t)(d / 2) * TILE + (size_t)lane) * 2 + (size_t)(d % 2);
}

static void fp16_append(void *state, const float *vec) {
    Fp16State *s = state;
    const int t = s->length, hd = s->head_dim;
    for (int h = 0; h < s->n_heads; h++) {
        if (s->is_key) {
            uint16_t *tile = fp16_tile(s, h, t / TILE);
            for (int d = 0; d < hd; d++) {
                const uint16_t c = quant_fp32_to_fp16(vec[h * hd + d]);
                s->special |= (c & 0x7c00) == 0x7c00;
                tile[fp16_key_at(d, t % TILE)] = c;
            }
        } else {
            uint16_t *row = fp16_row(s, h, t);
            for (int d = 0; d < hd; d++) {
                row[d] = quant_fp32_to_fp16(vec[h * hd + d]);
                s->special |= (row[d] & 0x7c00) == 0x7c00;
            }
        }
    }
    s->length++;
}

// Number d of one head at one token, wherever the role put it.
static inline float fp16_get(const Fp16State *s, int head, int token, int d) {
    if (s->is_key) return quant_fp16_to_fp32(fp16_tile(s, head, token / TILE)[fp16_key_at(d, token % TILE)]);
    return quant_fp16_to_fp32(fp16_row(s, head, token)[d]);
}

// Scoring a value stream or mixing a key stream (not what attention does): number by number.
static void fp16_scores_general(const Fp16State *s, int head, const float *q, float *out, int n) {
    for (int j = 0; j < n; j++) {
        float acc = 0.0f;
        for (int d = 0; d < s->head_dim; d++) acc += q[d] * fp16_get(s, head, j, d);
        out[j] = acc;
    }
}

static void fp16_mix_general(const Fp16State *s, int head, const float *p, float *out, int n) {
    memset(out, 0, sizeof(float) * (size_t)s->head_dim);
    for (int j = 0; j < n; j++)
        for (int d = 0; d < s->head_dim; d++) out[d] += p[j] * fp16_get(s, head, j, d);
}

static void fp16_read(const void *state, int head, int token, float *out) {
    const Fp16State *s = state;
    if (s->is_key) {
        const uint16_t *tile = fp16_tile(s, head, token / TILE);
        for (int d = 0; d < s->head_dim; d++) out[d] = quant_fp16_to_fp32(tile[fp16_key_at(d, token % TILE)]);
    } else {
        const uint16_t *row = fp16_row(s, head, token);
        for (int d = 0; d < s->head_dim; d++) out[d] = quant_fp16_to_fp32(row[d]);
    }
}

// The key tiles are written as 16-bit numbers and read as pairs: a 32-bit word holding numbers 2i
// (low half) and 2i+1 (high half) of one token.
typedef uint32_t __attribute__((may_alias)) fp16_pair;

// The AVX-512 kernels turn an fp16 into an fp32 by shifts alone: sign-extended to bit 31, moved
// down three bits and masked, its exponent and fraction land where an fp32's are, with the bias
// 15 instead of 127: the float is the number · 2^-112 exactly (a subnormal fp16 becoming a
// subnormal fp32, which costs nothing on this hardware). The query or weights carry the 2^112, so
// each product, q · 2^112 · (v · 2^-112), is the same real number as q · v and rounds the same: the
// portable code computes q · v. Infinities and NaNs (exponent 31) do not survive the shifts, so a
// stream holding one, or a query or weight of 2^15 or more (times 2^112 it would overflow), takes
// the portable code.
//
// Whether the AVX-512 kernels may take the shifts (no infinity or NaN stored, every |x| < 2^15).
static ALWAYS_INLINE int fp16_fast(const Fp16State *s, const float *x, int n) {
    if (s->special) return 0;
    float m = 0.0f;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m < 0x1p15f;
}

#ifdef QUANT_AVX512
// Numbers 2i (lo) and 2i+1 (hi) of 16 words as floats (times 2^-112).
static ALWAYS_INLINE __m512 fp16_lo(__m512i w) {
    const __m512i sign_exp_fraction = _mm512_set1_epi32((int)0x8fffe000u);
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_srai_epi32(_mm512_slli_epi32(w, 16), 3), sign_exp_fraction));
}
static ALWAYS_INLINE __m512 fp16_hi(__m512i w) {
    const __m512i sign_exp_fraction = _mm512_set1_epi32((int)0x8fffe000u);
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_srai_epi32(w, 3), sign_exp_fraction));
}
#endif

// Scores: per lane (token) Σ_d q_d · k̂_d in order of d; four tiles at a time, their independent
// chains hiding the latency of the adds.
static ALWAYS_INLINE void fp16_scores_tiles(const Fp16State *s, int head, const float *q, const float *qs, int t0,
                                            const int nt, const int hd, float (*acc)[TILE]) {
    const fp16_pair *tile = (const fp16_pair *)(const void *)fp16_tile(s, head, t0 / TILE);
    const size_t tw = (size_t)TILE * hd / 2;
#ifdef QUANT_AVX512
    if (nt == 4 && qs) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < hd / 2; i++) {
            const __m512 q0 = _mm512_set1_ps(qs[2 * i]), q1 = _mm512_set1_ps(qs[2 * i + 1]);
            const fp16_pair *k = tile + (size_t)i * TILE;
#define PAIR(a, j)                                                                                 \
    {                                                                                              \
        const __m512i w = _mm512_loadu_si512(k + (j) * tw);                                        \
        a = _mm512_add_ps(a, _mm512_mul_ps(q0, fp16_lo(w)));                                       \
        a = _mm512_add_ps(a, _mm512_mul_ps(q1, fp16_hi(w)));                                       \
    }
            PAIR(a0, 0) PAIR(a1, 1) PAIR(a2, 2) PAIR(a3, 3)
#undef PAIR
        }
        _mm512_storeu_ps(acc[0], a0);
        _mm512_storeu_ps(acc[1], a1);
        _mm512_storeu_ps(acc[2], a2);
        _mm512_storeu_ps(acc[3], a3);
        return;
    }
#endif
    (void)qs;
    for (int k = 0; k < nt; k++)
        for (int i = 0; i < hd / 2; i++) {
            const float q0 = q[2 * i], q1 = q[2 * i + 1];
            const fp16_pair *w = tile + (size_t)k * tw + (size_t)i * TILE;
#pragma omp simd
            for (int l = 0; l < TILE; l++) {
                acc[k][l] += q0 * quant_fp16_to_fp32((uint16_t)(w[l] & 0xffffu));
                acc[k][l] += q1 * quant_fp16_to_fp32((uint16_t)(w[l] >> 16));
            }
        }
}

// Mix: out = even + odd, the sums of p_j · v̂_j over even and odd tokens. A row read as 32-bit
// words gives numbers 2i and 2i+1 of a word as two floats (lo and hi vectors).
static ALWAYS_INLINE void fp16_mix_rows(const Fp16State *s, int head, const float *p, float *out, int n, const int hd) {
    float even[64] __attribute__((aligned(64))) = {0}, odd[64] __attribute__((aligned(64))) = {0};
#ifdef QUANT_AVX512
    if (hd == 32 && fp16_fast(s, p, n)) {
        __m512 e0 = _mm512_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
        int j = 0;
#define ROW(lo, hi, j, wv)                                                                         \
    {                                                                                              \
        const __m512i w = _mm512_loadu_si512(fp16_row(s, head, j));                                \
        lo = _mm512_add_ps(lo, _mm512_mul_ps(wv, fp16_lo(w)));                                     \
        hi = _mm512_add_ps(hi, _mm512_mul_ps(wv, fp16_hi(w)));                                     \
    }
        for (; j + 2 <= n; j += 2) {
            const __m512 w0 = _mm512_set1_ps(p[j] * 0x1p112f), w1 = _mm512_set1_ps(p[j + 1] * 0x1p112f);
            ROW(e0, e1, j, w0)
            ROW(o0, o1, j + 1, w1)
        }
        if (j < n) {
            const __m512 w0 = _mm512_set1_ps(p[j] * 0x1p112f);
            ROW(e0, e1, j, w0)
        }
#undef ROW
        _mm512_store_ps(even, e0);
        _mm512_store_ps(even + 32, e1);
        _mm512_store_ps(odd, o0);
        _mm512_store_ps(odd + 32, o1);
        // lanes i of the first vectors hold number 2i, of the second 2i+1
        for (int i = 0; i < 16; i++) {
            out[2 * i] = even[i] + odd[i];
            out[2 * i + 1] = even[32 + i] + odd[32 + i];
        }
        return;
    }
#endif
    int j = 0;
    for (; j + 2 <= n; j += 2) {
        const uint16_t *r0 = fp16_row(s, head, j), *r1 = r0 + hd;
        const float w0 = p[j], w1 = p[j + 1];
#pragma omp simd
        for (int d = 0; d < hd; d++) {
            even[d] += w0 * quant_fp16_to_fp32(r0[d]);
            odd[d] += w1 * quant_fp16_to_fp32(r1[d]);
        }
    }
    if (j < n) {
        const uint16_t *r0 = fp16_row(s, head, j);
        for (int d = 0; d < hd; d++) even[d] += p[j] * quant_fp16_to_fp32(r0[d]);
    }
    for (int d = 0; d < hd; d++) out[d] = even[d] + odd[d];
}

static ALWAYS_INLINE void fp16_scores_keys(const Fp16State *s, int head, const float *q, float *out, int n,
                                           const int hd) {
    float scaled[256];
    const float *qs = NULL; // the query times 0x1p112f for the AVX-512 kernel, when it may run
    if (hd <= 256 && fp16_fast(s, q, hd)) {
        for (int d = 0; d < hd; d++) scaled[d] = q[d] * 0x1p112f;
        qs = scaled;
    }
    for (int t0 = 0; t0 < n; t0 += 4 * TILE) {
        const int nt = n - t0 >= 4 * TILE ? 4 : (n - t0 + TILE - 1) / TILE;
        float acc[4][TILE] = {{0}};
        if (nt == 4)
            fp16_scores_tiles(s, head, q, qs, t0, 4, hd, acc);
        else
            fp16_scores_tiles(s, head, q, qs, t0, nt, hd, acc);
        for (int k = 0; k < nt; k++) {
            const int m = n - t0 - k * TILE < TILE ? n - t0 - k * TILE : TILE;
            memcpy(out + t0 + k * TILE, acc[k], sizeof(float) * (size_t)m);
        }
    }
}

static void fp16_scores(const void *state, int head, const float *q, float *out, int n) {
    const Fp16State *s = state;
    if (!s->is_key)
        fp16_scores_general(s, head, q, out, n);
    else if (s->head_dim == 32)
        fp16_scores_keys(s, head, q, out, n, 32);
    else
        fp16_scores_keys(s, head, q, out, n, s->head_dim);
}

static void fp16_mix(const void *state, int head, const float *p, float *out, int n) {
    const Fp16State *s = state;
    if (s->is_key || s->head_dim > 64)
        fp16_mix_general(s, head, p, out, n);
    else if (s->head_dim == 32)
        fp16_mix_rows(s, head, p, out, n, 32);
    else
        fp16_mix_rows(s, head, p, out, n, s->head_dim);
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


