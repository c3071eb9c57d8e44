// Monotonic seconds, for timings (the scheduler's step times, the benchmarks, progress lines).
#ifndef MICRO_CLOCK_H
#define MICRO_CLOCK_H

#include <time.h>

static inline double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
