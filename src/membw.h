// The streaming read bandwidth of this machine, measured in the same run as the figures it is the
// roofline of (bench, serve-bench): machines here are shared and noisy, so a stored number would lie.
#ifndef MICRO_MEMBW_H
#define MICRO_MEMBW_H

#include <stddef.h>

// Bytes/s read by `threads` threads at once, each streaming its own buffer of bytes / threads again
// and again until 256 MiB per thread have passed (best of 5 rounds). A buffer far larger than the
// caches gives DRAM's bandwidth; one the size of what a step touches gives the bandwidth of the
// cache level that step really reads from. 0 when the buffers cannot be had.
double read_bandwidth(size_t bytes, int threads);

// The DRAM bandwidth (a 512 MiB buffer) read once more, and the larger of it and `best` returned:
// the commands read it before and after their runs and keep the best, since one reading taken in a
// slow spell of a shared machine would make every roofline share look better than it is.
double dram_bandwidth_best(double best, int threads);

// Monotonic seconds.
double seconds_now(void);

#endif
