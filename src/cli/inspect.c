// micro inspect: KIVI's observation, looked for in our own micro. KIVI quantises keys per channel and
// values per token because keys have a few channels of outsized magnitude and values do not. Here:
// for every layer and head, how far the largest channel (and the largest token) stands above the
// median one, for keys before RoPE, keys as cached (after RoPE) and values, over the plates.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_options.h"
#include "commands.h"
#include "figure.h"
#include "finite.h"
#include "forward.h"
#include "kvtransform.h"
#include "model_file.h"
#include "text.h"

enum { K_PRE_ROPE, K_CACHED, V_CACHED, N_STREAMS };
static const char *stream_names[N_STREAMS] = {"k_pre_rope", "k", "v"};

typedef struct {
    double channel_ratio; // max over channels of (max_t |x|) / median over channels of the same
    int top_channel;
    double token_ratio;   // max over tokens of (max_c |x|) / median over tokens of the same
    int top_token;
    float *channel_max;   // [head_dim] max_t |x| per channel, for the profile strip
} HeadStats;

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n, double *scratch) {
    memcpy(scratch, v, sizeof(double) * (size_t)n);
    qsort(scratch, (size_t)n, sizeof(double), compare_doubles);
    return n % 2 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
}

// x[t * hd + c] for n tokens: the ratios of the largest channel and token magnitudes to the medians.
static void head_stats(const float *x, int n, int hd, HeadStats *s) {
    double *per_channel = calloc((size_t)hd, sizeof(double)), *per_token = calloc((size_t)n, sizeof(double));
    double *scratch = malloc(sizeof(double) * (size_t)(n > hd ? n : hd));
    for (int t = 0; t < n; t++)
        for (int c = 0; c < hd; c++) {
            double a = fabs(x[(size_t)t * hd + c]);
            per_channel[c] = fmax(per_channel[c], a);
            per_token[t] = fmax(per_token[t], a);
        }
    s->top_channel = 0;
    for (int c = 0; c < hd; c++) {
        if (per_channel[c] > per_channel[s->top_channel]) s->top_channel = c;
        s->channel_max[c] = (float)per_channel[c];
    }
    s->top_token = 0;
    for (int t = 0; t < n; t++)
        if (per_token[t] > per_token[s->top_token]) s->top_token = t;
    double mc = median(per_channel, hd, scratch), mt = median(per_token, n, scratch);
    s->channel_ratio = mc > 0 ? per_channel[s->top_channel] / mc : 0;
    s->token_ratio = mt > 0 ? per_token[s->top_token] / mt : 0;
    free(per_channel);
    free(per_token);
    free(scratch);
}

// One head's vectors of a stream for tokens [0, n) into x[n][hd]: keys before RoPE undone from the
// cached ones (rotated back by the same angle); keys cached and values rotated as a cache with
// rot= would hold them (y = M x) when rot is given.
static void read_head(const Decoder *d, const PagedStream *st, int h, int n, int hd, int s, const float *rot, float *x) {
    const int half = hd / 2;
    for (int t = 0; t < n; t++) {
        float *row = x + (size_t)t * hd;
        paged_read(st, h, t, row);
        if (s == K_PRE_ROPE)
            for (int i = 0; i < half; i++) {
                float c = d->rope_cos[(size_t)t * half + i], sn = d->rope_sin[(size_t)t * half + i];
                float a = row[2 * i], b = row[2 * i + 1];
                row[2 * i] = a * c + b * sn;
                row[2 * i + 1] = -a * sn + b * c;
            }
        if (rot && s != K_PRE_ROPE) {
            float y[1024];
            transform_rotate(rot, hd, row, y, 0);
            memcpy(row, y, sizeof(float) * (size_t)hd);
        }
    }
}

