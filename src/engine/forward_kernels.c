// The decode step's hot loops, compiled once per kernel set (meson.build: forward_portable, and
// forward_avx2 and forward_avx512 with KERNELS_AVX2 / KERNELS_AVX512 and their sets' flags);
// forward_kernels() in forward.c picks one at run time. Plain C with `omp simd` loops whose sums are
// all written out in a fixed order, so that every build (and any -march) computes the same bits: see
// forward_kernels.h.
#include "forward_kernels.h"

#include <limits.h>
#include <stddef.h>

#include "fastmath.h"
#include "exp_fixed.h"
#include "libm_expf.h"
#include "region_check.h"

#if defined(KERNELS_AVX512) || defined(KERNELS_AVX2)
#include <immintrin.h>
#endif

// What each kernel reads and writes, handed to ASan at its entry in the sanitizer test build, which
// compiles these kernels without the sanitizers (region_check.h); nothing in any other build.
static inline void matvec_contract(const float *out, const float *W, const float *x, int n, int r0, int r1) {
    REGION_CHECK("matvec_rows: W", W + (ptrdiff_t)r0 * n, (ptrdiff_t)(r1 - r0) * n);
    REGION_CHECK("matvec_rows: x", x, n);
    REGION_CHECK("matvec_rows: out", out + r0, r1 - r0);
}

static inline void matmul_contract(const float *out, size_t os, const float *W, const float *X, size_t xs, int n,
                                   int n_rows, int o0, int o1) {
    REGION_CHECK("matmul_rows: W", W + (ptrdiff_t)o0 * n, (ptrdiff_t)(o1 - o0) * n);
    for (int r = 0; r < n_rows; r++) {
        REGION_CHECK("matmul_rows: X", X + r * xs, n);
        REGION_CHECK("matmul_rows: out", out + r * os + o0, o1 - o0);
    }
}

static inline void scores_contract(const float *out, size_t os, const float *q, size_t qs, int n_q, const float *kt,
                                   int head_dim, int j0, const int *ends) {
    int longest = j0;
    for (int r = 0; r < n_q; r++) {
        REGION_CHECK("scores_transposed: q", q + r * qs, head_dim);
        if (ends[r] > j0) REGION_CHECK("scores_transposed: out", out + r * os + j0, ends[r] - j0);
        longest = ends[r] > longest ? ends[r] : longest;
    }
    for (int p0 = j0 - j0 % KEY_PANEL; p0 < longest; p0 += KEY_PANEL) { // each panel's part of [j0, longest)
        const int a = p0 > j0 ? p0 : j0, e = p0 + KEY_PANEL < longest ? p0 + KEY_PANEL : longest;
        for (int d = 0; d < head_dim; d++) REGION_CHECK("scores_transposed: keys", kt + key_panel_at(head_dim, d, a), e - a);
    }
}

static inline void mix_contract(const float *out, size_t os, const float *p, size_t ps, int n_p, const float *v,
                                int head_dim, int j0, const int *ends) {
    int longest = j0;
    for (int r = 0; r < n_p; r++) {
        if (ends[r] > j0) REGION_CHECK("mix_rows: p", p + r * ps + j0, ends[r] - j0);
        REGION_CHECK("mix_rows: out", out + r * os, head_dim);
        longest = ends[r] > longest ? ends[r] : longest;
    }
    REGION_CHECK("mix_rows: values", v + (ptrdiff_t)j0 * head_dim, (ptrdiff_t)(longest - j0) * head_dim);
}

// Each output row is a whole dot product computed by one thread in a fixed order, so the result is
// the same bit for bit whatever the number of threads.
#define LANES 16

// Adds up 16 partial sums by halving (8 + 8, 4 + 4, 2 + 2, 1 + 1): vector adds in a fixed order,
// instead of 16 dependent scalar adds that would cost more than the row's multiplications.
static inline float fold_lanes(float *part) {
    for (int width = LANES / 2; width >= 1; width /= 2)
#pragma omp simd
        for (int l = 0; l < width; l++) part[l] += part[l + width];
    return part[0];
}

// The same sums written out per width, for the batched kernel's sixteen outputs at a time: there,
// the loop over widths costs more than the products of a short row. (The vector builds write the
// same adds out in registers.)
#if !defined(KERNELS_AVX512) && !defined(KERNELS_AVX2)
static inline float fold_lanes_unrolled(float *part) {
#pragma omp simd
    for (int l = 0; l < 8; l++) part[l] += part[l + 8];
#pragma omp simd
    for (int l = 0; l < 4; l++) part[l] += part[l + 4];
    part[0] += part[2], part[1] += part[3];
    return part[0] + part[1];
}
#endif

// The batched kernel's block: out[i·os + k] = Σ_j w_k[j] · x_i[j] for four weight rows w_k (n apart)
// and four batch rows x_i (xs apart), each sum dot_row's: 16 lane partials a[i][k][l] over the row,
// folded by fold_lanes_unrolled.
#ifdef KERNELS_AVX512
// The sixteen partial sums stay in registers from the first product to the fold, where the C
// loop's array was cleared and read back through memory for every block, which at a row as short
// as micro's (n = 192) cost as much as the products themselves. The fold is a transpose tree whose
// every add is one of fold_lanes_unrolled's (8 + 8, 4 + 4, 0 + 2 and 1 + 3, 0 + 1), two outputs per
// add at the first step and sixteen at the last: 15 adds and 30 shuffles.
static inline __attribute__((always_inline)) void block4x4(float *restrict out, size_t os, const float *restrict w0,
                                                           const float *restrict x0, size_t xs, int n) {
    const float *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;
    const float *x1 = x0 + xs, *x2 = x1 + xs, *x3 = x2 + xs;
    __m512 v[16]; // v[4k + i]: the partials of out[i·os + k]
    for (int i = 0; i < 16; i++) v[i] = _mm512_setzero_ps();
    for (int j = 0; j < n; j += LANES) {
        const __m512 c0 = _mm512_loadu_ps(w0 + j), c1 = _mm512_loadu_ps(w1 + j), c2 = _mm512_loadu_ps(w2 + j),
                     c3 = _mm512_loadu_ps(w3 + j);
        const float *xr[4] = {x0 + j, x1 + j, x2 + j, x3 + j};
        for (int i = 0; i < 4; i++) {
            const __m512 y = _mm512_loadu_ps(xr[i]);
            v[i] = _mm512_add_ps(v[i], _mm512_mul_ps(c0, y));
            v[4 + i] = _mm512_add_ps(v[4 + i], _mm512_mul_ps(c1, y));
            v[8 + i] = _mm512_add_ps(v[8 + i], _mm512_mul_ps(c2, y));
            v[12 + i] = _mm512_add_ps(v[12 + i], _mm512_mul_ps(c3, y));
        }
    }
    for (int j = 0; j < 8; j++) // lanes 0..7 + 8..15: vector j holds v[2j]'s eight sums, then v[2j+1]'s
        v[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xEE));
    for (int j = 0; j < 4; j++) // 0..3 + 4..7: 128-bit lane t holds the four sums of original 4j + t
        v[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xDD));
    for (int j = 0; j < 2; j++) // 0 + 2 and 1 + 3, per 128-bit lane, two originals each
        v[j] = _mm512_add_ps(_mm512_shuffle_ps(v[2 * j], v[2 * j + 1], 0x44),
                             _mm512_shuffle_ps(v[2 * j], v[2 * j + 1], 0xEE));
    const __m512 sum = _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD)); // 0 + 1
    _mm_storeu_ps(out, _mm512_castps512_ps128(sum));
    _mm_storeu_ps(out + os, _mm512_extractf32x4_ps(sum, 1));
    _mm_storeu_ps(out + 2 * os, _mm512_extractf32x4_ps(sum, 2));
    _mm_storeu_ps(out + 3 * os, _mm512_extractf32x4_ps(sum, 3));
}
#elif defined(KERNELS_AVX2)
// fold_lanes_unrolled on one output's 16 partials, held as lanes 0..7 (lo) and 8..15 (hi): the same
// adds, 8 + 8, 4 + 4, 0 + 2 and 1 + 3, then 0 + 1.
static inline __attribute__((always_inline)) float fold16_avx2(__m256 lo, __m256 hi) {
    const __m256 v = _mm256_add_ps(lo, hi);
    const __m128 x4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 x2 = _mm_add_ps(x4, _mm_movehl_ps(x4, x4));
    return _mm_cvtss_f32(_mm_add_ss(x2, _mm_shuffle_ps(x2, x2, 1)));
}

