// micro sweep: a grid of cache specs on the same texts, one row per (text, spec) with real bits,
// the increase over fp32 with its interval, top-1 agreement and KL — eval's rows, for many specs at
// once (the fp32 reference is decoded once per text). Grids are specs with braces: each {a|b|...}
// stands for every alternative, so "int:bits={2|3|4}{|,rot=hadamard}" is six specs.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "clock.h"
#include "cmd_options.h"
#include "commands.h"
#include "eval.h"
#include "grid.h"
#include "membw.h"
#include "msgtext.h"
#include "text.h"

#define SWEEP_MAX_SPECS 4096

// Every family at every width it supports, with the options people compare.
static const char *const preset_all[] = {
    "fp16", "bf16", "fp8:{e4m3|e5m2}{|,scale=token}", "int:bits={1|2|3|4|5|6|7|8}", "int:bits={2|3|4},levels=full",
    "int:bits={2|3|4},{rot=hadamard|sink=1|outliers=1}", "kivi:bits={2|3|4}", "q8_0", "q4_0", "q4_1", "q5_0",
    "q5_1", "iq4_nl", "kvquant:bits={1|2|3|4}{|,outliers=0}", "quarot:bits={2|3|4}",
    "mx:elem={e2m1|e2m3|e3m2|e4m3|e5m2|int8}", "nvfp4{|:4over6|:scale2=none|:scale2=calib}", "turboquant:bits={1|2|3|4|5|6|7|8}",
    "turboquant:bits={2|3|4|5},mode=prod", "turboquant:preset={k8v4|4bit_nc|k3v4_nc|3bit_nc}",
};

static const char *sweep_usage =
    "usage: micro sweep [options]\n"
    "  Evaluates a grid of cache specs on the same texts: one row per (text, spec) with the real bits\n"
    "  per cached number, the loss and its increase over the fp32 cache with the 95% interval, top-1\n"
    "  agreement and KL, as `micro eval --csv` prints them (the fp32 reference decoded once per text).\n"
    "options:\n"
    "  --grid SPEC         specs with braces, each {a|b|...} every alternative (both keys and values):\n"
    "                      \"int:bits={2|3|4}{|,rot=hadamard}\" is six specs; repeatable\n"
    "  --preset all        every family at every width it supports (with --grid: both)\n"
    "  --text FILE[:CHARS] a text (at most the model's context); repeatable (default the two plates)\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --calib FILE        kvquant's calibration (default beside the model: models/micro.kvq)\n"
    "  --threads N         decode threads, 1..256 (default 1); results do not depend on it\n"
    "  --decode            decode token by token (as a server does) instead of the fast evaluator\n"
    "  --json              JSON instead of CSV\n"
    "  -h, --help          this help\n"
    "A progress line with the time left goes to stderr when it is a terminal.\n";

int sweep_parse(int argc, char **argv, SweepOptions *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->threads = 1;
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        const char *preset = NULL;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--json")) bad = opts_flag(&p), o->json = 1;
        else if (opts_is(&p, "--text")) bad = cmd_text_option(&p, o->texts, &o->n_texts, SWEEP_MAX_TEXTS);
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--calib")) bad = opts_path(&p, &o->calib_path);
        else if (opts_is(&p, "--threads")) bad = opts_int(&p, 1, 256, &o->threads);
        else if (opts_is(&p, "--decode")) bad = opts_flag(&p), o->decode = 1;
        else if (opts_is(&p, "--preset")) {
            bad = opts_string(&p, &preset);
            if (!bad && strcmp(preset, "all") != 0) {
                char shown[MSG_TEXT];
                snprintf(err, errlen, "--preset %s: the only preset is 'all'", msg_text(preset, shown, sizeof shown));
                return OPTS_ERROR;
            }
            o->preset_all = 1;
        } else if (opts_is(&p, "--grid")) {
            if (o->n_grids == SWEEP_MAX_GRIDS) {
                snprintf(err, errlen, "--grid: at most %d", SWEEP_MAX_GRIDS);
                return OPTS_ERROR;
            }
            bad = opts_value(&p, &o->grids[o->n_grids++]);
        } else
            return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (!o->n_grids && !o->preset_all) {
        snprintf(err, errlen, "give --grid SPEC or --preset all");
        return OPTS_ERROR;
    }
    return OPTS_RUN;
}

static void print_row(int json, int first, const char *text, const EvalResult *r, double delta) {
    if (json) {
        printf("%s\n  {\"text\": ", first ? "" : ",");
        json_string_to(stdout, text);
        printf(", \"k_cache\": ");
        json_string_to(stdout, r->k_spec);
        printf(", \"v_cache\": ");
        json_string_to(stdout, r->v_spec);
        printf(", \"tokens\": %d, \"loss\": %.6f, \"delta\": %.6f, \"bits_per_element\": %.4f, \"cache_bytes\": %zu, "
               "\"top1_agree\": %.6f, \"kl\": %.6g, \"delta_lo\": %.6f, \"delta_hi\": %.6f, \"kl_p99\": %.6g, "
               "\"kl_max\": %.6g}",
               r->tokens, r->loss, delta, r->bits_per_element, r->cache_bytes, r->top1_agree, r->kl, r->delta_lo,
               r->delta_hi, r->kl_p99, r->kl_max);
        return;
    }
    csv_field(text);
    putchar(',');
    csv_field(r->k_spec);
    putchar(',');
    csv_field(r->v_spec);
    printf(",%d,%.6f,%.6f,%.4f,%zu,%.6f,%.6g,%.6f,%.6f,%.6g,%.6g\n", r->tokens, r->loss, delta, r->bits_per_element,
           r->cache_bytes, r->top1_agree, r->kl, r->delta_lo, r->delta_hi, r->kl_p99, r->kl_max);
}

