#include "figure_csv.h"
#include "figure.h"
#include "msgtext.h"
#include "safe_file.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SHOWN(p) msg_text((p), (char[MSG_TEXT]){0}, MSG_TEXT)
// Increases below this (and negative ones) sit on the bottom edge of the figures' log axes.
#define FLOOR_DELTA 1e-4
// Header columns past this many are never read (micro's CSVs have fewer than 30).
#define CSV_MAX_COLS 64
// A name drawn (a text, a family, a serve label) is cut to this many bytes at a character's start:
// every panel's key repeats the names, so a name of megabytes would make an SVG of gigabytes.
#define NAME_MAX_BYTES 120

// The columns the figures read; every other column is skipped without being kept.
enum {
    C_PANEL, C_LABEL, C_TEXT, C_K, C_V, C_DELTA, C_BITS, C_PUBLISHED, C_HELD, C_PLAIN, C_META, C_TPS, C_BYTES,
    C_DELTA_MICRO, C_ARCH, N_USED
};
static const char *const used_names[N_USED] = {
    "panel", "label", "text", "k_cache", "v_cache", "delta", "bits_per_element", "published_delta", "conversations",
    "predicted_plain", "predicted_metadata", "tokens_per_s", "bytes_per_token", "delta_micro", "arch"};

struct FigureCsv {
    const char **field; // every row's N_USED fields (the header not among them); a missing one is ""
    int n_rows;
    int has[N_USED];    // whether the header names the column
    const char *path;   // for messages
};

// One field at *p, unquoted in place (RFC 4180 as micro writes it: a quoted field holds commas,
// doubled quotes and newlines). Returns the field; *p moves past its separator, *row_end is set
// when that separator ended the row (or the text).
static char *next_field(char **p, int *row_end) {
    char *s = *p, *start = s, *w = s;
    if (*s == '"') {
        s++;
        while (*s && !(*s == '"' && s[1] != '"')) {
            if (*s == '"') s++;
            *w++ = *s++;
        }
        if (*s == '"') s++;
        while (*s && *s != ',' && *s != '\n') s++; // text after the closing quote is dropped
    } else {
        while (*s && *s != ',' && *s != '\n') *w++ = *s++;
    }
    if (w > start && w[-1] == '\r') w--;
    *row_end = *s != ',';
    if (*s) s++;
    *w = 0;
    *p = s;
    return start;
}

// One row's fields into row (N_USED of them, "" where missing) through slot (a header column's
// used column, or -1); returns whether the row was an empty line.
static int next_row(char **p, const signed char *slot, int n_slots, const char **row) {
    for (int i = 0; i < N_USED; i++) row[i] = "";
    int k = 0, end = 0, empty = 0;
    while (!end) {
        char *f = next_field(p, &end);
        if (k == 0) empty = end && !*f;
        if (k < n_slots && slot[k] >= 0) row[slot[k]] = f;
        k++;
    }
    return empty;
}

FigureCsv *figure_csv_parse(char *text, const char *path, char *err, size_t errlen) {
    FigureCsv *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->path = path;
    char *p = text;
    // The header: the first line that is not empty. Each used name's first column is the one read.
    signed char slot[CSV_MAX_COLS];
    int n_slots = 0;
    while (*p && !n_slots) {
        int k = 0, end = 0;
        while (!end) {
            const char *f = next_field(&p, &end);
            if (k == 0 && end && !*f) break; // an empty line
            if (k < CSV_MAX_COLS) {
                slot[k] = -1;
                for (int u = 0; u < N_USED; u++)
                    if (!c->has[u] && !strcmp(f, used_names[u])) slot[k] = (signed char)u, c->has[u] = 1;
                n_slots = k + 1;
            }
            k++;
        }
    }
    size_t cap = 0;
    while (*p) {
        const char *row[N_USED];
        if (next_row(&p, slot, n_slots, row)) continue;
        if (c->n_rows == FIGURE_CSV_MAX_ROWS) {
            snprintf(err, errlen, "%s: more than %d rows, the most a figure's CSV may hold", SHOWN(path),
                     FIGURE_CSV_MAX_ROWS);
            figure_csv_free(c);
            return NULL;
        }
        if ((size_t)c->n_rows == cap) {
            cap = cap ? 2 * cap : 256;
            const char **grown = realloc(c->field, cap * N_USED * sizeof *grown);
            if (!grown) {
                snprintf(err, errlen, "out of memory");
                figure_csv_free(c);
                return NULL;
            }
            c->field = grown;
        }
        memcpy(c->field + (size_t)c->n_rows * N_USED, row, sizeof row);
        c->n_rows++;
    }
    return c;
}

