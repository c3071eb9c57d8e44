// The forward pass's hot kernels (forward_kernels.h), bit for bit: the portable build against a
// scalar reference written here in the same fixed order, then the AVX-512 build against the
// portable one (the determinism across machines that the plate's last digits rely on). Row lengths
// and position counts around the 16-lane blocks, row ranges that start and stop off the 4-row
// groups, and inputs from tiny to huge (softmax arguments reaching exp_neg's clamp). Exits 77
// (skipped) after the portable checks when this CPU or build has no AVX-512.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exp_fixed.h"
#include "fastmath.h"
#include "forward_kernels.h"

#include "check.h"

enum { LANES = 16, NMAX = 2100, ROWS = 19 };

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { return check_uniform(&rng_state); }

// The documented orders, one scalar add at a time.
static float ref_dot(const float *w, const float *x, int n) {
    float part[LANES] = {0};
    int j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) part[l] += w[j + l] * x[j + l];
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) part[l] += part[l + width];
    float sum = part[0];
    for (; j < n; j++) sum += w[j] * x[j];
    return sum;
}

static void ref_softmax(float *x, int n, float scale) {
    float max = x[0];
    for (int i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    float part[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) part[l] += x[i + l] = exp_neg((x[i + l] - max) * scale);
    for (; i < n; i++) part[0] += x[i] = exp_neg((x[i] - max) * scale);
    float sum = 0;
    for (int l = 0; l < LANES; l++) sum += part[l];
    float inv = 1.0f / sum;
    for (i = 0; i < n; i++) x[i] *= inv;
}

// The first position of the largest weight, by the plain scan eval once ran over the weights (the
// last position when the first weight is NaN: no weight compares equal to it).
static int ref_top(const float *w, int n) {
    float max = w[0];
    for (int j = 0; j < n; j++) max = w[j] > max ? w[j] : max;
    int top = 0;
    while (top < n - 1 && !(w[top] == max)) top++;
    return top;
}

// Scores whose weights tie or nearly tie at the top, or hold a NaN: case 0 random, 1 three values
// (many equal maxima), 2 the max and its float neighbours below it scattered about, 3 a NaN.
static void fill_scores(float *v, int n, double magnitude, int kind) {
    for (int i = 0; i < n; i++) v[i] = (float)((2 * urand() - 1) * magnitude);
    if (kind == 1)
        for (int i = 0; i < n; i++) v[i] = (float)(magnitude * (int)(3 * urand()));
    if (kind == 2) {
        const float top = (float)magnitude;
        for (int i = 0; i < n; i++)
            if (urand() < 0.3) v[i] = i % 3 == 0 ? top : nextafterf(i % 3 == 1 ? top : nextafterf(top, 0), 0);
    }
    if (kind == 3) v[(int)(urand() * n)] = NAN;
}

enum { BATCH = 6 }; // the batched product's rows: a block of four and two left over
static float W[ROWS * NMAX], x[NMAX], out_a[ROWS], out_b[ROWS];
static float X[BATCH * NMAX], mm_a[BATCH * ROWS], mm_b[BATCH * ROWS];
static float s_in[NMAX], s_a[NMAX], s_b[NMAX];

static void fill(float *v, int n, double magnitude) {
    for (int i = 0; i < n; i++) v[i] = (float)((2 * urand() - 1) * magnitude);
}

// Every kernel of k against the reference (ref_check) or against the other build o.
static void run(const ForwardKernels *k, const ForwardKernels *o) {
    static const int lens[] = {1, 2, 15, 16, 17, 31, 32, 33, 48, 64, 100, 128, 255, 256, 257, 688, 2047, 2048, 2049};
    static const double mags[] = {1e-3, 1.0, 30.0, 1e4};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int n = lens[li];
        for (size_t mi = 0; mi < sizeof mags / sizeof mags[0]; mi++) {
            fill(W, ROWS * n, mags[mi]);
            fill(x, n, 1.0);
            for (int r0 = 0; r0 <= 2; r0++) {
                for (int r1 = ROWS - 2; r1 <= ROWS; r1++) {
                    memset(out_a, 0, sizeof out_a);
                    memset(out_b, 0, sizeof out_b);
                    k->matvec_rows(out_a, W, x, n, r0, r1);
                    if (o) {
                        o->matvec_rows(out_b, W, x, n, r0, r1);
                    } else {
                        for (int r = r0; r < r1; r++) out_b[r] = ref_dot(W + (size_t)r * n, x, n);
                    }
                    CHECK(check_same_bits(out_a, out_b, ROWS), "matvec_rows %s vs %s: n %d rows [%d, %d) magnitude %g",
                          k->name, o ? o->name : "reference", n, r0, r1, mags[mi]);
                    // The batched product: every output the reference's dot product, in any batch.
                    fill(X, BATCH * n, 1.0);
                    memset(mm_a, 0, sizeof mm_a);
                    memset(mm_b, 0, sizeof mm_b);
                    k->matmul_rows(mm_a, ROWS, W, X, (size_t)n, n, BATCH, r0, r1);
                    for (int b = 0; b < BATCH; b++)
                        for (int r = r0; r < r1; r++) {
                            if (o) continue;
                            mm_b[b * ROWS + r] = ref_dot(W + (size_t)r * n, X + (size_t)b * n, n);
                        }
                    if (o) o->matmul_rows(mm_b, ROWS, W, X, (size_t)n, n, BATCH, r0, r1);
                    CHECK(check_same_bits(mm_a, mm_b, BATCH * ROWS), "matmul_rows %s vs %s: n %d rows [%d, %d) magnitude %g",
                          k->name, o ? o->name : "reference", n, r0, r1, mags[mi]);
                }
            }
            fill(s_in, n, mags[mi]);
            float scale = 1.0f / sqrtf(32.0f);
            memcpy(s_a, s_in, sizeof(float) * (size_t)n);
            memcpy(s_b, s_in, sizeof(float) * (size_t)n);
            k->scaled_softmax(s_a, n, scale);
            if (o) {
                o->scaled_softmax(s_b, n, scale);
            } else {
                ref_softmax(s_b, n, scale);
            }
            CHECK(check_same_bits(s_a, s_b, n), "scaled_softmax %s vs %s: n %d magnitude %g", k->name,
                  o ? o->name : "reference", n, mags[mi]);
            for (int kind = 0; kind < 4; kind++) { // its top position, ties and NaN included
                fill_scores(s_a, n, mags[mi], kind);
                const int top = k->scaled_softmax(s_a, n, scale), want = ref_top(s_a, n);
                CHECK(top == want, "scaled_softmax %s top: %d, the scan finds %d (n %d magnitude %g case %d)", k->name,
                      top, want, n, mags[mi], kind);
            }
        }
    }
}