// Two weight rows against two batch rows, both halves of each output's 16 lanes in registers: eight
// accumulators, which AVX2's sixteen registers hold with the loads (four against four would not).
static inline __attribute__((always_inline)) void block2x2(float *restrict out, size_t os, const float *restrict w0,
                                                           const float *restrict x0, size_t xs, int n) {
    const float *w1 = w0 + n, *x1 = x0 + xs;
    __m256 a[8]; // a[4i + 2k + h]: half h of out[i·os + k]'s partials
    for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
    for (int j = 0; j < n; j += LANES)
        for (int h = 0; h < 2; h++) {
            __m256 c0 = _mm256_loadu_ps(w0 + j + 8 * h), c1 = _mm256_loadu_ps(w1 + j + 8 * h);
            __m256 y0 = _mm256_loadu_ps(x0 + j + 8 * h), y1 = _mm256_loadu_ps(x1 + j + 8 * h);
            // Held in registers: gcc 12 folded each load into the multiplies that use it, loading
            // every operand twice, and the loop ran at the loads' rate, half its multiplies'.
            __asm__("" : "+x"(c0), "+x"(c1), "+x"(y0), "+x"(y1));
            a[h] = _mm256_add_ps(a[h], _mm256_mul_ps(c0, y0));
            a[2 + h] = _mm256_add_ps(a[2 + h], _mm256_mul_ps(c1, y0));
            a[4 + h] = _mm256_add_ps(a[4 + h], _mm256_mul_ps(c0, y1));
            a[6 + h] = _mm256_add_ps(a[6 + h], _mm256_mul_ps(c1, y1));
        }
    out[0] = fold16_avx2(a[0], a[1]), out[1] = fold16_avx2(a[2], a[3]);
    out[os] = fold16_avx2(a[4], a[5]), out[os + 1] = fold16_avx2(a[6], a[7]);
}

static inline __attribute__((always_inline)) void block4x4(float *restrict out, size_t os, const float *restrict w0,
                                                           const float *restrict x0, size_t xs, int n) {
    for (int i = 0; i < 4; i += 2)
        for (int k = 0; k < 4; k += 2) block2x2(out + (size_t)i * os + k, os, w0 + (size_t)k * n, x0 + (size_t)i * xs, xs, n);
}
#else
static inline void block4x4(float *restrict out, size_t os, const float *restrict w0, const float *restrict x0,
                            size_t xs, int n) {
    const float *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;
    const float *x1 = x0 + xs, *x2 = x1 + xs, *x3 = x2 + xs;
    float a[4][4][LANES] = {{{0}}};
    for (int j = 0; j < n; j += LANES) {
#pragma omp simd
        for (int l = 0; l < LANES; l++) {
            const float v0 = w0[j + l], v1 = w1[j + l], v2 = w2[j + l], v3 = w3[j + l];
            const float y0 = x0[j + l], y1 = x1[j + l], y2 = x2[j + l], y3 = x3[j + l];
            a[0][0][l] += v0 * y0, a[0][1][l] += v1 * y0, a[0][2][l] += v2 * y0, a[0][3][l] += v3 * y0;
            a[1][0][l] += v0 * y1, a[1][1][l] += v1 * y1, a[1][2][l] += v2 * y1, a[1][3][l] += v3 * y1;
            a[2][0][l] += v0 * y2, a[2][1][l] += v1 * y2, a[2][2][l] += v2 * y2, a[2][3][l] += v3 * y2;
            a[3][0][l] += v0 * y3, a[3][1][l] += v1 * y3, a[3][2][l] += v2 * y3, a[3][3][l] += v3 * y3;
        }
    }
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) out[(size_t)i * os + k] = fold_lanes_unrolled(a[i][k]);
}
#endif

// One row's dot product: 16 partial sums across the row, folded in a fixed order at the end.
static float dot_row(const float *restrict w, const float *restrict x, int n) {
    float part[LANES] = {0};
    int j = 0;
    for (; j + LANES <= n; j += LANES)
#pragma omp simd
        for (int l = 0; l < LANES; l++) part[l] += w[j + l] * x[j + l];
    float sum = fold_lanes(part);
    for (; j < n; j++) sum += w[j] * x[j];
    return sum;
}

// out[r] = W[r,:] · x for rows [r0, r1). Decoding is bound by reading the weights (7 MB per token
// from L3), so four rows share each load of x, and the next four rows are prefetched while these
// are summed. Each row's sum is the same as dot_row's, so any split of rows gives the same bits.
// Aligned to a cache line: a decode's time is mostly this loop, whose speed otherwise moved with
// wherever the code before it happened to leave it (bench-compare's whole decode).
__attribute__((aligned(64))) static void matvec_rows_impl(float *restrict out, const float *restrict W,
                                                          const float *restrict x, int n, int r0, int r1) {
    matvec_contract(out, W, x, n, r0, r1);
    int r = r0;
    if (n % LANES == 0) {
        for (; r + 4 <= r1; r += 4) {
            const float *w0 = W + (size_t)r * n, *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;
            float a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};
            for (int j = 0; j < n; j += LANES) {
                // A line of the rows eight on for each line read here: the weights come from L3, and
                // asking for the next four rows whole as these start left the adds waiting behind
                // the requests (docs/history/speed.md).
                __builtin_prefetch(w0 + 8 * (size_t)n + j);
                __builtin_prefetch(w1 + 8 * (size_t)n + j);
                __builtin_prefetch(w2 + 8 * (size_t)n + j);
                __builtin_prefetch(w3 + 8 * (size_t)n + j);
#pragma omp simd
                for (int l = 0; l < LANES; l++) {
                    a0[l] += w0[j + l] * x[j + l];
                    a1[l] += w1[j + l] * x[j + l];
                    a2[l] += w2[j + l] * x[j + l];
                    a3[l] += w3[j + l] * x[j + l];
                }
            }
            out[r] = fold_lanes(a0), out[r + 1] = fold_lanes(a1), out[r + 2] = fold_lanes(a2), out[r + 3] = fold_lanes(a3);
        }
    }
    for (; r < r1; r++) out[r] = dot_row(W + (size_t)r * n, x, n);
}

