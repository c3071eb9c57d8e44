// RoPE, one head: adjacent pairs (2i, 2i+1) rotated by the angles of one position (cos_t, sin_t:
// that position's row of the tables, head_dim/2 each). The forward pass rotates queries and keys
// with it; a cache that keeps keys before RoPE (kvtransform.h, prerope) rotates them as it reads.
#ifndef MICRO_ROPE_H
#define MICRO_ROPE_H

// The tables for positions 0..positions-1: angle pos·θ^(−2i/head_dim) in double (so that the table
// does not depend on float rounding of large products), then its cos and sin rounded to float;
// positions × head_dim/2 each. The forward pass, the trainer and llama2.c's export use this one.
void rope_table(float *cos_t, float *sin_t, int positions, int head_dim, float theta);

static inline void rope_head(float *v, int head_dim, const float *cos_t, const float *sin_t) {
    for (int i = 0; i < head_dim / 2; i++) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cos_t[i] - b * sin_t[i];
        v[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
    }
}

#endif
