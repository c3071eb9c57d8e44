// e^x in double for the loss's log-softmax: one fixed sequence of double operations, so it gives
// the same bits in every build and on every machine (libm's exp is a call a number, is each
// machine's libm's own, and does not vectorise), accurate to about an ulp
// (tests/test_fastmath.c holds it to 2 ulp of long double's expl).
//
// x·32/ln2 = k + r/(ln2/32), k the nearest integer (found by adding 1.5·2^52, whose low mantissa
// bits then hold k: no float-to-int conversion, so every input is defined), r = x − k·ln2/32 in two
// parts (k·hi exact, hi holding 28 bits), |r| <= ln2/64; e^x = 2^(k/32) · e^r, 2^(k/32) from
// libm_expf.h's table of 2^(i/32) with k div 32 added to its exponent bits, e^r by its Taylor
// polynomial of degree 6 (the first term left out, r^7/7!, is below 2e-17). Below −708 and above
// 709 2^(k/32) would leave the normal range: it is made 2^(k/32 ± 512) and the result scaled by
// 2^∓512 (one rounding, into the subnormals below); below −746 it is 0, above ln 2^1024 +inf.
#ifndef MICRO_EXP_FIXED_H
#define MICRO_EXP_FIXED_H

#include <math.h>
#include <stdint.h>

#include "libm_expf.h"

static inline double exp_fixed(double x) {
    const int below = x < -708.0, above = x > 709.0;
    union {
        double d;
        uint64_t u;
    } kd = {.d = x * 0x1.71547652b82fep+5 + 0x1.8p+52}, s;
    const uint64_t ki = kd.u;
    const double k = kd.d - 0x1.8p+52;
    const double r = (x - k * 0x1.62e42ff000000p-6) - k * -0x1.718432a1b0e26p-40;
    double p = 0x1.6c16c16c16c17p-10; // 1/720
    p = p * r + 0x1.1111111111111p-7; // 1/120
    p = p * r + 0x1.5555555555555p-5; // 1/24
    p = p * r + 0x1.5555555555555p-3; // 1/6
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    const uint64_t moved = ki + (below ? 512u * 32u : above ? (uint64_t)0 - 512u * 32u : 0u); // k ± 512·32
    s.u = LIBM_EXPF_TABLE[ki % 32] + (moved << 47);
    double y = p * s.d * (below ? 0x1p-512 : above ? 0x1p+512 : 1.0);
    y = x < -746.0 ? 0.0 : y;                    // below 2^-1075 (−inf too)
    y = x > 0x1.62e42fefa39efp+9 ? INFINITY : y; // above ln 2^1024 (+inf too)
    return x == x ? y : x;
}

#endif