// out[r·os + o] = W[o,:] · X[r·xs, 0..n) for weight rows o in [o0, o1) and rows r in [0, n_rows): the
// batched forward's products. Each output is dot_row's sum, bit for bit (16 lane partials folded in
// the same order), so a row's numbers do not depend on the other rows of its batch. Four weight rows
// against four batch rows at a time: each weight load serves four rows and each row load four weight
// rows, where matvec_rows reads the weights again for every row.
static void matmul_rows_impl(float *restrict out, size_t os, const float *restrict W, const float *restrict X,
                             size_t xs, int n, int n_rows, int o0, int o1) {
    matmul_contract(out, os, W, X, xs, n, n_rows, o0, o1);
    if (n % LANES) { // no whole lanes: dot_row for each output
        for (int r = 0; r < n_rows; r++)
            for (int o = o0; o < o1; o++) out[(size_t)r * os + o] = dot_row(W + (size_t)o * n, X + (size_t)r * xs, n);
        return;
    }
    int o = o0;
    // The next four weight rows are asked for a slice at a time while these serve every batch row:
    // the weights come from DRAM (a batch's KV cache streams through L3 between two uses), and the
    // first batch rows of each four weight rows would otherwise wait on them.
    const int blocks = n_rows / 4 > 0 ? n_rows / 4 : 1;
    const size_t slice = ((size_t)4 * n + (size_t)blocks * LANES - 1) / ((size_t)blocks * LANES) * LANES;
    for (; o + 4 <= o1; o += 4) {
        const float *w0 = W + (size_t)o * n;
        const size_t ahead = o + 8 <= o1 ? 4 * (size_t)n : 0; // the next four rows' floats (none past the tile)
        int r = 0;
        for (; r + 4 <= n_rows; r += 4) {
            const size_t f1 = (size_t)(r / 4 + 1) * slice < ahead ? (size_t)(r / 4 + 1) * slice : ahead;
            for (size_t f = (size_t)(r / 4) * slice; f < f1; f += LANES) __builtin_prefetch(w0 + 4 * (size_t)n + f);
            block4x4(out + (size_t)r * os + o, os, w0, X + (size_t)r * xs, xs, n);
        }
        for (; r < n_rows; r++) matvec_rows_impl(out + (size_t)r * os, W, X + (size_t)r * xs, n, o, o + 4);
    }
    for (int r = 0; r < n_rows && o < o1; r++) matvec_rows_impl(out + (size_t)r * os, W, X + (size_t)r * xs, n, o, o1);
}

#if defined(KERNELS_AVX512)
// exp_neg on 16 lanes, its every bit, in fewer instructions than gcc's build of the C, whose chain
// of dependent steps the softmax of a long row waits on: x − n·c₁ as one fused step (n·c₁ is exact
// for |n| < 2^9 and the difference exact by Sterbenz's lemma, so the one rounding is the C's
// second; outside that range the result is ±inf or NaN either way), and p·2^n as one vscalefps (the
// exact product, rounded once, as the C's multiply by the float 2^n). tests/test_forward_kernels.c
// sweeps float bit patterns through both. x holds k (1..4) vectors, each step taken for all of them
// before the next: the polynomial is a chain of twelve dependent roundings, and a loop that took one
// vector's whole chain after another's waited on it (history/speed.md).
static inline __attribute__((always_inline)) void exp_neg16(__m512 *x, int k) {
    __m512 n[4], r[4], p[4];
    for (int v = 0; v < k; v++) {
        x[v] = _mm512_max_ps(_mm512_set1_ps(-87.0f), x[v]); // a NaN x stays NaN (vmaxps returns its second operand)
        n[v] = _mm512_roundscale_ps(_mm512_add_ps(_mm512_mul_ps(x[v], _mm512_set1_ps(1.44269504088896341f)),
                                                  _mm512_set1_ps(0.5f)),
                                    _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    }
    for (int v = 0; v < k; v++)
        r[v] = _mm512_sub_ps(_mm512_fnmadd_ps(n[v], _mm512_set1_ps(0.693145751953125f), x[v]),
                             _mm512_mul_ps(n[v], _mm512_set1_ps(1.42860682030941723212e-6f)));
    static const float coef[6] = {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
    for (int v = 0; v < k; v++) p[v] = _mm512_set1_ps(1.0f / 720);
    for (int c = 0; c < 6; c++)
        for (int v = 0; v < k; v++) p[v] = _mm512_add_ps(_mm512_mul_ps(p[v], r[v]), _mm512_set1_ps(coef[c]));
    // From n = 128 on, 2^255: the C's 2^n is +inf there, though p·2^128 may be finite, and
    // vscalefps(NaN, +inf) gives +inf on AMD's Zen 5 where the C gives NaN (x = +inf, r NaN).
    for (int v = 0; v < k; v++) {
        const __mmask16 huge = _mm512_cmp_ps_mask(n[v], _mm512_set1_ps(128.0f), _CMP_GE_OQ);
        x[v] = _mm512_scalef_ps(p[v], _mm512_mask_mov_ps(n[v], huge, _mm512_set1_ps(255.0f)));
    }
}

// The first m (0..16) lanes: a row's last few numbers as one masked vector, where one at a time each
// had cost a scalar pass (a softmax's row takes every length in the causal evaluator).
static inline __mmask16 first_lanes(int m) { return (__mmask16)((1u << m) - 1); }
#endif

// x[i] = e^(scale·(x[i] - max)), returning their sum in a fixed order: 16 lane partials over the
// whole blocks of 16, the elements left over added to lane 0 in turn, then 0 + lane 0 + lane 1 + ...
// + lane 15. That is the order of gcc 12's AVX-512 build of the `omp simd reduction(+)` this replaced
// (whose sum order followed the vector width), so the numbers `micro plate` printed from a -march=native
// build stay the same to the last digit, now on every CPU and build.
static float exp_and_sum(float *x, int n, float max, float scale) {
    float part[LANES] = {0};
    int i = 0;
#if defined(KERNELS_AVX512)
    const __m512 vmax = _mm512_set1_ps(max), vscale = _mm512_set1_ps(scale);
    __m512 sum16 = _mm512_setzero_ps();
    for (; i + 4 * LANES <= n; i += 4 * LANES) {
        __m512 e[4];
        for (int v = 0; v < 4; v++) e[v] = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + v * LANES), vmax), vscale);
        exp_neg16(e, 4);
        for (int v = 0; v < 4; v++) _mm512_storeu_ps(x + i + v * LANES, e[v]), sum16 = _mm512_add_ps(sum16, e[v]);
    }
    for (; i + LANES <= n; i += LANES) {
        __m512 e = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax), vscale);
        exp_neg16(&e, 1);
        _mm512_storeu_ps(x + i, e);
        sum16 = _mm512_add_ps(sum16, e);
    }
    _mm512_storeu_ps(part, sum16);
    if (i < n) { // the last few as one masked vector, then added to lane 0 in turn as below
        const __mmask16 m = first_lanes(n - i);
        __m512 e = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax), vscale);
        exp_neg16(&e, 1);
        _mm512_mask_storeu_ps(x + i, m, e);
        for (; i < n; i++) part[0] += x[i];
    }
#endif
    for (; i + LANES <= n; i += LANES)
#pragma omp simd
        for (int l = 0; l < LANES; l++) {
            float e = exp_neg((x[i + l] - max) * scale);
            x[i + l] = e;
            part[l] += e;
        }
    for (; i < n; i++) {
        x[i] = exp_neg((x[i] - max) * scale);
        part[0] += x[i];
    }
    float sum = 0;
    for (int l = 0; l < LANES; l++) sum += part[l];
    return sum;
}

#if !defined(KERNELS_AVX512)
// The first i with x[i] == v, or n − 1 when there is none (v NaN): a block of LANES compared at a
// time, stopping at the first block that holds one. (A compare folded into the block's reduction in
// the normalising pass had cost a horizontal OR and a branch on every block; the AVX-512 build's
// mask compare costs neither, and its normalising pass looks as it goes.)
static int first_equal(const float *x, int n, float v) {
    int i = 0;
#if defined(KERNELS_AVX2)
    const __m256 vv = _mm256_set1_ps(v);
    for (; i + LANES <= n; i += LANES) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vv, _CMP_EQ_OQ)) |
                        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i + 8), vv, _CMP_EQ_OQ)) << 8;
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
#endif
    for (; i < n; i++)
        if (x[i] == v) return i;
    return n - 1;
}
#endif