// The fast evaluator's kernels: every score q·k in order of channels and every weighted sum in order
// of positions, whatever the tile of queries and the range (span_mirror.h relies on it).
enum { SPAN_N = 300, SPAN_PANELS = (SPAN_N + KEY_PANEL - 1) / KEY_PANEL, SPAN_HD = 48 };
static float kt[SPAN_PANELS * SPAN_HD * KEY_PANEL], vrows[SPAN_N * SPAN_HD], qs[SPAN_TILE * SPAN_HD], ps[SPAN_TILE * SPAN_N];
static float sc_a[SPAN_TILE * SPAN_N], sc_b[SPAN_TILE * SPAN_N], mx_a[SPAN_TILE * SPAN_HD], mx_b[SPAN_TILE * SPAN_HD];
static float ev_a[SPAN_TILE * SPAN_HD], ev_b[SPAN_TILE * SPAN_HD];

// Row r's end for pattern `kind`: every row at j1; a staircase ending at j1 (a span's tile: row r
// one position past row r − 1); ends spread over [j0, j1], some rows empty.
static int span_end(int kind, int r, int nq, int j0, int j1) {
    if (kind == 0) return j1;
    if (kind == 1) return j1 - (nq - 1 - r) > j0 ? j1 - (nq - 1 - r) : j0;
    return j0 + (j1 - j0) * ((r * 7) % (nq + 1)) / nq;
}

// A score in `order` (ScoreOrder), written out as its definition.
static float ref_score(const float *q, int hd, int j, ScoreOrder order) {
    float acc = 0.0f, odd = 0.0f;
    if (order == SCORE_EVEN_ODD) {
        for (int d = 0; d < hd; d += 2) acc += q[d] * kt[key_panel_at(hd, d, j)];
        for (int d = 1; d < hd; d += 2) odd += q[d] * kt[key_panel_at(hd, d, j)];
        return acc + odd;
    }
    for (int d = 0; d < hd; d++) {
        if (order == SCORE_IN_PAIRS && d + 1 < hd) {
            acc += q[d] * kt[key_panel_at(hd, d, j)] + q[d + 1] * kt[key_panel_at(hd, d + 1, j)];
            d++;
        } else {
            acc += q[d] * kt[key_panel_at(hd, d, j)];
        }
    }
    return acc;
}

