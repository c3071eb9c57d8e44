// GGUF v3 writer for micro (docs/gguf.md): header, key/value metadata, tensor infos, aligned F32 data.
#include "export_gguf.h"
#include "safe_file.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// GGUF value types (ggml's gguf.md) and the one tensor type we write.
enum { GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9 };
enum { GGML_TYPE_F32 = 0 };
enum { LLAMA_TOKEN_TYPE_BYTE = 6 }; // llama.cpp's token type for byte-fallback tokens
enum { GGML_FTYPE_ALL_F32 = 0 };    // general.file_type

// GGUF is little-endian; the tensor payload is copied from memory as it is, so the host must be too
// (micro's own model file makes the same assumption).
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF export assumes a little-endian host");

// Counts the bytes written so that offsets and padding follow from the writes themselves rather than
// from a second, separately maintained size computation; `ok` turns 0 at the first failed write.
// With f NULL it only counts, which is how the header learns the number of key/value pairs.
typedef struct {
    FILE *f;
    uint64_t pos;
    int ok;
    uint64_t n_kv;
} Writer;

static void put(Writer *w, const void *p, size_t n) {
    if (!w->ok || n == 0) return;
    if (w->f && fwrite(p, 1, n, w->f) != n) w->ok = 0;
    w->pos += n;
}
static void put_u32(Writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(Writer *w, uint64_t v) { put(w, &v, 8); }
static void put_f32(Writer *w, float v) { put(w, &v, 4); }
static void put_str(Writer *w, const char *s) {
    size_t n = strlen(s);
    put_u64(w, n); // GGUF strings: u64 length, bytes, no terminator
    put(w, s, n);
}
static void pad(Writer *w) {
    static const unsigned char zeros[GGUF_ALIGNMENT];
    put(w, zeros, (size_t)((GGUF_ALIGNMENT - w->pos % GGUF_ALIGNMENT) % GGUF_ALIGNMENT));
}

static void kv_key(Writer *w, const char *key, uint32_t type) {
    w->n_kv++;
    put_str(w, key);
    put_u32(w, type);
}
static void kv_u32(Writer *w, const char *key, uint32_t v) {
    kv_key(w, key, GGUF_U32);
    put_u32(w, v);
}
static void kv_f32(Writer *w, const char *key, float v) {
    kv_key(w, key, GGUF_F32);
    put_f32(w, v);
}
static void kv_bool(Writer *w, const char *key, int v) {
    kv_key(w, key, GGUF_BOOL);
    unsigned char b = v ? 1 : 0;
    put(w, &b, 1);
}
static void kv_str(Writer *w, const char *key, const char *v) {
    kv_key(w, key, GGUF_STRING);
    put_str(w, v);
}
static void kv_array(Writer *w, const char *key, uint32_t type, uint64_t n) {
    kv_key(w, key, GGUF_ARRAY);
    put_u32(w, type);
    put_u64(w, n);
}

typedef struct {
    char name[64];
    const float *data;
    uint32_t n_dims;
    uint64_t ne[2]; // ggml order: ne[0] is the contiguous (input) dimension
} Tensor;

#define MAX_TENSORS (2 + 9 * 1024) // token_embd, output_norm, 9 per layer (n_layers <= 1024)

// llama.cpp's names and shapes, layer by layer as llama.cpp's own converter orders them (readers
// find tensors by name). A row-major [out, in] matrix is ggml's
// ne = {in, out}: the same bytes, so every tensor is written as micro holds it.
static int list_tensors(const Model *m, Tensor *t) {
    const ModelConfig *c = &m->config;
    const ModelWeights *w = &m->w;
    size_t d = (size_t)c->dim, q = (size_t)c->n_heads * c->head_dim, kv = (size_t)c->n_kv_heads * c->head_dim;
    size_t h = (size_t)c->hidden_dim;
    int n = 0;
    t[n++] = (Tensor){"token_embd.weight", w->token_embedding, 2, {d, (uint64_t)c->vocab_size}};
    for (int l = 0; l < c->n_layers; l++) {
        struct {
            const char *suffix;
            const float *base;
            uint64_t in, out; // out == 0: a vector of length in
        } per[] = {
            {"attn_norm", w->attn_norm, d, 0}, {"attn_q", w->wq, d, q},   {"attn_k", w->wk, d, kv},
            {"attn_v", w->wv, d, kv},          {"attn_output", w->wo, q, d}, {"ffn_norm", w->ffn_norm, d, 0},
            {"ffn_gate", w->w1, d, h},         {"ffn_down", w->w2, h, d},  {"ffn_up", w->w3, d, h},
        };
        for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) {
            Tensor *x = &t[n++];
            snprintf(x->name, sizeof x->name, "blk.%d.%s.weight", l, per[i].suffix);
            uint64_t count = per[i].in * (per[i].out ? per[i].out : 1);
            x->data = per[i].base + (size_t)l * count;
            x->n_dims = per[i].out ? 2 : 1;
            x->ne[0] = per[i].in;
            x->ne[1] = per[i].out ? per[i].out : 1;
        }
    }
    t[n++] = (Tensor){"output_norm.weight", w->final_norm, 1, {d, 1}};
    return n;
}