// x = softmax(scale · x), in place; returns the first position of the largest weight.
//
// The largest weight is inv itself, so the first weight equal to inv is the first of the largest,
// found by a scan that stops there: the max score's exp_neg(0) is exactly 1 and every other exp_neg
// of a number <= 0 is at most 1, so no rounded e · inv exceeds 1 · inv (others may equal it: the
// first of them wins). When inv is NaN every weight is NaN, no position matches, and the last is
// returned, as a scan for the max gives.
static int scaled_softmax_impl(float *x, int n, float scale) {
    REGION_CHECK("scaled_softmax: x", x, n);
    float max = x[0];
    int i = 0;
#if defined(KERNELS_AVX512)
    // Four running maxima: one waited on each vmaxps before the next. (The first vector is read
    // twice, which the max does not mind.)
    if (n >= LANES) {
        __m512 m0 = _mm512_loadu_ps(x), m1 = m0, m2 = m0, m3 = m0;
        for (; i + 4 * LANES <= n; i += 4 * LANES) {
            m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
            m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + LANES));
            m2 = _mm512_max_ps(m2, _mm512_loadu_ps(x + i + 2 * LANES));
            m3 = _mm512_max_ps(m3, _mm512_loadu_ps(x + i + 3 * LANES));
        }
        for (; i + LANES <= n; i += LANES) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
        if (i < n) { // the last few, masked (the lanes past n keep m0's)
            const __mmask16 m = first_lanes(n - i);
            m0 = _mm512_mask_max_ps(m0, m, m0, _mm512_maskz_loadu_ps(m, x + i));
            i = n;
        }
        max = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
    }
#endif
#pragma omp simd reduction(max : max)
    for (int j = i; j < n; j++) max = x[j] > max ? x[j] : max;
    // The max is exact in any order (for numbers; a NaN anywhere makes every weight NaN anyway).
    const float inv = 1.0f / exp_and_sum(x, n, max, scale);
    i = 0;
#if defined(KERNELS_AVX512)
    // The normalising pass looks for the first weight equal to inv as it goes (first_equal's scan).
    const __m512 vinv = _mm512_set1_ps(inv);
    int top = -1;
    for (; i + LANES <= n; i += LANES) {
        const __m512 w = _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv);
        _mm512_storeu_ps(x + i, w);
        if (top < 0) {
            const __mmask16 hit = _mm512_cmp_ps_mask(w, vinv, _CMP_EQ_OQ);
            if (hit) top = i + __builtin_ctz(hit);
        }
    }
    if (i < n) { // the last few, masked
        const __mmask16 m = first_lanes(n - i);
        const __m512 w = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vinv);
        _mm512_mask_storeu_ps(x + i, m, w);
        const __mmask16 hit = _mm512_mask_cmp_ps_mask(m, w, vinv, _CMP_EQ_OQ);
        if (top < 0 && hit) top = i + __builtin_ctz(hit);
    }
    return top >= 0 ? top : n - 1;
#else
#pragma omp simd
    for (int j = 0; j < n; j++) x[j] *= inv;
    return first_equal(x, n, inv);
#endif
}

static void exp_negated_impl(float *restrict out, const float *restrict x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) out[i] = libm_expf(-x[i]);
}

static void exp_shifted_impl(double *restrict out, const float *restrict x, float shift, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) out[i] = exp_fixed((double)x[i] - shift);
}

// ---- The fast evaluator's attention ---------------------------------------------------------
// A tile's rows go through in quads, four rows side by side, over their common positions (the
// quad's shortest range), and each row's positions past that alone. The scores take the keys panel
// by panel, every quad's part of one before the next: so a panel comes from L2 once for the tile's
// every quad and is read again from L1, where a tile of one quad read every panel from L2 for four
// rows, and went at the rate L2 delivered them. The mix takes each quad's whole range in turn (value
// rows are one stream the prefetchers keep up with; cut into runs, the sums' trips through memory
// between runs cost more than the reads saved). Every output is still one sum in a fixed order
// (over channels; over positions in order), whatever the grouping.
enum { QUAD = 4, SPAN_WIDTH = 2 * LANES };
_Static_assert(SPAN_TILE % QUAD == 0, "a tile is whole quads");

#if !defined(KERNELS_AVX512) && !defined(KERNELS_AVX2)
// The portable build's quad step, acc[r][0, w) += s_r · x[0, w). Inlined with a constant w, so
// the accumulators stay in registers.
static inline __attribute__((always_inline)) void add_scaled4(float acc[][SPAN_WIDTH], const float *restrict x,
                                                              float s0, float s1, float s2, float s3, int w) {
#pragma omp simd
    for (int l = 0; l < w; l++) {
        acc[0][l] += s0 * x[l], acc[1][l] += s1 * x[l];
        acc[2][l] += s2 * x[l], acc[3][l] += s3 * x[l];
    }
}
#endif

// Each quad's common range (the shortest of its rows' ends) into common[]; returns the longest.
static inline int quad_ranges(const int *ends, int quads, int j0, int *common) {
    int longest = j0;
    for (int k = 0; k < quads; k++) {
        int e = ends[QUAD * k];
        for (int r = 1; r < QUAD; r++) e = ends[QUAD * k + r] < e ? ends[QUAD * k + r] : e;
        common[k] = e;
        longest = e > longest ? e : longest;
    }
    return longest;
}

#if defined(KERNELS_AVX512) || defined(KERNELS_AVX2)
// The vector sets' blocks: SCORE_CHUNKS (scores) or MIX_CHUNKS (mix) vectors from j (a multiple of
// SCORE_LANES, so that no vector straddles two panels), masked where a range starts or ends inside
// them, against one or a quad of rows, every accumulator a named register (gcc kept the C loops'
// arrays on the stack). A range's last positions and the single rows go through the same blocks
// masked: summed one position at a time, each position's channels had made a chain of dependent
// adds, which cost as much as the full blocks.
#ifdef KERNELS_AVX512
enum { SCORE_LANES = 16, SCORE_CHUNKS = 4 };
typedef __m512 score_vec;
typedef __mmask16 score_mask;
// Lanes l of the vector at i with lo <= i + l < hi.
static inline score_mask score_lanes(int i, int lo, int hi) {
    const int a = lo - i < 0 ? 0 : lo - i > SCORE_LANES ? SCORE_LANES : lo - i;
    const int e = hi - i < 0 ? 0 : hi - i > SCORE_LANES ? SCORE_LANES : hi - i;
    return (score_mask)(((1u << e) - 1) & ~((1u << a) - 1));
}
#define SCORE_ZERO() _mm512_setzero_ps()
#define SCORE_LOAD(p) _mm512_loadu_ps(p)
#define SCORE_LOAD_MASKED(p, m) _mm512_maskz_loadu_ps(m, p)
#define SCORE_SET1(x) _mm512_set1_ps(x)
#define SCORE_MUL(a, b) _mm512_mul_ps(a, b)
#define SCORE_ADD(a, b) _mm512_add_ps(a, b)
#define SCORE_STORE(p, v) _mm512_storeu_ps(p, v)
#define SCORE_STORE_MASKED(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#else
enum { SCORE_LANES = 8, SCORE_CHUNKS = 2 };
typedef __m256 score_vec;
typedef __m256i score_mask;
static inline score_mask score_lanes(int i, int lo, int hi) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(hi - i), lane),
                            _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(lo - i - 1)));
}
#define SCORE_ZERO() _mm256_setzero_ps()
#define SCORE_LOAD(p) _mm256_loadu_ps(p)
#define SCORE_LOAD_MASKED(p, m) _mm256_maskload_ps(p, m)
#define SCORE_SET1(x) _mm256_set1_ps(x)
#define SCORE_MUL(a, b) _mm256_mul_ps(a, b)
#define SCORE_ADD(a, b) _mm256_add_ps(a, b)
#define SCORE_STORE(p, v) _mm256_storeu_ps(p, v)
#define SCORE_STORE_MASKED(p, m, v) _mm256_maskstore_ps(p, m, v)
#endif
enum { SCORE_BLOCK = SCORE_LANES * SCORE_CHUNKS, MIX_CHUNKS = 2, MIX_BLOCK = SCORE_LANES * MIX_CHUNKS };

