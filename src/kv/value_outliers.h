// KVQuant's value outliers: the rule its codec (kvquant) applies to each value vector, and its
// calibration (src/calib) applies when it makes the codebooks, so both keep the same numbers exact.
#ifndef MICRO_VALUE_OUTLIERS_H
#define MICRO_VALUE_OUTLIERS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Inline: the codec's builds (per kernel set) count each number's rank at their vectors' width, the
// calibration at its own; integer counts and exact comparisons, so the same numbers everywhere.
static inline int value_outliers_cmp(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// s[k] of v sorted as qsort sorts it with value_outliers_cmp (a merge sort: equal numbers, +0 and -0 among
// them, keep their order): the number with k numbers below it or equal and before it. For a head's
// few numbers the counting, a vector of comparisons a number, is quicker than qsort's calls.
static inline float value_outliers_sorted_at(const float *v, int n, int k) {
    for (int i = 0; i < n; i++) {
        int rank = 0;
        for (int j = 0; j < n; j++) rank += v[j] < v[i] || (v[j] == v[i] && j < i);
        if (rank == k) return v[i];
    }
    return v[0]; // not reached: the ranks of numbers are 0..n-1
}

// The median as the mean of the two middle numbers of v sorted; s holds n floats.
static inline double value_outliers_median(const float *v, int n, float *s) {
    int nan = 0;
    for (int i = 0; i < n; i++) nan |= isnan(v[i]);
    if (n <= 64 && !nan)
        return 0.5 * ((double)value_outliers_sorted_at(v, n, (n - 1) / 2) + (double)value_outliers_sorted_at(v, n, n / 2));
    memcpy(s, v, sizeof(float) * (size_t)n);
    qsort(s, (size_t)n, sizeof(float), value_outliers_cmp);
    return 0.5 * ((double)s[(n - 1) / 2] + (double)s[n / 2]);
}

// Value outliers of one vector of n numbers: the m = ceil(n·P/100) numbers farthest from the
// vector's median (the mean of its two middle numbers; ties: the lower index first) are flagged in
// is_outlier[n]; s (scratch) holds n floats. Returns m.
static inline int calib_value_outliers(const float *v, int n, uint32_t percent_hundredths, unsigned char *is_outlier,
                                       float *s) {
    memset(is_outlier, 0, (size_t)n);
    int m = (int)(((long long)n * percent_hundredths + 9999) / 10000);
    if (m == 0) return 0;
    const double median = value_outliers_median(v, n, s);
    for (int k = 0; k < m; k++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!is_outlier[i] && (best < 0 || fabs(v[i] - median) > fabs(v[best] - median))) best = i;
        is_outlier[best] = 1;
    }
    return m;
}

#endif
