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
#include "calib_windows.h"
#include "data.h"
#include "rng.h"
#include "sha256.h"
#include "text.h"

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
    "sequences from the corpus's training split (or a text you name) and writes, per layer, the\n"
    "pre-RoPE keys' per-channel ranges and outlier thresholds (outliers 0% and 1%) and Fisher-weighted\n"
    "k-means codebooks for keys and values (1-4 bits, plain and Q-Norm), and each layer's largest key\n"
    "(after and before RoPE) and value magnitudes (nvfp4:scale2=calib). Bit-identical for the same\n"
    "options, whatever --threads. Format: docs/kvq-format.md; on a GGUF: docs/models.md.\n"
    "\n"
    "  --model FILE      the model: micro's file or a GGUF (llama, qwen2, qwen3), in its own vocabulary\n"
    "                    (default models/micro.bin)\n"
    "  --out FILE        the calibration (default: beside the model, .bin or .gguf -> .kvq:\n"
    "                    models/micro.kvq); its provenance goes to FILE.json\n"
    "  --corpus DIR      {en,zh}.{train,val}.txt (default data/corpus; only *.train.txt is read from),\n"
    "                    each document tokenised by the model's tokenizer, BOS first if it has one\n"
    "  --text FILE[:N]   calibrate from this UTF-8 text instead (its first N characters): tokenised by\n"
    "                    the model's tokenizer, windows of --length at offsets drawn from --seed, each\n"
    "                    BOS first if the model has one; a text shorter than one window is refused.\n"
    "                    Not with --corpus: one source of text\n"
    "  --sequences N     sequences (default 16, 1..4096)\n"
    "  --length T        tokens per sequence (default 2048, at most the model's context)\n"
    "  --seed S          which windows of the training split or the text (default 1)\n"
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
        else if (opts_is(&p, "--text"))
            bad = opts_path(&p, &o->text) || cmd_check_text_arg("--text", o->text, err, errlen);
        else if (opts_is(&p, "--sequences")) bad = opts_int(&p, 1, 4096, &o->sequences);
        else if (opts_is(&p, "--length")) bad = opts_int(&p, 1, 1 << 16, &o->length);
        else if (opts_is(&p, "--seed")) bad = opts_u64(&p, &o->seed);
        else if (opts_is(&p, "--threads")) bad = opts_int(&p, 1, 256, &o->threads);
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (o->text && o->corpus) { // two sources of text: which one the windows come from would be a guess
        snprintf(err, errlen, "--text and --corpus are two sources of calibration text: give one");
        return OPTS_ERROR;
    }
    return OPTS_RUN;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Where the windows came from: the corpus's training split (as bytes, or under the model's
// tokenizer) or a text the user named; what the summary and the provenance record say of it.
typedef struct {
    const Corpus *corpus; // NULL: the text
    const char *text;     // --text as given
    char sha256[65];      // of the corpus's four files, or of the text's bytes read (after its cut)
    size_t text_bytes;
    size_t ids;           // ids in the tokenised stream (0: micro's bytes drawn by batch_sample)
    int own_vocabulary;   // the model's tokenizer, not micro's bytes
    int32_t bos;          // the BOS each window starts with, or -1 (the model adds none)
} Source;

typedef struct {
    const Kvq *k;
    const char *model_path, *kvq_path;
    const Source *src;
    const CalibSummary *sum;
    int threads;
    double seconds;
    const CalibrateOptions *o;
} Provenance;

