// The 2025 formats (src/codecs/formats.h) against truths written here, not taken from the code:
//   - every E2M1 / E2M3 / E3M2 code decodes to (−1)^s · 2^(e−bias) · (1 + m/2^M) (e > 0) or
//     (−1)^s · 2^(1−bias) · m/2^M (e = 0); E2M1's magnitudes are the spec's list;
//   - encoding is the nearest representable value, ties to the even code, saturated at the max;
//   - MX scales: all-zero block, max exactly a power of two (and just below one), subnormal
//     elements, NaN; stream bits 4.25 / 6.25 / 8.25;
//   - NVFP4 streams against a double-precision reference of the recipe, with and without 4over6;
//   - TurboQuant's Lloyd-Max codebook: for large d, times √d, the Gaussian Lloyd-Max levels (Max
//     1960); at b = 1 and d = 32 the closed form E|x| = Γ(d/2) / (√π Γ((d+1)/2));
//   - estimators over many random matrices (drawn here): TurboQuant prod and QJL unbiased for inner
//     products (mean within 3 standard errors), TurboQuant mse at b = 1 biased by d·E|x|² (→ 2/π).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats.h"
#include "kvcache.h"

#include "check.h"

static uint64_t rng_state = 0x3c6ef372fe94f82bull;
static double urand(void) { return check_uniform(&rng_state); }
static double nrand(void) { // Box-Muller
    const double u = 1.0 - urand(), v = urand();
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

// ---- the small element formats --------------------------------------------------------------

static const struct { MxElem e; int ebits, mbits, bias; double max; } smalls[] = {
    {MX_E2M1, 2, 1, 1, 6.0}, {MX_E2M3, 2, 3, 1, 7.5}, {MX_E3M2, 3, 2, 3, 28.0}};

static double spec_value(int ebits, int mbits, int bias, int code) {
    const int s = code >> (ebits + mbits), e = (code >> mbits) & ((1 << ebits) - 1), m = code & ((1 << mbits) - 1);
    const double mag = e == 0 ? pow(2.0, 1 - bias) * m / pow(2.0, mbits) : pow(2.0, e - bias) * (1.0 + m / pow(2.0, mbits));
    return s ? -mag : mag;
}

static void test_small_formats(void) {
    const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    for (int c = 0; c < 16; c++)
        CHECK(mx_elem_decode(MX_E2M1, (uint8_t)c) == (c & 8 ? -e2m1[c & 7] : e2m1[c & 7]), "e2m1 code %d", c);
    for (size_t f = 0; f < sizeof smalls / sizeof smalls[0]; f++) {
        const int bits = 1 + smalls[f].ebits + smalls[f].mbits, n = 1 << (bits - 1);
        CHECK(mx_elem_info(smalls[f].e)->bits == bits && mx_elem_info(smalls[f].e)->max == smalls[f].max, "%s info",
              mx_elem_info(smalls[f].e)->name);
        double mags[64];
        for (int c = 0; c < 2 * n; c++) { // exhaustive decode
            const double want = spec_value(smalls[f].ebits, smalls[f].mbits, smalls[f].bias, c);
            CHECK(mx_elem_decode(smalls[f].e, (uint8_t)c) == want, "%s code %d: %g, want %g", mx_elem_info(smalls[f].e)->name,
                  c, mx_elem_decode(smalls[f].e, (uint8_t)c), want);
            CHECK(mx_elem_table(smalls[f].e)[c] == want, "%s table code %d", mx_elem_info(smalls[f].e)->name, c);
            if (c < n) mags[c] = want;
        }
        CHECK(mags[n - 1] == smalls[f].max, "%s max", mx_elem_info(smalls[f].e)->name);
        for (int c = 0; c < n; c++) { // every value to itself, both signs
            CHECK(mx_elem_encode(smalls[f].e, (float)mags[c]) == c, "%s %g", mx_elem_info(smalls[f].e)->name, mags[c]);
            if (c) CHECK(mx_elem_encode(smalls[f].e, (float)-mags[c]) == (n | c), "%s -%g", mx_elem_info(smalls[f].e)->name, mags[c]);
        }
        for (int c = 0; c + 1 < n; c++) { // ties to the even code; either side of a tie to the nearer
            const double mid = 0.5 * (mags[c] + mags[c + 1]), gap = mags[c + 1] - mags[c];
            const int even = c % 2 == 0 ? c : c + 1;
            CHECK(mx_elem_encode(smalls[f].e, (float)mid) == even, "%s tie %g -> %d, want %d", mx_elem_info(smalls[f].e)->name,
                  mid, mx_elem_encode(smalls[f].e, (float)mid), even);
            CHECK(mx_elem_encode(smalls[f].e, (float)-mid) == (n | even), "%s tie -%g", mx_elem_info(smalls[f].e)->name, mid);
            CHECK(mx_elem_encode(smalls[f].e, (float)(mid - gap * 1e-3)) == c, "%s below tie %g", mx_elem_info(smalls[f].e)->name, mid);
            CHECK(mx_elem_encode(smalls[f].e, (float)(mid + gap * 1e-3)) == c + 1, "%s above tie %g", mx_elem_info(smalls[f].e)->name, mid);
        }
        const float beyond[] = {(float)smalls[f].max * 1.01f, (float)smalls[f].max * 2.0f, 1e30f, INFINITY};
        for (size_t i = 0; i < sizeof beyond / sizeof beyond[0]; i++) {
            CHECK(mx_elem_encode(smalls[f].e, beyond[i]) == n - 1, "%s saturates %g", mx_elem_info(smalls[f].e)->name, beyond[i]);
            CHECK(mx_elem_encode(smalls[f].e, -beyond[i]) == (2 * n - 1), "%s saturates -%g", mx_elem_info(smalls[f].e)->name, beyond[i]);
        }
        for (int k = 0; k < 20000; k++) { // random values: the nearest magnitude (ties have no measure)
            const double x = urand() * smalls[f].max * 1.2;
            int best = 0;
            for (int c = 1; c < n; c++)
                if (fabs(x - mags[c]) < fabs(x - mags[best])) best = c;
            CHECK(mx_elem_encode(smalls[f].e, (float)x) == best, "%s %.9g -> %d, want %d", mx_elem_info(smalls[f].e)->name, x,
                  mx_elem_encode(smalls[f].e, (float)x), best);
        }
    }
    // The 8-bit elements: FP8 saturating, int8 as a fixed point of 6 fraction bits, symmetric.
    for (int e = MX_E4M3; e <= MX_INT8; e++) // the read path's table: the decoder's floats, NaN included
        for (int c = 0; c < 256; c++) {
            const float t = mx_elem_table((MxElem)e)[c], v = mx_elem_decode((MxElem)e, (uint8_t)c);
            CHECK(memcmp(&t, &v, sizeof t) == 0, "%s table code %d", mx_elem_info((MxElem)e)->name, c);
        }
    CHECK(mx_elem_decode(MX_E4M3, mx_elem_encode(MX_E4M3, 1000.0f)) == 448.0f, "e4m3 saturates");
    CHECK(mx_elem_decode(MX_E5M2, mx_elem_encode(MX_E5M2, -1e9f)) == -57344.0f, "e5m2 saturates");
    CHECK(mx_elem_decode(MX_INT8, mx_elem_encode(MX_INT8, 1.0f)) == 1.0f, "int8 1");
    CHECK(mx_elem_decode(MX_INT8, mx_elem_encode(MX_INT8, -3.0f)) == -127.0f / 64, "int8 saturates");
    CHECK(mx_elem_decode(MX_INT8, mx_elem_encode(MX_INT8, 1.5f / 64)) == 2.0f / 64, "int8 ties to even");
    CHECK(mx_elem_from_name("e3m2") == MX_E3M2 && mx_elem_from_name("e9m9") < 0 && mx_elem_from_name("e2m") < 0, "names");
}

// The encoders' branch-free E2M1 against mx_elem_encode (checked equal over all 2^32 floats once,
// when it was written): a stride through every bit pattern, and each midpoint, magnitude and end
// with its float neighbours, both signs.
static void test_e2m1_branch_free(void) {
    for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) {
        float x;
        const uint32_t bits = (uint32_t)u;
        memcpy(&x, &bits, sizeof x);
        CHECK(mx_e2m1_encode(x) == mx_elem_encode(MX_E2M1, x), "e2m1 of bits %08x", (unsigned)bits);
    }
    const float edges[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f,
                           5.0f, 6.0f, 1e-45f, 0x1p-126f, 3.4e38f, INFINITY, NAN};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        for (int sign = -1; sign <= 1; sign += 2) {
            const float e = (float)sign * edges[i], near[3] = {nextafterf(e, -INFINITY), e, nextafterf(e, INFINITY)};
            for (int k = 0; k < 3; k++)
                CHECK(mx_e2m1_encode(near[k]) == mx_elem_encode(MX_E2M1, near[k]), "e2m1 of %.9g", near[k]);
        }
}

