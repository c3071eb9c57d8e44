// SHA-256 (FIPS 180-4), streaming: the training record names its corpus by this hash.
#ifndef MICRO_TRAIN_SHA256_H
#define MICRO_TRAIN_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t length; // bytes so far
    unsigned char block[64];
    size_t fill;
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t n);
// Writes 64 lowercase hex digits and a NUL to hex[65].
void sha256_final_hex(Sha256 *s, char hex[65]);

#endif
