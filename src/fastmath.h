// exp for softmax, written so the compiler vectorises it (libm's expf does not vectorise without
// -ffast-math). Same code on every thread and run, so results stay bit-identical.
#ifndef MICRO_FASTMATH_H
#define MICRO_FASTMATH_H

#include <stdint.h>

// e^x for x <= 0 (softmax arguments after the max is subtracted); relative error below 3e-7.
// x = n·ln2 + r with |r| <= ln2/2; e^r by a degree-6 Taylor polynomial; 2^n built in the exponent bits.
static inline float exp_neg(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693145751953125f - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // A union rather than memcpy: gcc 12 vectorises the former, not the latter.
    union {
        int32_t bits;
        float value;
    } two_n = {.bits = ((int32_t)n + 127) << 23};
    return p * two_n.value;
}

#endif
