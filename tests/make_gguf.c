// Writes a small GGUF model of one of the architectures micro reads, seeded random weights in micro's
// byte vocabulary, through micro's own GGUF writer: for tests and the per-instruction-set checks
// that need a qwen2, qwen3 or Llama 3 model without the npm tokenizers (scripts/gguf-check writes
// the same architectures with real vocabularies for llama.cpp).
// usage: make_gguf OUT ARCH [SEED]     ARCH: llama3 | qwen2 | qwen3
//   llama3  2 heads of 64 over one key/value head, rope_freqs, a classifier of its own
//   qwen2   2 heads of 64 over one, q/k/v biases, NeoX RoPE
//   qwen3   2 heads of 128 (wider than the residual of 128 shares), q/k norms, NeoX RoPE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_gguf.h"
#include "random_model.h"

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: make_gguf OUT ARCH [SEED]   (ARCH: llama3, qwen2, qwen3)\n");
        return 2;
    }
    ModelConfig c = model_config_micro();
    c.dim = 128, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 64, c.hidden_dim = 256;
    c.max_seq_len = 2048, c.rope_theta = 1000000.0f, c.norm_eps = 1e-6f;
    if (!strcmp(argv[2], "llama3")) c.separate_output = 1, c.rope_factors = 1, c.rope_theta = 500000.0f, c.norm_eps = 1e-5f;
    else if (!strcmp(argv[2], "qwen2")) c.rope_halves = 1, c.qkv_bias = 1;
    else if (!strcmp(argv[2], "qwen3")) c.rope_halves = 1, c.qk_norm = 1, c.head_dim = 128;
    else {
        fprintf(stderr, "make_gguf: unknown architecture '%s' (llama3, qwen2, qwen3)\n", argv[2]);
        return 2;
    }
    const unsigned seed = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 1;
    Model m;
    random_model(&m, &c, seed);
    for (int i = 0; c.qk_norm && i < c.n_layers * c.head_dim; i++) m.w.q_norm[i] += 1.0f, m.w.k_norm[i] += 1.0f;
    // Llama 3's factors: 1 for the fast pairs, rising to 8 for the slowest (as its scaling has them).
    for (int i = 0; c.rope_factors && i < c.head_dim / 2; i++) m.w.rope_freqs[i] = 1.0f + 7.0f * (float)i / (float)(c.head_dim / 2 - 1);
    char err[256];
    if (gguf_save(&m, argv[1], err, sizeof err)) {
        fprintf(stderr, "make_gguf: %s\n", err);
        model_free(&m);
        return 1;
    }
    model_free(&m);
    return 0;
}
