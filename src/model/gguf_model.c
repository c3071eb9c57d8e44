// A model from a GGUF file (gguf_model.h): what the file's architecture means described in one table,
// every key and tensor checked against it before a weight is decoded, the weights decoded to fp32
// (ggml_types.h) into micro's own layout. docs/models.md says what is read, what is refused and why;
// docs/adding-an-architecture.md how an architecture joins the table.
#include "gguf_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_tokenizer.h"
#include "msgtext.h"

// One architecture: its name and what its block has beyond llama's, each a part of micro's forward
// pass (ModelConfig). An architecture not listed is refused by name; one listed reads its keys under
// its own name ("qwen2.block_count"). Whether the classifier is separate (output.weight) and the RoPE
// frequencies scaled (rope_freqs.weight) the file's tensors say, in any of them.
typedef struct {
    const char *name;
    int rope_halves; // GPT-NeoX's RoPE pairs (llama.cpp's LLAMA_ROPE_TYPE_NEOX)
    int qkv_bias;    // blk.N.attn_{q,k,v}.bias
    int qk_norm;     // blk.N.attn_{q,k}_norm.weight
} GgufArch;
static const GgufArch archs[] = {
    {"llama", 0, 0, 0},
    {"qwen2", 1, 1, 0},
    {"qwen3", 1, 0, 1},
};

// A tensor of every layer (blk.N.NAME) or of the model (NAME), and where micro keeps it.
typedef struct {
    const char *name;   // "attn_q.weight"
    float **slot;       // the ModelWeights member (all layers, one after another)
    uint64_t dims[2];   // ggml's {inner, outer}; outer 0 for a vector
} TensorPlace;

// The GGUF name of the i-th tensor micro reads: the model's first, then each layer's.
static const TensorPlace *tensor_at(size_t i, const TensorPlace *whole, size_t n_whole, const TensorPlace *per_layer,
                                    size_t n_per, int *layer, char *key, size_t n) {
    *layer = i < n_whole ? -1 : (int)((i - n_whole) / n_per);
    const TensorPlace *p = i < n_whole ? &whole[i] : &per_layer[(i - n_whole) % n_per];
    if (*layer < 0) snprintf(key, n, "%s", p->name);
    else snprintf(key, n, "blk.%d.%s", *layer, p->name);
    return p;
}

#define FAIL(...)                                                                   \
    do {                                                                            \
        int n_ = snprintf(err, errlen, "%s: ", label);                              \
        if (n_ >= 0 && (size_t)n_ < errlen) snprintf(err + n_, errlen - (size_t)n_, __VA_ARGS__); \
        goto fail;                                                                  \
    } while (0)


