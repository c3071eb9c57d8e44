// Weighted 1-D clustering: k-means (Lloyd's iterations, the calibration's tool) and the exact optimum
// by dynamic programming (the truth the tests hold k-means to). In one dimension an optimal cluster
// is a run of consecutive sorted points, so both work on points sorted ascending.
#ifndef MICRO_CALIB_WKMEANS_H
#define MICRO_CALIB_WKMEANS_H

#include <stddef.h>

#define WKMEANS_MAX_ITERS 500 // per start

// k centres (ascending) for n points x (sorted ascending) with weights w >= 0, minimising
// Σ w_i (x_i − nearest centre)². Lloyd's iterations (until no point changes cluster, or
// WKMEANS_MAX_ITERS) from three starts — weighted quantiles (the points at cumulative weight
// (j + ½)/k), greedy farthest points, and greedy farthest points by weight·distance² — keeping the
// result with the least SSE. A cluster left empty keeps its centre. Deterministic. With no weight
// at all (n == 0 or every w == 0) the centres are spread evenly over [−1, 1]. Returns the iterations
// run in all, or -1 when out of memory (k >= 1).
int wkmeans(const double *x, const double *w, size_t n, int k, double *centres);

// Σ w_i (x_i − c(x_i))² with c the nearest of the k ascending centres.
double wkmeans_sse(const double *x, const double *w, size_t n, const double *centres, int k);

// The least possible weighted SSE of k clusters of the n sorted points, by dynamic programming over
// split points (O(k n³) time with each run's cost summed directly, free of
// cancellation, O(k n) memory: for the tests' small n). Negative when out of memory.
double wkmeans_optimal_sse(const double *x, const double *w, size_t n, int k);

#endif
