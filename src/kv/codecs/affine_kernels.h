// The attention kernels shared by the affine code families: `int`, KIVI's quantised part and
// llama.cpp's blocks all store codes whose number is x̂ = level(code) · scale (+ minimum), with the
// scale and minimum per token (int, KIVI's values, a block) or per group of tokens and channel
// (KIVI's keys). A family is a parameter set of these kernels: its level table, the kind of its
// codes (AFFINE_SIGNED, ...), the form of its products (AffineForm), a function that gathers the
// weights, scales and minimums of 64 tokens for the mix kernels (AffinePrep), and for the score
// kernel one that hands out each group of tiles' tables and one that writes their sums out
// (AffineTileJobFn, AffineTileFinishFn). Three kernels serve all of them: affine_mix_groups (token
// groups), affine_mix_rows (rows of 32 codes) and affine_score_tiles (token tiles). What stays in
// a family's file is its encoder, its layout and those parameters.
//
// Included by the family sources, which are compiled once per kernel set (codecs.h): every kernel
// here has one portable path and at most one vector path (vec16.h: AVX2 and AVX-512; the rows'
// decoding needs AVX-512's VBMI), computing the same products and sums in the same order, so every
// build gives the same bits.
#ifndef MICRO_AFFINE_KERNELS_H
#define MICRO_AFFINE_KERNELS_H

#include <stdlib.h>

#include "kvcache.h"
#include "quant.h"

// The kernels are instanced per code width B = 1..8 at micro's head_dim 32 (constant shifts and
// trip counts): AFFINE_INSTANCES_32(prefix, State, scores, mix) makes prefix_scores_32_B and
// prefix_mix_32_B, calling scores(state, head, q, out, n, 32, B) and mix(...), and their tables
// prefix_scores_32[B] and prefix_mix_32[B]. (Other head_dims call scores and mix with run-time values.)
#define AFFINE_INSTANCE_32(B, prefix, State, scores, mix)                                          \
    static void prefix##_scores_32_##B(State s, int head, const float *q, float *out, int n) {    \
        scores(s, head, q, out, n, 32, B);                                                         \
    }                                                                                              \
    static void prefix##_mix_32_##B(State s, int head, const float *p, float *out, int n) {       \
        mix(s, head, p, out, n, 32, B);                                                            \
    }
