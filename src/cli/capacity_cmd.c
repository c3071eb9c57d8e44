// micro capacity: the plate's arithmetic for any model and GPU, at any width (src/eval/capacity.c).
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capacity.h"
#include "cli.h"
#include "cmd_options.h"
#include "commands.h"
#include "gguf.h"
#include "gguf_model.h"
#include "kvcache.h"
#include "model_file.h"
#include "msgtext.h"

static const char *capacity_usage =
    "usage: micro capacity [options]\n"
    "  Conversations that fit beside a model on a GPU at each KV-cache width:\n"
    "  floor((GPU GB x util - weights GB) / (2 x layers x KV heads x head_dim x bits/8 x context)).\n"
    "  Defaults are the plate's: Llama 3 8B (32 layers, 8 KV heads, head_dim 128), 16.1 GB of BF16\n"
    "  weights, an 80 GB GPU at 90% use, 8192-token conversations, scales ignored (GB = 1e9 bytes).\n"
    "options:\n"
    "  --preset NAME     llama3-8b (default), llama3-70b (2 x 80 GB), mistral-7b, micro\n"
    "  --model FILE      a model file's own shape instead (a GGUF or micro's): its layers, KV heads,\n"
    "                    head_dim and context, and its weights' bytes as the file stores them\n"
    "  --bits LIST       cache widths in (0, 64], comma separated (default 16,8,4,3,2 without --scheme)\n"
    "  --scheme SPEC     count this cache scheme's real storage (scales, minimums, residuals);\n"
    "                    repeatable, at most 16; its rows follow those of --bits when both are given\n"
    "  --gpu-gb X  --util X  --weights-gb X  --context N  --layers N  --kv-heads N  --head-dim N\n"
    "  --csv             model,bits,bytes_per_token,conversations,gb_per_conversation,step_read_bytes\n"
    "  -h, --help        this help\n";

static void apply_overrides(CapacityModel *m, const CapacityOverrides *v) {
    if (v->given_gpu_gb) m->gpu_gb = v->gpu_gb;
    if (v->given_util) m->util = v->util;
    if (v->given_weights_gb) m->weights_gb = v->weights_gb;
    if (v->given_context) m->context = v->context;
    if (v->given_layers) m->layers = v->layers;
    if (v->given_kv_heads) m->kv_heads = v->kv_heads;
    if (v->given_head_dim) m->head_dim = v->head_dim;
}

// A comma-separated list of widths in (0, 64].
static int parse_bits(Opts *p, const char *list, CapacityOptions *o) {
    char shown[MSG_TEXT];
    if (*list == '\0') return opts_fail(p, "--bits: empty list (expected widths in (0, 64], comma separated)");
    o->n_bits = 0;
    for (const char *s = list;;) {
        char *end = NULL;
        double b = *s == ',' || isspace((unsigned char)*s) ? NAN : strtod(s, &end);
        if (isnan(b) || end == s || (*end && *end != ',') || !(b > 0 && b <= 64))
            return opts_fail(p, "--bits: '%s' is not a comma-separated list of widths in (0, 64]",
                             msg_text(list, shown, sizeof shown));
        if (o->n_bits == CAPACITY_MAX_BITS) return opts_fail(p, "--bits: more than %d widths", CAPACITY_MAX_BITS);
        o->bits[o->n_bits++] = b;
        if (!*end) return 0;
        s = end + 1;
    }
}

// The checks of a shape and its rows, once the model is known (a preset's, or a file's).
static int capacity_finish(CapacityOptions *o, char *err, size_t errlen) {
    const CapacityModel *m = &o->model;
    if (capacity_check(m, err, errlen)) return -1;
    if (o->n_schemes && capacity_scheme_check(m, err, errlen)) return -1;
    // Every row's count must fit a long (a width of 1e-300 bits would not).
    for (int i = 0; i < o->n_bits; i++)
        if (capacity_row(m, o->bits[i]).conversations == LONG_MAX) {
            snprintf(err, errlen, "--bits %g: too many conversations to count; check the widths and the shape", o->bits[i]);
            return -1;
        }
    return 0;
}

