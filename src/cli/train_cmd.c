// `micro train`: options -> TrainOptions -> train_run.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "train.h"

#include "cli.h"
#include "cmd_options.h"
#include "gpt.h"

static const char usage[] =
    "usage: micro train [options]\n"
    "Trains micro (byte-level Llama-style transformer) on data/corpus with AdamW; batched forward and\n"
    "backward with OpenBLAS. Deterministic for a given seed; --resume continues a checkpoint bit-exactly.\n"
    "\n"
    "data and files:\n"
    "  --corpus DIR            {en,zh}.{train,val}.txt (default data/corpus)\n"
    "  --out FILE              trained model (default models/micro.bin)\n"
    "  --json FILE             training record: corpus sha256, hyperparameters, tokens, time, losses\n"
    "  --checkpoint FILE       write a checkpoint here every --checkpoint-every steps and at the end\n"
    "  --checkpoint-every N    (default 200; 0: only at the end)\n"
    "  --resume FILE           continue from a checkpoint (the same options are required)\n"
    "schedule:\n"
    "  --steps N               optimiser steps (default 4000)\n"
    "  --batch B               windows per step (default 4)\n"
    "  --seq T                 tokens per window (default 2048, at most the model's context)\n"
    "  --lr X                  peak learning rate (default 2e-3)\n"
    "  --warmup N              linear warm-up steps (default 100), then cosine decay\n"
    "  --min-lr-frac X         final learning rate as a fraction of the peak (default 0.1)\n"
    "  --weight-decay X        AdamW decay on matrices, embedding included (default 0.1)\n"
    "  --grad-clip X           global gradient-norm clip (default 1.0)\n"
    "  --seed N                initialisation and data order (default 1337)\n"
    "  --eval-every N          validation loss every N steps (default 250; 0: only at the end)\n"
    "  --val-windows N         validation windows per language (default 8)\n"
    "  --threads N             worker threads, 1..256 (default 2; at most the online cores are used;\n"
    "                          results do not depend on it)\n"
    "  --stop-after N          stop after N steps, writing the checkpoint (resume tests)\n"
    "model shape (default micro: 192, 4, 6, 6, 512, 2048):\n"
    "  --dim N  --layers N  --heads N  --kv-heads N  --hidden N  --context N\n"
    "  --latent-dim N          multi-head latent attention (DeepSeek-V2): each token caches a latent of N\n"
    "                          numbers, every head's key and value made from it (default 0: none)\n"
    "  --rope-dim N            with --latent-dim: the RoPE key shared by the heads, N numbers, even\n"
    "                          (default 16); each head's query gets N more numbers to match it\n"
    "  --help                  this text\n";