#define AFFINE_BY_WIDTH(f) {NULL, f##_1, f##_2, f##_3, f##_4, f##_5, f##_6, f##_7, f##_8}
#define AFFINE_INSTANCES_32(prefix, State, scores, mix)                                            \
    AFFINE_INSTANCE_32(1, prefix, State, scores, mix) AFFINE_INSTANCE_32(2, prefix, State, scores, mix) \
    AFFINE_INSTANCE_32(3, prefix, State, scores, mix) AFFINE_INSTANCE_32(4, prefix, State, scores, mix) \
    AFFINE_INSTANCE_32(5, prefix, State, scores, mix) AFFINE_INSTANCE_32(6, prefix, State, scores, mix) \
    AFFINE_INSTANCE_32(7, prefix, State, scores, mix) AFFINE_INSTANCE_32(8, prefix, State, scores, mix) \
    typedef void (*prefix##_kernel)(State, int, const float *, float *, int);                      \
    static const prefix##_kernel prefix##_scores_32[9] = AFFINE_BY_WIDTH(prefix##_scores_32),       \
                                 prefix##_mix_32[9] = AFFINE_BY_WIDTH(prefix##_mix_32)

// How a product is formed from a weight w (a query number, or p · what the form leaves out), a
// level L and the token's scale s and minimum m. The forms round differently, and each family keeps
// the one it has always used (its numbers must not change):
//   w · L            (scaled = 0)  int (w = p · scale, or the query before the token's scale), q8_0
//   w · (L · s)      (minimum = 0) q4_0, q5_0, iq4_nl
//   w · (L · s + m)                KIVI, q4_1, q5_1
// Token i's scale is sm[i · ps] and its minimum sm[i · ps + moff], however the family stores them.
typedef struct {
    int scaled, minimum;
    int ps, moff;
} AffineForm;

static QUANT_ALWAYS_INLINE float affine_term(float w, float L, const float *sm, int i, const AffineForm f) {
    if (!f.scaled) return w * L;
    if (!f.minimum) return w * (L * sm[i * f.ps]);
    return w * (L * sm[i * f.ps] + sm[i * f.ps + f.moff]);
}

// A lookup table: table[e] = Σ_t term(w[t], lv[t][e], token t) over t = 0..per-1 in that order, e
// being a 4-bit value that holds `per` codes (lv[t][e]: the level of code t of e).
static QUANT_ALWAYS_INLINE void affine_table(const float *w, const float *sm, const int per, const float (*lv)[16],
                                             const AffineForm f, float *table) {
#pragma omp simd
    for (int e = 0; e < 16; e++) table[e] = affine_term(w[0], lv[0][e], sm, 0, f);
    for (int t = 1; t < per; t++) {
#pragma omp simd
        for (int e = 0; e < 16; e++) table[e] += affine_term(w[t], lv[t][e], sm, t, f);
    }
}

#ifdef VEC16
// affine_term on sixteen levels, and affine_table in a register (the same products and sums).
static QUANT_ALWAYS_INLINE v16 affine_term16(float w, v16 L, const float *sm, int i, const AffineForm f) {
    if (!f.scaled) return v16_mul(v16_set1(w), L);
    const v16 x = v16_mul(L, v16_set1(sm[i * f.ps]));
    return v16_mul(v16_set1(w), f.minimum ? v16_add(x, v16_set1(sm[i * f.ps + f.moff])) : x);
}

static QUANT_ALWAYS_INLINE v16 affine_table16(const float *w, const float *sm, const int per, const float (*lv)[16],
                                              const AffineForm f) {
    v16 t = affine_term16(w[0], v16_load(lv[0]), sm, 0, f);
    for (int k = 1; k < per; k++) t = v16_add(t, affine_term16(w[k], v16_load(lv[k]), sm, k, f));
    return t;
}
#endif

// A family's parameters of tokens j0 .. j0+63 for chunk c (32 numbers) of one head: the scales
// and minimums in sm (AffineForm says where) and the weights (p, or p times the scale for the form
// w · L), zero from n on; it returns where the weights are: in w, or p + j0 itself when they are p
// (no copy). The mix kernels make them a block of 64 tokens ahead of the lookups: a broadcast that
// reads a vector store still in flight would wait for it.
typedef const float *(*AffinePrep)(const void *state, int head, int c, const float *p, int n, int j0, float *w,
                                   float *sm);

// Where a head's codes of one chunk lie for the kernels: `codes` is the chunk's first byte in unit 0
// (a token tile, a token group or a row), a unit `unit_bytes` further on is the next; `units` (the
// units the n tokens take) bounds the prefetches. A stream spread over blocks (a pool's sequence)
// has block i's such pointer `at` bytes from states[i], `block_units` units to a block (found as
// they are read: a kernel keeps no table of its own, so it never allocates); a contiguous stream
// leaves states NULL. followed: a family that asks for the next head's bytes as it reads its own
// (int, llama.cpp's blocks) has them in cache by this head's pass, and the kernels do not ask again.
typedef struct {
    const uint8_t *codes;
    size_t unit_bytes;
    int units;
    const void *const *states;
    size_t at;
    int block_units;
    int followed;
} AffineChunk;

// The chunk of a stream over blocks whose codes lie `at` bytes from each block's state (a family's
// state and codes are one allocation: no block's state is read to find them, which in a pool was a
// cache miss per block); one block is a contiguous chunk of `units_one` units (its store's, whatever
// its capacity). unit: tokens per unit.
static inline AffineChunk affine_chunk_at(const CodecBlocks *b, int n, size_t at, size_t unit_bytes, int unit,
                                          int units_one) {
    const int nb = (n + b->block - 1) / b->block;
    const uint8_t *first = (const uint8_t *)b->states[0] + at;
    if (nb <= 1) return (AffineChunk){first, unit_bytes, units_one, NULL, 0, 0, 0};
    return (AffineChunk){first, unit_bytes, (n + unit - 1) / unit, b->states, at, b->block / unit, 0};
}

// Unit u's place in its block (of a stream over blocks).
static QUANT_ALWAYS_INLINE int affine_in_block(const AffineChunk *ch, int u) {
    int at;
    (void)quant_divmod(u, ch->block_units, &at);
    return at;
}

static QUANT_ALWAYS_INLINE const uint8_t *affine_unit(const AffineChunk *ch, int u) {
    if (!ch->states) return ch->codes + (size_t)u * ch->unit_bytes;
    int at;
    const int block = quant_divmod(u, ch->block_units, &at);
    return (const uint8_t *)ch->states[block] + ch->at + (size_t)at * ch->unit_bytes;
}

// Asks for units [u, u + count) ahead of their use (within the stream): a pool's blocks lie anywhere,
// and the hardware prefetcher loses the way at each. The kernels ask 256 tokens ahead: in a pool of
// 32 long conversations (micro bench --batch 32) every block is a trip to DRAM, and at 128 tokens
// ahead the bytes still came too late, so the adds waited on them. (The families also ask for the
// next head's codes as they read their own: int_prefetch_next_head, block_prefetch.)
#define AFFINE_AHEAD 256
static QUANT_ALWAYS_INLINE void affine_prefetch(const AffineChunk *ch, int u, int count) {
    if (ch->followed) return;
    if (u + count > ch->units) count = ch->units - u;
    while (count > 0) { // a run of units within one block is contiguous
        const int at = ch->states ? affine_in_block(ch, u) : 0;
        const int run = ch->states ? ch->block_units - at : count;
        const int m = run < count ? run : count;
        const uint8_t *p = affine_unit(ch, u);
        const size_t bytes = (size_t)m * ch->unit_bytes;
        for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
        u += m, count -= m;
    }
}

// Mix on token groups of g = 4/B tokens (quant.h): per group a table Σ_t w_t · x̂_t(code_t), looked
// up by each of its 16 bytes' two 4-bit values; even and odd groups in separate sums (two chains).
// acc[u % 2][h][i] is set to the sums of number 2i + h's value of the groups u (for llama.cpp's
// blocks, g = 1 and h = 0 holds numbers i, h = 1 numbers 16 + i).
static QUANT_ALWAYS_INLINE void affine_mix_groups(AffineChunk ch, const int g, const float (*lv)[16], const AffineForm f,
                                                  AffinePrep prep, const void *state, int head, int c,
                                                  const float *p, int n, float (*acc)[2][16]) {
    float wbuf[2][4 * QUANT_TILE] __attribute__((aligned(64))), sm[2][8 * QUANT_TILE] __attribute__((aligned(64)));
    const float *w[2] = {NULL, NULL};
    memset(acc, 0, sizeof(float) * 2 * 2 * 16);
#ifdef VEC16
    v16 e0 = v16_zero(), e1 = e0, o0 = e0, o1 = e0;
#endif
    if (n > 0) w[0] = prep(state, head, c, p, n, 0, wbuf[0], sm[0]);
    for (int j0 = 0; j0 < n; j0 += 4 * QUANT_TILE) {
        const int b = (j0 / (4 * QUANT_TILE)) % 2;
        if (j0 + 4 * QUANT_TILE < n) w[1 - b] = prep(state, head, c, p, n, j0 + 4 * QUANT_TILE, wbuf[1 - b], sm[1 - b]);
        const int u0 = j0 / g, nb = ((n - j0 < 4 * QUANT_TILE ? n - j0 : 4 * QUANT_TILE) + g - 1) / g; // u0 is even
        const size_t ub = ch.unit_bytes;
        affine_prefetch(&ch, u0 + AFFINE_AHEAD / g, 4 * QUANT_TILE / g);
        // 16 tokens (an even number of groups) at a time, which lie in one block; the whole 64 at
        // once when they do (a contiguous stream always).
        const int step = !ch.states || affine_in_block(&ch, u0) + nb <= ch.block_units ? nb : QUANT_TILE / g;
        for (int k0 = 0; k0 < nb; k0 += step) {
            const uint8_t *chunk = affine_unit(&ch, u0 + k0); // group k at chunk + (k − k0)·ub
            const int k1 = nb - k0 < step ? nb : k0 + step;
#ifdef VEC16
            __asm__("" ::: "memory"); // each table broadcasts its parameters from memory
            int k = k0;
            for (; k + 2 <= k1; k += 2) {
                quant_group_lookup16(chunk + (size_t)(k - k0) * ub,
                                     affine_table16(w[b] + k * g, sm[b] + k * g * f.ps, g, lv, f), &e0, &e1);
                quant_group_lookup16(chunk + (size_t)(k + 1 - k0) * ub,
                                     affine_table16(w[b] + (k + 1) * g, sm[b] + (k + 1) * g * f.ps, g, lv, f), &o0,
                                     &o1);
            }
            if (k < k1)
                quant_group_lookup16(chunk + (size_t)(k - k0) * ub,
                                     affine_table16(w[b] + k * g, sm[b] + k * g * f.ps, g, lv, f), &e0, &e1);
#else
            float tables[4 * QUANT_TILE][16];
            for (int k = k0; k < k1; k++)
                affine_table(w[b] + k * g, sm[b] + k * g * f.ps, g, lv, f, tables[k - k0]);
            quant_group_lookup(chunk, ub, k1 - k0, u0 + k0, (const float(*)[16])tables, acc);
#endif
        }
    }
#ifdef VEC16
    v16_store4(acc[0][0], acc[1][0], e0, e1, o0, o1);
#endif
}

// ---- Rows: 32 codes of a token decoded at a time -------------------------------------------
// What a row's codes are: densely packed B-bit codes (quant.h) read as two's complement numbers
// or as they are, or llama.cpp's q5 (number i's low four bits in nibble i of 16 bytes, low nibbles
// numbers 0..15 and high ones 16..31, its fifth bit in bit i of a 32-bit word per token).
enum { AFFINE_SIGNED, AFFINE_UNSIGNED, AFFINE_Q5 };

// The levels of a row's 32 numbers (level = code − bias for q5).
static QUANT_ALWAYS_INLINE void affine_row_levels(const uint8_t *row, uint32_t qh, const int bits, const int kind,
                                                  const int bias, float *lv) {
    if (kind == AFFINE_Q5) {
#pragma omp simd
        for (int j = 0; j < 16; j++) {
            lv[j] = (float)((int)((row[j] & 15) | ((qh >> j) & 1) << 4) - bias);
            lv[j + 16] = (float)((int)((row[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - bias);
        }
    } else if (bits == 8) {
#pragma omp simd
        for (int i = 0; i < 32; i++) lv[i] = kind == AFFINE_SIGNED ? (float)(int8_t)row[i] : (float)row[i];
    } else {
        for (int i = 0; i < 32; i += 8) { // eight codes fill `bits` bytes
            const uint8_t *b = row + (i / 8) * bits;
            uint64_t v = 0;
            for (int k = 0; k < bits; k++) v |= (uint64_t)b[k] << (8 * k);
            for (int k = 0; k < 8; k++) {
                const uint32_t code = (uint32_t)(v >> (bits * k)) & ((1u << bits) - 1u);
                lv[i + k] = kind == AFFINE_SIGNED ? (float)((int32_t)(code << (32 - bits)) >> (32 - bits)) : (float)code;
            }
        }
    }
}

#if defined(QUANT_AVX512) && defined(__AVX512VBMI__)
// affine_row_levels for numbers 16h .. 16h+15. Dense codes: the bytes that hold each code gathered
// into its lane (vpermb, quant_row_gather), shifted up to bit 31 (by up[h] = 32 − B − its offset)
// and back down, with the sign or without.
static QUANT_ALWAYS_INLINE __m512 affine_row_levels16(const uint8_t *row, uint32_t qh, const __m512i *ctrl,
                                                      const __m512i *up, const int h, const int bits, const int kind,
                                                      const int bias) {
    if (kind == AFFINE_Q5) {
        const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)row));
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)(qh >> (16 * h))), lane),
                                            _mm512_set1_epi32(1));
        const __m512i lo = h ? _mm512_srli_epi32(bytes, 4) : _mm512_and_si512(bytes, _mm512_set1_epi32(15));
        return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(bias)));
    }
    if (bits == 8) {
        const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(row + 16 * h));
        return _mm512_cvtepi32_ps(kind == AFFINE_SIGNED ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
    }
    const __m512i bytes = _mm512_maskz_loadu_epi8((__mmask64)((1ull << (4 * bits)) - 1), row);
    const __m512i v = _mm512_sllv_epi32(_mm512_permutexvar_epi8(ctrl[h], bytes), up[h]);
    return _mm512_cvtepi32_ps(kind == AFFINE_SIGNED ? _mm512_srai_epi32(v, (unsigned)(32 - bits))
                                                    : _mm512_srli_epi32(v, (unsigned)(32 - bits)));
}
#elif defined(VEC16)
// The AVX2 build's row decoder: a row's 32 levels as two vectors (numbers 0..15, 16..31), eight
// lanes at a time. Eight dense codes fill `bits` bytes and lie alike in every such run, so one
// shuffle control (vpshufb: the two bytes holding each code's start into its lane, within each
// 128-bit half, which both hold the run's bytes) and one shift serve every run; the codes are
// shifted up to bit 31 and back down, with the sign or without. A run's bytes come in one 8-byte
// load that ends, for the row's last runs, at the row's end and is shifted down to them, so that no
// load reads past the row (it was copied first, and the copy's stores and the loads that straddled
// them cost more than the decoding).
typedef struct {
    __m256i ctrl, up; // per lane: the shuffle that gathers its code's two bytes; 32 − B − its offset
} AffineRowAvx2;

