// micro eval: held-out loss per text through a chosen KV cache, and its increase over fp32 (the
// evaluator is src/eval/eval.c).
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_options.h"
#include "commands.h"
#include "eval.h"
#include "finite.h"
#include "model_file.h"
#include "text.h"

static const char *eval_usage =
    "usage: micro eval [options]\n"
    "  Mean negative log-likelihood (nats per predicted token) of each text, run from BOS through the\n"
    "  chosen KV cache, and its increase (delta) over the fp32 cache. Positions go through the weights\n"
    "  64 at a time, each token's key and value encoded into the cache as decoding would, each position\n"
    "  attending to what the cache held at its step (equal to decoding up to float rounding).\n"
    "options:\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --calib FILE        kvquant's calibration (default beside the model: models/micro.kvq)\n"
    "  --text FILE[:CHARS] a text to score, cut after CHARS UTF-8 characters; repeatable\n"
    "                      (default data/plates/en.txt:1500 and data/plates/zh.txt:500)\n"
    "  --cache SPEC        codec for keys and values (default fp32); see `micro --help` for specs\n"
    "  --k SPEC, --v SPEC  codec for keys / values alone (override --cache)\n"
    "  --window N          a text longer than N tokens (BOS included) is cut into consecutive windows\n"
    "                      of N - 1 tokens, each decoded from BOS (a model without BOS: from the token\n"
    "                      before); every token is predicted once and the loss is the mean over all of\n"
    "                      them. At most the model's context; the default is the context, cut so that\n"
    "                      the fp32 run and the scheme's hold at most 1 GiB of cache (2 x an fp32 cache\n"
    "                      each, its codes and a decoded copy). A file in the corpus's form (documents\n"
    "                      each after a 0x01 byte, as data/corpus/en.val.txt) is windowed document by\n"
    "                      document\n"
    "  --score second-half[:N]  score as llama-perplexity does, for a number beside its tables: the\n"
    "                      text's tokens (BOS first when the model adds one) in chunks of N (default\n"
    "                      512, at most the context; the rest left out), each run from the start with\n"
    "                      its first token made BOS (when the model has one) and only the second half's\n"
    "                      predictions scored (N/2 - 1 of them); --score windows is the default above\n"
    "  --decode            decode token by token instead (as a server does; slower)\n"
    "  --threads N         decode threads, 1..256 (default 1; at most the online cores are used);\n"
    "                      results do not depend on it\n"
    "  --csv               print CSV: text,k_cache,v_cache,tokens,loss,delta,bits_per_element,cache_bytes,\n"
    "                      top1_agree,kl,delta_lo,delta_hi (top1_agree: share of (layer, head, position)\n"
    "                      whose most-attended position matches the fp32 cache's; kl: mean KL(fp32 || this)\n"
    "                      of next-token distributions, nats; delta_lo/hi: the increase's 95% interval, a\n"
    "                      paired bootstrap over blocks of 64 tokens, 2000 resamples, seeded; kl_p99,\n"
    "                      kl_max: the 99th percentile (nearest rank) and the largest KL of one step)\n"
    "  -h, --help          this help\n";

#define SECOND_HALF_DEFAULT 512 // llama-perplexity's -c 512, the context of most published tables

// --score windows | second-half[:N]: 0 for windows, else the chunk's tokens.
static int parse_score(Opts *p, int *second_half) {
    const char *v;
    if (opts_string(p, &v)) return -1;
    if (strcmp(v, "windows") == 0) return *second_half = 0, 0;
    if (strncmp(v, "second-half", 11) != 0 || (v[11] && v[11] != ':'))
        return opts_fail(p, "--score takes windows or second-half[:N]");
    if (!v[11]) return *second_half = SECOND_HALF_DEFAULT, 0;
    char *end;
    errno = 0;
    const long n = strtol(v + 12, &end, 10);
    if (end == v + 12 || *end || errno || n < 4 || n > (1 << 20))
        return opts_fail(p, "--score second-half:N takes a whole number of tokens from 4 to 1048576");
    return *second_half = (int)n, 0;
}

int eval_parse(int argc, char **argv, EvalOptions *o, char *err, size_t errlen) {
    const char *cache = "fp32";
    memset(o, 0, sizeof *o);
    o->threads = 1;
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--csv")) bad = opts_flag(&p), o->csv = 1;
        else if (opts_is(&p, "--text")) bad = cmd_text_option(&p, o->texts, &o->n_texts, EVAL_MAX_TEXTS);
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--calib")) bad = opts_path(&p, &o->calib_path);
        else if (opts_is(&p, "--cache")) bad = opts_string(&p, &cache);
        else if (opts_is(&p, "--k")) bad = opts_string(&p, &o->k_spec);
        else if (opts_is(&p, "--v")) bad = opts_string(&p, &o->v_spec);
        else if (opts_is(&p, "--threads")) bad = opts_int(&p, 1, 256, &o->threads);
        else if (opts_is(&p, "--window")) bad = opts_int(&p, 2, 1 << 20, &o->window);
        else if (opts_is(&p, "--decode")) bad = opts_flag(&p), o->decode = 1;
        else if (opts_is(&p, "--score")) bad = parse_score(&p, &o->second_half);
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (!o->k_spec) o->k_spec = cache;
    if (!o->v_spec) o->v_spec = cache;
    if (o->second_half && o->window) {
        snprintf(err, errlen, "--score second-half cuts the text into its own chunks: give it or --window, not both");
        return OPTS_ERROR;
    }
    return cmd_check_specs(o->k_spec, o->v_spec, err, errlen) ? OPTS_ERROR : OPTS_RUN;
}

