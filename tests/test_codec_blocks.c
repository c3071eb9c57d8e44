// llama.cpp block formats (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl): per-number error bounds computed
// here from each block's numbers and the format's published rule, exact round trips of vectors made
// of representable levels, zero and constant blocks, iq4_nl picking the nearest codebook level,
// error ordering between formats, and bytes per block.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

#include "check.h"

static uint64_t rng_state = 0x6a09e667f3bcc909ull;
static double urand(void) { return check_uniform(&rng_state); }

static double gauss(void) { // Irwin–Hall approximation of a standard normal
    double s = 0;
    for (int i = 0; i < 12; i++) s += urand();
    return s - 6.0;
}

static void must_init(KVStream *s, const char *spec, int n_heads, int head_dim, int capacity) {
    char err[256];
    if (kvstream_init(s, SPEC(spec), KV_ROLE_KEY, n_heads, head_dim, capacity, err, sizeof err)) {
        fprintf(stderr, "cannot create '%s': %s\n", spec, err);
        exit(1);
    }
}

enum { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, N_FORMATS };
// iq4_nl here is the searched variant, whose codes are the nearest under the stored scale (the
// default, llama.cpp's reference quantiser, is checked in test_codec_llama.c).
static const char *names[N_FORMATS] = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl:search"};
// Bytes per block of 32, from llama.cpp's block structs: fp16 d, [fp16 m], [qh 4 bytes], codes.
static const size_t block_bytes[N_FORMATS] = {2 + 32, 2 + 16, 2 + 2 + 16, 2 + 4 + 16, 2 + 2 + 4 + 16, 2 + 16};
static const int iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static double fp16_slack(double v) { return fmax(fabs(v) * 0x1p-11, 0x1p-25); }

// The per-number bound of one block x[0..32) decoded to y.
static void check_block(int f, const float *x, const float *y, const char *what) {
    double amax = 0, extreme = 0, mn = INFINITY, mx = -INFINITY;
    for (int j = 0; j < 32; j++) {
        if (fabs(x[j]) > amax) { amax = fabs(x[j]); extreme = x[j]; }
        mn = fmin(mn, x[j]);
        mx = fmax(mx, x[j]);
    }
    for (int j = 0; j < 32; j++) {
        CHECK(isfinite(y[j]), "%s %s: %g decodes to %g", names[f], what, x[j], y[j]);
        if (amax == 0) {
            CHECK(y[j] == 0.0f, "%s %s: zero decodes to %g", names[f], what, y[j]);
            continue;
        }
        double bound = 0;
        const double noise = 1e-6 * (fabs(mn) + fabs(mx));
        switch (f) {
        case Q8_0: { // d = amax/127, round to nearest
            const double d = amax / 127;
            bound = d / 2 + 127 * fp16_slack(d);
            break;
        }
        case Q4_0:
        case Q5_0: { // d = extreme / −2^(B−1); levels −2^(B−1)..2^(B−1)−1; +2^(B−1) is out of reach
            const double half = f == Q4_0 ? 8 : 16, d = extreme / -half, u = x[j] / d;
            bound = (u > half - 0.5 - 1e-3 ? fabs(d) : fabs(d) / 2) + half * fp16_slack(d);
            break;
        }
        case Q4_1:
        case Q5_1: { // d = (max − min)/(2^B − 1), m = min
            const double top = f == Q4_1 ? 15 : 31, d = (mx - mn) / top;
            bound = d / 2 + top * fp16_slack(d) + fp16_slack(mn);
            break;
        }
        case IQ4_NL: // checked by check_iq4nl_nearest; here only a loose sanity bound
            bound = amax * 0.25;
            break;
        }
        bound += noise;
        CHECK(fabs(y[j] - x[j]) <= bound, "%s %s j=%d: %.9g decodes to %.9g, error %.3g > %.3g", names[f], what, j, x[j],
              y[j], fabs(y[j] - x[j]), bound);
    }
}