static inline void affine_row_avx2_init(AffineRowAvx2 *r, int bits) {
    uint8_t c[32];
    int32_t u[8];
    for (int i = 0; i < 8; i++) {
        const int bit = i * bits;
        for (int b = 0; b < 4; b++) c[4 * (i % 4) + 16 * (i / 4) + b] = b < 2 ? (uint8_t)(bit / 8 + b) : 0x80;
        u[i] = 32 - bits - bit % 8;
    }
    r->ctrl = _mm256_loadu_si256((const __m256i *)(const void *)c);
    r->up = _mm256_loadu_si256((const __m256i *)(const void *)u);
}

// Levels of numbers 8k .. 8k+7 of a row (bytes: the row) as floats.
static QUANT_ALWAYS_INLINE __m256 affine_row_levels8(const uint8_t *bytes, uint32_t qh, const AffineRowAvx2 *r, int k,
                                                     const int bits, const int kind, const int bias) {
    if (kind == AFFINE_Q5) {
        const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(bytes + 8 * (k % 2))));
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)(qh >> (8 * k))), lane),
                                            _mm256_set1_epi32(1));
        const __m256i lo = k >= 2 ? _mm256_srli_epi32(b, 4) : _mm256_and_si256(b, _mm256_set1_epi32(15));
        return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(bias)));
    }
    if (bits == 8) {
        const __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(bytes + 8 * k));
        return _mm256_cvtepi32_ps(kind == AFFINE_SIGNED ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
    }
    const int at = k * bits, row_bytes = 4 * bits;
    uint64_t word = 0;
    if (row_bytes < 8) { // bits 1: the row's 4 bytes
        memcpy(&word, bytes + at, (size_t)(row_bytes - at));
    } else {
        const int start = at + 8 <= row_bytes ? at : row_bytes - 8;
        memcpy(&word, bytes + start, 8);
        word >>= 8 * (at - start);
    }
    const __m256i run = _mm256_set1_epi64x((long long)word);
    const __m256i v = _mm256_sllv_epi32(_mm256_shuffle_epi8(run, r->ctrl), r->up);
    return _mm256_cvtepi32_ps(kind == AFFINE_SIGNED ? _mm256_srai_epi32(v, 32 - bits) : _mm256_srli_epi32(v, 32 - bits));
}