// ---- MX blocks ------------------------------------------------------------------------------

static void block_read(MxElem e, const float *x, float *out) {
    uint8_t scale, codes[32];
    mx_block_encode(e, x, 32, &scale, codes);
    for (int i = 0; i < 32; i++) out[i] = mx_elem_decode(e, codes[i]) * mx_scale_decode(scale);
}

static void test_mx_scales(void) {
    float x[32], out[32];
    uint8_t scale, codes[32];
    memset(x, 0, sizeof x);
    mx_block_encode(MX_E2M1, x, 32, &scale, codes);
    CHECK(scale == 0, "all-zero block: scale byte %d, want 0 (2^-127)", scale);
    block_read(MX_E2M1, x, out);
    for (int i = 0; i < 32; i++) CHECK(out[i] == 0.0f, "all-zero block reads %g", out[i]);
    // max exactly 8 = 2^3: X = 3 − emax(2) = 1, the max is element 4 and reads back exactly.
    for (int i = 0; i < 32; i++) x[i] = (float)(urand() * 8.0 - 4.0);
    x[5] = -8.0f;
    mx_block_encode(MX_E2M1, x, 32, &scale, codes);
    CHECK(scale == 128, "max 8 (e2m1): scale byte %d, want 128 (2^1)", scale);
    block_read(MX_E2M1, x, out);
    CHECK(out[5] == -8.0f, "max 8 reads %g", out[5]);
    // max just below 8: X = 0 and the max saturates at 6 (the format's known clipping).
    x[5] = -7.99f;
    mx_block_encode(MX_E2M1, x, 32, &scale, codes);
    CHECK(scale == 127, "max 7.99: scale byte %d, want 127", scale);
    block_read(MX_E2M1, x, out);
    CHECK(out[5] == -6.0f, "max 7.99 reads %g, want -6", out[5]);
    // Subnormal elements: in a block of max 6 (X = 0) E2M1's quantum below 1 is 0.5.
    memset(x, 0, sizeof x);
    x[0] = 6.0f, x[1] = 0.25f, x[2] = 0.75f, x[3] = 0.3f, x[4] = -0.2f;
    block_read(MX_E2M1, x, out);
    CHECK(out[1] == 0.0f && out[2] == 1.0f && out[3] == 0.5f && out[4] == 0.0f && signbit(out[4]),
          "e2m1 subnormals: %g %g %g %g", out[1], out[2], out[3], out[4]);
    // E3M2 at max 16 (X = 0): quantum 1/16 below 2^-2; 1/32 ties to 0, 3/32 to 2/16.
    x[0] = 16.0f, x[1] = 1.0f / 32, x[2] = 3.0f / 32, x[3] = 5.0f / 64;
    block_read(MX_E3M2, x, out);
    CHECK(out[1] == 0.0f && out[2] == 0.125f && out[3] == 0.0625f, "e3m2 subnormals: %g %g %g", out[1], out[2], out[3]);
    // A tiny block clamps X at -127; a NaN makes the scale NaN (0xFF), the whole block NaN.
    memset(x, 0, sizeof x);
    x[0] = 1e-38f;
    mx_block_encode(MX_E4M3, x, 32, &scale, codes);
    CHECK(scale == 0, "tiny block: scale byte %d", scale);
    x[7] = NAN;
    mx_block_encode(MX_E2M1, x, 32, &scale, codes);
    CHECK(scale == 0xff && isnan(mx_scale_decode(scale)), "NaN block: scale byte %d", scale);
    // Bits per number of whole streams, metadata included.
    const struct { const char *spec; double bits; } widths[] = {
        {"mx:elem=e2m1", 4.25}, {"mx:elem=e2m3", 6.25}, {"mx:elem=e3m2", 6.25}, {"mx:elem=e4m3", 8.25},
        {"mx:elem=e5m2", 8.25}, {"mx:elem=int8", 8.25}, {"nvfp4", 5.5}, {"nvfp4:scale2=none", 4.5},
        {"turboquant:bits=3", 3.5}, {"turboquant:bits=3,mode=prod", 4.0}, {"turboquant:preset=k3v4_nc", 3.5},
        {"turboquant:bits=8", 8.5}, {"turboquant:preset=k8v4", 8.5}, {"qjl", 1.5}, {"qjl:m=64", 2.5}};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        KVStream s;
        char err[256];
        if (kvstream_init(&s, SPEC(widths[i].spec), KV_ROLE_KEY, 6, 32, 4, err, sizeof err)) {
            CHECK(0, "%s: %s", widths[i].spec, err);
            continue;
        }
        float v[192];
        for (int k = 0; k < 192; k++) v[k] = (float)nrand();
        for (int t = 0; t < 3; t++) kvstream_append(&s, v);
        CHECK(kvstream_bits_per_element(&s) == widths[i].bits, "%s: %g bits, want %g", widths[i].spec,
              kvstream_bits_per_element(&s), widths[i].bits);
        kvstream_free(&s);
    }
}

