// micro export --llama2c FILE: llama2.c's legacy checkpoint, so llama2.c (and what converts from it) runs micro.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_options.h"
#include "commands.h"
#include "export_gguf.h"
#include "model_file.h"
#include "safe_file.h"

static const char *export_usage =
    "usage: micro export (--llama2c FILE | --gguf FILE) [--model FILE]\n"
    "  Writes llama2.c's legacy checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,\n"
    "  vocab_size, seq_len; a positive vocab_size means a shared classifier), the fp32 weights in\n"
    "  llama2.c's order (which is ours), then the two legacy RoPE tables llama2.c skips.\n"
    "  For micro the file is exactly 7,543,580 bytes.\n"
    "  --gguf writes a GGUF v3 llama model that llama.cpp runs: F32 weights, 256 byte tokens <0x00>..<0xFF>,\n"
    "  BOS (and EOS) = byte 0x01 (docs/gguf.md).\n";

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
        for (int pos = 0; pos < c->max_seq_len; pos++)
            for (size_t i = 0; i < half; i++) {
                double angle = pos * pow((double)c->rope_theta, -2.0 * (double)i / c->head_dim);
                cos_t[pos * half + i] = (float)cos(angle);
                sin_t[pos * half + i] = (float)sin(angle);
            }
        // Stops at the first short write; the stream's error flag carries the reason.
        (void)(fwrite(header, sizeof header, 1, f) == 1 && fwrite(m->params, sizeof(float), m->n_params, f) == m->n_params &&
               fwrite(cos_t, sizeof(float), table, f) == table && fwrite(sin_t, sizeof(float), table, f) == table);
    }
    free(cos_t);
    free(sin_t);
    if (!ok) snprintf(why, whylen, "out of memory for the RoPE tables");
    return ok ? 0 : -1;
}

int export_parse(int argc, char **argv, ExportOptions *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--llama2c")) bad = opts_path(&p, &o->llama2c);
        else if (opts_is(&p, "--gguf")) bad = opts_path(&p, &o->gguf);
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (!o->llama2c == !o->gguf)
        return opts_fail(&p, "export needs --llama2c FILE or --gguf FILE, one of them (see micro export --help)");
    return OPTS_RUN;
}

int cmd_export(int argc, char **argv) {
    ExportOptions o;
    char err[512], path[4096];
    int done = cli_after_parse(export_parse(argc, argv, &o, err, sizeof err), err, export_usage);
    if (done >= 0) return done;
    if (safe_check_output(o.llama2c ? o.llama2c : o.gguf, err, sizeof err)) return cli_error("%s", err); // before any work
    Model m;
    if (model_load(&m, cli_default_path(o.model_path, "models/micro.bin", path, sizeof path), err, sizeof err))
        return cli_error("%s", err);
    int status = 0;
    if (o.llama2c ? safe_write(o.llama2c, write_llama2c, &m, err, sizeof err) : gguf_save(&m, o.gguf, err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        status = 1;
    }
    model_free(&m);
    return status;
}