// affine_row_levels for numbers 16h .. 16h+15 of a row.
static QUANT_ALWAYS_INLINE v16 affine_row_levels16(const uint8_t *bytes, uint32_t qh, const AffineRowAvx2 *r,
                                                   const int h, const int bits, const int kind, const int bias) {
    return (v16){affine_row_levels8(bytes, qh, r, 2 * h, bits, kind, bias),
                 affine_row_levels8(bytes, qh, r, 2 * h + 1, bits, kind, bias)};
}
#endif

// Mix on rows of the quantised tokens [0, n) of one chunk: per token its 32 numbers' levels decoded
// in registers and term(w_j, level, token j) added, even and odd tokens in separate sums (two
// chains). even and odd are set to those sums (numbers 0..31 of the chunk). qh: the q5 fifth bits
// of token 0 (one word per token), else NULL.
static QUANT_ALWAYS_INLINE void affine_mix_rows(AffineChunk ch, const uint32_t *qh, const int bits, const int kind,
                                                const int bias, const AffineForm f, AffinePrep prep, const void *state,
                                                int head, int c, const float *p, int n, float *even, float *odd) {
    float wbuf[2][4 * QUANT_TILE] __attribute__((aligned(64))), sm[2][8 * QUANT_TILE] __attribute__((aligned(64)));
    const float *w[2] = {NULL, NULL};
    const size_t rb = ch.unit_bytes;
#if defined(QUANT_AVX512) && defined(__AVX512VBMI__)
    __m512i ctrl[2], up[2];
    quant_row_gather(bits, ctrl, up);
    for (int h = 0; h < 2; h++) up[h] = _mm512_sub_epi32(_mm512_set1_epi32(32 - bits), up[h]);
    __m512 e0 = _mm512_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
#define AFFINE_ROW(acc0, acc1, k)                                                                  \
    {                                                                                              \
        const uint8_t *r = row + (size_t)((k) - k0) * rb;                                          \
        const uint32_t hk = qh ? qh[j0 + (k)] : 0;                                                 \
        acc0 = _mm512_add_ps(acc0, affine_term16(w[b][k], affine_row_levels16(r, hk, ctrl, up, 0, bits, kind, bias), \
                                                 sm[b], k, f));                                    \
        acc1 = _mm512_add_ps(acc1, affine_term16(w[b][k], affine_row_levels16(r, hk, ctrl, up, 1, bits, kind, bias), \
                                                 sm[b], k, f));                                    \
    }
#elif defined(VEC16)
    AffineRowAvx2 dec;
    affine_row_avx2_init(&dec, bits);
    v16 e0 = v16_zero(), e1 = e0, o0 = e0, o1 = e0;
#define AFFINE_ROW(acc0, acc1, k)                                                                  \
    {                                                                                              \
        const uint8_t *r = row + (size_t)((k) - k0) * rb;                                          \
        const uint32_t hk = qh ? qh[j0 + (k)] : 0;                                                 \
        acc0 = v16_add(acc0, affine_term16(w[b][k], affine_row_levels16(r, hk, &dec, 0, bits, kind, bias), sm[b], k, f)); \
        acc1 = v16_add(acc1, affine_term16(w[b][k], affine_row_levels16(r, hk, &dec, 1, bits, kind, bias), sm[b], k, f)); \
    }
#else
    memset(even, 0, sizeof(float) * 32);
    memset(odd, 0, sizeof(float) * 32);
#endif
    if (n > 0) w[0] = prep(state, head, c, p, n, 0, wbuf[0], sm[0]);
    for (int j0 = 0; j0 < n; j0 += 4 * QUANT_TILE) {
        const int b = (j0 / (4 * QUANT_TILE)) % 2;
        if (j0 + 4 * QUANT_TILE < n) w[1 - b] = prep(state, head, c, p, n, j0 + 4 * QUANT_TILE, wbuf[1 - b], sm[1 - b]);
        const int cnt = n - j0 < 4 * QUANT_TILE ? n - j0 : 4 * QUANT_TILE;
        affine_prefetch(&ch, j0 + AFFINE_AHEAD, 4 * QUANT_TILE);
        // 16 rows at a time, which lie in one block; the whole 64 at once when they do.
        const int step = !ch.states || affine_in_block(&ch, j0) + cnt <= ch.block_units ? cnt : QUANT_TILE;
        for (int k0 = 0; k0 < cnt; k0 += step) {
            const uint8_t *row = affine_unit(&ch, j0 + k0); // row k at row + (k − k0)·rb
            const int k1 = cnt - k0 < step ? cnt : k0 + step;
#if (defined(QUANT_AVX512) && defined(__AVX512VBMI__)) || defined(VEC16)
            __asm__("" ::: "memory"); // the parameters broadcast from memory
            int k = k0;
            for (; k + 2 <= k1; k += 2) {
                AFFINE_ROW(e0, e1, k)
                AFFINE_ROW(o0, o1, k + 1)
            }
            if (k < k1) AFFINE_ROW(e0, e1, k)
#else
            for (int k = k0; k < k1; k++) {
                float lv[32], *restrict acc = k % 2 ? odd : even;
                affine_row_levels(row + (size_t)(k - k0) * rb, qh ? qh[j0 + k] : 0, bits, kind, bias, lv);
#pragma omp simd
                for (int i = 0; i < 32; i++) acc[i] += affine_term(w[b][k], lv[i], sm[b], k, f);
            }
#endif
        }
    }
#if (defined(QUANT_AVX512) && defined(__AVX512VBMI__)) || defined(VEC16)
#undef AFFINE_ROW
    v16_store4(even, odd, e0, e1, o0, o1);
#endif
}

