#include "checkpoint.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "msgtext.h"
#include "safe_file.h"

typedef struct {
    FILE *f;
    uint64_t hash;
} Writer;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define FNV_BASIS 0xcbf29ce484222325ULL

uint64_t checkpoint_checksum(const void *bytes, size_t n) { return fnv(FNV_BASIS, bytes, n); }

static void put(Writer *w, const void *p, size_t n) {
    if (n == 0) return;
    w->hash = fnv(w->hash, p, n);
    fwrite(p, 1, n, w->f); // a short write sets the stream's error flag, which safe_commit reports
}

int checkpoint_save(const char *path, const Checkpoint *c, char *err, size_t errlen) {
    // Written beside the old checkpoint and renamed over it: a kill in mid-write leaves the
    // previous checkpoint whole.
    SafeFile out;
    if (safe_open(&out, path, err, errlen)) return -1;
    Writer w = {out.f, FNV_BASIS};
    uint32_t version = CKPT_VERSION;
    size_t n = (size_t)c->pr.n_params;
    put(&w, CKPT_MAGIC, 8);
    put(&w, &version, sizeof version);
    put(&w, &c->id, sizeof c->id);
    put(&w, &c->pr, sizeof c->pr);
    put(&w, c->params, n * sizeof(float));
    put(&w, c->m, n * sizeof(float));
    put(&w, c->v, n * sizeof(float));
    put(&w, c->train_loss, (size_t)c->id.steps * sizeof(float));
    put(&w, c->val, (size_t)c->pr.n_val * sizeof(ValRecord));
    uint64_t h = w.hash;
    put(&w, &h, sizeof h);
    return safe_commit(&out, err, errlen); // reports any failed put with its reason
}

void checkpoint_free_arrays(Checkpoint *c) {
    free(c->params);
    free(c->m);
    free(c->v);
    free(c->train_loss);
    free(c->val);
    c->params = c->m = c->v = c->train_loss = NULL;
    c->val = NULL;
}

void checkpoint_ident_model(RunIdent *id, const ModelConfig *c) {
    id->dim = c->dim;
    id->n_layers = c->n_layers;
    id->n_heads = c->n_heads;
    id->n_kv_heads = c->n_kv_heads;
    id->head_dim = c->head_dim;
    id->hidden_dim = c->hidden_dim;
    id->vocab_size = c->vocab_size;
    id->max_seq_len = c->max_seq_len;
    id->rope_theta = c->rope_theta;
    id->norm_eps = c->norm_eps;
    id->latent_dim = c->latent_dim;
    id->rope_dim = c->rope_dim;
}

const char *checkpoint_ident_mismatch(const RunIdent *a, const RunIdent *b) {
#define CMP(f)                            \
    if (memcmp(&a->f, &b->f, sizeof a->f)) \
        return #f;
    CMP(dim) CMP(n_layers) CMP(n_heads) CMP(n_kv_heads) CMP(head_dim) CMP(hidden_dim) CMP(vocab_size)
    CMP(max_seq_len) CMP(rope_theta) CMP(norm_eps) CMP(batch) CMP(seq) CMP(steps) CMP(warmup) CMP(val_windows)
    CMP(lr) CMP(min_lr_frac) CMP(weight_decay) CMP(grad_clip) CMP(beta1) CMP(beta2) CMP(adam_eps) CMP(seed)
    CMP(corpus_sha256) CMP(latent_dim) CMP(rope_dim)
#undef CMP
    return NULL;
}

typedef struct {
    FILE *f;
    uint64_t hash;
} Reader;

// Reads n bytes into p and adds them to the running checksum; -1 on a short read.
static int get(Reader *r, void *p, size_t n) {
    if (n == 0) return 0;
    if (fread(p, 1, n, r->f) != n) return -1;
    r->hash = fnv(r->hash, p, n);
    return 0;
}

