// GGUF v3 writer for micro (docs/gguf.md): header, key/value metadata, tensor infos, aligned F32 data.
// Multi-head and grouped-query models are written as llama.cpp's llama architecture, latent
// attention as its deepseek2 (every layer dense, no query compression); a model with a GGUF
// architecture's parts (ModelConfig) as that architecture: qwen2, qwen3, llama with a separate
// classifier or rope_freqs — what a model read from such a file had.
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
    uint64_t ne[3]; // ggml order: ne[0] is the contiguous (input) dimension; unused ones are 1
} Tensor;

static uint64_t tensor_count(const Tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2]; }

// token_embd, output_norm, output, rope_freqs, and at most 11 per layer (latent attention; llama has
// 9, qwen2 12, qwen3 11), n_layers <= 1024
#define MAX_TENSORS (4 + 12 * 1024)

// One per-layer tensor: where its floats are and its ggml shape.
typedef struct {
    const char *name; // "attn_q.weight"
    const float *base; // micro's block, every layer's one after another (one == 0), or this layer's alone
    uint64_t ne[3];    // ne[1] == 0: a vector of ne[0]; ne[2] == 0: a matrix
    int one;
} PerLayer;

static void add_layer_tensor(Tensor *x, int l, const PerLayer *p) {
    snprintf(x->name, sizeof x->name, "blk.%d.%s", l, p->name);
    x->n_dims = p->ne[2] ? 3 : p->ne[1] ? 2 : 1;
    x->ne[0] = p->ne[0];
    x->ne[1] = p->ne[1] ? p->ne[1] : 1;
    x->ne[2] = p->ne[2] ? p->ne[2] : 1;
    x->data = p->base + (p->one ? 0 : (size_t)l * (size_t)tensor_count(x));
}

// Floats of the tensors latent attention writes in another layout than micro holds them
// (attn_kv_a_mqa and attn_k_b, per layer); 0 for llama models.
static size_t derived_floats(const ModelConfig *c) {
    if (c->latent_dim == 0) return 0;
    return (size_t)c->n_layers * ((size_t)(c->latent_dim + c->rope_dim) * (size_t)c->dim +
                                  (size_t)c->n_heads * (size_t)c->head_dim * (size_t)c->latent_dim);
}

