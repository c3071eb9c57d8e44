// `micro calibrate`: options -> the model and the corpus's training split -> calibrate_model ->
// the .kvq file and its provenance record (FILE.json).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "calibrate.h"
#include "cli.h"
#include "cmd_options.h"
#include "commands.h"
#include "kvq_file.h"
#include "micro_commit.h"
#include "model_file.h"
#include "msgtext.h"
#include "safe_file.h"
#include "data.h"
#include "rng.h"

#define DEFAULT_SEQUENCES 16 // KVQuant calibrates on 16 sequences of 2,048 tokens
#define DEFAULT_LENGTH 2048
#define DEFAULT_SEED 1

// What the file holds: percents 0 (min/max) and 1 (KVQuant's "-1%"), widths 1..4.
static const uint32_t percents[] = {0, KVQ_PERCENT_ONE};
static const uint32_t bits[] = {1, 2, 3, 4};
#define N_PERCENTS (int)(sizeof percents / sizeof percents[0])
#define N_BITS (int)(sizeof bits / sizeof bits[0])

static const char usage[] =
    "usage: micro calibrate [options]\n"
    "KVQuant's calibration for a model's KV cache: runs the trainer's forward and backward over\n"
    "sequences from the corpus's training split and writes, per layer, the pre-RoPE keys' per-channel\n"
    "ranges and outlier thresholds (outliers 0% and 1%) and Fisher-weighted k-means codebooks for keys\n"
    "and values (1-4 bits, plain and Q-Norm), and each layer's largest key (after and before RoPE) and\n"
    "value magnitudes (nvfp4:scale2=calib). Bit-identical for the same options, whatever --threads.\n"
    "Format: docs/kvq-format.md.\n"
    "\n"
    "  --model FILE      the model (default models/micro.bin)\n"
    "  --out FILE        the calibration (default: beside the model, .bin -> .kvq: models/micro.kvq);\n"
    "                    its provenance goes to FILE.json\n"
    "  --corpus DIR      {en,zh}.{train,val}.txt (default data/corpus; only *.train.txt is read from)\n"
    "  --sequences N     sequences (default 16, 1..4096)\n"
    "  --length T        tokens per sequence (default 2048, at most the model's context)\n"
    "  --seed S          which windows of the training split (default 1)\n"
    "  --threads N       worker threads, 1..256 (default 2; results do not depend on it)\n"
    "  --help            this text\n";

int calibrate_parse(int argc, char **argv, CalibrateOptions *o, char *err, size_t errlen) {
    *o = (CalibrateOptions){.sequences = DEFAULT_SEQUENCES, .threads = 2, .seed = DEFAULT_SEED};
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--out")) bad = opts_path(&p, &o->out);
        else if (opts_is(&p, "--corpus")) bad = opts_path(&p, &o->corpus);
        else if (opts_is(&p, "--sequences")) bad = opts_int(&p, 1, 4096, &o->sequences);
        else if (opts_is(&p, "--length")) bad = opts_int(&p, 1, 1 << 16, &o->length);
        else if (opts_is(&p, "--seed")) bad = opts_u64(&p, &o->seed);
        else if (opts_is(&p, "--threads")) bad = opts_int(&p, 1, 256, &o->threads);
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    return OPTS_RUN;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    const Kvq *k;
    const char *model_path, *kvq_path;
    const Corpus *corpus;
    const CalibSummary *sum;
    int threads;
    double seconds;
    const CalibrateOptions *o;
} Provenance;