// A vector's load and store, its lanes m alone where masked (a constant where they are inlined).
static inline __attribute__((always_inline)) score_vec score_get(const float *p, score_mask m, int masked) {
    return masked ? SCORE_LOAD_MASKED(p, m) : SCORE_LOAD(p);
}
static inline __attribute__((always_inline)) void score_put(float *p, score_mask m, score_vec v, int masked) {
    if (masked)
        SCORE_STORE_MASKED(p, m, v);
    else
        SCORE_STORE(p, v);
}

// One pass of a block's sums: channels d0, d0 + step, ... in order from 0 (SCORE_IN_ORDER's sum, or
// with step 2 one chain of SCORE_EVEN_ODD), or the channels in pairs (SCORE_IN_PAIRS); stored, or
// added to what out holds (the odd chain to the even one).
static inline __attribute__((always_inline)) void scores_pass(float *restrict out, size_t os, const float *restrict q,
                                                              size_t qs, int nq, const float *const *k,
                                                              const score_mask *m, int head_dim, int j, int masked,
                                                              int chunks, int d0, int step, int pairs, int add) {
    score_vec a[QUAD][SCORE_CHUNKS];
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < chunks; c++) a[r][c] = SCORE_ZERO();
    int d = d0;
    for (; pairs && d + 2 <= head_dim; d += 2) {
        score_vec k0[SCORE_CHUNKS], k1[SCORE_CHUNKS];
        for (int c = 0; c < chunks; c++) {
            k0[c] = score_get(k[c] + (size_t)d * KEY_PANEL, m[c], masked);
            k1[c] = score_get(k[c] + (size_t)(d + 1) * KEY_PANEL, m[c], masked);
        }
        for (int r = 0; r < nq; r++) {
            const score_vec q0 = SCORE_SET1(q[(size_t)r * qs + d]), q1 = SCORE_SET1(q[(size_t)r * qs + d + 1]);
            for (int c = 0; c < chunks; c++)
                a[r][c] = SCORE_ADD(a[r][c], SCORE_ADD(SCORE_MUL(q0, k0[c]), SCORE_MUL(q1, k1[c])));
        }
    }
    for (; d < head_dim; d += step) {
        score_vec kc[SCORE_CHUNKS];
        for (int c = 0; c < chunks; c++) kc[c] = score_get(k[c] + (size_t)d * KEY_PANEL, m[c], masked);
        for (int r = 0; r < nq; r++) {
            const score_vec qd = SCORE_SET1(q[(size_t)r * qs + d]);
            for (int c = 0; c < chunks; c++) a[r][c] = SCORE_ADD(a[r][c], SCORE_MUL(qd, kc[c]));
        }
    }
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < chunks; c++) {
            float *o = out + (size_t)r * os + j + c * SCORE_LANES;
            score_put(o, m[c], add ? SCORE_ADD(score_get(o, m[c], masked), a[r][c]) : a[r][c], masked);
        }
}

static inline __attribute__((always_inline)) void scores_block(float *restrict out, size_t os, const float *restrict q,
                                                               size_t qs, int nq, const float *restrict kt, int head_dim,
                                                               int j, int j0, int j1, int masked, int chunks,
                                                               ScoreOrder order) {
    score_mask m[SCORE_CHUNKS];
    const float *k[SCORE_CHUNKS]; // each vector's channel 0 (a vector past j1: the first's, never read)
    for (int c = 0; c < SCORE_CHUNKS; c++) {
        const int i = j + c * SCORE_LANES;
        m[c] = score_lanes(i, j0, j1);
        k[c] = kt + key_panel_at(head_dim, 0, i < j1 ? i : j);
    }
    if (order == SCORE_EVEN_ODD) { // the even chain stored, then the odd one added to it
        scores_pass(out, os, q, qs, nq, k, m, head_dim, j, masked, chunks, 0, 2, 0, 0);
        scores_pass(out, os, q, qs, nq, k, m, head_dim, j, masked, chunks, 1, 2, 0, 1);
    } else {
        scores_pass(out, os, q, qs, nq, k, m, head_dim, j, masked, chunks, 0, 1, order == SCORE_IN_PAIRS, 0);
    }
}

// [j0, j1) of one or a quad of rows, in blocks from j0's vector on, each masked where the range does
// not cover it; a block whose range ends within its first vectors takes those alone (a row's last
// few positions past its quad's, and a range's last block, which as a whole block had cost as much
// as 64 positions).
static inline __attribute__((always_inline)) void scores_run(float *restrict out, size_t os, const float *restrict q,
                                                             size_t qs, int nq, const float *restrict kt, int head_dim,
                                                             int j0, int j1, ScoreOrder order) {
    for (int j = j0 - j0 % SCORE_LANES; j < j1; j += SCORE_BLOCK)
        if (j >= j0 && j + SCORE_BLOCK <= j1)
            scores_block(out, os, q, qs, nq, kt, head_dim, j, j0, j1, 0, SCORE_CHUNKS, order);
        else if (j1 - j <= SCORE_LANES)
            scores_block(out, os, q, qs, nq, kt, head_dim, j, j0, j1, 1, 1, order);
        else if (SCORE_CHUNKS > 2 && j1 - j <= 2 * SCORE_LANES)
            scores_block(out, os, q, qs, nq, kt, head_dim, j, j0, j1, 1, 2, order);
        else if (SCORE_CHUNKS > 3 && j1 - j <= 3 * SCORE_LANES)
            scores_block(out, os, q, qs, nq, kt, head_dim, j, j0, j1, 1, 3, order);
        else
            scores_block(out, os, q, qs, nq, kt, head_dim, j, j0, j1, 1, SCORE_CHUNKS, order);
}
#define SCORES_QUAD(out, os, q, qs, kt, head_dim, a, e, order)                                    \
    scores_run(out, os, q, qs, QUAD, kt, head_dim, a, e, order)
#define SCORES_ROW(out, q, kt, head_dim, a, e, order) scores_run(out, 0, q, 0, 1, kt, head_dim, a, e, order)

// out[r][d0, d0 + MIX_BLOCK) (masked at head_dim) += Σ_j p_r[j] · v_j over [j0, j1), in order of j.
static inline __attribute__((always_inline)) void mix_block(float *restrict out, size_t os, const float *restrict p,
                                                            size_t ps, int nq, const float *restrict v, int head_dim,
                                                            int d0, int j0, int j1, int masked) {
    score_vec a[QUAD][MIX_CHUNKS];
    score_mask m[MIX_CHUNKS];
    for (int c = 0; c < MIX_CHUNKS; c++) m[c] = score_lanes(d0 + c * SCORE_LANES, 0, head_dim);
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < MIX_CHUNKS; c++) a[r][c] = score_get(out + (size_t)r * os + d0 + c * SCORE_LANES, m[c], masked);
    for (int j = j0; j < j1; j++) {
        const float *row = v + (size_t)j * head_dim + d0;
        score_vec x[MIX_CHUNKS];
        for (int c = 0; c < MIX_CHUNKS; c++) x[c] = score_get(row + c * SCORE_LANES, m[c], masked);
        for (int r = 0; r < nq; r++) {
            const score_vec pj = SCORE_SET1(p[(size_t)r * ps + j]);
            for (int c = 0; c < MIX_CHUNKS; c++) a[r][c] = SCORE_ADD(a[r][c], SCORE_MUL(pj, x[c]));
        }
    }
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < MIX_CHUNKS; c++) score_put(out + (size_t)r * os + d0 + c * SCORE_LANES, m[c], a[r][c], masked);
}