// A model file's shape for the arithmetic: its layers, key/value heads, head width and context, and
// its weights as the file stores them (a GGUF's tensors in their types; micro's fp32). The name is
// the file's.
static int model_shape(CapacityOptions *o, char *err, size_t errlen) {
    const uint8_t *map = NULL;
    size_t size = 0;
    char why[256];
    const int mapped = gguf_map(o->model_path, &map, &size, why, sizeof why) == 0;
    const int gguf = mapped && size >= 4 && memcmp(map, "GGUF", 4) == 0;
    ModelConfig c;
    size_t n_params;
    Model mdl = {0};
    int rc = gguf ? gguf_model_shape(&c, &n_params, o->model_path, err, errlen)
                  : model_load(&mdl, o->model_path, err, errlen); // micro's files: megabytes
    if (!rc && !gguf) c = mdl.config, n_params = mdl.n_params;
    model_free(&mdl);
    if (!rc && c.latent_dim > 0) {
        snprintf(err, errlen, "capacity --model reads multi-head and grouped-query models (a latent one caches a latent "
                              "and a RoPE key: micro plate's panel (g) counts it)");
        rc = -1;
    }
    uint64_t bytes = (uint64_t)n_params * sizeof(float);
    Gguf g;
    if (!rc && gguf && gguf_parse(&g, map, size, o->model_path, why, sizeof why) == 0) { // its tensors' bytes
        bytes = 0;
        for (uint64_t i = 0; i < g.n_tensors; i++)
            bytes += g.tensors[i].n_elements / (uint64_t)g.tensors[i].type->block * (uint64_t)g.tensors[i].type->bytes;
        gguf_free(&g);
    }
    if (mapped) gguf_unmap(map, size);
    if (!rc) {
        const char *slash = strrchr(o->model_path, '/');
        o->model.name = slash ? slash + 1 : o->model_path;
        o->model.layers = c.n_layers, o->model.kv_heads = c.n_kv_heads, o->model.head_dim = c.head_dim;
        o->model.context = c.max_seq_len, o->model.weights_gb = (double)bytes / 1e9;
        apply_overrides(&o->model, &o->over);
    }
    return rc;
}

int capacity_parse(int argc, char **argv, CapacityOptions *o, char *err, size_t errlen) {
    static const double default_bits[] = {16, 8, 4, 3, 2};
    const char *preset = NULL, *bits = NULL;
    memset(o, 0, sizeof *o);
    CapacityOverrides v = {0};
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--csv")) bad = opts_flag(&p), o->csv = 1;
        else if (opts_is(&p, "--scheme")) {
            if (o->n_schemes == CAPACITY_MAX_SCHEMES) return opts_fail(&p, "at most %d schemes", CAPACITY_MAX_SCHEMES);
            bad = opts_value(&p, &o->schemes[o->n_schemes]) ||
                  cmd_check_specs(o->schemes[o->n_schemes], o->schemes[o->n_schemes], err, errlen);
            o->n_schemes++;
        } else if (opts_is(&p, "--preset")) bad = opts_string(&p, &preset);
        else if (opts_is(&p, "--model")) bad = opts_string(&p, &o->model_path);
        else if (opts_is(&p, "--bits")) bad = opts_string(&p, &bits);
        else if (opts_is(&p, "--gpu-gb")) bad = opts_double(&p, -1e9, 1e9, &v.gpu_gb), v.given_gpu_gb = 1;
        else if (opts_is(&p, "--util")) bad = opts_double(&p, -1e9, 1e9, &v.util), v.given_util = 1;
        else if (opts_is(&p, "--weights-gb")) bad = opts_double(&p, -1e9, 1e9, &v.weights_gb), v.given_weights_gb = 1;
        else if (opts_is(&p, "--context")) bad = opts_int(&p, -1000000000, 1000000000, &v.context), v.given_context = 1;
        else if (opts_is(&p, "--layers")) bad = opts_int(&p, 1, 100000, &v.layers), v.given_layers = 1;
        else if (opts_is(&p, "--kv-heads")) bad = opts_int(&p, 1, 100000, &v.kv_heads), v.given_kv_heads = 1;
        else if (opts_is(&p, "--head-dim")) bad = opts_int(&p, 1, 100000, &v.head_dim), v.given_head_dim = 1;
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    char shown[MSG_TEXT];
    if (preset && o->model_path) return opts_fail(&p, "--preset and --model each name the model: give one");
    o->over = v;
    const CapacityModel *base = capacity_preset(preset ? preset : "llama3-8b");
    if (!base)
        return opts_fail(&p, "unknown preset '%s' (llama3-8b, llama3-70b, mistral-7b, micro)",
                         msg_text(preset, shown, sizeof shown));
    CapacityModel *m = &o->model;
    *m = *base;
    apply_overrides(m, &v);
    if (!o->model_path && capacity_check(m, err, errlen)) return OPTS_ERROR; // a file's shape: cmd_capacity's
    // Rows: the bare widths (--bits, or the defaults when no --scheme is given), then every scheme.
    if (bits) {
        if (parse_bits(&p, bits, o)) return OPTS_ERROR;
    } else if (o->n_schemes == 0) {
        memcpy(o->bits, default_bits, sizeof default_bits);
        o->n_bits = (int)(sizeof default_bits / sizeof default_bits[0]);
    }
    if (o->model_path) return OPTS_RUN; // the rest once the file's shape is known
    return capacity_finish(o, err, errlen) ? OPTS_ERROR : OPTS_RUN;
}