void figure_csv_free(FigureCsv *c) {
    if (!c) return;
    free(c->field);
    free(c);
}

int figure_csv_is_plate(const FigureCsv *c) { return c->has[C_PANEL]; }

// Row r's field in used column col (rows from 0); "" for a column the header lacks.
static const char *at(const FigureCsv *c, int r, int col) { return c->field[(size_t)r * N_USED + col]; }

static double clamp(double d) { return d < FLOOR_DELTA || isnan(d) ? FLOOR_DELTA : d; }
static double clamp_delta(const char *s) { return clamp(strtod(s, NULL)); }

// A name as data for gnuplot: no control character (no line break, no tab), no double quote, at
// most NAME_MAX_BYTES bytes (then "...").
static void put_text(FILE *f, const char *s) {
    size_t n = strlen(s);
    const int cut = n > NAME_MAX_BYTES;
    if (cut)
        for (n = NAME_MAX_BYTES; n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80; n--) {}
    for (const unsigned char *c = (const unsigned char *)s; c < (const unsigned char *)s + n; c++)
        fputc(*c < 0x20 || *c == 0x7f ? '?' : *c == '"' ? '\'' : *c, f);
    if (cut) fputs("...", f);
}

// The names of the texts or the families, one a line.
static int put_names(FigureData *d, const char *file, char **names, int n, char *err, size_t errlen) {
    FILE *f = figure_data_file(d, file, err, errlen);
    if (!f) return -1;
    for (int i = 0; i < n; i++) put_text(f, names[i]), fputc('\n', f);
    return figure_data_done(f, file, err, errlen);
}

// --- The plate's figure and its measured panel ---

static int write_plate_data(const FigureCsv *c, FigureData *d, char *err, size_t errlen) {
    static const char *const names[] = {"int_en.dat", "int_zh.dat", "kivi_en.dat", "kivi_zh.dat", "hadamard_en.dat",
                                        "outliers_en.dat", "published.dat", "capacity.dat", "serve.dat"};
    enum { INT_EN, INT_ZH, KIVI_EN, KIVI_ZH, HADAMARD, OUTLIERS, PUBLISHED, CAPACITY, SERVE, N_FILES };
    FILE *f[N_FILES] = {0};
    int rows[N_FILES] = {0};
    for (int i = 0; i < N_FILES; i++) {
        f[i] = figure_data_file(d, names[i], err, errlen);
        if (!f[i]) goto fail;
    }
    // The plate names its texts by their role, en and zh, whatever their files are called.
    for (int r = 0; r < c->n_rows; r++) {
        const char *p = at(c, r, C_PANEL), *l = at(c, r, C_LABEL), *t = at(c, r, C_TEXT), *held = at(c, r, C_HELD);
        const int en = !strcmp(t, "en"), zh = !strcmp(t, "zh");
        int bits, used = 0;
        char rest[64];
        if (!strcmp(p, "loss") && sscanf(l, "int %d", &bits) == 1 && (en || zh)) {
            fprintf(f[en ? INT_EN : INT_ZH], "%d %.9g\n", bits, clamp_delta(at(c, r, C_DELTA))), rows[en ? INT_EN : INT_ZH]++;
            if (en && *at(c, r, C_PUBLISHED))
                fprintf(f[PUBLISHED], "%d %.9g\n", bits, strtod(at(c, r, C_PUBLISHED), NULL)), rows[PUBLISHED]++;
        } else if (!strcmp(p, "beyond") && sscanf(l, "kivi %d", &bits) == 1 && (en || zh)) {
            fprintf(f[en ? KIVI_EN : KIVI_ZH], "%d %.9g\n", bits, clamp_delta(at(c, r, C_DELTA))), rows[en ? KIVI_EN : KIVI_ZH]++;
        } else if (!strcmp(p, "beyond") && en && sscanf(l, "int %d + %63[^\n]", &bits, rest) == 2 &&
                   (!strcmp(rest, "hadamard") || !strcmp(rest, "1% outliers"))) {
            const int which = rest[0] == 'h' ? HADAMARD : OUTLIERS;
            fprintf(f[which], "%d %.9g\n", bits, clamp_delta(at(c, r, C_DELTA))), rows[which]++;
        } else if (!strcmp(p, "capacity") && sscanf(l, "%d-bit%n", &bits, &used) == 1 && !l[used]) {
            fprintf(f[CAPACITY], "%d %.9g\n", bits, strtod(held, NULL)), rows[CAPACITY]++;
        } else if (!strcmp(p, "serve")) {
            fputc('"', f[SERVE]);
            put_text(f[SERVE], l);
            fprintf(f[SERVE], "\" %.9g %.9g %.9g %.9g\n", strtod(held, NULL), strtod(at(c, r, C_PLAIN), NULL),
                    strtod(at(c, r, C_META), NULL), strtod(at(c, r, C_TPS), NULL));
            rows[SERVE]++;
        }
    }
    int status = 0;
    for (int i = 0; i < N_FILES; i++) {
        if (figure_data_done(f[i], names[i], err, errlen)) status = -1;
        f[i] = NULL;
        if (!status && !rows[i]) {
            snprintf(err, errlen, "the CSV has no rows for %.*s (is it micro plate's?)", (int)strcspn(names[i], "."), names[i]);
            status = -1;
        }
        if (!status && (i == CAPACITY || i == SERVE) && rows[i] > FIGURE_MAX_BARS) {
            snprintf(err, errlen, "%s: %d %s rows, more than the %d bars a figure draws", SHOWN(c->path), rows[i],
                     i == SERVE ? "serve" : "capacity", FIGURE_MAX_BARS);
            status = -1;
        }
    }
    return status;
fail:
    for (int i = 0; i < N_FILES; i++)
        if (f[i]) fclose(f[i]);
    return -1;
}

