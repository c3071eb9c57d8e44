// The arithmetic of the 2025 formats (formats.h). Plain C, compiled once: no kernels here.
#include "formats.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "rng.h"

// ---- MX elements ----------------------------------------------------------------------------

static const MxElemInfo mx_elems[MX_N_ELEMS] = {
    [MX_E2M1] = {"e2m1", 4, 2, 6.0f},      [MX_E2M3] = {"e2m3", 6, 2, 7.5f},
    [MX_E3M2] = {"e3m2", 6, 4, 28.0f},     [MX_E4M3] = {"e4m3", 8, 8, 448.0f},
    [MX_E5M2] = {"e5m2", 8, 15, 57344.0f}, [MX_INT8] = {"int8", 8, 0, 127.0f / 64.0f},
};

// The small formats' mantissa bits and exponent bias (they have no inf or NaN: every magnitude code
// is a number, the all-ones one the largest).
static const int mx_mbits[3] = {1, 3, 2}, mx_bias[3] = {1, 1, 3};

const MxElemInfo *mx_elem_info(MxElem e) { return &mx_elems[e]; }

int mx_elem_from_name(const char *name) {
    for (int e = 0; e < MX_N_ELEMS; e++) {
        const char *a = mx_elems[e].name, *b = name;
        while (*a && *a == *b) a++, b++;
        if (!*a && !*b) return e;
    }
    return -1;
}

// x · 2^k, as ldexpf gives it (one correctly rounded product) without its call where 2^k is a
// float of its own.
static inline float times_pow2(float x, int k) {
    if (k < -126 || k > 127) return ldexpf(x, k);
    union {
        uint32_t bits;
        float value;
    } p = {.bits = (uint32_t)(k + 127) << 23};
    return x * p.value;
}

// floor(log2 a) for a > 0, as ilogbf: from the exponent bits where a is normal.
static inline int binade(float a) {
    union {
        float value;
        uint32_t bits;
    } u = {.value = a};
    const int e = (int)(u.bits >> 23) & 0xff;
    return e ? e - 127 : ilogbf(a);
}

// A magnitude a >= 0 of E2M1, E2M3 or E3M2 as its code. With emin = 1 − bias, the representable
// numbers of binade E >= emin are m·2^(E − mbits), and those below 2^emin (subnormal) the same with
// E = emin; numbering them as ((E − emin) << mbits) + m makes the code one monotone integer line, so
// a mantissa rounding up to 2^(mbits+1) lands on the next binade by itself.
static uint8_t small_float_code(MxElem e, float a) {
    const int mbits = mx_mbits[e], emin = 1 - mx_bias[e];
    const uint8_t top = (uint8_t)((1u << (mx_elems[e].bits - 1)) - 1u);
    if (!(a < mx_elems[e].max)) return top; // saturate; inf too
    int E = a > 0.0f ? binade(a) : emin;
    if (E < emin) E = emin;
    // a · 2^(mbits − E) is below 2^(mbits + 1): adding and taking away 2^23 rounds it to an integer,
    // ties to even, as nearbyintf does.
    const int m = (int)((times_pow2(a, mbits - E) + 8388608.0f) - 8388608.0f);
    const int code = ((E - emin) << mbits) + m;
    return code > top ? top : (uint8_t)code;
}

uint8_t mx_elem_encode(MxElem e, float x) {
    if (isnan(x)) return 0;
    switch (e) {
    case MX_E4M3: return quant_fp32_to_fp8(x, QUANT_FP8_E4M3);
    case MX_E5M2: return quant_fp32_to_fp8(x, QUANT_FP8_E5M2);
    case MX_INT8: return (uint8_t)(int8_t)quant_round_clamp(x * 64.0f, -127, 127); // symmetric: −128 unused
    default: {
        const uint8_t sign = signbit(x) ? (uint8_t)(1u << (mx_elems[e].bits - 1)) : 0;
        return sign | small_float_code(e, fabsf(x));
    }
    }
}

float mx_elem_decode(MxElem e, uint8_t code) {
    switch (e) {
    case MX_E4M3: return quant_e4m3_to_fp32(code);
    case MX_E5M2: return quant_e5m2_to_fp32(code);
    case MX_INT8: return (float)(int8_t)code / 64.0f;
    default: {
        const int mbits = mx_mbits[e], bits = mx_elems[e].bits;
        const int mag = code & ((1 << (bits - 1)) - 1), ex = mag >> mbits, f = mag & ((1 << mbits) - 1);
        const float v = ex == 0 ? times_pow2((float)f, 1 - mx_bias[e] - mbits)
                                : times_pow2((float)(f + (1 << mbits)), ex - mx_bias[e] - mbits);
        return (code >> (bits - 1)) & 1 ? -v : v;
    }
    }
}

