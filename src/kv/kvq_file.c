// Reading and writing calibration files (KVQuant's tables; version 2 adds the stream maxima). Like the model loader, nothing is trusted before it
// is checked: magic, version, each field's range, the lists, sizes computed without overflow, the
// exact length, the checksum, the model it belongs to, then every value, so each bad file gets its
// own one-line reason.
#include "kvq_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_file.h"
#include "le_bytes.h"
#include "msgtext.h"
#include "safe_file.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tables are read as little-endian fp32 in place; add byte swapping for this host"
#endif

#define MAX_LAYERS 1024
#define MAX_HEADS 4096
#define MAX_HEAD_DIM 4096
#define MAX_CHANNELS (1 << 20)
#define MAX_CALIB (1u << 20) // sequences, and tokens per sequence

// Floats in the tables for a shape and lists; 0 on overflow (cannot happen within the ranges the
// loader accepts, but the sizes are computed as if it could).
static int table_sizes(uint64_t layers, uint64_t heads, uint64_t hd, uint64_t np, const uint32_t *bits, int nb,
                       uint64_t *ranges, uint64_t *codebooks) {
    uint64_t levels = 0;
    for (int i = 0; i < nb; i++) levels += (uint64_t)1 << bits[i];
    return __builtin_mul_overflow(layers * heads, hd, ranges) || __builtin_mul_overflow(*ranges, np * 2, ranges) ||
                   __builtin_mul_overflow(layers * 2 * np * 2, levels, codebooks)
               ? -1
               : 0;
}

static uint64_t body_offset_tables(int np, int nb) { return KVQ_HEADER_BYTES + 4ull * (uint64_t)(np + nb); }

// Floats of the stream maxima: none before version 2.
static uint64_t stream_max_floats(uint32_t version, uint64_t layers) { return version >= 2 ? layers * KVQ_N_MAX : 0; }

size_t kvq_file_bytes(const Kvq *k) {
    uint64_t r, c;
    if (table_sizes((uint64_t)k->n_layers, (uint64_t)k->n_kv_heads, (uint64_t)k->head_dim, (uint64_t)k->n_percents,
                    k->bits, k->n_bits, &r, &c))
        return 0;
    uint64_t total = body_offset_tables(k->n_percents, k->n_bits) +
                     4 * (r + c + stream_max_floats(k->version, (uint64_t)k->n_layers));
    return total > SIZE_MAX ? 0 : (size_t)total;
}

// The lists' rules, shared by kvq_init and the loader: 0, or -1 with the reason in why.
static int check_lists(const uint32_t *percents, int np, const uint32_t *bits, int nb, char *why, size_t n) {
    if (np < 1 || np > KVQ_MAX_PERCENTS) return snprintf(why, n, "%d outlier percents (1..%d)", np, KVQ_MAX_PERCENTS), -1;
    if (nb < 1 || nb > KVQ_MAX_BITS) return snprintf(why, n, "%d bit widths (1..%d)", nb, KVQ_MAX_BITS), -1;
    for (int i = 0; i < np; i++) {
        if (percents[i] >= KVQ_PERCENT_LIMIT)
            return snprintf(why, n, "outlier percent %u/100 is not below 50%%", percents[i]), -1;
        if (i > 0 && percents[i] <= percents[i - 1])
            return snprintf(why, n, "outlier percents are not strictly ascending"), -1;
    }
    for (int i = 0; i < nb; i++) {
        if (bits[i] < 1 || bits[i] > KVQ_MAX_BITS)
            return snprintf(why, n, "bit width %u is out of range (1..%d)", bits[i], KVQ_MAX_BITS), -1;
        if (i > 0 && bits[i] <= bits[i - 1]) return snprintf(why, n, "bit widths are not strictly ascending"), -1;
    }
    return 0;
}

