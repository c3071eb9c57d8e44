// micro plate --html (plate_page.h). The page's own numbers — greedy continuations through the
// plate's scheme at each width, and one window's attention weights at each width — are computed
// here with the decode loop; everything else comes from the run's JSON, which the page embeds and
// its script draws from.
#include "plate_page.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "forward.h"
#include "generate.h"
#include "safe_file.h"

// "Watch it break": the prompt is the plate's first characters, continued by this many bytes.
static const int break_prompt_chars[2] = {80, 30}, break_bytes[2] = {160, 180};
// The attention picture: the English plate's first tokens (BOS included), the later half as queries.
#define ATT_TOKENS 64

static const char *asset(const char *name) {
    for (int i = 0; i < page_assets_count; i++)
        if (strcmp(page_assets[i].name, name) == 0) return page_assets[i].text;
    return NULL;
}

static void base64_to(FILE *f, const uint8_t *b, size_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        fputc(digits[v >> 18 & 63], f), fputc(digits[v >> 12 & 63], f);
        fputc(i + 1 < n ? digits[v >> 6 & 63] : '=', f), fputc(i + 2 < n ? digits[v & 63] : '=', f);
    }
}

// The prompt: at most the first `chars` characters of a text (after its BOS), in bytes, ending after
// its last space, "，" or "。" when that keeps more than half of them, so that no word is cut.
static size_t prefix_bytes(const Text *t, int chars) {
    size_t n = 0;
    const size_t len = (size_t)t->n_bytes - 1;
    const uint8_t *s = t->bytes + 1;
    for (int c = 0; c < chars && n < len; c++)
        do n++;
        while (n < len && (s[n] & 0xC0) == 0x80);
    for (size_t i = n; i > n / 2; i--) {
        const int space = s[i - 1] == ' ';
        const int mark = i >= 3 && ((s[i - 3] == 0xEF && s[i - 2] == 0xBC && s[i - 1] == 0x8C) ||
                                    (s[i - 3] == 0xE3 && s[i - 2] == 0x80 && s[i - 1] == 0x82));
        if (space || mark) return i;
    }
    return n;
}

// One text's prompt continued through each width: {"text", "prompt", "bytes", "runs": [...]}.
static int write_breaks(FILE *f, const PlatePage *p, int t, char *err, size_t errlen) {
    const Text *text = &p->texts[t];
    const size_t plen = prefix_bytes(text, break_prompt_chars[t]);
    const int n = break_bytes[t];
    uint8_t *out = malloc((size_t)n + 4);
    if (!out) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    fprintf(f, "{\"text\": \"%s\", \"bytes\": %d, \"prompt\": ", t == 0 ? "en" : "zh", n);
    json_bytes_to(f, text->bytes + 1, plen);
    fprintf(f, ", \"runs\": [");
    int status = 0;
    for (int w = 0; w < p->n_widths && !status; w++) {
        Decoder d;
        const int capacity = (int)plen + n + 8 < p->model->config.max_seq_len ? (int)plen + n + 8 : p->model->config.max_seq_len;
        if (decoder_init(&d, p->model, cli_spec(p->widths[w].spec), cli_spec(p->widths[w].spec), capacity, 1, err, errlen)) {
            free(out);
            return -1;
        }
        unsigned long long rng = 1;
        size_t got = 0;
        int bad_pos = 0;
        if (generate_continue(&d, text->bytes + 1, plen, n, 0, &rng, NULL, out, &got, &bad_pos)) {
            snprintf(err, errlen, "the logits of %s at position %d are not finite", p->widths[w].spec, bad_pos);
            status = -1;
        }
        decoder_free(&d);
        const long invalid = utf8_first_invalid(out, got); // only where the context ended inside a character
        if (invalid >= 0) got = (size_t)invalid;
        fprintf(f, "%s{\"label\": ", w ? ", " : "");
        json_string_to(f, p->widths[w].label);
        fprintf(f, ", \"spec\": ");
        json_string_to(f, p->widths[w].spec);
        fprintf(f, ", \"text\": ");
        json_bytes_to(f, out, got);
        fprintf(f, "}");
    }
    fprintf(f, "]}");
    free(out);
    return status;
}