static int write_provenance(FILE *f, void *ctx, char *why, size_t whylen) {
    const Provenance *p = ctx;
    const Kvq *k = p->k;
    const Source *src = p->src;
    fprintf(f, "{\n  \"kvq\": ");
    json_string_to(f, p->kvq_path);
    // The command that makes this file again, every option spelled out (the defaults included).
    // As long as its paths make it: written to memory, never cut.
    char *command = NULL;
    size_t command_len = 0;
    FILE *m = open_memstream(&command, &command_len);
    if (m) fprintf(m,
                   "build/micro calibrate --model %s --out %s %s %s --sequences %u --length %u --seed %llu --threads %d",
                   p->model_path, p->kvq_path, src->corpus ? "--corpus" : "--text",
                   src->corpus ? (p->o->corpus ? p->o->corpus : "data/corpus") : src->text, k->sequences, k->length,
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
    if (src->corpus)
        fprintf(f,
                "  \"corpus\": {\"sha256\": \"%s\", \"read\": [\"en.train.txt\", \"zh.train.txt\"], \"bytes\": [%zu, %zu]},\n",
                src->sha256, src->corpus->file_len[0], src->corpus->file_len[2]);
    else {
        fprintf(f, "  \"text\": {\"path\": ");
        json_string_to(f, src->text);
        fprintf(f, ", \"sha256\": \"%s\", \"bytes\": %zu},\n", src->sha256, src->text_bytes);
    }
    fprintf(f, "  \"tokens\": {\"vocabulary\": \"%s\", \"ids\": %zu, \"bos\": %d},\n",
            src->own_vocabulary ? "the model's own" : "micro's bytes", src->ids, (int)src->bos);
    fprintf(f, "  \"sequences\": %u,\n  \"length\": %u,\n  \"seed\": %llu,\n", k->sequences, k->length,
            (unsigned long long)k->seed);
    fprintf(f, "  \"windows\": \"%s\",\n",
            src->ids == 0 ? "the trainer's batch_sample from en.train+zh.train, splitmix64 seeded with seed"
                          : "calib_windows: offsets uniform over the ids, splitmix64 seeded with seed, BOS first "
                            "when bos >= 0");
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

static void print_summary(const Kvq *k, const CalibSummary *s, const char *model, const Source *src, int threads,
                          double seconds) {
    char shown[MSG_TEXT], text[MSG_TEXT];
    if (src->corpus)
        printf("calibrated %s: %u sequences of %u tokens from the training split (corpus %.12s%s), seed %llu, "
               "%d threads, %.1f s; mean loss %.4f nats/token\n",
               msg_text(model, shown, sizeof shown), k->sequences, k->length, src->sha256,
               src->own_vocabulary ? ", the model's tokenizer" : "", (unsigned long long)k->seed, threads, seconds,
               s->mean_loss);
    else
        printf("calibrated %s: %u sequences of %u tokens from %s (%zu tokens, sha256 %.12s), seed %llu, %d threads, "
               "%.1f s; mean loss %.4f nats/token\n",
               msg_text(model, shown, sizeof shown), k->sequences, k->length, msg_text(src->text, text, sizeof text),
               src->ids, src->sha256, (unsigned long long)k->seed, threads, seconds, s->mean_loss);
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

// --text: the text's ids under the model's vocabulary (its BOS left out: each window puts its own
// first), its sha256, and the check that one window fits. 0, or 2 after printing one line.
static int text_ids(const Model *m, const char *arg, int len, Source *src, int32_t **ids, size_t *n) {
    char err[1024];
    Text t = {0};
    if (text_load(&t, arg, INT32_MAX, err, sizeof err) ||
        (m->tokenizer && text_tokenize(&t, m->tokenizer, m->bos, INT32_MAX, err, sizeof err))) {
        text_free(&t);
        return cli_error("--text %s", err);
    }
    Sha256 h; // the text's bytes as read, after its cut: the BOS text_load puts first is not the file's
    sha256_init(&h);
    sha256_update(&h, t.bytes + 1, (size_t)t.n_bytes - 1);
    sha256_final_hex(&h, src->sha256);
    src->text_bytes = (size_t)t.n_bytes - 1;
    const size_t skip = src->bos >= 0 && t.n_tokens > 0 && t.tokens[0] == src->bos;
    *n = (size_t)t.n_tokens - skip;
    *ids = malloc(sizeof(int32_t) * (*n ? *n : 1));
    if (!*ids) {
        text_free(&t);
        return cli_error("out of memory for %zu tokens", *n);
    }
    memcpy(*ids, t.tokens + skip, sizeof(int32_t) * *n);
    text_free(&t);
    const size_t need = calib_window_need(len, src->bos);
    if (*n < need) {
        char shown[MSG_TEXT];
        return cli_error("--text %s: %zu tokens under the model's vocabulary, fewer than one sequence of --length %d "
                         "needs (%zu)", msg_text(arg, shown, sizeof shown), *n, len, need);
    }
    return 0;
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
    const char *dir = o.corpus ? o.corpus : "data/corpus";
    char text_path[4200];
    long chars;
    if (o.text && text_split_arg(o.text, text_path, sizeof text_path, &chars, err, sizeof err))
        return cli_error("--text: %s", err);
    {   // the outputs against the model and what the run reads: the text, or the corpus's training split
        char en[4200], zh[4200];
        snprintf(en, sizeof en, "%s/en.train.txt", dir);
        snprintf(zh, sizeof zh, "%s/zh.train.txt", dir);
        const CliFile outputs[2] = {{"--out", out}, {"its record (--out's .json)", json}},
                      inputs[3] = {{"--model", model_path}, {o.text ? "--text" : "the corpus", o.text ? text_path : en},
                                   {"the corpus", o.text ? NULL : zh}};
        if (cli_check_distinct(outputs, 2, inputs, 3, err, sizeof err)) return cli_error("%s", err);
    }
    Model m;
    if (model_load(&m, model_path, err, sizeof err)) return cli_error("%s", err);
    int len = o.length ? o.length : (m.config.max_seq_len < DEFAULT_LENGTH ? m.config.max_seq_len : DEFAULT_LENGTH);
    if (len > m.config.max_seq_len) {
        const int context = m.config.max_seq_len;
        model_free(&m);
        return cli_error("--length %d exceeds the model's context %d", len, context);
    }
    Source src = {.text = o.text, .own_vocabulary = m.tokenizer != NULL, .bos = m.tokenizer ? m.bos : MICRO_BOS};
    Corpus corpus = {0};
    int status = 2, corpus_loaded = 0;
    int *inputs = NULL, *targets = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    Kvq k = {0};
    if (o.text) {
        if ((status = text_ids(&m, o.text, len, &src, &ids, &n_ids)) != 0) goto done;
        status = 2;
    } else {
        char probe[4200];
        snprintf(probe, sizeof probe, "%s/en.train.txt", dir);
        if (safe_check_input(probe, err, sizeof err)) {
            cli_error("no corpus in %s (%s): extract it with bash scripts/corpus", msg_text(dir, shown, sizeof shown),
                      err);
            goto done;
        }
        if (corpus_load(&corpus, dir, err, sizeof err)) {
            cli_error("%s", err);
            goto done;
        }
        corpus_loaded = 1;
        src.corpus = &corpus;
        memcpy(src.sha256, corpus.sha256, sizeof src.sha256);
        if (!m.tokenizer && corpus.train_len < (size_t)len + 1) {
            cli_error("the corpus's training split (%zu bytes) is shorter than --length %d", corpus.train_len, len);
            goto done;
        }
        if (m.tokenizer) { // the model's own vocabulary: the split tokenised document by document
            if (calib_corpus_ids(m.tokenizer, m.bos, corpus.train, corpus.train_len, &ids, &n_ids, err, sizeof err)) {
                status = cli_error("%s", err);
                goto done;
            }
            if (n_ids < calib_window_need(len, src.bos)) {
                cli_error("the corpus's training split (%zu tokens under the model's vocabulary) is shorter than one "
                          "sequence of --length %d", n_ids, len);
                goto done;
            }
        }
    }
    src.ids = n_ids;
    size_t tokens = (size_t)o.sequences * (size_t)len;
    inputs = malloc(sizeof(int) * tokens);
    targets = malloc(sizeof(int) * tokens);
    if (!inputs || !targets) {
        status = cli_error("out of memory for %zu tokens", tokens);
        goto done;
    }
    if (ids) {
        calib_windows(ids, n_ids, src.bos, o.sequences, len, o.seed, inputs, targets);
    } else {
        // The trainer's own window sampler over the training split only (en.train + zh.train): the
        // validation text and the plates are what calibration will later be judged on.
        Rng rng;
        rng_seed(&rng, o.seed);
        batch_sample(corpus.train, corpus.train_len, &rng, o.sequences, len, inputs, targets);
    }
    free(ids);
    ids = NULL;
    CalibSettings s = {percents, N_PERCENTS, bits, N_BITS, o.threads};
    CalibSummary sum;
    double t0 = now_seconds();
    if (calibrate_model(&m, inputs, targets, o.sequences, len, &s, &k, &sum, err, sizeof err)) {
        status = cli_error("%s", err);
        goto done;
    }
    double seconds = now_seconds() - t0;
    k.seed = o.seed;
    hex_to_bytes(src.sha256, k.corpus_sha256, 32);
    Provenance prov = {&k, model_path, out, &src, &sum, o.threads, seconds, &o};
    if (kvq_save(&k, out, err, sizeof err) || safe_write(json, write_provenance, &prov, err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        status = 1;
        goto done;
    }
    print_summary(&k, &sum, model_path, &src, o.threads, seconds);
    printf("wrote %s (%zu bytes) and %s\n", msg_text(out, shown, sizeof shown), kvq_file_bytes(&k), json);
    status = 0;
done:
    kvq_free(&k);
    free(inputs);
    free(targets);
    free(ids);
    if (corpus_loaded) corpus_free(&corpus);
    model_free(&m);
    return status;
}
