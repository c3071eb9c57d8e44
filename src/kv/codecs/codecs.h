// Every codec family the registry in kvcache.c knows: one source file each in this folder.
//
// The files with attention kernels are compiled twice (meson.build): once portable, once with
// AVX-512 (CODEC_SIMD_VARIANT defined, the families renamed *_simd). The registry picks one set at
// run time from what the CPU supports (codec_dispatch.h), so one installed binary runs on any x86-64
// and still takes the AVX-512 kernels where they exist; the two give the same bits (a test checks).
#ifndef MICRO_CODECS_H
#define MICRO_CODECS_H

#include "kvcache.h"

#ifdef CODEC_SIMD_VARIANT
#define CODEC_FAMILY(name) name##_simd
#else
#define CODEC_FAMILY(name) name
#endif

// One list for both builds: X(symbol) per family that has kernels.
#define CODEC_KERNEL_FAMILIES(X)                                                                   \
    X(codec_fp32) X(codec_fp16) X(codec_bf16) X(codec_fp8) X(codec_int) X(codec_kivi) X(codec_q8_0) X(codec_q4_0) \
    X(codec_q4_1) X(codec_q5_0) X(codec_q5_1) X(codec_iq4_nl) X(codec_kvquant) X(codec_quarot) \
    X(codec_mx) X(codec_nvfp4) X(codec_turboquant) X(codec_qjl)

#define CODEC_DECLARE(name) extern const CodecFamily name, name##_simd;
CODEC_KERNEL_FAMILIES(CODEC_DECLARE)
#undef CODEC_DECLARE

#endif
