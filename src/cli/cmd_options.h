// Every subcommand's options, parsed in full (and checked: specs, lists, ranges, text arguments)
// before the command loads anything. Each parse function takes the command's argv (argv[0] is the
// command's name), never exits, never allocates, prints nothing, and returns an OPTS_* status with
// one line in err on failure; the fuzz harness fuzz/fuzz_cli.c calls them directly.
#ifndef MICRO_CMD_OPTIONS_H
#define MICRO_CMD_OPTIONS_H

#include <stddef.h>

#include "capacity.h"
#include "model.h"
#include "opts.h"
#include "train.h"

#define EVAL_MAX_TEXTS 64
typedef struct {
    const char *model_path; // NULL: the default
    const char *calib_path; // NULL: beside the model (kvquant's calibration)
    const char *k_spec, *v_spec;
    const char *texts[EVAL_MAX_TEXTS]; // FILE[:CHARS]; none given: the two plates
    int n_texts, threads, csv;
    int window; // tokens per window, BOS included (0: the model's context, eval_default_window)
    int decode; // token by token instead of the fast evaluator's spans
    int second_half; // --score second-half[:N]: llama-perplexity's chunks of this many tokens (0: windows)
} EvalOptions;
int eval_parse(int argc, char **argv, EvalOptions *o, char *err, size_t errlen);

typedef struct {
    const char *prompt, *model_path, *calib_path, *k_spec, *v_spec;
    int n, threads;
    double temp;
    unsigned long long seed;
} GenerateOptions;
int generate_parse(int argc, char **argv, GenerateOptions *o, char *err, size_t errlen);

typedef struct {
    const char *llama2c, *gguf, *model_path;
} ExportOptions;
int export_parse(int argc, char **argv, ExportOptions *o, char *err, size_t errlen);

typedef struct {
    const char *text, *model_path;
    int csv;
} TokenizeOptions;
int tokenize_parse(int argc, char **argv, TokenizeOptions *o, char *err, size_t errlen);

#define BENCH_MAX_LIST 64
typedef struct {
    const char *model_path, *calib_path, *k_spec, *v_spec;
    int repeat;
    int threads[BENCH_MAX_LIST], n_threads;
    int positions[BENCH_MAX_LIST], n_positions;
    int positions_given; // the defaults are cut to the model's context; given lengths must fit it
    int batch;           // > 0: batched decode of this many conversations at 1024..2048 positions instead
    int block;           // the batched pool's block, tokens
    int steps;           // batched decode steps timed
    int block_given, steps_given; // --block and --steps belong to --batch
    int eval;            // the fast evaluator against the decode loop instead (bench_eval.h)
    int no_decode;       // with --eval: the fast evaluator alone (a large model's decode loop takes minutes)
} BenchOptions;
int bench_parse(int argc, char **argv, BenchOptions *o, char *err, size_t errlen);

#define CAPACITY_MAX_BITS 32
#define CAPACITY_MAX_SCHEMES 16
// Option values as given; capacity_parse applies the preset (or cmd_capacity the --model file's
// shape) first and these over it, so that the order of the flags does not matter.
typedef struct {
    double gpu_gb, util, weights_gb;
    int context, layers, kv_heads, head_dim;
    int given_gpu_gb, given_util, given_weights_gb, given_context, given_layers, given_kv_heads, given_head_dim;
} CapacityOverrides;
typedef struct {
    CapacityModel model; // the preset with every explicit flag applied
    const char *model_path; // --model: cmd_capacity reads the shape from the file instead of a preset
    CapacityOverrides over;
    double bits[CAPACITY_MAX_BITS];
    int n_bits; // bare widths shown (the defaults unless --bits, none when only --scheme is given)
    const char *schemes[CAPACITY_MAX_SCHEMES];
    int n_schemes, csv;
} CapacityOptions;
int capacity_parse(int argc, char **argv, CapacityOptions *o, char *err, size_t errlen);

