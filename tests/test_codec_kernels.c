// Every registered codec family: scores() on key streams and mix() on value streams (what attention
// calls; they read the encoded bytes directly) agree with read() followed by a plain dot product /
// weighted sum, within 1e-5 of the sum of the magnitudes of the terms (relative error of a dot
// product), at lengths around group and residual
// boundaries, before and after end_step. Also: normalised spec strings, bad specs and shapes fail
// with a message, every family has a help line.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "kvq_view.h"
#include "quant.h"

#include "check.h"
#include "spec_catalog.h"

static uint64_t rng_state = 0xbb67ae8584caa73bull;
static double urand(void) { return check_uniform(&rng_state); }

// Specs that exercise every option of every family, with their normalised forms.
static const struct { const char *spec, *norm; int blocks; } specs[] = {
    {"fp32", "fp32", 0},
    {"fp16", "fp16", 0},
    {"bf16", "bf16", 0},
    {"fp8:e4m3", "fp8:e4m3,scale=none", 0},
    {"fp8:e5m2", "fp8:e5m2,scale=none", 0},
    {"fp8:e4m3,scale=token", "fp8:e4m3,scale=token", 0},
    {"fp8:scale=token,e5m2", "fp8:e5m2,scale=token", 0},
    {"int:bits=1", "int:bits=1,levels=sign,scale=fp16", 0},
    {"int:bits=2", "int:bits=2,levels=sym,scale=fp16", 0},
    {"int:bits=3,levels=full", "int:bits=3,levels=full,scale=fp16", 0},
    {"int:bits=4", "int:bits=4,levels=sym,scale=fp16", 0},
    {"int:bits=4,levels=full,scale=fp32", "int:bits=4,levels=full,scale=fp32", 0},
    {"int:bits=5,scale=fp32", "int:bits=5,levels=sym,scale=fp32", 0},
    {"int:bits=6", "int:bits=6,levels=sym,scale=fp16", 0},
    {"int:bits=7,levels=full", "int:bits=7,levels=full,scale=fp16", 0},
    {"int:bits=8", "int:bits=8,levels=sym,scale=fp16", 0},
    {"kivi", "kivi:bits=2,group=32,residual=128", 0},
    {"kivi:bits=4,group=8,residual=16", "kivi:bits=4,group=8,residual=16", 0},
    {"kivi:bits=3,group=2,residual=10", "kivi:bits=3,group=2,residual=10", 0},
    {"q8_0", "q8_0", 1},
    {"q4_0", "q4_0", 1},
    {"q4_1", "q4_1", 1},
    {"q5_0", "q5_0", 1},
    {"q5_1", "q5_1", 1},
    {"iq4_nl", "iq4_nl", 1},
    // The normalise-then-round families: their streams carry default transforms (kvtransform.h);
    // kvquant reads models/micro.kvq, made for 6 heads of 32 (main points the codecs at it).
    {"quarot:bits=3", "quarot:bits=3,rot=hadamard", 0},
    {"kvquant:bits=2,qnorm", "kvquant:bits=2,outliers=1,qnorm,prerope,sink=1", 0}, // values: no prerope
    // The 2025 formats (formats.h): MX needs head_dim a multiple of 32, NVFP4 of 16 (shape_ok).
    {"mx", "mx:elem=e2m1", 0},
    {"mx:elem=e2m3", "mx:elem=e2m3", 0},
    {"mx:elem=e3m2", "mx:elem=e3m2", 0},
    {"mx:elem=e4m3", "mx:elem=e4m3", 0},
    {"mx:elem=e5m2", "mx:elem=e5m2", 0},
    {"mx:elem=int8", "mx:elem=int8", 0},
    {"nvfp4", "nvfp4:scale2=token", 0},
    {"nvfp4:4over6,scale2=none", "nvfp4:scale2=none,4over6", 0},
    {"nvfp4:4over6", "nvfp4:scale2=token,4over6", 0},
    {"turboquant:bits=2", "turboquant:bits=2,mode=mse,seed=1", 0},
    {"turboquant:mode=prod,bits=3,seed=7", "turboquant:bits=3,mode=prod,seed=7", 0},
    {"turboquant:bits=4,nc", "turboquant:bits=4,mode=mse,nc,seed=1", 0},
    {"turboquant:preset=k3v4_nc", "turboquant:preset=k3v4_nc,seed=1", 0}, // values: uniform 4-bit
    {"turboquant:bits=8", "turboquant:bits=8,mode=mse,seed=1", 0}, // 256 levels
    {"turboquant:preset=k8v4", "turboquant:preset=k8v4,seed=1", 0},
    {"qjl", "qjl:m=32,seed=1", 0},
    {"qjl:m=12,seed=3", "qjl:m=12,seed=3", 0},
};
#define N_SPECS (sizeof specs / sizeof specs[0])

