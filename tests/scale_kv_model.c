// Test helper: writes a copy of a model with its key and value projections multiplied by a factor
// (1e30 in the tests): every weight finite, so the loader accepts it, yet the forward pass
// overflows float. usage: scale_kv_model IN OUT FACTOR
#include <stdio.h>
#include <stdlib.h>

#include "model_file.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: scale_kv_model IN OUT FACTOR\n");
        return 2;
    }
    char err[512];
    Model m;
    if (model_load(&m, argv[1], err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const ModelConfig *c = &m.config;
    float factor = strtof(argv[3], NULL);
    size_t n = (size_t)c->n_layers * c->n_kv_heads * c->head_dim * c->dim;
    for (size_t i = 0; i < n; i++) {
        m.w.wk[i] *= factor;
        m.w.wv[i] *= factor;
    }
    int rc = model_save(&m, argv[2], err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    model_free(&m);
    return rc ? 1 : 0;
}
