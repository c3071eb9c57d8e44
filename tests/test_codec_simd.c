// The codecs' AVX-512 kernels against their portable code, bit for bit. This file compiles the
// codec sources again with MICRO_PORTABLE (which turns the intrinsics off, quant.h) under other
// names; the library's codecs, built for this machine, take the AVX-512 paths where the compiler
// targets them. Every stream gets the same vectors in both builds; scores(), mix() and read() must
// agree exactly, at every length around tile and group boundaries, before and after end_step, at
// micro's head_dim 32 and at 64. (Without AVX-512 both sides are portable and the test is trivial.)
#define MICRO_PORTABLE 1
#define codec_int portable_codec_int
#include "../src/codecs/codec_int.c"
#undef codec_int
#undef TILE
#undef ALWAYS_INLINE
#undef NT
#define codec_q8_0 portable_codec_q8_0
#define codec_q4_0 portable_codec_q4_0
#define codec_q4_1 portable_codec_q4_1
#define codec_q5_0 portable_codec_q5_0
#define codec_q5_1 portable_codec_q5_1
#define codec_iq4_nl portable_codec_iq4_nl
#include "../src/codecs/codec_ggml.c"
#undef codec_q8_0
#undef codec_q4_0
#undef codec_q4_1
#undef codec_q5_0
#undef codec_q5_1
#undef codec_iq4_nl
#undef TILE
#undef ALWAYS_INLINE
#define codec_fp16 portable_codec_fp16
#include "../src/codecs/codec_fp16.c"
#undef codec_fp16
#undef TILE
#undef ALWAYS_INLINE
#define codec_bf16 portable_codec_bf16
#include "../src/codecs/codec_bf16.c"
#undef codec_bf16
#undef TILE
#undef ALWAYS_INLINE
#define codec_fp8 portable_codec_fp8
#include "../src/codecs/codec_fp8.c"
#undef codec_fp8
#undef TILE
#undef ALWAYS_INLINE
#define codec_kivi portable_codec_kivi
#include "../src/codecs/codec_kivi.c"
#undef codec_kivi
#undef TILE
#undef ALWAYS_INLINE

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

#include "check.h"

