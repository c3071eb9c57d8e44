// A kernel's contract with its caller, checked by AddressSanitizer once at the kernel's entry: the
// memory it will read and write, stated row by row.
//
// Why: in the sanitizer test build (scripts/test) the forward kernels (src/engine/forward_kernels.c,
// dense float rows: the weight products, softmax, the fast evaluator's attention) are compiled
// without the sanitizers. ASan's check at every load slowed them so much that they took a large
// part of that pass's time (the end-to-end tests push thousands of tokens through the model).
// There meson defines REGION_CHECKS, and each kernel first hands ASan every row it is about to
// touch, so a caller that passes a short buffer still stops with ASan's description of the address. What is given up is a
// check of the kernel's own indexing inside those rows; the fuzz build (clang, scripts/fuzz, and the
// quick suite in CI) still instruments the kernels load by load. Elsewhere REGION_CHECK is nothing.
#ifndef MICRO_REGION_CHECK_H
#define MICRO_REGION_CHECK_H

#include <stddef.h>

#ifdef REGION_CHECKS
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#include <stdio.h>
#include <stdlib.h>

// Aborts with ASan's account of the first byte of [begin, begin + count · size) that is not ours.
static inline void region_check(const char *kernel, const void *begin, ptrdiff_t count, size_t size) {
    if (count <= 0) return;
    const size_t bytes = (size_t)count * size;
    const char *bad = __asan_region_is_poisoned((void *)begin, bytes);
    if (!bad) return;
    fprintf(stderr, "%s: byte %zu of the %zu it was given at %p is not addressable\n", kernel,
            (size_t)(bad - (const char *)begin), bytes, begin);
    __asan_describe_address((void *)bad);
    __sanitizer_print_stack_trace();
    abort();
}
#define REGION_CHECK(kernel, p, count) region_check(kernel, (p), (ptrdiff_t)(count), sizeof *(p))
#else
#define REGION_CHECK(kernel, p, count) ((void)(p), (void)(count)) // no code, and no unused names
#endif

#endif