static int write_provenance(FILE *f, void *ctx, char *why, size_t whylen) {
    const Provenance *p = ctx;
    const Kvq *k = p->k;
    fprintf(f, "{\n  \"kvq\": ");
    json_string_to(f, p->kvq_path);
    // The command that makes this file again, every option spelled out (the defaults included).
    // As long as its paths make it: written to memory, never cut.
    char *command = NULL;
    size_t command_len = 0;
    FILE *m = open_memstream(&command, &command_len);
    if (m) fprintf(m, "build/micro calibrate --model %s --out %s --corpus %s --sequences %u --length %u --seed %llu --threads %d",
                   p->model_path, p->kvq_path, p->o->corpus ? p->o->corpus : "data/corpus", k->sequences, k->length,
                   (unsigned long long)k->seed, p->threads);
    if (!m || fclose(m) != 0) {
        free(command);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    fprintf(f, ",\n  \"command\": ");
    json_string_to(f, command);
    free(command);
    fprintf(f, ",\n  \"format\": \"docs/kvq-format.md, version %u\",\n  \"model\": {\"path\": ", KVQ_VERSION);
    json_string_to(f, p->model_path);
    fprintf(f, ", \"payload_fnv1a64\": \"%016llx\", \"n_layers\": %d, \"n_kv_heads\": %d, \"head_dim\": %d},\n",
            (unsigned long long)k->model_checksum, k->n_layers, k->n_kv_heads, k->head_dim);
    fprintf(f, "  \"corpus\": {\"sha256\": \"%s\", \"read\": [\"en.train.txt\", \"zh.train.txt\"], \"bytes\": [%zu, %zu]},\n",
            p->corpus->sha256, p->corpus->file_len[0], p->corpus->file_len[2]);
    fprintf(f, "  \"sequences\": %u,\n  \"length\": %u,\n  \"seed\": %llu,\n", k->sequences, k->length,
            (unsigned long long)k->seed);
    fprintf(f, "  \"windows\": \"the trainer's batch_sample from en.train+zh.train, splitmix64 seeded with seed\",\n");
    fprintf(f, "  \"outlier_percents\": [");
    for (int i = 0; i < k->n_percents; i++) fprintf(f, "%s%g", i ? ", " : "", k->percents[i] / 100.0);
    fprintf(f, "],\n  \"bits\": [");
    for (int i = 0; i < k->n_bits; i++) fprintf(f, "%s%u", i ? ", " : "", k->bits[i]);
    fprintf(f, "],\n  \"mean_loss\": %.6f,\n  \"key_outlier_fraction\": [", p->sum->mean_loss);
    for (int i = 0; i < k->n_percents; i++) fprintf(f, "%s%.6f", i ? ", " : "", p->sum->key_outliers[i]);
    fprintf(f, "],\n  \"value_outlier_fraction\": [");
    for (int i = 0; i < k->n_percents; i++) fprintf(f, "%s%.6f", i ? ", " : "", p->sum->value_outliers[i]);
    fprintf(f, "],\n  \"stream_max\": {\"order\": [\"keys\", \"keys before RoPE\", \"values\"], \"layers\": [");
    for (int l = 0; l < k->n_layers; l++)
        fprintf(f, "%s[%.6g, %.6g, %.6g]", l ? ", " : "", (double)*kvq_stream_max(k, l, KVQ_MAX_KEY),
                (double)*kvq_stream_max(k, l, KVQ_MAX_KEY_PREROPE), (double)*kvq_stream_max(k, l, KVQ_MAX_VALUE));
    fprintf(f, "]},\n  \"threads\": %d,\n  \"seconds\": %.1f,\n  \"micro_commit\": \"%s\"\n}\n", p->threads, p->seconds,
            MICRO_COMMIT);
    return 0;
}

static void hex_to_bytes(const char *hex, unsigned char *out, int n) {
    for (int i = 0; i < n; i++) {
        unsigned v = 0;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (unsigned char)v;
    }
}

static void print_summary(const Kvq *k, const CalibSummary *s, const char *model, const Corpus *c, int threads,
                          double seconds) {
    char shown[MSG_TEXT];
    printf("calibrated %s: %u sequences of %u tokens from the training split (corpus %.12s), seed %llu, "
           "%d threads, %.1f s; mean loss %.4f nats/token\n",
           msg_text(model, shown, sizeof shown), k->sequences, k->length, c->sha256, (unsigned long long)k->seed,
           threads, seconds, s->mean_loss);
    for (int pi = 0; pi < k->n_percents; pi++)
        printf("outliers %g%%: %.3f%% of key numbers outside their channel's thresholds, %.3f%% of values set apart\n",
               k->percents[pi] / 100.0, 100 * s->key_outliers[pi], 100 * s->value_outliers[pi]);
    for (int l = 0; l < k->n_layers; l++)
        printf("layer %d largest |x|: keys %.4g (before RoPE %.4g), values %.4g\n", l, (double)*kvq_stream_max(k, l, KVQ_MAX_KEY),
               (double)*kvq_stream_max(k, l, KVQ_MAX_KEY_PREROPE), (double)*kvq_stream_max(k, l, KVQ_MAX_VALUE));
    int b2 = kvq_bits_index(k, 2);
    if (b2 < 0) return;
    for (int role = 0; role < 2; role++) {
        const float *cb = kvq_codebook(k, 0, (KvqRole)role, b2, 0, KVQ_PLAIN);
        printf("layer 0 %s 2-bit signposts (outliers 0%%): %+.3f %+.3f %+.3f %+.3f\n", role ? "value" : "key  ",
               (double)cb[0], (double)cb[1], (double)cb[2], (double)cb[3]);
    }
}

int cmd_calibrate(int argc, char **argv) {
    CalibrateOptions o;
    char err[1024], path[4096], out[4096], json[4200], shown[MSG_TEXT];
    int done = cli_after_parse(calibrate_parse(argc, argv, &o, err, sizeof err), err, usage);
    if (done >= 0) return done;
    const char *model_path = cli_default_path(o.model_path, "models/micro.bin", path, sizeof path);
    if (kvq_default_path(o.out, model_path, out, sizeof out) ||
        snprintf(json, sizeof json, "%s.json", out) >= (int)sizeof json)
        return cli_error("--out: path too long");
    if (safe_check_output(out, err, sizeof err) || safe_check_output(json, err, sizeof err))
        return cli_error("%s", err);
    {   // the outputs against the model and the corpus's training split, which the run reads
        const char *dir = o.corpus ? o.corpus : "data/corpus";
        char en[4200], zh[4200];
        snprintf(en, sizeof en, "%s/en.train.txt", dir);
        snprintf(zh, sizeof zh, "%s/zh.train.txt", dir);
        const CliFile outputs[2] = {{"--out", out}, {"its record (--out's .json)", json}},
                      inputs[3] = {{"--model", model_path}, {"the corpus", en}, {"the corpus", zh}};
        if (cli_check_distinct(outputs, 2, inputs, 3, err, sizeof err)) return cli_error("%s", err);
    }
    Model m;
    if (model_load(&m, model_path, err, sizeof err)) return cli_error("%s", err);
    if (cli_byte_vocabulary(&m, model_path, err, sizeof err)) {
        model_free(&m);
        return cli_error("%s", err);
    }
    int len = o.length ? o.length : (m.config.max_seq_len < DEFAULT_LENGTH ? m.config.max_seq_len : DEFAULT_LENGTH);
    if (len > m.config.max_seq_len) {
        const int context = m.config.max_seq_len;
        model_free(&m);
        return cli_error("--length %d exceeds the model's context %d", len, context);
    }
    const char *dir = o.corpus ? o.corpus : "data/corpus";
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/en.train.txt", dir);
    if (safe_check_input(probe, err, sizeof err)) {
        model_free(&m);
        return cli_error("no corpus in %s (%s): extract it with bash scripts/corpus",
                         msg_text(dir, shown, sizeof shown), err);
    }
    Corpus corpus;
    if (corpus_load(&corpus, dir, err, sizeof err)) {
        model_free(&m);
        return cli_error("%s", err);
    }
    int status = 2;
    int *inputs = NULL, *targets = NULL;
    Kvq k = {0};
    if (corpus.train_len < (size_t)len + 1) {
        cli_error("the corpus's training split (%zu bytes) is shorter than --length %d", corpus.train_len, len);
        goto done;
    }
    size_t tokens = (size_t)o.sequences * (size_t)len;
    inputs = malloc(sizeof(int) * tokens);
    targets = malloc(sizeof(int) * tokens);
    if (!inputs || !targets) {
        status = cli_error("out of memory for %zu tokens", tokens);
        goto done;
    }
    // The trainer's own window sampler over the training split only (en.train + zh.train): the
    // validation text and the plates are what calibration will later be judged on.
    Rng rng;
    rng_seed(&rng, o.seed);
    batch_sample(corpus.train, corpus.train_len, &rng, o.sequences, len, inputs, targets);
    CalibSettings s = {percents, N_PERCENTS, bits, N_BITS, o.threads};
    CalibSummary sum;
    double t0 = now_seconds();
    if (calibrate_model(&m, inputs, targets, o.sequences, len, &s, &k, &sum, err, sizeof err)) {
        status = cli_error("%s", err);
        goto done;
    }
    double seconds = now_seconds() - t0;
    k.seed = o.seed;
    hex_to_bytes(corpus.sha256, k.corpus_sha256, 32);
    Provenance prov = {&k, model_path, out, &corpus, &sum, o.threads, seconds, &o};
    if (kvq_save(&k, out, err, sizeof err) || safe_write(json, write_provenance, &prov, err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        status = 1;
        goto done;
    }
    print_summary(&k, &sum, model_path, &corpus, o.threads, seconds);
    printf("wrote %s (%zu bytes) and %s\n", msg_text(out, shown, sizeof shown), kvq_file_bytes(&k), json);
    status = 0;
done:
    kvq_free(&k);
    free(inputs);
    free(targets);
    corpus_free(&corpus);
    model_free(&m);
    return status;
}