static int check_shape(uint64_t layers, uint64_t heads, uint64_t hd, char *why, size_t n) {
    if (layers < 1 || layers > MAX_LAYERS) return snprintf(why, n, "n_layers = %llu is out of range", (unsigned long long)layers), -1;
    if (heads < 1 || heads > MAX_HEADS) return snprintf(why, n, "n_kv_heads = %llu is out of range", (unsigned long long)heads), -1;
    if (hd < 2 || hd > MAX_HEAD_DIM || hd % 2)
        return snprintf(why, n, "head_dim = %llu is out of range (2..%d, even)", (unsigned long long)hd, MAX_HEAD_DIM), -1;
    if (heads * hd > MAX_CHANNELS) return snprintf(why, n, "%llu key channels is too many", (unsigned long long)(heads * hd)), -1;
    return 0;
}

int kvq_init(Kvq *k, int n_layers, int n_kv_heads, int head_dim, const uint32_t *percents, int n_percents,
             const uint32_t *bits, int n_bits, char *err, size_t errlen) {
    memset(k, 0, sizeof *k);
    if (n_layers < 1 || n_kv_heads < 1 || head_dim < 1) {
        snprintf(err, errlen, "a calibration needs at least one layer, head and dimension");
        return -1;
    }
    if (check_shape((uint64_t)n_layers, (uint64_t)n_kv_heads, (uint64_t)head_dim, err, errlen) ||
        check_lists(percents, n_percents, bits, n_bits, err, errlen))
        return -1;
    k->n_layers = n_layers, k->n_kv_heads = n_kv_heads, k->head_dim = head_dim;
    k->n_percents = n_percents, k->n_bits = n_bits, k->version = KVQ_VERSION;
    memcpy(k->percents, percents, sizeof(uint32_t) * (size_t)n_percents);
    memcpy(k->bits, bits, sizeof(uint32_t) * (size_t)n_bits);
    uint64_t r, c;
    if (table_sizes((uint64_t)n_layers, (uint64_t)n_kv_heads, (uint64_t)head_dim, (uint64_t)n_percents, bits, n_bits,
                    &r, &c) ||
        !(k->ranges = calloc((size_t)r, sizeof(float))) || !(k->codebooks = calloc((size_t)c, sizeof(float))) ||
        !(k->stream_max = calloc((size_t)n_layers * KVQ_N_MAX, sizeof(float)))) {
        kvq_free(k);
        snprintf(err, errlen, "out of memory for the calibration tables");
        return -1;
    }
    k->n_ranges = (size_t)r, k->n_codebooks = (size_t)c, k->n_stream_max = (size_t)n_layers * KVQ_N_MAX;
    return 0;
}

void kvq_free(Kvq *k) {
    free(k->ranges);
    free(k->codebooks);
    free(k->stream_max);
    memset(k, 0, sizeof *k);
}

int kvq_percent_index(const Kvq *k, uint32_t percent_hundredths) {
    for (int i = 0; i < k->n_percents; i++)
        if (k->percents[i] == percent_hundredths) return i;
    return -1;
}

int kvq_bits_index(const Kvq *k, int bits) {
    for (int i = 0; i < k->n_bits; i++)
        if ((int)k->bits[i] == bits) return i;
    return -1;
}

float *kvq_key_range_mut(Kvq *k, int layer, int percent_index, int channel) {
    size_t channels = (size_t)k->n_kv_heads * (size_t)k->head_dim;
    return k->ranges + (((size_t)layer * (size_t)k->n_percents + (size_t)percent_index) * channels + (size_t)channel) * 2;
}
const float *kvq_key_range(const Kvq *k, int layer, int percent_index, int channel) {
    return kvq_key_range_mut((Kvq *)k, layer, percent_index, channel);
}

float *kvq_codebook_mut(Kvq *k, int layer, KvqRole role, int bits_index, int percent_index, KvqVariant variant) {
    size_t levels = 0, before = 0;
    for (int i = 0; i < k->n_bits; i++) {
        if (i == bits_index) before = levels;
        levels += (size_t)1 << k->bits[i];
    }
    size_t per_bits = (size_t)1 << k->bits[bits_index], np = (size_t)k->n_percents;
    size_t block = ((size_t)layer * 2 + (size_t)role) * np * 2 * levels; // one (layer, role)
    return k->codebooks + block + np * 2 * before + ((size_t)percent_index * 2 + (size_t)variant) * per_bits;
}
const float *kvq_codebook(const Kvq *k, int layer, KvqRole role, int bits_index, int percent_index,
                          KvqVariant variant) {
    return kvq_codebook_mut((Kvq *)k, layer, role, bits_index, percent_index, variant);
}

