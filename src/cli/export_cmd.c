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
#include "export_llama2c.h"
#include "model_file.h"
#include "msgtext.h"
#include "safe_file.h"

static const char *export_usage =
    "usage: micro export (--llama2c FILE | --gguf FILE) [--model FILE]\n"
    "  Writes llama2.c's legacy checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,\n"
    "  vocab_size, seq_len; a positive vocab_size means a shared classifier), the fp32 weights in\n"
    "  llama2.c's order (which is ours), then the two legacy RoPE tables llama2.c skips.\n"
    "  For micro the file is exactly 7,543,580 bytes.\n"
    "  --gguf writes a GGUF v3 model that llama.cpp runs (llama; deepseek2, every layer dense, for latent\n"
    "  attention): F32 weights, 256 byte tokens <0x00>..<0xFF>,\n"
    "  BOS (and EOS) = byte 0x01 (docs/gguf.md).\n";

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
    const char *model_path = cli_default_path(o.model_path, "models/micro.bin", path, sizeof path);
    const CliFile out = {o.llama2c ? "--llama2c" : "--gguf", o.llama2c ? o.llama2c : o.gguf},
                  model = {"--model", model_path};
    if (safe_check_output(out.path, err, sizeof err) || cli_check_distinct(&out, 1, &model, 1, err, sizeof err))
        return cli_error("%s", err); // before any work
    Model m;
    if (model_load(&m, model_path, err, sizeof err)) return cli_error("%s", err);
    if (cli_byte_vocabulary(&m, model_path, err, sizeof err)) { // the files it writes hold byte vocabularies
        model_free(&m);
        return cli_error("%s", err);
    }
    if (o.llama2c && m.config.latent_dim > 0) { // bad input, before anything is written
        char shown[MSG_TEXT];
        const int latent = m.config.latent_dim;
        model_free(&m);
        return cli_error("--llama2c: llama2.c's checkpoint has no latent attention (%s has a latent of %d)",
                         msg_text(model_path, shown, sizeof shown), latent);
    }
    int status = 0;
    if (o.llama2c ? llama2c_save(&m, o.llama2c, err, sizeof err) : gguf_save(&m, o.gguf, err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        status = 1;
    }
    model_free(&m);
    return status;
}