// ---- NVFP4 against a double-precision reference ---------------------------------------------

static double nearest_of(const double *vals, int n, double x) { // ties: the lower-index (even) one
    int best = 0;
    for (int i = 1; i < n; i++)
        if (fabs(x - vals[i]) < fabs(x - vals[best])) best = i;
    return vals[best];
}

static void test_nvfp4(void) {
    double e4m3[127], e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    for (int c = 0; c < 127; c++) e4m3[c] = spec_value(4, 3, 7, c); // 0x7f is NaN: not a scale
    for (int fos = 0; fos < 2; fos++) {
        KVStream s;
        char err[256];
        const char *spec = fos ? "nvfp4:4over6" : "nvfp4";
        if (kvstream_init(&s, SPEC(spec), KV_ROLE_VALUE, 2, 64, 200, err, sizeof err)) {
            CHECK(0, "%s: %s", spec, err);
            continue;
        }
        int mismatches = 0;
        for (int t = 0; t < 200; t++) {
            float v[128];
            const double mag = pow(10.0, -2.0 + 4.0 * urand());
            for (int i = 0; i < 128; i++) v[i] = (float)(mag * nrand() * (urand() < 0.05 ? 8.0 : 1.0));
            kvstream_append(&s, v);
            for (int h = 0; h < 2; h++) {
                float got[64];
                s.ops->read(s.state, h, t, got);
                double amax = 0;
                for (int i = 0; i < 64; i++) amax = fmax(amax, fabs(v[h * 64 + i]));
                const double st = amax / ((fos ? 256.0 : 448.0) * 6.0);
                for (int b = 0; b < 4; b++) {
                    const float *x = v + h * 64 + b * 16;
                    double amax_b = 0, best_err = INFINITY, ref[16] = {0};
                    for (int i = 0; i < 16; i++) amax_b = fmax(amax_b, fabs(x[i]));
                    for (int k = 0; k < 1 + fos; k++) {
                        const double sb = nearest_of(e4m3, 127, fmin(448.0, amax_b / (k ? 4.0 : 6.0) / st));
                        double err2 = 0, trial[16];
                        for (int i = 0; i < 16; i++) {
                            const double e = sb > 0 ? nearest_of(e2m1, 8, fmin(6.0, fabs(x[i]) / (st * sb))) : 0;
                            trial[i] = copysign(e * st * sb, x[i]);
                            err2 += (x[i] - trial[i]) * (x[i] - trial[i]);
                        }
                        if (err2 < best_err) {
                            best_err = err2;
                            memcpy(ref, trial, sizeof ref);
                        }
                    }
                    for (int i = 0; i < 16; i++)
                        if (fabs(got[b * 16 + i] - ref[i]) > 1e-6 * amax) mismatches++;
                }
            }
        }
        // float and double may round a number lying within 1e-7 of a tie differently; nothing else.
        CHECK(mismatches <= 2, "%s: %d of 25600 numbers differ from the double-precision reference", spec, mismatches);
        kvstream_free(&s);
    }
}

