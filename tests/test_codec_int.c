// The int codec (the plate's scheme): per-element error bounds computed here from the input alone,
// exact round trips of representable vectors, ties to even, B = 1's sign × mean|x|, zero vectors,
// hand-computed bytes and normalised spec strings.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

#include "check.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void) { return check_uniform(&rng_state); }

static void must_init(KVStream *s, const char *spec, int n_heads, int head_dim, int capacity) {
    char err[256];
    if (kvstream_init(s, SPEC(spec), KV_ROLE_KEY, n_heads, head_dim, capacity, err, sizeof err)) {
        fprintf(stderr, "cannot create '%s': %s\n", spec, err);
        exit(1);
    }
}

// Bytes of the packed codes of one head's vector, by hand for head_dim 32: 32·B/8.
static const int codes_bytes_hd32[9] = {0, 4, 8, 12, 16, 20, 24, 28, 32};

static void test_bounds(int bits, const char *levels, int fp32_scale, int head_dim) {
    enum { H = 3, T = 48 };
    char spec[96];
    if (bits == 1)
        snprintf(spec, sizeof spec, "int:bits=1,scale=%s", fp32_scale ? "fp32" : "fp16");
    else
        snprintf(spec, sizeof spec, "int:bits=%d,levels=%s,scale=%s", bits, levels, fp32_scale ? "fp32" : "fp16");
    const int full = levels && strcmp(levels, "full") == 0;
    KVStream s;
    must_init(&s, spec, H, head_dim, T);
    static float x[T][H * 256], y[256];
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            const double mag = pow(10.0, -2.0 + 4.0 * urand()); // 0.01 .. 100
            float *v = x[t] + h * head_dim;
            for (int d = 0; d < head_dim; d++) v[d] = (float)(mag * (2.0 * urand() - 1.0));
            if (t == 5) memset(v, 0, sizeof(float) * (size_t)head_dim);           // all zero
            if (t == 6) { memset(v, 0, sizeof(float) * (size_t)head_dim); v[1] = -3.0f; } // one number
            if (t == 7) for (int d = 0; d < head_dim; d++) v[d] = 0.75f;          // constant
        }
        kvstream_append(&s, x[t]);
    }
    const double L = bits == 1 ? 1 : (double)((1 << (bits - 1)) - 1), half = (double)(1 << (bits - 1));
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            const float *v = x[t] + h * head_dim;
            s.ops->read(s.state, h, t, y);
            double amax = 0, extreme = 0, mean = 0;
            for (int d = 0; d < head_dim; d++) {
                if (fabs(v[d]) > amax) { amax = fabs(v[d]); extreme = v[d]; }
                mean += fabs(v[d]);
            }
            mean /= head_dim;
            int finite = 1;
            for (int d = 0; d < head_dim; d++) finite &= isfinite(y[d]);
            CHECK(finite, "%s t=%d h=%d decodes to a non-finite number", spec, t, h);
            if (bits == 1) {
                // sign × mean|x|: every number has magnitude mean|x| (stored scale), sign of x.
                const double slack = fp32_scale ? mean * 1e-6 : fmax(mean * 0x1p-11, 0x1p-25) + mean * 1e-6;
                for (int d = 0; d < head_dim; d++) {
                    CHECK(fabs(fabs(y[d]) - mean) <= slack, "%s t=%d: |x̂| = %g, mean|x| = %g", spec, t, fabs(y[d]), mean);
                    CHECK((v[d] >= 0) == (y[d] >= 0) || mean == 0, "%s t=%d d=%d: sign of %g decoded as %g", spec, t, d, v[d], y[d]);
                }
                continue;
            }
            // Codes are the nearest levels under the *stored* scale, which the decoded extreme reveals
            // (it sits on level ±L, or −2^(B−1) with levels=full): no slack for the scale's rounding.
            double ymax = 0;
            for (int d = 0; d < head_dim; d++) ymax = fmax(ymax, fabs(y[d]));
            const double ds = ymax / (full ? half : L);
            for (int d = 0; d < head_dim; d++) {
                const double lim = full ? (v[d] / (extreme / -half) > 0 ? half - 1 : half) : L;
                if (ds > 0 && fabs(v[d]) / ds <= lim + 0.5 - 1e-4)
                    CHECK(fabs(v[d] - y[d]) <= ds / 2 * (1 + 1e-5) + amax * 1e-7, "%s t=%d h=%d d=%d: %.9g decodes to "
                          "%.9g, not the nearest level of the stored scale %.9g", spec, t, h, d, v[d], y[d], ds);
            }
            // d: the scale the scheme defines; Δ: how far its stored value may be from it.
            const double step = full ? amax / half : amax / L;
            const double delta = fp32_scale ? step * 0x1p-22 : fmax(step * 0x1p-11, 0x1p-25);
            for (int d = 0; d < head_dim; d++) {
                double bound = step / 2;
                if (full && amax > 0 && v[d] / (extreme / -half) > half - 0.51) bound = step; // the unreachable +2^(B-1)
                bound += (half + 1) * delta + amax * 1e-6;
                CHECK(fabs(v[d] - y[d]) <= bound, "%s t=%d h=%d d=%d: x=%.9g x̂=%.9g error %.3g > bound %.3g", spec, t, h,
                      d, v[d], y[d], fabs(v[d] - y[d]), bound);
                if (amax == 0) CHECK(y[d] == 0.0f, "%s: a zero vector decodes to %g", spec, y[d]);
            }
        }
    }
    // Bytes: codes + one scale per head per token.
    const size_t row = head_dim == 32 ? (size_t)codes_bytes_hd32[bits] : ((size_t)head_dim * bits + 7) / 8;
    const size_t want = (size_t)T * H * (row + (fp32_scale ? 4 : 2));
    CHECK(s.ops->bytes(s.state) == want, "%s hd=%d: %zu bytes, want %zu", spec, head_dim, s.ops->bytes(s.state), want);
    kvstream_free(&s);
}