// ---- Keys: token tiles ----------------------------------------------------------------------
// The level table of codes of `bits` bits packed `per` to a 4-bit value e (per = 4/B; at B = 3 one,
// e's fourth bit ignored): lv[t][e] = level(code t of e), the code itself or its two's complement
// value (at B = 1 with the sign: the sign of x, 0 -> +1, 1 -> -1, as `int` stores it).
static inline void affine_levels(int bits, int is_signed, float (*lv)[16]) {
    const int per = bits == 3 ? 1 : 4 / bits;
    for (int t = 0; t < per; t++)
        for (int e = 0; e < 16; e++) {
            const uint32_t code = bits == 3 ? (uint32_t)e & 7u : ((uint32_t)e >> (bits * t)) & ((1u << bits) - 1u);
            lv[t][e] = !is_signed ? (float)code : bits == 1 ? (code ? -1.0f : 1.0f)
                                               : (float)((int32_t)(code << (32 - bits)) >> (32 - bits));
        }
}

// The lookup tables of one chunk (quant_tile_lookup's steps): table[st] = affine_table of the
// step's numbers st·per .. st·per + per − 1, weights w (the query's chunk) and their scales and
// minimums sm (the form's, indexed by number; NULL for w · L).
static QUANT_ALWAYS_INLINE void affine_step_tables(const float *w, const float *sm, const int bits, const float (*lv)[16],
                                                   const AffineForm f, float (*table)[16]) {
    const int per = bits == 3 ? 1 : 4 / bits;
    for (int st = 0; st < quant_tile_steps(bits); st++) {
        const float *x = f.scaled ? sm + st * per * f.ps : NULL;
#ifdef VEC16
        v16_store(table[st], affine_table16(w + st * per, x, per, lv, f));
#else
        affine_table(w + st * per, x, per, lv, f, table[st]);
#endif
    }
}