// --- The frontier and panel (g) ---

typedef struct {
    double bits, delta;
    int row, text, family;
} Point;

// NaN after every number, so that the orders below are total.
static int by_number(double a, double b) {
    if (isnan(a) || isnan(b)) return !!isnan(a) - !!isnan(b);
    return (a > b) - (a < b);
}

// By text, then bits, then increase: each text's frontier in one pass.
static int by_point(const void *a, const void *b) {
    const Point *x = a, *y = b;
    if (x->text != y->text) return x->text - y->text;
    int o = by_number(x->bits, y->bits);
    if (!o) o = by_number(x->delta, y->delta);
    return o ? o : x->row - y->row; // stable: the CSV's order among equals
}

// By text, then family, then as by_point: each text's points, a family drawn over the one before.
static int by_family(const void *a, const void *b) {
    const Point *x = a, *y = b;
    if (x->text != y->text) return x->text - y->text;
    if (x->family != y->family) return x->family - y->family;
    return by_point(a, b);
}

static int by_string(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Sorted distinct strings of list (n of them); *m gets how many.
static char **distinct(char **list, int n, int *m) {
    char **out = malloc(sizeof *out * (size_t)(n ? n : 1));
    if (!out) return NULL;
    memcpy(out, list, sizeof *out * (size_t)n);
    qsort(out, (size_t)n, sizeof *out, by_string);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!k || strcmp(out[k - 1], out[i])) out[k++] = out[i];
    *m = k;
    return out;
}

static int index_of(char **sorted, int n, const char *s) {
    char *const *hit = bsearch(&s, sorted, (size_t)n, sizeof *sorted, by_string);
    return hit ? (int)(hit - sorted) : -1;
}

// Points and their names, sorted and counted, within a figure's limits (texts and what say in the
// message what was over).
typedef struct {
    Point *pts, *by_fam;
    char **texts, **names, **tset, **nset;
    int np, nt, nn;
} Points;

static void points_free(Points *s, int own_names) {
    if (own_names && s->names)
        for (int i = 0; i < s->np; i++) free(s->names[i]);
    free(s->pts), free(s->by_fam), free(s->texts), free(s->names), free(s->tset), free(s->nset);
    memset(s, 0, sizeof *s);
}

static int points_alloc(Points *s, int n, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    const size_t k = (size_t)(n ? n : 1);
    s->pts = malloc(sizeof *s->pts * k), s->by_fam = malloc(sizeof *s->by_fam * k);
    s->texts = malloc(sizeof *s->texts * k), s->names = calloc(k, sizeof *s->names);
    if (s->pts && s->by_fam && s->texts && s->names) return 0;
    snprintf(err, errlen, "out of memory");
    return -1;
}

