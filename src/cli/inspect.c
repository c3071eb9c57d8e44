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
#include "sort_doubles.h"
#include "text.h"

enum { K_PRE_ROPE, K_CACHED, V_CACHED, N_STREAMS };

// What the three columns read from the cache's two slots. Multi-head and grouped-query models:
// keys before RoPE, keys as cached, values. Latent attention caches a latent (the key slot) and a
// RoPE key (the value slot), so its columns are the RoPE key before RoPE, the latent and the RoPE
// key: the same questions (outlier channels before and after RoPE, outlier tokens) of what it holds.
typedef struct {
    const char *name;  // the CSV's stream column
    const char *title; // the table's column
    int slot;          // KV_ROLE_KEY or KV_ROLE_VALUE: the stream read
    int width;         // numbers per head
} StreamView;

static void stream_views(const ModelConfig *p, StreamView v[N_STREAMS]) {
    const KVLayout l = kv_layout_of(p);
    const int kw = l.head_dim[KV_ROLE_KEY], vw = l.head_dim[KV_ROLE_VALUE];
    if (p->latent_dim > 0) {
        v[K_PRE_ROPE] = (StreamView){"rope_key_pre_rope", "RoPE key pre-RoPE", KV_ROLE_VALUE, vw};
        v[K_CACHED] = (StreamView){"latent", "latent", KV_ROLE_KEY, kw};
        v[V_CACHED] = (StreamView){"rope_key", "RoPE key", KV_ROLE_VALUE, vw};
    } else {
        v[K_PRE_ROPE] = (StreamView){"k_pre_rope", "keys pre-RoPE", KV_ROLE_KEY, kw};
        v[K_CACHED] = (StreamView){"k", "keys cached", KV_ROLE_KEY, kw};
        v[V_CACHED] = (StreamView){"v", "values", KV_ROLE_VALUE, vw};
    }
}

typedef struct {
    double channel_ratio; // max over channels of (max_t |x|) / median over channels of the same
    int top_channel;
    double token_ratio;   // max over tokens of (max_c |x|) / median over tokens of the same
    int top_token;
    float *channel_max;   // [head_dim] max_t |x| per channel, for the profile strip
} HeadStats;