// exp_shifted against exp_fixed called here, bit for bit, over logits from tiny to huge (the
// loss's log-softmax; the exponential's accuracy is test_fastmath's).
static void run_exp_shifted(const ForwardKernels *k) {
    enum { N = 1000 };
    static float x[N];
    static double out[N];
    static const float shifts[] = {0.0f, 3.5f, -120.0f, 700.0f};
    for (int si = 0; si < 4; si++) {
        for (int i = 0; i < N; i++) x[i] = (float)((2 * urand() - 1) * (i % 3 == 0 ? 1e3 : i % 3 == 1 ? 30.0 : 1e-3));
        x[7] = -0.0f, x[8] = 1e30f, x[9] = -1e30f;
        k->exp_shifted(out, x, shifts[si], N);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            const double want = exp_fixed((double)x[i] - shifts[si]);
            bad += memcmp(&want, &out[i], sizeof want) != 0;
        }
        CHECK(bad == 0, "exp_shifted %s: %d of %d differ from exp_fixed (shift %g)", k->name, bad, N, shifts[si]);
    }
}

// factor_rows in every form against its definition written here (element by element: the same bits
// at any width), over rows of ragged lengths around the vector widths.
static void run_factor_rows(const ForwardKernels *k) {
    enum { ROWS = 5 };
    static const int lens[ROWS] = {1, 15, 16, 47, SPAN_N};
    static float x[ROWS * SPAN_N], want[ROWS * SPAN_N], y[ROWS * SPAN_N], f[SPAN_N], g[SPAN_N];
    float c[ROWS];
    fill(y, ROWS * SPAN_N, 3.0), fill(f, SPAN_N, 2.0), fill(g, SPAN_N, 1e3), fill(c, ROWS, 5.0);
    for (int form = FACTOR_TIMES; form <= FACTOR_SECOND; form++) {
        fill(x, ROWS * SPAN_N, 1e-3);
        x[0] = -0.0f; // 0 + f·(−0) is +0, f·(−0) is not
        memcpy(want, x, sizeof x);
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < lens[r]; j++) {
                float *w = &want[r * SPAN_N + j];
                *w = form == FACTOR_TIMES       ? f[j] * *w
                     : form == FACTOR_PLUS_ZERO ? 0.0f + f[j] * *w
                     : form == FACTOR_OFFSET    ? f[j] * *w + g[j] * c[r]
                                                : f[j] * (*w + g[j] * y[r * SPAN_N + j]);
            }
        k->factor_rows(x, SPAN_N, y, SPAN_N, ROWS, lens, f, g, c, (FactorForm)form);
        CHECK(check_same_bits(x, want, ROWS * SPAN_N), "factor_rows %s: form %d", k->name, form);
    }
    // The pairs (x_j·f_j, x_j), or (x_j, x_j) without f, into y (rows 2·SPAN_N apart).
    static float pairs[ROWS * 2 * SPAN_N], pairs_want[ROWS * 2 * SPAN_N];
    for (int with_f = 0; with_f < 2; with_f++) {
        fill(x, ROWS * SPAN_N, 1e-3);
        memset(pairs, 0, sizeof pairs), memset(pairs_want, 0, sizeof pairs_want);
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < lens[r]; j++) {
                const float xv = x[r * SPAN_N + j];
                pairs_want[r * 2 * SPAN_N + 2 * j] = with_f ? xv * f[j] : xv;
                pairs_want[r * 2 * SPAN_N + 2 * j + 1] = xv;
            }
        memcpy(want, x, sizeof x);
        k->factor_rows(x, SPAN_N, pairs, 2 * SPAN_N, ROWS, lens, with_f ? f : NULL, NULL, NULL, FACTOR_PAIRS);
        CHECK(check_same_bits(pairs, pairs_want, ROWS * 2 * SPAN_N) && check_same_bits(x, want, ROWS * SPAN_N),
              "factor_rows %s: pairs%s", k->name, with_f ? " with factors" : "");
    }
}

