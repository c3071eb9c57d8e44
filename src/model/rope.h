// RoPE, one head: adjacent pairs (2i, 2i+1) rotated by the angles of one position (cos_t, sin_t:
// that position's row of the tables, head_dim/2 each). The forward pass rotates queries and keys
// with it; a cache that keeps keys before RoPE (kvtransform.h, prerope) rotates them as it reads.
#ifndef MICRO_ROPE_H
#define MICRO_ROPE_H

static inline void rope_head(float *v, int head_dim, const float *cos_t, const float *sin_t) {
    for (int i = 0; i < head_dim / 2; i++) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cos_t[i] - b * sin_t[i];
        v[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
    }
}

#endif
