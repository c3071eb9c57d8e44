// What every harness shares: the libFuzzer entry point, and the checks a message must pass.
#ifndef MICRO_FUZZ_H
#define MICRO_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/spec_text.h"
#include "model_file.h"
#include "spec_catalog.h"

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

// Runs load on the input as it is, then on a copy whose 64-bit checksum (at offset `at`, over every
// byte from `from` on, as micro's file formats keep it) is recomputed, so that mutations behind the
// checksum reach the checks after it instead of all stopping there.
static inline void fuzz_as_is_and_resummed(const uint8_t *data, size_t size, size_t from, size_t at,
                                           void (*load)(const uint8_t *, size_t)) {
    load(data, size);
    if (size < from || size < at + 8) return;
    uint8_t *copy = malloc(size);
    if (!copy) return;
    memcpy(copy, data, size);
    unsigned long long sum = model_checksum(copy + from, size - from);
    for (int i = 0; i < 8; i++) copy[at + i] = (uint8_t)(sum >> (8 * i));
    load(copy, size);
    free(copy);
}

// The specs of the catalog (spec_catalog.h) that need no calibration, keys' and values' alike, once
// each, in the catalog's order: what the pool and serving harnesses pick their codecs from.
static inline int fuzz_catalog_specs(const char *const **out) {
    static const char *specs[512];
    static int n = -1;
    if (n < 0) {
        int count;
        const CatalogEntry *cat = spec_catalog(&count);
        n = 0;
        for (int i = 0; i < count; i++) {
            if (cat[i].calibrated) continue;
            const char *both[2] = {cat[i].k, cat[i].v};
            for (int side = 0; side < 2; side++) {
                int seen = 0;
                for (int j = 0; j < n && !seen; j++) seen = !strcmp(specs[j], both[side]);
                if (!seen && n < 512) specs[n++] = both[side];
            }
        }
    }
    *out = specs;
    return n;
}

#endif
