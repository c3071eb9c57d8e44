// Reading and writing models/micro.bin. The loader trusts nothing it has not checked: magic,
// version, every field's range, sizes that multiply without overflow, the exact length, the
// checksum and finite values, in that order, so each bad file gets its own one-line reason.
#include "model_file.h"
#include "gguf_model.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "le_bytes.h"
#include "msgtext.h"
#include "safe_file.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the payload is read as little-endian fp32 in place; add byte swapping for this host"
#endif

#define FNV_BASIS 1469598103934665603ull

static uint64_t fnv(uint64_t h, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

unsigned long long model_checksum(const void *bytes, size_t n) { return fnv(FNV_BASIS, bytes, n); }

unsigned long long model_file_checksum(const unsigned char *header, const void *payload, size_t payload_bytes) {
    uint64_t h = fnv(FNV_BASIS, header, MODEL_FILE_CHECKSUM_AT);
    h = fnv(h, header + MODEL_FILE_CHECKSUM_AT + 8, MODEL_FILE_HEADER_BYTES_LATENT - MODEL_FILE_CHECKSUM_AT - 8);
    return fnv(h, payload, payload_bytes);
}

// Config fields in header order, as offsets of ModelConfig's int members.
static const struct {
    const char *name;
    size_t offset;
} int_fields[] = {
    {"dim", offsetof(ModelConfig, dim)},
    {"n_layers", offsetof(ModelConfig, n_layers)},
    {"n_heads", offsetof(ModelConfig, n_heads)},
    {"n_kv_heads", offsetof(ModelConfig, n_kv_heads)},
    {"head_dim", offsetof(ModelConfig, head_dim)},
    {"hidden_dim", offsetof(ModelConfig, hidden_dim)},
    {"vocab_size", offsetof(ModelConfig, vocab_size)},
    {"max_seq_len", offsetof(ModelConfig, max_seq_len)},
};
#define N_INT_FIELDS (sizeof int_fields / sizeof int_fields[0])

// Version 3's header, its checksum over the header and the payload.
static void encode_header(const Model *m, unsigned char h[MODEL_FILE_HEADER_BYTES_LATENT]) {
    memcpy(h, MODEL_FILE_MAGIC, 8);
    le_put_u32(h + 8, MODEL_FILE_VERSION_WHOLE);
    for (size_t i = 0; i < N_INT_FIELDS; i++)
        le_put_u32(h + 12 + 4 * i, (uint32_t) * (const int *)((const char *)&m->config + int_fields[i].offset));
    le_put_f32(h + 44, m->config.rope_theta);
    le_put_f32(h + 48, m->config.norm_eps);
    le_put_u64(h + 52, m->n_params);
    le_put_u32(h + 68, (uint32_t)m->config.latent_dim);
    le_put_u32(h + 72, (uint32_t)m->config.rope_dim);
    le_put_u64(h + MODEL_FILE_CHECKSUM_AT, model_file_checksum(h, m->params, m->n_params * sizeof(float)));
}

int model_save(const Model *m, const char *path, char *err, size_t errlen) {
    unsigned char header[MODEL_FILE_HEADER_BYTES_LATENT];
    const size_t payload = m->n_params * sizeof(float), header_bytes = sizeof header;
    encode_header(m, header);
    SafeFile out;
    if (safe_open(&out, path, err, errlen)) return -1;
    // A short fwrite leaves the stream's error flag, which safe_commit reports with its reason.
    if (fwrite(header, 1, header_bytes, out.f) == header_bytes) fwrite(m->params, 1, payload, out.f);
    return safe_commit(&out, err, errlen);
}

// One line: the file's name (escaped and shortened, so the reason always fits), then the reason.
#define FAIL MSG_FAIL

// The header checks both loaders share, in the order the file's problems are named: the length it
// must have, magic, version, every field, the parameter count; *expected is the exact file length.
// h holds min(file_bytes, MODEL_FILE_HEADER_BYTES_LATENT) bytes.
static int check_header(const unsigned char *h, uint64_t file_bytes, const char *name, ModelConfig *c,
                        uint64_t *expected, char *err, size_t errlen) {
    if (file_bytes == 0) FAIL("empty file");
    if (file_bytes < MODEL_FILE_HEADER_BYTES)
        FAIL("truncated header: %llu bytes, a header needs %d", (unsigned long long)file_bytes,
             MODEL_FILE_HEADER_BYTES);
    if (memcmp(h, MODEL_FILE_MAGIC, 8) != 0) FAIL("not a micro model file (bad magic)");
    uint32_t version = le_get_u32(h + 8);
    const size_t header_bytes = model_file_header_bytes_of(version);
    if (header_bytes == 0)
        FAIL("format version %u is not supported (this build reads versions %u to %u)", version, MODEL_FILE_VERSION,
             MODEL_FILE_VERSION_WHOLE);
    if (file_bytes < header_bytes)
        FAIL("truncated header: %llu bytes, a version %u header needs %zu", (unsigned long long)file_bytes, version,
             header_bytes);
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < N_INT_FIELDS; i++) {
        uint32_t v = le_get_u32(h + 12 + 4 * i);
        if (v > INT32_MAX) FAIL("%s = %u is out of range", int_fields[i].name, v);
        *(int *)((char *)c + int_fields[i].offset) = (int)v;
    }
    c->rope_theta = le_get_f32(h + 44);
    c->norm_eps = le_get_f32(h + 48);
    if (header_bytes == MODEL_FILE_HEADER_BYTES_LATENT) {
        const uint32_t lat = le_get_u32(h + 68), rope = le_get_u32(h + 72);
        // Version 2 is latent attention's alone; version 3 holds every model (0 and 0 without it).
        if (lat > INT32_MAX || (lat == 0 && version == MODEL_FILE_VERSION_LATENT))
            FAIL("latent_dim = %u is out of range", lat);
        if (rope > INT32_MAX) FAIL("rope_dim = %u is out of range", rope);
        c->latent_dim = (int)lat, c->rope_dim = (int)rope;
    }
    char why[256];
    // micro's files hold its own models: a byte vocabulary (a GGUF brings its own tokenizer).
    if (model_config_validate_own(c, why, sizeof why)) FAIL("%s", why);
    size_t n_params = model_param_count(c);
    uint64_t stored_params = le_get_u64(h + 52);
    if (stored_params != n_params)
        FAIL("header says %llu parameters but its dimensions give %zu", (unsigned long long)stored_params, n_params);
    if (__builtin_mul_overflow((uint64_t)n_params, (uint64_t)sizeof(float), expected) ||
        __builtin_add_overflow(*expected, (uint64_t)header_bytes, expected))
        FAIL("parameter count overflows the file size");
    // The payload is allocated only once the length matches, so a header cannot ask for more memory
    // than the file (or buffer) it came in.
    if (file_bytes < *expected)
        FAIL("truncated: %llu bytes, the header promises %llu", (unsigned long long)file_bytes,
             (unsigned long long)*expected);
    if (file_bytes > *expected)
        FAIL("%llu trailing bytes after the last tensor", (unsigned long long)(file_bytes - *expected));
    return 0;
fail:
    return -1;
}