static int points_sort(Points *s, const char *path, const char *texts, const char *what, char *err, size_t errlen) {
    s->tset = distinct(s->texts, s->np, &s->nt);
    s->nset = distinct(s->names, s->np, &s->nn);
    if (!s->tset || !s->nset) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (s->nt > FIGURE_MAX_TEXTS) {
        snprintf(err, errlen, "%s: %d %s, more than the %d a figure draws", SHOWN(path), s->nt, texts, FIGURE_MAX_TEXTS);
        return -1;
    }
    if (s->nn > FIGURE_MAX_FAMILIES) {
        snprintf(err, errlen, "%s: %d %s, more than the %d a figure's key tells apart", SHOWN(path), s->nn, what,
                 FIGURE_MAX_FAMILIES);
        return -1;
    }
    for (int i = 0; i < s->np; i++)
        s->pts[i].text = index_of(s->tset, s->nt, s->texts[i]), s->pts[i].family = index_of(s->nset, s->nn, s->names[i]);
    memcpy(s->by_fam, s->pts, sizeof *s->pts * (size_t)s->np);
    qsort(s->pts, (size_t)s->np, sizeof *s->pts, by_point);
    qsort(s->by_fam, (size_t)s->np, sizeof *s->by_fam, by_family);
    return 0;
}

// A family's marker, as its key entry in frontier.gp and arch.gp draws it (family from 0): written
// with each point, so that gnuplot reads numbers instead of evaluating an expression per point.
static void frontier_marker(int family, int *pt, int *lc) { *pt = family % 13 + 1, *lc = family % 8 + 1; }
static void arch_marker(int arch, int *pt, int *lc) { *pt = arch * 2 + 5, *lc = arch + 1; }

// Two blocks (gnuplot's index) per text: its Pareto frontier (a point is on it when its increase
// is below every point's with fewer or equal bits, or bytes) as "x increase", then its points as
// "x increase pointtype linecolor", by family; each block ends in a NaN point, so that none is
// empty. With members, the frontier's rows are named there by their k_cache and v_cache columns.
static void put_blocks(FILE *f, const FigureCsv *c, const Points *s, void (*marker)(int, int *, int *), FILE *members) {
    int i = 0, j = 0;
    for (int t = 0; t < s->nt; t++) {
        if (members) fprintf(members, "frontier, %s: ", SHOWN(s->tset[t]));
        double best = INFINITY;
        int shown = 0;
        for (; i < s->np && s->pts[i].text == t; i++) {
            const Point *q = &s->pts[i];
            if (!(q->delta < best)) continue;
            best = q->delta;
            fprintf(f, "%.9g %.9g\n", q->bits, clamp(q->delta));
            if (members) {
                const char *k = at(c, q->row, C_K), *v = at(c, q->row, C_V);
                fprintf(members, "%s%s%s%s %.2f bits %+.4f", shown++ ? "; " : "", SHOWN(k), strcmp(k, v) ? " / " : "",
                        strcmp(k, v) ? SHOWN(v) : "", q->bits, q->delta);
            }
        }
        if (members) fputc('\n', members);
        fprintf(f, "NaN NaN\n\n\n");
        for (; j < s->np && s->by_fam[j].text == t; j++) {
            int pt, lc;
            marker(s->by_fam[j].family, &pt, &lc);
            fprintf(f, "%.9g %.9g %d %d\n", s->by_fam[j].bits, clamp(s->by_fam[j].delta), pt, lc);
        }
        fprintf(f, "NaN NaN 1 1\n\n\n");
    }
}