static inline __attribute__((always_inline)) void mix_run(float *restrict out, size_t os, const float *restrict p,
                                                          size_t ps, int nq, const float *restrict v, int head_dim,
                                                          int j0, int j1) {
    for (int d0 = 0; d0 < head_dim; d0 += MIX_BLOCK)
        if (d0 + MIX_BLOCK <= head_dim)
            mix_block(out, os, p, ps, nq, v, head_dim, d0, j0, j1, 0);
        else
            mix_block(out, os, p, ps, nq, v, head_dim, d0, j0, j1, 1);
}
#define MIX_QUAD(out, os, p, ps, v, head_dim, a, e) mix_run(out, os, p, ps, QUAD, v, head_dim, a, e)
#define MIX_ROW(out, p, v, head_dim, a, e) mix_run(out, 0, p, 0, 1, v, head_dim, a, e)
#else
// The portable build: a quad over [a, e) one position at a time up to a multiple of 16 (whose runs
// of 16 lie in one panel), then 16 positions at a time, then one at a time; a row the same alone.
// Every sum in the order `order` names (ScoreOrder), as the vector builds' passes make it.
static float score_one(const float *restrict q, const float *restrict kt, int head_dim, int j, ScoreOrder order) {
    if (order == SCORE_EVEN_ODD) {
        float even = 0.0f, odd = 0.0f;
        for (int d = 0; d < head_dim; d += 2) even += q[d] * kt[key_panel_at(head_dim, d, j)];
        for (int d = 1; d < head_dim; d += 2) odd += q[d] * kt[key_panel_at(head_dim, d, j)];
        return even + odd;
    }
    float acc = 0.0f;
    int d = 0;
    for (; order == SCORE_IN_PAIRS && d + 2 <= head_dim; d += 2)
        acc += q[d] * kt[key_panel_at(head_dim, d, j)] + q[d + 1] * kt[key_panel_at(head_dim, d + 1, j)];
    for (; d < head_dim; d++) acc += q[d] * kt[key_panel_at(head_dim, d, j)];
    return acc;
}

// acc[l] += the sum's terms for the lanes of channels [d0, ...) of a panel, in `order`: all channels
// from d0 by `step`, or in pairs.
static void score_lanes_portable(float *restrict acc, const float *restrict q, const float *restrict kt, int head_dim,
                                 int i, int d0, int step, int pairs) {
    int d = d0;
    for (; pairs && d + 2 <= head_dim; d += 2) {
        const float q0 = q[d], q1 = q[d + 1];
        const float *k0 = kt + key_panel_at(head_dim, d, i), *k1 = kt + key_panel_at(head_dim, d + 1, i);
#pragma omp simd
        for (int l = 0; l < LANES; l++) acc[l] += q0 * k0[l] + q1 * k1[l];
    }
    for (; d < head_dim; d += step) {
        const float qd = q[d], *k = kt + key_panel_at(head_dim, d, i);
#pragma omp simd
        for (int l = 0; l < LANES; l++) acc[l] += qd * k[l];
    }
}

static void scores_row_portable(float *restrict o, const float *restrict q, const float *restrict kt, int head_dim,
                                int a, int e, ScoreOrder order) {
    int i = a;
    for (; i < e && i % LANES; i++) o[i] = score_one(q, kt, head_dim, i, order);
    for (; i + LANES <= e; i += LANES) {
        float acc[LANES] = {0}, odd[LANES] = {0};
        if (order == SCORE_EVEN_ODD) {
            score_lanes_portable(acc, q, kt, head_dim, i, 0, 2, 0);
            score_lanes_portable(odd, q, kt, head_dim, i, 1, 2, 0);
            for (int l = 0; l < LANES; l++) acc[l] += odd[l];
        } else {
            score_lanes_portable(acc, q, kt, head_dim, i, 0, 1, order == SCORE_IN_PAIRS);
        }
        for (int l = 0; l < LANES; l++) o[i + l] = acc[l];
    }
    for (; i < e; i++) o[i] = score_one(q, kt, head_dim, i, order);
}

static void scores_quad_portable(float *restrict out, size_t os, const float *restrict q, size_t qs,
                                 const float *restrict kt, int head_dim, int a, int e, ScoreOrder order) {
    if (order != SCORE_IN_ORDER) { // the orders of two chains or pairs: row by row
        for (int r = 0; r < QUAD; r++)
            scores_row_portable(out + (size_t)r * os, q + (size_t)r * qs, kt, head_dim, a, e, order);
        return;
    }
    int j = a;
    for (; j < e && j % LANES; j++)
        for (int r = 0; r < QUAD; r++) out[(size_t)r * os + j] = score_one(q + (size_t)r * qs, kt, head_dim, j, order);
    for (; j + LANES <= e; j += LANES) {
        float acc[QUAD][SPAN_WIDTH] = {{0}};
        for (int d = 0; d < head_dim; d++)
            add_scaled4(acc, kt + key_panel_at(head_dim, d, j), q[d], q[qs + d], q[2 * qs + d], q[3 * qs + d], LANES);
        for (int r = 0; r < QUAD; r++)
#pragma omp simd
            for (int l = 0; l < LANES; l++) out[(size_t)r * os + j + l] = acc[r][l];
    }
    for (int r = 0; r < QUAD && j < e; r++)
        scores_row_portable(out + (size_t)r * os, q + (size_t)r * qs, kt, head_dim, j, e, order);
}
#define SCORES_QUAD(out, os, q, qs, kt, head_dim, a, e, order)                                    \
    scores_quad_portable(out, os, q, qs, kt, head_dim, a, e, order)
#define SCORES_ROW(out, q, kt, head_dim, a, e, order) scores_row_portable(out, q, kt, head_dim, a, e, order)

// A quad: tiles of 32 channels in registers (a loop of constant bounds), then the channels left one
// row at a time; a row alone the same.
static void mix_row_portable(float *restrict o, const float *restrict p, const float *restrict v, int head_dim,
                             int d0, int a, int e) {
    for (int j = a; j < e; j++) {
        const float pj = p[j], *row = v + (size_t)j * head_dim;
#pragma omp simd
        for (int d = d0; d < head_dim; d++) o[d] += pj * row[d];
    }
}

static void mix_quad_portable(float *restrict out, size_t os, const float *restrict p, size_t ps,
                              const float *restrict v, int head_dim, int a, int e) {
    enum { W = SPAN_WIDTH };
    int d0 = 0;
    for (; d0 + W <= head_dim; d0 += W) {
        float acc[QUAD][SPAN_WIDTH];
        for (int r = 0; r < QUAD; r++)
            for (int d = 0; d < W; d++) acc[r][d] = out[(size_t)r * os + d0 + d];
        for (int j = a; j < e; j++)
            add_scaled4(acc, v + (size_t)j * head_dim + d0, p[j], p[ps + j], p[2 * ps + j], p[3 * ps + j], W);
        for (int r = 0; r < QUAD; r++)
#pragma omp simd
            for (int d = 0; d < W; d++) out[(size_t)r * os + d0 + d] = acc[r][d];
    }
    for (int r = 0; r < QUAD && d0 < head_dim; r++) mix_row_portable(out + (size_t)r * os, p + (size_t)r * ps, v, head_dim, d0, a, e);
}
#define MIX_QUAD(out, os, p, ps, v, head_dim, a, e) mix_quad_portable(out, os, p, ps, v, head_dim, a, e)
#define MIX_ROW(out, p, v, head_dim, a, e) mix_row_portable(out, p, v, head_dim, 0, a, e)
#endif

