// The arithmetic of the 2025 formats (docs/results.md), compiled once and shared by their families
// (codec_mx.c, codec_nvfp4.c, codec_turboquant.c, codec_qjl.c) and their tests:
//   - OCP Microscaling (MX v1.0) elements and E8M0 block scales;
//   - NVFP4 blocks of 16 (E2M1 elements, E4M3 block scale, an fp32 second-level scale);
//   - TurboQuant's Lloyd-Max codebook for one coordinate of a randomly rotated unit vector;
//   - seeded Gaussian sketches and packed sign bits (QJL, and TurboQuant's prod mode).
// Nothing here knows about streams: a family decides what is stored per head per token.
#ifndef MICRO_CODECS_FORMATS_H
#define MICRO_CODECS_FORMATS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "max_width.h"
#include "quant.h"

// ---- MX elements ----------------------------------------------------------------------------
typedef enum { MX_E2M1, MX_E2M3, MX_E3M2, MX_E4M3, MX_E5M2, MX_INT8, MX_N_ELEMS } MxElem;

typedef struct {
    const char *name; // as spelled in a spec: "e2m1", ...
    int bits;         // stored bits per element
    int emax;         // exponent of the largest normal value (OCP's emax_elem)
    float max;        // largest finite magnitude
} MxElemInfo;

const MxElemInfo *mx_elem_info(MxElem e);
// -1 when `name` is no element format.
int mx_elem_from_name(const char *name);
// x (already divided by the block scale) rounded to nearest, ties to even, saturated to ±max (±inf
// too); NaN becomes 0 (the block's scale says NaN instead). The code is sign | magnitude in the
// element's `bits` (two's complement for INT8).
uint8_t mx_elem_encode(MxElem e, float x);
float mx_elem_decode(MxElem e, uint8_t code);
// mx_elem_encode(MX_E2M1, x) without branches, so that a block's loop vectorises (test_codec_formats
// checks the two agree): a magnitude's code counts the midpoints between E2M1's magnitudes 0, 0.5,
// 1, 1.5, 2, 3, 4, 6 it lies beyond, a tie going to the even code (>= where the code above is
// even), so from 5 up (inf too) the largest; NaN fails every comparison and drops its sign: 0.
static inline uint8_t mx_e2m1_encode(float x) {
    const float a = fabsf(x);
    const int mag = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
    const uint32_t sign = x == x ? quant_to_bits(x) >> 28 & 8u : 0u;
    return (uint8_t)(sign | (uint32_t)mag);
}
// mx_elem_decode of every code as a 256-entry table (codes beyond the element's bits repeat nothing
// meaningful and are 0), built once per process: the read path's decode is then one load, where
// mx_elem_decode's ldexpf on every number read made mx and nvfp4 attention far slower than the int
// codecs'. Same floats.
const float *mx_elem_table(MxElem e);
// The shared scale's exponent X = floor(log2 amax) − emax, clamped to E8M0's [−127, 127]; −127
// for amax 0. The stored byte is X + 127; 0xFF (NaN) when amax is not finite.
uint8_t mx_scale_byte(MxElem e, float amax);
float mx_scale_decode(uint8_t byte);
// One block of n numbers (n <= 32): its scale byte and n element codes.
void mx_block_encode(MxElem e, const float *x, int n, uint8_t *scale, uint8_t *codes);

// ---- NVFP4 ----------------------------------------------------------------------------------
// E2M1 is MX's element; the block is 16 numbers. A block is coded against a second-level scale s2:
// its E4M3 block scale sb = E4M3((amax_b / target) / s2) and elements E2M1(x / (s2·sb)), target 6.
// four_over_six: the block also tries target 4 and keeps whichever reads back with the smaller
// squared error (ties: 6). Returns the E4M3 scale code; codes[16] get the elements.
uint8_t nvfp4_block_encode(const float *x, int n, float s2, int four_over_six, uint8_t *codes);
// The second-level scale of a vector with max magnitude amax: amax / (448·6), or amax / (256·6) with
// 4over6 (our choice: headroom for the max/4 target, whose block scales are 1.5 times larger, under
// E4M3's 448). 0 for amax 0.
float nvfp4_second_scale(float amax, int four_over_six);

// ---- TurboQuant's codebook ------------------------------------------------------------------
// The 2^bits centroids (sorted) of the Lloyd-Max quantiser for the density of one coordinate of a
// uniformly random unit vector in d dimensions, f(x) ∝ (1 − x²)^((d−3)/2) on [−1, 1], computed by
// numerical integration and Lloyd iterations. d >= 3, bits 1..8. tq_codebook is computed once per
// (d, bits) and shared (thread-safe; NULL when out of memory), the centroids followed by their
// 2^bits − 1 midpoints 0.5·(c_m + c_m+1) in fp32, the cells' boundaries (tq_encode); tq_lloyd_max
// computes afresh.
const float *tq_codebook(int d, int bits);
void tq_lloyd_max(int d, int bits, double *centroids);

