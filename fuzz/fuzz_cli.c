// Every command's option parser on arbitrary argument vectors: the input's lines are the arguments
// (the first names the command). A parser must give back one of its statuses, one line of message on
// failure, and on success options inside their documented ranges, without leaking or exiting.
#include <math.h>

#include "cmd_options.h"
#include "fuzz.h"
#include "gpt.h"

#define MAX_ARGS 64

static void check_status(int status, const char *err, size_t errlen) {
    FUZZ_REQUIRE(status == OPTS_RUN || status == OPTS_HELP || status == OPTS_ERROR || status == OPTS_UNKNOWN);
    if (status == OPTS_ERROR || status == OPTS_UNKNOWN) fuzz_check_message(err, errlen);
}

static void parse(const char *cmd, int argc, char **argv) {
    char err[512];
    int status;
    if (!strcmp(cmd, "eval")) {
        EvalOptions o;
        check_status(status = eval_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN) FUZZ_REQUIRE(o.threads >= 1 && o.threads <= 256 && o.n_texts <= EVAL_MAX_TEXTS && o.k_spec && o.v_spec);
    } else if (!strcmp(cmd, "generate")) {
        GenerateOptions o;
        check_status(status = generate_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN) FUZZ_REQUIRE(o.prompt && o.n >= 0 && o.temp >= 0 && o.temp <= 100 && isfinite(o.temp));
    } else if (!strcmp(cmd, "export")) {
        ExportOptions o;
        check_status(status = export_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN) { // one format, a non-empty path
            FUZZ_REQUIRE(!o.llama2c != !o.gguf);
            FUZZ_REQUIRE(o.llama2c ? o.llama2c[0] : o.gguf[0]);
        }
    } else if (!strcmp(cmd, "bench")) {
        BenchOptions o;
        check_status(status = bench_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN) {
            FUZZ_REQUIRE(o.n_positions >= 1 && o.n_positions <= BENCH_MAX_LIST);
            FUZZ_REQUIRE(o.n_threads >= 1 && o.n_threads <= BENCH_MAX_LIST);
            for (int i = 0; i < o.n_positions; i++) FUZZ_REQUIRE(o.positions[i] >= 2);
            for (int i = 0; i < o.n_threads; i++) FUZZ_REQUIRE(o.threads[i] >= 1 && o.threads[i] <= 256);
        }
    } else if (!strcmp(cmd, "capacity")) {
        CapacityOptions o;
        check_status(status = capacity_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN) {
            FUZZ_REQUIRE(capacity_check(&o.model, err, sizeof err) == 0);
            FUZZ_REQUIRE(o.n_bits + o.n_schemes > 0); // never an empty table
            for (int i = 0; i < o.n_bits; i++) FUZZ_REQUIRE(o.bits[i] > 0 && o.bits[i] <= 64);
        }
    } else if (!strcmp(cmd, "plate")) {
        PlateOptions o;
        check_status(status = plate_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN) FUZZ_REQUIRE(o.threads >= 1 && o.threads <= 8 && !(o.csv && o.json));
    } else if (!strcmp(cmd, "tokenize")) {
        TokenizeOptions o;
        check_status(status = tokenize_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN) FUZZ_REQUIRE(o.text != NULL);
    } else if (!strcmp(cmd, "inspect")) {
        InspectOptions o;
        check_status(status = inspect_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
    } else if (!strcmp(cmd, "serve-bench")) {
        ServeBenchOptions o;
        check_status(status = serve_bench_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN) {
            FUZZ_REQUIRE(o.n_schemes >= 1 && o.n_schemes <= SERVE_MAX_SCHEMES && !(o.csv && o.json));
            for (int i = 0; i < o.n_schemes; i++) FUZZ_REQUIRE(o.k_specs[i] && o.v_specs[i]);
            FUZZ_REQUIRE(o.block >= 1 && o.conversations >= 1 && o.max_batch >= 1 && o.threads >= 1 && o.length >= 2);
            FUZZ_REQUIRE(o.pool_mb == 0 || (o.pool_mb > 0 && isfinite(o.pool_mb)));
        }
    } else if (!strcmp(cmd, "train")) {
        TrainOptions o;
        check_status(status = train_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN) {
            FUZZ_REQUIRE(model_config_validate(&o.config, err, sizeof err) == 0);
            FUZZ_REQUIRE(o.seq <= o.config.max_seq_len && o.warmup <= o.steps);
            FUZZ_REQUIRE((long long)o.batch * o.seq <= TRAIN_MAX_STEP_TOKENS);
        }
    } else if (!strcmp(cmd, "sweep")) {
        SweepOptions o;
        check_status(status = sweep_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN)
            FUZZ_REQUIRE(o.n_texts <= SWEEP_MAX_TEXTS && o.n_grids <= SWEEP_MAX_GRIDS && o.threads >= 1 && o.threads <= 256 &&
                         (o.n_grids > 0 || o.preset_all));
    } else if (!strcmp(cmd, "attention")) {
        AttentionOptions o;
        check_status(status = attention_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN) FUZZ_REQUIRE(o.k_spec && o.v_spec && o.layer >= 0 && o.head >= 0);
    } else if (!strcmp(cmd, "calibrate")) {
        CalibrateOptions o;
        check_status(status = calibrate_parse(argc, argv, &o, err, sizeof err), err, sizeof err);
        if (status == OPTS_RUN)
            FUZZ_REQUIRE(o.sequences >= 1 && o.sequences <= 4096 && o.length >= 0 && o.length <= 1 << 16 &&
                         o.threads >= 1 && o.threads <= 256);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    char *text = malloc(size + 1), *argv[MAX_ARGS + 1];
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    int argc = 0;
    for (char *p = text; argc < MAX_ARGS;) {
        argv[argc++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = '\0';
        p = nl + 1;
    }
    argv[argc] = NULL;
    parse(argv[0], argc, argv);
    free(text);
    return 0;
}
