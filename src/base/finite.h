// Non-finite numbers are an error, never a result: a model file with huge but finite weights passes
// the loader (its values are finite) and then overflows float arithmetic, turning the loss, the
// logits or the cached keys into NaN or infinity. Commands check what they are about to report.
#ifndef MICRO_FINITE_H
#define MICRO_FINITE_H

#include <math.h>
#include <stddef.h>

// Said after what went non-finite, so every command gives the same reason.
#define NONFINITE_REASON "not finite: the model's arithmetic overflows float (are its weights huge?)"

static inline int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

#endif
