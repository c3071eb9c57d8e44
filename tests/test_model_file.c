// The loader against corrupt files: each must be refused with its own one-line reason, no crash, no leak.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "model_file.h"

static char dir[] = "/tmp/micro-test-model-XXXXXX";

static ModelConfig tiny(void) {
    ModelConfig c = model_config_micro();
    c.dim = 16, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 2, c.head_dim = 8, c.hidden_dim = 24, c.max_seq_len = 64;
    return c;
}

static void write_bytes(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

// Recomputes the header checksum so that a corruption reaches the check it is aimed at: version 3's
// over the header and the payload, versions 1 and 2's over the payload.
static void fix_checksum(unsigned char *b, size_t n) {
    const size_t h = model_file_header_bytes_of(b[8]);
    if (b[8] == MODEL_FILE_VERSION_WHOLE && n >= h) put_u64(b + 60, model_file_checksum(b, b + h, n - h));
    else if (h && n >= h) put_u64(b + 60, model_checksum(b + h, n - h));
}

// The same model in version 1 or 2's layout (the header the writer used before version 3) from a
// version 3 file: into out, returning its length.
static size_t legacy_file(const unsigned char *v3, size_t n, unsigned version, unsigned char *out) {
    const size_t h = model_file_header_bytes_of(version);
    memcpy(out, v3, MODEL_FILE_HEADER_BYTES);
    if (h > MODEL_FILE_HEADER_BYTES) memcpy(out + MODEL_FILE_HEADER_BYTES, v3 + MODEL_FILE_HEADER_BYTES, h - MODEL_FILE_HEADER_BYTES);
    memcpy(out + h, v3 + MODEL_FILE_HEADER_BYTES_LATENT, n - MODEL_FILE_HEADER_BYTES_LATENT);
    put_u32(out + 8, version);
    fix_checksum(out, h + n - MODEL_FILE_HEADER_BYTES_LATENT);
    return h + n - MODEL_FILE_HEADER_BYTES_LATENT;
}

// Loads b (n bytes) from a file and compares it with m: 0 when the config and every parameter match.
static int loads_as(const char *label, const unsigned char *b, size_t n, const Model *m) {
    char path[256], err[512] = "";
    snprintf(path, sizeof path, "%s/%s.bin", dir, label);
    write_bytes(path, b, n);
    Model back;
    int rc = model_load(&back, path, err, sizeof err);
    remove(path);
    if (rc) {
        printf("FAIL %s: %s\n", label, err);
        failures++;
        return -1;
    }
    rc = back.n_params != m->n_params || memcmp(back.params, m->params, m->n_params * sizeof(float)) != 0 ||
         memcmp(&back.config, &m->config, sizeof m->config) != 0;
    model_free(&back);
    if (rc) {
        printf("FAIL %s: loads as another model\n", label);
        failures++;
        return -1;
    }
    printf("ok   %-22s loads bit for bit\n", label);
    return 0;
}

static char messages[48][512];
static int n_messages = 0;

// Expects refusal with a message containing `needle`, distinct from every earlier message.
static void expect_refused(const char *label, const unsigned char *b, size_t n, const char *needle) {
    char path[256], err[512] = "";
    snprintf(path, sizeof path, "%s/%s.bin", dir, label);
    write_bytes(path, b, n);
    Model m;
    int rc = model_load(&m, path, err, sizeof err);
    const char *reason = strchr(err, ':') ? strchr(err, ':') + 2 : err;
    if (rc == 0) {
        printf("FAIL %s: accepted\n", label);
        failures++;
        model_free(&m);
        return;
    }
    if (!strstr(err, needle) || strchr(err, '\n')) {
        printf("FAIL %s: message '%s' lacks '%s'\n", label, err, needle);
        failures++;
    }
    for (int i = 0; i < n_messages; i++)
        if (!strcmp(messages[i], reason)) {
            printf("FAIL %s: same message as an earlier case: %s\n", label, reason);
            failures++;
        }
    snprintf(messages[n_messages++], sizeof messages[0], "%s", reason);
    printf("ok   %-22s %s\n", label, err);
    remove(path);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    ModelConfig c = tiny();
    Model m;
    if (model_alloc(&m, &c)) return 1;
    for (size_t i = 0; i < m.n_params; i++) m.params[i] = (float)sin((double)i);
    char good[256], err[512];
    snprintf(good, sizeof good, "%s/good.bin", dir);
    if (model_save(&m, good, err, sizeof err)) {
        printf("FAIL save: %s\n", err);
        return 1;
    }
    // A valid file loads back bit for bit.
    Model back;
    if (model_load(&back, good, err, sizeof err) || back.n_params != m.n_params ||
        memcmp(back.params, m.params, m.n_params * sizeof(float)) != 0 ||
        memcmp(&back.config, &m.config, sizeof c) != 0) {
        printf("FAIL round trip: %s\n", err);
        failures++;
    } else {
        printf("ok   round trip of %zu parameters\n", back.n_params);
        model_free(&back);
    }
    // micro's own shape has the documented parameter count.
    ModelConfig mc = model_config_micro();
    if (model_param_count(&mc) != 1820352) {
        printf("FAIL micro has %zu parameters, the README says 1,820,352\n", model_param_count(&mc));
        failures++;
    }

    size_t n;
    unsigned char *orig = check_read_all(good, &n), *b = malloc(n + 64);
#define RESET() memcpy(b, orig, n)
    // The writer writes version 3: every model in the 76-byte header, its checksum over the header too.
    if (n != MODEL_FILE_HEADER_BYTES_LATENT + m.n_params * sizeof(float) || orig[8] != MODEL_FILE_VERSION_WHOLE) {
        printf("FAIL the writer wrote version %u, %zu bytes\n", orig[8], n);
        failures++;
    }
    // A header field the parameter count does not see (the context), changed: version 3's checksum
    // refuses it, where versions 1 and 2 (payload only) take the other context.
    RESET();
    put_u32(b + 40, 4096);
    char path3[300];
    snprintf(path3, sizeof path3, "%s/context.bin", dir);
    write_bytes(path3, b, n);
    Model other;
    if (model_load(&other, path3, err, sizeof err) == 0 || !strstr(err, "header or the payload") || strchr(err, '\n')) {
        printf("FAIL version 3 with another context: %s\n", err);
        failures++;
    } else {
        printf("ok   %-22s %s\n", "v3_context_changed", err);
    }
    remove(path3);
    // Version 1 still loads as it did (version 2, latent attention's, below).
    unsigned char *old = malloc(n + 64);
    size_t n1 = legacy_file(orig, n, MODEL_FILE_VERSION, old);
    loads_as("version_1", old, n1, &m);
    put_u32(old + 40, 4096); // the same change, unseen by version 1's checksum
    Model wide = m;
    wide.config.max_seq_len = 4096;
    loads_as("version_1_context", old, n1, &wide);
    free(old);

    expect_refused("empty", b, 0, "empty file");
    RESET();
    expect_refused("truncated_header", b, 30, "truncated header");
    RESET();
    expect_refused("truncated_payload", b, n - 5, "truncated: ");
    RESET();
    expect_refused("truncated_one_tensor", b, MODEL_FILE_HEADER_BYTES + 256 * 16 * 4, "the header promises");
    RESET();
    b[0] = 'X';
    expect_refused("bad_magic", b, n, "bad magic");
    RESET();
    put_u32(b + 8, 4);
    expect_refused("future_version", b, n, "version 4");
    RESET();
    put_u32(b + 12, 0);
    expect_refused("zero_dim", b, n, "dim = 0");
    RESET();
    put_u32(b + 16, 0x7fffffff);
    expect_refused("huge_layers", b, n, "n_layers = 2147483647");
    RESET();
    put_u32(b + 20, 3); // dim 16 with 3 heads
    expect_refused("dim_not_divisible", b, n, "not divisible by n_heads");
    RESET();
    put_u32(b + 28, 4); // head_dim 4 but dim 16 / 2 heads = 8
    expect_refused("mismatched_head_dim", b, n, "does not equal dim");
    RESET();
    put_u32(b + 24, 3); // 3 kv heads for 2 query heads
    expect_refused("kv_heads", b, n, "does not divide n_heads");
    RESET();
    put_u32(b + 40, 0xffffffffu);
    expect_refused("negative_context", b, n, "max_seq_len = 4294967295");
    RESET();
    put_u32(b + 12, 65536), put_u32(b + 20, 64), put_u32(b + 28, 1024), put_u32(b + 32, 1 << 20), put_u32(b + 16, 1024);
    // Every field within its range, yet their product is beyond any sane model.
    expect_refused("size_product", b, n, "dimensions multiply to");
    RESET();
    put_u64(b + 52, m.n_params + 1);
    expect_refused("wrong_param_count", b, n, "parameters but its dimensions give");
    RESET();
    b[n - 1] ^= 0x40;
    expect_refused("checksum", b, n, "checksum mismatch");
    RESET();
    float nan = NAN;
    memcpy(b + MODEL_FILE_HEADER_BYTES_LATENT + 4 * 100, &nan, 4);
    fix_checksum(b, n);
    expect_refused("nan_weight", b, n, "non-finite value at element 100");
    RESET();
    float inf = INFINITY;
    memcpy(b + n - 4, &inf, 4);
    fix_checksum(b, n);
    expect_refused("inf_weight", b, n, "tensor final_norm");
    RESET();
    memset(b + n, 0, 8);
    expect_refused("trailing_bytes", b, n + 8, "8 trailing bytes");
    RESET();
    put_u32(b + 44, 0x7fc00000); // rope_theta NaN
    expect_refused("nan_theta", b, n, "rope_theta");
    RESET();
    put_u32(b + 36, 1000);
    expect_refused("vocab", b, n, "vocab_size = 1000");

    // Latent attention (the header's last two fields: latent_dim and rope_dim).
    ModelConfig lc = tiny();
    lc.n_kv_heads = 1, lc.latent_dim = 6, lc.rope_dim = 4;
    Model lm;
    if (model_alloc(&lm, &lc)) return 1;
    for (size_t i = 0; i < lm.n_params; i++) lm.params[i] = (float)cos((double)i);
    char latent[256];
    snprintf(latent, sizeof latent, "%s/latent.bin", dir);
    Model lback;
    if (model_save(&lm, latent, err, sizeof err) || model_load(&lback, latent, err, sizeof err) ||
        lback.n_params != lm.n_params || memcmp(lback.params, lm.params, lm.n_params * sizeof(float)) != 0 ||
        memcmp(&lback.config, &lm.config, sizeof lc) != 0) {
        printf("FAIL latent round trip: %s\n", err);
        failures++;
    } else {
        printf("ok   latent round trip of %zu parameters\n", lback.n_params);
        model_free(&lback);
    }
    size_t ln;
    unsigned char *lorig = check_read_all(latent, &ln), *lb = malloc(ln + 64);
    memcpy(lb, lorig, ln);
    expect_refused("latent_truncated_header", lb, 72, "a version 3 header needs 76");
    unsigned char *lold = malloc(ln + 64);
    loads_as("latent_version_2", lold, legacy_file(lorig, ln, MODEL_FILE_VERSION_LATENT, lold), &lm);
    free(lold);
    unsigned char *mha2 = malloc(n + 64); // version 2 was latent attention's alone
    expect_refused("version_2_not_latent", mha2, legacy_file(orig, n, MODEL_FILE_VERSION_LATENT, mha2), "latent_dim = 0");
    free(mha2);
    memcpy(lb, lorig, ln);
    put_u32(lb + 24, 2); // n_kv_heads 2 beside a latent
    expect_refused("latent_kv_heads", lb, ln, "under latent attention");
    memcpy(lb, lorig, ln);
    put_u32(lb + 72, 3); // an odd rope_dim
    expect_refused("latent_odd_rope", lb, ln, "rope_dim 3");
    memcpy(lb, lorig, ln);
    put_u32(lb + 8, 1); // a version 1 header cannot say latent: the payload is then too long
    expect_refused("latent_as_version_1", lb, ln, "parameters but its dimensions give");
    free(lorig), free(lb);
    model_free(&lm);
    remove(latent);

    // A directory and a missing file.
    char err2[512];
    Model d;
    if (model_load(&d, dir, err2, sizeof err2) == 0 || !strstr(err2, "is a directory")) {
        printf("FAIL directory: %s\n", err2);
        failures++;
    } else {
        printf("ok   %-22s %s\n", "directory", err2);
    }
    char missing[300];
    snprintf(missing, sizeof missing, "%s/missing.bin", dir);
    if (model_load(&d, missing, err2, sizeof err2) == 0 || !strstr(err2, "cannot open")) {
        printf("FAIL missing: %s\n", err2);
        failures++;
    } else {
        printf("ok   %-22s %s\n", "missing", err2);
    }

    // Sizes that overflow size_t when multiplied must be refused by the config check itself.
    ModelConfig big = model_config_micro();
    big.dim = 65536, big.n_heads = 64, big.head_dim = 1024, big.n_kv_heads = 16, big.hidden_dim = 1 << 20, big.n_layers = 1024;
    if (model_config_validate(&big, err2, sizeof err2) == 0) {
        printf("FAIL a config of %d layers x dim %d x hidden %d was accepted\n", big.n_layers, big.dim, big.hidden_dim);
        failures++;
    }

    remove(good);
    rmdir(dir);
    free(orig);
    free(b);
    model_free(&m);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
