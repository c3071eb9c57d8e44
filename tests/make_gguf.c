// Writes a small GGUF model of one of the architectures micro reads, seeded random weights, through
// micro's own GGUF writer: for tests and the per-instruction-set checks that need a qwen2, qwen3 or
// Llama 3 model without the npm tokenizers (scripts/gguf-check writes the same architectures with
// real vocabularies for llama.cpp).
// usage: make_gguf OUT ARCH [SEED [VOCAB]]     ARCH: llama3 | qwen2 | qwen3
//   llama3  2 heads of 64 over one key/value head, rope_freqs, a classifier of its own
//   qwen2   2 heads of 64 over one, q/k/v biases, NeoX RoPE
//   qwen3   2 heads of 128 (wider than the residual of 128 shares), q/k norms, NeoX RoPE
//   VOCAB   0 (default): micro's 256 bytes. Else a byte-level BPE vocabulary of its own with that many
//           rows: GPT-2's 256 byte stand-ins, a few English merges, control tokens up to VOCAB (a
//           BOS added for llama3, none for the qwens, as their real vocabularies do).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_gguf.h"
#include "random_model.h"

// GPT-2's stand-in of byte b as UTF-8 into out: the printable bytes themselves, the other 68 the code
// points 256.. in byte order (docs/models.md).
static void byte_stand_in(int b, char out[4]) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174, cp = b;
    if (!printable) {
        cp = 256;
        for (int i = 0; i < b; i++) cp += !((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174);
    }
    if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
    else out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
}

// Merges in rank order, each of two tokens made before it ("Ġ" is the space's stand-in).
static const char *const merges[] = {"Ġ t", "h e", "Ġt he", "i n", "e r", "a n", "o n", "r e", "Ġ a", "e n",
                                     "a t", "o r", "Ġ s", "e s", "Ġ o", "i s", "i t", "Ġ c", "Ġ w", "a l"};
#define N_MERGES (int)(sizeof merges / sizeof merges[0])

// The vocabulary of n tokens (n >= 256 + N_MERGES + 2): bytes, merges, then control tokens, of which
// the first two are BOS and EOS.
static int write_with_vocab(const Model *m, int n, int bos, const char *path) {
    char **tok = calloc((size_t)n, sizeof *tok);
    int32_t *types = malloc(sizeof *types * (size_t)n);
    if (!tok || !types) return 1;
    int k = 0;
    for (int b = 0; b < 256; b++, k++) tok[k] = malloc(4), byte_stand_in(b, tok[k]), types[k] = 1;
    for (int i = 0; i < N_MERGES; i++, k++) {
        tok[k] = strdup(merges[i]);
        char *sp = strchr(tok[k], ' ');
        memmove(sp, sp + 1, strlen(sp)); // "a b" -> "ab"
        types[k] = 1;
    }
    const int first_control = k;
    for (; k < n; k++) {
        tok[k] = malloc(32);
        const char *name = k == first_control       ? "<|begin_of_text|>"
                           : k == first_control + 1 ? "<|endoftext|>"
                                                    : "<|extra_%d|>";
        snprintf(tok[k], 32, name, k);
        types[k] = 3; // control: never read in a text
    }
    GgufBpeVocab v = {(const char *const *)tok, types, n, merges, N_MERGES, "gpt2", bos ? first_control : -1,
                      first_control + 1};
    char err[256];
    int status = gguf_save_vocab(m, &v, path, err, sizeof err);
    if (status) fprintf(stderr, "make_gguf: %s\n", err);
    for (int i = 0; i < n; i++) free(tok[i]);
    free(tok), free(types);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: make_gguf OUT ARCH [SEED [VOCAB]]   (ARCH: llama3, qwen2, qwen3)\n");
        return 2;
    }
    ModelConfig c = model_config_micro();
    c.dim = 128, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 64, c.hidden_dim = 256;
    c.max_seq_len = 2048, c.rope_theta = 1000000.0f, c.norm_eps = 1e-6f;
    if (!strcmp(argv[2], "llama3"))
        c.separate_output = 1, c.rope_factors = 1, c.rope_theta = 500000.0f, c.norm_eps = 1e-5f;
    else if (!strcmp(argv[2], "qwen2")) c.rope_halves = 1, c.qkv_bias = 1;
    else if (!strcmp(argv[2], "qwen3")) c.rope_halves = 1, c.qk_norm = 1, c.head_dim = 128;
    else {
        fprintf(stderr, "make_gguf: unknown architecture '%s' (llama3, qwen2, qwen3)\n", argv[2]);
        return 2;
    }
    const unsigned seed = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 1;
    const long vocab = argc > 4 ? strtol(argv[4], NULL, 10) : 0;
    if (vocab != 0 && (vocab < 256 + N_MERGES + 2 || vocab > (1 << 24))) {
        fprintf(stderr, "make_gguf: VOCAB %ld: 0, or %d..%d\n", vocab, 256 + N_MERGES + 2, 1 << 24);
        return 2;
    }
    if (vocab) c.vocab_size = (int)vocab;
    Model m;
    random_model(&m, &c, seed);
    for (int i = 0; c.qk_norm && i < c.n_layers * c.head_dim; i++) m.w.q_norm[i] += 1.0f, m.w.k_norm[i] += 1.0f;
    // Llama 3's factors: 1 for the fast pairs, rising to 8 for the slowest (as its scaling has them).
    for (int i = 0; c.rope_factors && i < c.head_dim / 2; i++)
        m.w.rope_freqs[i] = 1.0f + 7.0f * (float)i / (float)(c.head_dim / 2 - 1);
    int status;
    char err[256];
    if (vocab) status = write_with_vocab(&m, (int)vocab, !strcmp(argv[2], "llama3"), argv[1]);
    else if ((status = gguf_save(&m, argv[1], err, sizeof err)) != 0) fprintf(stderr, "make_gguf: %s\n", err);
    model_free(&m);
    return status ? 1 : 0;
}
