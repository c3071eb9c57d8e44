// micro export --llama2c FILE: llama2.c's legacy checkpoint, so llama2.c (and what converts from it) runs micro.
// micro export --gguf FILE: a GGUF llama model for llama.cpp (export_gguf.c).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "export_gguf.h"
#include "model_file.h"

static const char *export_usage =
    "usage: micro export (--llama2c FILE | --gguf FILE) [--model FILE]\n"
    "  Writes llama2.c's legacy checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,\n"
    "  vocab_size, seq_len; a positive vocab_size means a shared classifier), the fp32 weights in\n"
    "  llama2.c's order (which is ours), then the two legacy RoPE tables llama2.c skips.\n"
    "  For micro the file is exactly 7,543,580 bytes.\n"
    "  --gguf writes a GGUF v3 llama model that llama.cpp runs: F32 weights, 256 byte tokens <0x00>..<0xFF>,\n"
    "  BOS (and EOS) = byte 0x01 (docs/gguf.md).\n";

int cmd_export(int argc, char **argv) {
    const char *out = NULL, *gguf = NULL, *model_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(export_usage, stdout);
            return 0;
        }
        if (!cli_value(argc, argv, &i, "--llama2c", &out) && !cli_value(argc, argv, &i, "--gguf", &gguf) &&
            !cli_value(argc, argv, &i, "--model", &model_path))
            cli_unknown(export_usage, argv[i]);
    }
    if (!out == !gguf) return cli_error("export needs --llama2c FILE or --gguf FILE, one of them (see micro export --help)");
    char err[512], path[4096];
    Model m;
    if (model_load(&m, cli_default_path(model_path, "models/micro.bin", path, sizeof path), err, sizeof err))
        return cli_error("%s", err);
    if (gguf) {
        int status = gguf_save(&m, gguf, err, sizeof err);
        model_free(&m);
        if (status) fprintf(stderr, "micro: %s\n", err);
        return status;
    }
    const ModelConfig *c = &m.config;
    int32_t header[7] = {c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, c->max_seq_len};
    size_t half = (size_t)c->head_dim / 2, table = (size_t)c->max_seq_len * half;
    float *cos_t = malloc(table * sizeof(float)), *sin_t = malloc(table * sizeof(float));
    FILE *f = fopen(out, "wb");
    int ok = cos_t && sin_t && f;
    if (ok) {
        for (int pos = 0; pos < c->max_seq_len; pos++)
            for (size_t i = 0; i < half; i++) {
                double angle = pos * pow((double)c->rope_theta, -2.0 * (double)i / c->head_dim);
                cos_t[pos * half + i] = (float)cos(angle);
                sin_t[pos * half + i] = (float)sin(angle);
            }
        ok = fwrite(header, sizeof header, 1, f) == 1 && fwrite(m.params, sizeof(float), m.n_params, f) == m.n_params &&
             fwrite(cos_t, sizeof(float), table, f) == table && fwrite(sin_t, sizeof(float), table, f) == table;
    }
    if (f && fclose(f) != 0) ok = 0;
    free(cos_t);
    free(sin_t);
    model_free(&m);
    if (!ok) return cli_error("%s: could not write the llama2.c checkpoint", out);
    return 0;
}
