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

// The same measurement kept open, for commands that read the bandwidth again around their runs and
// keep the best (one reading taken in a slow spell of a shared machine would make every roofline
// share look better than it is): the buffers are written once, at open, and each read is only the
// passes. read returns the best of `rounds` rounds (0 when the threads could not be started); open
// returns NULL when the buffers cannot be had.
typedef struct BandwidthProbe BandwidthProbe;
BandwidthProbe *bandwidth_probe_open(size_t bytes, int threads);
double bandwidth_probe_read(BandwidthProbe *p, int rounds);
void bandwidth_probe_close(BandwidthProbe *p);

// The readings taken around a run: the best, which the roofline shares use, and the lowest, which
// says how far the machine moved during the run (printed beside the best); `count` readings. A reading
// that could not be taken (no probe, or its threads did not start) leaves best at 0 for good: no
// figure rather than a wrong one.
typedef struct {
    double best, low;
    int count, failed;
} BandwidthReadings;

// One more reading into r, the best of `rounds` rounds; p may be NULL (a failed reading).
void bandwidth_probe_note(BandwidthProbe *p, int rounds, BandwidthReadings *r);

#endif
