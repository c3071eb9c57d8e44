// micro attention: the plate's "the rounded keys no longer pick out the right positions", as a
// picture. One text is decoded twice, with the fp32 cache and with the chosen one; for a window of
// query positions, one layer and head, the attention weights of both are drawn side by side
// (DIR/attention.svg and .png, by src/cli/figures/attention.gp), each query's most-attended position marked,
// the queries where the two disagree in another colour.
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_options.h"
#include "commands.h"
#include "figure.h"
#include "finite.h"
#include "forward.h"
#include "text.h"

#define ATTENTION_MAX_QUERIES 256

static const char *attention_usage =
    "usage: micro attention --cache SPEC [options]\n"
    "  Draws DIR/attention.svg and .png: for one layer and head, the attention weights of a window of\n"
    "  query positions with the fp32 cache beside those with SPEC, each query's most-attended\n"
    "  position marked (red where the two caches disagree), and prints the agreement.\n"
    "options:\n"
    "  --cache SPEC        codec for keys and values; --k / --v for one stream\n"
    "  --layer L           layer, from 0 (default 0)\n"
    "  --head H            query head, from 0 (default 0)\n"
    "  --from A, --to B    query positions A..B, at most 256 of them (default the text's last 64)\n"
    "  --text FILE[:CHARS] the text (default data/plates/en.txt:300); at most the model's context\n"
    "  --out DIR           folder for the figure (default out)\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --calib FILE        kvquant's calibration (default beside the model: models/micro.kvq)\n"
    "  -h, --help          this help\n";

int attention_parse(int argc, char **argv, AttentionOptions *o, char *err, size_t errlen) {
    const char *cache = NULL;
    memset(o, 0, sizeof *o);
    o->from = o->to = -1;
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--cache")) bad = opts_string(&p, &cache);
        else if (opts_is(&p, "--k")) bad = opts_string(&p, &o->k_spec);
        else if (opts_is(&p, "--v")) bad = opts_string(&p, &o->v_spec);
        else if (opts_is(&p, "--layer")) bad = opts_int(&p, 0, 1 << 20, &o->layer);
        else if (opts_is(&p, "--head")) bad = opts_int(&p, 0, 1 << 20, &o->head);
        else if (opts_is(&p, "--from")) bad = opts_int(&p, 0, 1 << 20, &o->from);
        else if (opts_is(&p, "--to")) bad = opts_int(&p, 0, 1 << 20, &o->to);
        else if (opts_is(&p, "--text")) bad = opts_value(&p, &o->text) || cmd_check_text_arg("--text", o->text, err, errlen);
        else if (opts_is(&p, "--out")) bad = opts_path(&p, &o->out_dir);
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--calib")) bad = opts_path(&p, &o->calib_path);
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (!cache && !o->k_spec && !o->v_spec) {
        snprintf(err, errlen, "give the cache to compare with fp32: --cache SPEC (or --k / --v)");
        return OPTS_ERROR;
    }
    if (!o->k_spec) o->k_spec = cache ? cache : "fp32";
    if (!o->v_spec) o->v_spec = cache ? cache : "fp32";
    if (o->from >= 0 && o->to >= 0 && o->from > o->to) {
        snprintf(err, errlen, "--from %d is after --to %d", o->from, o->to);
        return OPTS_ERROR;
    }
    return cmd_check_specs(o->k_spec, o->v_spec, err, errlen) ? OPTS_ERROR : OPTS_RUN;
}

// The most-attended position: the first of equal weights, as the evaluator counts it.
static int top_of(const float *w, int n) {
    int top = 0;
    for (int j = 1; j < n; j++) top = w[j] > w[top] ? j : top;
    return top;
}

// Writes the weights of queries [from, to] over keys [0, to] as a matrix (zeros beyond each query).
static void write_matrix(FILE *f, const float *w, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) fprintf(f, "%.6g%c", w[(size_t)r * cols + c], c + 1 < cols ? ' ' : '\n');
}

// The figure's data to a private folder, then DIR/attention.svg and .png (figure.h). An exit status.
static int draw(const char *out_dir, const char *title, int from, const char *spec, const float *w_ref,
                const float *w_sch, const int *top_ref, const int *top_sch, int rows, int cols) {
    char err[600], first[16];
    FigureData d;
    if (figure_data_open(&d, err, sizeof err)) return cli_error("%s", err);
    snprintf(first, sizeof first, "%d", from);
    const FigureSpec fig = {"attention", out_dir, "attention", 1200, 560, 12, 10, {title, first, spec, NULL}};
    FILE *f;
    int bad = !(f = figure_data_file(&d, "fp32.mat", err, sizeof err));
    if (!bad) write_matrix(f, w_ref, rows, cols), bad = figure_data_done(f, "fp32.mat", err, sizeof err);
    if (!bad) bad = !(f = figure_data_file(&d, "scheme.mat", err, sizeof err));
    if (!bad) write_matrix(f, w_sch, rows, cols), bad = figure_data_done(f, "scheme.mat", err, sizeof err);
    if (!bad) bad = !(f = figure_data_file(&d, "top.dat", err, sizeof err));
    if (!bad) {
        for (int r = 0; r < rows; r++) fprintf(f, "%d %d %d %d\n", r, top_ref[r], top_sch[r], top_ref[r] == top_sch[r]);
        bad = figure_data_done(f, "top.dat", err, sizeof err);
    }
    return figure_finish(&d, &fig, bad ? err : NULL);
}