static float mx_tables[MX_N_ELEMS][256];
static pthread_once_t mx_tables_once = PTHREAD_ONCE_INIT;

static void mx_tables_build(void) {
    for (int e = 0; e < MX_N_ELEMS; e++)
        for (int c = 0; c < 1 << mx_elems[e].bits; c++) mx_tables[e][c] = mx_elem_decode((MxElem)e, (uint8_t)c);
}

const float *mx_elem_table(MxElem e) {
    pthread_once(&mx_tables_once, mx_tables_build);
    return mx_tables[e];
}

uint8_t mx_scale_byte(MxElem e, float amax) {
    if (!isfinite(amax)) return 0xff;
    if (amax == 0.0f) return 0;
    int x = ilogbf(amax) - mx_elems[e].emax; // ilogbf is floor(log2) for subnormals too
    x = x < -127 ? -127 : x > 127 ? 127 : x;
    return (uint8_t)(x + 127);
}

float mx_scale_decode(uint8_t byte) { return byte == 0xff ? NAN : ldexpf(1.0f, (int)byte - 127); }

void mx_block_encode(MxElem e, const float *x, int n, uint8_t *scale, uint8_t *codes) {
    const float amax = quant_absmax(x, n);
    int nan = 0;
    for (int i = 0; i < n; i++) nan |= isnan(x[i]);
    *scale = nan ? 0xff : mx_scale_byte(e, amax);
    const int shift = 127 - (int)*scale; // −X: dividing by 2^X is exact scaling
    if (*scale == 0xff) {
        memset(codes, 0, (size_t)n);
    } else if (e == MX_E2M1 && shift >= -126) { // times_pow2's one product, by a float 2^shift
        const float p = times_pow2(1.0f, shift);
        for (int i = 0; i < n; i++) codes[i] = mx_e2m1_encode(x[i] * p);
    } else {
        for (int i = 0; i < n; i++) codes[i] = mx_elem_encode(e, times_pow2(x[i], shift));
    }
}

// ---- NVFP4 ----------------------------------------------------------------------------------

float nvfp4_second_scale(float amax, int four_over_six) {
    return amax > 0.0f && isfinite(amax) ? amax / (four_over_six ? 256.0f * 6.0f : 448.0f * 6.0f) : 0.0f;
}

// Elements of one block against the scale s2·sb; the squared error of reading them back.
// The codes first (a loop in SIMD lanes), then the error's sum, in order.
static double nvfp4_try(const float *x, int n, float scale, uint8_t *codes) {
    const float *e2m1 = mx_elem_table(MX_E2M1);
    if (scale > 0.0f)
        for (int i = 0; i < n; i++) codes[i] = mx_e2m1_encode(x[i] / scale);
    else
        memset(codes, 0, (size_t)n);
    double err = 0.0;
    for (int i = 0; i < n; i++) {
        const double d = (double)x[i] - (double)(e2m1[codes[i]] * scale);
        err += d * d;
    }
    return err;
}

uint8_t nvfp4_block_encode(const float *x, int n, float s2, int four_over_six, uint8_t *codes) {
    const float amax = quant_absmax(x, n);
    uint8_t best = 0, trial[16];
    double best_err = INFINITY;
    for (int k = 0; k < (four_over_six ? 2 : 1); k++) {
        const float target = k == 0 ? 6.0f : 4.0f;
        const uint8_t sb = s2 > 0.0f ? quant_fp32_to_fp8((amax / target) / s2, QUANT_FP8_E4M3) : 0;
        const double err = nvfp4_try(x, n, s2 * quant_e4m3_to_fp32(sb), trial);
        if (err < best_err) {
            best_err = err, best = sb;
            for (int i = 0; i < n; i++) codes[i] = trial[i];
        }
    }
    return best;
}

// ---- TurboQuant's codebook ------------------------------------------------------------------

// The density f(x) = (1 − x²)^k, k = (d − 3)/2, unnormalised (only ratios of its moments matter).
static double tq_density(double k, double x) {
    return k == 0.0 ? 1.0 : 1.0 - x * x <= 0.0 ? 0.0 : exp(k * log1p(-x * x));
}