// ---- TurboQuant's codebook ------------------------------------------------------------------

static void test_codebook(void) {
    double c[16];
    const double g1 = 0.7979, g2[2] = {0.4528, 1.5104}, g3[4] = {0.2451, 0.7560, 1.3440, 2.1520};
    const int d = 1 << 16;
    tq_lloyd_max(d, 1, c);
    CHECK(fabs(c[1] * sqrt(d) - g1) < 1e-3 && c[0] == -c[1], "b=1, d=2^16: %.6f, want ±%.4f", c[1] * sqrt(d), g1);
    tq_lloyd_max(d, 2, c);
    for (int i = 0; i < 2; i++)
        CHECK(fabs(c[2 + i] * sqrt(d) - g2[i]) < 1e-3 && c[1 - i] == -c[2 + i], "b=2, d=2^16: %.6f, want ±%.4f",
              c[2 + i] * sqrt(d), g2[i]);
    tq_lloyd_max(d, 3, c);
    for (int i = 0; i < 4; i++)
        CHECK(fabs(c[4 + i] * sqrt(d) - g3[i]) < 1e-3, "b=3, d=2^16: %.6f, want ±%.4f", c[4 + i] * sqrt(d), g3[i]);
    // b = 1 at d = 32: the conditional mean of |x|, in closed form.
    tq_lloyd_max(32, 1, c);
    const double closed = exp(lgamma(16.0) - lgamma(16.5)) / sqrt(M_PI);
    CHECK(fabs(c[1] - closed) < 1e-9, "b=1, d=32: %.12f, want E|x| = %.12f", c[1], closed);
    // The shared copy is the same codebook, in float.
    const float *shared = tq_codebook(32, 1);
    CHECK(shared && shared[1] == (float)c[1], "tq_codebook(32, 1)");
}