// Attention scores key streams and mixes value streams; `both` checks the other two as well (every
// codec here supports them except fp32, whose key and value layouts each serve one kernel).
static void check_kernels(KVStream *s, KVRole role, int both, const char *label, int n, float *q, float *p, float *out,
                          float *ref_rows) {
    const int hd = s->head_dim;
    // A rotated stream (quarot) sums in the rotated space and rotates back: its rounding is relative
    // to whole vectors, not to each coordinate's terms.
    // So does turboquant, and qjl sums in its projection's space.
    const int rotated = strncmp(label, "quarot", 6) == 0 || strncmp(label, "turboquant", 10) == 0 ||
                        strncmp(label, "qjl", 3) == 0;
    for (int h = 0; h < s->n_heads; h++) {
        for (int j = 0; j < n; j++) s->ops->read(s->state, h, j, ref_rows + (size_t)j * hd);
        for (int d = 0; d < hd; d++) q[d] = (float)(2 * urand() - 1);
        double total = 0;
        for (int j = 0; j < n; j++) total += (p[j] = (float)urand());
        for (int j = 0; j < n; j++) p[j] = (float)(p[j] / total);
        // fp16's qround=f16 rounds the query and the weights first (test_codec_floats checks that
        // it does): given numbers it leaves alone, its products are read-then-dot's.
        for (int d = 0; strstr(label, "qround=f16") && d < hd; d++) q[d] = quant_fp16_to_fp32(quant_fp32_to_fp16(q[d]));
        for (int j = 0; strstr(label, "qround=f16") && j < n; j++) p[j] = quant_fp16_to_fp32(quant_fp32_to_fp16(p[j]));
        // scores over all n tokens and over a prefix
        for (int m = n; (both || role == KV_ROLE_KEY) && m >= n - 1 && m >= 1; m--) {
            kvstream_scores(s, h, q, out, m);
            for (int j = 0; j < m; j++) {
                double dot = 0, mag = 0;
                double norm_q = 0, norm_k = 0;
                for (int d = 0; d < hd; d++) {
                    dot += (double)q[d] * ref_rows[(size_t)j * hd + d];
                    mag += fabs((double)q[d] * ref_rows[(size_t)j * hd + d]);
                    norm_q += (double)q[d] * q[d], norm_k += (double)ref_rows[(size_t)j * hd + d] * ref_rows[(size_t)j * hd + d];
                }
                if (rotated) mag += sqrt(norm_q * norm_k);
                CHECK(fabs(out[j] - dot) <= 1e-5 * mag + 1e-30, "%s n=%d m=%d h=%d: score[%d] = %.9g, read-then-dot %.9g",
                      label, n, m, h, j, out[j], dot);
            }
        }
        if (!both && role == KV_ROLE_KEY) continue;
        kvstream_mix(s, h, p, out, n);
        double whole = 0; // Σ_j p_j·max_d |x_j[d]|
        for (int j = 0; rotated && j < n; j++) {
            double top = 0;
            for (int d = 0; d < hd; d++) top = fmax(top, fabs(ref_rows[(size_t)j * hd + d]));
            whole += p[j] * top;
        }
        for (int d = 0; d < hd; d++) {
            double sum = 0, mag = whole;
            for (int j = 0; j < n; j++) {
                sum += (double)p[j] * ref_rows[(size_t)j * hd + d];
                mag += fabs((double)p[j] * ref_rows[(size_t)j * hd + d]);
            }
            CHECK(fabs(out[d] - sum) <= 1e-5 * mag + 1e-30, "%s n=%d h=%d: mix[%d] = %.9g, read-then-sum %.9g", label, n, h,
                  d, out[d], sum);
        }
    }
}

