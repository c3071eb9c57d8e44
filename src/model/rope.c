#include "rope.h"

#include <math.h>
#include <stddef.h>

void rope_table(float *cos_t, float *sin_t, int positions, int head_dim, float theta, const float *factors) {
    const size_t half = (size_t)head_dim / 2;
    for (size_t pos = 0; pos < (size_t)positions; pos++)
        for (size_t i = 0; i < half; i++) {
            const double freq = pow((double)theta, -2.0 * (double)i / head_dim) / (factors ? (double)factors[i] : 1.0);
            const double angle = (double)pos * freq;
            cos_t[pos * half + i] = (float)cos(angle);
            sin_t[pos * half + i] = (float)sin(angle);
        }
}