// The mean squared error per coordinate of a codebook c[n] for the density (1 − x²)^((d−3)/2),
// by the test's own composite Simpson over [−lim, lim] (lim: 12 standard deviations, or 1), each
// point rounded to its nearest level by search.
static double codebook_mse(int d, const double *c, int n) {
    const int N = 400000;
    const double k = (d - 3) / 2.0, lim = fmin(1.0, 12.0 / sqrt(d)), h = 2.0 * lim / N;
    double num = 0.0, den = 0.0;
    for (int i = 0, j = 0; i <= N; i++) {
        const double x = -lim + i * h, f = pow(fmax(0.0, 1.0 - x * x), k), w = i == 0 || i == N ? 1 : i % 2 ? 4 : 2;
        while (j + 1 < n && fabs(c[j + 1] - x) <= fabs(c[j] - x)) j++;
        num += w * f * (x - c[j]) * (x - c[j]), den += w * f;
    }
    return num / den;
}

// Up to 256 levels (8 bits): every codebook sorted, inside (−1, 1) and exactly symmetric; the error
// falls with every bit; at 8 bits it is Panter and Dite's high-resolution error
// (∫ f^(1/3))³ / (12·256²) (f normalised, integrated here) to 1%; at d = 2^16 the unit-vector errors
// d·D are Max's Gaussian ones (1 − 2/π = 0.3634, 0.1175, 0.03454, 0.009497 for b = 1..4) to 1%.
static void test_codebook_wide(void) {
    double c[256], prev = INFINITY;
    for (int b = 1; b <= 8; b++) {
        const int n = 1 << b;
        tq_lloyd_max(32, b, c);
        int sorted = 1, symmetric = 1;
        for (int i = 0; i < n; i++) {
            sorted &= c[i] > -1.0 && c[i] < 1.0 && (i == 0 || c[i] > c[i - 1]);
            symmetric &= c[i] == -c[n - 1 - i];
        }
        CHECK(sorted && symmetric, "d=32, %d bits: not sorted in (-1, 1) or not symmetric", b);
        const double mse = codebook_mse(32, c, n);
        CHECK(mse < prev, "d=32: %d bits' error %.3g is not below %d bits' %.3g", b, mse, b - 1, prev);
        if (getenv("SHOW_ESTIMATES")) printf("d=32 b=%d: unit-vector mse %.6g\n", b, 32 * mse);
        prev = mse;
    }
    // Panter-Dite at 8 bits (c holds the 8-bit codebook): ∫ f^(1/3) over the normalised density.
    const int N = 400000;
    double z = 0.0, z3 = 0.0;
    for (int i = 0; i <= N; i++) {
        const double x = -1.0 + 2.0 * i / N, f = pow(fmax(0.0, 1.0 - x * x), 14.5), w = i == 0 || i == N ? 1 : i % 2 ? 4 : 2;
        z += w * f, z3 += w * cbrt(f);
    }
    z *= 2.0 / N / 3.0, z3 *= 2.0 / N / 3.0;
    const double pd = pow(z3 / cbrt(z), 3) / (12.0 * 256.0 * 256.0), mse8 = codebook_mse(32, c, 256);
    CHECK(fabs(mse8 / pd - 1.0) < 0.01, "d=32, 8 bits: error %.6g, Panter-Dite %.6g", mse8, pd);
    static const double max1960[4] = {0.36338, 0.11748, 0.03454, 0.009497};
    for (int b = 1; b <= 4; b++) {
        tq_lloyd_max(1 << 16, b, c);
        const double unit = 65536.0 * codebook_mse(1 << 16, c, 1 << b);
        CHECK(fabs(unit / max1960[b - 1] - 1.0) < 0.01, "d=2^16, %d bits: unit-vector error %.5f, Max %.5f", b, unit,
              max1960[b - 1]);
    }
    // A stream makes its codebook once per process: the 8-bit one must be quick to make.
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tq_lloyd_max(32, 8, c);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double ms = 1e3 * (double)(t1.tv_sec - t0.tv_sec) + 1e-6 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK(ms < 200.0, "the 8-bit codebook took %.1f ms", ms);
    if (getenv("SHOW_ESTIMATES")) printf("8-bit codebook: %.2f ms\n", ms);
    // The shared float copy at 8 bits.
    const float *shared = tq_codebook(32, 8);
    CHECK(shared && shared[255] == (float)c[255] && shared[0] == -shared[255], "tq_codebook(32, 8)");
}

