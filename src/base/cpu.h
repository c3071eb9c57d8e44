// The one instruction-set choice for the whole program: which build of the kernels (the forward
// pass's, in src/engine, and the codecs', in src/kv/codecs) runs. Every build gives the portable
// build's bits; the choice is only speed. The CPU is probed once, here, in a file compiled without
// instruction-set flags, so that nothing newer than the baseline can be inlined into the probe.
#ifndef MICRO_CPU_H
#define MICRO_CPU_H

#include <stddef.h>

typedef enum {
    ISA_PORTABLE = 0, // the baseline build (the compiler's vectorisation of portable C)
    ISA_AVX2 = 1,     // AVX2, FMA, F16C, BMI2 (x86-64-v3)
    ISA_AVX512 = 2,   // AVX-512 F, BW, VBMI, VL, DQ with BMI, BMI2, FMA and F16C: what the AVX-512 builds use
} Isa;

// The best set this CPU runs.
Isa cpu_isa_supported(void);
// The set in use: the best supported, or lower when the environment asks for it:
// MICRO_ISA=portable|avx2|avx512 (MICRO_PORTABLE=1 is MICRO_ISA=portable). A set that has no build
// of its own runs the next lower one that does.
Isa cpu_isa(void);
const char *cpu_isa_name(Isa isa);
// MICRO_ISA (and MICRO_PORTABLE) as the environment gives them: 0, or -1 with one line in err for a
// set micro does not know or this CPU cannot run. Commands check it before any work.
int cpu_isa_check_env(char *err, size_t errlen);

#endif
