// RoPE, one head: pairs of numbers rotated by the angles of one position (cos_t, sin_t: that
// position's row of the tables, head_dim/2 each). Pair i is (2i, 2i+1) in micro's models and in
// llama-converted GGUFs (the converter permutes q and k rows to it), and (i, i + head_dim/2) under
// GPT-NeoX's order (Qwen's, ModelConfig.rope_halves): attention reads the cache in the order the
// model wrote it, so a quantiser's blocks and channels are the model's own. The forward pass
// rotates queries and keys with it; a cache that keeps keys before RoPE (kvtransform.h, prerope)
// rotates them as it reads.
#ifndef MICRO_ROPE_H
#define MICRO_ROPE_H

// The tables for positions 0..positions-1: angle pos·θ^(−2i/head_dim) / factors[i] in double (so
// that the table does not depend on float rounding of large products), then its cos and sin rounded
// to float; positions × head_dim/2 each. factors: Llama 3's per-pair frequency divisors, or NULL for
// none. The forward pass, the trainer and llama2.c's export use this one.
void rope_table(float *cos_t, float *sin_t, int positions, int head_dim, float theta, const float *factors);

static inline void rope_head(float *v, int head_dim, int halves, const float *cos_t, const float *sin_t) {
    const int half = head_dim / 2, step = halves ? 1 : 2, other = halves ? half : 1;
    for (int i = 0; i < half; i++) {
        float *x = v + i * step;
        const float a = x[0], b = x[other];
        x[0] = a * cos_t[i] - b * sin_t[i];
        x[other] = a * sin_t[i] + b * cos_t[i];
    }
}

#endif