// tq_encode's cells: with the identity for a rotation, each coordinate of x/‖x‖ gets the code of
// its nearest centroid (by distance in double; a tie, of no measure here, would go to the lower),
// at every width up to 8 bits (the 5- to 8-bit codes are found by halving, the rest by counting).
static void test_tq_encode_cells(void) {
    enum { D = 32 };
    static float eye[2 * D * D];
    for (int i = 0; i < D; i++) eye[i * D + i] = eye[D * D + i * D + i] = 1.0f;
    for (int b = 1; b <= 8; b++) {
        const float *levels = tq_codebook(D, b);
        const TqCoder c = {.d = D, .cbits = b, .rot = eye, .levels = levels};
        int wrong = 0;
        for (int k = 0; k < 300; k++) {
            float x[D];
            uint8_t row[2 + D], codes[D];
            double sq = 0.0;
            for (int i = 0; i < D; i++) x[i] = (float)nrand(), sq += (double)x[i] * x[i];
            const float norm = (float)sqrt(sq);
            tq_encode(&c, x, row);
            quant_unpack(row + tq_codes_at(), codes, D, b);
            for (int i = 0; i < D; i++) {
                const double u = x[i] / norm;
                int best = 0;
                for (int m = 1; m < 1 << b; m++)
                    if (fabs(u - levels[m]) < fabs(u - levels[best])) best = m;
                wrong += codes[i] != best;
            }
        }
        CHECK(wrong == 0, "tq_encode at %d bits: %d of %d coordinates not in their nearest centroid's cell", b, wrong,
              300 * D);
    }
}

// tq_encode_heads codes vectors side by side (their sums' chains interleaved): every row the bytes
// tq_encode gives the vector alone, for 1 to 11 vectors (a group of TQ_SIDE and a part), at widths
// counted and halved, mse, nc and prod, with a random rotation and sketch.
static void test_tq_encode_heads(void) {
    enum { D = 32, V = 11 };
    static float rot[2 * D * D], sketch[2 * D * D];
    for (int i = 0; i < D; i++)
        for (int j = 0; j < D; j++) {
            rot[i * D + j] = rot[D * D + j * D + i] = (float)nrand() / 6.0f;
            sketch[i * D + j] = sketch[D * D + j * D + i] = (float)nrand();
        }
    float x[V * D];
    for (int i = 0; i < V * D; i++) x[i] = (float)nrand();
    for (int i = 0; i < D; i++) x[3 * D + i] = 0.0f; // a zero vector: norm 0, no renormalising
    for (int b = 2; b <= 8; b += 3)
        for (int mode = 0; mode < 3; mode++) {
            const TqCoder c = {.d = D, .cbits = b, .nc = mode == 1, .prod = mode == 2, .rot = rot, .sketch = sketch,
                               .levels = tq_codebook(D, b)};
            const size_t rb = tq_row_bytes(&c);
            for (int n = 1; n <= V; n += 5) {
                uint8_t one[V][2 + 2 * D + 8], side[V][2 + 2 * D + 8];
                uint8_t *rows[V];
                for (int v = 0; v < n; v++) tq_encode(&c, x + v * D, one[v]), rows[v] = side[v];
                tq_encode_heads(&c, x, n, rows);
                int differ = 0;
                for (int v = 0; v < n; v++) differ += memcmp(one[v], side[v], rb) != 0;
                CHECK(differ == 0, "tq_encode_heads: %d of %d rows differ from tq_encode's (%d bits, mode %d)", differ, n, b,
                      mode);
            }
        }
}

// ---- Estimators over random matrices --------------------------------------------------------