// mapped: data is gguf_map's, whose pages of a tensor are given back once it is decoded, so that
// loading holds the fp32 weights and one tensor of the file, not the whole file beside them (a 0.5B
// model's F16 file is 1 GB).
// shape_only: the configuration checked and kept, no weight decoded (m->params NULL).
static int from_bytes(Model *m, const uint8_t *data, size_t size, int mapped, int shape_only, const char *label,
                      char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    Gguf g;
    GgufTokenizer tok = {0}; // freed at fail: every path there has it set or empty
    if (gguf_parse(&g, data, size, label, err, errlen)) return -1;
    char why[400], key[96];
    GgufString arch_name;
    if (gguf_get_string(&g, "general.architecture", &arch_name, why, sizeof why)) FAIL("no general.architecture string");
    const GgufArch *arch = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (gguf_string_is(arch_name, archs[i].name)) arch = &archs[i];
    if (!arch) {
        char shown[64];
        FAIL("architecture '%s': micro reads llama, qwen2 and qwen3", gguf_shown(arch_name, shown, sizeof shown));
    }
    if (gguf_tokenizer(&g, &tok, why, sizeof why)) FAIL("%s", why); // byte-level BPE, SentencePiece, or micro's bytes
    // The shape from the architecture's keys: each required, in range, or refused by name.
    static const struct {
        const char *key;
        uint64_t lo, hi;
        int required;
    } shape_keys[] = {{"embedding_length", 1, 65536, 1}, {"block_count", 1, 1024, 1},  {"feed_forward_length", 1, 1 << 20, 1},
                      {"attention.head_count", 1, 4096, 1}, {"attention.head_count_kv", 1, 4096, 0},
                      {"context_length", 1, 1 << 20, 1}, {"attention.key_length", 1, MICRO_MAX_WIDTH, 0},
                      {"attention.value_length", 1, MICRO_MAX_WIDTH, 0}, {"rope.dimension_count", 1, MICRO_MAX_WIDTH, 0},
                      {"vocab_size", 1, 1 << 24, 0}};
    uint64_t v[sizeof shape_keys / sizeof shape_keys[0]] = {0};
    for (size_t i = 0; i < sizeof shape_keys / sizeof shape_keys[0]; i++) {
        snprintf(key, sizeof key, "%s.%s", arch->name, shape_keys[i].key);
        const int r = gguf_get_uint(&g, key, shape_keys[i].lo, shape_keys[i].hi, &v[i], why, sizeof why);
        if (r < 0) FAIL("%s", why);
        if (r > 0 && shape_keys[i].required) FAIL("no %s", key);
    }
    ModelConfig c = model_config_micro();
    c.dim = (int)v[0], c.n_layers = (int)v[1], c.hidden_dim = (int)v[2], c.n_heads = (int)v[3];
    c.n_kv_heads = v[4] ? (int)v[4] : c.n_heads;
    c.max_seq_len = (int)v[5];
    // A head's width: key_length where given (Qwen3's heads are wider than embedding_length shares),
    // else the residual shared between the heads. micro's attention has one width per head for
    // queries, keys and values, all of it rotated.
    c.head_dim = v[6] ? (int)v[6] : c.dim % c.n_heads == 0 ? c.dim / c.n_heads : 0;
    if (!c.head_dim) FAIL("embedding_length %d is not a multiple of head_count %d, and no attention.key_length", c.dim, c.n_heads);
    if (v[7] && v[7] != (uint64_t)c.head_dim)
        FAIL("values of %llu numbers a head beside keys of %d: micro's heads have one width",
             (unsigned long long)v[7], c.head_dim);
    if (v[8] && v[8] != (uint64_t)c.head_dim)
        FAIL("RoPE on %llu of a head's %d numbers: micro rotates the whole head", (unsigned long long)v[8], c.head_dim);
    c.rope_halves = arch->rope_halves, c.qkv_bias = arch->qkv_bias, c.qk_norm = arch->qk_norm;
    c.separate_output = gguf_tensor(&g, "output.weight") != NULL;
    c.rope_factors = gguf_tensor(&g, "rope_freqs.weight") != NULL;
    snprintf(key, sizeof key, "%s.rope.freq_base", arch->name);
    if (gguf_get_float(&g, key, &c.rope_theta, why, sizeof why) < 0) FAIL("%s", why);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch->name);
    const int eps = gguf_get_float(&g, key, &c.norm_eps, why, sizeof why);
    if (eps) FAIL("%s", eps < 0 ? why : "no attention.layer_norm_rms_epsilon (micro's blocks are RMSNorm)");
    GgufString scaling;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch->name);
    const int sc = gguf_get_string(&g, key, &scaling, why, sizeof why);
    if (sc < 0) FAIL("%s", why);
    if (sc == 0 && !gguf_string_is(scaling, "none")) FAIL("%s is not none: micro does not scale RoPE yet", key);
    const GgufTensor *embd = gguf_tensor(&g, "token_embd.weight");
    if (!embd || embd->n_dims != 2) FAIL("no two-dimensional token_embd.weight");
    c.vocab_size = embd->dims[1] <= (1u << 24) ? (int)embd->dims[1] : -1;
    if (v[9] && v[9] != (uint64_t)c.vocab_size) FAIL("vocab_size %llu beside a token_embd.weight of %d rows", (unsigned long long)v[9], c.vocab_size);
    if (tok.tok && tok.n_tokens > c.vocab_size)
        FAIL("a vocabulary of %d tokens beside a token_embd.weight of %d rows", tok.n_tokens, c.vocab_size);
    if (model_config_validate(&c, why, sizeof why)) FAIL("%s", why);
    if (shape_only) {
        m->config = c, m->n_params = model_param_count(&c);
        gguf_tokenizer_free(&tok);
        gguf_free(&g);
        return 0;
    }
    if (model_alloc(m, &c)) FAIL("out of memory for %zu parameters", model_param_count(&c));
    m->tokenizer = tok.tok, m->bos = tok.tok ? tok.bos : MICRO_BOS, m->eos = tok.tok ? tok.eos : MICRO_BOS;
    tok.tok = NULL; // the model's now
    ModelWeights *w = &m->w;
    const uint64_t d = (uint64_t)c.dim, q = (uint64_t)c.n_heads * (uint64_t)c.head_dim,
                   kv = (uint64_t)c.n_kv_heads * (uint64_t)c.head_dim, h = (uint64_t)c.hidden_dim;
    const uint64_t hd = (uint64_t)c.head_dim, vocab = (uint64_t)c.vocab_size;
    TensorPlace per_layer[16] = {
        {"attn_norm.weight", &w->attn_norm, {d, 0}}, {"attn_q.weight", &w->wq, {d, q}},
        {"attn_k.weight", &w->wk, {d, kv}},          {"attn_v.weight", &w->wv, {d, kv}},
        {"attn_output.weight", &w->wo, {q, d}},      {"ffn_norm.weight", &w->ffn_norm, {d, 0}},
        {"ffn_gate.weight", &w->w1, {d, h}},         {"ffn_down.weight", &w->w2, {h, d}},
        {"ffn_up.weight", &w->w3, {d, h}},
    };
    size_t n_per = 9;
    if (c.qkv_bias) {
        per_layer[n_per++] = (TensorPlace){"attn_q.bias", &w->bq, {q, 0}};
        per_layer[n_per++] = (TensorPlace){"attn_k.bias", &w->bk, {kv, 0}};
        per_layer[n_per++] = (TensorPlace){"attn_v.bias", &w->bv, {kv, 0}};
    }
    if (c.qk_norm) {
        per_layer[n_per++] = (TensorPlace){"attn_q_norm.weight", &w->q_norm, {hd, 0}};
        per_layer[n_per++] = (TensorPlace){"attn_k_norm.weight", &w->k_norm, {hd, 0}};
    }
    TensorPlace whole[4] = {{"token_embd.weight", &w->token_embedding, {d, vocab}},
                            {"output_norm.weight", &w->final_norm, {d, 0}}};
    size_t n_whole = 2;
    if (c.separate_output) whole[n_whole++] = (TensorPlace){"output.weight", &w->output, {d, vocab}};
    if (c.rope_factors) whole[n_whole++] = (TensorPlace){"rope_freqs.weight", &w->rope_freqs, {hd / 2, 0}};
    uint64_t used = 0;
    const size_t n_read = n_whole + (size_t)c.n_layers * n_per;
    for (size_t i = 0; i < n_read; i++) {
        int layer;
        const TensorPlace *p = tensor_at(i, whole, n_whole, per_layer, n_per, &layer, key, sizeof key);
        const GgufTensor *t = gguf_tensor(&g, key);
        if (!t) FAIL("no tensor %s", key);
        const int dims = p->dims[1] ? 2 : 1;
        if (t->n_dims != dims || t->dims[0] != p->dims[0] || (dims == 2 && t->dims[1] != p->dims[1]))
            FAIL("tensor %s is {%llu%s%llu}, not {%llu%s%llu}", key, (unsigned long long)t->dims[0], t->n_dims > 1 ? ", " : "",
                 t->n_dims > 1 ? (unsigned long long)t->dims[1] : 0ull, (unsigned long long)p->dims[0], dims > 1 ? ", " : "",
                 dims > 1 ? (unsigned long long)p->dims[1] : 0ull);
        float *dst = *p->slot + (layer < 0 ? 0 : (size_t)layer * (size_t)t->n_elements);
        t->type->decode(t->data, dst, (size_t)(t->n_elements / (uint64_t)t->type->block));
        for (uint64_t e = 0; e < t->n_elements; e++)
            if (!isfinite(dst[e])) FAIL("tensor %s: a non-finite value at element %llu", key, (unsigned long long)e);
        if (mapped) gguf_release(t->data, t->bytes);
        used++;
    }
    // Llama 3's factors divide RoPE's frequencies: a zero or negative one is no model's.
    for (int i = 0; c.rope_factors && i < c.head_dim / 2; i++)
        if (!(w->rope_freqs[i] > 0.0f)) FAIL("rope_freqs.weight: factor %d is %g, not above 0", i, (double)w->rope_freqs[i]);
    // A tensor micro does not read would be a part of the model it leaves out: refused by name
    // (a bias llama has not, a norm qwen2 has not, ...).
    if (used != g.n_tensors)
        for (uint64_t i = 0; i < g.n_tensors; i++) {
            int known = 0;
            for (size_t j = 0; j < n_read && !known; j++) {
                int layer;
                tensor_at(j, whole, n_whole, per_layer, n_per, &layer, key, sizeof key);
                known = gguf_string_is(g.tensors[i].name, key);
            }
            if (!known) {
                char shown[64];
                FAIL("tensor %s: micro's %s has no such part yet", gguf_shown(g.tensors[i].name, shown, sizeof shown),
                     arch->name);
            }
        }
    gguf_free(&g);
    return 0;
