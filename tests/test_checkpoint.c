// Training checkpoints against hostile files: a valid one round-trips; every header field out of its
// limit, every wrong length, a bad checksum and every non-finite or out-of-order value is refused,
// each with its own one-line reason, before the payload is read where the header already says no
// (a sparse 1 GiB file costs nothing); and a resume can never write past the validation history
// (changing --eval-every between sessions, or a checkpoint with as many records as its step allows,
// once wrote one record past it).
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "checkpoint.h"
#include "train.h"

static char dir[] = "/tmp/micro-test-ckpt-XXXXXX";

// Where each field sits in a version 2 file.
#define ID(f) (12 + offsetof(RunIdent, f))
#define PR(f) (12 + sizeof(RunIdent) + offsetof(RunProgress, f))
#define HEAD (12 + sizeof(RunIdent) + sizeof(RunProgress))

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void put_i64(unsigned char *b, size_t at, int64_t v) { memcpy(b + at, &v, 8); }
static void put_f64(unsigned char *b, size_t at, double v) { memcpy(b + at, &v, 8); }
static void put_f32(unsigned char *b, size_t at, float v) { memcpy(b + at, &v, 4); }
static int64_t get_i64(const unsigned char *b, size_t at) {
    int64_t v;
    memcpy(&v, b + at, 8);
    return v;
}

// Recomputes the closing checksum, so that a corruption reaches the check it is aimed at.
static void resum(unsigned char *b, size_t n) {
    uint64_t h = checkpoint_checksum(b, n - 8);
    memcpy(b + n - 8, &h, 8);
}

static char messages[64][512];
static int n_messages = 0;

// Expects b refused with a message naming the file and containing `needle`, on one line, its reason
// unlike every earlier one, and nothing left allocated.
static void expect_refused(const char *label, const unsigned char *b, size_t n, const char *needle) {
    char path[256], err[512] = "";
    snprintf(path, sizeof path, "%s/%s.ckpt", dir, label);
    write_bytes(path, b, n);
    Checkpoint c;
    int rc = checkpoint_load(path, &c, err, sizeof err);
    remove(path);
    if (rc == 0) {
        printf("FAIL %s: accepted\n", label);
        failures++;
        checkpoint_free_arrays(&c);
        return;
    }
    const char *reason = strstr(err, ".ckpt") ? strstr(err, ".ckpt") + 5 : err;
    CHECK(strstr(err, needle) && strstr(err, label) && !strchr(err, '\n'), "%s: message '%s' lacks '%s' or the file",
          label, err, needle);
    CHECK(!c.params && !c.m && !c.v && !c.train_loss && !c.val, "%s: arrays left after a refusal", label);
    for (int i = 0; i < n_messages; i++) CHECK(strcmp(messages[i], reason), "%s: the same reason as before: %s", label, reason);
    if (n_messages < 64) snprintf(messages[n_messages++], sizeof messages[0], "%s", reason);
    printf("ok   %-24s %s\n", label, err);
}

static long max_rss_kb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

static char corpus[300], ckpt[300], out[300];