static int is_checkpoint(int n) {
    return n <= 3 || n % 16 == 15 || n % 16 == 0 || n % 16 == 1 || n == 129 || n == 130;
}

static void test_kernels(const char *spec, KVRole role, int head_dim) {
    enum { H = 3, T = 170 };
    char label[128];
    snprintf(label, sizeof label, "%s (%s, head_dim %d)", spec, role == KV_ROLE_KEY ? "keys" : "values", head_dim);
    KVStream s;
    char err[256];
    if (kvstream_init(&s, SPEC(spec), role, H, head_dim, T, err, sizeof err)) {
        CHECK(0, "%s: cannot create: %s", label, err);
        return;
    }
    float *vec = malloc(sizeof(float) * H * head_dim), *rows = malloc(sizeof(float) * T * head_dim);
    float *q = malloc(sizeof(float) * head_dim), *p = malloc(sizeof(float) * T);
    float *out = malloc(sizeof(float) * (T > head_dim ? T : head_dim));
    const int both = strcmp(spec, "fp32") != 0;
    for (int n = 1; n <= T; n++) {
        const double mag = pow(10.0, -1.0 + 2.0 * urand());
        for (int i = 0; i < H * head_dim; i++) vec[i] = (float)(mag * (2 * urand() - 1));
        kvstream_append(&s, vec);
        if (is_checkpoint(n)) check_kernels(&s, role, both, label, n, q, p, out, rows); // as attention sees it
        kvstream_end_step(&s);
        if (is_checkpoint(n)) check_kernels(&s, role, both, label, n, q, p, out, rows);
    }
    free(vec);
    free(rows);
    free(q);
    free(p);
    free(out);
    kvstream_free(&s);
}

static void test_normalised_and_registry(void) {
    for (size_t i = 0; i < N_SPECS; i++)
        for (int role = 0; role < 2; role++) {
            KVStream s;
            char err[256];
            if (kvstream_init(&s, SPEC(specs[i].spec), role ? KV_ROLE_VALUE : KV_ROLE_KEY, 6, 32, 16, err, sizeof err)) {
                CHECK(0, "'%s' fails: %s", specs[i].spec, err);
                continue;
            }
            char norm[128];
            snprintf(norm, sizeof norm, "%s", specs[i].norm);
            char *pre = strstr(norm, ",prerope"); // a keys-only default: values' specs do not carry it
            if (role && pre) memmove(pre, pre + 8, strlen(pre + 8) + 1);
            CHECK(strcmp(s.spec, norm) == 0, "'%s' normalises to '%s', want '%s'", specs[i].spec, s.spec, norm);
            kvstream_free(&s);
            // The normalised form parses back to itself.
            if (kvstream_init(&s, SPEC(norm), role ? KV_ROLE_VALUE : KV_ROLE_KEY, 6, 32, 16, err, sizeof err)) {
                CHECK(0, "normalised '%s' fails: %s", norm, err);
                continue;
            }
            CHECK(strcmp(s.spec, norm) == 0, "'%s' is not a fixed point ('%s')", norm, s.spec);
            kvstream_free(&s);
        }
    int count;
    const CodecFamily *const *families = codec_families(&count);
    int n_cat;
    const CatalogEntry *cat = spec_catalog(&n_cat);
    for (int f = 0; f < count; f++) {
        // Covered by the table above, or by the catalog's examples (main runs their kernels too).
        int covered = 0;
        for (size_t i = 0; i < N_SPECS; i++) {
            const size_t len = strlen(families[f]->name);
            covered |= strncmp(specs[i].spec, families[f]->name, len) == 0 &&
                       (specs[i].spec[len] == '\0' || specs[i].spec[len] == ':');
        }
        for (int i = 0; i < n_cat; i++) covered |= !strcmp(cat[i].family, families[f]->name);
        CHECK(covered, "family '%s' is registered but not covered by this test", families[f]->name);
        CHECK(families[f]->help && strncmp(families[f]->help, families[f]->name, strlen(families[f]->name)) == 0,
              "family '%s' needs a help line starting with its name", families[f]->name);
        for (int g = 0; g < f; g++)
            CHECK(strcmp(families[f]->name, families[g]->name) != 0, "family '%s' registered twice", families[f]->name);
    }
}