// ∫ f and ∫ x·f over [a, b] by 8-point Gauss-Legendre: exact for polynomials of degree 15, and the
// density is smooth on a grid step (for d = 3 it is flat).
static void gl_moments(double k, double a, double b, double *m0, double *m1) {
    static const double node[4] = {0.1834346424956498, 0.5255324099163290, 0.7966664774136267, 0.9602898564975363},
                        weight[4] = {0.3626837833783620, 0.3137066458778873, 0.2223810344533745, 0.1012285362903763};
    const double mid = 0.5 * (a + b), half = 0.5 * (b - a);
    double s0 = 0.0, s1 = 0.0;
    for (int i = 0; i < 4; i++)
        for (int side = -1; side <= 1; side += 2) {
            const double x = mid + side * half * node[i], w = weight[i] * tq_density(k, x);
            s0 += w, s1 += w * x;
        }
    *m0 = s0 * half, *m1 = s1 * half;
}

// The cumulative moments C0(x) = ∫_lo^x f and C1(x) = ∫_lo^x t·f on a grid of TQ_GRID steps over
// [lo, −lo], and between grid points one Gauss-Legendre rule from the point below: a cell's moments
// are then two look-ups, so that Lloyd's step costs O(levels) whatever their number (256 at 8 bits),
// where integrating every cell afresh cost O(levels · points).
enum { TQ_GRID = 2048 };
typedef struct {
    double k, lo, h;
    double c0[TQ_GRID + 1], c1[TQ_GRID + 1];
} TqCumulative;

static void cumulative_init(TqCumulative *t, double k, double lim) {
    t->k = k, t->lo = -lim, t->h = 2.0 * lim / TQ_GRID;
    t->c0[0] = t->c1[0] = 0.0;
    for (int j = 0; j < TQ_GRID; j++) {
        double m0, m1;
        gl_moments(k, t->lo + j * t->h, t->lo + (j + 1) * t->h, &m0, &m1);
        t->c0[j + 1] = t->c0[j] + m0, t->c1[j + 1] = t->c1[j] + m1;
    }
}

static void cumulative_at(const TqCumulative *t, double x, double *c0, double *c1) {
    int j = (int)floor((x - t->lo) / t->h);
    j = j < 0 ? 0 : j >= TQ_GRID ? TQ_GRID - 1 : j;
    double m0, m1;
    gl_moments(t->k, t->lo + j * t->h, x, &m0, &m1);
    *c0 = t->c0[j] + m0, *c1 = t->c1[j] + m1;
}

// ∫ f and ∫ x·f over a cell [a, b]. A cell in the upper half is taken as its mirror image (f is
// even), so that a tail cell's moments are differences of two small cumulative values on either side,
// never of two values near the total, which would leave the outermost centroids a few 1e-9 off.
static void cell_moments(const TqCumulative *t, double a, double b, double *m0, double *m1) {
    const int mirror = a + b > 0.0;
    double a0, a1, b0, b1;
    cumulative_at(t, mirror ? -b : a, &a0, &a1);
    cumulative_at(t, mirror ? -a : b, &b0, &b1);
    *m0 = b0 - a0, *m1 = mirror ? a1 - b1 : b1 - a1;
}

// One evaluation of Lloyd's map at centroids c[n]: next[i] the conditional mean of cell i (bounded
// by the midpoints), and for Newton's method the derivatives of next[i] with respect to the cell's
// lower and upper boundary (f(t)·(t − mean)/mass, signed), in da[i] and db[i]. Returns the largest
// |next[i] − c[i]|.
static double lloyd_map(const TqCumulative *t, double lim, int n, const double *c, double *next, double *da,
                        double *db) {
    double a = -lim, moved = 0.0;
    for (int i = 0; i < n; i++) {
        const double b = i + 1 < n ? 0.5 * (c[i] + c[i + 1]) : lim;
        double mass, m1;
        cell_moments(t, a, b, &mass, &m1);
        const double mean = mass > 0.0 ? m1 / mass : 0.5 * (a + b);
        next[i] = mean;
        da[i] = mass > 0.0 ? tq_density(t->k, a) * (mean - a) / mass : 0.0;
        db[i] = mass > 0.0 ? tq_density(t->k, b) * (b - mean) / mass : 0.0;
        moved = fmax(moved, fabs(mean - c[i]));
        a = b;
    }
    return moved;
}

