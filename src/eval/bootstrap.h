// The noise of an increase: a 95% confidence interval for the mean of per-token differences (a
// scheme's NLL minus the fp32 cache's on the same token) by a paired moving-block bootstrap.
// Neighbouring tokens' losses are correlated (a hard phrase is hard for several bytes), so the
// resamples are made of contiguous blocks of tokens rather than single tokens; the interval is the
// 2.5th and 97.5th percentiles of the resampled means. Seeded: the same input gives the same bits.
#ifndef MICRO_BOOTSTRAP_H
#define MICRO_BOOTSTRAP_H

#include <stdint.h>

#define BOOTSTRAP_BLOCK 64        // tokens per block: several words of English, a dozen Chinese characters
#define BOOTSTRAP_RESAMPLES 2000  // resampled means; the percentiles move by ~1% of the width between seeds
#define BOOTSTRAP_SEED 0x6d6963726fULL // "micro"

// Interval [*lo, *hi] for the mean of d[0..n), n >= 1: each resample draws ceil(n / block) block
// starts uniformly from [0, n - block], joins the blocks and cuts the join to n numbers. A short
// sample keeps at least 8 blocks (block = n / 8, at least 1): fewer would resample the same few
// stretches and claim a precision the text does not have. -1 when out of memory.
int bootstrap_mean_ci(const double *d, int n, int block, int resamples, uint64_t seed, double *lo, double *hi);

#endif
