// Writes a small model of any shape with seeded random weights, through the loader's own writer, so
// that tests can run the CLI on shapes micro.bin does not have (head_dim 2, a short context, ...).
// usage: make_model OUT DIM LAYERS HEADS KV_HEADS HIDDEN CONTEXT [SEED [LATENT ROPE]]
// (LATENT and ROPE: a latent-attention model, KV_HEADS 1)
#include <stdio.h>
#include <stdlib.h>

#include "model_file.h"

static int arg(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || end == s || v < 0 || v > 1 << 20) {
        fprintf(stderr, "make_model: bad number '%s'\n", s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv) {
    if (argc < 8 || argc > 11 || argc == 10) {
        fprintf(stderr, "usage: make_model OUT DIM LAYERS HEADS KV_HEADS HIDDEN CONTEXT [SEED [LATENT ROPE]]\n");
        return 2;
    }
    ModelConfig c = model_config_micro();
    c.dim = arg(argv[2]), c.n_layers = arg(argv[3]), c.n_heads = arg(argv[4]), c.n_kv_heads = arg(argv[5]);
    c.hidden_dim = arg(argv[6]), c.max_seq_len = arg(argv[7]);
    c.head_dim = c.n_heads ? c.dim / c.n_heads : 0;
    unsigned long long s = argc > 8 ? (unsigned long long)arg(argv[8]) + 1 : 1;
    if (argc > 10) c.latent_dim = arg(argv[9]), c.rope_dim = arg(argv[10]);
    char err[512];
    if (model_config_validate(&c, err, sizeof err)) {
        fprintf(stderr, "make_model: %s\n", err);
        return 2;
    }
    Model m;
    if (model_alloc(&m, &c)) {
        fprintf(stderr, "make_model: out of memory\n");
        return 1;
    }
    // Small weights (uniform in +-0.1) and unit norm gains: the shape of a freshly initialised model.
    for (size_t i = 0; i < m.n_params; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        m.params[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 0.2f;
    }
    TensorInfo info[MODEL_N_TENSORS];
    model_tensor_infos(&c, info);
    float *p = m.params;
    for (int t = 0; t < MODEL_N_TENSORS; t++) {
        if (!info[t].is_matrix)
            for (size_t i = 0; i < info[t].count; i++) p[i] = 1.0f;
        p += info[t].count;
    }
    int status = model_save(&m, argv[1], err, sizeof err) ? 1 : 0;
    if (status) fprintf(stderr, "make_model: %s\n", err);
    model_free(&m);
    return status;
}
