// Which build of the codec kernels the registry hands out: the set in use (cpu.h: the CPU's best, or
// what MICRO_ISA asks), or the next lower set compiled in. Every build computes the portable build's
// bits; tests force each set in turn to compare them, and MICRO_ISA does so for a whole run.
#ifndef MICRO_CODEC_DISPATCH_H
#define MICRO_CODEC_DISPATCH_H

#include "cpu.h"

// 1 when the build for `isa` was compiled in and this CPU runs it (portable: always).
int codec_isa_available(Isa isa);
// Streams created from now on use the build for `isa` (which must be available), or, for -1, the
// set in use again.
void codec_force_isa(int isa);
// The set whose build new streams get.
Isa codec_isa_active(void);

#endif