// ---- Gaussian sketches and sign bits --------------------------------------------------------
// A seeded m × d matrix of standard normals (row-major) followed by its d × m transpose, shared by
// every stream that asks for the same (seed, m, d) and kept until exit; NULL when out of memory.
const float *tq_gaussian(unsigned long seed, int m, int d);
// out[i] = Σ_k c[k] · rows[k·stride + i] for i < w, each sum in order of k: 32 outputs at a time in
// an array of constant size, which stays in registers at any width (with the loop's run-time bounds
// the sums went through memory at every k, a store and a load in each one's chain).
static inline void tq_sum_rows(const float *rows, size_t stride, const float *c, int nk, int w, float *out) {
    int i0 = 0;
    for (; i0 + 32 <= w; i0 += 32) {
        float acc[32] = {0};
        for (int k = 0; k < nk; k++) {
            const float ck = c[k], *restrict row = rows + (size_t)k * stride + i0;
            for (int i = 0; i < 32; i++) acc[i] += row[i] * ck;
        }
        memcpy(out + i0, acc, sizeof acc);
    }
    for (int i = i0; i < w; i++) out[i] = 0.0f;
    for (int k = 0; k < nk && i0 < w; k++)
        for (int i = i0; i < w; i++) out[i] += rows[(size_t)k * stride + i] * c[k];
}
// y = S x (m rows) and x = Sᵀ y, each number summed in order from 0. tq_project takes S followed by
// its transpose (tq_gaussian's and transform_rotation's layout), whose rows it adds up so that the
// loop over outputs vectorises (tq_project_back adds up S's rows); both inline, so that each kernel
// set's codecs run them at their width.
static inline void tq_project(const float *s, int m, int d, const float *x, float *y) {
    tq_sum_rows(s + (size_t)m * d, (size_t)m, x, d, m, y);
}
static inline void tq_project_back(const float *s, int m, int d, const float *y, float *x) {
    tq_sum_rows(s, (size_t)d, y, m, d, x);
}
// bits[i/8] bit i%8 set when y[i] >= 0; (m + 7) / 8 bytes, unused high bits zero. Each bit set by
// arithmetic: a branch on a random sign mispredicts half the time. (i unsigned: with int, gcc's
// -Warray-bounds in the sanitizer build saw a negative i once this was inlined into tq_encode.)
static inline void tq_signs(const float *y, int m, uint8_t *bits) {
    for (int i = 0; i < (m + 7) / 8; i++) bits[i] = 0;
    for (unsigned i = 0; i < (unsigned)m; i++) bits[i / 8] |= (uint8_t)((unsigned)(y[i] >= 0.0f) << (i % 8));
}
// +1 where bit i is set, else −1: as a factor rather than a branch, since sign bits are random (a
// branch on them mispredicts half the time); multiplying by ±1 is exact.
static inline float tq_sign(const uint8_t *bits, int i) { return (float)(2 * ((bits[i >> 3] >> (i & 7)) & 1) - 1); }
// Σ_i ±v[i], + where bit i is set.
float tq_sign_dot(const uint8_t *bits, const float *v, int m);

// ---- One vector of TurboQuant and of QJL --------------------------------------------------
// Norms, residual norms and scales sit in rows as fp16 (saturating: they must stay finite), at any
// byte offset.
static inline float fmt_fp16_load(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return quant_fp16_to_fp32(h);
}

static inline void fmt_fp16_store(uint8_t *p, float x) {
    const uint16_t h = quant_fp32_to_fp16_sat(x);
    memcpy(p, &h, 2);
}

// The families' per-vector coding with the random matrices passed in, so that tests can average
// over matrices of their own.
//
// TurboQuant, one head's vector of d numbers as a row of tq_row_bytes():
//   [fp16 ‖x‖][2^cbits-level indices of y = R·x/‖x‖, packed][prod: fp16 γ = ‖r‖][prod: d sign bits]
// with r = y − ŷ the residual in the rotated space and the signs those of S·r.
typedef struct {
    int d, cbits, prod;
    int nc;              // mse: store ‖x‖/‖ŷ‖ for ‖x‖, so that x̂ keeps x's norm (vLLM's "nc")
    const float *rot;    // R, d × d orthogonal, row-major
    const float *sketch; // S, d × d standard normals (prod)
    const float *levels; // 2^cbits centroids, sorted, then their midpoints (tq_codebook)
} TqCoder;