static double median(const double *v, int n, double *scratch) {
    memcpy(scratch, v, sizeof(double) * (size_t)n);
    sort_doubles(scratch, (size_t)n);
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

// One head's vectors of a view for tokens [0, n) into x[n][width]: keys before RoPE undone from the
// cached ones (rotated back by the same angle, the decoder's table being of the rotated width);
// the others rotated as a cache with rot= would hold them (y = M x) when rot is given.
static const PagedStream *view_stream(const Decoder *d, const StreamView *v, int layer) {
    return v->slot == KV_ROLE_VALUE ? &d->seq.v[layer] : &d->seq.k[layer];
}

static void read_head(const Decoder *d, const StreamView *v, int layer, int s, int h, int n, const float *rot,
                      float *x) {
    const int w = v->width, half = w / 2;
    for (int t = 0; t < n; t++) {
        float *row = x + (size_t)t * w;
        paged_read(view_stream(d, v, layer), h, t, row);
        if (s == K_PRE_ROPE)
            for (int i = 0; i < half; i++) {
                float c = d->rope_cos[(size_t)t * half + i], sn = d->rope_sin[(size_t)t * half + i];
                float a = row[2 * i], b = row[2 * i + 1];
                row[2 * i] = a * c + b * sn;
                row[2 * i + 1] = -a * sn + b * c;
            }
        if (rot && s != K_PRE_ROPE) {
            float y[MICRO_MAX_WIDTH];
            transform_rotate(rot, w, row, y, 0);
            memcpy(row, y, sizeof(float) * (size_t)w);
        }
    }
}

// The figure's data: per layer, keys as cached and values, every channel's max |x| over the text,
// without and with the rotation; src/cli/figures/channels.gp draws DIR/channels.svg and .png from it.
// Multi-head and grouped-query models only (cmd_inspect refuses --plot for latent attention).
static int write_profiles(const Decoder *d, const ModelConfig *p, const StreamView *views, int n, const float *rot,
                          FILE *f) {
    const int hd = p->head_dim, H = p->n_kv_heads;
    float *x = malloc(sizeof(float) * (size_t)n * hd);
    if (!x) return -1;
    for (int l = 0; l < p->n_layers; l++)
        for (int s = K_CACHED; s <= V_CACHED; s++)
            for (int h = 0; h < H; h++) {
                float plain[MICRO_MAX_WIDTH] = {0}, turned[MICRO_MAX_WIDTH] = {0};
                for (int pass = 0; pass < 2; pass++) {
                    read_head(d, &views[s], l, s, h, n, pass ? rot : NULL, x);
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
static int draw_profiles(const Decoder *d, const ModelConfig *p, const StreamView *views, int n, const float *rot,
                         const char *rot_name, const char *text_name, const char *out_dir) {
    char err[600], title[400], layers[16], hd[16];
    FigureData data;
    if (figure_data_open(&data, err, sizeof err)) return cli_error("%s", err);
    snprintf(title, sizeof title, "%s: every channel's max |x|, without and with rot=%s", text_name, rot_name);
    snprintf(layers, sizeof layers, "%d", p->n_layers);
    snprintf(hd, sizeof hd, "%d", p->head_dim);
    const FigureSpec fig = {"channels", out_dir, "channels", 1200, 220 * p->n_layers + 60, 11, 9, {title, layers, hd, NULL}};
    FILE *f = figure_data_file(&data, "profiles.dat", err, sizeof err);
    int bad = !f;
    if (!bad && write_profiles(d, p, views, n, rot, f)) {
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
    "  A latent-attention model is read for what it caches: its RoPE key before RoPE, its latent and\n"
    "  its RoPE key (--plot is for keys and values, so not for it).\n"
    "  The strips draw each channel's max |x| (one character per channel, @ = the head's largest).\n"
    "options:\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --text FILE[:CHARS] text to run; repeatable (default the two plates at 1500 / 500 characters)\n"
    "  --rot R             keys (as cached) and values rotated per head as the cache option rot=R\n"
    "                      would store them: hadamard or random:SEED (what a rotation does to outliers)\n"
    "  --csv               layer,head,stream,channel_ratio,top_channel,token_ratio,top_token,text\n"
    "                      (stream: k_pre_rope, k, v; or rope_key_pre_rope, latent, rope_key)\n"
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
    const char *loaded_path = cli_default_path(model_path, "models/micro.bin", path, sizeof path);
    if (model_load(&m, loaded_path, err, sizeof err)) return cli_error("%s", err);
    const ModelConfig *p = &m.config;
    const int L = p->n_layers, H = kv_layout_of(p).n_heads[KV_ROLE_KEY];
    StreamView views[N_STREAMS];
    stream_views(p, views);
    int wmax = 0;
    for (int s = 0; s < N_STREAMS; s++) wmax = views[s].width > wmax ? views[s].width : wmax;
    if (o.plot && p->latent_dim > 0) {
        model_free(&m);
        return cli_error("--plot draws keys and values per head; a latent-attention model caches a latent and a "
                         "RoPE key: use the table or --csv");
    }
    // The rotation a cache with rot=R applies to each view's stream: checked as that option is on the
    // stream's own shape, then the shared matrix of its width.
    const float *rot[N_STREAMS] = {NULL};
    if (o.rot) {
        for (int s = K_CACHED; s < N_STREAMS; s++) {
            char spec[SPEC_TEXT + 16];
            const KVShape shape = {H, views[s].width, p->max_seq_len};
            snprintf(spec, sizeof spec, "fp32:rot=%.*s", SPEC_TEXT - 1, o.rot);
            if (strlen(o.rot) >= SPEC_TEXT || kvstream_check_spec_shape(spec, KV_ROLE_KEY, &shape, err, sizeof err)) {
                if (strlen(o.rot) >= SPEC_TEXT) snprintf(err, sizeof err, "--rot: expected hadamard or random:SEED");
                model_free(&m);
                return cli_error("--rot: %s", err);
            }
            const int kind = strcmp(o.rot, "hadamard") == 0 ? 1 : 2;
            rot[s] = transform_rotation(kind, kind == 2 ? strtoul(o.rot + 7, NULL, 10) : 0, views[s].width);
            if (!rot[s]) {
                model_free(&m);
                return cli_error("out of memory");
            }
        }
    }
    // The figure shows a rotation: --rot's, else the Hadamard (of head_dim: --plot is multi-head only).
    const int hd = p->head_dim;
    const float *plot_rot = rot[K_CACHED] ? rot[K_CACHED] : o.plot ? transform_rotation(1, 0, hd) : NULL;
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
        // micro's bytes: at most the context of them; a vocabulary of its own: its ids, at most that many.
        if (text_load(&text, texts[ti], m.tokenizer ? INT32_MAX : p->max_seq_len, err, sizeof err)) {
            status = cli_error("%s", err);
            break;
        }
        if (m.tokenizer && text_tokenize(&text, m.tokenizer, m.bos, p->max_seq_len, err, sizeof err)) {
            text_free(&text);
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
        float *x = malloc(sizeof(float) * (size_t)n * wmax);
        HeadStats *stats = calloc((size_t)L * H * N_STREAMS, sizeof *stats);
        float *profiles = calloc((size_t)L * H * N_STREAMS * wmax, sizeof(float));
        if (!x || !stats || !profiles) {
            free(x), free(stats), free(profiles);
            decoder_free(&d);
            text_free(&text);
            status = cli_error("out of memory");
            break;
        }
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++)
                for (int s = 0; s < N_STREAMS; s++) {
                    read_head(&d, &views[s], l, s, h, n, rot[s], x);
                    HeadStats *hs = &stats[(l * H + h) * N_STREAMS + s];
                    hs->channel_max = profiles + (size_t)((l * H + h) * N_STREAMS + s) * wmax;
                    head_stats(x, n, views[s].width, hs);
                    if (csv)
                        printf("%d,%d,%s,%.4f,%d,%.4f,%d,%s\n", l, h, views[s].name, hs->channel_ratio,
                               hs->top_channel, hs->token_ratio, hs->top_token, text.name);
                }
        if (!csv) {
            printf("%s (%d tokens): max |x| of the largest channel / token over the median one%s%s\n", text.name, n,
                   o.rot ? (p->latent_dim > 0 ? "; the latent and the RoPE key rotated: rot="
                                              : "; keys cached and values rotated: rot=") : "",
                   o.rot ? o.rot : "");
            printf("%-6s | %-17s %-17s %-17s | channel profile: %s, %s\n", "layer", views[K_PRE_ROPE].title,
                   views[K_CACHED].title, views[V_CACHED].title, p->latent_dim > 0 ? "latent" : "keys before RoPE",
                   p->latent_dim > 0 ? "RoPE key" : "values");
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
                    // The latent in place of the keys: it is what the heads' keys are made from.
                    const int first = p->latent_dim > 0 ? K_CACHED : K_PRE_ROPE;
                    printf(" | %s ", p->latent_dim > 0 ? "C" : "K");
                    profile_strip(stats[(l * H + h) * N_STREAMS + first].channel_max, views[first].width);
                    printf(" %s ", p->latent_dim > 0 ? "R" : "V");
                    profile_strip(stats[(l * H + h) * N_STREAMS + V_CACHED].channel_max, views[V_CACHED].width);
                    printf("\n");
                }
            printf("%-6s |", "mean");
            for (int s = 0; s < N_STREAMS; s++) printf(" %8.2f %8.2f", mean[s][0], mean[s][1]);
            printf(" |\n\n");
        }
        if (o.plot && ti == 0) status = draw_profiles(&d, p, views, n, plot_rot, o.rot ? o.rot : "hadamard", text.name, out_dir);
        free(x);
        free(stats);
        free(profiles);
        decoder_free(&d);
        text_free(&text);
    }
    model_free(&m);
    return status;
}
