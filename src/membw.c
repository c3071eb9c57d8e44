// Streaming read bandwidth: see membw.h.
#include "membw.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    float *buf;
    size_t n, passes;
    float sink;
    pthread_barrier_t *start;
} Reader;

static void *read_passes(void *arg) {
    Reader *r = arg;
    pthread_barrier_wait(r->start);
    float sink = 0;
    for (size_t p = 0; p < r->passes; p++) {
        float part[16] = {0};
        for (size_t i = 0; i < r->n; i += 16)
#pragma omp simd
            for (int l = 0; l < 16; l++) part[l] += r->buf[i + l];
        sink += part[0] + part[15];
    }
    r->sink = sink; // keeps the sums from being optimised away
    return NULL;
}

double read_bandwidth(size_t bytes, int threads) {
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    size_t n = bytes / (size_t)threads / sizeof(float) / 64 * 64;
    if (n < 64) n = 64;
    const size_t passes = ((size_t)256 << 20) / (n * sizeof(float)) + 1;
    Reader readers[64] = {{0}};
    pthread_t tid[64];
    pthread_barrier_t start;
    double best = 0;
    int ok = 1;
    for (int t = 0; t < threads && ok; t++) {
        readers[t].buf = malloc(n * sizeof(float));
        ok = readers[t].buf != NULL;
        for (size_t i = 0; ok && i < n; i++) readers[t].buf[i] = (float)(i & 7);
        readers[t].n = n, readers[t].passes = passes, readers[t].start = &start;
    }
    for (int round = 0; ok && round < 5; round++) {
        pthread_barrier_init(&start, NULL, (unsigned)threads);
        int started = 1;
        for (int t = 1; t < threads; t++)
            if (pthread_create(&tid[t], NULL, read_passes, &readers[t]) == 0) started++;
        if (started < threads) { // fewer threads than asked: do not report a wrong figure
            ok = 0;
            pthread_barrier_destroy(&start);
            break;
        }
        const double t0 = seconds_now();
        read_passes(&readers[0]);
        for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
        const double bw = (double)threads * (double)(passes * n * sizeof(float)) / (seconds_now() - t0);
        pthread_barrier_destroy(&start);
        if (bw > best) best = bw;
    }
    for (int t = 0; t < threads; t++) free(readers[t].buf);
    return ok ? best : 0;
}

double dram_bandwidth_best(double best, int threads) {
    const double now = read_bandwidth((size_t)512 << 20, threads);
    return now > best ? now : best;
}
