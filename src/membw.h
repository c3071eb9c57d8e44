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

// Monotonic seconds.
double seconds_now(void);

#endif
