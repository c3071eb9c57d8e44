// llama2.c's legacy checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len), the fp32 weights in llama2.c's order (which is ours), then the two legacy
// RoPE tables llama2.c skips.
#ifndef MICRO_EXPORT_LLAMA2C_H
#define MICRO_EXPORT_LLAMA2C_H

#include <stddef.h>

#include "model.h"

// Writes m to path through safe_file: 0, or -1 with one line in err and the target untouched.
int llama2c_save(const Model *m, const char *path, char *err, size_t errlen);

#endif