// Newton's step on c − T(c) = 0 (T Lloyd's map): the Jacobian I − T' is tridiagonal, since cell i's
// mean moves only with its two boundaries, each the midpoint of two centroids. Thomas's algorithm.
static void newton_step(int n, const double *c, const double *next, const double *da, const double *db,
                        double *step) {
    double sup[256], rhs[256];
    for (int i = 0; i < n; i++) {
        const double lower = i > 0 ? 0.5 * da[i] : 0.0, upper = i + 1 < n ? 0.5 * db[i] : 0.0;
        double diag = 1.0 - lower - upper, r = next[i] - c[i];
        if (i > 0) { // eliminate the sub-diagonal −lower against the previous row
            diag -= -lower * sup[i - 1];
            r -= -lower * rhs[i - 1];
        }
        sup[i] = -upper / diag, rhs[i] = r / diag;
    }
    for (int i = n - 1; i >= 0; i--) step[i] = rhs[i] - (i + 1 < n ? sup[i] * step[i + 1] : 0.0);
}

void tq_lloyd_max(int d, int bits, double *c) {
    const int n = 1 << bits;
    const double k = (d - 3) / 2.0, sigma = 1.0 / sqrt((double)d);
    // Beyond 12 standard deviations the density is below e^−72 of its peak: integrating there
    // would only spend the points that resolve the cells.
    const double lim = fmin(1.0, 12.0 * sigma);
    TqCumulative *t = malloc(2 * sizeof *t);
    double next[256], da[256], db[256], step[256], trial[256];
    if (!t) { // keeps the contract (sorted, symmetric levels) when out of memory: evenly spread
        for (int i = 0; i < n; i++) c[i] = lim * (2.0 * i + 1.0 - n) / n;
        return;
    }
    cumulative_init(t, k, lim);
    // Start from the high-resolution optimum (Panter and Dite 1951): centroid i at the (i + ½)/n
    // quantile of f^(1/3), which is this density with k/3 (grid resolution is enough for a start).
    cumulative_init(t + 1, k / 3.0, lim);
    for (int i = 0, j = 0; i < n; i++) {
        const double target = (i + 0.5) / n * t[1].c0[TQ_GRID];
        while (j + 1 < TQ_GRID && t[1].c0[j + 1] < target) j++;
        const double step0 = t[1].c0[j + 1] - t[1].c0[j], frac = step0 > 0.0 ? (target - t[1].c0[j]) / step0 : 0.5;
        c[i] = t->lo + (j + fmin(fmax(frac, 0.0), 1.0)) * t->h;
    }
    // Lloyd's iterations, each step taken as Newton's on their fixed point (halved up to four times)
    // when that lands closer (quadratic convergence: a handful of steps at 256 levels, where plain
    // Lloyd needs of the order of n² of them), else as Lloyd's own step (which keeps them sorted).
    double moved = lloyd_map(t, lim, n, c, next, da, db);
    for (int iter = 0; iter < 20000 && moved >= 1e-13 * sigma; iter++) {
        newton_step(n, c, next, da, db, step);
        double tnext[256], tda[256], tdb[256], tmoved = INFINITY;
        for (double lambda = 1.0; lambda >= 1.0 / 16 && !(tmoved < moved); lambda *= 0.5) {
            int ok = 1;
            for (int i = 0; i < n && ok; i++) {
                trial[i] = c[i] + lambda * step[i];
                ok = trial[i] > -lim && trial[i] < lim && (i == 0 || trial[i] > trial[i - 1]);
            }
            tmoved = ok ? lloyd_map(t, lim, n, trial, tnext, tda, tdb) : INFINITY;
        }
        if (tmoved < moved) {
            memcpy(c, trial, sizeof(double) * (size_t)n);
            memcpy(next, tnext, sizeof(double) * (size_t)n), memcpy(da, tda, sizeof(double) * (size_t)n);
            memcpy(db, tdb, sizeof(double) * (size_t)n);
            moved = tmoved;
        } else {
            memcpy(c, next, sizeof(double) * (size_t)n);
            moved = lloyd_map(t, lim, n, c, next, da, db);
        }
    }
    free(t);
    // The density is even: make the codebook exactly symmetric (Lloyd keeps it so up to rounding).
    for (int i = 0; i < n / 2; i++) {
        const double m = 0.5 * (c[n - 1 - i] - c[i]);
        c[i] = -m, c[n - 1 - i] = m;
    }
}

typedef struct {
    int d, bits;
    float c[256 + 255]; // the centroids, then their midpoints (tq_codebook)
} CachedCodebook;

static CachedCodebook codebooks[64];
static int n_codebooks;
static pthread_mutex_t codebooks_lock = PTHREAD_MUTEX_INITIALIZER;

