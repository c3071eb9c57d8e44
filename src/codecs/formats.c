// The arithmetic of the 2025 formats (formats.h). Plain C, compiled once: no kernels here.
#include "formats.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "../train/rng.h"

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

// A magnitude a >= 0 of E2M1, E2M3 or E3M2 as its code. With emin = 1 − bias, the representable
// numbers of binade E >= emin are m·2^(E − mbits), and those below 2^emin (subnormal) the same with
// E = emin; numbering them as ((E − emin) << mbits) + m makes the code one monotone integer line, so
// a mantissa rounding up to 2^(mbits+1) lands on the next binade by itself.
static uint8_t small_float_code(MxElem e, float a) {
    const int mbits = mx_mbits[e], emin = 1 - mx_bias[e];
    const uint8_t top = (uint8_t)((1u << (mx_elems[e].bits - 1)) - 1u);
    if (!(a < mx_elems[e].max)) return top; // saturate; inf too
    int E = a > 0.0f ? ilogbf(a) : emin;
    if (E < emin) E = emin;
    const int m = (int)nearbyintf(ldexpf(a, mbits - E)); // ties to even
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
        const float v = ex == 0 ? ldexpf((float)f, 1 - mx_bias[e] - mbits)
                                : ldexpf((float)(f + (1 << mbits)), ex - mx_bias[e] - mbits);
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
    float amax = 0.0f;
    int nan = 0;
    for (int i = 0; i < n; i++) {
        nan |= isnan(x[i]);
        amax = fmaxf(amax, fabsf(x[i]));
    }
    *scale = nan ? 0xff : mx_scale_byte(e, amax);
    const int shift = 127 - (int)*scale; // −X: dividing by 2^X is exact scaling
    for (int i = 0; i < n; i++) codes[i] = *scale == 0xff ? 0 : mx_elem_encode(e, ldexpf(x[i], shift));
}

// ---- NVFP4 ----------------------------------------------------------------------------------

float nvfp4_second_scale(float amax, int four_over_six) {
    return amax > 0.0f && isfinite(amax) ? amax / (four_over_six ? 256.0f * 6.0f : 448.0f * 6.0f) : 0.0f;
}

// Elements of one block against the scale s2·sb; the squared error of reading them back.
static double nvfp4_try(const float *x, int n, float scale, uint8_t *codes) {
    double err = 0.0;
    for (int i = 0; i < n; i++) {
        codes[i] = scale > 0.0f ? mx_elem_encode(MX_E2M1, x[i] / scale) : 0;
        const double d = (double)x[i] - (double)(mx_elem_decode(MX_E2M1, codes[i]) * scale);
        err += d * d;
    }
    return err;
}

uint8_t nvfp4_block_encode(const float *x, int n, float s2, int four_over_six, uint8_t *codes) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
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

// ∫ f and ∫ x·f over [a, b] for f(x) = (1 − x²)^k, k = (d − 3)/2, by composite Simpson (the density
// is smooth inside (−1, 1) and vanishes at ±1 for d > 3; for d = 3 it is flat).
static void cell_moments(double k, double a, double b, double *m0, double *m1) {
    enum { N = 256 };
    const double h = (b - a) / N;
    double s0 = 0.0, s1 = 0.0;
    for (int i = 0; i <= N; i++) {
        const double x = i == N ? b : a + i * h;
        const double f = k == 0.0 ? 1.0 : 1.0 - x * x <= 0.0 ? 0.0 : exp(k * log1p(-x * x));
        const double w = i == 0 || i == N ? 1.0 : i % 2 ? 4.0 : 2.0;
        s0 += w * f, s1 += w * x * f;
    }
    *m0 = s0 * h / 3.0, *m1 = s1 * h / 3.0;
}

void tq_lloyd_max(int d, int bits, double *c) {
    const int n = 1 << bits;
    const double k = (d - 3) / 2.0, sigma = 1.0 / sqrt((double)d);
    // Beyond 12 standard deviations the density is below e^−72 of its peak: integrating there
    // would only spend the points that resolve the cells.
    const double lim = fmin(1.0, 12.0 * sigma);
    for (int i = 0; i < n; i++) c[i] = fmin(0.9, 2.0 * sigma) * (2.0 * i + 1.0 - n) / n;
    for (int iter = 0; iter < 20000; iter++) {
        double moved = 0.0;
        double lo = -lim;
        double next[16];
        for (int i = 0; i < n; i++) {
            const double hi = i + 1 < n ? 0.5 * (c[i] + c[i + 1]) : lim;
            double m0, m1;
            cell_moments(k, lo, hi, &m0, &m1);
            next[i] = m0 > 0.0 ? m1 / m0 : 0.5 * (lo + hi);
            lo = hi;
        }
        for (int i = 0; i < n; i++) {
            moved = fmax(moved, fabs(next[i] - c[i]));
            c[i] = next[i];
        }
        if (moved < 1e-13 * sigma) break;
    }
    // The density is even: make the codebook exactly symmetric (Lloyd keeps it so up to rounding).
    for (int i = 0; i < n / 2; i++) {
        const double m = 0.5 * (c[n - 1 - i] - c[i]);
        c[i] = -m, c[n - 1 - i] = m;
    }
}

