// What every harness shares: the libFuzzer entry point, and the checks a message must pass.
#ifndef MICRO_FUZZ_H
#define MICRO_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// A broken property is a crash: abort() so that libFuzzer keeps the input and the replay test fails.
#define FUZZ_REQUIRE(cond)                                                                  \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz: %s:%d: property '%s' does not hold\n", __FILE__, __LINE__, #cond); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

// An error message is one non-empty line that fitted its buffer with room to spare (a message
// filling the buffer to its last byte was most likely cut).
static inline void fuzz_check_message(const char *err, size_t errlen) {
    size_t n = strnlen(err, errlen);
    FUZZ_REQUIRE(n > 0 && n + 1 < errlen);
    FUZZ_REQUIRE(strchr(err, '\n') == NULL);
}

#endif