// The figure's data: per layer, keys as cached and values, every channel's max |x| over the text,
// without and with the rotation; src/cli/figures/channels.gp draws DIR/channels.svg and .png from it.
static int write_profiles(const Decoder *d, const ModelConfig *p, int n, const float *rot, FILE *f) {
    const int hd = p->head_dim, H = p->n_kv_heads;
    float *x = malloc(sizeof(float) * (size_t)n * hd);
    if (!x) return -1;
    for (int l = 0; l < p->n_layers; l++)
        for (int s = K_CACHED; s <= V_CACHED; s++)
            for (int h = 0; h < H; h++) {
                float plain[1024] = {0}, turned[1024] = {0};
                const PagedStream *st = s == V_CACHED ? &d->seq.v[l] : &d->seq.k[l];
                for (int pass = 0; pass < 2; pass++) {
                    read_head(d, st, h, n, hd, s, pass ? rot : NULL, x);
                    float *out = pass ? turned : plain;
                    for (size_t i = 0; i < (size_t)n * hd; i++) out[i % hd] = fmaxf(out[i % hd], fabsf(x[i]));
                }
                for (int c = 0; c < hd; c++)
                    fprintf(f, "%d %d %d %g %g\n", l, s == V_CACHED, h * hd + c, plain[c], turned[c]);
            }
    free(x);
    return 0;
}

// Writes the profiles to a private folder and draws them into out_dir (figure.h). 0, or an exit
// status after one line.
static int draw_profiles(const Decoder *d, const ModelConfig *p, int n, const float *rot, const char *rot_name,
                         const char *text_name, const char *out_dir) {
    char err[600], title[400], layers[16], hd[16];
    FigureData data;
    if (figure_data_open(&data, err, sizeof err)) return cli_error("%s", err);
    snprintf(title, sizeof title, "%s: every channel's max |x|, without and with rot=%s", text_name, rot_name);
    snprintf(layers, sizeof layers, "%d", p->n_layers);
    snprintf(hd, sizeof hd, "%d", p->head_dim);
    const FigureSpec fig = {"channels", out_dir, "channels", 1200, 220 * p->n_layers + 60, 11, 9, {title, layers, hd, NULL}};
    FILE *f = figure_data_file(&data, "profiles.dat", err, sizeof err);
    int bad = !f;
    if (!bad && write_profiles(d, p, n, rot, f)) {
        fclose(f);
        snprintf(err, sizeof err, "out of memory");
        bad = 1;
    } else if (!bad) {
        bad = figure_data_done(f, "profiles.dat", err, sizeof err);
    }
    return figure_finish(&data, &fig, bad ? err : NULL);
}

// One character per channel, darker for larger max |x| relative to the head's largest channel.
static void profile_strip(const float *channel_max, int hd) {
    static const char shades[] = " .:-=+*#%@";
    float top = 0;
    for (int c = 0; c < hd; c++) top = fmaxf(top, channel_max[c]);
    for (int c = 0; c < hd; c++) putchar(shades[top > 0 ? (int)lroundf(9 * channel_max[c] / top) : 0]);
}

static const char *inspect_usage =
    "usage: micro inspect [options]\n"
    "  Per layer and head, over the text(s): max |x| of each channel relative to the median channel\n"
    "  (\"channel\"), and of each token relative to the median token (\"token\"), for keys before RoPE,\n"
    "  keys as cached (after RoPE) and values. KIVI quantises keys per channel and values per token\n"
    "  because keys show outlier channels and values do not; this shows whether micro does too.\n"
    "  The strips draw each channel's max |x| (one character per channel, @ = the head's largest).\n"
    "options:\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --text FILE[:CHARS] text to run; repeatable (default the two plates at 1500 / 500 characters)\n"
    "  --rot R             keys (as cached) and values rotated per head as the cache option rot=R\n"
    "                      would store them: hadamard or random:SEED (what a rotation does to outliers)\n"
    "  --csv               layer,head,stream,channel_ratio,top_channel,token_ratio,top_token,text\n"
    "  --plot              also draw DIR/channels.svg and .png: per layer, every channel's max |x| of\n"
    "                      keys (as cached) and values over the first text, without and with the\n"
    "                      rotation (--rot, default hadamard)\n"
    "  --out DIR           the figure's folder (default out)\n"
    "  -h, --help          this help\n";

