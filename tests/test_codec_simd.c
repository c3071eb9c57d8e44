// The codecs' AVX2 and AVX-512 kernels against their portable build, bit for bit. The library holds
// a build of every family with kernels per kernel set and hands out one at run time
// (codec_dispatch.h); this test creates each stream twice, once with the set under test forced and
// once with the portable build, and feeds both the same vectors: scores(), mix() and read() must
// agree exactly, at every length around tile and group boundaries, before and after end_step, at
// micro's head_dim 32 and at 64, fp16/bf16/fp8 with and without scale=token. It runs every set this
// CPU has and names the ones it could not.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_dispatch.h"
#include "kvcache.h"
#include "kvq_view.h"
#include "spec_catalog.h"

#include "check.h"

static uint64_t rng_state = 0x510e527fade682d1ull;
static double urand(void) { return check_uniform(&rng_state); }

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
                kvstream_scores(lib, h, q, a, m);
                kvstream_scores(port, h, q, b, m);
                CHECK(check_same_bits(a, b, m), "%s n=%d m=%d h=%d: scores differ from the portable build", label, n, m, h);
            }
        } else {
            kvstream_mix(lib, h, p, a, n);
            kvstream_mix(port, h, p, b, n);
            CHECK(check_same_bits(a, b, hd), "%s n=%d h=%d: mix differs from the portable build", label, n, h);
        }
        for (int j = 0; j < n; j += 7) {
            lib->ops->read(lib->state, h, j, a);
            port->ops->read(port->state, h, j, b);
            CHECK(check_same_bits(a, b, hd), "%s n=%d h=%d token %d: read differs from the portable build", label, n, h, j);
        }
    }
}

static Isa isa_under_test;

static void test_family_heads(const char *spec, KVRole role, int H, int head_dim, int length);
static void test_family(const char *spec, KVRole role, int head_dim, int length) {
    test_family_heads(spec, role, 2, head_dim, length);
}

static int checkpoint(int n) { return n <= 5 || n % 16 <= 2 || n % 16 == 15 || n % 64 == 63 || n == 2 * 150; }

static void test_family_heads(const char *spec, KVRole role, int H, int head_dim, int length) {
    char label[160];
    snprintf(label, sizeof label, "%s %s (%s, head_dim %d)", cpu_isa_name(isa_under_test), spec, role == KV_ROLE_KEY ? "keys" : "values", head_dim);
    KVStream lib, port;
    char err[256];
    codec_force_isa(isa_under_test);
    if (kvstream_init(&lib, SPEC(spec), role, H, head_dim, length, err, sizeof err)) {
        CHECK(0, "%s: %s", label, err);
        return;
    }
    codec_force_isa(ISA_PORTABLE);
    const int refused = kvstream_init(&port, SPEC(spec), role, H, head_dim, length, err, sizeof err);
    codec_force_isa(-1);
    if (refused) {
        CHECK(0, "%s: the portable build refuses it: %s", label, err);
        kvstream_free(&lib);
        return;
    }
    CHECK(lib.ops != port.ops, "%s: both streams got the same build", label);
    float vec[6 * 64];
    for (int n = 1; n <= length; n++) {
        const double mag = pow(10.0, -2.0 + 3.0 * urand());
        for (int i = 0; i < H * head_dim; i++) vec[i] = (float)(mag * (2 * urand() - 1) * (1 + (i % 5 == 0) * 4));
        kvstream_append(&lib, vec);
        kvstream_append(&port, vec);
        if (checkpoint(n)) compare(&lib, &port, role, label, n);
        kvstream_end_step(&lib);
        kvstream_end_step(&port);
        if (checkpoint(n)) compare(&lib, &port, role, label, n);
    }
    CHECK(lib.ops->bytes(lib.state) == port.ops->bytes(port.state), "%s: bytes differ", label);
    kvstream_free(&lib);
    kvstream_free(&port);
}

