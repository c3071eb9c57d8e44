// Sorting doubles ascending with qsort (medians, percentiles, the bootstrap's interval).
#ifndef MICRO_SORT_DOUBLES_H
#define MICRO_SORT_DOUBLES_H

#include <stdlib.h>

// qsort's comparison for doubles, ascending (no NaN reaches it: callers sort finite numbers).
static inline int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline void sort_doubles(double *x, size_t n) { qsort(x, n, sizeof *x, compare_doubles); }

#endif
