// One core's peak multiply-add rate: see peak.h.
//
// Sixteen independent accumulators, each a ← a·m + c again and again: enough chains to keep every
// multiply-add unit busy through its latency (a fused multiply-add takes 4 cycles on the CPUs here,
// and two can start each cycle: 8 chains would do). m and c come through volatile reads, so that
// the compiler cannot fold the loop away; the sum of the accumulators is returned for the same reason.
#include "peak.h"
#include "clock.h"
#include "cpu.h"

#include "membw.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { CHAINS = 16, ROUNDS = 5 };

typedef double (*PeakLoop)(long iters, float m, float c); // returns the accumulators' sum

#if defined(__x86_64__)
// Each loop twice: fused (one rounding per multiply-add, the hardware's peak) and apart (a multiply,
// then an add: what every kernel set computes, so that all give the same bits).
#define PEAK_LOOP_512(name, isa, step)                                                          \
    __attribute__((target(isa))) static double name(long iters, float m, float c) {             \
        __m512 a[CHAINS];                                                                          \
        const __m512 vm = _mm512_set1_ps(m), vc = _mm512_set1_ps(c);                               \
        for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps((float)i);                         \
        for (long k = 0; k < iters; k++)                                                           \
            for (int i = 0; i < CHAINS; i++) a[i] = step;                                          \
        double s = 0;                                                                              \
        for (int i = 0; i < CHAINS; i++) s += _mm512_reduce_add_ps(a[i]);                         \
        return s;                                                                                  \
    }
#define PEAK_LOOP_256(name, isa, step)                                                          \
    __attribute__((target(isa))) static double name(long iters, float m, float c) {             \
        __m256 a[CHAINS];                                                                          \
        const __m256 vm = _mm256_set1_ps(m), vc = _mm256_set1_ps(c);                               \
        for (int i = 0; i < CHAINS; i++) a[i] = _mm256_set1_ps((float)i);                         \
        for (long k = 0; k < iters; k++)                                                           \
            for (int i = 0; i < CHAINS; i++) a[i] = step;                                          \
        float out[8];                                                                              \
        double s = 0;                                                                              \
        for (int i = 0; i < CHAINS; i++) {                                                         \
            _mm256_storeu_ps(out, a[i]);                                                           \
            for (int l = 0; l < 8; l++) s += out[l];                                               \
        }                                                                                          \
        return s;                                                                                  \
    }
PEAK_LOOP_512(loop_avx512, "avx512f,fma", _mm512_fmadd_ps(a[i], vm, vc))
PEAK_LOOP_512(loop_avx512_apart, "avx512f", _mm512_add_ps(_mm512_mul_ps(a[i], vm), vc))
PEAK_LOOP_256(loop_avx2, "avx2,fma", _mm256_fmadd_ps(a[i], vm, vc))
PEAK_LOOP_256(loop_avx2_apart, "avx", _mm256_add_ps(_mm256_mul_ps(a[i], vm), vc))
#endif

// Any CPU: 4-float vectors (SSE2 on x86-64, NEON elsewhere), a multiply then an add.
typedef float v4 __attribute__((vector_size(16)));
static double loop_generic(long iters, float m, float c) {
    v4 a[CHAINS];
    const v4 vm = {m, m, m, m}, vc = {c, c, c, c};
    for (int i = 0; i < CHAINS; i++) a[i] = (v4){(float)i, (float)i, (float)i, (float)i};
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < CHAINS; i++) a[i] = a[i] * vm + vc;
    double s = 0;
    for (int i = 0; i < CHAINS; i++)
        for (int l = 0; l < 4; l++) s += a[i][l];
    return s;
}

static double best_rate(PeakLoop loop, int lanes) {
    volatile float vm = 0.999999f, vc = 1e-6f;
    volatile double sink = 0;
    // Iterations for about 20 ms, from a short first run.
    long iters = 1 << 14;
    double t0 = seconds_now();
    sink += loop(iters, vm, vc);
    double t = seconds_now() - t0;
    if (t > 0) iters = (long)((double)iters * 0.02 / t) + 1;
    double best = 0;
    for (int r = 0; r < ROUNDS; r++) {
        t0 = seconds_now();
        sink += loop(iters, vm, vc);
        t = seconds_now() - t0;
        const double rate = (double)iters * CHAINS * lanes / t;
        best = rate > best ? rate : best;
    }
    (void)sink;
    return best;
}

// The fused or the apart rate, in the widest form this CPU has (whatever set the kernels run:
// MICRO_ISA lowers the kernels, not the floor).
static double peak(int fused, const char **form) {
    PeakLoop loop = loop_generic;
    int lanes = 4;
    *form = fused ? "4-wide multiply and add" : "4-wide multiply, then add";
#if defined(__x86_64__)
    if (cpu_isa_supported() >= ISA_AVX512)
        loop = fused ? loop_avx512 : loop_avx512_apart, lanes = 16,
        *form = fused ? "512-bit fused multiply-add" : "512-bit multiply, then add";
    else if (cpu_isa_supported() >= ISA_AVX2)
        loop = fused ? loop_avx2 : loop_avx2_apart, lanes = 8,
        *form = fused ? "256-bit fused multiply-add" : "256-bit multiply, then add";
#endif
    return best_rate(loop, lanes);
}

double peak_multiply_adds(const char **form) { return peak(1, form); }

double peak_multiply_then_add(const char **form) { return peak(0, form); }