typedef struct {
    const char *model_path, *calib_path, *en, *zh, *out_dir; // en / zh NULL: the default plates
    int threads, csv, json, files;
    int decode; // token by token instead of the fast evaluator's spans
    int long_run; // --long: panel (a) on the corpus's validation split, in windows
    const char *corpus; // --corpus DIR (NULL: data/corpus)
    int serve_fp16, serve_length; // panel (d): the pool in fp16 conversations, their tokens (0: context)
    int html; // --html: DIR/plate.html too (plate_page.h)
} PlateOptions;
int plate_parse(int argc, char **argv, PlateOptions *o, char *err, size_t errlen);

#define INSPECT_MAX_TEXTS 16
typedef struct {
    const char *model_path;
    const char *texts[INSPECT_MAX_TEXTS];
    const char *rot; // NULL, or a rotation as the cache option rot= takes it
    const char *out_dir; // --plot's folder (NULL: out)
    int n_texts, csv, plot;
} InspectOptions;
int inspect_parse(int argc, char **argv, InspectOptions *o, char *err, size_t errlen);

#define SERVE_MAX_SCHEMES 16
typedef struct {
    const char *model_path, *calib_path;
    const char *k_specs[SERVE_MAX_SCHEMES], *v_specs[SERVE_MAX_SCHEMES];
    int n_schemes;
    double pool_mb;     // 0: sized to hold `pool_fp16` fp16 conversations of `length` tokens
    int pool_fp16;
    int block, conversations, max_batch, threads, length, long_from;
    int workload;       // WorkloadKind
    unsigned long long seed;
    int csv, json;
} ServeBenchOptions;
int serve_bench_parse(int argc, char **argv, ServeBenchOptions *o, char *err, size_t errlen);

int train_parse(int argc, char **argv, TrainOptions *o, char *err, size_t errlen);

typedef struct {
    const char *model_path, *out, *corpus; // NULL: models/micro.bin, beside the model, data/corpus
    const char *text;                      // FILE[:CHARS] to calibrate from instead of the corpus; NULL: none
    int sequences, length, threads;        // length 0: the model's context, at most 2048
    unsigned long long seed;
} CalibrateOptions;
int calibrate_parse(int argc, char **argv, CalibrateOptions *o, char *err, size_t errlen);

#define SWEEP_MAX_TEXTS 16
#define SWEEP_MAX_GRIDS 64
typedef struct {
    const char *model_path, *calib_path;
    const char *texts[SWEEP_MAX_TEXTS];
    const char *grids[SWEEP_MAX_GRIDS];
    int n_texts, n_grids, preset_all, threads, json;
    int decode; // token by token instead of the fast evaluator's spans
} SweepOptions;
int sweep_parse(int argc, char **argv, SweepOptions *o, char *err, size_t errlen);

typedef struct {
    const char *model_path, *calib_path, *k_spec, *v_spec, *text, *out_dir;
    int layer, head, from, to; // from / to -1: the text's last 64 positions
} AttentionOptions;
int attention_parse(int argc, char **argv, AttentionOptions *o, char *err, size_t errlen);

// Checks the form of a --k / --v / --cache pair while parsing, before the model is known (one line
// in err); cmd_check_specs_for_model checks them against the loaded model's heads, head_dim and
// context, before any work.
int cmd_check_specs(const char *k_spec, const char *v_spec, char *err, size_t errlen);
int cmd_check_specs_for_model(const Model *m, const char *k_spec, const char *v_spec, char *err, size_t errlen);
// One more --text FILE[:CHARS] (repeatable, at most max): 0, or OPTS_ERROR with the reason in p's err.
int cmd_text_option(Opts *p, const char **texts, int *n, int max);
// Checks the FILE[:CHARS] form of a text argument without opening it.
int cmd_check_text_arg(const char *option, const char *arg, char *err, size_t errlen);

#endif