int inspect_parse(int argc, char **argv, InspectOptions *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--csv")) bad = opts_flag(&p), o->csv = 1;
        else if (opts_is(&p, "--text")) bad = cmd_text_option(&p, o->texts, &o->n_texts, INSPECT_MAX_TEXTS);
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--rot")) bad = opts_path(&p, &o->rot);
        else if (opts_is(&p, "--plot")) bad = opts_flag(&p), o->plot = 1;
        else if (opts_is(&p, "--out")) bad = opts_path(&p, &o->out_dir);
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    return OPTS_RUN;
}

int cmd_inspect(int argc, char **argv) {
    InspectOptions o;
    char err[512], path[4096], default_en[4200], default_zh[4200];
    int done = cli_after_parse(inspect_parse(argc, argv, &o, err, sizeof err), err, inspect_usage);
    if (done >= 0) return done;
    const char *model_path = o.model_path, **texts = o.texts;
    int n_texts = o.n_texts, csv = o.csv;
    if (n_texts == 0) {
        snprintf(default_en, sizeof default_en, "%s:1500", cli_default_path(NULL, "data/plates/en.txt", path, sizeof path));
        snprintf(default_zh, sizeof default_zh, "%s:500", cli_default_path(NULL, "data/plates/zh.txt", path, sizeof path));
        texts[n_texts++] = default_en;
        texts[n_texts++] = default_zh;
    }
    Model m;
    if (model_load(&m, cli_default_path(model_path, "models/micro.bin", path, sizeof path), err, sizeof err))
        return cli_error("%s", err);
    const ModelConfig *p = &m.config;
    const int L = p->n_layers, H = p->n_kv_heads, hd = p->head_dim;
    // The rotation a cache with rot=R applies: checked as that option is, then the shared matrix.
    const float *rot = NULL;
    if (o.rot) {
        char spec[SPEC_TEXT + 16];
        const KVShape shape = {H, hd, p->max_seq_len};
        snprintf(spec, sizeof spec, "fp32:rot=%.*s", SPEC_TEXT - 1, o.rot);
        if (strlen(o.rot) >= SPEC_TEXT || kvstream_check_spec_shape(spec, KV_ROLE_KEY, &shape, err, sizeof err)) {
            if (strlen(o.rot) >= SPEC_TEXT) snprintf(err, sizeof err, "--rot: expected hadamard or random:SEED");
            model_free(&m);
            return cli_error("--rot: %s", err);
        }
        const int kind = strcmp(o.rot, "hadamard") == 0 ? 1 : 2;
        rot = transform_rotation(kind, kind == 2 ? strtoul(o.rot + 7, NULL, 10) : 0, hd);
        if (!rot) {
            model_free(&m);
            return cli_error("out of memory");
        }
    }
    // The figure shows a rotation: --rot's, else the Hadamard.
    const float *plot_rot = rot ? rot : o.plot ? transform_rotation(1, 0, hd) : NULL;
    if (o.plot && !plot_rot) {
        model_free(&m);
        return cli_error("--plot: the Hadamard rotation needs head_dim a power of two, or out of memory");
    }
    const char *out_dir = o.out_dir ? o.out_dir : "out";
    if (o.plot && (cli_out_dir(out_dir) || (figure_check_outputs(out_dir, "channels", err, sizeof err) &&
                                            cli_error("%s", err)))) { // before any decoding
        model_free(&m);
        return 2;
    }
    int status = 0;
    if (csv) printf("layer,head,stream,channel_ratio,top_channel,token_ratio,top_token,text\n");
    for (int ti = 0; ti < n_texts && !status; ti++) {
        Text text;
        if (text_load(&text, texts[ti], p->max_seq_len, err, sizeof err)) {
            status = cli_error("%s", err);
            break;
        }
        Decoder d;
        if (decoder_init(&d, &m, &codec_spec_fp32, &codec_spec_fp32, text.n_tokens, 1, err, sizeof err)) {
            text_free(&text);
            status = cli_error("%s", err);
            break;
        }
        // Statistics of overflowed keys and values would be numbers about nothing: check as we go.
        int finite = 1;
        for (int t = 0; t < text.n_tokens && finite; t++)
            finite = all_finite(decoder_forward(&d, text.tokens[t], t), (size_t)m.config.vocab_size);
        if (!finite) {
            fprintf(stderr, "micro: %s: the logits are " NONFINITE_REASON "\n", text.path);
            status = 1;
            decoder_free(&d);
            text_free(&text);
            break;
        }
        int n = text.n_tokens;
        float *x = malloc(sizeof(float) * (size_t)n * hd);
        HeadStats *stats = calloc((size_t)L * H * N_STREAMS, sizeof *stats);
        float *profiles = calloc((size_t)L * H * N_STREAMS * hd, sizeof(float));
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++)
                for (int s = 0; s < N_STREAMS; s++) {
                    const PagedStream *st = s == V_CACHED ? &d.seq.v[l] : &d.seq.k[l];
                    read_head(&d, st, h, n, hd, s, rot, x);
                    HeadStats *hs = &stats[(l * H + h) * N_STREAMS + s];
                    hs->channel_max = profiles + (size_t)((l * H + h) * N_STREAMS + s) * hd;
                    head_stats(x, n, hd, hs);
                    if (csv)
                        printf("%d,%d,%s,%.4f,%d,%.4f,%d,%s\n", l, h, stream_names[s], hs->channel_ratio,
                               hs->top_channel, hs->token_ratio, hs->top_token, text.name);
                }
        if (!csv) {
            printf("%s (%d tokens): max |x| of the largest channel / token over the median one%s%s\n", text.name, n,
                   rot ? "; keys cached and values rotated: rot=" : "", rot ? o.rot : "");
            printf("%-6s | %-17s %-17s %-17s | channel profile: keys before RoPE, values\n", "layer", "keys pre-RoPE",
                   "keys cached", "values");
            printf("%-6s | %8s %8s %8s %8s %8s %8s |\n", "head", "channel", "token", "channel", "token", "channel",
                   "token");
            double mean[N_STREAMS][2] = {{0}};
            for (int l = 0; l < L; l++)
                for (int h = 0; h < H; h++) {
                    printf("L%d H%d  |", l, h);
                    for (int s = 0; s < N_STREAMS; s++) {
                        const HeadStats *hs = &stats[(l * H + h) * N_STREAMS + s];
                        printf(" %8.2f %8.2f", hs->channel_ratio, hs->token_ratio);
                        mean[s][0] += hs->channel_ratio / (L * H);
                        mean[s][1] += hs->token_ratio / (L * H);
                    }
                    printf(" | K ");
                    profile_strip(stats[(l * H + h) * N_STREAMS + K_PRE_ROPE].channel_max, hd);
                    printf(" V ");
                    profile_strip(stats[(l * H + h) * N_STREAMS + V_CACHED].channel_max, hd);
                    printf("\n");
                }
            printf("%-6s |", "mean");
            for (int s = 0; s < N_STREAMS; s++) printf(" %8.2f %8.2f", mean[s][0], mean[s][1]);
            printf(" |\n\n");
        }
        if (o.plot && ti == 0) status = draw_profiles(&d, p, n, plot_rot, o.rot ? o.rot : "hadamard", text.name, out_dir);
        free(x);
        free(stats);
        free(profiles);
        decoder_free(&d);
        text_free(&text);
    }
    model_free(&m);
    return status;
}