const float *kvq_stream_max(const Kvq *k, int layer, KvqStream which) {
    return k->stream_max ? k->stream_max + (size_t)layer * KVQ_N_MAX + which : NULL;
}

uint64_t kvq_model_checksum(const Model *m) { return model_checksum(m->params, m->n_params * sizeof(float)); }

int kvq_default_path(const char *given, const char *model_path, char *buf, size_t n) {
    int w;
    if (given) w = snprintf(buf, n, "%s", given);
    else {
        size_t len = strlen(model_path); // micro's .bin or a GGUF's .gguf: X.kvq beside either
        int stem = len >= 4 && !strcmp(model_path + len - 4, ".bin")    ? (int)(len - 4)
                   : len >= 5 && !strcmp(model_path + len - 5, ".gguf") ? (int)(len - 5)
                                                                        : (int)len;
        w = snprintf(buf, n, "%.*s.kvq", stem, model_path);
    }
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

// The whole file in memory; NULL when out of memory or the sizes overflow.
static unsigned char *encode(const Kvq *k, size_t *size) {
    size_t total = kvq_file_bytes(k);
    unsigned char *b = total ? calloc(1, total) : NULL;
    if (!b) return NULL;
    memcpy(b, KVQ_MAGIC, 8);
    le_put_u32(b + 8, k->version);
    le_put_u32(b + 12, (uint32_t)k->n_layers);
    le_put_u32(b + 16, (uint32_t)k->n_kv_heads);
    le_put_u32(b + 20, (uint32_t)k->head_dim);
    le_put_u64(b + 24, k->model_checksum);
    le_put_u32(b + 32, k->sequences);
    le_put_u32(b + 36, k->length);
    le_put_u64(b + 40, k->seed);
    memcpy(b + 48, k->corpus_sha256, 32);
    le_put_u32(b + 80, (uint32_t)k->n_percents);
    le_put_u32(b + 84, (uint32_t)k->n_bits);
    unsigned char *p = b + KVQ_HEADER_BYTES;
    for (int i = 0; i < k->n_percents; i++, p += 4) le_put_u32(p, k->percents[i]);
    for (int i = 0; i < k->n_bits; i++, p += 4) le_put_u32(p, k->bits[i]);
    memcpy(p, k->ranges, k->n_ranges * sizeof(float));
    memcpy(p + k->n_ranges * sizeof(float), k->codebooks, k->n_codebooks * sizeof(float));
    if (k->version >= 2)
        memcpy(p + (k->n_ranges + k->n_codebooks) * sizeof(float), k->stream_max, k->n_stream_max * sizeof(float));
    le_put_u64(b + 88, model_checksum(b + KVQ_HEADER_BYTES, total - KVQ_HEADER_BYTES));
    *size = total;
    return b;
}

int kvq_save(const Kvq *k, const char *path, char *err, size_t errlen) {
    size_t size = 0;
    unsigned char *bytes = encode(k, &size);
    if (!bytes) {
        char shown[MSG_TEXT];
        snprintf(err, errlen, "cannot write %s: out of memory", msg_text(path, shown, sizeof shown));
        return -1;
    }
    SafeFile out;
    if (safe_open(&out, path, err, errlen)) {
        free(bytes);
        return -1;
    }
    fwrite(bytes, 1, size, out.f); // a short write sets the stream's error, which safe_commit reports
    free(bytes);
    return safe_commit(&out, err, errlen);
}

// One line: the file's name, then the reason.
#define FAIL MSG_FAIL

int kvq_load_bytes(Kvq *k, const void *bytes, size_t n, const Model *model, const char *label, char *err,
                   size_t errlen) {
    memset(k, 0, sizeof *k);
    char shown[MSG_TEXT], why[256];
    const char *name = msg_text(label, shown, sizeof shown);
    const unsigned char *b = bytes;
    if (n == 0) FAIL("empty file");
    if (n < KVQ_HEADER_BYTES) FAIL("truncated header: %zu bytes, a header needs %d", n, KVQ_HEADER_BYTES);
    if (memcmp(b, KVQ_MAGIC, 8) != 0) FAIL("not a micro calibration file (bad magic)");
    uint32_t version = le_get_u32(b + 8);
    if (version < 1 || version > KVQ_VERSION)
        FAIL("format version %u is not supported (this build reads versions 1..%u)", version, KVQ_VERSION);
    uint32_t layers = le_get_u32(b + 12), heads = le_get_u32(b + 16), hd = le_get_u32(b + 20);
    if (check_shape(layers, heads, hd, why, sizeof why)) FAIL("%s", why);
    uint32_t sequences = le_get_u32(b + 32), length = le_get_u32(b + 36);
    if (sequences < 1 || sequences > MAX_CALIB) FAIL("sequences = %u is out of range (1..%u)", sequences, MAX_CALIB);
    if (length < 1 || length > MAX_CALIB) FAIL("length = %u is out of range (1..%u)", length, MAX_CALIB);
    uint32_t np = le_get_u32(b + 80), nb = le_get_u32(b + 84);
    if (np < 1 || np > KVQ_MAX_PERCENTS) FAIL("%u outlier percents (1..%d)", np, KVQ_MAX_PERCENTS);
    if (nb < 1 || nb > KVQ_MAX_BITS) FAIL("%u bit widths (1..%d)", nb, KVQ_MAX_BITS);
    uint64_t tables = body_offset_tables((int)np, (int)nb);
    if (n < tables) FAIL("truncated: %zu bytes, the lists end at %llu", n, (unsigned long long)tables);
    uint32_t percents[KVQ_MAX_PERCENTS], bits[KVQ_MAX_BITS];
    for (uint32_t i = 0; i < np; i++) percents[i] = le_get_u32(b + KVQ_HEADER_BYTES + 4 * i);
    for (uint32_t i = 0; i < nb; i++) bits[i] = le_get_u32(b + KVQ_HEADER_BYTES + 4 * (np + i));
    if (check_lists(percents, (int)np, bits, (int)nb, why, sizeof why)) FAIL("%s", why);
    uint64_t nr, nc, expected;
    if (table_sizes(layers, heads, hd, np, bits, (int)nb, &nr, &nc) ||
        __builtin_add_overflow(nr, nc, &expected) ||
        __builtin_add_overflow(expected, stream_max_floats(version, layers), &expected) ||
        __builtin_mul_overflow(expected, 4, &expected) ||
        __builtin_add_overflow(expected, tables, &expected))
        FAIL("table sizes overflow");
    if (n < expected) FAIL("truncated: %zu bytes, the header promises %llu", n, (unsigned long long)expected);
    if (n > expected) FAIL("%llu trailing bytes after the last table", (unsigned long long)(n - expected));
    if (model_checksum(b + KVQ_HEADER_BYTES, n - KVQ_HEADER_BYTES) != le_get_u64(b + 88))
        FAIL("checksum mismatch: the file is corrupt");
    if (model) {
        const ModelConfig *c = &model->config;
        if ((int)layers != c->n_layers || (int)heads != c->n_kv_heads || (int)hd != c->head_dim)
            FAIL("calibrated for %u layers of %u kv heads x %u, but the model has %d of %d x %d", layers, heads, hd,
                 c->n_layers, c->n_kv_heads, c->head_dim);
        if (le_get_u64(b + 24) != kvq_model_checksum(model))
            FAIL("calibrated for another model (its weights' checksum differs): run micro calibrate");
    }
    if (kvq_init(k, (int)layers, (int)heads, (int)hd, percents, (int)np, bits, (int)nb, why, sizeof why))
        FAIL("%s", why);
    k->model_checksum = le_get_u64(b + 24);
    k->sequences = sequences, k->length = length;
    k->seed = le_get_u64(b + 40);
    memcpy(k->corpus_sha256, b + 48, 32);
    memcpy(k->ranges, b + tables, k->n_ranges * sizeof(float));
    memcpy(k->codebooks, b + tables + k->n_ranges * sizeof(float), k->n_codebooks * sizeof(float));
    k->version = version;
    if (version < 2) { // no maxima: a calibration that nvfp4:scale2=calib cannot use (kvq_view says so)
        free(k->stream_max);
        k->stream_max = NULL, k->n_stream_max = 0;
    } else {
        memcpy(k->stream_max, b + tables + (k->n_ranges + k->n_codebooks) * sizeof(float),
               k->n_stream_max * sizeof(float));
    }
    static const char *const stream_names[KVQ_N_MAX] = {"keys", "pre-RoPE keys", "values"};
    for (size_t i = 0; i < k->n_stream_max; i++)
        if (!isfinite(k->stream_max[i]) || k->stream_max[i] < 0.0f)
            FAIL("largest magnitude of layer %zu's %s is %s", i / KVQ_N_MAX, stream_names[i % KVQ_N_MAX],
                 isfinite(k->stream_max[i]) ? "negative" : "not finite");
    size_t channels = (size_t)heads * hd;
    for (size_t i = 0; i < k->n_ranges / 2; i++) {
        float lo = k->ranges[2 * i], hi = k->ranges[2 * i + 1];
        size_t layer = i / channels / np, pi = i / channels % np, ch = i % channels;
        if (!isfinite(lo) || !isfinite(hi))
            FAIL("key range of layer %zu, channel %zu, outliers %u/100%% is not finite", layer, ch, percents[pi]);
        if (lo > hi) FAIL("key range of layer %zu, channel %zu, outliers %u/100%% has lo > hi", layer, ch, percents[pi]);
    }
    for (int l = 0; l < k->n_layers; l++)
        for (int role = 0; role < 2; role++)
            for (int bi = 0; bi < k->n_bits; bi++)
                for (int pi = 0; pi < k->n_percents; pi++)
                    for (int v = 0; v < 2; v++) {
                        const float *cb = kvq_codebook(k, l, (KvqRole)role, bi, pi, (KvqVariant)v);
                        for (int j = 0; j < 1 << k->bits[bi]; j++) {
                            const char *what = !isfinite(cb[j])             ? "is not finite"
                                               : cb[j] < -1.0f || cb[j] > 1.0f ? "is outside [-1, 1]"
                                               : j > 0 && cb[j] < cb[j - 1]   ? "is not sorted"
                                                                             : NULL;
                            if (what)
                                FAIL("%s codebook of layer %d, %u bits, outliers %u/100%%%s %s",
                                     role ? "value" : "key", l, bits[bi], percents[pi], v ? " (q-norm)" : "", what);
                        }
                    }
    return 0;
fail:
    kvq_free(k);
    return -1;
}

int kvq_load(Kvq *k, const char *path, const Model *model, char *err, size_t errlen) {
    memset(k, 0, sizeof *k);
    long long size = 0;
    FILE *f = safe_open_read(path, &size, err, errlen); // a regular file, or one line saying what it is
    if (!f) return -1;
    char shown[MSG_TEXT];
    const char *name = msg_text(path, shown, sizeof shown);
    // A calibration file is kilobytes; refuse a huge one before reading it into memory.
    if (size > (1ll << 30)) {
        fclose(f);
        snprintf(err, errlen, "%s: %lld bytes is too large for a calibration file", name, size);
        return -1;
    }
    unsigned char *bytes = malloc(size > 0 ? (size_t)size : 1);
    if (!bytes || fread(bytes, 1, (size_t)size, f) != (size_t)size) {
        int oom = !bytes;
        free(bytes);
        fclose(f);
        snprintf(err, errlen, "%s: %s", name, oom ? "out of memory" : "read error");
        return -1;
    }
    fclose(f);
    int r = kvq_load_bytes(k, bytes, (size_t)size, model, path, err, errlen);
    free(bytes);
    return r;
}