// llama.cpp's names and shapes, layer by layer as llama.cpp's own converter orders them (readers
// find tensors by name). A row-major [out, in] matrix is ggml's ne = {in, out}: the same bytes, so
// every llama tensor is written as micro holds it. Under latent attention (deepseek2) two tensors
// are made in `derived` (derived_floats(c) floats): attn_kv_a_mqa = [W_dkv; W_kr] (the latent's rows
// then the RoPE key's, one matrix as llama.cpp multiplies it) and attn_k_b = each head's W_uk
// transposed ({head_dim, latent_dim} per head: llama.cpp takes the query into the latent's space
// with it, the absorbed form). attn_v_b is W_uv as it is.
static int list_tensors(const Model *m, Tensor *t, float *derived) {
    const ModelConfig *c = &m->config;
    const ModelWeights *w = &m->w;
    uint64_t d = (uint64_t)c->dim, hd = (uint64_t)c->head_dim, nh = (uint64_t)c->n_heads;
    uint64_t q = nh * (uint64_t)model_qk_dim(c), o = nh * hd, kv = (uint64_t)c->n_kv_heads * hd;
    uint64_t h = (uint64_t)c->hidden_dim, lat = (uint64_t)c->latent_dim, rope = (uint64_t)c->rope_dim;
    int n = 0;
    t[n++] = (Tensor){"token_embd.weight", w->token_embedding, 2, {d, (uint64_t)c->vocab_size, 1}};
    for (int l = 0; l < c->n_layers; l++) {
        if (lat == 0) {
            PerLayer per[] = {
                {"attn_norm.weight", w->attn_norm, {d, 0, 0}, 0}, {"attn_q.weight", w->wq, {d, q, 0}, 0},
                {"attn_k.weight", w->wk, {d, kv, 0}, 0},          {"attn_v.weight", w->wv, {d, kv, 0}, 0},
                {"attn_output.weight", w->wo, {o, d, 0}, 0},      {"ffn_norm.weight", w->ffn_norm, {d, 0, 0}, 0},
                {"ffn_gate.weight", w->w1, {d, h, 0}, 0},         {"ffn_down.weight", w->w2, {h, d, 0}, 0},
                {"ffn_up.weight", w->w3, {d, h, 0}, 0},
            };
            for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) add_layer_tensor(&t[n++], l, &per[i]);
            const PerLayer extra[] = {
                {"attn_q.bias", w->bq, {o, 0, 0}, 0},  {"attn_k.bias", w->bk, {kv, 0, 0}, 0},
                {"attn_v.bias", w->bv, {kv, 0, 0}, 0}, {"attn_q_norm.weight", w->q_norm, {hd, 0, 0}, 0},
                {"attn_k_norm.weight", w->k_norm, {hd, 0, 0}, 0},
            };
            for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
                if (i < 3 ? c->qkv_bias : c->qk_norm) add_layer_tensor(&t[n++], l, &extra[i]);
            continue;
        }
        // attn_kv_a_mqa: {dim, latent + rope}, the latent's rows, then the RoPE key's.
        float *kva = derived, *kb = derived + (lat + rope) * d;
        derived = kb + nh * hd * lat;
        memcpy(kva, w->w_dkv + (size_t)l * lat * d, (size_t)(lat * d) * sizeof(float));
        memcpy(kva + lat * d, w->w_kr + (size_t)l * rope * d, (size_t)(rope * d) * sizeof(float));
        // attn_k_b: per head {head_dim, latent}, i.e. row r (a latent index) holds W_uk,h[., r].
        const float *uk = w->w_uk + (size_t)l * nh * hd * lat;
        for (uint64_t hh = 0; hh < nh; hh++)
            for (uint64_t r = 0; r < lat; r++)
                for (uint64_t i = 0; i < hd; i++) kb[(hh * lat + r) * hd + i] = uk[(hh * hd + i) * lat + r];
        PerLayer per[] = {
            {"attn_norm.weight", w->attn_norm, {d, 0, 0}, 0},     {"attn_q.weight", w->wq, {d, q, 0}, 0},
            {"attn_kv_a_mqa.weight", kva, {d, lat + rope, 0}, 1}, {"attn_kv_a_norm.weight", w->kv_norm, {lat, 0, 0}, 0},
            {"attn_k_b.weight", kb, {hd, lat, nh}, 1},            {"attn_v_b.weight", w->w_uv, {lat, hd, nh}, 0},
            {"attn_output.weight", w->wo, {o, d, 0}, 0},           {"ffn_norm.weight", w->ffn_norm, {d, 0, 0}, 0},
            {"ffn_gate.weight", w->w1, {d, h, 0}, 0},              {"ffn_down.weight", w->w2, {h, d, 0}, 0},
            {"ffn_up.weight", w->w3, {d, h, 0}, 0},
        };
        for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) add_layer_tensor(&t[n++], l, &per[i]);
    }
    t[n++] = (Tensor){"output_norm.weight", w->final_norm, 1, {d, 1, 1}};
    if (c->separate_output) t[n++] = (Tensor){"output.weight", w->output, 2, {d, (uint64_t)c->vocab_size, 1}};
    if (c->rope_factors) t[n++] = (Tensor){"rope_freqs.weight", w->rope_freqs, 1, {hd / 2, 1, 1}};
    return n;
}

// general.architecture: micro's multi-head and grouped-query models are llama's; latent attention
// is DeepSeek-V2's (deepseek2), every layer dense and without query compression.
// qwen2 and qwen3 are the architectures with NeoX RoPE and q/k/v biases, or q/k norms.
static const char *arch_name(const ModelConfig *c) {
    return c->latent_dim > 0 ? "deepseek2" : c->qk_norm ? "qwen3" : c->qkv_bias ? "qwen2" : "llama";
}

// A model the architectures above cannot hold (NeoX RoPE in llama, biases in qwen3, ...): one line.
static int arch_fits(const ModelConfig *c, char *err, size_t errlen) {
    const char *a = arch_name(c);
    const int qwen = a[0] == 'q';
    if (c->rope_halves == qwen && !(c->qkv_bias && c->qk_norm) && !(c->latent_dim > 0 && (qwen || c->rope_factors)))
        return 0;
    snprintf(err, errlen, "GGUF export: no architecture has this model's parts (NeoX RoPE %d, biases %d, q/k norms %d)",
             c->rope_halves, c->qkv_bias, c->qk_norm);
    return -1;
}

