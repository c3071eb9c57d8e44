// `micro train`: the trainer's entry points (batched forward/backward in gpt.h, AdamW in adamw.h,
// the data in data.h, checkpoints in checkpoint.h).
#ifndef MICRO_TRAIN_H
#define MICRO_TRAIN_H

#include <stdint.h>

#include "model.h"

typedef struct {
    const char *corpus;      // directory with {en,zh}.{train,val}.txt
    const char *out;         // model file written at the end (model_save)
    const char *checkpoint;  // checkpoint file (NULL: none)
    const char *resume;      // checkpoint to continue from (NULL: start fresh)
    const char *json;        // training record (NULL: none)
    ModelConfig config;      // micro's shape unless overridden (tests)
    int steps, batch, seq, warmup;
    int threads;
    int checkpoint_every;    // 0: only at the end
    int eval_every;          // 0: only at the end
    int val_windows;         // validation windows per language
    double lr, min_lr_frac, weight_decay, grad_clip, beta1, beta2, adam_eps;
    uint64_t seed;
    int stop_after;          // stop (after checkpointing) once this many steps are done; 0: never. For resume tests.
} TrainOptions;

void train_options_default(TrainOptions *o);
// Runs (or resumes) training; returns the process exit status (0, 1 on a runtime failure, 2 on bad input).
int train_run(const TrainOptions *o);
// `micro train [options]` (argv[0] = "train").
int cmd_train(int argc, char **argv);

#endif
