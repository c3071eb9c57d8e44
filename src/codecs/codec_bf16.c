// bf16: every number stored as bfloat16 (fp32 with its mantissa rounded to 7 bits, nearest even).
// Keys lie in tiles of 16 tokens with numbers 2i and 2i+1 of a token sharing a 32-bit word
// ([tile][i][16 lanes], as the fp32 codec's keys but in pairs), so the score kernel gets both as
// floats by one shift and one mask, 16 tokens at once, with no horizontal sums; values one row per
// token, read 32 numbers at a time the same way (even and odd numbers in separate vectors).
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
    uint16_t *data; // keys: [head][tile][d / 2][2][16 lanes]; values: [head][token][head_dim]
} Bf16State;

static void *bf16_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                         size_t normalised_len, char *err, size_t errlen) {
    const char *role = spec_string(spec, "role");
    if (n_heads < 1 || capacity < 1 || head_dim < 2 || head_dim % 2) {
        snprintf(err, errlen, "bf16: needs an even head_dim >= 2 and at least one head and token (got %d, %d, %d)",
                 head_dim, n_heads, capacity);
        return NULL;
    }
    Bf16State *s = calloc(1, sizeof *s);
    if (s) {
        s->is_key = !role || strcmp(role, "v") != 0;
        s->tiles = (capacity + TILE - 1) / TILE;
        const size_t per_head = s->is_key ? (size_t)s->tiles * TILE * head_dim : (size_t)capacity * head_dim;
        // Zeroed: the lanes of a partial tile hold finite numbers.
        s->data = calloc((size_t)n_heads * per_head, sizeof(uint16_t));
    }
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

static inline uint16_t *bf16_tile(const Bf16State *s, int head, int tile) {
    return s->data + ((size_t)head * s->tiles + (size_t)tile) * TILE * s->head_dim;
}

static inline uint16_t *bf16_row(const Bf16State *s, int head, int token) {
    return s->data + ((size_t)head * s->capacity + (size_t)token) * s->head_dim;
}

// Where number d of a key token sits in its tile.
static inline size_t bf16_key_at(int d, int lane) {
    return ((size_t)(d / 2) * TILE + (size_t)lane) * 2 + (size_t)(d % 2);
}

static void bf16_append(void *state, const float *vec) {
    Bf16State *s = state;
    const int t = s->length, hd = s->head_dim;
    for (int h = 0; h < s->n_heads; h++) {
        if (s->is_key) {
            uint16_t *tile = bf16_tile(s, h, t / TILE);
            for (int d = 0; d < hd; d++) {
                const uint16_t c = quant_fp32_to_bf16(vec[h * hd + d]);
                tile[bf16_key_at(d, t % TILE)] = c;
            }
        } else {
            uint16_t *row = bf16_row(s, h, t);
            for (int d = 0; d < hd; d++) {
                row[d] = quant_fp32_to_bf16(vec[h * hd + d]);
            }
        }
    }
    s->length++;
}

// Number d of one head at one token, wherever the role put it.
static inline float bf16_get(const Bf16State *s, int head, int token, int d) {
    if (s->is_key) return quant_bf16_to_fp32(bf16_tile(s, head, token / TILE)[bf16_key_at(d, token % TILE)]);
    return quant_bf16_to_fp32(bf16_row(s, head, token)[d]);
}

// Scoring a value stream or mixing a key stream (not what attention does): number by number.
static void bf16_scores_general(const Bf16State *s, int head, const float *q, float *out, int n) {
    for (int j = 0; j < n; j++) {
        float acc = 0.0f;
        for (int d = 0; d < s->head_dim; d++) acc += q[d] * bf16_get(s, head, j, d);
        out[j] = acc;
    }
}

static void bf16_mix_general(const Bf16State *s, int head, const float *p, float *out, int n) {
    memset(out, 0, sizeof(float) * (size_t)s->head_dim);
    for (int j = 0; j < n; j++)
        for (int d = 0; d < s->head_dim; d++) out[d] += p[j] * bf16_get(s, head, j, d);
}

static void bf16_read(const void *state, int head, int token, float *out) {
    const Bf16State *s = state;
    if (s->is_key) {
        const uint16_t *tile = bf16_tile(s, head, token / TILE);
        for (int d = 0; d < s->head_dim; d++) out[d] = quant_bf16_to_fp32(tile[bf16_key_at(d, token % TILE)]);
    } else {
        const uint16_t *row = bf16_row(s, head, token);
        for (int d = 0; d < s->head_dim; d++) out[d] = quant_bf16_to_fp32(row[d]);
    }
}

// The key tiles are written as 16-bit numbers and read as pairs: a 32-bit word holding numbers 2i
// (low half) and 2i+1 (high half) of one token.
typedef uint32_t __attribute__((may_alias)) bf16_pair;

// A bf16 is the top half of an fp32: the AVX-512 kernels shift or mask it into place.
#ifdef QUANT_AVX512
// Numbers 2i (lo) and 2i+1 (hi) of 16 words as floats.
static ALWAYS_INLINE __m512 bf16_lo(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
static ALWAYS_INLINE __m512 bf16_hi(__m512i w) {
    return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
}
#endif

// Scores: per lane (token) Σ_d q_d · k̂_d in order of d; four tiles at a time, their independent
// chains hiding the latency of the adds.
static ALWAYS_INLINE void bf16_scores_tiles(const Bf16State *s, int head, const float *q, const float *qs, int t0,
                                            const int nt, const int hd, float (*acc)[TILE]) {
    const bf16_pair *tile = (const bf16_pair *)(const void *)bf16_tile(s, head, t0 / TILE);
    const size_t tw = (size_t)TILE * hd / 2;
#ifdef QUANT_AVX512
    if (nt == 4 && qs) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < hd / 2; i++) {
            const __m512 q0 = _mm512_set1_ps(qs[2 * i]), q1 = _mm512_set1_ps(qs[2 * i + 1]);
            const bf16_pair *k = tile + (size_t)i * TILE;
#define PAIR(a, j)                                                                                 \
    {                                                                                              \
        const __m512i w = _mm512_loadu_si512(k + (j) * tw);                                        \
        a = _mm512_add_ps(a, _mm512_mul_ps(q0, bf16_lo(w)));                                       \
        a = _mm512_add_ps(a, _mm512_mul_ps(q1, bf16_hi(w)));                                       \
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
            const bf16_pair *w = tile + (size_t)k * tw + (size_t)i * TILE;
#pragma omp simd
            for (int l = 0; l < TILE; l++) {
                acc[k][l] += q0 * quant_bf16_to_fp32((uint16_t)(w[l] & 0xffffu));
                acc[k][l] += q1 * quant_bf16_to_fp32((uint16_t)(w[l] >> 16));
            }
        }
}

// Mix: out = even + odd, the sums of p_j · v̂_j over even and odd tokens. A row read as 32-bit
// words gives numbers 2i and 2i+1 of a word as two floats (lo and hi vectors).
static ALWAYS_INLINE void bf16_mix_rows(const Bf16State *s, int head, const float *p, float *out, int n, const int hd) {
    float even[64] __attribute__((aligned(64))) = {0}, odd[64] __attribute__((aligned(64))) = {0};
#ifdef QUANT_AVX512
    if (hd == 32) {
        __m512 e0 = _mm512_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
        int j = 0;
#define ROW(lo, hi, j, wv)                                                                         \
    {                                                                                              \
        const __m512i w = _mm512_loadu_si512(bf16_row(s, head, j));                                \
        lo = _mm512_add_ps(lo, _mm512_mul_ps(wv, bf16_lo(w)));                                     \
        hi = _mm512_add_ps(hi, _mm512_mul_ps(wv, bf16_hi(w)));                                     \
    }
        for (; j + 2 <= n; j += 2) {
            const __m512 w0 = _mm512_set1_ps(p[j]), w1 = _mm512_set1_ps(p[j + 1]);
            ROW(e0, e1, j, w0)
            ROW(o0, o1, j + 1, w1)
        }
        if (j < n) {
            const __m512 w0 = _mm512_set1_ps(p[j]);
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
        const uint16_t *r0 = bf16_row(s, head, j), *r1 = r0 + hd;
        const float w0 = p[j], w1 = p[j + 1];
#pragma omp simd
        for (int d = 0; d < hd; d++) {
            even[d] += w0 * quant_bf16_to_fp32(r0[d]);
            odd[d] += w1 * quant_bf16_to_fp32(r1[d]);
        }
    }
    if (j < n) {
        const uint16_t *r0 = bf16_row(s, head, j);
        for (int d = 0; d < hd; d++) even[d] += p[j] * quant_bf16_to_fp32(r0[d]);
    }
    for (int d = 0; d < hd; d++) out[d] = even[d] + odd[d];
}

static ALWAYS_INLINE void bf16_scores_keys(const Bf16State *s, int head, const float *q, float *out, int n,
                                           const int hd) {
    const float *qs = q; // the AVX-512 kernel takes any bf16 and any query
    for (int t0 = 0; t0 < n; t0 += 4 * TILE) {
        const int nt = n - t0 >= 4 * TILE ? 4 : (n - t0 + TILE - 1) / TILE;
        float acc[4][TILE] = {{0}};
        if (nt == 4)
            bf16_scores_tiles(s, head, q, qs, t0, 4, hd, acc);
        else
            bf16_scores_tiles(s, head, q, qs, t0, nt, hd, acc);
        for (int k = 0; k < nt; k++) {
            const int m = n - t0 - k * TILE < TILE ? n - t0 - k * TILE : TILE;
            memcpy(out + t0 + k * TILE, acc[k], sizeof(float) * (size_t)m);
        }
    }
}

static void bf16_scores(const void *state, int head, const float *q, float *out, int n) {
    const Bf16State *s = state;
    if (!s->is_key)
        bf16_scores_general(s, head, q, out, n);
    else if (s->head_dim == 32)
        bf16_scores_keys(s, head, q, out, n, 32);
    else
        bf16_scores_keys(s, head, q, out, n, s->head_dim);
}

static void bf16_mix(const void *state, int head, const float *p, float *out, int n) {
    const Bf16State *s = state;
    if (s->is_key || s->head_dim > 64)
        bf16_mix_general(s, head, p, out, n);
    else if (s->head_dim == 32)
        bf16_mix_rows(s, head, p, out, n, 32);
    else
        bf16_mix_rows(s, head, p, out, n, s->head_dim);
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