// The frontier's files (figure frontier.gp's ARG3 and ARG4 in nt and nf), its members to members.
static int write_frontier_data(const FigureCsv *c, FigureData *d, FILE *members, int *nt, int *nf, char *err,
                               size_t errlen) {
    if (!c->has[C_TEXT] || !c->has[C_K] || !c->has[C_V] || !c->has[C_DELTA] || !c->has[C_BITS]) {
        snprintf(err, errlen, "%s is not micro sweep's or plate's CSV (columns bits_per_element, delta, k_cache, text, v_cache)",
                 SHOWN(c->path));
        return -1;
    }
    Points s;
    int status = -1;
    FILE *f = NULL;
    if (points_alloc(&s, c->n_rows, err, errlen)) goto done;
    for (int r = 0; r < c->n_rows; r++) {
        const char *p = at(c, r, C_PANEL);
        if (c->has[C_PANEL] && strcmp(p, "loss") && strcmp(p, "beyond")) continue;
        if (!*at(c, r, C_DELTA) || !*at(c, r, C_BITS)) continue;
        const char *k = at(c, r, C_K), *v = at(c, r, C_V);
        const size_t kl = strcspn(k, ":"), vl = strcspn(v, ":");
        char *fam = malloc(kl + vl + 2);
        if (!fam) {
            snprintf(err, errlen, "out of memory");
            goto done;
        }
        if (kl == vl && !strncmp(k, v, kl))
            snprintf(fam, kl + 1, "%s", k);
        else
            snprintf(fam, kl + vl + 2, "%.*s/%.*s", (int)kl, k, (int)vl, v);
        s.texts[s.np] = (char *)at(c, r, C_TEXT);
        s.names[s.np] = fam;
        s.pts[s.np] = (Point){strtod(at(c, r, C_BITS), NULL), strtod(at(c, r, C_DELTA), NULL), r, 0, 0};
        s.np++;
    }
    if (!s.np) {
        snprintf(err, errlen, "%s has no loss rows to draw", SHOWN(c->path));
        goto done;
    }
    if (points_sort(&s, c->path, "texts", "families (k_cache/v_cache)", err, errlen)) goto done;
    *nt = s.nt, *nf = s.nn;
    if (put_names(d, "texts", s.tset, s.nt, err, errlen) || put_names(d, "families", s.nset, s.nn, err, errlen)) goto done;
    if (!(f = figure_data_file(d, "plate_points.dat", err, errlen))) goto done;
    fprintf(f, "8 0.0008\n4 0.044\n3 0.238\n2 0.96\n");
    const int bad = figure_data_done(f, "plate_points.dat", err, errlen);
    f = NULL;
    if (bad) goto done;
    if (!(f = figure_data_file(d, "frontier.dat", err, errlen))) goto done;
    put_blocks(f, c, &s, frontier_marker, members);
    status = figure_data_done(f, "frontier.dat", err, errlen);
    f = NULL;
done:
    if (f) fclose(f);
    points_free(&s, 1);
    return status;
}

// The arch figure's files (arch.gp's ARG3 and ARG4 in nt and na) from the CSV's "arch" rows: per
// text, the Pareto frontier over every row (bytes per token ascending, each whose increase over
// micro's fp32 cache is below every one before it), then its points by architecture. 0 rows: *na 0.
static int write_arch_data(const FigureCsv *c, FigureData *d, int *nt, int *na, char *err, size_t errlen) {
    *nt = *na = 0;
    if (!c->has[C_PANEL] || !c->has[C_TEXT] || !c->has[C_BYTES] || !c->has[C_DELTA_MICRO] || !c->has[C_ARCH]) return 0;
    Points s;
    int status = -1;
    FILE *f = NULL;
    if (points_alloc(&s, c->n_rows, err, errlen)) goto done;
    for (int r = 0; r < c->n_rows; r++) {
        if (strcmp(at(c, r, C_PANEL), "arch") || !*at(c, r, C_BYTES) || !*at(c, r, C_DELTA_MICRO)) continue;
        s.texts[s.np] = (char *)at(c, r, C_TEXT), s.names[s.np] = (char *)at(c, r, C_ARCH);
        s.pts[s.np] = (Point){strtod(at(c, r, C_BYTES), NULL), strtod(at(c, r, C_DELTA_MICRO), NULL), r, 0, 0};
        s.np++;
    }
    if (!s.np) {
        status = 0;
        goto done;
    }
    if (points_sort(&s, c->path, "texts in panel (g)", "architectures in panel (g)", err, errlen)) goto done;
    *nt = s.nt, *na = s.nn;
    if (put_names(d, "arch_texts", s.tset, s.nt, err, errlen) || put_names(d, "archs", s.nset, s.nn, err, errlen)) goto done;
    if (!(f = figure_data_file(d, "arch.dat", err, errlen))) goto done;
    put_blocks(f, c, &s, arch_marker, NULL);
    status = figure_data_done(f, "arch.dat", err, errlen);
    f = NULL;
done:
    if (f) fclose(f);
    points_free(&s, 0);
    return status;
}

int figure_csv_write(const FigureCsv *c, FigureData *d, FILE *members, FigureCsvCounts *n, char *err, size_t errlen) {
    memset(n, 0, sizeof *n);
    if (c->has[C_PANEL] && write_plate_data(c, d, err, errlen)) return -1;
    if (write_frontier_data(c, d, members, &n->texts, &n->families, err, errlen)) return -1;
    if (c->has[C_PANEL] && write_arch_data(c, d, &n->arch_texts, &n->archs, err, errlen)) return -1;
    return 0;
}

