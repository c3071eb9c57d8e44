// Which build of the codec kernels the registry hands out: AVX-512 where the set in use is
// (cpu.h: the CPU's best, or what MICRO_ISA asks), else portable. Both compute the same bits;
// tests force the portable build to compare them, and MICRO_ISA=portable does so for a whole run.
#ifndef MICRO_CODEC_DISPATCH_H
#define MICRO_CODEC_DISPATCH_H

// 1 when this CPU runs the AVX-512 build (avx512f, avx512bw and avx512vbmi) and it was compiled in.
int codec_simd_supported(void);
// Streams created from now on use the portable kernels (on = 1) or whatever the CPU supports (0).
void codec_force_portable(int on);
// 1 when new streams get the AVX-512 kernels.
int codec_simd_active(void);

#endif
