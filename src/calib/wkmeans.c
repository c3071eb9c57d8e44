// Weighted 1-D k-means on sorted points. Clusters are runs of consecutive points split at the
// midpoints between neighbouring centres, so prefix sums of w and w·x give each cluster's weight
// and mean in O(1) and an iteration costs O(k log n): calibration feeds tens of thousands of points.
#include "wkmeans.h"

#include <math.h>
#include <stdlib.h>

// First index in [lo, n) with x[i] >= v (x ascending).
static size_t lower_bound(const double *x, size_t lo, size_t n, double v) {
    size_t hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Fills ends[j] (one past cluster j's last point) from the centres' midpoints; 1 when any moved.
static int assign(const double *x, size_t n, const double *c, int k, size_t *ends) {
    int moved = 0;
    size_t start = 0;
    for (int j = 0; j < k; j++) {
        size_t e = j == k - 1 ? n : lower_bound(x, start, n, 0.5 * (c[j] + c[j + 1]));
        if (e != ends[j]) moved = 1;
        ends[j] = e;
        start = e;
    }
    return moved;
}

// An empty cluster keeps its centre, which its neighbours' new means may pass: keep them ascending so
// the midpoints stay ordered (insertion sort: k is at most a few hundred).
static void sort_centres(double *c, int k) {
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && c[j] < c[j - 1]; j--) {
            double t = c[j];
            c[j] = c[j - 1];
            c[j - 1] = t;
        }
}

// Lloyd's iterations from the given centres; returns how many ran.
static int lloyd(const double *x, size_t n, const double *sw, const double *swx, int k, double *centres,
                 size_t *ends) {
    for (int j = 0; j < k; j++) ends[j] = (size_t)-1;
    int it = 0;
    while (it < WKMEANS_MAX_ITERS && assign(x, n, centres, k, ends)) {
        it++;
        size_t start = 0;
        for (int j = 0; j < k; j++) {
            double cw = sw[ends[j]] - sw[start];
            if (cw > 0) centres[j] = (swx[ends[j]] - swx[start]) / cw;
            start = ends[j];
        }
        sort_centres(centres, k);
    }
    return it;
}

// Weighted quantiles: dense regions (by weight) start with more centres, so few iterations follow.
static void init_quantiles(const double *x, size_t n, const double *sw, int k, double *c) {
    for (int j = 0; j < k; j++) {
        size_t i = lower_bound(sw + 1, 0, n, sw[n] * (j + 0.5) / k); // first point whose cumulative weight reaches it
        c[j] = x[i < n ? i : n - 1];
    }
}

// Greedy farthest points (with weight, each point's distance² to its nearest centre is scaled by
// its weight): from the weighted median, each next centre is the point worst served so far (the
// first on ties). Unlike quantiles, it never leaves a far, light group of points without a centre.
static void init_farthest(const double *x, const double *w, size_t n, const double *sw, int k, int weighted,
                          double *c) {
    size_t i0 = lower_bound(sw + 1, 0, n, sw[n] * 0.5);
    c[0] = x[i0 < n ? i0 : n - 1];
    for (int j = 1; j < k; j++) {
        double best = -1;
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            if (!(w[i] > 0)) continue;
            double d = INFINITY;
            for (int m = 0; m < j; m++) d = fmin(d, (x[i] - c[m]) * (x[i] - c[m]));
            if (weighted) d *= w[i];
            if (d > best) best = d, at = i;
        }
        c[j] = x[at];
    }
    sort_centres(c, k);
}

int wkmeans(const double *x, const double *w, size_t n, int k, double *centres) {
    double *sw = malloc(sizeof(double) * (n + 1)), *swx = malloc(sizeof(double) * (n + 1));
    double *trial = malloc(sizeof(double) * (size_t)k);
    size_t *ends = malloc(sizeof(size_t) * (size_t)k);
    if (!sw || !swx || !ends || !trial) {
        free(sw), free(swx), free(ends), free(trial);
        return -1;
    }
    sw[0] = swx[0] = 0;
    for (size_t i = 0; i < n; i++) {
        sw[i + 1] = sw[i] + w[i];
        swx[i + 1] = swx[i] + w[i] * x[i];
    }
    int iters = 0;
    if (!(sw[n] > 0)) {
        for (int j = 0; j < k; j++) centres[j] = k == 1 ? 0.0 : -1.0 + 2.0 * j / (k - 1);
    } else {
        // Lloyd's iterations only reach a local optimum: start from three deterministic seeds and keep
        // the best (the first on ties), which is cheap next to what calibration costs.
        double best = INFINITY;
        for (int s = 0; s < 3; s++) {
            if (s == 0) init_quantiles(x, n, sw, k, trial);
            else init_farthest(x, w, n, sw, k, s == 2, trial);
            iters += lloyd(x, n, sw, swx, k, trial, ends);
            double e = wkmeans_sse(x, w, n, trial, k);
            if (e < best) {
                best = e;
                for (int j = 0; j < k; j++) centres[j] = trial[j];
            }
        }
    }
    free(sw), free(swx), free(ends), free(trial);
    return iters;
}

double wkmeans_sse(const double *x, const double *w, size_t n, const double *centres, int k) {
    double sse = 0;
    for (size_t i = 0; i < n; i++) {
        double best = -1;
        for (int j = 0; j < k; j++) {
            double d = (x[i] - centres[j]) * (x[i] - centres[j]);
            if (best < 0 || d < best) best = d;
        }
        sse += w[i] * best;
    }
    return sse;
}

// Weighted SSE of points [a, b) about their weighted mean, computed directly (no prefix-sum
// cancellation: this is the reference).
static double segment_cost(const double *x, const double *w, size_t a, size_t b) {
    double sw = 0, swx = 0;
    for (size_t i = a; i < b; i++) sw += w[i], swx += w[i] * x[i];
    if (!(sw > 0)) return 0;
    double mean = swx / sw, cost = 0;
    for (size_t i = a; i < b; i++) cost += w[i] * (x[i] - mean) * (x[i] - mean);
    return cost;
}

double wkmeans_optimal_sse(const double *x, const double *w, size_t n, int k) {
    if (n == 0) return 0;
    if ((size_t)k > n) k = (int)n; // more clusters than points: each point alone, cost 0
    // best[j][e]: least cost of the first e points in j + 1 clusters (runs may not be empty).
    double *best = malloc(sizeof(double) * (size_t)k * (n + 1));
    if (!best) return -1;
    for (size_t e = 1; e <= n; e++) best[e] = segment_cost(x, w, 0, e);
    for (int j = 1; j < k; j++) {
        double *row = best + (size_t)j * (n + 1), *prev = row - (n + 1);
        for (size_t e = (size_t)j + 1; e <= n; e++) {
            double m = -1;
            for (size_t s = (size_t)j; s < e; s++) { // the last cluster is [s, e)
                double c = prev[s] + segment_cost(x, w, s, e);
                if (m < 0 || c < m) m = c;
            }
            row[e] = m;
        }
    }
    double r = best[(size_t)(k - 1) * (n + 1) + n];
    free(best);
    return r;
}