// A run of a tiny model on the test's corpus: 4 steps, validation every `eval_every`.
static int train(const char *checkpoint, const char *resume, int eval_every, int stop_after) {
    TrainOptions o;
    train_options_default(&o);
    o.corpus = corpus, o.out = out, o.checkpoint = checkpoint, o.resume = resume;
    ModelConfig *c = &o.config;
    c->dim = 8, c->n_layers = 1, c->n_heads = c->n_kv_heads = 2, c->head_dim = 4, c->hidden_dim = 8, c->max_seq_len = 16;
    o.steps = 4, o.batch = 1, o.seq = 8, o.warmup = 1, o.threads = 1, o.checkpoint_every = 0;
    o.eval_every = eval_every, o.val_windows = 1, o.stop_after = stop_after;
    return train_run(&o);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(corpus, sizeof corpus, "%s/corpus", dir);
    snprintf(ckpt, sizeof ckpt, "%s/run.ckpt", dir);
    snprintf(out, sizeof out, "%s/out.bin", dir);
    if (mkdir(corpus, 0700)) {
        perror(corpus);
        return 1;
    }
    const char *names[4] = {"en.train.txt", "en.val.txt", "zh.train.txt", "zh.val.txt"};
    const char *text = "\001The quick brown fox jumps over the lazy dog; \xe6\x97\xa5\xe6\x9c\xac the end.\n";
    for (int i = 0; i < 4; i++) {
        char p[400];
        snprintf(p, sizeof p, "%s/%s", corpus, names[i]);
        write_bytes(p, text, strlen(text));
    }

    // A run stopped after 2 of 4 steps, validated at each: records at steps 1 and 2.
    CHECK(train(ckpt, NULL, 1, 2) == 0, "the first session failed");
    Checkpoint c;
    char err[512] = "", again[300];
    CHECK(checkpoint_load(ckpt, &c, err, sizeof err) == 0, "valid checkpoint refused: %s", err);
    CHECK(c.id.steps == 4 && c.pr.step == 2 && c.pr.n_val == 2 && c.val[0].step == 1 && c.val[1].step == 2,
          "the checkpoint holds step %lld, %lld records", (long long)c.pr.step, (long long)c.pr.n_val);
    // Written back, the same bytes.
    snprintf(again, sizeof again, "%s/again.ckpt", dir);
    CHECK(checkpoint_save(again, &c, err, sizeof err) == 0, "save: %s", err);
    size_t n, n2;
    unsigned char *orig = check_read_all(ckpt, &n), *back = check_read_all(again, &n2);
    CHECK(n == n2 && !memcmp(orig, back, n), "a loaded checkpoint saved again differs");
    printf("ok   round trip of %zu bytes\n", n);
    free(back);
    remove(again);
    // Matched against a run: the first field that differs is named, before the payload.
    RunIdent other = c.id;
    other.seed++;
    Checkpoint d;
    CHECK(checkpoint_load_run(ckpt, &other, &d, err, sizeof err) == -1 && strstr(err, "seed differs") && !d.params,
          "another run's checkpoint: %s", err);
    CHECK(checkpoint_load_run(ckpt, &c.id, &d, err, sizeof err) == 0, "its own run: %s", err);
    checkpoint_free_arrays(&d);
    const size_t np = (size_t)c.pr.n_params, steps = (size_t)c.id.steps;
    const size_t P = HEAD, M = P + 4 * np, V = M + 4 * np, L = V + 4 * np, R = L + 4 * steps;
    checkpoint_free_arrays(&c);

    // The resume that wrote past the history: validation at each step, then none but the last.
    // The history was sized for the second session's --eval-every (2 records) and held 2 already.
    CHECK(train(NULL, ckpt, 0, 0) == 0, "resume with --eval-every 0 failed");
    // A checkpoint with as many records as its step allows (steps 0, 1, 2), checksum recomputed.
    unsigned char *b = malloc(n + 2 * sizeof(ValRecord) + 64);
    if (!b || n < HEAD + 8) return 1;
    memcpy(b, orig, R);
    ValRecord recs[3] = {{0, 5.0, 5.5}, {1, 4.0, 4.5}, {2, 3.0, 3.5}};
    memcpy(b + R, recs, sizeof recs);
    size_t nfull = R + sizeof recs + 8;
    put_i64(b, PR(n_val), 3);
    resum(b, nfull);
    char full[300];
    snprintf(full, sizeof full, "%s/full.ckpt", dir);
    write_bytes(full, b, nfull);
    CHECK(checkpoint_load(full, &c, err, sizeof err) == 0, "n_val at its limit (step + 1) refused: %s", err);
    checkpoint_free_arrays(&c);
    CHECK(train(NULL, full, 0, 0) == 0, "resume with n_val at its limit failed");
    CHECK(train(NULL, full, 1, 0) == 0, "resume with n_val at its limit, --eval-every 1, failed");
    remove(full);
    // One record more than the step allows (the trainer's old limit, steps / eval_every + 2, let
    // 6 through).
    memcpy(b + R + sizeof recs, recs, sizeof(ValRecord));
    put_i64(b, PR(n_val), 4);
    resum(b, nfull + sizeof(ValRecord));
    expect_refused("n_val_past_step", b, nfull + sizeof(ValRecord), "n_val = 4 is out of range (0..step + 1 = 3)");

    // Version 1 (no latent fields in the ident) still loads.
    memcpy(b, orig, ID(latent_dim));
    memcpy(b + ID(latent_dim), orig + ID(latent_dim) + 16, n - ID(latent_dim) - 16);
    b[8] = 1;
    resum(b, n - 16);
    char v1[300];
    snprintf(v1, sizeof v1, "%s/v1.ckpt", dir);
    write_bytes(v1, b, n - 16);
    CHECK(checkpoint_load(v1, &c, err, sizeof err) == 0 && c.id.latent_dim == 0 && c.pr.n_params == (int64_t)np,
          "version 1: %s", err);
    checkpoint_free_arrays(&c);
    remove(v1);
    printf("ok   n_val at its limit resumes; version 1 loads\n");

#define RESET() memcpy(b, orig, n)
    // The header: each refusal without the payload being read.
    expect_refused("empty", b, 0, "is empty");
    RESET();
    expect_refused("short", b, 10, "too short for a checkpoint's header");
    RESET();
    b[0] = 'X';
    expect_refused("bad_magic", b, n, "not a micro checkpoint (bad magic)");
    RESET();
    b[8] = 3;
    expect_refused("version_3", b, n, "is version 3");
    RESET();
    expect_refused("header_cut", b, 200, "too short for a version 2 header");
    RESET();
    put_i64(b, ID(dim), 0);
    expect_refused("dim_0", b, n, "its model: dim = 0");
    RESET();
    put_i64(b, ID(dim), (int64_t)1 << 40);
    expect_refused("dim_2_40", b, n, "dim = 1099511627776 is out of range");
    RESET();
    put_i64(b, ID(n_kv_heads), 3);
    expect_refused("kv_heads", b, n, "does not divide");
    RESET();
    put_f64(b, ID(rope_theta), 10000.000001);
    expect_refused("theta_not_float", b, n, "is not a float");
    RESET();
    put_i64(b, ID(steps), 0);
    expect_refused("steps_0", b, n, "steps = 0 is out of range");
    RESET();
    put_i64(b, ID(steps), (int64_t)1 << 25);
    expect_refused("steps_2_25", b, n, "steps = 33554432 is out of range");
    RESET();
    put_i64(b, ID(batch), 0);
    expect_refused("batch_0", b, n, "batch 0 x seq 8");
    RESET();
    put_i64(b, ID(seq), 17);
    expect_refused("seq_past_context", b, n, "batch 1 x seq 17");
    RESET();
    put_i64(b, ID(warmup), -1);
    expect_refused("warmup", b, n, "warmup = -1");
    RESET();
    put_i64(b, ID(val_windows), 0);
    expect_refused("val_windows", b, n, "val_windows = 0");
    RESET();
    put_f64(b, ID(lr), NAN);
    expect_refused("lr_nan", b, n, "optimiser setting");
    RESET();
    memset(b + ID(corpus_sha256), 'a', sizeof c.id.corpus_sha256);
    expect_refused("corpus_hash", b, n, "corpus hash is not a string");
    RESET();
    put_i64(b, PR(n_params), (int64_t)np + 1);
    expect_refused("n_params", b, n, "but its model has");
    RESET();
    put_i64(b, PR(step), 5);
    expect_refused("step_past_steps", b, n, "step = 5 is out of range");
    RESET();
    put_i64(b, PR(step), -1);
    expect_refused("step_negative", b, n, "step = -1 is out of range");
    RESET();
    put_i64(b, PR(n_val), -1);
    expect_refused("n_val_negative", b, n, "n_val = -1");
    RESET();
    put_f64(b, PR(wall_seconds), NAN);
    expect_refused("wall_seconds", b, n, "wall_seconds nan");
    RESET();
    memset(b + PR(blas_core), 'z', sizeof c.pr.blas_core);
    expect_refused("blas_core", b, n, "OpenBLAS core name is not a string");

    // The length the header gives, checked before the payload is read.
    RESET();
    put_i64(b, PR(n_val), 3); // a record the file does not hold
    expect_refused("n_val_unbacked", b, n, "is truncated");
    RESET();
    expect_refused("cut_by_one", b, n - 1, "is truncated");
    RESET();
    b[n] = 0;
    expect_refused("trailing_byte", b, n + 1, "1 bytes more than its header gives");
    // A sparse 1 GiB file, of zeros and after a valid header: refused from its header, in no more
    // memory than it (the old loader read it whole first: 1 GiB and seconds).
    const char *sparse_needle[2] = {"bad magic", "more than its header gives"};
    for (int k = 0; k < 2; k++) {
        char p[300];
        snprintf(p, sizeof p, "%s/sparse%d.ckpt", dir, k);
        FILE *f = fopen(p, "wb");
        if (!f || (k && fwrite(orig, 1, HEAD, f) != HEAD) || ftruncate(fileno(f), (off_t)1 << 30) || fclose(f)) {
            perror(p);
            return 1;
        }
        long rss = max_rss_kb();
        int rc = checkpoint_load(p, &c, err, sizeof err);
        long grew = max_rss_kb() - rss;
        CHECK(rc == -1 && strstr(err, sparse_needle[k]) && grew < 64 * 1024, "sparse 1 GiB file %d: %s (%ld kB more)", k,
              err, grew);
        if (rc == 0) checkpoint_free_arrays(&c);
        printf("ok   sparse_1GiB_%d             %s (%ld kB more memory)\n", k, err, grew);
        remove(p);
    }

    // The payload: the checksum, then every value.
    RESET();
    b[P + 17] ^= 0x10;
    expect_refused("checksum", b, n, "fails its checksum");
    struct {
        const char *label;
        size_t at;
        float v;
        const char *needle;
    } values[] = {
        {"param_nan", P + 4 * 7, NAN, "parameter 7 is not finite"},
        {"param_inf", P + 4 * (np - 1), -INFINITY, "is not finite"},
        {"m_inf", M + 4 * 3, INFINITY, "AdamW's m[3] is not finite"},
        {"v_negative", V + 4 * 5, -1.0f, "AdamW's v[5] = -1 is negative"},
        {"v_nan", V + 4 * 6, NAN, "AdamW's v[6] = nan"},
        {"loss_nan", L + 4 * 1, NAN, "train loss of step 2 is not finite"},
    };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        RESET();
        put_f32(b, values[i].at, values[i].v);
        resum(b, n);
        char label[64];
        snprintf(label, sizeof label, "%s", values[i].label);
        expect_refused(label, b, n, values[i].needle);
    }
    RESET();
    put_f64(b, R + sizeof(ValRecord) + offsetof(ValRecord, zh), INFINITY);
    resum(b, n);
    expect_refused("val_inf", b, n, "validation record 1 is not finite");
    RESET();
    put_i64(b, R + sizeof(ValRecord), get_i64(b, R)); // two records at one step
    resum(b, n);
    expect_refused("val_repeated", b, n, "validation record 1 is at step 1: not after");
    RESET();
    put_i64(b, R + sizeof(ValRecord), 3); // past the checkpoint's step 2
    resum(b, n);
    expect_refused("val_past_step", b, n, "validation record 1 is at step 3");

    free(b);
    free(orig);
    remove(ckpt);
    remove(out);
    for (int i = 0; i < 4; i++) {
        char p[400];
        snprintf(p, sizeof p, "%s/%s", corpus, names[i]);
        remove(p);
    }
    rmdir(corpus);
    CHECK(rmdir(dir) == 0, "rmdir %s: leftovers", dir);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