static void run_cases(void) {
    static const char *const cases[] = {
        "fp32",
        "int:bits=1",
        "int:bits=2",
        "int:bits=3",
        "int:bits=4",
        "int:bits=4,levels=full,scale=fp32",
        "int:bits=5",
        "int:bits=6,levels=full",
        "int:bits=7",
        "int:bits=8",
        "q8_0",
        "q4_0",
        "q4_1",
        "q5_0",
        "q5_1",
        "iq4_nl",
        "fp16",
        "bf16",
        "fp8:e4m3",
        "fp8:e5m2",
        "fp8:e4m3,scale=token",
        "fp8:e5m2,scale=token",
        "fp16:scale=token",
        "bf16:scale=token",
        "kivi",
        "kivi:bits=4",
        "kivi:bits=1,group=16,residual=32",
        "kivi:bits=3,group=32,residual=64",
        "kivi:bits=8,group=32,residual=64",
        "kivi:bits=5,group=16,residual=48",
        "kivi:bits=2,group=8,residual=16",
        // Rows looked up in level tables (row_kernels.h): up to 16 levels, 32, and gathered beyond.
        "quarot:bits=2",
        "quarot:bits=3",
        "quarot:bits=4",
        "turboquant:bits=1",
        "turboquant:bits=2",
        "turboquant:bits=3",
        "turboquant:bits=4",
        "turboquant:bits=5",
        "turboquant:bits=6",
        "turboquant:bits=8",
        "turboquant:bits=2,mode=prod",
        "turboquant:bits=4,mode=prod",
        "turboquant:bits=9,mode=prod",
        "turboquant:preset=k3v4_nc",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int role = 0; role < 2; role++) {
            const KVRole r = role ? KV_ROLE_VALUE : KV_ROLE_KEY;
            test_family(cases[i], r, 32, 300);
            test_family(cases[i], r, 64, 100);
        }
    // kvquant reads models/micro.kvq, made for micro's 6 heads of 32: its values (per head per token,
    // with and without exact entries) and its keys (per channel, read back).
    char calib[4096], err[512];
    const char *root = getenv("MICRO_SOURCE_ROOT");
    snprintf(calib, sizeof calib, "%s/models/micro.kvq", root ? root : ".");
    CHECK(!kvq_view_set(calib, NULL, 1, err, sizeof err), "%s", err);
    static const char *const kvquant[] = {"kvquant:bits=2", "kvquant:bits=3", "kvquant:bits=4,outliers=0"};
    for (size_t i = 0; i < sizeof kvquant / sizeof kvquant[0]; i++)
        for (int role = 0; role < 2; role++) test_family_heads(kvquant[i], role ? KV_ROLE_VALUE : KV_ROLE_KEY, 6, 32, 200);
    // Every family's examples from the catalog (mx, nvfp4 and qjl among them), and the transforms'.
    int n_catalog;
    const CatalogEntry *catalog = spec_catalog(&n_catalog);
    for (int i = 0; i < n_catalog; i++) {
        const CatalogEntry *e = &catalog[i];
        const int H = e->calibrated ? 6 : 2, length = e->calibrated ? 200 : 150;
        test_family_heads(e->k, KV_ROLE_KEY, H, 32, length);
        test_family_heads(e->v, KV_ROLE_VALUE, H, 32, length);
        // Latent attention's slots, both in the key role: the latent (one head of 64, read as keys
        // and as values) and the RoPE key (one head of 16); a spec the shape refuses is skipped.
        if (e->calibrated) continue;
        for (int hd = 64; hd >= 16; hd -= 48) {
            const KVShape shape = {1, hd, length};
            char why[256];
            if (!kvstream_check_spec_shape(e->k, KV_ROLE_KEY, &shape, why, sizeof why))
                test_family_heads(e->k, KV_ROLE_KEY, 1, hd, length);
        }
    }
}

int main(void) {
    char ran[64] = "", not_run[64] = "";
    for (int isa = ISA_AVX2; isa <= ISA_AVX512; isa++) {
        if (!codec_isa_available((Isa)isa)) {
            snprintf(not_run + strlen(not_run), sizeof not_run - strlen(not_run), " %s", cpu_isa_name((Isa)isa));
            continue;
        }
        isa_under_test = (Isa)isa;
        snprintf(ran + strlen(ran), sizeof ran - strlen(ran), " %s", cpu_isa_name((Isa)isa));
        run_cases();
    }
    if (failures) {
        fprintf(stderr, "test_codec_simd: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_codec_simd: ok: the%s kernels agree with the portable ones%s%s\n", *ran ? ran : " (none)",
           *not_run ? "; not run (not compiled in, or this CPU lacks them):" : "", not_run);
    return 0;
}
