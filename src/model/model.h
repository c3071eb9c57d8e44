// micro's configuration, weights and the one-token forward pass.
#ifndef MICRO_MODEL_H
#define MICRO_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "max_width.h"


#define MICRO_BOS 1 // byte 0x01: beginning of sequence and document separator

typedef struct {
    int dim;         // residual width (192)
    int n_layers;    // 4
    int n_heads;     // query heads (6)
    int n_kv_heads;  // key/value heads (6); must divide n_heads
    int head_dim;    // 32; n_heads * head_dim == dim
    int hidden_dim;  // SwiGLU hidden width (512)
    int vocab_size;  // 256 raw bytes
    int max_seq_len; // context (2048)
    float rope_theta; // 10000
    float norm_eps;   // 1e-5
    // Multi-head latent attention (DeepSeek-V2) when latent_dim > 0: each token caches one latent
    // c = RMSNorm(W_dkv·x) of latent_dim numbers, from which every head's key (W_uk) and value
    // (W_uv) are made, and one RoPE key of rope_dim numbers shared by the heads; each head's query
    // has head_dim numbers matched against the latent's key and rope_dim against the RoPE key.
    // n_kv_heads is then 1 (the latent serves every head). 0 and 0: multi-head or grouped-query.
    int latent_dim;
    int rope_dim;
    // What a GGUF's architecture adds to micro's block (gguf_model.c's table says which has what);
    // all 0 in micro's own models, whose files do not store them.
    int rope_halves;     // RoPE pairs (i, i + head_dim/2), GPT-NeoX's order (Qwen), not (2i, 2i+1)
    int qkv_bias;        // q, k and v each have a bias (Qwen2)
    int qk_norm;         // each head's q and k are RMS-normalised before RoPE (Qwen3)
    int separate_output; // the classifier is a matrix of its own, not the token embedding
    int rope_factors;    // each pair's RoPE frequency is divided by a factor (Llama 3's rope_freqs)
} ModelConfig;

// Per head, the numbers a query has: head_dim, plus rope_dim under latent attention.
static inline int model_qk_dim(const ModelConfig *c) { return c->head_dim + c->rope_dim; }

// Pointers into one contiguous fp32 buffer, in the file's payload order (llama2.c's order without
// its RoPE tables). The trainer lays its gradients and AdamW moments out the same way.
typedef struct {
    float *token_embedding; // [vocab, dim]; also the (tied) classifier
    float *attn_norm;       // [L, dim]
    float *wq;              // [L, n_heads*qk_dim, dim]: per head head_dim numbers, then rope_dim (MLA)
    float *wk;              // [L, n_kv_heads*head_dim, dim] (empty under latent attention)
    float *wv;              // [L, n_kv_heads*head_dim, dim] (empty under latent attention)
    // Latent attention's (all empty otherwise):
    float *w_dkv;           // [L, latent_dim, dim]: the latent before its norm
    float *kv_norm;         // [L, latent_dim]: the latent's RMSNorm gain
    float *w_kr;            // [L, rope_dim, dim]: the shared RoPE key
    float *w_uk;            // [L, n_heads*head_dim, latent_dim]: each head's key from the latent
    float *w_uv;            // [L, n_heads*head_dim, latent_dim]: each head's value from the latent
    float *wo;              // [L, dim, n_heads*head_dim]
    float *ffn_norm;        // [L, dim]
    float *w1;              // [L, hidden, dim]
    float *w2;              // [L, dim, hidden]
    float *w3;              // [L, hidden, dim]
    float *final_norm;      // [dim]
    // The architecture's additions (ModelConfig), each empty unless its flag is set:
    float *bq;              // [L, n_heads*head_dim]
    float *bk;              // [L, n_kv_heads*head_dim]
    float *bv;              // [L, n_kv_heads*head_dim]
    float *q_norm;          // [L, head_dim]: one gain for every head of a layer
    float *k_norm;          // [L, head_dim]
    float *output;          // [vocab, dim]
    float *rope_freqs;      // [head_dim/2]
} ModelWeights;

#define MODEL_N_TENSORS 23
#define MODEL_MAX_PARAMS (1ull << 34) // 64 GiB of fp32: far beyond micro, well inside 64-bit sizes

typedef struct {
    const char *name;
    size_t count; // elements in this tensor (all layers)
    int is_matrix; // weight decay applies to matrices only
} TensorInfo;

struct Tokenizer;

typedef struct {
    ModelConfig config;
    ModelWeights w;
    float *params; // owns the buffer w points into
    size_t n_params;
    // The model's own tokenizer when it is not micro's byte vocabulary (a GGUF's), owned; NULL for
    // bytes. bos: the id a text starts with under it, or -1 for none.
    struct Tokenizer *tokenizer;
    int32_t bos;
    int32_t eos; // under its own tokenizer: the token that ends generation, or -1 for none
} Model;

ModelConfig model_config_micro(void);
// Tensor sizes in payload order; returns 0 and fills info[MODEL_N_TENSORS], or -1 on overflow.
int model_tensor_infos(const ModelConfig *c, TensorInfo info[MODEL_N_TENSORS]);
// Total parameters, or 0 if the config's sizes overflow.
size_t model_param_count(const ModelConfig *c);
// Points w at consecutive tensors of base (which holds model_param_count floats).
void model_point_weights(const ModelConfig *c, float *base, ModelWeights *w);
// Checks every field's range and relations; on failure writes one line to err and returns -1.
int model_config_validate(const ModelConfig *c, char *err, size_t errlen);
// model_config_validate and what micro's own models (its files, the trainer, checkpoints) are
// besides: heads as wide as the residual together, a byte vocabulary, none of a GGUF's additions.
int model_config_validate_own(const ModelConfig *c, char *err, size_t errlen);

int model_alloc(Model *m, const ModelConfig *c);
void model_free(Model *m);

#endif
