// KIVI streaming: after every step (before and after end_step), exactly which tokens of a key
// stream and of a value stream are still exact, for lengths around multiples of G and R; error
// bounds of the quantised ones per group (keys per channel over G tokens, values per token over G
// channels); quantised tokens never change afterwards; constant groups; hand-computed bytes.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

#include "check.h"

static uint64_t rng_state = 0x853c49e6748fea9bull;
static uint32_t rnd(void) { return (uint32_t)(check_next(&rng_state) >> 32); }

static void must_init(KVStream *s, const char *spec, KVRole role, int n_heads, int head_dim, int capacity) {
    char err[256];
    if (kvstream_init(s, SPEC(spec), role, n_heads, head_dim, capacity, err, sizeof err)) {
        fprintf(stderr, "cannot create '%s': %s\n", spec, err);
        exit(1);
    }
}

static void end_step(KVStream *s) {
    kvstream_end_step(s);
}

// Tokens [0, n) of the stream quantised so far, as KIVI's decode loop defines it.
static int expected_quantised(int is_value, int R, int n, int after_end_step) {
    if (!is_value) return R * ((after_end_step ? n : n - 1) / R);
    const int window = after_end_step ? R : R + 1;
    return n > window ? n - window : 0;
}

// Worst error of one number in a group with range [mn, mx] at `bits`: half a step, plus what the
// fp16 rounding of the step can add over 2^B − 1 steps (the minimum is stored exactly: inputs are
// fp16 numbers), plus float noise.
static double group_bound(double mn, double mx, int bits) {
    const double top = (double)((1 << bits) - 1), step = (mx - mn) / top;
    return step / 2 + top * fmax(step * 0x1p-11, 0x1p-25) + 1e-6 * (fabs(mn) + fabs(mx));
}

// One stream: T steps of append (+ end_step when `steps`), checked before and after each end_step.
static void run(int is_value, int bits, int G, int R, int head_dim, int T, int steps) {
    enum { H = 2 };
    char spec[96];
    snprintf(spec, sizeof spec, "kivi:bits=%d,group=%d,residual=%d", bits, G, R);
    KVStream s;
    must_init(&s, spec, is_value ? KV_ROLE_VALUE : KV_ROLE_KEY, H, head_dim, T);
    const size_t stride = (size_t)H * head_dim;
    float *x = malloc(sizeof(float) * (size_t)T * stride);
    float *first = malloc(sizeof(float) * (size_t)T * stride); // decoded value when first quantised
    char *seen = calloc((size_t)T, 1);
    float y[256];
    long lossy = 0, checked = 0;
    for (int n = 1; n <= T; n++) {
        float *v = x + (size_t)(n - 1) * stride;
        // fp16-representable inputs (multiples of 2^-8 in [-4, 4]) so that "exact" means read == input.
        for (size_t i = 0; i < stride; i++) v[i] = (float)((int)(rnd() % 2049) - 1024) / 256.0f;
        for (int h = 0; h < H; h++) {
            v[h * head_dim + 0] = 0.75f; // a constant channel: every key group of it is constant
            v[h * head_dim + 1] = 0.0f;
        }
        if (n % 7 == 3) // a constant token: every value group of it is constant
            for (size_t i = 0; i < stride; i++) v[i] = -1.25f;
        kvstream_append(&s, v);
        for (int phase = 0; phase < (steps ? 2 : 1); phase++) {
            if (phase == 1) end_step(&s);
            const int nq = expected_quantised(is_value, R, n, phase == 1);
            for (int t = 0; t < n; t++) {
                for (int h = 0; h < H; h++) {
                    const float *in = x + (size_t)t * stride + (size_t)h * head_dim;
                    s.ops->read(s.state, h, t, y);
                    if (t >= nq) {
                        for (int d = 0; d < head_dim; d++)
                            CHECK(y[d] == in[d], "%s %s n=%d phase=%d: token %d (of %d quantised) should be exact, "
                                  "d=%d: %g vs %g", spec, is_value ? "v" : "k", n, phase, t, nq, d, y[d], in[d]);
                        continue;
                    }
                    for (int d = 0; d < head_dim; d++) {
                        // The group of number (t, d): G tokens of channel d, or G channels of token t.
                        double mn = INFINITY, mx = -INFINITY;
                        if (is_value) {
                            for (int c = d / G * G; c < d / G * G + G; c++) {
                                mn = fmin(mn, in[c]);
                                mx = fmax(mx, in[c]);
                            }
                        } else {
                            for (int u = t / G * G; u < t / G * G + G; u++) {
                                const float xu = x[(size_t)u * stride + (size_t)h * head_dim + d];
                                mn = fmin(mn, xu);
                                mx = fmax(mx, xu);
                            }
                        }
                        const double bound = group_bound(mn, mx, bits);
                        CHECK(isfinite(y[d]) && fabs(y[d] - in[d]) <= bound, "%s %s n=%d: token %d d=%d: %g decodes "
                              "to %g (bound %g)", spec, is_value ? "v" : "k", n, t, d, in[d], y[d], bound);
                        if (mn == mx) CHECK(y[d] == in[d], "%s: a constant group decodes to %g, not %g", spec, y[d], in[d]);
                        const size_t at = (size_t)t * stride + (size_t)h * head_dim + d;
                        if (!seen[t]) first[at] = y[d];
                        else CHECK(first[at] == y[d], "%s: quantised token %d changed (%g -> %g)", spec, t, first[at], y[d]);
                        lossy += y[d] != in[d];
                        checked++;
                    }
                }
                if (t < nq) seen[t] = 1;
            }
            // Bytes by the definition: fp16 residual numbers + codes + (scale, min) pairs.
            const size_t row = ((size_t)head_dim * bits + 7) / 8;
            const size_t meta = is_value ? (size_t)nq * (head_dim / G) * 4 : (size_t)(nq / G) * head_dim * 4;
            const size_t want = H * ((size_t)(n - nq) * head_dim * 2 + (size_t)nq * row + meta);
            CHECK(s.ops->bytes(s.state) == want, "%s %s n=%d phase=%d: %zu bytes, want %zu", spec, is_value ? "v" : "k", n,
                  phase, s.ops->bytes(s.state), want);
        }
    }
    CHECK(checked == 0 || lossy > 0, "%s: quantised tokens all came back exact: nothing was quantised?", spec);
    free(x);
    free(first);
    free(seen);
    kvstream_free(&s);
}