static void run_span(const ForwardKernels *k, const ForwardKernels *o) {
    static const int hds[] = {32, 16, 48};
    static const int ranges[][2] = {{0, 1}, {0, 16}, {3, 35}, {0, 64}, {1, 130}, {17, 300}, {0, 300},
                                    {60, 70}, {64, 200}, {100, 101}, {250, 299}};
    static const int rows[] = {1, 2, 3, 4, 5, 7, 8, 12, 15, 16};
    fill(kt, SPAN_PANELS * SPAN_HD * KEY_PANEL, 1.0);
    fill(vrows, SPAN_N * SPAN_HD, 1.0);
    fill(qs, SPAN_TILE * SPAN_HD, 1.0);
    fill(ps, SPAN_TILE * SPAN_N, 1.0);
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        const int hd = hds[hi];
        for (size_t ni = 0; ni < sizeof rows / sizeof rows[0] && rows[ni] <= SPAN_TILE; ni++) {
            const int nq = rows[ni];
            for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++)
                for (int kind = 0; kind < 3; kind++) {
                    const int j0 = ranges[ri][0], j1 = ranges[ri][1];
                    int ends[SPAN_TILE];
                    for (int r = 0; r < nq; r++) ends[r] = span_end(kind, r, nq, j0, j1);
                    for (int order = SCORE_IN_ORDER; order <= SCORE_EVEN_ODD; order++) {
                        memset(sc_a, 0, sizeof sc_a), memset(sc_b, 0, sizeof sc_b);
                        k->scores_transposed(sc_a, SPAN_N, qs, SPAN_HD, nq, kt, hd, j0, ends, (ScoreOrder)order);
                        if (o)
                            o->scores_transposed(sc_b, SPAN_N, qs, SPAN_HD, nq, kt, hd, j0, ends, (ScoreOrder)order);
                        else
                            for (int r = 0; r < nq; r++)
                                for (int j = j0; j < ends[r]; j++)
                                    sc_b[r * SPAN_N + j] = ref_score(qs + r * SPAN_HD, hd, j, (ScoreOrder)order);
                        CHECK(check_same_bits(sc_a, sc_b, SPAN_TILE * SPAN_N),
                              "scores_transposed %s vs %s: order %d, hd %d, %d queries, [%d, %d) ends %d", k->name,
                              o ? o->name : "reference", order, hd, nq, j0, j1, kind);
                    }
                    for (int i = 0; i < SPAN_TILE * SPAN_HD; i++) mx_a[i] = mx_b[i] = (float)i / 7.0f;
                    k->mix_rows(mx_a, SPAN_HD, ps, SPAN_N, nq, vrows, hd, j0, ends);
                    if (o)
                        o->mix_rows(mx_b, SPAN_HD, ps, SPAN_N, nq, vrows, hd, j0, ends);
                    else
                        for (int r = 0; r < nq; r++)
                            for (int j = j0; j < ends[r]; j++)
                                for (int d = 0; d < hd; d++) mx_b[r * SPAN_HD + d] += ps[r * SPAN_N + j] * vrows[j * hd + d];
                    CHECK(check_same_bits(mx_a, mx_b, SPAN_TILE * SPAN_HD),
                          "mix_rows %s vs %s: hd %d, %d vectors, [%d, %d) ends %d", k->name, o ? o->name : "reference",
                          hd, nq, j0, j1, kind);
                    // Even and odd positions apart, each in order (MirrorOps.split_mix), from j0 and from
                    // each row's own start (a staircase, as KIVI's window slides) ...
                    int starts[SPAN_TILE];
                    for (int r = 0; r < nq; r++) starts[r] = j0 + (ends[r] - j0) * ((r * 3) % 5) / 4;
                    for (int own = 0; own < 2; own++) {
                        for (int i = 0; i < SPAN_TILE * SPAN_HD; i++) mx_a[i] = mx_b[i] = ev_a[i] = ev_b[i] = (float)i / 5.0f;
                        k->mix_rows_split(ev_a, mx_a, SPAN_HD, ps, SPAN_N, nq, vrows, hd, j0, own ? starts : NULL, ends);
                        if (o)
                            o->mix_rows_split(ev_b, mx_b, SPAN_HD, ps, SPAN_N, nq, vrows, hd, j0, own ? starts : NULL, ends);
                        else
                            for (int r = 0; r < nq; r++)
                                for (int j = own ? starts[r] : j0; j < ends[r]; j++)
                                    for (int d = 0; d < hd; d++)
                                        (j % 2 ? mx_b : ev_b)[r * SPAN_HD + d] += ps[r * SPAN_N + j] * vrows[j * hd + d];
                        CHECK(check_same_bits(ev_a, ev_b, SPAN_TILE * SPAN_HD) && check_same_bits(mx_a, mx_b, SPAN_TILE * SPAN_HD),
                              "mix_rows_split %s vs %s%s: hd %d, %d vectors, [%d, %d) ends %d", k->name,
                              o ? o->name : "reference", own ? " from own starts" : "", hd, nq, j0, j1, kind);
                    }
                    // ... and in pairs of tokens from 0 (MirrorOps.pair_groups).
                    for (int i = 0; i < SPAN_TILE * SPAN_HD; i++) mx_a[i] = mx_b[i] = ev_a[i] = ev_b[i] = (float)i / 9.0f;
                    k->mix_rows_pairs(ev_a, mx_a, SPAN_HD, ps, SPAN_N, nq, vrows, hd, ends);
                    if (o)
                        o->mix_rows_pairs(ev_b, mx_b, SPAN_HD, ps, SPAN_N, nq, vrows, hd, ends);
                    else
                        for (int r = 0; r < nq; r++)
                            for (int j = 0; j < ends[r]; j += 2)
                                for (int d = 0; d < hd; d++) {
                                    const float *p = ps + r * SPAN_N;
                                    const float second = j + 1 < ends[r] ? p[j + 1] * vrows[(j + 1) * hd + d] : 0.0f;
                                    ((j / 2) % 2 ? mx_b : ev_b)[r * SPAN_HD + d] += p[j] * vrows[j * hd + d] + second;
                                }
                    CHECK(check_same_bits(ev_a, ev_b, SPAN_TILE * SPAN_HD) && check_same_bits(mx_a, mx_b, SPAN_TILE * SPAN_HD),
                          "mix_rows_pairs %s vs %s: hd %d, %d vectors, ends to %d (%d)", k->name,
                          o ? o->name : "reference", hd, nq, j1, kind);
                }
        }
    }
}