// What a family gives the score kernel for tiles t0/16 .. t0/16 + nt − 1 of chunk c: with tables,
// each tile's (all the same when `shared`); decoding, each tile's scales and minimums (the form's,
// indexed by number d of the chunk) and for q5 its fifth bits (a word per lane).
typedef struct {
    const float (*tables[4])[16];
    int shared;
    const float *sm[4];
    const uint32_t *qh[4];
} AffineTileJob;

typedef void (*AffineTileJobFn)(void *ctx, int c, int t0, int nt, int bits, AffineTileJob *job);
// Writes out[t0 .. t0 + 16·nt) (not past the stream's n) from the sums of chunk c.
typedef void (*AffineTileFinishFn)(void *ctx, int c, int t0, int nt, float (*acc)[QUANT_TILE], float *out);

// Level of number d of lane l of a tile chunk (decoding kernels).
static QUANT_ALWAYS_INLINE float affine_tile_level(const uint32_t *w, const uint32_t *qh, int l, int d, const int bits,
                                                   const int kind, const int bias) {
    if (kind == AFFINE_SIGNED) return (float)quant_tile_code_signed(w, l, d, bits);
    if (kind == AFFINE_UNSIGNED) return (float)quant_tile_code(w, l, d, bits);
    // q5: number d's low bits are nibble 2·(d % 16) + d / 16 of the lane's 16 bytes
    return (float)((int)(quant_tile_code(w, l, 2 * (d % 16) + d / 16, 4) | ((qh[l] >> d) & 1) << 4) - bias);
}

