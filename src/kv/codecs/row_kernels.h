// AVX-512 helpers for the codecs that keep each head's vector at a token as one row of B-bit codes
// (quant_pack's dense layout) read through a table of levels: kvquant and quarot (codec_nuq.c) and
// TurboQuant (codec_turboquant.c), at micro's head_dim of 32. A row is two vectors of levels: its
// codes gathered into 32-bit lanes (quant_row_gather) and looked up (vpermps up to 16 levels, two
// tables up to 32, a gather beyond). The families' kernels keep their plain C arithmetic and order:
// mix adds w · level number by number, token after token, as the C loop does; scores sum q_d · level
// in order of d for sixteen tokens at once, one token a lane (row_sums16: the products turned from
// rows into columns), where the C loop sums one token at a time. Every product and sum is the same float operation, so both builds give the same
// bits (tests/test_codec_simd.c).
#ifndef MICRO_ROW_KERNELS_H
#define MICRO_ROW_KERNELS_H

#include <stdint.h>

#include "quant.h"

#if defined(QUANT_AVX512) && defined(__AVX512VBMI__)
#define ROW_KERNELS 1

typedef struct {
    __m512i ctrl[2], up[2]; // quant_row_gather's, up[h] = 32 − B − the code's offset in its word
    __m512 t0, t1;          // levels 0..15 and 16..31
    const float *levels;    // all 2^B of them (gathered beyond 32)
    int bits;
} RowLevels;

static inline void row_levels_init(RowLevels *r, const float *levels, int bits) {
    float t[32] __attribute__((aligned(64))) = {0};
    quant_row_gather(bits, r->ctrl, r->up);
    for (int h = 0; h < 2; h++) r->up[h] = _mm512_sub_epi32(_mm512_set1_epi32(32 - bits), r->up[h]);
    for (int i = 0; i < (1 << bits) && i < 32; i++) t[i] = levels[i];
    r->t0 = _mm512_load_ps(t), r->t1 = _mm512_load_ps(t + 16);
    r->levels = levels, r->bits = bits;
}

// The levels of numbers 16h .. 16h+15 of a row of 32 codes (4·B bytes, nothing read beyond them).
static QUANT_ALWAYS_INLINE __m512 row_levels16(const RowLevels *r, const uint8_t *row, int h) {
    const __m512i bytes = _mm512_maskz_loadu_epi8((__mmask64)((1ull << (4 * r->bits)) - 1), row);
    const __m512i code = _mm512_srli_epi32(_mm512_sllv_epi32(_mm512_permutexvar_epi8(r->ctrl[h], bytes), r->up[h]),
                                           (unsigned)(32 - r->bits));
    if (r->bits <= 4) return _mm512_permutexvar_ps(code, r->t0);
    if (r->bits == 5) return _mm512_permutex2var_ps(r->t0, code, r->t1);
    return _mm512_i32gather_ps(code, r->levels, 4);
}

// Sixteen rows of 16 numbers become sixteen columns: r[i] lane t = r[t] lane i before.
static QUANT_ALWAYS_INLINE void row_transpose16(__m512 *r) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    for (int i = 0; i < 16; i += 4) {
        const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
        const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c)), r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d)), r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 16; i += 8)
        for (int k = 0; k < 4; k++) {
            t[i + k] = _mm512_shuffle_f32x4(r[i + k], r[i + k + 4], 0x88);
            t[i + k + 4] = _mm512_shuffle_f32x4(r[i + k], r[i + k + 4], 0xdd);
        }
    for (int k = 0; k < 8; k++) {
        r[k] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
        r[k + 8] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xdd);
    }
}

// out lane t = Σ_d v[t][d] over d = 0..31 in order, from 0: sixteen tokens' sums of their products
// (v[t] the products q_d · level of token t), each the C loop's `acc += ...` one token at a time.
// Each half of the rows is turned into columns, one a number, and the columns added in order.
static QUANT_ALWAYS_INLINE __m512 row_sums16(const float (*v)[32]) {
    __m512 acc = _mm512_setzero_ps();
    for (int h = 0; h < 2; h++) {
        __m512 r[16];
        for (int t = 0; t < 16; t++) r[t] = _mm512_load_ps(v[t] + 16 * h);
        row_transpose16(r);
        for (int d = 0; d < 16; d++) acc = _mm512_add_ps(acc, r[d]);
    }
    return acc;
}
#endif

#endif