// exp_negated against libm's expf (the kernels copy its algorithm, libm_expf.h), bit for bit, over
// a sweep of every float's bit patterns (a stride prime to the mantissa's fields, so every exponent,
// sign and NaN is met with varied mantissas), the edges of its special cases and the inputs a fused
// step made two roundings changes (only r's changes any: two floats of 2^32). The sweep of all 2^32
// floats passed once for every set on x86-64 (docs/testing.md); the test takes every 509th.
enum { EXP_RUN = 4096 };

static long exp_check(const ForwardKernels *k, const float *in, int n) {
    static float out[EXP_RUN];
    long bad = 0;
    k->exp_negated(out, in, n);
    for (int i = 0; i < n; i++) {
        const float want = expf(-in[i]);
        if (memcmp(&want, &out[i], sizeof want) && bad++ < 3)
            CHECK(0, "exp_negated %s: x = %a gives %a, libm's expf(-x) %a", k->name, (double)in[i], (double)out[i],
                  (double)want);
    }
    return bad;
}

static void run_exp(const ForwardKernels *k) {
    static const float edges[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 0x1.62e42ep6f, 0x1.62e430p6f,
                                  0x1.9fe368p6f, 0x1.9fe36ap6f, 0x1.9d1d9ep6f, 0x1.9d1da0p6f, -0x1.62e42ep6f,
                                  -0x1.62e430p6f, 0x1.5d5e2ap6f, 1e-30f, -1e-30f, 88.0f, -88.0f, 103.5f, 1.0f};
    static float in[EXP_RUN];
    long checked = 0, bad = 0;
    int fill = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += 509) {
        const uint32_t bits = (uint32_t)u;
        memcpy(&in[fill++], &bits, sizeof bits);
        if (fill == EXP_RUN) bad += exp_check(k, in, fill), checked += fill, fill = 0;
    }
    bad += exp_check(k, in, fill), checked += fill;
    bad += exp_check(k, edges, (int)(sizeof edges / sizeof edges[0]));
    // The only two floats whose e^x changes when glibc's fused r = x·N/ln2 − k is rounded twice (a
    // sweep of all floats): the fused algorithm gives these, one ulp above the correctly rounded
    // result, and so does x86-64's libm; ARM64's glibc forms r from the rounded product and gives
    // the correctly rounded one, so libm is no reference here.
    static const float fused_in[2] = {-0x1.04845ep+5f, 0x1.f8cbb2p+5f}, fused_out[2] = {0x1.f93e38p+46f, 0x1.f45326p-92f};
    float out[2];
    k->exp_negated(out, fused_in, 2);
    for (int i = 0; i < 2; i++) {
        const int same = !memcmp(&out[i], &fused_out[i], sizeof out[i]);
        bad += !same;
        CHECK(same, "exp_negated %s: e^%a gives %a, glibc's fused algorithm %a", k->name, -(double)fused_in[i],
              (double)out[i], (double)fused_out[i]);
    }
    CHECK(bad == 0 && checked > 8000000, "exp_negated %s: %ld of %ld differ from libm's expf", k->name, bad, checked);
}