size_t tq_row_bytes(const TqCoder *c);
// Where a row's parts sit.
static inline size_t tq_codes_at(void) { return 2; }
static inline size_t tq_gamma_at(const TqCoder *c) { return 2 + (size_t)(c->d * c->cbits + 7) / 8; }
static inline size_t tq_signs_at(const TqCoder *c) { return tq_gamma_at(c) + 2; }

// ‖x‖, summed in double in order.
static inline float tq_norm(const float *x, int n) {
    double sq = 0.0;
    for (int i = 0; i < n; i++) sq += (double)x[i] * x[i];
    return (float)sqrt(sq);
}

// Vectors coded side by side (tq_encode_heads): their norms' and projections' sums, one chain each,
// overlap, where one vector's waited on each add.
enum { TQ_SIDE = 8 };

// ‖x_v‖ of nv <= TQ_SIDE vectors (n numbers each, `stride` apart), each summed in double in order.
static inline void tq_norms(const float *x, size_t stride, int nv, int n, float *norm) {
    double sq[TQ_SIDE] = {0};
    for (int i = 0; i < n; i++)
        for (int v = 0; v < nv; v++) sq[v] += (double)x[(size_t)v * stride + i] * x[(size_t)v * stride + i];
    for (int v = 0; v < nv; v++) norm[v] = (float)sqrt(sq[v]);
}

// tq_sum_rows for nv vectors c_v (`cs` apart) into out_v (`os` apart), nv a constant where it is
// inlined (tq_sum_rows_side's switch), so that the 32-output sums of all nv stay in registers.
static QUANT_ALWAYS_INLINE void tq_sum_rows_nv(const float *rows, size_t stride, const float *c, size_t cs, const int nv,
                                               int nk, int w, float *out, size_t os) {
    int i0 = 0;
    for (; i0 + 32 <= w; i0 += 32) {
        float acc[TQ_SIDE][32] = {{0}};
        for (int k = 0; k < nk; k++) {
            const float *restrict row = rows + (size_t)k * stride + i0;
            for (int v = 0; v < nv; v++) {
                const float ck = c[(size_t)v * cs + k];
                for (int i = 0; i < 32; i++) acc[v][i] += row[i] * ck;
            }
        }
        for (int v = 0; v < nv; v++) memcpy(out + (size_t)v * os + i0, acc[v], sizeof acc[v]);
    }
    for (int v = 0; v < nv; v++) {
        float *o = out + (size_t)v * os;
        for (int i = i0; i < w; i++) o[i] = 0.0f;
        for (int k = 0; k < nk && i0 < w; k++)
            for (int i = i0; i < w; i++) o[i] += rows[(size_t)k * stride + i] * c[(size_t)v * cs + k];
    }
}

static inline void tq_sum_rows_side(const float *rows, size_t stride, const float *c, size_t cs, int nv, int nk, int w,
                                    float *out, size_t os) {
    switch (nv) {
    case 1: tq_sum_rows_nv(rows, stride, c, cs, 1, nk, w, out, os); break;
    case 2: tq_sum_rows_nv(rows, stride, c, cs, 2, nk, w, out, os); break;
    case 3: tq_sum_rows_nv(rows, stride, c, cs, 3, nk, w, out, os); break;
    case 4: tq_sum_rows_nv(rows, stride, c, cs, 4, nk, w, out, os); break;
    case 5: tq_sum_rows_nv(rows, stride, c, cs, 5, nk, w, out, os); break;
    case 6: tq_sum_rows_nv(rows, stride, c, cs, 6, nk, w, out, os); break;
    case 7: tq_sum_rows_nv(rows, stride, c, cs, 7, nk, w, out, os); break;
    default: tq_sum_rows_nv(rows, stride, c, cs, TQ_SIDE, nk, w, out, os); break;
    }
}