int figure_check_csv_outputs(const char *out_dir, int plate, char *err, size_t errlen) {
    if (plate && (figure_check_outputs(out_dir, "plate", err, errlen) || figure_check_outputs(out_dir, "serve", err, errlen) ||
                  figure_check_outputs(out_dir, "arch", err, errlen)))
        return -1;
    return figure_check_outputs(out_dir, "frontier", err, errlen);
}

// The file's text, NUL-terminated (malloc'ed), or NULL with err set.
static char *read_csv(const char *path, char *err, size_t errlen) {
    long long size;
    FILE *f = safe_open_read(path, &size, err, errlen);
    if (!f) return NULL;
    if (size > FIGURE_CSV_MAX_BYTES) {
        fclose(f);
        snprintf(err, errlen, "%s: %lld bytes, more than a figure's CSV may hold (%lld)", SHOWN(path), size,
                 FIGURE_CSV_MAX_BYTES);
        return NULL;
    }
    char *text = malloc((size_t)size + 1);
    const size_t got = text ? fread(text, 1, (size_t)size, f) : 0;
    const int bad = ferror(f);
    fclose(f);
    if (!text || bad) {
        snprintf(err, errlen, "%s: %s", SHOWN(path), text ? "read failed" : "out of memory");
        free(text);
        return NULL;
    }
    text[got] = 0;
    return text;
}

int figure_from_csv(const char *csv_path, const char *out_dir, FILE *members, char *drawn, size_t drawnlen, char *err,
                    size_t errlen) {
    char *text = read_csv(csv_path, err, errlen);
    if (!text) return FIGURE_FAILED;
    FigureCsv *c = figure_csv_parse(text, csv_path, err, errlen);
    if (!c) {
        free(text);
        return FIGURE_FAILED;
    }
    FigureData d;
    if (figure_data_open(&d, err, errlen)) {
        figure_csv_free(c);
        free(text);
        return FIGURE_FAILED;
    }
    const int plate = figure_csv_is_plate(c);
    int status = FIGURE_FAILED;
    // The members are printed once every figure is drawn, so that a refusal prints only its line.
    char *listed = NULL;
    size_t listed_len = 0;
    FILE *list = members ? open_memstream(&listed, &listed_len) : NULL;
    FigureCsvCounts n;
    char ntext[16], nfam[16], atext[16], narch[16];
    if (members && !list) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (figure_check_csv_outputs(out_dir, plate, err, errlen)) goto done;
    if (figure_csv_write(c, &d, list, &n, err, errlen)) goto done;
    snprintf(ntext, sizeof ntext, "%d", n.texts);
    snprintf(nfam, sizeof nfam, "%d", n.families);
    snprintf(atext, sizeof atext, "%d", n.arch_texts);
    snprintf(narch, sizeof narch, "%d", n.archs);
    const FigureSpec figures[] = {
        {"plate", out_dir, "plate", 1100, 460, 12, 10, {NULL}},
        {"serve", out_dir, "serve", 1100, 420, 12, 10, {NULL}},
        {"frontier", out_dir, "frontier", 1200, 520, 12, 10, {ntext, nfam, NULL}},
        {"arch", out_dir, "arch", 1200, 520, 12, 10, {atext, narch, NULL}},
    };
    for (int i = plate ? 0 : 2; i < (plate && n.archs ? 4 : 3); i++)
        if ((status = figure_draw(&d, &figures[i], err, errlen)) != FIGURE_DRAWN) break;
    if (status == FIGURE_FAILED) goto done;
    if (list && fflush(list) == 0 && listed_len) fwrite(listed, 1, listed_len, members);
    if (status == FIGURE_NO_GNUPLOT) goto done;
    const char *dir = SHOWN(out_dir);
    if (plate)
        snprintf(drawn, drawnlen, "%s/plate.svg and .png, %s/serve.svg and .png, %s/frontier.svg and .png%s%s%s", dir,
                 dir, dir, n.archs ? ", " : "", n.archs ? dir : "", n.archs ? "/arch.svg and .png" : "");
    else
        snprintf(drawn, drawnlen, "%s/frontier.svg and .png", dir);
done:
    if (list) fclose(list);
    free(listed);
    figure_data_close(&d);
    figure_csv_free(c);
    free(text);
    return status;
}