// The attention weights of queries [from, tokens) over keys [0, tokens) for fp32 and each width,
// every layer and head: bytes of √weight · 255 ([width][layer][head][query][key], for the picture)
// and each query's most-attended key (the first of equal weights, from the floats).
static int write_attention(FILE *f, const PlatePage *p, char *err, size_t errlen) {
    const Text *text = &p->texts[0];
    const int tokens = text->n_tokens < ATT_TOKENS ? text->n_tokens : ATT_TOKENS, from = tokens / 2, rows = tokens - from;
    const int layers = p->model->config.n_layers, heads = p->model->config.n_heads, widths = p->n_widths + 1;
    const size_t per = (size_t)layers * heads * rows;
    uint8_t *w8 = calloc((size_t)widths * per * tokens, 1), *top = calloc((size_t)widths * per, 1);
    if (!w8 || !top) {
        free(w8), free(top);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int status = 0;
    for (int w = 0; w < widths && !status; w++) {
        const char *spec = w == 0 ? "fp32" : p->widths[w - 1].spec;
        for (int l = 0; l < layers && !status; l++) {
            Decoder d;
            if (decoder_init(&d, p->model, cli_spec(spec), cli_spec(spec), tokens, 1, err, errlen)) {
                status = -1;
                break;
            }
            d.fwd.keep_layer = l;
            for (int t = 0; t < tokens; t++) {
                decoder_forward(&d, text->tokens[t], t);
                if (t < from) continue;
                for (int h = 0; h < heads; h++) {
                    const float *a = d.fwd.kept_att + (size_t)h * d.fwd.context;
                    const size_t at = (((size_t)w * layers + l) * heads + h) * rows + (size_t)(t - from);
                    int best = 0;
                    for (int j = 0; j <= t; j++) {
                        const float v = a[j] >= 0 && a[j] <= 1 ? sqrtf(a[j]) : 0; // NaN shows as 0
                        w8[at * tokens + j] = (uint8_t)lrintf(v * 255);
                        best = a[j] > a[best] ? j : best;
                    }
                    top[at] = (uint8_t)best;
                }
            }
            decoder_free(&d);
        }
    }
    if (!status) {
        long chars = 0; // what --text FILE:CHARS needs to give these tokens
        for (int i = 1; i < tokens; i++) chars += (text->bytes[i] & 0xC0) != 0x80;
        fprintf(f, "{\"tokens\": %d, \"from\": %d, \"chars\": %ld, \"layers\": %d, \"heads\": %d, \"layer\": 0, "
                   "\"head\": 0, \"path\": ",
                tokens, from, chars, layers, heads);
        json_string_to(f, text->path);
        fprintf(f, ", \"text\": ");
        json_bytes_to(f, text->bytes + 1, (size_t)tokens - 1);
        fprintf(f, ", \"widths\": [{\"label\": \"fp32\", \"spec\": \"fp32\"}");
        for (int w = 0; w < p->n_widths; w++) {
            fprintf(f, ", {\"label\": ");
            json_string_to(f, p->widths[w].label);
            fprintf(f, ", \"spec\": ");
            json_string_to(f, p->widths[w].spec);
            fprintf(f, "}");
        }
        fprintf(f, "], \"weights\": \"");
        base64_to(f, w8, (size_t)widths * per * tokens);
        fprintf(f, "\", \"top\": \"");
        base64_to(f, top, (size_t)widths * per);
        fprintf(f, "\"}");
    }
    free(w8), free(top);
    return status;
}

// The page's data: {"plate": the run's JSON, "page": ..., "break": [...], "attention": {...}}.
static char *page_data(const PlatePage *p, size_t *len, char *err, size_t errlen) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    fprintf(f, "{\"plate\": ");
    fwrite(p->run_json, 1, p->run_json_len, f);
    fprintf(f, ", \"page\": {\"model\": ");
    json_string_to(f, p->model_name);
    fprintf(f, ", \"kernels\": ");
    json_string_to(f, p->kernels);
    fprintf(f, "}, \"break\": [");
    int status = write_breaks(f, p, 0, err, errlen);
    if (!status) fprintf(f, ", "), status = write_breaks(f, p, 1, err, errlen);
    if (!status) fprintf(f, "], \"attention\": "), status = write_attention(f, p, err, errlen);
    fprintf(f, "}\n");
    if (fclose(f) != 0 && !status) {
        snprintf(err, errlen, "out of memory");
        status = -1;
    }
    if (status) {
        free(buf);
        return NULL;
    }
    return buf;
}

