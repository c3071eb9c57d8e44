// The calibration file (models/micro.kvq): a round trip, the lookups' layout, the default path, the
// loader against corrupt files (each refused with its own one-line reason), and the committed
// artefact against the committed model.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kvq_file.h"
#include "le_bytes.h"
#include "model_file.h"
#include "random_model.h"

#define put_u32 le_put_u32
#define put_f32 le_put_f32
// Recomputes the checksum so that a corruption reaches the check it is aimed at.
static void fix_checksum(unsigned char *b, size_t n) {
    le_put_u64(b + 88, model_checksum(b + KVQ_HEADER_BYTES, n - KVQ_HEADER_BYTES));
}

// A valid calibration for model m's shape: thresholds nested around 0, codebooks spread evenly.
static void fill(Kvq *k, const Model *m) {
    static const uint32_t percents[] = {0, 100}, bits[] = {1, 2, 3, 4};
    char err[256];
    if (kvq_init(k, m->config.n_layers, m->config.n_kv_heads, m->config.head_dim, percents, 2, bits, 4, err,
                 sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    k->model_checksum = kvq_model_checksum(m);
    k->sequences = 3, k->length = 17, k->seed = 42;
    for (int i = 0; i < 32; i++) k->corpus_sha256[i] = (unsigned char)i;
    for (size_t i = 0; i < k->n_ranges / 2; i++) k->ranges[2 * i] = -1.0f - (float)i, k->ranges[2 * i + 1] = 2.0f + (float)i;
    for (int l = 0; l < k->n_layers; l++)
        for (int r = 0; r < 2; r++)
            for (int b = 0; b < k->n_bits; b++)
                for (int p = 0; p < k->n_percents; p++)
                    for (int v = 0; v < 2; v++) {
                        float *cb = kvq_codebook_mut(k, l, (KvqRole)r, b, p, (KvqVariant)v);
                        int n = 1 << k->bits[b];
                        for (int j = 0; j < n; j++) cb[j] = -1.0f + 2.0f * (float)(j + 1) / (float)(n + 1) + 0.01f * (float)l;
                    }
    for (size_t i = 0; i < k->n_stream_max; i++) k->stream_max[i] = 1.5f + (float)i;
}

static char messages[40][512];
static int n_messages;

// Expects refusal with a message containing needle, one line, distinct from every earlier one.
static void expect_refused(const char *label, const unsigned char *b, size_t n, const Model *m, const char *needle) {
    Kvq k;
    char err[512] = "";
    int r = kvq_load_bytes(&k, b, n, m, "x.kvq", err, sizeof err);
    CHECK(r == -1, "%s: accepted", label);
    CHECK(k.ranges == NULL && k.codebooks == NULL, "%s: tables left allocated", label);
    CHECK(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", label, err, needle);
    CHECK(strchr(err, '\n') == NULL && strncmp(err, "x.kvq: ", 7) == 0, "%s: message '%s' is not one named line", label, err);
    for (int i = 0; i < n_messages; i++) CHECK(strcmp(messages[i], err) != 0, "%s: same message as another case", label);
    if (n_messages < 40) snprintf(messages[n_messages++], sizeof messages[0], "%s", err);
}

int main(void) {
    ModelConfig c = small_config();
    Model m, other;
    random_model(&m, &c, 1);
    random_model(&other, &c, 2);
    Kvq k;
    fill(&k, &m);
    // Round trip through the file, atomically written.
    char dir[] = "/tmp/micro-test-kvq-XXXXXX", path[256], err[512];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/m.kvq", dir);
    CHECK(kvq_save(&k, path, err, sizeof err) == 0, "save: %s", err);
    Kvq back;
    CHECK(kvq_load(&back, path, &m, err, sizeof err) == 0, "load: %s", err);
    CHECK(back.n_ranges == k.n_ranges && back.n_codebooks == k.n_codebooks, "table sizes differ");
    CHECK(back.n_ranges && memcmp(back.ranges, k.ranges, k.n_ranges * 4) == 0, "ranges differ");
    CHECK(back.n_codebooks && memcmp(back.codebooks, k.codebooks, k.n_codebooks * 4) == 0, "codebooks differ");
    CHECK(back.version == KVQ_VERSION && back.n_stream_max == k.n_stream_max &&
              memcmp(back.stream_max, k.stream_max, k.n_stream_max * 4) == 0,
          "stream maxima differ");
    CHECK(*kvq_stream_max(&back, 1, KVQ_MAX_VALUE) == 1.5f + 5.0f && *kvq_stream_max(&back, 0, KVQ_MAX_KEY) == 1.5f,
          "stream maximum lookups");
    CHECK(back.seed == 42 && back.sequences == 3 && back.length == 17 && back.corpus_sha256[31] == 31 &&
              back.model_checksum == k.model_checksum,
          "header fields differ");
    // Lookups: every (layer, percent, channel) and codebook has its own place, and they tile the tables.
    CHECK(kvq_percent_index(&back, 100) == 1 && kvq_percent_index(&back, 50) == -1, "percent index");
    CHECK(kvq_bits_index(&back, 3) == 2 && kvq_bits_index(&back, 5) == -1, "bits index");
    int C = c.n_kv_heads * c.head_dim;
    CHECK(kvq_key_range(&back, 1, 1, C - 1) + 2 == back.ranges + back.n_ranges, "last key range");
    CHECK(kvq_codebook(&back, 0, KVQ_KEY, 0, 0, KVQ_PLAIN) == back.codebooks, "first codebook");
    CHECK(kvq_codebook(&back, 1, KVQ_VALUE, 3, 1, KVQ_QNORM) + 16 == back.codebooks + back.n_codebooks,
          "last codebook");
    CHECK(kvq_codebook(&back, 0, KVQ_KEY, 1, 0, KVQ_PLAIN) == back.codebooks + 2 * 2 * 2, "2-bit codebook follows 1-bit");
    kvq_free(&back);
    // Without a model: no model check.
    CHECK(kvq_load(&back, path, NULL, err, sizeof err) == 0, "load without model: %s", err);
    kvq_free(&back);

    size_t n;
    unsigned char *good = check_read_all(path, &n), *b = malloc(n + 8);
    CHECK(n == kvq_file_bytes(&k), "file is %zu bytes, expected %zu", n, kvq_file_bytes(&k));
    size_t tables = KVQ_HEADER_BYTES + 4 * 6, cb0 = tables + 4 * k.n_ranges;
#define CASE(label, len, needle, model, ...) \
    do {                                      \
        memcpy(b, good, n);                   \
        __VA_ARGS__;                          \
        expect_refused(label, b, len, model, needle); \
    } while (0)
    CASE("empty", 0, "empty file", &m);
    CASE("short header", 40, "truncated header", &m);
    CASE("bad magic", n, "bad magic", &m, b[0] = 'X');
    CASE("bad version", n, "version 7", &m, put_u32(b + 8, 7));
    CASE("zero layers", n, "n_layers = 0", &m, put_u32(b + 12, 0));
    CASE("odd head_dim", n, "head_dim = 31", &m, put_u32(b + 20, 31));
    CASE("huge heads", n, "n_kv_heads = 4294967295", &m, put_u32(b + 16, 0xffffffffu));
    CASE("zero sequences", n, "sequences = 0", &m, put_u32(b + 32, 0));
    CASE("zero length", n, "length = 0", &m, put_u32(b + 36, 0));
    CASE("no percents", n, "0 outlier percents", &m, put_u32(b + 80, 0));
    CASE("many bits", n, "9 bit widths", &m, put_u32(b + 84, 9));
    CASE("lists cut", KVQ_HEADER_BYTES + 8, "the lists end at", &m);
    CASE("percent 50", n, "not below 50%", &m, put_u32(b + KVQ_HEADER_BYTES + 4, 5000));
    CASE("percents unsorted", n, "percents are not strictly ascending", &m, put_u32(b + KVQ_HEADER_BYTES + 4, 0));
    CASE("bits 9", n, "bit width 9", &m, put_u32(b + KVQ_HEADER_BYTES + 20, 9));
    CASE("bits unsorted", n, "widths are not strictly ascending", &m, put_u32(b + KVQ_HEADER_BYTES + 12, 1));
    CASE("truncated", n - 1, "truncated: ", &m);
    CASE("trailing", n + 1, "trailing bytes", &m, b[n] = 0);
    CASE("flipped byte", n, "checksum mismatch", &m, b[n / 2] ^= 0x10);
    CASE("wrong shape", n, "kv heads", &m, put_u32(b + 16, 1); put_u32(b + 20, 64));
    CASE("other model", n, "another model", &other);
    CASE("nan range", n, "is not finite", &m, put_f32(b + tables, NAN); fix_checksum(b, n));
    CASE("lo above hi", n, "lo > hi", &m, put_f32(b + tables, 5.0f); fix_checksum(b, n));
    CASE("inf codebook", n, "codebook of layer 0, 1 bits, outliers 0/100% is not finite", &m,
         put_f32(b + cb0, INFINITY); fix_checksum(b, n));
    CASE("codebook beyond 1", n, "is outside [-1, 1]", &m, put_f32(b + cb0, -1.5f); fix_checksum(b, n));
    CASE("unsorted codebook", n, "is not sorted", &m, put_f32(b + cb0 + 4 * 2, 0.9f); fix_checksum(b, n));
    const size_t max0 = cb0 + 4 * k.n_codebooks; // the stream maxima (version 2)
    CASE("nan maximum", n, "layer 0's keys is not finite", &m, put_f32(b + max0, NAN); fix_checksum(b, n));
    CASE("negative maximum", n, "layer 1's values is negative", &m, put_f32(b + max0 + 4 * 5, -1.0f); fix_checksum(b, n));
    CASE("version 1 with maxima", n, "trailing bytes", &m, put_u32(b + 8, 1));
    // Version 1 (no maxima) is still read: the same tables, no maxima; written back, it stays version 1.
    {
        const size_t n1 = n - 4 * k.n_stream_max;
        memcpy(b, good, n1);
        put_u32(b + 8, 1);
        fix_checksum(b, n1);
        Kvq v1;
        CHECK(kvq_load_bytes(&v1, b, n1, &m, "v1.kvq", err, sizeof err) == 0, "version 1: %s", err);
        CHECK(v1.version == 1 && v1.stream_max == NULL && v1.n_stream_max == 0 && kvq_stream_max(&v1, 0, KVQ_MAX_KEY) == NULL &&
                  memcmp(v1.ranges, k.ranges, k.n_ranges * 4) == 0 && memcmp(v1.codebooks, k.codebooks, k.n_codebooks * 4) == 0,
              "version 1 read back");
        CHECK(kvq_file_bytes(&v1) == n1 && kvq_save(&v1, path, err, sizeof err) == 0, "version 1 saved: %s", err);
        size_t n1b;
        unsigned char *again = check_read_all(path, &n1b);
        CHECK(n1b == n1 && memcmp(again, b, n1) == 0, "version 1 written back differs");
        free(again);
        kvq_free(&v1);
    }
    free(b);
    free(good);
    CHECK(kvq_load(&back, dir, &m, err, sizeof err) == -1 && strstr(err, "directory"), "a folder: %s", err);

    char buf[64];
    CHECK(kvq_default_path(NULL, "models/micro.bin", buf, sizeof buf) == 0 && !strcmp(buf, "models/micro.kvq"), "%s", buf);
    CHECK(kvq_default_path(NULL, "weights", buf, sizeof buf) == 0 && !strcmp(buf, "weights.kvq"), "%s", buf);
    CHECK(kvq_default_path(NULL, "m/qwen.gguf", buf, sizeof buf) == 0 && !strcmp(buf, "m/qwen.kvq"), "%s", buf);
    CHECK(kvq_default_path("x/c.kvq", "models/micro.bin", buf, sizeof buf) == 0 && !strcmp(buf, "x/c.kvq"), "%s", buf);
    CHECK(kvq_default_path(NULL, "a-very-long-name-that-will-not-fit-in-the-buffer/of-sixteen.bin", buf, 16) == -1,
          "too long");

    // The committed artefact belongs to the committed model.
    const char *root = getenv("MICRO_SOURCE_ROOT");
    char mp[4096], kp[4096];
    snprintf(mp, sizeof mp, "%s/models/micro.bin", root ? root : ".");
    snprintf(kp, sizeof kp, "%s/models/micro.kvq", root ? root : ".");
    Model micro;
    if (access(kp, R_OK) == 0 && model_load(&micro, mp, err, sizeof err) == 0) {
        CHECK(kvq_load(&back, kp, &micro, err, sizeof err) == 0, "models/micro.kvq: %s", err);
        CHECK(back.n_percents == 2 && back.percents[1] == KVQ_PERCENT_ONE && back.n_bits == 4, "committed lists");
        CHECK(back.version == KVQ_VERSION, "models/micro.kvq is version %u", back.version);
        for (size_t i = 0; i < back.n_stream_max; i++) // micro's keys and values reach a few units
            CHECK(back.stream_max[i] > 1.0f && back.stream_max[i] < 100.0f, "committed maximum %zu: %g", i,
                  (double)back.stream_max[i]);
        kvq_free(&back);
        CHECK(kvq_load(&back, kp, &m, err, sizeof err) == -1, "micro.kvq accepted for a random model");
        model_free(&micro);
    } else
        CHECK(0, "models/micro.kvq or models/micro.bin missing");
    unlink(path);
    rmdir(dir);
    kvq_free(&k);
    model_free(&m);
    model_free(&other);
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures != 0;
}