// Every bad argument is refused here, before the corpus is read or a step runs: exit status 2.
int train_parse(int argc, char **argv, TrainOptions *o, char *err, size_t errlen) {
    train_options_default(o);
    ModelConfig *c = &o->config;
    int heads_given = 0, kv_given = 0, rope_given = 0;
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--corpus")) bad = opts_path(&p, &o->corpus);
        else if (opts_is(&p, "--out")) bad = opts_path(&p, &o->out);
        else if (opts_is(&p, "--json")) bad = opts_path(&p, &o->json);
        else if (opts_is(&p, "--checkpoint")) bad = opts_path(&p, &o->checkpoint);
        else if (opts_is(&p, "--resume")) bad = opts_path(&p, &o->resume);
        else if (opts_is(&p, "--checkpoint-every")) bad = opts_int(&p, 0, 1 << 30, &o->checkpoint_every);
        else if (opts_is(&p, "--steps")) bad = opts_int(&p, 1, CKPT_MAX_STEPS, &o->steps);
        else if (opts_is(&p, "--batch")) bad = opts_int(&p, 1, 4096, &o->batch);
        else if (opts_is(&p, "--seq")) bad = opts_int(&p, 1, 1 << 16, &o->seq);
        else if (opts_is(&p, "--lr")) bad = opts_double(&p, 1e-8, 1.0, &o->lr);
        else if (opts_is(&p, "--warmup")) bad = opts_int(&p, 0, 1 << 24, &o->warmup);
        else if (opts_is(&p, "--min-lr-frac")) bad = opts_double(&p, 0.0, 1.0, &o->min_lr_frac);
        else if (opts_is(&p, "--weight-decay")) bad = opts_double(&p, 0.0, 10.0, &o->weight_decay);
        else if (opts_is(&p, "--grad-clip")) bad = opts_double(&p, 1e-6, 1e6, &o->grad_clip);
        else if (opts_is(&p, "--seed")) {
            unsigned long long seed;
            bad = opts_u64(&p, &seed);
            o->seed = seed;
        } else if (opts_is(&p, "--eval-every")) bad = opts_int(&p, 0, 1 << 30, &o->eval_every);
        else if (opts_is(&p, "--val-windows")) bad = opts_int(&p, 1, 4096, &o->val_windows);
        else if (opts_is(&p, "--threads")) bad = opts_int(&p, 1, 256, &o->threads);
        else if (opts_is(&p, "--stop-after")) bad = opts_int(&p, 1, 1 << 24, &o->stop_after);
        else if (opts_is(&p, "--dim")) bad = opts_int(&p, 2, 65536, &c->dim);
        else if (opts_is(&p, "--layers")) bad = opts_int(&p, 1, 1024, &c->n_layers);
        else if (opts_is(&p, "--heads")) bad = opts_int(&p, 1, 4096, &c->n_heads), heads_given = 1;
        else if (opts_is(&p, "--kv-heads")) bad = opts_int(&p, 1, 4096, &c->n_kv_heads), kv_given = 1;
        else if (opts_is(&p, "--hidden")) bad = opts_int(&p, 1, 1 << 20, &c->hidden_dim);
        else if (opts_is(&p, "--context")) bad = opts_int(&p, 1, 1 << 20, &c->max_seq_len);
        else if (opts_is(&p, "--latent-dim")) bad = opts_int(&p, 1, 65536, &c->latent_dim);
        else if (opts_is(&p, "--rope-dim")) bad = opts_int(&p, 2, 4096, &c->rope_dim), rope_given = 1;
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    // --heads without --kv-heads: keep them equal (micro's shape); head_dim follows dim / heads
    if (heads_given && !kv_given) c->n_kv_heads = c->n_heads;
    if (rope_given && c->latent_dim == 0) return opts_fail(&p, "--rope-dim is for latent attention: give --latent-dim");
    if (c->latent_dim > 0) { // the latent serves every head: one key/value "head"
        if (kv_given) return opts_fail(&p, "--kv-heads and --latent-dim: latent attention caches one latent for all heads");
        c->n_kv_heads = 1;
        if (!rope_given) c->rope_dim = 16;
    }
    if (c->n_heads > 0 && c->dim % c->n_heads == 0) c->head_dim = c->dim / c->n_heads;
    if (model_config_validate_own(c, err, errlen)) return OPTS_ERROR;
    if (o->seq > c->max_seq_len) return opts_fail(&p, "--seq %d exceeds the context %d", o->seq, c->max_seq_len);
    if ((long long)o->batch * o->seq > TRAIN_MAX_STEP_TOKENS)
        return opts_fail(&p, "--batch %d x --seq %d is %lld tokens per step, more than the %d the trainer takes", o->batch,
                         o->seq, (long long)o->batch * o->seq, TRAIN_MAX_STEP_TOKENS);
    if (o->warmup > o->steps) o->warmup = o->steps;
    return OPTS_RUN;
}

int cmd_train(int argc, char **argv) {
    TrainOptions o;
    char err[512];
    int done = cli_after_parse(train_parse(argc, argv, &o, err, sizeof err), err, usage);
    if (done >= 0) return done;
    // No output may be another output or a file the run reads: the corpus, and the checkpoint it
    // resumes from for the model and the record (the checkpoint itself is rewritten as it goes on).
    const char *dir = o.corpus ? o.corpus : "data/corpus";
    static const char *const split[4] = {"en.train.txt", "zh.train.txt", "en.val.txt", "zh.val.txt"};
    char corpus[4][4200];
    CliFile inputs[5] = {{"--resume", o.resume}};
    for (int i = 0; i < 4; i++) {
        snprintf(corpus[i], sizeof corpus[i], "%s/%s", dir, split[i]);
        inputs[1 + i] = (CliFile){"the corpus", corpus[i]};
    }
    const CliFile outputs[3] = {{"--out", o.out}, {"--json", o.json}, {"--checkpoint", o.checkpoint}};
    if (cli_check_distinct(outputs, 2, inputs, 5, err, sizeof err) ||
        cli_check_distinct(outputs, 3, inputs + 1, 4, err, sizeof err))
        return cli_error("%s", err);
    return train_run(&o);
}
