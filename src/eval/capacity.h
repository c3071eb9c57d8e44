// What a cache width buys: conversations that fit beside a model's weights on one GPU.
#ifndef MICRO_CAPACITY_H
#define MICRO_CAPACITY_H

#include <stddef.h>

#include "kvcache.h"

typedef struct {
    const char *name;
    int layers, kv_heads, head_dim;
    double weights_gb; // GB = 1e9 bytes
    double gpu_gb;
    double util;       // fraction of the GPU's memory in use
    int context;       // tokens per conversation
} CapacityModel;

typedef struct {
    double bits_per_element; // storage bits per cached number (metadata included when a scheme is given)
    double bytes_per_token;  // keys and values of every layer for one token
    double bytes_per_conversation;
    long conversations;      // whole conversations that fit
} CapacityRow;

// Bad input (utilisation outside (0, 1], weights above the usable memory, context <= 0, shape <= 0)
// returns -1 with one line in err.
int capacity_check(const CapacityModel *m, char *err, unsigned long errlen);
CapacityRow capacity_row(const CapacityModel *m, double bits_per_element);
// The same with another attention's numbers cached per token and layer (m's own: 2 · kv_heads ·
// head_dim; full multi-head attention of its query heads, or a latent and a RoPE key, change it).
CapacityRow capacity_row_numbers(const CapacityModel *m, double numbers_per_layer, double bits_per_element);
// Storage bits per cached number of a cache spec (keys and values alike) at the end of one full
// conversation of m's head shape, through the real codecs: scales, minimums and residuals count.
int capacity_scheme_bits(const CapacityModel *m, const CodecSpec *spec, double *bits, char *err, size_t errlen);
// Measuring a scheme runs one conversation of m's head shape through the codec: at most this many
// numbers per stream (a fp32 stream of them is 512 MiB), so that a shape cannot ask for terabytes.
#define CAPACITY_MAX_MEASURED (1ull << 27)
// -1 with one line in err when m's shape is beyond that.
int capacity_scheme_check(const CapacityModel *m, char *err, size_t errlen);
// The named preset, or NULL.
const CapacityModel *capacity_preset(const char *name);

#endif