// Scores of up to SPAN_TILE rows against transposed keys (forward_kernels.h).
static void scores_transposed_impl(float *restrict out, size_t os, const float *restrict q, size_t qs, int n_q,
                                   const float *restrict kt, int head_dim, int j0, const int *ends, ScoreOrder order) {
    scores_contract(out, os, q, qs, n_q, kt, head_dim, j0, ends);
    const int quads = n_q / QUAD;
    int common[SPAN_TILE / QUAD];
    const int longest = quad_ranges(ends, quads, j0, common);
    for (int j = j0 - j0 % KEY_PANEL; j < longest; j += KEY_PANEL) // panel by panel, every quad's part
        for (int k = 0; k < quads; k++) {
            const int a = j > j0 ? j : j0, e = j + KEY_PANEL < common[k] ? j + KEY_PANEL : common[k];
            if (a < e)
                SCORES_QUAD(out + (size_t)QUAD * k * os, os, q + (size_t)QUAD * k * qs, qs, kt, head_dim, a, e, order);
        }
    for (int r = 0; r < n_q; r++) { // each row past its quad's common range, and the rows of no quad
        const int a = r < QUAD * quads && common[r / QUAD] > j0 ? common[r / QUAD] : j0;
        if (a < ends[r]) SCORES_ROW(out + (size_t)r * os, q + (size_t)r * qs, kt, head_dim, a, ends[r], order);
    }
}

// The weighted sums of value rows for up to SPAN_TILE rows of weights: each value row's load serves
// a quad, and each channel's sum runs in order of j.
static void mix_rows_impl(float *restrict out, size_t os, const float *restrict p, size_t ps, int n_p,
                          const float *restrict v, int head_dim, int j0, const int *ends) {
    mix_contract(out, os, p, ps, n_p, v, head_dim, j0, ends);
    const int quads = n_p / QUAD;
    int common[SPAN_TILE / QUAD];
    quad_ranges(ends, quads, j0, common);
    for (int k = 0; k < quads; k++)
        if (j0 < common[k]) MIX_QUAD(out + (size_t)QUAD * k * os, os, p + (size_t)QUAD * k * ps, ps, v, head_dim, j0, common[k]);
    for (int r = 0; r < n_p; r++) {
        const int a = r < QUAD * quads && common[r / QUAD] > j0 ? common[r / QUAD] : j0;
        if (a < ends[r]) MIX_ROW(out + (size_t)r * os, p + (size_t)r * ps, v, head_dim, a, ends[r]);
    }
}

// mix_rows with even and odd tokens summed apart (two chains, as the float codec's mix keeps them):
// a quad's SPLIT_WIDTH channels hold both sums in registers, each row load serving the four; the
// rest one row at a time. Every channel's two sums run in order of j.
#ifdef KERNELS_AVX512
enum { SPLIT_WIDTH = 2 * LANES };
#else
enum { SPLIT_WIDTH = LANES / 2 };
#endif
static inline __attribute__((always_inline)) void split_add4(float (*acc)[SPLIT_WIDTH], const float *restrict x,
                                                             const float *p, size_t ps, int j) {
    const float s0 = p[j], s1 = p[ps + j], s2 = p[2 * ps + j], s3 = p[3 * ps + j];
#pragma omp simd
    for (int l = 0; l < SPLIT_WIDTH; l++) {
        acc[0][l] += s0 * x[l], acc[1][l] += s1 * x[l];
        acc[2][l] += s2 * x[l], acc[3][l] += s3 * x[l];
    }
}

static void split_row(float *restrict even, float *restrict odd, const float *restrict p, const float *restrict v,
                      int head_dim, int d0, int a, int e) {
    for (int j = a; j < e; j++) {
        float *acc = j % 2 ? odd : even;
        const float pj = p[j], *row = v + (size_t)j * head_dim;
#pragma omp simd
        for (int d = d0; d < head_dim; d++) acc[d] += pj * row[d];
    }
}

// A quad's two chains of channels [d0, d0 + SPLIT_WIDTH) into registers (e, o), and back.
static inline __attribute__((always_inline)) void chains_load(float (*e)[SPLIT_WIDTH], float (*o)[SPLIT_WIDTH],
                                                              const float *even, const float *odd, size_t os, int d0) {
    for (int r = 0; r < QUAD; r++)
        for (int d = 0; d < SPLIT_WIDTH; d++)
            e[r][d] = even[(size_t)r * os + d0 + d], o[r][d] = odd[(size_t)r * os + d0 + d];
}

static inline __attribute__((always_inline)) void chains_store(float (*e)[SPLIT_WIDTH], float (*o)[SPLIT_WIDTH],
                                                               float *even, float *odd, size_t os, int d0) {
    for (int r = 0; r < QUAD; r++)
        for (int d = 0; d < SPLIT_WIDTH; d++)
            even[(size_t)r * os + d0 + d] = e[r][d], odd[(size_t)r * os + d0 + d] = o[r][d];
}

static void split_quad(float *restrict even, float *restrict odd, size_t os, const float *restrict p, size_t ps,
                       const float *restrict v, int head_dim, int a, int b) {
    enum { W = SPLIT_WIDTH };
    int d0 = 0;
    for (; d0 + W <= head_dim; d0 += W) {
        float e[QUAD][SPLIT_WIDTH], o[QUAD][SPLIT_WIDTH];
        chains_load(e, o, even, odd, os, d0);
        int j = a;
        if (j < b && j % 2) split_add4(o, v + (size_t)j * head_dim + d0, p, ps, j), j++;
        for (; j + 2 <= b; j += 2) {
            split_add4(e, v + (size_t)j * head_dim + d0, p, ps, j);
            split_add4(o, v + (size_t)(j + 1) * head_dim + d0, p, ps, j + 1);
        }
        if (j < b) split_add4(e, v + (size_t)j * head_dim + d0, p, ps, j);
        chains_store(e, o, even, odd, os, d0);
    }
    for (int r = 0; r < QUAD && d0 < head_dim; r++)
        split_row(even + (size_t)r * os, odd + (size_t)r * os, p + (size_t)r * ps, v, head_dim, d0, a, b);
}

// Rows from their own starts: each quad's rows alone up to the latest of their starts, then the quad
// over its common range, then each row alone to its end.
static void mix_rows_split_impl(float *restrict even, float *restrict odd, size_t os, const float *restrict p,
                                size_t ps, int n_p, const float *restrict v, int head_dim, int j0, const int *starts,
                                const int *ends) {
    int from[SPAN_TILE], first = INT_MAX;
    for (int r = 0; r < n_p; r++) {
        from[r] = starts ? starts[r] : j0;
        first = from[r] < first ? from[r] : first;
    }
    mix_contract(even, os, p, ps, n_p, v, head_dim, first, ends);
    mix_contract(odd, os, p, ps, n_p, v, head_dim, first, ends);
    const int quads = n_p / QUAD;
    int common[SPAN_TILE / QUAD];
    quad_ranges(ends, quads, first, common);
    for (int k = 0; k < quads; k++) {
        const size_t at = (size_t)QUAD * k;
        int lo = from[at];
        for (int r = 1; r < QUAD; r++) lo = from[at + r] > lo ? from[at + r] : lo;
        if (lo >= common[k]) continue; // no range in common: each row alone below
        for (int r = 0; r < QUAD; r++) {
            const size_t i = at + (size_t)r;
            if (from[i] < lo) split_row(even + i * os, odd + i * os, p + i * ps, v, head_dim, 0, from[i], lo);
            from[i] = common[k];
        }
        split_quad(even + at * os, odd + at * os, os, p + at * ps, ps, v, head_dim, lo, common[k]);
    }
    for (int r = 0; r < n_p; r++)
        if (from[r] < ends[r])
            split_row(even + (size_t)r * os, odd + (size_t)r * os, p + (size_t)r * ps, v, head_dim, 0, from[r], ends[r]);
}

