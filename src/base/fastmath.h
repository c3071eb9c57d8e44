// exp for softmax, written so the compiler vectorises it (libm's expf does not vectorise without
// -ffast-math). Same code on every thread and run, so results stay bit-identical.
#ifndef MICRO_FASTMATH_H
#define MICRO_FASTMATH_H

#include <stdint.h>

// e^x for x <= 0 (softmax arguments after the max is subtracted); relative error below 3e-7.
// x = n·ln2 + r with |r| <= ln2/2; e^r by a degree-6 Taylor polynomial; 2^n built in the exponent bits.
//
// Defined for every float, because huge but finite weights do send NaN and ±inf here. n reaches
// the exponent bits without a float-to-int conversion (undefined for NaN and out-of-range values):
// adding 1.5·2^23 to the integer n puts it in the low mantissa bits, read back through a union and
// handled as unsigned, where every bit pattern is defined. What comes out:
//   x in [-87, 0]      e^x, every value computed as before (results do not change by a bit)
//   x < -87, -inf      e^-87, about 1.6e-38: as good as 0 in a softmax
//   x in (0, 88.37)    e^x (softmax never asks; right all the same)
//   x >= 88.37, finite +inf (the exponent saturates at 255; expf overflows a little later, at 88.72)
//   NaN, +inf          NaN (r is NaN), so the caller's loss turns non-finite and is reported
// The saturation is one vpminud; no select is added to the vectorised loop (tests/test_fastmath.c
// checks all of the above over a sweep of every float exponent and mantissa).
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
    // Unions rather than memcpy: gcc 12 vectorises the former, not the latter.
    union {
        float value;
        uint32_t bits;
    } shifted = {.value = n + 12582912.0f}, two_n; // for n in [-126, 127]: exact, bits 0x4B400000 + n
    uint32_t biased = shifted.bits - 0x4B400000u + 127u; // n + 127: in [1, 254] for x in [-87, 88.37)
    biased = biased < 255u ? biased : 255u;             // 255: the exponent of +inf
    two_n.bits = biased << 23;
    return p * two_n.value;
}

#endif
