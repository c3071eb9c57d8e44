// The increase's interval (bootstrap.h) against cases with known answers: constant differences give
// an interval of zero width at the constant; independent normal differences give the textbook
// interval mean ± 1.96 σ/√n within 10% (blocks change nothing when neighbours are independent); a
// shifted sample shifts the interval by the shift; and the same input gives the same bits.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bootstrap.h"
#include "check.h"

int main(void) {
    enum { N = 20000 };
    static double d[N], shifted[N];
    double lo, hi, lo2, hi2;

    for (int i = 0; i < 1500; i++) d[i] = 0.0625;
    CHECK(!bootstrap_mean_ci(d, 1500, BOOTSTRAP_BLOCK, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, &lo, &hi), "constant");
    CHECK(fabs(lo - 0.0625) < 1e-12 && fabs(hi - 0.0625) < 1e-12, "constant 0.0625: [%.17g, %.17g]", lo, hi);

    // N(0.3, 1.5²) by Box-Muller from the tests' own generator.
    uint64_t rng = 2024;
    double mean = 0.0;
    for (int i = 0; i < N; i++) {
        const double u = 1.0 - check_uniform(&rng), v = check_uniform(&rng);
        d[i] = 0.3 + 1.5 * sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
        mean += d[i] / N;
    }
    double var = 0.0;
    for (int i = 0; i < N; i++) var += (d[i] - mean) * (d[i] - mean) / (N - 1);
    const double textbook = 2.0 * 1.96 * sqrt(var / N);
    CHECK(!bootstrap_mean_ci(d, N, BOOTSTRAP_BLOCK, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, &lo, &hi), "normal");
    CHECK(fabs((hi - lo) / textbook - 1.0) < 0.10, "normal: width %.5f, textbook %.5f", hi - lo, textbook);
    CHECK(lo < mean && mean < hi && fabs(0.5 * (lo + hi) - mean) < 0.1 * textbook, "normal: [%g, %g] around %g", lo,
          hi, mean);
    CHECK(!bootstrap_mean_ci(d, N, 1, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, &lo2, &hi2), "normal, blocks of 1");
    CHECK(fabs((hi2 - lo2) / textbook - 1.0) < 0.10, "normal, blocks of 1: width %.5f, textbook %.5f", hi2 - lo2,
          textbook);

    for (int i = 0; i < N; i++) shifted[i] = d[i] + 2.0;
    CHECK(!bootstrap_mean_ci(shifted, N, BOOTSTRAP_BLOCK, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, &lo2, &hi2), "shifted");
    CHECK(fabs(lo2 - lo - 2.0) < 1e-9 && fabs(hi2 - hi - 2.0) < 1e-9, "shift by 2: [%g, %g] from [%g, %g]", lo2, hi2, lo,
          hi);
    CHECK(!bootstrap_mean_ci(d, N, BOOTSTRAP_BLOCK, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, &lo2, &hi2) && lo2 == lo &&
              hi2 == hi,
          "the same input, other bits");
    // A sample shorter than 8 blocks is resampled in shorter blocks: 10 numbers still give an
    // interval of some width, around their mean.
    double m10 = 0.0;
    for (int i = 0; i < 10; i++) m10 += d[i] / 10;
    CHECK(!bootstrap_mean_ci(d, 10, BOOTSTRAP_BLOCK, 1000, 1, &lo, &hi) && lo < m10 && m10 < hi, "short: [%g, %g] around %g",
          lo, hi, m10);
    if (failures) fprintf(stderr, "test_bootstrap: %d failures\n", failures);
    return failures != 0;
}