int cmd_attention(int argc, char **argv) {
    AttentionOptions o;
    char err[600], path[4096], default_text[4200];
    int done = cli_after_parse(attention_parse(argc, argv, &o, err, sizeof err), err, attention_usage);
    if (done >= 0) return done;
    if (!o.text) {
        snprintf(default_text, sizeof default_text, "%s:300", cli_default_path(NULL, "data/plates/en.txt", path, sizeof path));
        o.text = default_text;
    }
    const char *out_dir = o.out_dir ? o.out_dir : "out";
    Text text = {0};
    Model m = {0};
    if (text_load(&text, o.text, INT_MAX, err, sizeof err)) return cli_error("%s", err);
    int status = 0;
    // Any vocabulary: the text's ids are its tokenizer's (positions, not bytes, on the figure's axes).
    if (cli_load_any_model(&m, o.model_path, o.calib_path, err, sizeof err) || cli_tokenize_texts(&m, &text, 1, err, sizeof err))
        status = cli_error("%s", err);
    if (!status && cmd_check_specs_for_model(&m, o.k_spec, o.v_spec, err, sizeof err)) status = cli_error("%s", err);
    const int n = text.n_tokens;
    if (!status && n > m.config.max_seq_len) {
        text_context_error(text.path, (size_t)n, m.config.max_seq_len, err, sizeof err);
        status = cli_error("%s", err);
    }
    if (!status && (o.layer >= m.config.n_layers || o.head >= m.config.n_heads))
        status = cli_error("--layer %d --head %d: the model has %d layers of %d heads", o.layer, o.head,
                           m.config.n_layers, m.config.n_heads);
    int from = o.from, to = o.to;
    if (to < 0) to = n - 1;
    if (from < 0) from = to - 63 > 0 ? to - 63 : 0;
    if (!status && (from > to || to >= n || to - from + 1 > ATTENTION_MAX_QUERIES))
        status = cli_error("queries %d..%d: the text has positions 0..%d, and at most %d queries are drawn", from, to,
                           n - 1, ATTENTION_MAX_QUERIES);
    if (!status) status = cli_out_dir(out_dir);
    if (!status && figure_check_outputs(out_dir, "attention", err, sizeof err)) status = cli_error("%s", err);
    Decoder ref = {0}, sch = {0};
    const int rows = to - from + 1, cols = to + 1;
    float *w_ref = NULL, *w_sch = NULL;
    int *top_ref = NULL, *top_sch = NULL;
    if (!status) {
        w_ref = calloc((size_t)rows * cols, sizeof(float)), w_sch = calloc((size_t)rows * cols, sizeof(float));
        top_ref = calloc((size_t)rows, sizeof(int)), top_sch = calloc((size_t)rows, sizeof(int));
        if (!w_ref || !w_sch || !top_ref || !top_sch) status = cli_error("out of memory");
    }
    if (!status && (decoder_init(&ref, &m, &codec_spec_fp32, &codec_spec_fp32, n, 1, err, sizeof err) ||
                    decoder_init(&sch, &m, cli_spec(o.k_spec), cli_spec(o.v_spec), n, 1, err, sizeof err)))
        status = cli_error("%s", err);
    if (!status) {
        ref.fwd.keep_layer = sch.fwd.keep_layer = o.layer;
        const int ctx = ref.fwd.context;
        for (int t = 0; t <= to && !status; t++) {
            const int finite = all_finite(decoder_forward(&ref, text.tokens[t], t), (size_t)m.config.vocab_size) &&
                               all_finite(decoder_forward(&sch, text.tokens[t], t), (size_t)m.config.vocab_size);
            if (!finite) {
                fprintf(stderr, "micro: %s: the logits are " NONFINITE_REASON "\n", text.path);
                status = 1;
            } else if (t >= from) {
                const float *a = ref.fwd.kept_att + (size_t)o.head * ctx, *b = sch.fwd.kept_att + (size_t)o.head * ctx;
                memcpy(w_ref + (size_t)(t - from) * cols, a, sizeof(float) * (size_t)(t + 1));
                memcpy(w_sch + (size_t)(t - from) * cols, b, sizeof(float) * (size_t)(t + 1));
                top_ref[t - from] = top_of(a, t + 1), top_sch[t - from] = top_of(b, t + 1);
            }
        }
    }
    if (!status) {
        int agree = 0;
        for (int r = 0; r < rows; r++) agree += top_ref[r] == top_sch[r];
        printf("micro attention: %s, layer %d head %d, queries %d..%d: the most-attended position agrees with "
               "fp32's for %d of %d queries (%.0f%%)\n",
               decoder_spec(&sch, KV_ROLE_KEY), o.layer, o.head, from, to, agree, rows, 100.0 * agree / rows);
        char title[300];
        snprintf(title, sizeof title, "layer %d, head %d, %s", o.layer, o.head, text.name);
        status = draw(out_dir, title, from, decoder_spec(&sch, KV_ROLE_KEY), w_ref, w_sch, top_ref, top_sch, rows, cols);
    }
    if (ref.fwd.model) decoder_free(&ref);
    if (sch.fwd.model) decoder_free(&sch);
    free(w_ref), free(w_sch), free(top_ref), free(top_sch);
    text_free(&text);
    model_free(&m);
    return status;
}