// iq4_nl: every decoded number is d·v for one stored scale d and codebook entries v, and each is
// the entry nearest to x/d (up to the fp16 rounding of d, with which llama.cpp does not re-pick).
static void check_iq4nl_nearest(const float *x, const float *y, const char *what) {
    int jm = 0;
    for (int j = 1; j < 32; j++)
        if (fabs(y[j]) > fabs(y[jm])) jm = j;
    if (y[jm] == 0) return; // zero block
    int ok_any = 0;
    for (int k = 0; k < 16 && !ok_any; k++) {
        const double d = y[jm] / iq4nl[k];
        int consistent = 1, nearest = 1;
        for (int j = 0; j < 32 && consistent; j++) {
            const double r = y[j] / d;
            int found = 0;
            for (int i = 0; i < 16; i++) found |= fabs(r - iq4nl[i]) < 1e-3;
            consistent = found;
            double best = INFINITY;
            for (int i = 0; i < 16; i++) best = fmin(best, fabs(x[j] - d * iq4nl[i]));
            nearest &= fabs(x[j] - y[j]) <= best + 2 * 127 * fp16_slack(d) + 1e-6 * fabs(x[j]);
        }
        ok_any = consistent && nearest;
    }
    CHECK(ok_any, "iq4_nl %s: decoded block is not the nearest codebook levels under one scale", what);
}

static void test_random(int f, int head_dim) {
    enum { H = 2, T = 60 };
    KVStream s;
    must_init(&s, names[f], H, head_dim, T);
    const size_t stride = (size_t)H * head_dim;
    float *x = malloc(sizeof(float) * T * stride), y[128];
    for (int t = 0; t < T; t++) {
        float *v = x + t * stride;
        for (size_t i = 0; i < stride; i++) {
            const double mag = pow(10.0, -2.0 + 4.0 * urand());
            v[i] = (float)(t % 3 ? mag * (2 * urand() - 1) : gauss());
        }
        if (t == 1) memset(v, 0, sizeof(float) * stride);
        if (t == 2) for (size_t i = 0; i < stride; i++) v[i] = 0.75f;       // constant
        if (t == 4) for (size_t i = 0; i < stride; i++) v[i] = i % 5 ? 1e-3f : -40.0f; // one outlier per block
        kvstream_append(&s, v);
    }
    char what[64];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            s.ops->read(s.state, h, t, y);
            for (int b = 0; b < head_dim / 32; b++) {
                snprintf(what, sizeof what, "hd=%d t=%d h=%d block %d", head_dim, t, h, b);
                const float *xb = x + t * stride + (size_t)h * head_dim + b * 32;
                check_block(f, xb, y + b * 32, what);
                if (f == IQ4_NL) check_iq4nl_nearest(xb, y + b * 32, what);
                if (t == 2 && f != IQ4_NL && f != Q8_0) // 0.75 = −8·(−0.09375), −16·(−0.046875), or m
                    for (int j = 0; j < 32; j++) CHECK(y[b * 32 + j] == 0.75f, "%s: constant 0.75 -> %g", names[f], y[b * 32 + j]);
            }
        }
    const size_t want = (size_t)T * H * (head_dim / 32) * block_bytes[f];
    CHECK(s.ops->bytes(s.state) == want, "%s hd=%d: %zu bytes, want %zu", names[f], head_dim, s.ops->bytes(s.state), want);
    free(x);
    kvstream_free(&s);
}