// ---- Pairs of tokens (mix_rows_pairs) ----
// A row alone, channels [d0, head_dim), pairs u from u0 while 2u < e: the pair's two products added
// (a pair cut by e adds its first product + 0), then to its chain.
static void pairs_row(float *restrict even, float *restrict odd, const float *restrict p, const float *restrict v,
                      int head_dim, int d0, int u0, int e) {
    for (int u = u0; 2 * u < e; u++) {
        float *acc = u % 2 ? odd : even;
        const int j = 2 * u;
        const float p0 = p[j], *x0 = v + (size_t)j * head_dim;
        if (j + 1 < e) {
            const float p1 = p[j + 1], *x1 = x0 + head_dim;
#pragma omp simd
            for (int d = d0; d < head_dim; d++) acc[d] += p0 * x0[d] + p1 * x1[d];
        } else {
#pragma omp simd
            for (int d = d0; d < head_dim; d++) acc[d] += p0 * x0[d] + 0.0f;
        }
    }
}

static inline __attribute__((always_inline)) void pair_add4(float (*acc)[SPLIT_WIDTH], const float *restrict x0,
                                                            const float *restrict x1, const float *p, size_t ps, int j) {
    const float a0 = p[j], a1 = p[ps + j], a2 = p[2 * ps + j], a3 = p[3 * ps + j];
    const float b0 = p[j + 1], b1 = p[ps + j + 1], b2 = p[2 * ps + j + 1], b3 = p[3 * ps + j + 1];
#pragma omp simd
    for (int l = 0; l < SPLIT_WIDTH; l++) {
        acc[0][l] += a0 * x0[l] + b0 * x1[l], acc[1][l] += a1 * x0[l] + b1 * x1[l];
        acc[2][l] += a2 * x0[l] + b2 * x1[l], acc[3][l] += a3 * x0[l] + b3 * x1[l];
    }
}

// A quad's whole pairs [0, u1): SPLIT_WIDTH channels of both chains in registers, each pair's rows
// serving the four; the channels left one row at a time.
static void pairs_quad(float *restrict even, float *restrict odd, size_t os, const float *restrict p, size_t ps,
                       const float *restrict v, int head_dim, int u1) {
    enum { W = SPLIT_WIDTH };
    int d0 = 0;
    for (; d0 + W <= head_dim; d0 += W) {
        float e[QUAD][SPLIT_WIDTH], o[QUAD][SPLIT_WIDTH];
        chains_load(e, o, even, odd, os, d0);
        int u = 0;
        for (; u + 2 <= u1; u += 2) {
            const float *x = v + (size_t)(2 * u) * head_dim + d0;
            pair_add4(e, x, x + head_dim, p, ps, 2 * u);
            pair_add4(o, x + 2 * (size_t)head_dim, x + 3 * (size_t)head_dim, p, ps, 2 * u + 2);
        }
        if (u < u1) pair_add4(e, v + (size_t)(2 * u) * head_dim + d0, v + (size_t)(2 * u + 1) * head_dim + d0, p, ps, 2 * u);
        chains_store(e, o, even, odd, os, d0);
    }
    for (int r = 0; r < QUAD && d0 < head_dim; r++)
        pairs_row(even + (size_t)r * os, odd + (size_t)r * os, p + (size_t)r * ps, v, head_dim, d0, 0, 2 * u1);
}

static void mix_rows_pairs_impl(float *restrict even, float *restrict odd, size_t os, const float *restrict p,
                                size_t ps, int n_p, const float *restrict v, int head_dim, const int *ends) {
    mix_contract(even, os, p, ps, n_p, v, head_dim, 0, ends);
    mix_contract(odd, os, p, ps, n_p, v, head_dim, 0, ends);
    const int quads = n_p / QUAD;
    int common[SPAN_TILE / QUAD];
    quad_ranges(ends, quads, 0, common);
    for (int k = 0; k < quads; k++) {
        const size_t at = (size_t)QUAD * k;
        if (common[k] >= 2) pairs_quad(even + at * os, odd + at * os, os, p + at * ps, ps, v, head_dim, common[k] / 2);
    }
    for (int r = 0; r < n_p; r++) { // the pairs past the quad's whole ones (a cut one among them)
        const int u0 = r < QUAD * quads ? common[r / QUAD] / 2 : 0;
        pairs_row(even + (size_t)r * os, odd + (size_t)r * os, p + (size_t)r * ps, v, head_dim, 0, u0, ends[r]);
    }
}

static void factor_rows_impl(float *restrict x, size_t xs, float *restrict y, size_t ys, int n_x, const int *ends,
                             const float *restrict f, const float *restrict g, const float *restrict c, FactorForm form) {
    for (int r = 0; r < n_x; r++) {
        float *restrict xr = x + (size_t)r * xs;
        const int n = ends[r];
        REGION_CHECK("factor_rows: x", xr, n);
        if (f) REGION_CHECK("factor_rows: f", f, n);
        if (form == FACTOR_TIMES) {
#pragma omp simd
            for (int j = 0; j < n; j++) xr[j] = f[j] * xr[j];
        } else if (form == FACTOR_PLUS_ZERO) {
#pragma omp simd
            for (int j = 0; j < n; j++) xr[j] = 0.0f + f[j] * xr[j];
        } else if (form == FACTOR_OFFSET) {
            const float cr = c[r];
#pragma omp simd
            for (int j = 0; j < n; j++) xr[j] = f[j] * xr[j] + g[j] * cr;
        } else if (form == FACTOR_SECOND) {
            const float *restrict yr = y + (size_t)r * ys;
            REGION_CHECK("factor_rows: y", yr, n);
#pragma omp simd
            for (int j = 0; j < n; j++) xr[j] = f[j] * (xr[j] + g[j] * yr[j]);
        } else {
            float *restrict yr = y + (size_t)r * ys;
            REGION_CHECK("factor_rows: y", yr, 2 * n);
            if (f) {
#pragma omp simd
                for (int j = 0; j < n; j++) yr[2 * j] = xr[j] * f[j], yr[2 * j + 1] = xr[j];
            } else {
#pragma omp simd
                for (int j = 0; j < n; j++) yr[2 * j] = xr[j], yr[2 * j + 1] = xr[j];
            }
        }
    }
}

// Every set's table, in ForwardKernels' order.
#define FORWARD_KERNELS(name)                                                                                \
    {name, matvec_rows_impl, matmul_rows_impl, scaled_softmax_impl, exp_and_sum, exp_negated_impl, exp_shifted_impl, \
     scores_transposed_impl, mix_rows_impl, mix_rows_split_impl, mix_rows_pairs_impl, factor_rows_impl}
#if defined(KERNELS_AVX512)
const ForwardKernels forward_kernels_avx512 = FORWARD_KERNELS("avx512");
#elif defined(KERNELS_AVX2)
const ForwardKernels forward_kernels_avx2 = FORWARD_KERNELS("avx2");
#else
const ForwardKernels forward_kernels_portable = FORWARD_KERNELS("portable");
#endif