// The model the ident describes, each field in an int's range first; 0, or -1 with the reason.
static int ident_config(const RunIdent *id, ModelConfig *c, char *why, size_t n) {
    const struct {
        const char *name;
        int64_t v;
        int *to;
    } f[] = {
        {"dim", id->dim, &c->dim},
        {"n_layers", id->n_layers, &c->n_layers},
        {"n_heads", id->n_heads, &c->n_heads},
        {"n_kv_heads", id->n_kv_heads, &c->n_kv_heads},
        {"head_dim", id->head_dim, &c->head_dim},
        {"hidden_dim", id->hidden_dim, &c->hidden_dim},
        {"vocab_size", id->vocab_size, &c->vocab_size},
        {"max_seq_len", id->max_seq_len, &c->max_seq_len},
        {"latent_dim", id->latent_dim, &c->latent_dim},
        {"rope_dim", id->rope_dim, &c->rope_dim},
    };
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (f[i].v < 0 || f[i].v > INT32_MAX) {
            snprintf(why, n, "%s = %lld is out of range", f[i].name, (long long)f[i].v);
            return -1;
        }
        *f[i].to = (int)f[i].v;
    }
    // The trainer keeps these as floats: a double that is not one cannot be a run's.
    c->rope_theta = (float)id->rope_theta;
    c->norm_eps = (float)id->norm_eps;
    if ((double)c->rope_theta != id->rope_theta || (double)c->norm_eps != id->norm_eps) {
        snprintf(why, n, "rope_theta %.17g or norm_eps %.17g is not a float", id->rope_theta, id->norm_eps);
        return -1;
    }
    return model_config_validate_own(c, why, n);
}

// One line: "checkpoint NAME: " and the reason, then `goto fail`.
#define FAIL MSG_FAIL