static void kv_arch_u32(Writer *w, const ModelConfig *c, const char *key, uint32_t v) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", arch_name(c), key);
    kv_u32(w, name, v);
}
static void kv_arch_f32(Writer *w, const ModelConfig *c, const char *key, float v) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", arch_name(c), key);
    kv_f32(w, name, v);
}

// A byte-level BPE vocabulary of the caller's (GgufBpeVocab) as llama.cpp's gpt2 tokenizer keys.
static void write_bpe_vocab(Writer *w, const GgufBpeVocab *v) {
    kv_str(w, "tokenizer.ggml.model", "gpt2");
    kv_str(w, "tokenizer.ggml.pre", v->pre);
    kv_array(w, "tokenizer.ggml.tokens", GGUF_STRING, (uint64_t)v->n_tokens);
    for (int i = 0; i < v->n_tokens; i++) put_str(w, v->tokens[i]);
    kv_array(w, "tokenizer.ggml.token_type", GGUF_I32, (uint64_t)v->n_tokens);
    for (int i = 0; i < v->n_tokens; i++) put_u32(w, (uint32_t)(v->types ? v->types[i] : 1)); // 1: normal
    kv_array(w, "tokenizer.ggml.merges", GGUF_STRING, (uint64_t)v->n_merges);
    for (int i = 0; i < v->n_merges; i++) put_str(w, v->merges[i]);
    if (v->bos >= 0) kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0) kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    kv_bool(w, "tokenizer.ggml.add_bos_token", v->bos >= 0);
}

static void write_metadata(Writer *w, const ModelConfig *c, const GgufBpeVocab *vocab) {
    const int mla = c->latent_dim > 0;
    kv_str(w, "general.architecture", arch_name(c));
    kv_str(w, "general.name", "micro");
    kv_u32(w, "general.alignment", GGUF_ALIGNMENT);
    kv_u32(w, "general.file_type", GGML_FTYPE_ALL_F32);
    kv_arch_u32(w, c, "vocab_size", (uint32_t)c->vocab_size);
    kv_arch_u32(w, c, "context_length", (uint32_t)c->max_seq_len);
    kv_arch_u32(w, c, "embedding_length", (uint32_t)c->dim);
    kv_arch_u32(w, c, "block_count", (uint32_t)c->n_layers);
    kv_arch_u32(w, c, "feed_forward_length", (uint32_t)c->hidden_dim);
    kv_arch_u32(w, c, "attention.head_count", (uint32_t)c->n_heads);
    if (!mla) {
        kv_arch_u32(w, c, "attention.head_count_kv", (uint32_t)c->n_kv_heads);
        kv_arch_u32(w, c, "attention.key_length", (uint32_t)c->head_dim);
        kv_arch_u32(w, c, "attention.value_length", (uint32_t)c->head_dim);
        // Whole-head RoPE; llama.cpp's LLAMA architecture rotates adjacent pairs (rope type NORM),
        // as micro does, so q and k need no permutation.
        kv_arch_u32(w, c, "rope.dimension_count", (uint32_t)c->head_dim);
    } else {
        // llama.cpp runs DeepSeek-V2 absorbed, as multi-query attention over one cached row per
        // token: the latent then the RoPE key (key_length), of which the latent is the value
        // (value_length). The per-head sizes it decompresses to are the _mla lengths; its score
        // scale is 1/sqrt(key_length_mla) = 1/sqrt(head_dim + rope_dim), micro's (no YaRN keys, so
        // mscale is 1). DEEPSEEK2's rope type is NORM (adjacent pairs), micro's: no permutation.
        kv_arch_u32(w, c, "attention.head_count_kv", 1);
        kv_arch_u32(w, c, "attention.key_length", (uint32_t)(c->latent_dim + c->rope_dim));
        kv_arch_u32(w, c, "attention.value_length", (uint32_t)c->latent_dim);
        kv_arch_u32(w, c, "attention.key_length_mla", (uint32_t)model_qk_dim(c));
        kv_arch_u32(w, c, "attention.value_length_mla", (uint32_t)c->head_dim);
        kv_arch_u32(w, c, "attention.q_lora_rank", 0); // no query compression: attn_q is the query
        kv_arch_u32(w, c, "attention.kv_lora_rank", (uint32_t)c->latent_dim);
        kv_arch_u32(w, c, "rope.dimension_count", (uint32_t)c->rope_dim);
        // Every layer dense (ffn_gate/down/up of feed_forward_length); llama.cpp requires the expert
        // keys anyway: no experts, the expert width stated as the dense width (as its converter
        // does for dense DeepSeek-V2 models).
        kv_arch_u32(w, c, "leading_dense_block_count", (uint32_t)c->n_layers);
        kv_arch_u32(w, c, "expert_count", 0);
        kv_arch_u32(w, c, "expert_used_count", 0);
        kv_arch_u32(w, c, "expert_shared_count", 0);
        kv_arch_u32(w, c, "expert_feed_forward_length", (uint32_t)c->hidden_dim);
    }
    kv_arch_f32(w, c, "rope.freq_base", c->rope_theta);
    kv_arch_f32(w, c, "attention.layer_norm_rms_epsilon", c->norm_eps);

    if (vocab) {
        write_bpe_vocab(w, vocab);
        return;
    }
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
    return gguf_write_model_vocab(f, m, NULL, err, errlen);
}