// The micro shape (6 heads of 32, defaults B=2, G=32, R=128), bytes worked out by hand.
static void test_bytes_by_hand(void) {
    KVStream k, v;
    must_init(&k, "kivi", KV_ROLE_KEY, 6, 32, 2048);
    must_init(&v, "kivi", KV_ROLE_VALUE, 6, 32, 2048);
    CHECK(strcmp(k.spec, "kivi:bits=2,group=32,residual=128") == 0, "kivi normalises to '%s'", k.spec);
    CHECK(strcmp(v.spec, "kivi:bits=2,group=32,residual=128") == 0, "kivi (values) normalises to '%s'", v.spec);
    float vec[6 * 32];
    for (int i = 0; i < 6 * 32; i++) vec[i] = (float)(i % 11) * 0.125f - 0.5f;
    for (int n = 1; n <= 2048; n++) {
        kvstream_append(&k, vec);
        kvstream_append(&v, vec);
        if (n == 1) { // one fp16 key and value: 32 · 2 bytes per head
            CHECK(k.ops->bytes(k.state) == 6 * 64, "kivi k n=1: %zu", k.ops->bytes(k.state));
            CHECK(v.ops->bytes(v.state) == 6 * 64, "kivi v n=1: %zu", v.ops->bytes(v.state));
        }
        if (n == 2048) {
            // Before end_step. Keys: 1920 quantised (15 chunks of 128) = 1920 · 8 bytes of 2-bit codes
            // + 60 groups · 32 channels · 4 bytes of (scale, min) = 15360 + 7680; 128 fp16 keys
            // = 8192; total 31232 per head. Values: 129 in the window (8256 bytes) and 1919
            // quantised · (8 + 4) = 23028; total 31284 per head.
            CHECK(k.ops->bytes(k.state) == 6 * 31232, "kivi k n=2048 before end_step: %zu", k.ops->bytes(k.state));
            CHECK(v.ops->bytes(v.state) == 6 * 31284, "kivi v n=2048 before end_step: %zu", v.ops->bytes(v.state));
        }
        end_step(&k);
        end_step(&v);
        if (n == 200) {
            // Keys: 128 quantised = 1024 + 4 · 128, 72 fp16 = 4608: 6144 per head.
            // Values: 72 quantised · 12 = 864, 128 fp16 = 8192: 9056 per head.
            CHECK(k.ops->bytes(k.state) == 6 * 6144, "kivi k n=200: %zu", k.ops->bytes(k.state));
            CHECK(v.ops->bytes(v.state) == 6 * 9056, "kivi v n=200: %zu", v.ops->bytes(v.state));
        }
    }
    // After the last end_step: all 2048 keys quantised = 16384 + 64 · 128 = 24576 per head, 3 bits
    // per number; values 1920 · 12 + 128 · 64 = 31232 per head, 3.8125 bits per number.
    CHECK(k.ops->bytes(k.state) == 6 * 24576, "kivi k n=2048: %zu", k.ops->bytes(k.state));
    CHECK(v.ops->bytes(v.state) == 6 * 31232, "kivi v n=2048: %zu", v.ops->bytes(v.state));
    CHECK(kvstream_bits_per_element(&k) == 3.0, "kivi k bits %g", kvstream_bits_per_element(&k));
    CHECK(kvstream_bits_per_element(&v) == 3.8125, "kivi v bits %g", kvstream_bits_per_element(&v));
    kvstream_free(&k);
    kvstream_free(&v);
}