static void test_bad_specs(void) {
    struct { const char *spec; KVRole role; int head_dim; } bad[] = {
        {"int:bits=0", KV_ROLE_KEY, 32},        {"int:bits=9", KV_ROLE_KEY, 32},
        {"int", KV_ROLE_KEY, 32},               {"int:bits=4,foo=1", KV_ROLE_KEY, 32},
        {"int:bits=x", KV_ROLE_KEY, 32},        {"int:bits=4,levels=odd", KV_ROLE_KEY, 32},
        {"int:bits=1,levels=full", KV_ROLE_KEY, 32}, {"int:bits=4,scale=fp8", KV_ROLE_KEY, 32},
        {"int:bits=4,bits=5", KV_ROLE_KEY, 32}, {"int:bits=", KV_ROLE_KEY, 32},
        {"int:", KV_ROLE_KEY, 32},              {":bits=4", KV_ROLE_KEY, 32},
        {"int:bits=4,,levels=sym", KV_ROLE_KEY, 32}, {"int:bits=4;", KV_ROLE_KEY, 32},
        {"int:bits", KV_ROLE_KEY, 32},          {"nosuch", KV_ROLE_KEY, 32},
        {"kivi:group=32,residual=100", KV_ROLE_KEY, 32}, {"kivi:bits=0", KV_ROLE_KEY, 32},
        {"kivi:bits=9", KV_ROLE_VALUE, 32},     {"kivi:residual=0", KV_ROLE_KEY, 32},
        {"kivi:group=0", KV_ROLE_KEY, 32},      {"kivi:bits=2.5", KV_ROLE_KEY, 32},
        {"kivi:role=v", KV_ROLE_KEY, 32},       {"kivi:window=4", KV_ROLE_KEY, 32},
        {"kivi:group=64,residual=128", KV_ROLE_VALUE, 32}, // value groups run along head_dim
        {"kivi", KV_ROLE_VALUE, 48},            // group 32 does not divide head_dim 48
        {"fp8", KV_ROLE_KEY, 32},               {"fp8:e4m3,e5m2", KV_ROLE_KEY, 32},
        {"fp8:e4m3=1", KV_ROLE_KEY, 32},        {"fp8:e4m3,scale=row", KV_ROLE_KEY, 32},
        {"fp8:e6m1", KV_ROLE_KEY, 32},          {"fp16:x=1", KV_ROLE_KEY, 32},
        {"bf16:fast", KV_ROLE_KEY, 32},         {"q4_0:bits=4", KV_ROLE_KEY, 32},
        {"iq4_nl:x", KV_ROLE_KEY, 32},          {"q4_0", KV_ROLE_KEY, 48},
        {"q8_0", KV_ROLE_VALUE, 16},            {"int:bits=4", KV_ROLE_KEY, 7},
        {"mx:elem=e9m9", KV_ROLE_KEY, 32},      {"mx:elem", KV_ROLE_KEY, 32},
        {"mx", KV_ROLE_VALUE, 48},              {"nvfp4", KV_ROLE_KEY, 24},
        {"nvfp4:scale2=tensor", KV_ROLE_KEY, 32}, {"turboquant:bits=9", KV_ROLE_KEY, 32},
        {"turboquant:bits=1,mode=prod", KV_ROLE_KEY, 32}, {"turboquant:mode=qjl", KV_ROLE_KEY, 32},
        {"turboquant", KV_ROLE_KEY, 2},         {"qjl:m=0", KV_ROLE_KEY, 32},
        {"turboquant:preset=k9v4", KV_ROLE_KEY, 32}, {"turboquant:preset=3bit_nc,bits=2", KV_ROLE_VALUE, 32},
        {"turboquant:mode=prod,nc", KV_ROLE_KEY, 32},
        {"fp16", KV_ROLE_KEY, 5},               {"fp8:e4m3", KV_ROLE_KEY, 3},
        {"kivi", KV_ROLE_KEY, 9},               {"iq4_nl", KV_ROLE_KEY, 0},
        {"q4_0:qround=q4", KV_ROLE_KEY, 32},    {"fp16:scale", KV_ROLE_VALUE, 32},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        KVStream s;
        char err[256] = "";
        const int rc = kvstream_init(&s, SPEC(bad[i].spec), bad[i].role, 2, bad[i].head_dim, 16, err, sizeof err);
        CHECK(rc != 0, "'%s' (head_dim %d) was accepted", bad[i].spec, bad[i].head_dim);
        CHECK(rc == 0 || strlen(err) > 10, "'%s' failed without a message", bad[i].spec);
        if (rc == 0) kvstream_free(&s);
        if (getenv("SHOW_MESSAGES")) printf("%-32s -> %s\n", bad[i].spec, err);
    }
    // A choice among named values names them all (spec_choice).
    KVStream s;
    char err[256] = "";
    CHECK(kvstream_init(&s, SPEC("int:bits=4,scale=fp8"), KV_ROLE_KEY, 2, 32, 16, err, sizeof err) != 0 &&
              strcmp(err, "int: scale must be fp16 or fp32 (got 'fp8')") == 0,
          "int:bits=4,scale=fp8 -> '%s'", err);
}