int checkpoint_load_run(const char *path, const RunIdent *want, Checkpoint *c, char *err, size_t errlen) {
    char shown[MSG_TEXT], name[MSG_TEXT + 16]; // the path as messages echo it: shortened, escaped
    msg_text(path, shown, sizeof shown);
    snprintf(name, sizeof name, "checkpoint %s", shown);
    memset(c, 0, sizeof *c);
    long long size = 0;
    FILE *f = safe_open_read(path, &size, err, errlen); // a regular file: a FIFO or a folder is refused
    if (!f) return -1;
    // The header alone is read first: nothing in it is trusted, and nothing is allocated, until the
    // length it gives is the file's.
    unsigned char h[12 + sizeof(RunIdent) + sizeof(RunProgress)];
    const size_t head_max = size < (long long)sizeof h ? (size_t)size : sizeof h;
    if (size == 0) FAIL("is empty");
    if (fread(h, 1, head_max, f) != head_max) FAIL("read error in its header");
    if (size < 12) FAIL("is %lld bytes, too short for a checkpoint's header", size);
    if (memcmp(h, CKPT_MAGIC, 8) != 0) FAIL("is not a micro checkpoint (bad magic)");
    uint32_t version;
    memcpy(&version, h + 8, 4);
    if (version < 1 || version > CKPT_VERSION)
        FAIL("is version %u; this build reads checkpoint versions 1 to %u", version, CKPT_VERSION);
    // Version 1's RunIdent ends before latent_dim: a multi-head or grouped-query run.
    const size_t ident = version == 1 ? offsetof(RunIdent, latent_dim) : sizeof(RunIdent);
    const size_t head = 12 + ident + sizeof(RunProgress);
    if ((uint64_t)size < head + 8)
        FAIL("is %lld bytes, too short for a version %u header and checksum (%zu)", size, version, head + 8);
    memcpy(&c->id, h + 12, ident);
    memcpy(&c->pr, h + 12 + ident, sizeof c->pr);
    const RunIdent *id = &c->id;
    const RunProgress *pr = &c->pr;

    // The run: its model, then the counts that size the payload and the trainer's buffers.
    ModelConfig cfg;
    char why[256];
    if (ident_config(id, &cfg, why, sizeof why)) FAIL("its model: %s", why);
    if (id->steps < 1 || id->steps > CKPT_MAX_STEPS)
        FAIL("steps = %lld is out of range (1..%d)", (long long)id->steps, CKPT_MAX_STEPS);
    if (id->batch < 1 || id->batch > TRAIN_MAX_STEP_TOKENS || id->seq < 1 || id->seq > id->max_seq_len ||
        id->batch * id->seq > TRAIN_MAX_STEP_TOKENS)
        FAIL("batch %lld x seq %lld is out of range (seq within the context %lld, at most %d tokens a step)",
             (long long)id->batch, (long long)id->seq, (long long)id->max_seq_len, TRAIN_MAX_STEP_TOKENS);
    if (id->warmup < 0 || id->warmup > id->steps)
        FAIL("warmup = %lld is out of range (0..steps)", (long long)id->warmup);
    if (id->val_windows < 1 || id->val_windows > 4096)
        FAIL("val_windows = %lld is out of range (1..4096)", (long long)id->val_windows);
    const double hyper[] = {id->lr, id->min_lr_frac, id->weight_decay, id->grad_clip, id->beta1, id->beta2, id->adam_eps};
    for (size_t i = 0; i < sizeof hyper / sizeof hyper[0]; i++)
        if (!isfinite(hyper[i])) FAIL("an optimiser setting (lr, betas, eps, decay, clip) is not finite");
    if (!memchr(id->corpus_sha256, 0, sizeof id->corpus_sha256)) FAIL("its corpus hash is not a string");
    if (want) {
        const char *diff = checkpoint_ident_mismatch(id, want);
        if (diff) FAIL("is from a different run (%s differs); use the same options", diff);
    }
    const size_t n = model_param_count(&cfg);
    if (pr->n_params < 0 || (uint64_t)pr->n_params != (uint64_t)n)
        FAIL("n_params = %lld, but its model has %zu parameters", (long long)pr->n_params, n);
    if (pr->step < 0 || pr->step > id->steps)
        FAIL("step = %lld is out of range (0..steps %lld)", (long long)pr->step, (long long)id->steps);
    // Validation records are taken at distinct steps 0..step: no more than step + 1 of them.
    if (pr->n_val < 0 || pr->n_val > pr->step + 1)
        FAIL("n_val = %lld is out of range (0..step + 1 = %lld)", (long long)pr->n_val, (long long)pr->step + 1);
    if (!(pr->wall_seconds >= 0) || !isfinite(pr->wall_seconds))
        FAIL("wall_seconds %g is not a finite time", pr->wall_seconds);
    if (!memchr(pr->blas_core, 0, sizeof pr->blas_core)) FAIL("its OpenBLAS core name is not a string");

    // The exact length, from counts bounded above (n <= 2^34, steps <= 2^24, n_val <= steps + 1):
    // no product can overflow 64 bits.
    const size_t steps = (size_t)id->steps, nv = (size_t)pr->n_val;
    const uint64_t want_len = (uint64_t)head + 3 * (uint64_t)n * sizeof(float) + (uint64_t)steps * sizeof(float) +
                              (uint64_t)nv * sizeof(ValRecord) + 8;
    if ((uint64_t)size < want_len)
        FAIL("is truncated: %lld bytes, its header gives %llu", size, (unsigned long long)want_len);
    if ((uint64_t)size > want_len)
        FAIL("is %lld bytes, %llu bytes more than its header gives (%llu)", size,
             (unsigned long long)((uint64_t)size - want_len), (unsigned long long)want_len);

    c->params = malloc(n * sizeof(float));
    c->m = malloc(n * sizeof(float));
    c->v = malloc(n * sizeof(float));
    c->train_loss = malloc((steps + 1) * sizeof(float));
    c->val = malloc((nv + 1) * sizeof(ValRecord));
    if (!c->params || !c->m || !c->v || !c->train_loss || !c->val) FAIL("out of memory for %zu parameters", n);
    Reader r = {f, fnv(FNV_BASIS, h, head)};
    uint64_t stored;
    if (fseek(f, (long)head, SEEK_SET) != 0 || get(&r, c->params, n * sizeof(float)) ||
        get(&r, c->m, n * sizeof(float)) || get(&r, c->v, n * sizeof(float)) ||
        get(&r, c->train_loss, steps * sizeof(float)) || get(&r, c->val, nv * sizeof(ValRecord)) ||
        fread(&stored, 1, 8, f) != 8)
        FAIL("read error");
    if (r.hash != stored) FAIL("fails its checksum");

    // Every value: a NaN would reach the trainer's arithmetic (and once, undefined behaviour).
    for (size_t i = 0; i < n; i++)
        if (!isfinite(c->params[i])) FAIL("parameter %zu is not finite", i);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(c->m[i])) FAIL("AdamW's m[%zu] is not finite", i);
    for (size_t i = 0; i < n; i++) // a running mean of squares
        if (!(c->v[i] >= 0) || !isfinite(c->v[i])) FAIL("AdamW's v[%zu] = %g is negative or not finite", i, (double)c->v[i]);
    for (size_t i = 0; i < steps; i++)
        if (!isfinite(c->train_loss[i])) FAIL("the train loss of step %zu is not finite", i + 1);
    for (size_t i = 0; i < nv; i++) {
        const ValRecord *v = &c->val[i];
        if (!isfinite(v->en) || !isfinite(v->zh)) FAIL("validation record %zu is not finite", i);
        if (v->step < (i ? c->val[i - 1].step + 1 : 0) || v->step > pr->step)
            FAIL("validation record %zu is at step %lld: not after the one before it, or past step %lld", i,
                 (long long)v->step, (long long)pr->step);
    }
    fclose(f);
    return 0;
fail:
    fclose(f);
    checkpoint_free_arrays(c);
    return -1;
}

int checkpoint_load(const char *path, Checkpoint *c, char *err, size_t errlen) {
    return checkpoint_load_run(path, NULL, c, err, errlen);
}
