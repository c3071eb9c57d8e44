// exp_neg (softmax's exp) over a sweep of float bit patterns, against exp in double: accurate on
// its domain, and a defined, documented value everywhere else (NaN, ±inf, huge, tiny, subnormal).
// Run under UBSan too, where a float-to-int conversion of NaN or a shift of a negative would stop it.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exp_fixed.h"
#include "fastmath.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// What exp_neg must give for x (see fastmath.h); returns 1 when y is right.
static int acceptable(float x, float y, double *worst_rel) {
    if (isnan(x)) return isnan(y);
    if (x == INFINITY) return isnan(y);
    if (x < -87.0f) return y == exp_neg(-87.0f) && y > 0 && y < 1.7e-38f;
    if (x >= 88.37f) return x < 88.376f ? (isinf(y) || fabs(y - exp((double)x)) / exp((double)x) < 1e-6) : y == INFINITY;
    double want = exp((double)x), rel = fabs((double)y - want) / want;
    if (x <= 0 && rel > *worst_rel) *worst_rel = rel;
    return rel < (x <= 0 ? 3e-7 : 1e-6);
}

#define BATCH 4096

static float xs[BATCH], ys[BATCH];
static long checked, bad;
static double worst;

// Runs a batch through the vectorised loop softmax uses and one value at a time; both must agree
// bit for bit (or both be NaN) and be acceptable.
static void run_batch(int k) {
#pragma omp simd
    for (int i = 0; i < k; i++) ys[i] = exp_neg(xs[i]);
    for (int i = 0; i < k; i++) {
        float one = exp_neg(xs[i]);
        int same = memcmp(&one, &ys[i], 4) == 0 || (isnan(one) && isnan(ys[i]));
        if ((!same || !acceptable(xs[i], ys[i], &worst)) && bad++ < 10)
            fprintf(stderr, "exp_neg(%a = %.9g) = %.9g (one by one %.9g), exp = %.9g\n", (double)xs[i],
                    (double)xs[i], (double)ys[i], (double)one, exp((double)xs[i]));
        checked++;
    }
}

// exp_fixed (the loss's e^x) against long double's expl, an independent and more precise truth:
// within 2 ulp of a double for normal results, 2 of the smallest subnormal below, over a million
// doubles spread over [-760, 720] (every exponent of x's magnitude, random mantissas) and the edges.
static void check_exp_fixed(void) {
    uint64_t state = 0x2545F4914F6CDD1Dull;
    double worst_ulp = 0;
    long bad = 0;
    for (long i = 0; i < 1200000; i++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        double x;
        if (i < 1000000) { // magnitudes 2^-60 .. 2^9.6 and their negatives
            const double mag = ldexp(1.0 + (double)(state >> 12) * 0x1p-52, (int)(state % 70) - 60);
            x = state & (1ull << 11) ? -mag : mag;
            if (x > 720 || x < -760) continue;
        } else { // uniformly over the range the log-softmax meets most
            x = -60.0 * (double)(state >> 11) * 0x1p-53;
        }
        const double got = exp_fixed(x);
        const long double want = expl((long double)x);
        const long double ulp = want >= (long double)DBL_MIN ? ldexpl(1.0L, ilogbl(want) - 52) : ldexpl(1.0L, -1074);
        const double err = (double)(fabsl((long double)got - want) / ulp);
        if (want > (long double)DBL_MAX) {
            bad += got != INFINITY;
            continue;
        }
        worst_ulp = err > worst_ulp ? err : worst_ulp;
        if (!(err <= 2.0) && bad++ < 3) CHECK(0, "exp_fixed(%a) = %a, expl %La: %.2f ulp", x, got, want, err);
    }
    CHECK(bad == 0, "exp_fixed: %ld values beyond 2 ulp", bad);
    CHECK(exp_fixed(0.0) == 1.0 && exp_fixed(-0.0) == 1.0, "e^0 = %a", exp_fixed(0.0));
    CHECK(exp_fixed(-INFINITY) == 0.0 && exp_fixed(-800.0) == 0.0 && exp_fixed(-1e300) == 0.0, "e^-inf, e^-800 = 0");
    CHECK(exp_fixed(INFINITY) == INFINITY && exp_fixed(710.0) == INFINITY && exp_fixed(1e300) == INFINITY,
          "e^inf, e^710 = inf");
    CHECK(isnan(exp_fixed(NAN)), "NaN in, NaN out");
    CHECK(exp_fixed(-745.0) > 0.0 && exp_fixed(-745.0) < 1e-323, "e^-745: the smallest subnormal, %a", exp_fixed(-745.0));
    printf("exp_fixed: worst %.3f ulp of expl\n", worst_ulp);
}

int main(void) {
    // Every sign and exponent, a prime stride through the mantissas plus each exponent's first and
    // last mantissa: about 210 million values, special ones included.
    int k = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 61) {
        uint32_t b = (uint32_t)u;
        uint32_t pick[3] = {b, b & 0xFF800000u, b | 0x007FFFFFu};
        for (int e = 0; e < 3; e++) {
            xs[k++] = from_bits(pick[e]);
            if (k == BATCH) {
                run_batch(k);
                k = 0;
            }
        }
    }
    run_batch(k);
    CHECK(bad == 0, "%ld of %ld values wrong", bad, checked);
    CHECK(worst < 3e-7, "worst relative error on [-87, 0]: %.3g", worst);
    // The values softmax meets most, exactly, and the special ones by name.
    CHECK(exp_neg(0.0f) == 1.0f, "e^0 = %.9g", (double)exp_neg(0.0f));
    CHECK(exp_neg(-0.0f) == 1.0f, "e^-0 = %.9g", (double)exp_neg(-0.0f));
    CHECK(exp_neg(-INFINITY) == exp_neg(-87.0f), "e^-inf = %.9g", (double)exp_neg(-INFINITY));
    CHECK(isnan(exp_neg(NAN)) && isnan(exp_neg(-NAN)), "NaN in, NaN out");
    CHECK(exp_neg(1e30f) == INFINITY && exp_neg(FLT_MAX) == INFINITY, "huge x: +inf");
    printf("%ld values, worst relative error on [-87, 0] %.3g\n", checked, worst);
    check_exp_fixed();
    return failures != 0;
}
