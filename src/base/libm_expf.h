// e^x as glibc's expf gives it on x86-64 (glibc 2.28 on, its build for CPUs with fused
// multiply-add), bit for bit, written as one expression per step so that a loop of it vectorises.
// SwiGLU takes 2,048 of them a token, and libm's expf is a call a number. It also makes e^x the same
// on every machine, which libm's is not: ARM64's glibc forms r below from a rounded product and
// differs in two floats of 2^32 (tests/test_forward_kernels.c names them).
//
// The algorithm (glibc's, from Arm's optimized-routines): with N = 32, x·N/ln2 = k + r, k the
// nearest integer (found by adding 1.5·2^52, whose low mantissa bits then hold k), |r| <= 1/2;
// e^x = 2^(k/N) · 2^(r/N), 2^(k/N) from a table of 2^(i/N), i = k mod N, with k div N added to
// its exponent bits, and 2^(r/N) ≈ 1 + C2·r + (C1 + C0·r)·r². All in double, each step fused where
// glibc's build fuses it (its object code: the five fma below), the double rounded to float once.
// Outside the main path glibc returns 0 below ln 2^-150 (−inf too), its smallest subnormal below
// ln 2^-149 (it may underflow there), +inf above ln 2^128 and a NaN quieted (x + x); so does this.
//
// fma() is one instruction where the build has FMA (the avx2 and avx512 kernel sets, ARM64) and
// libm's exact software fused multiply-add elsewhere: the same bits either way. tests/
// test_forward_kernels.c compares every kernel set with libm's expf over a sweep of all floats.
#ifndef MICRO_LIBM_EXPF_H
#define MICRO_LIBM_EXPF_H

#include <math.h>
#include <stdint.h>

// 2^(i/32) correctly rounded, as double bits, less i << 47 (so that adding k << 47 for k ≡ i mod 32
// gives 2^(k/32)).
static const uint64_t LIBM_EXPF_TABLE[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

static inline float libm_expf(float x) {
    const double inv_ln2_n = 0x1.71547652b82fep+5, shift = 0x1.8p+52;
    const double c0 = 0x1.c6af84b912394p-20, c1 = 0x1.ebfce50fac4f3p-13, c2 = 0x1.62e42ff0c52d6p-6;
    const double xd = (double)x;
    union {
        double d;
        uint64_t u;
    } kd = {.d = fma(inv_ln2_n, xd, shift)}, s;
    const uint64_t ki = kd.u;
    const double k = kd.d - shift;
    const double r = fma(inv_ln2_n, xd, -k);
    s.u = LIBM_EXPF_TABLE[ki % 32] + (ki << 47);
    const double z = fma(r, c0, c1), r2 = r * r;
    double y = fma(r, c2, 1.0);
    y = fma(z, r2, y) * s.d;
    float f = (float)y;
    f = x < -0x1.9d1d9ep6f ? 0x1p-149f : f;
    f = x < -0x1.9fe368p6f ? 0.0f : f;
    f = x > 0x1.62e42ep6f ? INFINITY : f;
    // A NaN comes back quieted, its sign and payload kept, as glibc's x + x gives it; in bits,
    // because a compiler may rewrite −x + −x as x · −2, which keeps x's sign instead.
    union {
        float f;
        uint32_t u;
    } nan = {.f = x};
    nan.u |= 0x00400000u;
    return x == x ? f : nan.f;
}

#endif