// Shapes a family accepts: blocks need head_dim a multiple of 32; KIVI's value groups of G channels
// need G to divide head_dim; everything else any even head_dim.
static int shape_ok(size_t i, KVRole role, int head_dim) {
    if (specs[i].blocks) return head_dim % 32 == 0;
    if (strncmp(specs[i].spec, "quarot", 6) == 0) return (head_dim & (head_dim - 1)) == 0; // the Hadamard
    if (strncmp(specs[i].spec, "kvquant", 7) == 0) return 0; // its calibration has one shape: below
    if (strncmp(specs[i].spec, "mx", 2) == 0) return head_dim % 32 == 0;
    if (strncmp(specs[i].spec, "nvfp4", 5) == 0) return head_dim % 16 == 0;
    if (strncmp(specs[i].spec, "kivi", 4) == 0 && role == KV_ROLE_VALUE) {
        const char *g = strstr(specs[i].spec, "group=");
        return head_dim % (g ? atoi(g + 6) : 32) == 0;
    }
    return 1;
}

int main(void) {
    const int dims[] = {32, 64, 6, 40};
    char calib[4096], err[512];
    const char *root = getenv("MICRO_SOURCE_ROOT");
    snprintf(calib, sizeof calib, "%s/models/micro.kvq", root ? root : ".");
    CHECK(!kvq_view_set(calib, NULL, 1, err, sizeof err), "%s", err);
    for (size_t i = 0; i < N_SPECS; i++)
        for (int role = 0; role < 2; role++)
            for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
                const KVRole r = role ? KV_ROLE_VALUE : KV_ROLE_KEY;
                if (shape_ok(i, r, dims[k])) test_kernels(specs[i].spec, r, dims[k]);
            }
    // Every family example of the catalog (spec_catalog.h) without a calibration, at micro's
    // head_dim, so that a new family's kernels are checked from its examples alone (the transforms'
    // examples are test_transform's).
    int n_cat;
    const CatalogEntry *cat = spec_catalog(&n_cat);
    for (int i = 0; i < n_cat; i++)
        if (!cat[i].calibrated && strcmp(cat[i].family, "transforms")) {
            test_kernels(cat[i].k, KV_ROLE_KEY, 32);
            test_kernels(cat[i].v, KV_ROLE_VALUE, 32);
        }
    test_normalised_and_registry();
    test_bad_specs();
    if (failures) {
        fprintf(stderr, "test_codec_kernels: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_codec_kernels: ok\n");
    return 0;
}