int cmd_sweep(int argc, char **argv) {
    SweepOptions o;
    char err[512], path[4096], default_en[4200], default_zh[4200];
    int done = cli_after_parse(sweep_parse(argc, argv, &o, err, sizeof err), err, sweep_usage);
    if (done >= 0) return done;
    SpecList specs = {calloc(SWEEP_MAX_SPECS, sizeof(char *)), 0, SWEEP_MAX_SPECS};
    if (!specs.specs) return cli_error("out of memory");
    int status = 0;
    for (size_t i = 0; o.preset_all && i < sizeof preset_all / sizeof preset_all[0] && !status; i++)
        if (grid_expand(preset_all[i], &specs, err, sizeof err)) status = cli_error("%s", err);
    const int n_preset = specs.n; // the preset's specs come first: a model's shape may skip them
    for (int i = 0; i < o.n_grids && !status; i++)
        if (grid_expand(o.grids[i], &specs, err, sizeof err)) status = cli_error("--grid: %s", err);
    // Every spec's form before any work, so that a typo in the 40th does not cost the first 39.
    for (int i = 0; i < specs.n && !status; i++)
        if (cmd_check_specs(specs.specs[i], specs.specs[i], err, sizeof err)) status = cli_error("%s", err);
    if (o.n_texts == 0) {
        snprintf(default_en, sizeof default_en, "%s:1500", cli_default_path(NULL, "data/plates/en.txt", path, sizeof path));
        snprintf(default_zh, sizeof default_zh, "%s:500", cli_default_path(NULL, "data/plates/zh.txt", path, sizeof path));
        o.texts[o.n_texts++] = default_en;
        o.texts[o.n_texts++] = default_zh;
    }
    Text texts[SWEEP_MAX_TEXTS] = {0};
    for (int i = 0; i < o.n_texts && !status; i++)
        if (text_load(&texts[i], o.texts[i], INT_MAX, err, sizeof err)) status = cli_error("%s", err);
    Model m = {0};
    if (!status && (cli_load_any_model(&m, o.model_path, o.calib_path, err, sizeof err) ||
                    cli_tokenize_texts(&m, texts, o.n_texts, err, sizeof err)))
        status = cli_error("%s", err);
    // A spec the user named must fit the model; one of the preset's that does not is left out with a
    // note (a grouped-query or latent model cannot take every width of every family).
    int kept = 0;
    for (int i = 0; i < specs.n; i++) {
        if (status || !cmd_check_specs_for_model(&m, specs.specs[i], specs.specs[i], err, sizeof err)) {
            specs.specs[kept++] = specs.specs[i];
        } else if (i < n_preset) {
            fprintf(stderr, "micro: sweep --preset all: not run on this model: %s (%s)\n", specs.specs[i], err);
            free(specs.specs[i]);
        } else {
            status = cli_error("%s", err);
            specs.specs[kept++] = specs.specs[i];
        }
    }
    specs.n = kept;
    for (int i = 0; i < o.n_texts && !status; i++)
        if (texts[i].n_tokens > m.config.max_seq_len) {
            text_context_error(texts[i].path, (size_t)texts[i].n_tokens, m.config.max_seq_len, err, sizeof err);
            status = cli_error("%s (micro eval --window evaluates a longer text in windows)", err);
        }
    const int progress = isatty(STDERR_FILENO);
    const double start = seconds_now();
    if (!status && !o.json)
        printf("text,k_cache,v_cache,tokens,loss,delta,bits_per_element,cache_bytes,top1_agree,kl,delta_lo,delta_hi,kl_p99,kl_max\n");
    if (!status && o.json) printf("[");
    int rows = 0;
    for (int t = 0; t < o.n_texts && !status; t++) {
        EvalTrace trace;
        EvalResult ref;
        if (eval_trace_alloc(&trace, &m, texts[t].n_tokens)) {
            status = cli_error("out of memory");
            break;
        }
        int rc = eval_tokens(&m, texts[t].tokens, texts[t].n_tokens, &codec_spec_fp32, &codec_spec_fp32, o.threads, o.decode, &trace, NULL, &ref, err,
                             sizeof err);
        for (int i = 0; i < specs.n && !rc; i++) {
            EvalResult r;
            rc = eval_tokens(&m, texts[t].tokens, texts[t].n_tokens, cli_spec(specs.specs[i]), cli_spec(specs.specs[i]), o.threads, o.decode, NULL,
                             &trace, &r, err, sizeof err);
            if (rc) break;
            print_row(o.json, rows++ == 0, texts[t].name, &r, r.loss - ref.loss);
            fflush(stdout);
            if (progress) {
                const int done_rows = t * specs.n + i + 1, total = o.n_texts * specs.n;
                const double left = (seconds_now() - start) / done_rows * (total - done_rows);
                fprintf(stderr, "\rsweep: %d/%d, about %.0f s left   ", done_rows, total, left);
            }
        }
        eval_trace_free(&trace);
        if (rc) {
            if (progress) fputc('\n', stderr);
            cli_error("%s: %s", texts[t].path, err);
            status = rc == EVAL_NOT_FINITE ? 1 : 2;
        }
    }
    if (progress && !status) fprintf(stderr, "\rsweep: %d rows in %.0f s%20s\n", rows, seconds_now() - start, "");
    if (!status && o.json) printf("\n]\n");
    for (int i = 0; i < o.n_texts; i++) text_free(&texts[i]);
    model_free(&m);
    grid_free(&specs);
    return status;
}