// A constant group with a value fp16 cannot hold exactly: decodes to the fp16 value, no NaN.
static void test_constant_group(void) {
    for (int role = 0; role < 2; role++) {
        KVStream s;
        must_init(&s, "kivi:bits=2,group=4,residual=4", role ? KV_ROLE_VALUE : KV_ROLE_KEY, 1, 4, 16);
        const float c[4] = {0.1f, 0.1f, 0.1f, 0.1f};
        for (int n = 0; n < 16; n++) {
            kvstream_append(&s, c);
            end_step(&s);
        }
        float y[4];
        s.ops->read(s.state, 0, 0, y);
        for (int d = 0; d < 4; d++)
            CHECK(y[d] == 0x1.998p-4f, "constant group (%s): 0.1 decodes to %a, want fp16(0.1) = 0x1.998p-4",
                  role ? "v" : "k", y[d]);
        kvstream_free(&s);
    }
}

// A spec checked against a model: a residual of a whole context would keep every token in
// fp16 and quantise nothing, so it is refused with one line; a residual below the context passes, and
// a stream shorter than the residual (a short text) is still KIVI as designed, not an error. The
// check uses the model's head shape, not micro's.
static void test_spec_check(void) {
    char err[512] = "";
    const KVShape micro = {6, 32, 2048}, wide = {4, 48, 4096}, tiny = {6, 32, 64};
    CHECK(kvstream_check_spec("kivi:residual=100000", KV_ROLE_KEY, err, sizeof err) != 0 && strstr(err, "residual"),
          "kivi:residual=100000 passes the spec check (%s)", err);
    CHECK(kvstream_check_spec_shape("kivi:residual=2048", KV_ROLE_VALUE, &micro, err, sizeof err) != 0,
          "kivi:residual=2048 passes for a 2048-token context");
    CHECK(kvstream_check_spec_shape("kivi:residual=2016", KV_ROLE_KEY, &micro, err, sizeof err) == 0,
          "kivi:residual=2016 is refused: %s", err);
    CHECK(kvstream_check_spec_shape("kivi", KV_ROLE_KEY, &tiny, err, sizeof err) != 0,
          "kivi (residual 128) passes for a 64-token context");
    CHECK(kvstream_check_spec_shape("kivi:residual=32", KV_ROLE_KEY, &tiny, err, sizeof err) == 0,
          "kivi:residual=32 is refused for a 64-token context: %s", err);
    // the model's head shape: 48 is not a multiple of q4_0's blocks, and kivi's value groups of 32
    // do not divide it, although both pass at micro's 32
    CHECK(kvstream_check_spec("q4_0", KV_ROLE_KEY, err, sizeof err) == 0, "q4_0 fails at micro's shape: %s", err);
    CHECK(kvstream_check_spec_shape("q4_0", KV_ROLE_KEY, &wide, err, sizeof err) != 0, "q4_0 passes at head_dim 48");
    CHECK(kvstream_check_spec_shape("kivi", KV_ROLE_VALUE, &wide, err, sizeof err) != 0, "kivi values pass at head_dim 48");
    CHECK(kvstream_check_spec_shape("kivi:group=16", KV_ROLE_VALUE, &wide, err, sizeof err) == 0,
          "kivi:group=16 values fail at head_dim 48: %s", err);
    CHECK(kvstream_check_spec("kivi:context=9", KV_ROLE_KEY, err, sizeof err) != 0, "a spec may set 'context'");
    KVStream s;
    must_init(&s, "kivi", KV_ROLE_KEY, 2, 32, 20); // a 20-token stream: all of it in the residual
    kvstream_free(&s);
}

int main(void) {
    struct { int bits, G, R, head_dim, T; } cfg[] = {
        {2, 32, 128, 32, 260}, // the defaults at micro's head_dim, past two flushes of the residual
        {2, 4, 8, 32, 37},     // small groups: lengths around every multiple of G and R
        {3, 4, 12, 32, 50},    // 3-bit codes straddle bytes
        {1, 3, 6, 6, 31},      // 1-bit codes, head_dim 6
        {4, 8, 8, 64, 40},     // R = G, head_dim 64 (two 32-number chunks, two value groups)
        {8, 16, 32, 48, 70},   // 8-bit codes, head_dim 48 (a 16-number tail chunk, three value groups)
        {5, 6, 12, 36, 41},    // G does not divide 32: values groups of 6 channels
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
        for (int is_value = 0; is_value < 2; is_value++)
            for (int steps = 0; steps < 2; steps++) {
                if (is_value && cfg[i].head_dim % cfg[i].G) continue;
                run(is_value, cfg[i].bits, cfg[i].G, cfg[i].R, cfg[i].head_dim, cfg[i].T, steps);
            }
    test_bytes_by_hand();
    test_constant_group();
    test_spec_check();
    if (failures) {
        fprintf(stderr, "test_codec_kivi: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_codec_kivi: ok\n");
    return 0;
}
