// micro's configuration, tensor layout and the checks every config must pass.
#include "model.h"
#include "tokenizer.h"

#include "calloc_lines.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ModelConfig model_config_micro(void) {
    return (ModelConfig){
        .dim = 192, .n_layers = 4, .n_heads = 6, .n_kv_heads = 6, .head_dim = 32,
        .hidden_dim = 512, .vocab_size = 256, .max_seq_len = 2048,
        .rope_theta = 10000.0f, .norm_eps = 1e-5f,
    };
}

// a*b into *out; 0 on overflow.
static int mul(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

// Latent attention's tensors are empty in a multi-head or grouped-query model, and its wk and wv
// empty under latent attention, so either file holds exactly its own tensors in one order.
int model_tensor_infos(const ModelConfig *c, TensorInfo info[MODEL_N_TENSORS]) {
    size_t L = (size_t)c->n_layers, d = (size_t)c->dim, hid = (size_t)c->hidden_dim;
    const int mla = c->latent_dim > 0;
    size_t qd, qkd, kvd, qkdd, qdd, kvdd, hd2, ld, n, lat, latd, ropd, uk;
    if (!mul((size_t)c->n_heads, (size_t)c->head_dim, &qd) ||
        !mul((size_t)c->n_heads, (size_t)c->head_dim + (size_t)c->rope_dim, &qkd) ||
        !mul(mla ? 0 : (size_t)c->n_kv_heads, (size_t)c->head_dim, &kvd) || !mul(qd, d, &qdd) ||
        !mul(qkd, d, &qkdd) || !mul(kvd, d, &kvdd) || !mul(hid, d, &hd2) || !mul(L, d, &ld) ||
        !mul((size_t)c->vocab_size, d, &n) || !mul(L, (size_t)c->latent_dim, &lat) || !mul(lat, d, &latd) ||
        !mul(L * (size_t)c->rope_dim, d, &ropd) || !mul(L * qd, (size_t)c->latent_dim, &uk))
        return -1;
    size_t wq, wk, wo, w13, bq, bk, qkn;
    if (!mul(L, qkdd, &wq) || !mul(L, kvdd, &wk) || !mul(L, qdd, &wo) || !mul(L, hd2, &w13) || !mul(L, qd, &bq) ||
        !mul(L, kvd, &bk) || !mul(L, (size_t)c->head_dim, &qkn))
        return -1;
    if (!c->qkv_bias) bq = bk = 0;
    if (!c->qk_norm) qkn = 0;
    TensorInfo t[MODEL_N_TENSORS] = {
        {"token_embedding", n, 1}, {"attn_norm", ld, 0}, {"wq", wq, 1},     {"wk", wk, 1},
        {"wv", wk, 1},             {"w_dkv", latd, 1},   {"kv_norm", lat, 0}, {"w_kr", ropd, 1},
        {"w_uk", uk, 1},           {"w_uv", uk, 1},      {"wo", wo, 1},     {"ffn_norm", ld, 0},
        {"w1", w13, 1},            {"w2", w13, 1},       {"w3", w13, 1},    {"final_norm", d, 0},
        {"bq", bq, 0},             {"bk", bk, 0},        {"bv", bk, 0},     {"q_norm", qkn, 0},
        {"k_norm", qkn, 0},        {"output", c->separate_output ? n : 0, 1},
        {"rope_freqs", c->rope_factors ? (size_t)c->head_dim / 2 : 0, 0},
    };
    memcpy(info, t, sizeof t);
    return 0;
}

size_t model_param_count(const ModelConfig *c) {
    TensorInfo info[MODEL_N_TENSORS];
    if (model_tensor_infos(c, info)) return 0;
    size_t total = 0;
    for (int i = 0; i < MODEL_N_TENSORS; i++)
        if (__builtin_add_overflow(total, info[i].count, &total)) return 0;
    return total;
}

void model_point_weights(const ModelConfig *c, float *base, ModelWeights *w) {
    TensorInfo info[MODEL_N_TENSORS];
    model_tensor_infos(c, info);
    float **slots[MODEL_N_TENSORS] = {&w->token_embedding, &w->attn_norm, &w->wq,   &w->wk,
                                      &w->wv,              &w->w_dkv,     &w->kv_norm, &w->w_kr,
                                      &w->w_uk,            &w->w_uv,      &w->wo,   &w->ffn_norm,
                                      &w->w1,              &w->w2,        &w->w3,   &w->final_norm,
                                      &w->bq,              &w->bk,        &w->bv,   &w->q_norm,
                                      &w->k_norm,          &w->output,    &w->rope_freqs};
    for (int i = 0; i < MODEL_N_TENSORS; i++) {
        *slots[i] = base;
        base += info[i].count;
    }
}

// Generous bounds: they exist to refuse nonsense before any size is computed, not to limit research.
#define CHECK_RANGE(field, lo, hi)                                                           \
    if (c->field < (lo) || c->field > (hi)) {                                                \
        snprintf(err, errlen, #field " = %d is out of range (%d..%d)", c->field, (lo), (hi)); \
        return -1;                                                                           \
    }

// Every field in its range; then the relations between them (config_relations).
static int config_ranges(const ModelConfig *c, char *err, size_t errlen) {
    CHECK_RANGE(dim, 1, 65536);
    CHECK_RANGE(n_layers, 1, 1024);
    CHECK_RANGE(n_heads, 1, 4096);
    CHECK_RANGE(n_kv_heads, 1, 4096);
    CHECK_RANGE(head_dim, 2, MICRO_MAX_WIDTH);
    CHECK_RANGE(hidden_dim, 1, 1 << 20);
    // micro's own models read bytes (256 tokens); a GGUF's vocabulary is its tokenizer's.
    CHECK_RANGE(vocab_size, 256, 1 << 20);
    CHECK_RANGE(max_seq_len, 1, 1 << 20);
    CHECK_RANGE(latent_dim, 0, MICRO_MAX_WIDTH);
    CHECK_RANGE(rope_dim, 0, MICRO_MAX_WIDTH);
    return 0;
}

static int config_relations(const ModelConfig *c, char *err, size_t errlen) {
    // A GGUF's heads may together be wider than the residual (Qwen3: 16 of 128 beside 1024).
    if ((long long)c->n_heads * c->head_dim > 1 << 20) {
        snprintf(err, errlen, "n_heads %d x head_dim %d is beyond %d", c->n_heads, c->head_dim, 1 << 20);
        return -1;
    }
    if (c->latent_dim > 0 && c->n_kv_heads != 1) {
        snprintf(err, errlen, "n_kv_heads %d under latent attention: must be 1 (the latent serves every head)",
                 c->n_kv_heads);
        return -1;
    }
    if (c->latent_dim > 0 ? c->rope_dim < 2 || c->rope_dim % 2 != 0 : c->rope_dim != 0) {
        snprintf(err, errlen, "rope_dim %d: latent attention needs an even rope_dim of at least 2, other models 0",
                 c->rope_dim);
        return -1;
    }
    if (c->n_heads % c->n_kv_heads != 0) {
        snprintf(err, errlen, "n_kv_heads %d does not divide n_heads %d", c->n_kv_heads, c->n_heads);
        return -1;
    }
    if (c->head_dim % 2 != 0) {
        snprintf(err, errlen, "head_dim %d is odd (RoPE rotates pairs)", c->head_dim);
        return -1;
    }
    if (!isfinite(c->rope_theta) || c->rope_theta <= 1.0f) {
        snprintf(err, errlen, "rope_theta %g is not a finite number above 1", (double)c->rope_theta);
        return -1;
    }
    if (!isfinite(c->norm_eps) || c->norm_eps <= 0.0f || c->norm_eps >= 1.0f) {
        snprintf(err, errlen, "norm_eps %g is not in (0, 1)", (double)c->norm_eps);
        return -1;
    }
    // Each field is in range, but their products may still be absurd (or overflow a narrower size_t).
    size_t n = model_param_count(c);
    if (n == 0 || n > MODEL_MAX_PARAMS) {
        snprintf(err, errlen, "the dimensions multiply to %s parameters, beyond the %llu this loader accepts",
                 n ? "too many" : "an overflowing number of", (unsigned long long)MODEL_MAX_PARAMS);
        return -1;
    }
    return 0;
}

int model_config_validate(const ModelConfig *c, char *err, size_t errlen) {
    return config_ranges(c, err, errlen) || config_relations(c, err, errlen) ? -1 : 0;
}

int model_config_validate_own(const ModelConfig *c, char *err, size_t errlen) {
    if (config_ranges(c, err, errlen)) return -1;
    if (c->dim % c->n_heads != 0) {
        snprintf(err, errlen, "dim %d is not divisible by n_heads %d", c->dim, c->n_heads);
        return -1;
    }
    if (c->n_heads * c->head_dim != c->dim) {
        snprintf(err, errlen, "n_heads %d x head_dim %d does not equal dim %d", c->n_heads, c->head_dim, c->dim);
        return -1;
    }
    if (config_relations(c, err, errlen)) return -1;
    if (c->vocab_size != 256) {
        snprintf(err, errlen, "vocab_size = %d: micro's own models read bytes (256 tokens)", c->vocab_size);
        return -1;
    }
    if (c->rope_halves || c->qkv_bias || c->qk_norm || c->separate_output || c->rope_factors) {
        snprintf(err, errlen, "a GGUF architecture's parts (biases, q/k norms, a separate classifier, NeoX or scaled RoPE) "
                              "are not in micro's own models");
        return -1;
    }
    return 0;
}

int model_alloc(Model *m, const ModelConfig *c) {
    memset(m, 0, sizeof *m);
    size_t n = model_param_count(c);
    if (n == 0 || n > SIZE_MAX / sizeof(float)) return -1;
    m->params = calloc_lines(n, sizeof(float));
    if (!m->params) return -1;
    m->config = *c;
    m->n_params = n;
    m->bos = m->eos = MICRO_BOS; // micro's bytes until a GGUF's tokenizer says otherwise
    model_point_weights(c, m->params, &m->w);
    return 0;
}

void model_free(Model *m) {
    free(m->params);
    tokenizer_free(m->tokenizer);
    memset(m, 0, sizeof *m);
}
