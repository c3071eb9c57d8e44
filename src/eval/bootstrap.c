// Paired moving-block bootstrap (bootstrap.h).
#include "bootstrap.h"

#include <stdlib.h>

#include "rng.h"
#include "sort_doubles.h"

int bootstrap_mean_ci(const double *d, int n, int block, int resamples, uint64_t seed, double *lo, double *hi) {
    if (block > n / 8) block = n / 8 > 1 ? n / 8 : 1;
    // Prefix sums make each block's sum one subtraction: a resample costs n / block steps, not n.
    double *prefix = malloc(sizeof(double) * (size_t)(n + 1)), *means = malloc(sizeof(double) * (size_t)resamples);
    if (!prefix || !means) {
        free(prefix);
        free(means);
        return -1;
    }
    prefix[0] = 0.0;
    for (int i = 0; i < n; i++) prefix[i + 1] = prefix[i] + d[i];
    Rng rng;
    rng_seed(&rng, seed);
    const int starts = n - block + 1;
    for (int r = 0; r < resamples; r++) {
        double sum = 0.0;
        for (int taken = 0; taken < n; taken += block) {
            const int s = (int)rng_below(&rng, (uint64_t)starts), len = n - taken < block ? n - taken : block;
            sum += prefix[s + len] - prefix[s];
        }
        means[r] = sum / n;
    }
    sort_doubles(means, (size_t)resamples);
    *lo = means[(int)(0.025 * resamples)];
    *hi = means[(int)(0.975 * resamples + 0.5) - 1];
    free(prefix);
    free(means);
    return 0;
}
