// `micro train`: options -> TrainOptions -> train_run.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

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
    "  --threads N             worker threads (default 2; results do not depend on it)\n"
    "  --stop-after N          stop after N steps, writing the checkpoint (resume tests)\n"
    "model shape (default micro: 192, 4, 6, 6, 512, 2048):\n"
    "  --dim N  --layers N  --heads N  --kv-heads N  --hidden N  --context N\n"
    "  --help                  this text\n";

// Parses argv[i+1] for option argv[i]; one line on stderr and 0 on a bad or missing value.
static int int_arg(int argc, char **argv, int *i, long lo, long hi, int *out) {
    const char *name = argv[*i];
    if (*i + 1 >= argc) {
        fprintf(stderr, "micro train: %s needs a value\n", name);
        return 0;
    }
    const char *s = argv[++*i];
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "micro train: %s: '%s' is not an integer in %ld..%ld\n", name, s, lo, hi);
        return 0;
    }
    *out = (int)v;
    return 1;
}

static int double_arg(int argc, char **argv, int *i, double lo, double hi, double *out) {
    const char *name = argv[*i];
    if (*i + 1 >= argc) {
        fprintf(stderr, "micro train: %s needs a value\n", name);
        return 0;
    }
    const char *s = argv[++*i];
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "micro train: %s: '%s' is not a number in %g..%g\n", name, s, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

static int string_arg(int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc || argv[*i + 1][0] == '\0') {
        fprintf(stderr, "micro train: %s needs a value\n", argv[*i]);
        return 0;
    }
    *out = argv[++*i];
    return 1;
}

int cmd_train(int argc, char **argv) {
    TrainOptions o;
    train_options_default(&o);
    ModelConfig *c = &o.config;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int ok;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--corpus")) ok = string_arg(argc, argv, &i, &o.corpus);
        else if (!strcmp(a, "--out")) ok = string_arg(argc, argv, &i, &o.out);
        else if (!strcmp(a, "--json")) ok = string_arg(argc, argv, &i, &o.json);
        else if (!strcmp(a, "--checkpoint")) ok = string_arg(argc, argv, &i, &o.checkpoint);
        else if (!strcmp(a, "--resume")) ok = string_arg(argc, argv, &i, &o.resume);
        else if (!strcmp(a, "--checkpoint-every")) ok = int_arg(argc, argv, &i, 0, 1 << 30, &o.checkpoint_every);
        else if (!strcmp(a, "--steps")) ok = int_arg(argc, argv, &i, 1, 1 << 24, &o.steps);
        else if (!strcmp(a, "--batch")) ok = int_arg(argc, argv, &i, 1, 4096, &o.batch);
        else if (!strcmp(a, "--seq")) ok = int_arg(argc, argv, &i, 1, 1 << 16, &o.seq);
        else if (!strcmp(a, "--lr")) ok = double_arg(argc, argv, &i, 1e-8, 1.0, &o.lr);
        else if (!strcmp(a, "--warmup")) ok = int_arg(argc, argv, &i, 0, 1 << 24, &o.warmup);
        else if (!strcmp(a, "--min-lr-frac")) ok = double_arg(argc, argv, &i, 0.0, 1.0, &o.min_lr_frac);
        else if (!strcmp(a, "--weight-decay")) ok = double_arg(argc, argv, &i, 0.0, 10.0, &o.weight_decay);
        else if (!strcmp(a, "--grad-clip")) ok = double_arg(argc, argv, &i, 1e-6, 1e6, &o.grad_clip);
        else if (!strcmp(a, "--seed")) {
            ok = 0;
            if (i + 1 >= argc) {
                fprintf(stderr, "micro train: --seed needs a value\n");
            } else {
                const char *s = argv[++i];
                char *end;
                errno = 0;
                unsigned long long v = strtoull(s, &end, 10);
                if (errno || end == s || *end != '\0' || s[0] == '-')
                    fprintf(stderr, "micro train: --seed: '%s' is not a non-negative integer\n", s);
                else {
                    o.seed = v;
                    ok = 1;
                }
            }
        } else if (!strcmp(a, "--eval-every")) ok = int_arg(argc, argv, &i, 0, 1 << 30, &o.eval_every);
        else if (!strcmp(a, "--val-windows")) ok = int_arg(argc, argv, &i, 1, 4096, &o.val_windows);
        else if (!strcmp(a, "--threads")) ok = int_arg(argc, argv, &i, 1, 256, &o.threads);
        else if (!strcmp(a, "--stop-after")) ok = int_arg(argc, argv, &i, 1, 1 << 24, &o.stop_after);
        else if (!strcmp(a, "--dim")) ok = int_arg(argc, argv, &i, 2, 65536, &c->dim);
        else if (!strcmp(a, "--layers")) ok = int_arg(argc, argv, &i, 1, 1024, &c->n_layers);
        else if (!strcmp(a, "--heads")) ok = int_arg(argc, argv, &i, 1, 4096, &c->n_heads);
        else if (!strcmp(a, "--kv-heads")) ok = int_arg(argc, argv, &i, 1, 4096, &c->n_kv_heads);
        else if (!strcmp(a, "--hidden")) ok = int_arg(argc, argv, &i, 1, 1 << 20, &c->hidden_dim);
        else if (!strcmp(a, "--context")) ok = int_arg(argc, argv, &i, 1, 1 << 20, &c->max_seq_len);
        else {
            fprintf(stderr, "micro train: unknown option '%s' (see micro train --help)\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    // --heads without --kv-heads: keep them equal (micro's shape); head_dim follows dim / heads
    int heads_given = 0, kv_given = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--heads")) heads_given = 1;
        if (!strcmp(argv[i], "--kv-heads")) kv_given = 1;
    }
    if (heads_given && !kv_given) c->n_kv_heads = c->n_heads;
    if (c->n_heads > 0 && c->dim % c->n_heads == 0) c->head_dim = c->dim / c->n_heads;
    if (o.seq > c->max_seq_len) {
        fprintf(stderr, "micro train: --seq %d exceeds the context %d\n", o.seq, c->max_seq_len);
        return 2;
    }
    if (o.warmup > o.steps) o.warmup = o.steps;
    return train_run(&o);
}