// Vectors made of representable levels decode exactly.
static void test_exact(void) {
    enum { HD = 32 };
    float x[HD], y[HD];
    for (int bits = 1; bits <= 8; bits++) {
        for (int variant = 0; variant < (bits == 1 ? 1 : 3); variant++) {
            for (int sc = 0; sc < 2; sc++) {
                const char *levels = variant == 0 ? "sym" : "full";
                char spec[96];
                snprintf(spec, sizeof spec, bits == 1 ? "int:bits=%d,scale=%s" : "int:bits=%d,scale=%s,levels=%s", bits,
                         sc ? "fp32" : "fp16", levels);
                KVStream s;
                must_init(&s, spec, 1, HD, 20);
                const int half = 1 << (bits - 1), L = half - 1;
                for (int t = 0; t < 20; t++) {
                    const float c = ldexpf(1.0f, -6 + t % 10); // a power of two: the scale, exactly
                    for (int d = 0; d < HD; d++) {
                        if (bits == 1) x[d] = (urand() < 0.5 ? -c : c);
                        else if (variant == 0) x[d] = c * (float)((int)(urand() * (2 * L + 1)) - L);
                        else x[d] = c * (float)((int)(urand() * 2 * half) - half);
                    }
                    if (bits > 1 && variant == 0) x[3] = c * (float)(t % 2 ? L : -L); // the extreme: ±L
                    if (bits > 1 && variant >= 1) x[3] = -c * (float)half;               // the extreme: −2^(B−1)
                    if (variant == 2)                                                   // mirrored: +2^(B−1)
                        for (int d = 0; d < HD; d++) x[d] = -x[d];
                    kvstream_append(&s, x);
                    s.ops->read(s.state, 0, t, y);
                    for (int d = 0; d < HD; d++)
                        CHECK(y[d] == x[d] || (x[d] == 0 && y[d] == 0), "%s variant %d t=%d d=%d: %g decodes to %g", spec,
                              variant, t, d, x[d], y[d]);
                }
                kvstream_free(&s);
            }
        }
    }
    // Ties go to even: bits=3 (levels −3..3), scale 1 exactly.
    KVStream s;
    must_init(&s, "int:bits=3", 1, HD, 1);
    float in[HD] = {3.0f, 1.5f, 0.5f, -2.5f, 2.5f, -0.5f, -1.5f, 2.4f};
    const float want[8] = {3.0f, 2.0f, 0.0f, -2.0f, 2.0f, 0.0f, -2.0f, 2.0f};
    kvstream_append(&s, in);
    s.ops->read(s.state, 0, 0, y);
    for (int d = 0; d < 8; d++) CHECK(y[d] == want[d], "int:bits=3 tie: %g decodes to %g, want %g", in[d], y[d], want[d]);
    kvstream_free(&s);
    // bits=8 uses codes ±127: the extreme comes back exactly, and 127 levels between 0 and it.
    must_init(&s, "int:bits=8,scale=fp32", 1, HD, 1);
    for (int d = 0; d < HD; d++) in[d] = (float)(d - 16) / 16.0f * 127.0f / 127.0f;
    in[0] = -127.0f;
    in[1] = 127.0f;
    in[2] = 64.0f;
    in[3] = 63.5f; // a tie between levels 63 and 64: to 64
    kvstream_append(&s, in);
    s.ops->read(s.state, 0, 0, y);
    CHECK(y[0] == -127.0f && y[1] == 127.0f && y[2] == 64.0f && y[3] == 64.0f, "int:bits=8 codes: %g %g %g %g", y[0], y[1],
          y[2], y[3]);
    kvstream_free(&s);
    // B = 1: sign × mean|x|.
    must_init(&s, "int:bits=1,scale=fp32", 1, 4, 1);
    const float v4[4] = {1.0f, -3.0f, 0.0f, -4.0f}; // mean |x| = 2; 0 counts as +
    kvstream_append(&s, v4);
    s.ops->read(s.state, 0, 0, y);
    CHECK(y[0] == 2.0f && y[1] == -2.0f && y[2] == 2.0f && y[3] == -2.0f, "int:bits=1: %g %g %g %g", y[0], y[1], y[2], y[3]);
    kvstream_free(&s);
}