int cmd_eval(int argc, char **argv) {
    EvalOptions o;
    char err[512], path[4096];
    int done = cli_after_parse(eval_parse(argc, argv, &o, err, sizeof err), err, eval_usage);
    if (done >= 0) return done;
    const char *model_path = o.model_path, *k_spec = o.k_spec, *v_spec = o.v_spec, **texts = o.texts;
    int n_texts = o.n_texts, threads = o.threads, csv = o.csv;
    char default_en[4200], default_zh[4200];
    if (n_texts == 0) {
        snprintf(default_en, sizeof default_en, "%s:1500", cli_default_path(NULL, "data/plates/en.txt", path, sizeof path));
        snprintf(default_zh, sizeof default_zh, "%s:500", cli_default_path(NULL, "data/plates/zh.txt", path, sizeof path));
        texts[n_texts++] = default_en;
        texts[n_texts++] = default_zh;
    }
    Text *loaded = calloc((size_t)n_texts, sizeof *loaded);
    if (!loaded) return cli_error("out of memory");
    int status = 0;
    for (int i = 0; i < n_texts && !status; i++)
        if (text_load(&loaded[i], texts[i], INT_MAX, err, sizeof err)) status = cli_error("%s", err);
    Model m = {0};
    if (!status && (cli_load_any_model(&m, model_path, o.calib_path, err, sizeof err) ||
                    cli_tokenize_texts(&m, loaded, n_texts, err, sizeof err)))
        status = cli_error("%s", err);
    if (!status && cmd_check_specs_for_model(&m, k_spec, v_spec, err, sizeof err)) status = cli_error("%s", err);
    const int window = o.window ? o.window : eval_default_window(&m.config, 1);
    if (!status && window > m.config.max_seq_len)
        status = cli_error("--window %d is longer than the model's context of %d tokens", window, m.config.max_seq_len);
    if (!status && o.second_half > m.config.max_seq_len)
        status = cli_error("--score second-half:%d is longer than the model's context of %d tokens", o.second_half,
                           m.config.max_seq_len);
    if (!status && csv)
        printf("text,k_cache,v_cache,tokens,loss,delta,bits_per_element,cache_bytes,top1_agree,kl,delta_lo,delta_hi,kl_p99,kl_max\n");
    if (!status && !csv)
        printf("%-6s %-34s %-34s %6s %8s %9s %-19s %6s %9s %6s %9s\n", "text", "k_cache", "v_cache", "tokens", "loss",
               "delta", "95% interval", "bits", "bytes", "top1", "kl");
    const CodecSpec *k_parsed = cli_spec(k_spec), *v_parsed = cli_spec(v_spec);
    for (int i = 0; i < n_texts && !status; i++) {
        EvalResult ref = {0}, r = {0};
        const Text *t = &loaded[i];
        int failed = o.second_half ? eval_second_half(&m, t->tokens, t->n_tokens, o.second_half, &k_parsed, &v_parsed,
                                                      1, threads, o.decode, &ref, &r, err, sizeof err)
                                   : eval_windows(&m, t->tokens, t->n_tokens, window, &k_parsed, &v_parsed, 1, threads,
                                                  o.decode, &ref, &r, NULL, err, sizeof err);
        if (failed) {
            cli_error("%s: %s", loaded[i].path, err);
            status = failed == EVAL_NOT_FINITE ? 1 : 2; // overflow is the run's failure, not the user's input
            break;
        }
        double delta = r.loss - ref.loss;
        if (csv) {
            csv_field(loaded[i].name);
            putchar(',');
            csv_field(r.k_spec);
            putchar(',');
            csv_field(r.v_spec);
            printf(",%d,%.6f,%.6f,%.4f,%zu,%.6f,%.6g,%.6f,%.6f,%.6g,%.6g\n", r.tokens, r.loss, delta,
                   r.bits_per_element, r.cache_bytes, r.top1_agree, r.kl, r.delta_lo, r.delta_hi, r.kl_p99, r.kl_max);
        } else {
            char interval[40];
            snprintf(interval, sizeof interval, "[%+.4f, %+.4f]", r.delta_lo, r.delta_hi);
            printf("%-6s %-34s %-34s %6d %8.4f %+9.4f %-19s %6.2f %9zu %6.4f %9.2e\n", loaded[i].name, r.k_spec,
                   r.v_spec, r.tokens, r.loss, delta, interval, r.bits_per_element, r.cache_bytes, r.top1_agree, r.kl);
        }
    }
    for (int i = 0; i < n_texts; i++) text_free(&loaded[i]);
    free(loaded);
    model_free(&m);
    return status;
}