int gguf_write_model_vocab(FILE *f, const Model *m, const GgufBpeVocab *vocab, char *err, size_t errlen) {
    if ((vocab ? vocab->n_tokens > m->config.vocab_size || vocab->n_tokens < 1 : m->config.vocab_size != 256) ||
        m->config.n_layers > 1024) {
        snprintf(err, errlen, "GGUF export needs a 256-byte vocabulary (or a vocabulary of its own within the "
                              "embedding's rows) and at most 1024 layers");
        return -1;
    }
    if (arch_fits(&m->config, err, errlen)) return -1;
    Tensor *tensors = malloc(MAX_TENSORS * sizeof *tensors);
    size_t nd = derived_floats(&m->config);
    float *derived = nd ? malloc(nd * sizeof *derived) : NULL;
    if (!tensors || (nd && !derived)) {
        snprintf(err, errlen, "out of memory");
        free(tensors);
        free(derived);
        return -1;
    }
    int n = list_tensors(m, tensors, derived);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)tensor_count(&tensors[i]);
    if (total != m->n_params) { // every parameter is written exactly once
        snprintf(err, errlen, "GGUF export: %zu of %zu parameters mapped to tensors", total, m->n_params);
        free(tensors);
        free(derived);
        return -1;
    }

    Writer count = {NULL, 0, 1, 0};
    write_metadata(&count, &m->config, vocab);
    Writer w = {f, 0, 1, 0};
    errno = 0;
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, (uint64_t)n);
    put_u64(&w, count.n_kv);
    write_metadata(&w, &m->config, vocab);

    // Offsets are relative to the start of the data section; each tensor starts on the alignment.
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        put_str(&w, tensors[i].name);
        put_u32(&w, tensors[i].n_dims);
        for (uint32_t k = 0; k < tensors[i].n_dims; k++) put_u64(&w, tensors[i].ne[k]);
        put_u32(&w, GGML_TYPE_F32);
        put_u64(&w, offset);
        uint64_t bytes = tensor_count(&tensors[i]) * sizeof(float);
        offset += (bytes + GGUF_ALIGNMENT - 1) / GGUF_ALIGNMENT * GGUF_ALIGNMENT;
    }
    pad(&w);
    for (int i = 0; i < n; i++) {
        put(&w, tensors[i].data, (size_t)tensor_count(&tensors[i]) * sizeof(float));
        pad(&w);
    }
    free(tensors);
    free(derived);
    if (!w.ok || ferror(f)) {
        snprintf(err, errlen, "write failed: %s", strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

typedef struct {
    const Model *m;
    const GgufBpeVocab *vocab;
} Save;

static int write_gguf(FILE *f, void *ctx, char *why, size_t whylen) {
    const Save *s = ctx;
    return gguf_write_model_vocab(f, s->m, s->vocab, why, whylen);
}

int gguf_save(const Model *m, const char *path, char *err, size_t errlen) {
    return gguf_save_vocab(m, NULL, path, err, errlen);
}

int gguf_save_vocab(const Model *m, const GgufBpeVocab *vocab, const char *path, char *err, size_t errlen) {
    if (safe_check_output(path, err, errlen)) return 2;
    Save s = {m, vocab};
    return safe_write(path, write_gguf, &s, err, errlen) ? 1 : 0;
}
