// The trainer's random numbers: splitmix64 (one 64-bit word of state, so a checkpoint can carry
// it exactly) with Box-Muller normals. Deterministic across machines and compilers.
#ifndef MICRO_TRAIN_RNG_H
#define MICRO_TRAIN_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t state;
} Rng;

void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_u64(Rng *r);
// Uniform in [0, 1) with 53 random bits.
double rng_uniform(Rng *r);
// Uniform integer in [0, n) (n > 0), without modulo bias.
uint64_t rng_below(Rng *r, uint64_t n);
// Standard normal (Box-Muller; uses two uniforms per draw, keeps no cached second value).
double rng_normal(Rng *r);

#endif