fail:
    gguf_tokenizer_free(&tok);
    gguf_free(&g);
    if (m->params) model_free(m);
    memset(m, 0, sizeof *m);
    return -1;
}

int gguf_model_from_bytes(Model *m, const uint8_t *data, size_t size, const char *label, char *err, size_t errlen) {
    return from_bytes(m, data, size, 0, 0, label, err, errlen);
}

int gguf_model_load(Model *m, const char *path, char *err, size_t errlen) {
    char shown[MSG_TEXT];
    const char *label = msg_text(path, shown, sizeof shown);
    memset(m, 0, sizeof *m);
    const uint8_t *map;
    size_t size;
    if (gguf_map(path, &map, &size, err, errlen)) return -1;
    const int rc = from_bytes(m, map, size, 1, 0, label, err, errlen);
    gguf_unmap(map, size);
    return rc;
}

int gguf_model_shape(ModelConfig *c, size_t *n_params, const char *path, char *err, size_t errlen) {
    char shown[MSG_TEXT];
    const uint8_t *map;
    size_t size;
    Model m;
    if (gguf_map(path, &map, &size, err, errlen)) return -1;
    const int rc = from_bytes(&m, map, size, 1, 1, msg_text(path, shown, sizeof shown), err, errlen);
    gguf_unmap(map, size);
    if (!rc) *c = m.config, *n_params = m.n_params;
    return rc;
}
