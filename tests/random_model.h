// A micro-shaped model with small random weights and norm gains near 1, as a trained model has
// them: for tests that need a forward pass but not a trained model (deterministic per seed).
#ifndef MICRO_TESTS_RANDOM_MODEL_H
#define MICRO_TESTS_RANDOM_MODEL_H

#include <stdlib.h>

#include "model.h"

static inline void random_model(Model *m, const ModelConfig *c, unsigned seed) {
    if (model_alloc(m, c)) exit(1);
    srand(seed);
    for (size_t i = 0; i < m->n_params; i++) m->params[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.2f;
    const size_t ld = (size_t)c->n_layers * (size_t)c->dim;
    float *norms[] = {m->w.attn_norm, m->w.ffn_norm, m->w.final_norm, m->w.kv_norm};
    size_t counts[] = {ld, ld, (size_t)c->dim, (size_t)c->n_layers * (size_t)c->latent_dim};
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < counts[t]; i++) norms[t][i] += 1.0f;
}

// micro's head shape (head_dim 32, what the kernels specialise for) in a model a tenth of its size:
// two layers of two heads, for tests that run many steps, under the sanitizers too.
static inline ModelConfig small_config(void) {
    ModelConfig c = model_config_micro();
    c.dim = 64, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 2, c.hidden_dim = 128;
    return c;
}

#endif
