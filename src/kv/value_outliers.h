// KVQuant's value outliers: the rule its codec (kvquant) applies to each value vector, and its
// calibration (src/calib) applies when it makes the codebooks, so both keep the same numbers exact.
#ifndef MICRO_VALUE_OUTLIERS_H
#define MICRO_VALUE_OUTLIERS_H

#include <stdint.h>

// Value outliers of one vector of n numbers: the m = ceil(n·P/100) numbers farthest from the
// vector's median (the mean of its two middle numbers; ties: the lower index first) are flagged in
// is_outlier[n]; scratch holds n floats. Returns m.
int calib_value_outliers(const float *v, int n, uint32_t percent_hundredths, unsigned char *is_outlier,
                         float *scratch);

#endif