static void write_metadata(Writer *w, const ModelConfig *c) {
    kv_str(w, "general.architecture", "llama");
    kv_str(w, "general.name", "micro");
    kv_u32(w, "general.alignment", GGUF_ALIGNMENT);
    kv_u32(w, "general.file_type", GGML_FTYPE_ALL_F32);
    kv_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size);
    kv_u32(w, "llama.context_length", (uint32_t)c->max_seq_len);
    kv_u32(w, "llama.embedding_length", (uint32_t)c->dim);
    kv_u32(w, "llama.block_count", (uint32_t)c->n_layers);
    kv_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden_dim);
    kv_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
    kv_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    kv_u32(w, "llama.attention.key_length", (uint32_t)c->head_dim);
    kv_u32(w, "llama.attention.value_length", (uint32_t)c->head_dim);
    // Whole-head RoPE; llama.cpp's LLAMA architecture rotates adjacent pairs (rope type NORM), as
    // micro does, so q and k need no permutation.
    kv_u32(w, "llama.rope.dimension_count", (uint32_t)c->head_dim);
    kv_f32(w, "llama.rope.freq_base", c->rope_theta);
    kv_f32(w, "llama.attention.layer_norm_rms_epsilon", c->norm_eps);

    // A SentencePiece ("llama") vocabulary made only of byte-fallback tokens: llama.cpp maps each
    // byte b to the token named <0xBB> (upper-case hex), which is token b, so token ids are bytes.
    kv_str(w, "tokenizer.ggml.model", "llama");
    kv_array(w, "tokenizer.ggml.tokens", GGUF_STRING, 256);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        put_str(w, name);
    }
    kv_array(w, "tokenizer.ggml.scores", GGUF_F32, 256); // nothing to merge: every score 0
    for (int b = 0; b < 256; b++) put_f32(w, 0.0f);
    kv_array(w, "tokenizer.ggml.token_type", GGUF_I32, 256);
    for (int b = 0; b < 256; b++) put_u32(w, LLAMA_TOKEN_TYPE_BYTE);
    kv_u32(w, "tokenizer.ggml.bos_token_id", MICRO_BOS);
    kv_u32(w, "tokenizer.ggml.eos_token_id", GGUF_EOS_TOKEN);
    kv_bool(w, "tokenizer.ggml.add_bos_token", 1);
    kv_bool(w, "tokenizer.ggml.add_eos_token", 0);
    kv_bool(w, "tokenizer.ggml.add_space_prefix", 0); // micro's text starts with its first byte
}

int gguf_write_model(FILE *f, const Model *m, char *err, size_t errlen) {
    if (m->config.latent_dim > 0) {
        snprintf(err, errlen, "GGUF export writes llama models: this one has latent attention");
        return -1;
    }
    if (m->config.vocab_size != 256 || m->config.n_layers > 1024) {
        snprintf(err, errlen, "GGUF export needs a 256-byte vocabulary and at most 1024 layers");
        return -1;
    }
    Tensor *tensors = malloc(MAX_TENSORS * sizeof *tensors);
    if (!tensors) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int n = list_tensors(m, tensors);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)(tensors[i].ne[0] * tensors[i].ne[1]);
    if (total != m->n_params) { // every parameter is written exactly once
        snprintf(err, errlen, "GGUF export: %zu of %zu parameters mapped to tensors", total, m->n_params);
        free(tensors);
        return -1;
    }

    Writer count = {NULL, 0, 1, 0};
    write_metadata(&count, &m->config);
    Writer w = {f, 0, 1, 0};
    errno = 0;
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, (uint64_t)n);
    put_u64(&w, count.n_kv);
    write_metadata(&w, &m->config);

    // Offsets are relative to the start of the data section; each tensor starts on the alignment.
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        put_str(&w, tensors[i].name);
        put_u32(&w, tensors[i].n_dims);
        for (uint32_t k = 0; k < tensors[i].n_dims; k++) put_u64(&w, tensors[i].ne[k]);
        put_u32(&w, GGML_TYPE_F32);
        put_u64(&w, offset);
        uint64_t bytes = tensors[i].ne[0] * tensors[i].ne[1] * sizeof(float);
        offset += (bytes + GGUF_ALIGNMENT - 1) / GGUF_ALIGNMENT * GGUF_ALIGNMENT;
    }
    pad(&w);
    for (int i = 0; i < n; i++) {
        put(&w, tensors[i].data, (size_t)(tensors[i].ne[0] * tensors[i].ne[1]) * sizeof(float));
        pad(&w);
    }
    free(tensors);
    if (!w.ok || ferror(f)) {
        snprintf(err, errlen, "write failed: %s", strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

static int write_gguf(FILE *f, void *ctx, char *why, size_t whylen) {
    return gguf_write_model(f, ctx, why, whylen);
}

int gguf_save(const Model *m, const char *path, char *err, size_t errlen) {
    if (safe_check_output(path, err, errlen)) return 2;
    return safe_write(path, write_gguf, (void *)m, err, errlen) ? 1 : 0;
}
