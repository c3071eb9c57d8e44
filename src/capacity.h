// What a cache width buys: conversations that fit beside a model's weights on one GPU.
#ifndef MICRO_CAPACITY_H
#define MICRO_CAPACITY_H

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
// The named preset, or NULL.
const CapacityModel *capacity_preset(const char *name);

#endif