// exp_sum (softmax's first pass) against exp_neg one value at a time and the sum in its documented
// order (16 lane partials, the elements past the whole blocks into lane 0, then lanes 0..15 onto 0),
// bit for bit: every 509th float bit pattern plus each exponent's first and last mantissa, as x − 0
// at scale 1 (so exp_neg sees each pattern itself), runs of every length around the blocks, and
// shifted, scaled rows as softmax passes them.
static long exp_sum_check(const ForwardKernels *k, const float *in, int n, float max, float scale) {
    static float got[EXP_RUN], want[EXP_RUN];
    memcpy(got, in, sizeof(float) * (size_t)n);
    const float sum = k->exp_sum(got, n, max, scale);
    float part[LANES] = {0};
    for (int i = 0; i < n; i++) {
        want[i] = exp_neg((in[i] - max) * scale);
        part[i < n / LANES * LANES ? i % LANES : 0] += want[i];
    }
    float want_sum = 0.0f;
    for (int l = 0; l < LANES; l++) want_sum += part[l];
    long bad = 0;
    for (int i = 0; i < n; i++) {
        const int same = !memcmp(&got[i], &want[i], sizeof got[i]);
        if (!same && bad < 3)
            fprintf(stderr, "exp_sum %s: e^(%a) gives %a, exp_neg %a\n", k->name, (double)((in[i] - max) * scale),
                    (double)got[i], (double)want[i]);
        bad += !same;
    }
    const int same_sum = !memcmp(&sum, &want_sum, sizeof sum) || (isnan(sum) && isnan(want_sum));
    CHECK(same_sum, "exp_sum %s: sum %a, in order %a (n %d)", k->name, (double)sum, (double)want_sum, n);
    return bad;
}

static void run_exp_sum(const ForwardKernels *k) {
    static float in[EXP_RUN];
    long checked = 0, bad = 0;
    int fill = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += 509) {
        const uint32_t b = (uint32_t)u, pick[3] = {b, b & 0xFF800000u, b | 0x007FFFFFu};
        for (int e = 0; e < 3; e++) {
            memcpy(&in[fill++], &pick[e], sizeof pick[e]);
            if (fill == EXP_RUN) bad += exp_sum_check(k, in, fill, 0.0f, 1.0f), checked += fill, fill = 0;
        }
    }
    bad += exp_sum_check(k, in, fill, 0.0f, 1.0f), checked += fill;
    for (int n = 1; n <= 100; n++) { // runs around the blocks, as softmax passes them
        for (int i = 0; i < n; i++) in[i] = (float)((2 * urand() - 1) * 40.0);
        float max = in[0];
        for (int i = 0; i < n; i++) max = in[i] > max ? in[i] : max;
        bad += exp_sum_check(k, in, n, max, 1.0f / sqrtf(32.0f)), checked += n;
    }
    CHECK(bad == 0 && checked > 25000000, "exp_sum %s: %ld of %ld differ from exp_neg", k->name, bad, checked);
}

int main(void) {
    run_exp_sum(&forward_kernels_portable);
    run_exp(&forward_kernels_portable);
    run(&forward_kernels_portable, NULL);
    run_span(&forward_kernels_portable, NULL);
    run_factor_rows(&forward_kernels_portable);
    run_exp_shifted(&forward_kernels_portable);
    char ran[64] = "portable", not_run[64] = "";
    for (int isa = ISA_AVX2; isa <= ISA_AVX512; isa++) {
        const ForwardKernels *k = forward_kernels_for((Isa)isa);
        if (!k) {
            snprintf(not_run + strlen(not_run), sizeof not_run - strlen(not_run), " %s", cpu_isa_name((Isa)isa));
            continue;
        }
        run_exp_sum(k);
        run_exp(k);
        run(k, NULL);
        run(k, &forward_kernels_portable);
        run_span(k, NULL);
        run_span(k, &forward_kernels_portable);
        run_factor_rows(k);
        run_exp_shifted(k);
        snprintf(ran + strlen(ran), sizeof ran - strlen(ran), ", %s", k->name);
    }
    printf("forward kernels: %s checked against the reference and the portable build%s%s%s\n", ran,
           *not_run ? "; not run (not compiled in, or this CPU lacks them):" : "", not_run, failures ? " -- FAILED" : "");
    return failures ? 1 : 0;
}
