// The decode step's own hot loops (matrix-vector rows, softmax), compiled once per kernel set like
// the codec kernels: a portable build (plain x86-64 under the default -Dnative=false, or the
// target's baseline) and, on x86-64, AVX2 and AVX-512 builds; forward_kernels() picks one at run
// time. Every sum runs in a fixed order written out in the source (16 lane partials folded in a
// fixed order), never one the compiler picks for its vector width, so every build gives the same
// bits on every machine (tests/test_forward_kernels.c).
#ifndef MICRO_FORWARD_KERNELS_H
#define MICRO_FORWARD_KERNELS_H

#include <stddef.h>

#include "cpu.h"

// Rows one call of the fast evaluator's attention kernels takes (a task's tile of consecutive
// positions); the kernels take them four at a time (forward_kernels.c).
#define SPAN_TILE 16

// The fast evaluator's keys are held transposed, in panels of KEY_PANEL positions: a panel is its
// head_dim rows of KEY_PANEL floats (channel d of its positions) one after another. A run of positions
// is then read as one stream, where rows a context apart had made one stream per channel, more than
// the hardware prefetchers followed (docs/history/speed.md).
#define KEY_PANEL 64
// Where channel d of position j lies.
static inline size_t key_panel_at(int head_dim, int d, int j) {
    return ((size_t)(j / KEY_PANEL) * (size_t)head_dim + (size_t)d) * KEY_PANEL + (size_t)(j % KEY_PANEL);
}
// The floats that hold `positions` positions (whole panels).
static inline size_t key_panel_floats(int head_dim, int positions) {
    return (size_t)((positions + KEY_PANEL - 1) / KEY_PANEL) * (size_t)head_dim * KEY_PANEL;
}

// The order of a score's sum over channels (scores_transposed): in order of d, from 0; in pairs,
// (q_0·k_0 + q_1·k_1) + (q_2·k_2 + q_3·k_3) + ... from 0 (a lookup of two channels at a time, KIVI's
// 2-bit keys); or the even and the odd channels apart, each in order from 0, then added (two chains,
// KIVI's fp16 residual keys).
typedef enum { SCORE_IN_ORDER, SCORE_IN_PAIRS, SCORE_EVEN_ODD } ScoreOrder;

// How a tile's rows of sums take each token's factor (factor_rows): x = f_j·x; 0 + f_j·x (a −0 made
// +0, as a kernel that adds its sum to 0 does); f_j·x + g_j·c_r (an offset times a number of the
// row's); f_j·(x + g_j·y) (a second sum y); or, for a mirror with a correction row a token, into y
// the pairs (x_j·f_j, x_j) (f NULL: (x_j, x_j)), x left as it was.
typedef enum { FACTOR_TIMES, FACTOR_PLUS_ZERO, FACTOR_OFFSET, FACTOR_SECOND, FACTOR_PAIRS } FactorForm;

typedef struct {
    const char *name; // "portable", "avx2" or "avx512"
    // out[r] = W[r,:] · x for rows [r0, r1) of the row-major W (n columns).
    void (*matvec_rows)(float *restrict out, const float *restrict W, const float *restrict x, int n, int r0,
                        int r1);
    // out[r·os + o] = W[o,:] · X[r·xs, 0..n) for rows o in [o0, o1) of W and rows r < n_rows of X:
    // each output the same bits as matvec_rows gives for that row alone.
    void (*matmul_rows)(float *restrict out, size_t os, const float *restrict W, const float *restrict X, size_t xs,
                        int n, int n_rows, int o0, int o1);
    // x = softmax(scale · x), in place, n >= 1. Returns the first position of the largest weight
    // (n - 1 when the weights are NaN), which eval's top-1 agreement records.
    int (*scaled_softmax)(float *x, int n, float scale);
    // Its first pass: x[i] = exp_neg(scale·(x[i] − max)) (fastmath.h), returning their sum in the
    // order the source writes out (tested alone over a sweep of float bit patterns).
    float (*exp_sum)(float *x, int n, float max, float scale);
    // out[i] = e^(−x[i]), each glibc's expf(−x[i]) to the bit (libm_expf.h), for SwiGLU.
    void (*exp_negated)(float *restrict out, const float *restrict x, int n);
    // out[i] = exp_fixed((double)x[i] − shift) (exp_fixed.h), for the loss's log-softmax.
    void (*exp_shifted)(double *restrict out, const float *restrict x, float shift, int n);
    // The fast evaluator's attention (span_mirror.h), over keys and values decoded to floats, for
    // n_q <= SPAN_TILE rows at once, row r over positions [j0, ends[r]): out[r·os + j] = Σ_d q[r·qs + d]
    // · kt[key_panel_at(head_dim, d, j)], each sum in `order` over d (keys held transposed, in panels) ...
    void (*scores_transposed)(float *restrict out, size_t os, const float *restrict q, size_t qs, int n_q,
                              const float *restrict kt, int head_dim, int j0, const int *ends, ScoreOrder order);
    // ... and out[r·os + d] += p[r·ps + j] · v[j·head_dim + d] for j = j0, j0 + 1, ..., ends[r] − 1 in turn.
    void (*mix_rows)(float *restrict out, size_t os, const float *restrict p, size_t ps, int n_p,
                     const float *restrict v, int head_dim, int j0, const int *ends);
    // ... or, for a codec that sums even and odd tokens apart (MirrorOps.split_mix), the same into
    // even[r·os + d] for even j and odd[r·os + d] for odd j, each in order of j; row r from starts[r]
    // (NULL: every row from j0) ...
    void (*mix_rows_split)(float *restrict even, float *restrict odd, size_t os, const float *restrict p, size_t ps,
                           int n_p, const float *restrict v, int head_dim, int j0, const int *starts, const int *ends);
    // ... or in pairs of tokens (MirrorOps.pair_groups: KIVI's 2-bit values), pair u = (2u, 2u + 1)
    // adding p_2u · v_2u + p_2u+1 · v_2u+1 to even (u even) or odd (u odd), in order of u, from row r's
    // pair 0 to its end: a last pair cut by ends[r] adds p_2u · v_2u + 0.
    void (*mix_rows_pairs)(float *restrict even, float *restrict odd, size_t os, const float *restrict p, size_t ps,
                           int n_p, const float *restrict v, int head_dim, const int *ends);
    // x[r·xs + j] for j < ends[r] of n_x rows, in `form` with f[j], g[j], c[r] and y[r·ys + j] (or into y: the
    // fast evaluator's factors, offsets and second sums, span_mirror.h): element by element, the
    // same bits at any width.
    void (*factor_rows)(float *restrict x, size_t xs, float *restrict y, size_t ys, int n_x, const int *ends,
                        const float *restrict f, const float *restrict g, const float *restrict c, FactorForm form);
} ForwardKernels;

extern const ForwardKernels forward_kernels_portable, forward_kernels_avx2, forward_kernels_avx512;

// The build for the set in use (cpu.h: the CPU's best, or what MICRO_ISA asks), or the next lower
// set compiled in.
const ForwardKernels *forward_kernels(void);
// The build for `isa` if it was compiled in and this CPU runs it (whatever MICRO_ISA says), else NULL.
const ForwardKernels *forward_kernels_for(Isa isa);

#endif