int cmd_capacity(int argc, char **argv) {
    CapacityOptions o;
    char err[512];
    int done = cli_after_parse(capacity_parse(argc, argv, &o, err, sizeof err), err, capacity_usage);
    if (done >= 0) return done;
    if (o.model_path && (model_shape(&o, err, sizeof err) || capacity_finish(&o, err, sizeof err)))
        return cli_error("%s", err);
    const CapacityModel m = o.model;
    const int csv = o.csv;

    // Rows: each bare width, then each scheme at its measured bits per element.
    double bits[CAPACITY_MAX_BITS + CAPACITY_MAX_SCHEMES];
    char labels[CAPACITY_MAX_BITS][32];
    const char *label_of[CAPACITY_MAX_BITS + CAPACITY_MAX_SCHEMES];
    int n = 0;
    for (int i = 0; i < o.n_bits; i++) {
        snprintf(labels[i], sizeof labels[i], "%g-bit", o.bits[i]);
        label_of[n] = labels[i];
        bits[n++] = o.bits[i];
    }
    for (int i = 0; i < o.n_schemes; i++) {
        if (capacity_scheme_bits(&m, cli_spec(o.schemes[i]), &bits[n], err, sizeof err)) return cli_error("%s", err);
        label_of[n++] = o.schemes[i];
    }
    if (csv) {
        printf("model,cache,bits,bytes_per_token,conversations,gb_per_conversation,step_read_bytes\n");
    } else {
        printf("%s: %d layers x %d KV heads x head_dim %d, %.4g GB weights, %.4g GB GPU at %.0f%% use, %d-token "
               "conversations\n\n",
               m.name ? m.name : "custom", m.layers, m.kv_heads, m.head_dim, m.weights_gb, m.gpu_gb, 100 * m.util,
               m.context);
        printf("%-34s %8s %14s %12s %14s %18s\n", "cache", "bits", "bytes/token", "GB/conv", "conversations",
               "read/step (MB)");
    }
    for (int i = 0; i < n; i++) {
        CapacityRow r = capacity_row(&m, bits[i]);
        // A decode step at the end of a conversation reads its whole cache once.
        if (csv)
        {
            printf("%s,", m.name ? m.name : "custom");
            csv_field(label_of[i]);
            printf(",%.4f,%.1f,%ld,%.6f,%.0f\n", r.bits_per_element, r.bytes_per_token, r.conversations,
                   r.bytes_per_conversation / 1e9, r.bytes_per_conversation);
        } else
            printf("%-34s %8.3f %14.0f %12.4f %14ld %18.1f\n", label_of[i], r.bits_per_element, r.bytes_per_token,
                   r.bytes_per_conversation / 1e9, r.conversations, r.bytes_per_conversation / 1e6);
    }
    return 0;
}