const float *tq_codebook(int d, int bits) {
    const float *found = NULL;
    pthread_mutex_lock(&codebooks_lock);
    for (int i = 0; i < n_codebooks && !found; i++)
        if (codebooks[i].d == d && codebooks[i].bits == bits) found = codebooks[i].c;
    if (!found && n_codebooks < (int)(sizeof codebooks / sizeof codebooks[0])) {
        CachedCodebook *cb = &codebooks[n_codebooks++];
        double c[256];
        tq_lloyd_max(d, bits, c);
        cb->d = d, cb->bits = bits;
        for (int i = 0; i < 1 << bits; i++) cb->c[i] = (float)c[i];
        for (int i = 0; i + 1 < 1 << bits; i++) cb->c[(1 << bits) + i] = 0.5f * (cb->c[i] + cb->c[i + 1]);
        found = cb->c;
    }
    pthread_mutex_unlock(&codebooks_lock);
    return found;
}

// ---- Gaussian sketches and sign bits --------------------------------------------------------

typedef struct {
    unsigned long seed;
    int m, d;
    float *s;
} CachedSketch;

static CachedSketch sketches[32];
static int n_sketches;
static pthread_mutex_t sketches_lock = PTHREAD_MUTEX_INITIALIZER;

const float *tq_gaussian(unsigned long seed, int m, int d) {
    const float *found = NULL;
    pthread_mutex_lock(&sketches_lock);
    for (int i = 0; i < n_sketches && !found; i++)
        if (sketches[i].seed == seed && sketches[i].m == m && sketches[i].d == d) found = sketches[i].s;
    if (!found && n_sketches < (int)(sizeof sketches / sizeof sketches[0])) {
        float *s = malloc(sizeof(float) * 2 * (size_t)m * (size_t)d);
        if (s) {
            Rng rng;
            rng_seed(&rng, 0x716a6c736b6574ULL ^ (uint64_t)seed); // "qjlsket"
            for (size_t i = 0; i < (size_t)m * (size_t)d; i++) s[i] = (float)rng_normal(&rng);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < d; j++) s[(size_t)m * d + (size_t)j * m + i] = s[(size_t)i * d + j];
            sketches[n_sketches++] = (CachedSketch){seed, m, d, s};
        }
        found = s;
    }
    pthread_mutex_unlock(&sketches_lock);
    return found;
}


float tq_sign_dot(const uint8_t *bits, const float *v, int m) {
    float acc = 0.0f;
    for (int i = 0; i < m; i++) acc += tq_sign(bits, i) * v[i];
    return acc;
}

// ---- One vector of TurboQuant and of QJL --------------------------------------------------

size_t tq_row_bytes(const TqCoder *c) { return c->prod ? tq_signs_at(c) + (size_t)(c->d + 7) / 8 : tq_gamma_at(c); }

void tq_decode(const TqCoder *c, const uint8_t *row, float *x) {
    const int d = c->d;
    float y[MICRO_MAX_WIDTH], pm[MICRO_MAX_WIDTH], back[MICRO_MAX_WIDTH];
    uint8_t codes[MICRO_MAX_WIDTH];
    quant_unpack(row + tq_codes_at(), codes, (size_t)d, c->cbits);
    for (int i = 0; i < d; i++) y[i] = c->levels[codes[i]];
    if (c->prod) {
        const float g = (float)(sqrt(M_PI / 2.0) / d) * fmt_fp16_load(row + tq_gamma_at(c));
        const uint8_t *signs = row + tq_signs_at(c);
        for (int i = 0; i < d; i++) pm[i] = tq_sign(signs, i) * g;
        tq_project_back(c->sketch, d, d, pm, back);
        for (int i = 0; i < d; i++) y[i] += back[i];
    }
    tq_project_back(c->rot, d, d, y, back);
    const float norm = fmt_fp16_load(row);
    for (int i = 0; i < d; i++) x[i] = norm * back[i];
}

void qjl_encode(const float *s, int m, int d, const float *x, uint8_t *row) {
    float sx[4096];
    fmt_fp16_store(row, tq_norm(x, d));
    tq_project(s, m, d, x, sx);
    tq_signs(sx, m, row + 2);
}

float qjl_estimate(const uint8_t *row, const float *sq, int m) {
    return (float)(sqrt(M_PI / 2.0) / m) * fmt_fp16_load(row) * tq_sign_dot(row + 2, sq, m);
}

void qjl_decode(const float *s, int m, int d, const uint8_t *row, float *x) {
    float pm[4096];
    const float g = (float)(sqrt(M_PI / 2.0) / m) * fmt_fp16_load(row);
    for (int i = 0; i < m; i++) pm[i] = tq_sign(row + 2, i) * g;
    tq_project_back(s, m, d, pm, x);
}
