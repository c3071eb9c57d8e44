// exp_neg (softmax's exp) over a sweep of float bit patterns, against exp in double: accurate on
// its domain, and a defined, documented value everywhere else (NaN, ±inf, huge, tiny, subnormal).
// Run under UBSan too, where a float-to-int conversion of NaN or a shift of a negative would stop it.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
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
    return failures != 0;
}