static uint64_t rng_state = 0x510e527fade682d1ull;
static double urand(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

// A stream of `family` (the portable build) as kvstream_init makes one of the library's.
static int portable_stream(KVStream *s, const CodecFamily *family, const char *text, KVRole role, int n_heads,
                           int head_dim, int capacity) {
    char err[256];
    CodecSpec spec;
    memset(s, 0, sizeof *s);
    if (spec_parse(text, &spec, err, sizeof err)) return -1;
    SpecOption *o = &spec.options[spec.n_options++];
    snprintf(o->key, sizeof o->key, "role");
    snprintf(o->value, sizeof o->value, "%s", role == KV_ROLE_KEY ? "k" : "v");
    o->has_value = 1;
    s->state = family->create(&spec, n_heads, head_dim, capacity, s->spec, sizeof s->spec, err, sizeof err);
    if (!s->state) return -1;
    s->ops = family->ops;
    s->n_heads = n_heads;
    s->head_dim = head_dim;
    s->capacity = capacity;
    return 0;
}

static int same_bits(const float *a, const float *b, int n) { return memcmp(a, b, sizeof(float) * (size_t)n) == 0; }

static void compare(KVStream *lib, KVStream *port, KVRole role, const char *label, int n) {
    enum { HDMAX = 64 };
    static float q[HDMAX], p[2048], a[2048], b[2048];
    const int hd = lib->head_dim;
    for (int h = 0; h < lib->n_heads; h++) {
        for (int d = 0; d < hd; d++) q[d] = (float)(2 * urand() - 1);
        double total = 0;
        for (int j = 0; j < n; j++) total += (p[j] = (float)(urand() * urand()));
        for (int j = 0; j < n; j++) p[j] = (float)(p[j] / total);
        if (role == KV_ROLE_KEY) {
            for (int m = n; m >= 1 && m >= n - 2; m--) {
                lib->ops->scores(lib->state, h, q, a, m);
                port->ops->scores(port->state, h, q, b, m);
                CHECK(same_bits(a, b, m), "%s n=%d m=%d h=%d: scores differ from the portable build", label, n, m, h);
            }
        } else {
            lib->ops->mix(lib->state, h, p, a, n);
            port->ops->mix(port->state, h, p, b, n);
            CHECK(same_bits(a, b, hd), "%s n=%d h=%d: mix differs from the portable build", label, n, h);
        }
        for (int j = 0; j < n; j += 7) {
            lib->ops->read(lib->state, h, j, a);
            port->ops->read(port->state, h, j, b);
            CHECK(same_bits(a, b, hd), "%s n=%d h=%d token %d: read differs from the portable build", label, n, h, j);
        }
    }
}

static int checkpoint(int n) { return n <= 5 || n % 16 <= 2 || n % 16 == 15 || n % 64 == 63 || n == 2 * 150; }

static void test_family(const CodecFamily *family, const char *spec, KVRole role, int head_dim, int length) {
    enum { H = 2 };
    char label[160];
    snprintf(label, sizeof label, "%s (%s, head_dim %d)", spec, role == KV_ROLE_KEY ? "keys" : "values", head_dim);
    KVStream lib, port;
    char err[256];
    if (kvstream_init(&lib, spec, role, H, head_dim, length, err, sizeof err)) {
        CHECK(0, "%s: %s", label, err);
        return;
    }
    if (portable_stream(&port, family, spec, role, H, head_dim, length)) {
        CHECK(0, "%s: the portable build refuses it", label);
        kvstream_free(&lib);
        return;
    }
    float vec[H * 64];
    for (int n = 1; n <= length; n++) {
        const double mag = pow(10.0, -2.0 + 3.0 * urand());
        for (int i = 0; i < H * head_dim; i++) vec[i] = (float)(mag * (2 * urand() - 1) * (1 + (i % 5 == 0) * 4));
        kvstream_append(&lib, vec);
        port.ops->append(port.state, vec);
        if (checkpoint(n)) compare(&lib, &port, role, label, n);
        if (lib.ops->end_step) lib.ops->end_step(lib.state);
        if (port.ops->end_step) port.ops->end_step(port.state);
        if (checkpoint(n)) compare(&lib, &port, role, label, n);
    }
    CHECK(lib.ops->bytes(lib.state) == port.ops->bytes(port.state), "%s: bytes differ", label);
    kvstream_free(&lib);
    port.ops->destroy(port.state);
}

int main(void) {
    static const struct {
        const CodecFamily *family;
        const char *spec;
    } cases[] = {
        {&portable_codec_int, "int:bits=1"},
        {&portable_codec_int, "int:bits=2"},
        {&portable_codec_int, "int:bits=3"},
        {&portable_codec_int, "int:bits=4"},
        {&portable_codec_int, "int:bits=4,levels=full,scale=fp32"},
        {&portable_codec_int, "int:bits=5"},
        {&portable_codec_int, "int:bits=6,levels=full"},
        {&portable_codec_int, "int:bits=7"},
        {&portable_codec_int, "int:bits=8"},
        {&portable_codec_q8_0, "q8_0"},
        {&portable_codec_q4_0, "q4_0"},
        {&portable_codec_q4_1, "q4_1"},
        {&portable_codec_q5_0, "q5_0"},
        {&portable_codec_q5_1, "q5_1"},
        {&portable_codec_iq4_nl, "iq4_nl"},
        {&portable_codec_fp16, "fp16"},
        {&portable_codec_bf16, "bf16"},
        {&portable_codec_fp8, "fp8:e4m3"},
        {&portable_codec_fp8, "fp8:e5m2"},
        {&portable_codec_fp8, "fp8:e4m3,scale=token"},
        {&portable_codec_fp8, "fp8:e5m2,scale=token"},
        {&portable_codec_kivi, "kivi"},
        {&portable_codec_kivi, "kivi:bits=4"},
        {&portable_codec_kivi, "kivi:bits=1,group=16,residual=32"},
        {&portable_codec_kivi, "kivi:bits=3,group=32,residual=64"},
        {&portable_codec_kivi, "kivi:bits=8,group=32,residual=64"},
        {&portable_codec_kivi, "kivi:bits=5,group=16,residual=48"},
        {&portable_codec_kivi, "kivi:bits=2,group=8,residual=16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int role = 0; role < 2; role++) {
            const KVRole r = role ? KV_ROLE_VALUE : KV_ROLE_KEY;
            test_family(cases[i].family, cases[i].spec, r, 32, 300);
            test_family(cases[i].family, cases[i].spec, r, 64, 100);
        }
    if (failures) {
        fprintf(stderr, "test_codec_simd: %d failure(s)\n", failures);
        return 1;
    }
#ifdef __AVX512F__
    printf("test_codec_simd: ok (AVX-512 kernels agree with the portable ones)\n");
#else
    printf("test_codec_simd: ok (no AVX-512 on this build: both sides are portable)\n");
#endif
    return 0;
}
