// Every codec family the registry in kvcache.c knows: one source file each in this folder.
//
// The files with attention kernels are compiled once per kernel set (meson.build): portable, and on
// x86-64 for AVX2 (KERNELS_AVX2 defined, the families renamed *_avx2) and AVX-512 (KERNELS_AVX512,
// *_avx512). The registry picks one set at run time from what the CPU supports (codec_dispatch.h),
// so one installed binary runs on any x86-64 and still takes the best kernels it can; every set gives
// the portable set's bits (tests/test_codec_simd.c checks each against it).
#ifndef MICRO_CODECS_H
#define MICRO_CODECS_H

#include "kvcache.h"

#if defined(KERNELS_AVX512)
#define CODEC_FAMILY(name) name##_avx512
#elif defined(KERNELS_AVX2)
#define CODEC_FAMILY(name) name##_avx2
#else
#define CODEC_FAMILY(name) name
#endif

// One list for both builds: X(symbol) per family that has kernels.
#define CODEC_KERNEL_FAMILIES(X)                                                                   \
    X(codec_fp32) X(codec_fp16) X(codec_bf16) X(codec_fp8) X(codec_int) X(codec_kivi) X(codec_q8_0) X(codec_q4_0) \
    X(codec_q4_1) X(codec_q5_0) X(codec_q5_1) X(codec_iq4_nl) X(codec_kvquant) X(codec_quarot) \
    X(codec_mx) X(codec_nvfp4) X(codec_turboquant) X(codec_qjl)

#define CODEC_DECLARE(name) extern const CodecFamily name, name##_avx2, name##_avx512;
CODEC_KERNEL_FAMILIES(CODEC_DECLARE)
#undef CODEC_DECLARE

// The transforms' rotations in each build (projection.c; codec_projection hands one out).
void codec_project(const float *m, int n, const float *x, float *y, int back);
void codec_project_avx2(const float *m, int n, const float *x, float *y, int back);
void codec_project_avx512(const float *m, int n, const float *x, float *y, int back);

#endif
