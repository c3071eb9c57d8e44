// The most multiply-adds one core can do, measured in the same run as the figures it bounds
// (bench --eval): no kernel, however written, does more, so an arithmetic count over this rate is
// a time nothing can beat on this machine.
#ifndef MICRO_PEAK_H
#define MICRO_PEAK_H

// Multiply-adds a second on one core: independent chains of vector multiply-adds in registers,
// nothing else, in the CPU's fastest form (fused, on 512- or 256-bit vectors where it has them; a
// multiply and an add counted as one otherwise). Best of 5 rounds of about 20 ms. `form` is set to
// a short name of what was measured.
double peak_multiply_adds(const char **form);
// The same with every multiply and add apart, each rounded (as every kernel set computes them, so
// that all give the same bits): on CPUs that fuse them, about half the rate above.
double peak_multiply_then_add(const char **form);

#endif
