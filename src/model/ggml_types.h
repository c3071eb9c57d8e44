// The weight types a GGUF file's tensors come in, each decoded to fp32 as ggml's reference
// dequantisers decode it (ggml-quants.c; layouts in docs/models.md): the weights are given, and
// micro computes in fp32 from exactly those numbers.
#ifndef MICRO_GGML_TYPES_H
#define MICRO_GGML_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t id;      // ggml's type number
    const char *name; // ggml's name (F32, Q4_K, ...)
    int block;        // numbers per block
    size_t bytes;     // bytes per block
    // n_blocks blocks at src to n_blocks * block floats at dst.
    void (*decode)(const uint8_t *src, float *dst, size_t n_blocks);
} GgmlType;

// The type with ggml's number id, or NULL for one micro does not read.
const GgmlType *ggml_type_of(uint32_t id);
// ggml's name of a type number micro does not read, for the message that refuses it ("IQ2_XXS"),
// or NULL when ggml has no such number.
const char *ggml_type_unread_name(uint32_t id);

// IEEE binary16 and bfloat16 to fp32, exactly (subnormals, infinities and NaNs included).
float ggml_half_to_float(uint16_t h);
float ggml_bf16_to_float(uint16_t b);

#endif