// Scores on token tiles (quant.h) of one head's n tokens, chunk by chunk of 32 numbers and four
// tiles at a time (their independent chains hide the latency of the adds): per lane (token) the sum
// over the chunk of table lookups (`tabled`) or of term(q_d, level_d, d) in order of d. The sums go
// to `finish`; with `carry` a chunk's start from what finish wrote for the previous one (so a
// token's sum runs over all its numbers in order), else from zero. `tiles`: the head's tiles (a
// unit is a tile of every chunk; its `codes` the head's first tile).
static QUANT_ALWAYS_INLINE void affine_score_tiles(AffineChunk tiles, int n, const int hd, const int bits,
                                                   const int kind, const int bias, const int tabled, const int carry,
                                                   const AffineForm f, const float *q, AffineTileJobFn job_fn,
                                                   AffineTileFinishFn finish, void *ctx, float *out) {
    for (int c = 0; c < hd / 32; c++) {
        for (int t0 = 0; t0 < n; t0 += 4 * QUANT_TILE) {
            const int nt = n - t0 >= 4 * QUANT_TILE ? 4 : (n - t0 + QUANT_TILE - 1) / QUANT_TILE;
            const uint32_t *tile[4];
            for (int k = 0; k < nt; k++)
                tile[k] = (const uint32_t *)(const void *)affine_unit(&tiles, t0 / QUANT_TILE + k) +
                          (size_t)c * bits * QUANT_TILE;
            affine_prefetch(&tiles, (t0 + AFFINE_AHEAD) / QUANT_TILE, 4);
            float acc[4][QUANT_TILE] = {{0}};
            for (int k = 0; k < nt && carry && c > 0; k++)
                memcpy(acc[k], out + t0 + k * QUANT_TILE,
                       sizeof(float) * (size_t)(n - t0 - k * QUANT_TILE < QUANT_TILE ? n - t0 - k * QUANT_TILE : QUANT_TILE));
            AffineTileJob job;
            job_fn(ctx, c, t0, nt, bits, &job); // bits: a constant where the job is inlined
            if (tabled && nt == 4 && job.shared)
                quant_tile_lookup(tile, 4, job.tables, 1, bits, acc);
            else if (tabled && nt == 4)
                quant_tile_lookup(tile, 4, job.tables, 0, bits, acc);
            else if (tabled)
                quant_tile_lookup(tile, nt, job.tables, job.shared, bits, acc);
            else
                for (int k = 0; k < nt; k++) {
                    const uint32_t *w = tile[k], *qh = job.qh[k];
                    const float *sm = job.sm[k];
QUANT_UNROLL(32)
                    for (int d = 0; d < 32; d++) {
                        const float qd = q[32 * c + d];
#pragma omp simd
                        for (int l = 0; l < QUANT_TILE; l++)
                            acc[k][l] += affine_term(qd, affine_tile_level(w, qh, l, d, bits, kind, bias), sm, d, f);
                    }
                }
            finish(ctx, c, t0, nt, acc, out);
        }
    }
}

#endif