typedef struct {
    int d, bits;
    float c[16];
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
        double c[16];
        tq_lloyd_max(d, bits, c);
        cb->d = d, cb->bits = bits;
        for (int i = 0; i < 1 << bits; i++) cb->c[i] = (float)c[i];
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
        float *s = malloc(sizeof(float) * (size_t)m * (size_t)d);
        if (s) {
            Rng rng;
            rng_seed(&rng, 0x716a6c736b6574ULL ^ (uint64_t)seed); // "qjlsket"
            for (size_t i = 0; i < (size_t)m * (size_t)d; i++) s[i] = (float)rng_normal(&rng);
            sketches[n_sketches++] = (CachedSketch){seed, m, d, s};
        }
        found = s;
    }
    pthread_mutex_unlock(&sketches_lock);
    return found;
}

void tq_project(const float *s, int m, int d, const float *x, float *y) {
    for (int i = 0; i < m; i++) {
        float acc = 0.0f;
        for (int j = 0; j < d; j++) acc += s[(size_t)i * d + j] * x[j];
        y[i] = acc;
    }
}

void tq_project_back(const float *s, int m, int d, const float *y, float *x) {
    for (int j = 0; j < d; j++) x[j] = 0.0f;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < d; j++) x[j] += s[(size_t)i * d + j] * y[i];
}

void tq_signs(const float *y, int m, uint8_t *bits) {
    for (int i = 0; i < (m + 7) / 8; i++) bits[i] = 0;
    for (int i = 0; i < m; i++)
        if (y[i] >= 0.0f) bits[i / 8] |= (uint8_t)(1u << (i % 8));
}

float tq_sign_dot(const uint8_t *bits, const float *v, int m) {
    float acc = 0.0f;
    for (int i = 0; i < m; i++) acc += tq_sign(bits, i) * v[i];
    return acc;
}

// ---- One vector of TurboQuant and of QJL --------------------------------------------------

static float norm_of(const float *x, int n) {
    double sq = 0.0;
    for (int i = 0; i < n; i++) sq += (double)x[i] * x[i];
    return (float)sqrt(sq);
}

size_t tq_row_bytes(const TqCoder *c) { return c->prod ? tq_signs_at(c) + (size_t)(c->d + 7) / 8 : tq_gamma_at(c); }

void tq_encode(const TqCoder *c, const float *x, uint8_t *row) {
    const int d = c->d, n = 1 << c->cbits;
    float u[1024], y[1024], sr[1024];
    uint8_t codes[1024];
    const float norm = norm_of(x, d);
    fmt_fp16_store(row, norm);
    for (int i = 0; i < d; i++) u[i] = norm > 0.0f ? x[i] / norm : 0.0f;
    tq_project(c->rot, d, d, u, y);
    for (int i = 0; i < d; i++) { // the nearest centroid: the cells' boundaries are the midpoints
        int k = 0;
        while (k + 1 < n && y[i] > 0.5f * (c->levels[k] + c->levels[k + 1])) k++;
        codes[i] = (uint8_t)k;
    }
    quant_pack(row + tq_codes_at(), codes, (size_t)d, c->cbits);
    if (c->nc && norm > 0.0f) { // the centroid vector renormalised: fold 1/‖ŷ‖ into the stored norm
        for (int i = 0; i < d; i++) u[i] = c->levels[codes[i]];
        const float len = norm_of(u, d);
        if (len > 0.0f) fmt_fp16_store(row, norm / len);
    }
    if (!c->prod) return;
    for (int i = 0; i < d; i++) y[i] -= c->levels[codes[i]];
    fmt_fp16_store(row + tq_gamma_at(c), norm_of(y, d));
    tq_project(c->sketch, d, d, y, sr);
    tq_signs(sr, d, row + tq_signs_at(c));
}

void tq_decode(const TqCoder *c, const uint8_t *row, float *x) {
    const int d = c->d;
    float y[1024], pm[1024], back[1024];
    uint8_t codes[1024];
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
    fmt_fp16_store(row, norm_of(x, d));
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