// The payload checks both loaders share: checksum, then finite values.
static int check_payload(const Model *m, const unsigned char *h, const char *name, char *err, size_t errlen) {
    const size_t payload = m->n_params * sizeof(float);
    if (le_get_u32(h + 8) == MODEL_FILE_VERSION_WHOLE) {
        if (model_file_checksum(h, m->params, payload) != le_get_u64(h + MODEL_FILE_CHECKSUM_AT))
            FAIL("checksum mismatch: the header or the payload is corrupt");
    } else if (model_checksum(m->params, payload) != le_get_u64(h + MODEL_FILE_CHECKSUM_AT)) {
        FAIL("checksum mismatch: the payload is corrupt");
    }
    TensorInfo info[MODEL_N_TENSORS];
    model_tensor_infos(&m->config, info);
    const float *p = m->params;
    for (int t = 0; t < MODEL_N_TENSORS; t++) {
        for (size_t i = 0; i < info[t].count; i++)
            if (!isfinite(p[i])) FAIL("tensor %s holds a non-finite value at element %zu", info[t].name, i);
        p += info[t].count;
    }
    return 0;
fail:
    return -1;
}

int model_load_bytes(Model *m, const void *bytes, size_t n, const char *label, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    char shown[MSG_TEXT];
    const char *name = msg_text(label, shown, sizeof shown);
    const unsigned char *b = bytes;
    if (n >= 4 && memcmp(b, "GGUF", 4) == 0) return gguf_model_from_bytes(m, b, n, name, err, errlen);
    ModelConfig c;
    uint64_t expected;
    if (check_header(b, n, name, &c, &expected, err, errlen)) return -1;
    if (model_alloc(m, &c)) FAIL("out of memory for %zu parameters", model_param_count(&c));
    memcpy(m->params, b + model_file_header_bytes_of(le_get_u32(b + 8)), m->n_params * sizeof(float));
    if (check_payload(m, b, name, err, errlen)) goto fail;
    return 0;
fail:
    model_free(m);
    return -1;
}

int model_load(Model *m, const char *path, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    char shown[MSG_TEXT];
    const char *name = msg_text(path, shown, sizeof shown);
    FILE *f = NULL;
    long long size = 0;
    f = safe_open_read(path, &size, err, errlen); // a regular file, or one line saying what it is
    if (!f) goto fail;
    uint64_t file_bytes = (uint64_t)size;
    unsigned char h[MODEL_FILE_HEADER_BYTES_LATENT] = {0};
    const size_t head = file_bytes < sizeof h ? (size_t)file_bytes : sizeof h;
    if (file_bytes >= MODEL_FILE_HEADER_BYTES && fread(h, 1, head, f) != head) FAIL("read error in the header");
    if (file_bytes >= 4 && memcmp(h, "GGUF", 4) == 0) { // the model the user brings, by its magic
        fclose(f);
        return gguf_model_load(m, path, err, errlen);
    }
    ModelConfig c;
    uint64_t expected;
    if (check_header(h, file_bytes, name, &c, &expected, err, errlen)) goto fail;
    if (model_alloc(m, &c)) FAIL("out of memory for %zu parameters", model_param_count(&c));
    size_t payload = m->n_params * sizeof(float);
    if (fseek(f, (long)model_file_header_bytes_of(le_get_u32(h + 8)), SEEK_SET) != 0) FAIL("seek error after the header");
    if (fread(m->params, 1, payload, f) != payload) FAIL("read error in the payload");
    if (check_payload(m, h, name, err, errlen)) goto fail;
    fclose(f);
    return 0;
fail:
    if (f) fclose(f);
    model_free(m);
    return -1;
}