// A Haar-random orthogonal d × d matrix: Gram-Schmidt on Gaussian columns (the sign of each column
// fixed by a positive R diagonal, which Gram-Schmidt gives).
static void haar(int d, float *r) {
    double *q = malloc(sizeof(double) * (size_t)d * d);
    for (int i = 0; i < d * d; i++) q[i] = nrand();
    for (int c = 0; c < d; c++) {
        for (int p = 0; p < c; p++) {
            double dot = 0;
            for (int i = 0; i < d; i++) dot += q[i * d + p] * q[i * d + c];
            for (int i = 0; i < d; i++) q[i * d + c] -= dot * q[i * d + p];
        }
        double nn = 0;
        for (int i = 0; i < d; i++) nn += q[i * d + c] * q[i * d + c];
        for (int i = 0; i < d; i++) q[i * d + c] /= sqrt(nn);
    }
    for (int i = 0; i < d * d; i++) r[i] = (float)q[i];
    free(q);
}

// After an m × d matrix, its transpose: the layout tq_project and tq_encode take (formats.h).
static void append_transpose(float *a, int m, int d) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < d; j++) a[(size_t)m * d + (size_t)j * m + i] = a[(size_t)i * d + j];
}

static void gaussian(int m, int d, float *s) {
    for (int i = 0; i < m * d; i++) s[i] = (float)nrand();
    append_transpose(s, m, d);
}

static double dot(const float *a, const float *b, int n) {
    double acc = 0;
    for (int i = 0; i < n; i++) acc += (double)a[i] * b[i];
    return acc;
}

// Mean and standard error of n samples.
typedef struct {
    double sum, sq;
    int n;
} Stat;
static void stat_add(Stat *s, double x) { s->sum += x, s->sq += x * x, s->n++; }
static double stat_mean(const Stat *s) { return s->sum / s->n; }
static double stat_se(const Stat *s) {
    const double m = stat_mean(s);
    return sqrt((s->sq / s->n - m * m) / (s->n - 1));
}