static void test_spec_and_bytes(void) {
    struct { const char *in, *norm; } cases[] = {
        {"int:bits=4", "int:bits=4,levels=sym,scale=fp16"},
        {"int:bits=8,levels=full", "int:bits=8,levels=full,scale=fp16"},
        {"INT:Scale=FP32,bits=2", "int:bits=2,levels=sym,scale=fp32"},
        {"int:bits=1", "int:bits=1,levels=sign,scale=fp16"},
        {"int:bits=1,levels=sign,scale=fp32", "int:bits=1,levels=sign,scale=fp32"},
        {"int:levels=sym,bits=3,scale=fp16", "int:bits=3,levels=sym,scale=fp16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        KVStream s;
        must_init(&s, cases[i].in, 6, 32, 8);
        CHECK(strcmp(s.spec, cases[i].norm) == 0, "'%s' normalises to '%s', want '%s'", cases[i].in, s.spec, cases[i].norm);
        kvstream_free(&s);
    }
    // The plate's figure: int:bits=4 with an fp16 scale is 32·4/8 + 2 = 18 bytes per head per token.
    KVStream s;
    must_init(&s, "int:bits=4", 6, 32, 2048);
    float v[6 * 32];
    for (int i = 0; i < 6 * 32; i++) v[i] = (float)(urand() - 0.5);
    for (int t = 0; t < 2048; t++) kvstream_append(&s, v);
    CHECK(s.ops->bytes(s.state) == (size_t)18 * 6 * 2048, "int:bits=4: %zu bytes at 2048 tokens", s.ops->bytes(s.state));
    CHECK(kvstream_bits_per_element(&s) == 4.5, "int:bits=4: %g bits per number", kvstream_bits_per_element(&s));
    kvstream_free(&s);
    // head_dim 6 at 3 bits: 18 bits -> 3 bytes + 2 = 5 per head per token; head_dim 2 at 5 bits: 2 + 2.
    must_init(&s, "int:bits=3", 2, 6, 4);
    kvstream_append(&s, v);
    CHECK(s.ops->bytes(s.state) == 2 * 5, "int:bits=3 hd=6: %zu bytes", s.ops->bytes(s.state));
    kvstream_free(&s);
    must_init(&s, "int:bits=5,scale=fp32", 1, 2, 4);
    kvstream_append(&s, v);
    kvstream_append(&s, v);
    CHECK(s.ops->bytes(s.state) == 2 * (2 + 4), "int:bits=5 hd=2: %zu bytes", s.ops->bytes(s.state));
    kvstream_free(&s);
}

int main(void) {
    const int dims[] = {32, 64, 6, 2};
    for (int bits = 1; bits <= 8; bits++)
        for (int lv = 0; lv < (bits == 1 ? 1 : 2); lv++)
            for (int sc = 0; sc < 2; sc++)
                for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
                    test_bounds(bits, bits == 1 ? NULL : (lv ? "full" : "sym"), sc, dims[i]);
    test_exact();
    test_spec_and_bytes();
    if (failures) {
        fprintf(stderr, "test_codec_int: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_codec_int: ok\n");
    return 0;
}
