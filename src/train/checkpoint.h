// Training checkpoints: everything a run needs to continue bit-exactly (parameters, AdamW moments,
// step, data RNG, the loss history), little-endian, closed by a 64-bit FNV-1a checksum.
#ifndef MICRO_TRAIN_CHECKPOINT_H
#define MICRO_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define CKPT_MAGIC "MICROCKP"
#define CKPT_VERSION 2u // 2 added latent_dim and rope_dim to RunIdent; version 1 still loads (both 0)
#define CKPT_MAX_STEPS (1 << 24) // --steps' limit: a checkpoint's train-loss history holds at most this many

// What must match for a resume to continue the same run (all 8-byte fields: no padding).
typedef struct {
    int64_t dim, n_layers, n_heads, n_kv_heads, head_dim, hidden_dim, vocab_size, max_seq_len;
    double rope_theta, norm_eps;
    int64_t batch, seq, steps, warmup, val_windows;
    double lr, min_lr_frac, weight_decay, grad_clip, beta1, beta2, adam_eps;
    uint64_t seed;
    char corpus_sha256[72];
    int64_t latent_dim, rope_dim; // version 2 on
} RunIdent;

typedef struct {
    int64_t step;          // steps completed
    uint64_t rng_state;    // the data loader's RNG after `step` batches
    uint64_t tokens_seen;
    double wall_seconds;   // training time so far, over all sessions
    int64_t n_params;
    int64_t n_val;         // validation records
    char blas_core[32];    // OpenBLAS kernel family (results depend on it)
} RunProgress;

typedef struct {
    int64_t step;
    double en, zh;
} ValRecord;

// Everything in one place; arrays are caller-owned on save, malloc'ed by checkpoint_load.
typedef struct {
    RunIdent id;
    RunProgress pr;
    float *params, *m, *v; // [n_params] each
    float *train_loss;     // [id.steps], the first pr.step filled
    ValRecord *val;        // [pr.n_val]
} Checkpoint;

int checkpoint_save(const char *path, const Checkpoint *c, char *err, size_t errlen);
// Reads and verifies path as the model loader does a model: the header first (magic, version, the
// run's model and every count against its limit), the exact length it gives against the file's
// before any payload is read or allocated, then the checksum and every value (finite; AdamW's v not
// negative; the validation records in step order, none past the checkpoint's step). With `want`,
// the header's run must also be that one (the first field that differs is named), so a checkpoint
// can make micro allocate no more than the run itself needs. -1 and one line in err on failure.
int checkpoint_load_run(const char *path, const RunIdent *want, Checkpoint *c, char *err, size_t errlen);
// The same checks without a run to match (tests, the fuzzer).
int checkpoint_load(const char *path, Checkpoint *c, char *err, size_t errlen);
void checkpoint_free_arrays(Checkpoint *c);
// The checksum a checkpoint ends with: 64-bit FNV-1a over every byte before it.
uint64_t checkpoint_checksum(const void *bytes, size_t n);
// Fills the model fields of id from c (the rest of id is left as it is).
void checkpoint_ident_model(RunIdent *id, const ModelConfig *c);
// The first field where two runs differ, by name, or NULL.
const char *checkpoint_ident_mismatch(const RunIdent *a, const RunIdent *b);

#endif