// Vectors of representable levels c·k (c a power of two) come back exactly.
static void test_exact(int f) {
    KVStream s;
    must_init(&s, names[f], 1, 32, 40);
    float x[32], y[32];
    for (int t = 0; t < 40; t++) {
        const float c = ldexpf(1.0f, -5 + t % 8);
        const int sign = t % 2 ? -1 : 1;
        switch (f) {
        case Q8_0:
            for (int j = 0; j < 32; j++) x[j] = c * (float)((int)(urand() * 255) - 127);
            x[5] = c * 127 * sign;
            break;
        case Q4_0:
        case Q5_0: { // extreme −2^(B−1)·c (or its mirror +2^(B−1)·c with all levels negated)
            const int half = f == Q4_0 ? 8 : 16;
            for (int j = 0; j < 32; j++) x[j] = c * (float)((int)(urand() * 2 * half) - half) * sign;
            x[5] = -c * half * sign;
            break;
        }
        case Q4_1:
        case Q5_1: { // min k0·c, max (k0 + 2^B − 1)·c
            const int top = f == Q4_1 ? 15 : 31, k0 = (int)(urand() * 40) - 20;
            for (int j = 0; j < 32; j++) x[j] = c * (float)(k0 + (int)(urand() * (top + 1)));
            x[5] = c * k0;
            x[6] = c * (k0 + top);
            break;
        }
        case IQ4_NL: // the extreme on −127: llama.cpp's search finds the exact scale
            for (int j = 0; j < 32; j++) x[j] = c * (float)iq4nl[(int)(urand() * 16)] * sign;
            x[5] = -127 * c * sign;
            break;
        }
        kvstream_append(&s, x);
        s.ops->read(s.state, 0, t, y);
        for (int j = 0; j < 32; j++) CHECK(y[j] == x[j], "%s exact t=%d j=%d: %g decodes to %g", names[f], t, j, x[j], y[j]);
    }
    kvstream_free(&s);
}

// Mean squared error on Gaussian blocks: q8_0 < q5_1, q5_0 < q4_0 and iq4_nl < q4_0 (iq4_nl's
// raison d'être), q4_1 < q4_0 is not guaranteed and not checked.
static void test_error_order(void) {
    enum { T = 400, HD = 32 };
    KVStream s[N_FORMATS];
    for (int f = 0; f < N_FORMATS; f++) must_init(&s[f], names[f], 1, HD, T);
    double mse[N_FORMATS] = {0};
    float x[HD], y[HD];
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < HD; j++) x[j] = (float)gauss();
        for (int f = 0; f < N_FORMATS; f++) {
            kvstream_append(&s[f], x);
            s[f].ops->read(s[f].state, 0, t, y);
            for (int j = 0; j < HD; j++) mse[f] += (double)(x[j] - y[j]) * (x[j] - y[j]) / (T * HD);
        }
    }
    CHECK(mse[Q8_0] < mse[Q5_1] && mse[Q5_0] < mse[Q4_0] && mse[IQ4_NL] < mse[Q4_0] && mse[Q5_1] < mse[Q4_1],
          "error order: q8_0 %.3g q4_0 %.3g q4_1 %.3g q5_0 %.3g q5_1 %.3g iq4_nl %.3g", mse[Q8_0], mse[Q4_0], mse[Q4_1],
          mse[Q5_0], mse[Q5_1], mse[IQ4_NL]);
    for (int f = 0; f < N_FORMATS; f++) kvstream_free(&s[f]);
}

int main(void) {
    for (int f = 0; f < N_FORMATS; f++) {
        test_random(f, 32);
        test_random(f, 64);
        test_exact(f);
    }
    test_error_order();
    // One block per head per token at micro's shape: bits per number = 8 · bytes / 32.
    const double bits[N_FORMATS] = {8.5, 4.5, 5.0, 5.5, 6.0, 4.5};
    for (int f = 0; f < N_FORMATS; f++) {
        KVStream s;
        must_init(&s, names[f], 6, 32, 4);
        CHECK(strcmp(s.spec, names[f]) == 0, "%s normalises to %s", names[f], s.spec);
        float v[6 * 32] = {0};
        kvstream_append(&s, v);
        CHECK(kvstream_bits_per_element(&s) == bits[f], "%s: %g bits per number", names[f], kvstream_bits_per_element(&s));
        kvstream_free(&s);
    }
    if (failures) {
        fprintf(stderr, "test_codec_blocks: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_codec_blocks: ok\n");
    return 0;
}
