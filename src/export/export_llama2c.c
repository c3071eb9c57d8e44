#include "export_llama2c.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "rope.h"
#include "safe_file.h"

// Writes the whole checkpoint to f; nonzero only when out of memory (stream errors are the
// stream's: safe_write reports them). Through safe_write, so a failed write never leaves a
// truncated file under the real name.
static int write_llama2c(FILE *f, void *ctx, char *why, size_t whylen) {
    const Model *m = ctx;
    const ModelConfig *c = &m->config;
    int32_t header[7] = {c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, c->max_seq_len};
    size_t half = (size_t)c->head_dim / 2, table = (size_t)c->max_seq_len * half;
    float *cos_t = malloc(table * sizeof(float)), *sin_t = malloc(table * sizeof(float));
    int ok = cos_t && sin_t;
    if (ok) {
        rope_table(cos_t, sin_t, c->max_seq_len, c->head_dim, c->rope_theta, NULL);
        // Stops at the first short write; the stream's error flag carries the reason.
        (void)(fwrite(header, sizeof header, 1, f) == 1 && fwrite(m->params, sizeof(float), m->n_params, f) == m->n_params &&
               fwrite(cos_t, sizeof(float), table, f) == table && fwrite(sin_t, sizeof(float), table, f) == table);
    }
    free(cos_t);
    free(sin_t);
    if (!ok) snprintf(why, whylen, "out of memory for the RoPE tables");
    return ok ? 0 : -1;
}

int llama2c_save(const Model *m, const char *path, char *err, size_t errlen) {
    if (m->config.latent_dim > 0) {
        snprintf(err, errlen, "llama2.c's checkpoint has no latent attention");
        return -1;
    }
    return safe_write(path, write_llama2c, (void *)m, err, errlen);
}
