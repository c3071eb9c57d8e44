#include "rng.h"

#include <math.h>

void rng_seed(Rng *r, uint64_t seed) {
    r->state = seed ^ 0x6a09e667f3bcc909ULL; // any fixed offset: seed 0 is then as good as any
}

uint64_t rng_u64(Rng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double rng_uniform(Rng *r) {
    return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t rng_below(Rng *r, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n; // reject the incomplete last block
    for (;;) {
        uint64_t x = rng_u64(r);
        if (x < limit) return x % n;
    }
}

double rng_normal(Rng *r) {
    double u1 = 1.0 - rng_uniform(r); // (0, 1]: log is finite
    double u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
