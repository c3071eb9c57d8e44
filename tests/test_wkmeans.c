// Weighted 1-D k-means against the truth: the dynamic programme's optimum, itself checked against
// brute force (every labelling) on tiny inputs. k-means may never beat the optimum, and on well
// separated data it must reach it.
#include <math.h>
#include <stdlib.h>

#include "wkmeans.h"
#include "check.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The least weighted SSE over all k^n labellings (each cluster about its weighted mean).
static double brute_force(const double *x, const double *w, int n, int k) {
    int labels[12] = {0};
    double best = INFINITY;
    for (;;) {
        double sw[8] = {0}, swx[8] = {0}, sse = 0;
        for (int i = 0; i < n; i++) sw[labels[i]] += w[i], swx[labels[i]] += w[i] * x[i];
        for (int i = 0; i < n; i++) {
            double mean = sw[labels[i]] > 0 ? swx[labels[i]] / sw[labels[i]] : 0;
            sse += w[i] * (x[i] - mean) * (x[i] - mean);
        }
        if (sse < best) best = sse;
        int i = 0;
        while (i < n && ++labels[i] == k) labels[i++] = 0;
        if (i == n) return best;
    }
}

static void random_points(uint64_t *rng, double *x, double *w, int n) {
    for (int i = 0; i < n; i++) x[i] = 2 * check_uniform(rng) - 1, w[i] = check_uniform(rng) * check_uniform(rng);
    qsort(x, (size_t)n, sizeof(double), cmp_double);
}

int main(void) {
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    double x[400], w[400], c[16];
    // The DP equals brute force on tiny inputs.
    for (int trial = 0; trial < 60; trial++) {
        int n = 1 + trial % 7, k = 1 + trial % 3;
        random_points(&rng, x, w, n);
        double dp = wkmeans_optimal_sse(x, w, (size_t)n, k), bf = brute_force(x, w, n, k);
        CHECK(fabs(dp - bf) <= 1e-12 * (1 + bf), "n %d k %d: DP %.17g, brute force %.17g", n, k, dp, bf);
    }
    // k-means is never below the optimum; within 1e-9 relative of it on well-separated clusters.
    int reached = 0, trials = 0;
    for (int trial = 0; trial < 40; trial++) {
        int n = 20 + trial * 3, k = 1 + trial % 8;
        random_points(&rng, x, w, n);
        int it = wkmeans(x, w, (size_t)n, k, c);
        CHECK(it >= 0 && it <= 3 * WKMEANS_MAX_ITERS, "iterations %d", it);
        for (int j = 1; j < k; j++) CHECK(c[j] >= c[j - 1], "centres not ascending");
        double km = wkmeans_sse(x, w, (size_t)n, c, k), dp = wkmeans_optimal_sse(x, w, (size_t)n, k);
        CHECK(km >= dp * (1 - 1e-12), "random n %d k %d: k-means %.17g below the optimum %.17g", n, k, km, dp);
        trials++, reached += km <= dp * (1 + 1e-9);
    }
    CHECK(reached * 2 >= trials, "k-means reached the optimum on only %d of %d random inputs", reached, trials);
    for (int trial = 0; trial < 40; trial++) {
        int k = 2 + trial % 7, per = 3 + trial % 9, n = k * per;
        // k tight clumps (width 0.01) with gaps of at least 0.2, in random order of size and weight
        for (int j = 0; j < k; j++)
            for (int i = 0; i < per; i++) {
                x[j * per + i] = -0.9 + 0.25 * j + 0.01 * check_uniform(&rng);
                w[j * per + i] = 0.01 + check_uniform(&rng) * (trial % 2 ? 1.0 : (double)(j + 1));
            }
        qsort(x, (size_t)n, sizeof(double), cmp_double);
        wkmeans(x, w, (size_t)n, k, c);
        double km = wkmeans_sse(x, w, (size_t)n, c, k), dp = wkmeans_optimal_sse(x, w, (size_t)n, k);
        CHECK(km >= dp * (1 - 1e-12) && km <= dp * (1 + 1e-9) + 1e-15, "separated n %d k %d: k-means %.17g, optimum %.17g",
              n, k, km, dp);
    }
    // No weight at all: centres spread over [−1, 1]; one point, many clusters: SSE 0.
    double zero[3] = {0, 0, 0}, pts[3] = {-0.5, 0, 0.5};
    CHECK(wkmeans(pts, zero, 3, 4, c) == 0 && c[0] == -1 && c[3] == 1, "weightless centres");
    double one = 0.3, wone = 2;
    wkmeans(&one, &wone, 1, 4, c);
    CHECK(wkmeans_sse(&one, &wone, 1, c, 4) == 0 && wkmeans_optimal_sse(&one, &wone, 1, 4) == 0, "single point");
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures != 0;
}