// nv <= TQ_SIDE vectors' rows (x_v `d` apart): tq_encode's steps, each a stage for all of them.
static inline void tq_encode_side(const TqCoder *c, const float *x, int nv, uint8_t *const *rows) {
    const int d = c->d, n = 1 << c->cbits;
    const size_t D = MICRO_MAX_WIDTH;
    float u[TQ_SIDE * MICRO_MAX_WIDTH], y[TQ_SIDE * MICRO_MAX_WIDTH], sr[TQ_SIDE * MICRO_MAX_WIDTH], norm[TQ_SIDE], len[TQ_SIDE];
    uint8_t codes[TQ_SIDE * MICRO_MAX_WIDTH];
    tq_norms(x, (size_t)d, nv, d, norm);
    u[0] = 0.0f; // written below (nv, d >= 1), which gcc 12's check of a pointer to const cannot see
    for (int v = 0; v < nv; v++) {
        fmt_fp16_store(rows[v], norm[v]);
        for (int i = 0; i < d; i++) u[v * D + i] = norm[v] > 0.0f ? x[(size_t)v * d + i] / norm[v] : 0.0f;
    }
    tq_sum_rows_side(c->rot + (size_t)d * d, (size_t)d, u, D, nv, d, d, y, D); // y = R·u (tq_project)
    // The nearest centroid: the cells' boundaries are the midpoints, and y[i]'s cell the first whose
    // upper midpoint y[i] does not exceed, which is the count of midpoints it exceeds (they rise with
    // the levels). Up to 16 levels every midpoint is counted, a vector of numbers a step; beyond,
    // the count found by halving (256 levels at 8 bits: is it at least 128, then 64 more, ...), each
    // step a select rather than a branch, which would be mispredicted half the time.
    const float *mids = c->levels + n; // tq_codebook's
    for (int v = 0; v < nv; v++) {
        const float *yv = y + v * D;
        uint8_t *cv = codes + v * D;
        if (n <= 16) {
            for (int i = 0; i < d; i++) cv[i] = 0;
            for (int m = 0; m + 1 < n; m++)
                for (int i = 0; i < d; i++) cv[i] = (uint8_t)(cv[i] + (yv[i] > mids[m]));
        } else
            for (int i = 0; i < d; i++) {
                int count = 0;
                for (int half = n / 2; half >= 1; half /= 2) count += yv[i] > mids[count + half - 1] ? half : 0;
                cv[i] = (uint8_t)count;
            }
        quant_pack(rows[v] + tq_codes_at(), cv, (size_t)d, c->cbits);
    }
    if (c->nc) { // the centroid vector renormalised: fold 1/‖ŷ‖ into the stored norm
        for (int v = 0; v < nv; v++)
            for (int i = 0; i < d; i++) u[v * D + i] = c->levels[codes[v * D + i]];
        tq_norms(u, D, nv, d, len);
        for (int v = 0; v < nv; v++)
            if (norm[v] > 0.0f && len[v] > 0.0f) fmt_fp16_store(rows[v], norm[v] / len[v]);
    }
    if (!c->prod) return;
    for (int v = 0; v < nv; v++)
        for (int i = 0; i < d; i++) y[v * D + i] -= c->levels[codes[v * D + i]];
    tq_norms(y, D, nv, d, len);
    for (int v = 0; v < nv; v++) fmt_fp16_store(rows[v] + tq_gamma_at(c), len[v]);
    tq_sum_rows_side(c->sketch + (size_t)d * d, (size_t)d, y, D, nv, d, d, sr, D); // sr = S·r (tq_project)
    for (int v = 0; v < nv; v++) tq_signs(sr + v * D, d, rows[v] + tq_signs_at(c));
}

// The rows of n vectors (x_v `d` apart, one row each): TQ_SIDE at a time (tq_encode_side). Inline,
// so that codec_turboquant's builds compile it at their kernel set's width (every step a fixed-order
// sum or a comparison: the same bits at any width, and for each vector the same as alone).
static inline void tq_encode_heads(const TqCoder *c, const float *x, int n, uint8_t *const *rows) {
    for (int v0 = 0; v0 < n; v0 += TQ_SIDE)
        tq_encode_side(c, x + (size_t)v0 * c->d, n - v0 < TQ_SIDE ? n - v0 : TQ_SIDE, rows + v0);
}

// One vector's row.
static inline void tq_encode(const TqCoder *c, const float *x, uint8_t *row) { tq_encode_heads(c, x, 1, &row); }

// The read-back x̂ = ‖x‖·Rᵀ(ŷ + √(π/2)/d · γ · Sᵀ·sign(S·r)) (the QJL term: prod).
void tq_decode(const TqCoder *c, const uint8_t *row, float *x);
// QJL, one vector of d numbers as a row of 2 + (m + 7)/8 bytes: [fp16 ‖x‖][m sign bits of S·x].
void qjl_encode(const float *s, int m, int d, const float *x, uint8_t *row);
// The unbiased estimate of q·x from sq = S·q: √(π/2)/m · ‖x‖ · ⟨S·q, sign(S·x)⟩.
float qjl_estimate(const uint8_t *row, const float *sq, int m);
// The read-back √(π/2)/m · ‖x‖ · Sᵀ·sign(S·x) (an unbiased estimate of x).
void qjl_decode(const float *s, int m, int d, const uint8_t *row, float *x);

#endif
