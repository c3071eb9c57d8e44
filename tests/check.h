// What every unit test shares: a failure counter and CHECK, which reports the first 40 failures
// with their file and line and lets the test run on to count the rest.
#ifndef MICRO_TESTS_CHECK_H
#define MICRO_TESTS_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec_text.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (failures < 40) {                                                                   \
                fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                    \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fprintf(stderr, "\n");                                                             \
            }                                                                                      \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

// Each test's own reproducible random stream (xorshift64*): the next 64 bits, and a uniform double in
// [0, 1) from its top 53.
static inline uint64_t check_next(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545f4914f6cdd1dull;
}
static inline double check_uniform(uint64_t *state) { return (double)(check_next(state) >> 11) / 9007199254740992.0; }

// Whether two float arrays are the same to the bit (NaN payloads and signed zeros included).
static inline int check_same_bits(const float *a, const float *b, int n) {
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

// A whole file in memory, with 64 bytes to spare (tests append to copies); exits when it cannot.
static inline unsigned char *check_read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 64);
    if (!b || fread(b, 1, *n, f) != *n) exit(1);
    fclose(f);
    return b;
}

#endif