static void test_estimators(void) {
    enum { D = 32, TRIALS = 3000 };
    float x[D], y[D], xhat[D], r[2 * D * D], s[2 * D * D], s64[2 * 64 * D];
    uint8_t row[256];
    for (int i = 0; i < D; i++) x[i] = (float)nrand(), y[i] = (float)(nrand() + 0.5 * x[i]);
    const double truth = dot(x, y, D);
    // TurboQuant prod at b = 2 (1-bit mse + 1-bit QJL) and 3; mse at b = 1.
    const float *levels1 = tq_codebook(D, 1), *levels2 = tq_codebook(D, 2);
    Stat prod2 = {0}, prod3 = {0}, mse1 = {0}, mse2 = {0}, qjl32 = {0}, qjl64 = {0};
    for (int k = 0; k < TRIALS; k++) {
        haar(D, r);
        append_transpose(r, D, D);
        gaussian(D, D, s);
        TqCoder c = {.d = D, .cbits = 1, .prod = 1, .rot = r, .sketch = s, .levels = levels1};
        tq_encode(&c, x, row);
        tq_decode(&c, row, xhat);
        stat_add(&prod2, dot(xhat, y, D));
        c = (TqCoder){.d = D, .cbits = 2, .prod = 1, .rot = r, .sketch = s, .levels = levels2};
        tq_encode(&c, x, row);
        tq_decode(&c, row, xhat);
        stat_add(&prod3, dot(xhat, y, D));
        c = (TqCoder){.d = D, .cbits = 2, .rot = r, .levels = levels2};
        tq_encode(&c, x, row);
        tq_decode(&c, row, xhat);
        stat_add(&mse2, dot(xhat, y, D));
        c = (TqCoder){.d = D, .cbits = 1, .rot = r, .levels = levels1};
        tq_encode(&c, x, row);
        tq_decode(&c, row, xhat);
        stat_add(&mse1, dot(xhat, y, D));
        // nc: the read-back keeps x's norm (to the fp16 norm's rounding), where mse shrinks it.
        if (k < 50) {
            c.nc = 1;
            tq_encode(&c, x, row);
            tq_decode(&c, row, xhat);
            const double nx = sqrt(dot(x, x, D)), nh = sqrt(dot(xhat, xhat, D));
            CHECK(fabs(nh - nx) <= 1e-3 * nx, "nc: |x^| = %.6f, |x| = %.6f", nh, nx);
        }
        // QJL: the score from S·y, and m = 64 rows.
        float sy[64];
        qjl_encode(s, D, D, x, row);
        tq_project(s, D, D, y, sy);
        stat_add(&qjl32, qjl_estimate(row, sy, D));
        gaussian(64, D, s64);
        if (k == 0) { // tq_project down the transpose's rows: each y_i the plain sum in order of j
            float sx[64];
            int differ = 0;
            tq_project(s64, 64, D, x, sx);
            for (int i = 0; i < 64; i++) {
                float acc = 0.0f;
                for (int j = 0; j < D; j++) acc += s64[i * D + j] * x[j];
                differ += memcmp(&acc, &sx[i], sizeof acc) != 0;
            }
            CHECK(!differ, "tq_project: %d of 64 numbers differ from the sums in order", differ);
        }
        qjl_encode(s64, 64, D, x, row);
        tq_project(s64, 64, D, y, sy);
        stat_add(&qjl64, qjl_estimate(row, sy, 64));
    }
    // The rows keep ‖x‖ (and γ) in fp16: the estimators are unbiased for the inner product of the
    // stored norm, within 2^-11 relatively of the truth.
    const double tol16 = 1e-3 * fabs(truth);
    const Stat *unbiased[] = {&prod2, &prod3, &qjl32, &qjl64};
    const char *names[] = {"turboquant prod b=2", "turboquant prod b=3", "qjl m=32", "qjl m=64"};
    for (int i = 0; i < 4; i++) {
        CHECK(fabs(stat_mean(unbiased[i]) - truth) <= 3 * stat_se(unbiased[i]) + tol16,
              "%s: mean %.5f ± %.5f over %d matrices, truth %.5f", names[i], stat_mean(unbiased[i]), stat_se(unbiased[i]),
              TRIALS, truth);
        if (getenv("SHOW_ESTIMATES"))
            printf("%-22s mean %.5f se %.5f truth %.5f\n", names[i], stat_mean(unbiased[i]), stat_se(unbiased[i]), truth);
    }
    // mse alone at b = 1: E x̂ = d·c₁²·x with c₁ = E|x| of the coordinate density (0.6466 at d = 32; 2/π as d grows).
    const double c1 = exp(lgamma(D / 2.0) - lgamma((D + 1) / 2.0)) / sqrt(M_PI), factor = D * c1 * c1;
    CHECK(fabs(stat_mean(&mse1) - factor * truth) <= 3 * stat_se(&mse1) + tol16,
          "turboquant mse b=1: mean %.5f ± %.5f, want %.4f × %.5f", stat_mean(&mse1), stat_se(&mse1), factor, truth);
    CHECK(fabs(stat_mean(&mse1) - truth) > 6 * stat_se(&mse1), "turboquant mse b=1 should be biased: %.5f vs %.5f",
          stat_mean(&mse1), truth);
    CHECK(fabs(factor - 2.0 / M_PI) < 0.012, "d·E|x|² at d=32 = %.4f, near 2/π", factor);
    // What the unbiasedness costs: prod at b = 3 is mse at 2 bits plus QJL of the residual r, whose
    // estimate of ⟨y, r⟩ varies with the sketch by ≈ (π/2)·‖y‖²‖r‖²/m, more than mse's own error
    // varies with the rotation (≈ ‖y‖²‖r‖²/d): prod trades mse's bias — the same shrinking factor
    // for every vector, which softmax takes as a slightly higher temperature — for a larger variance.
    const double var_mse2 = stat_se(&mse2) * stat_se(&mse2) * TRIALS, var_prod3 = stat_se(&prod3) * stat_se(&prod3) * TRIALS;
    CHECK(var_prod3 > 1.3 * var_mse2, "variance of the inner product: prod b=3 %.4f, mse b=2 %.4f", var_prod3, var_mse2);
    if (getenv("SHOW_ESTIMATES"))
        printf("<y, x^>: mse b=2 mean %.4f sd %.4f; prod b=3 mean %.4f sd %.4f (truth %.4f, |x||y| = %.4f)\n",
               stat_mean(&mse2), sqrt(var_mse2), stat_mean(&prod3), sqrt(var_prod3), truth, sqrt(dot(x, x, D) * dot(y, y, D)));
    if (getenv("SHOW_ESTIMATES"))
        printf("turboquant mse b=1     mean %.5f se %.5f truth %.5f (x %.4f = %.5f)\n", stat_mean(&mse1), stat_se(&mse1),
               truth, factor, factor * truth);
}

int main(void) {
    test_small_formats();
    test_e2m1_branch_free();
    test_mx_scales();
    test_nvfp4();
    test_codebook();
    test_codebook_wide();
    test_tq_encode_cells();
    test_tq_encode_heads();
    test_estimators();
    if (failures) {
        fprintf(stderr, "test_codec_formats: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_codec_formats: ok\n");
    return 0;
}