typedef struct {
    const PlatePage *p;
    const char *data;
    size_t data_len;
} PageWrite;

// A figure of the run as an image whose source is inside the page (its own SVG, so that the ids of
// several gnuplot drawings do not meet in one document), or a line saying it was not drawn.
static void figure_to(FILE *f, const char *dir, const char *name) {
    char path[4200], err[600];
    snprintf(path, sizeof path, "%s/%s.svg", dir, name);
    long long size = 0;
    FILE *in = safe_open_read(path, &size, err, sizeof err);
    uint8_t *svg = in && size > 0 && size < (64 << 20) ? malloc((size_t)size) : NULL;
    if (svg && fread(svg, 1, (size_t)size, in) == (size_t)size) {
        fprintf(f, "<img alt=\"%s (the run's figure)\" src=\"data:image/svg+xml;base64,", name);
        base64_to(f, svg, (size_t)size);
        fprintf(f, "\">");
    } else {
        fprintf(f, "<p class=\"missing\">The figure %s.svg was not drawn (gnuplot is not installed).</p>", name);
    }
    free(svg);
    if (in) fclose(in);
}

// The template with its {{...}} slots filled: STYLE, SCRIPT, DATA (every '<' written \u003c, so no
// text in it can close the script element), FIG name.
static int write_page(FILE *f, void *ctx, char *why, size_t whylen) {
    const PageWrite *w = ctx;
    const char *html = asset("plate.html"), *css = asset("plate.css"), *js = asset("plate.js");
    if (!html || !css || !js) {
        snprintf(why, whylen, "the page's template is missing from this build");
        return -1;
    }
    for (const char *s = html; *s;) {
        const char *slot = strstr(s, "{{");
        if (!slot) {
            fputs(s, f);
            break;
        }
        fwrite(s, 1, (size_t)(slot - s), f);
        const char *end = strstr(slot, "}}");
        if (!end) {
            snprintf(why, whylen, "the page's template has an unclosed slot");
            return -1;
        }
        const size_t n = (size_t)(end - slot - 2);
        if (n == 5 && memcmp(slot + 2, "STYLE", 5) == 0) fputs(css, f);
        else if (n == 6 && memcmp(slot + 2, "SCRIPT", 6) == 0) fputs(js, f);
        else if (n == 4 && memcmp(slot + 2, "DATA", 4) == 0) {
            for (size_t i = 0; i < w->data_len; i++)
                if (w->data[i] == '<') fputs("\\u003c", f);
                else fputc(w->data[i], f);
        } else if (n > 4 && memcmp(slot + 2, "FIG ", 4) == 0) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(n - 4), slot + 6);
            figure_to(f, w->p->dir, name);
        } else {
            snprintf(why, whylen, "the page's template has an unknown slot");
            return -1;
        }
        s = end + 2;
    }
    return 0;
}

int plate_page_write(const PlatePage *p, size_t *bytes, char *err, size_t errlen) {
    size_t len = 0;
    char *data = page_data(p, &len, err, errlen);
    if (!data) return -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/plate.html", p->dir);
    PageWrite w = {p, data, len};
    const int rc = safe_write(path, write_page, &w, err, errlen);
    free(data);
    struct stat st;
    if (!rc && bytes) *bytes = stat(path, &st) == 0 ? (size_t)st.st_size : 0;
    return rc;
}
