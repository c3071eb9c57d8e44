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
#define CSV_MAX_COLS 64

typedef struct {
    char **field; // every row's n_cols fields, row-major (the header first); a missing one is ""
    int n_rows, n_cols;
    char *text;   // the file, cut into fields in place
} Csv;

static void csv_free(Csv *c) {
    free(c->field);
    free(c->text);
    memset(c, 0, sizeof *c);
}

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

static int csv_parse(Csv *c, char *err, size_t errlen) {
    size_t cap = 0, n = 0;
    char *p = c->text;
    while (*p) {
        char *row[CSV_MAX_COLS];
        int k = 0, end = 0;
        while (!end) {
            char *f = next_field(&p, &end);
            if (k < CSV_MAX_COLS) row[k++] = f;
        }
        if (k == 1 && !*row[0]) continue; // an empty line
        if (!c->n_cols) c->n_cols = k;
        if (n + (size_t)c->n_cols > cap) {
            cap = cap ? 2 * cap + (size_t)c->n_cols : 64 * (size_t)c->n_cols;
            char **grown = realloc(c->field, cap * sizeof *grown);
            if (!grown) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            c->field = grown;
        }
        for (int i = 0; i < c->n_cols; i++) c->field[n++] = i < k ? row[i] : "";
        c->n_rows++;
    }
    return 0;
}

static int csv_load(Csv *c, const char *path, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    long long size;
    FILE *f = safe_open_read(path, &size, err, errlen);
    if (!f) return -1;
    if (size > FIGURE_CSV_MAX_BYTES) {
        fclose(f);
        snprintf(err, errlen, "%s: %lld bytes, more than a figure's CSV may hold (%lld)", SHOWN(path), size,
                 FIGURE_CSV_MAX_BYTES);
        return -1;
    }
    c->text = malloc((size_t)size + 1);
    const size_t got = c->text ? fread(c->text, 1, (size_t)size, f) : 0;
    const int bad = ferror(f);
    fclose(f);
    if (!c->text || bad) {
        snprintf(err, errlen, "%s: %s", SHOWN(path), c->text ? "read failed" : "out of memory");
        csv_free(c);
        return -1;
    }
    c->text[got] = 0;
    if (csv_parse(c, err, errlen)) {
        csv_free(c);
        return -1;
    }
    return 0;
}

static int csv_col(const Csv *c, const char *name) {
    for (int i = 0; i < c->n_cols; i++)
        if (!strcmp(c->field[i], name)) return i;
    return -1;
}

// Row r's field in column col (rows from 1: row 0 is the header); "" for a missing column.
static const char *at(const Csv *c, int r, int col) { return col < 0 ? "" : c->field[(size_t)r * c->n_cols + col]; }

static double clamp_delta(const char *s) {
    const double d = strtod(s, NULL);
    return d < FLOOR_DELTA || isnan(d) ? FLOOR_DELTA : d;
}

// A name as data for gnuplot: no control character (no line break, no tab), no double quote.
static void put_text(FILE *f, const char *s) {
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) fputc(*c < 0x20 || *c == 0x7f ? '?' : *c == '"' ? '\'' : *c, f);
}

// The names of the texts or the families, one a line.
static int put_names(FigureData *d, const char *file, char **names, int n, char *err, size_t errlen) {
    FILE *f = figure_data_file(d, file, err, errlen);
    if (!f) return -1;
    for (int i = 0; i < n; i++) put_text(f, names[i]), fputc('\n', f);
    return figure_data_done(f, file, err, errlen);
}

// --- The plate's figure and its measured panel ---

static int write_plate_data(const Csv *c, FigureData *d, char *err, size_t errlen) {
    const int panel = csv_col(c, "panel"), label = csv_col(c, "label"), text = csv_col(c, "text"),
              delta = csv_col(c, "delta"), published = csv_col(c, "published_delta"),
              held = csv_col(c, "conversations"), plain = csv_col(c, "predicted_plain"),
              meta = csv_col(c, "predicted_metadata"), tps = csv_col(c, "tokens_per_s");
    static const char *const names[] = {"int_en.dat", "int_zh.dat", "kivi_en.dat", "kivi_zh.dat", "hadamard_en.dat",
                                        "outliers_en.dat", "published.dat", "capacity.dat", "serve.dat"};
    enum { INT_EN, INT_ZH, KIVI_EN, KIVI_ZH, HADAMARD, OUTLIERS, PUBLISHED, CAPACITY, SERVE, N_FILES };
    FILE *f[N_FILES] = {0};
    int rows[N_FILES] = {0};
    for (int i = 0; i < N_FILES; i++) {
        f[i] = figure_data_file(d, names[i], err, errlen);
        if (!f[i]) goto fail;
    }
    for (int r = 1; r < c->n_rows; r++) {
        const char *p = at(c, r, panel), *l = at(c, r, label), *t = at(c, r, text);
        const int en = !strcmp(t, "en"), zh = !strcmp(t, "zh");
        int bits, used = 0;
        char rest[64];
        if (!strcmp(p, "loss") && sscanf(l, "int %d", &bits) == 1 && (en || zh)) {
            fprintf(f[en ? INT_EN : INT_ZH], "%d %.9g\n", bits, clamp_delta(at(c, r, delta))), rows[en ? INT_EN : INT_ZH]++;
            if (en && *at(c, r, published))
                fprintf(f[PUBLISHED], "%d %s\n", bits, at(c, r, published)), rows[PUBLISHED]++;
        } else if (!strcmp(p, "beyond") && sscanf(l, "kivi %d", &bits) == 1 && (en || zh)) {
            fprintf(f[en ? KIVI_EN : KIVI_ZH], "%d %.9g\n", bits, clamp_delta(at(c, r, delta))), rows[en ? KIVI_EN : KIVI_ZH]++;
        } else if (!strcmp(p, "beyond") && en && sscanf(l, "int %d + %63[^\n]", &bits, rest) == 2 &&
                   (!strcmp(rest, "hadamard") || !strcmp(rest, "1% outliers"))) {
            const int which = rest[0] == 'h' ? HADAMARD : OUTLIERS;
            fprintf(f[which], "%d %.9g\n", bits, clamp_delta(at(c, r, delta))), rows[which]++;
        } else if (!strcmp(p, "capacity") && sscanf(l, "%d-bit%n", &bits, &used) == 1 && !l[used]) {
            fprintf(f[CAPACITY], "%d %s\n", bits, at(c, r, held)), rows[CAPACITY]++;
        } else if (!strcmp(p, "serve")) {
            fputc('"', f[SERVE]);
            put_text(f[SERVE], l);
            fprintf(f[SERVE], "\" %s %s %s %s\n", at(c, r, held), at(c, r, plain), at(c, r, meta), at(c, r, tps));
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
    }
    return status;
fail:
    for (int i = 0; i < N_FILES; i++)
        if (f[i]) fclose(f[i]);
    return -1;
}

// --- The frontier ---

typedef struct {
    double bits, delta;
    int row, text, family;
} Point;

static int by_point(const void *a, const void *b) {
    const Point *x = a, *y = b;
    if (x->bits != y->bits) return x->bits < y->bits ? -1 : 1;
    if (x->delta != y->delta) return x->delta < y->delta ? -1 : 1;
    return x->row - y->row; // stable: the CSV's order among equals
}

static int by_string(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Sorted distinct strings of list (n of them, each malloc'ed); *m gets how many.
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

// One file of blocks (gnuplot's index) from points sorted by by_point: per text its Pareto frontier
// (a point is on it when its increase is below every point's with fewer or equal bits, or bytes),
// then each group's points; a block has at least a NaN point, so that no block is empty. With
// members, the frontier's rows are named there by their k_cache and v_cache columns (kc, vc).
static void put_pareto_blocks(FILE *f, const Csv *c, const Point *pts, int np, int nt, int ng, int delta, char **tset,
                              FILE *members, int kc, int vc) {
    for (int t = 0; t < nt; t++) {
        if (members) fprintf(members, "frontier, %s: ", SHOWN(tset[t]));
        double best = INFINITY;
        int shown = 0;
        for (int i = 0; i < np; i++) {
            if (pts[i].text != t || !(pts[i].delta < best)) continue;
            best = pts[i].delta;
            fprintf(f, "%.9g %.9g\n", pts[i].bits, clamp_delta(at(c, pts[i].row, delta)));
            if (members) {
                const char *k = at(c, pts[i].row, kc), *v = at(c, pts[i].row, vc);
                fprintf(members, "%s%s%s%s %.2f bits %+.4f", shown++ ? "; " : "", k, strcmp(k, v) ? " / " : "",
                        strcmp(k, v) ? v : "", pts[i].bits, pts[i].delta);
            }
        }
        if (members) fputc('\n', members);
        for (int g = 0; g < ng; g++) {
            fprintf(f, "NaN NaN\n\n\n");
            for (int i = 0; i < np; i++)
                if (pts[i].text == t && pts[i].family == g)
                    fprintf(f, "%.9g %.9g\n", pts[i].bits, clamp_delta(at(c, pts[i].row, delta)));
        }
        fprintf(f, "NaN NaN\n\n\n");
    }
}

// The frontier's files (figure frontier.gp's ARG3 and ARG4 in nt and nf), its members to members.
static int write_frontier_data(const Csv *c, const char *csv_path, FigureData *d, FILE *members, int *nt, int *nf,
                               char *err, size_t errlen) {
    const int panel = csv_col(c, "panel"), text = csv_col(c, "text"), kc = csv_col(c, "k_cache"),
              vc = csv_col(c, "v_cache"), delta = csv_col(c, "delta"), bitsc = csv_col(c, "bits_per_element");
    if (text < 0 || kc < 0 || vc < 0 || delta < 0 || bitsc < 0) {
        snprintf(err, errlen, "%s is not micro sweep's or plate's CSV (columns bits_per_element, delta, k_cache, text, v_cache)",
                 SHOWN(csv_path));
        return -1;
    }
    const int n = c->n_rows;
    Point *pts = malloc(sizeof *pts * (size_t)n);
    char **texts = malloc(sizeof *texts * (size_t)n), **fams = malloc(sizeof *fams * (size_t)n);
    char **tset = NULL, **fset = NULL;
    int np = 0, status = -1;
    FILE *f = NULL;
    if (!pts || !texts || !fams) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int r = 1; r < n; r++) {
        const char *p = at(c, r, panel);
        if (panel >= 0 && strcmp(p, "loss") && strcmp(p, "beyond")) continue;
        if (!*at(c, r, delta) || !*at(c, r, bitsc)) continue;
        const char *k = at(c, r, kc), *v = at(c, r, vc);
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
        texts[np] = (char *)at(c, r, text);
        fams[np] = fam;
        pts[np] = (Point){strtod(at(c, r, bitsc), NULL), strtod(at(c, r, delta), NULL), r, 0, 0};
        np++;
    }
    if (!np) {
        snprintf(err, errlen, "%s has no loss rows to draw", SHOWN(csv_path));
        goto done;
    }
    tset = distinct(texts, np, nt);
    fset = distinct(fams, np, nf);
    if (!tset || !fset) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int i = 0; i < np; i++) pts[i].text = index_of(tset, *nt, texts[i]), pts[i].family = index_of(fset, *nf, fams[i]);
    qsort(pts, (size_t)np, sizeof *pts, by_point);
    if (put_names(d, "texts", tset, *nt, err, errlen) || put_names(d, "families", fset, *nf, err, errlen)) goto done;
    if (!(f = figure_data_file(d, "plate_points.dat", err, errlen))) goto done;
    fprintf(f, "8 0.0008\n4 0.044\n3 0.238\n2 0.96\n");
    const int bad = figure_data_done(f, "plate_points.dat", err, errlen);
    f = NULL;
    if (bad) goto done;
    if (!(f = figure_data_file(d, "frontier.dat", err, errlen))) goto done;
    put_pareto_blocks(f, c, pts, np, *nt, *nf, delta, tset, members, kc, vc);
    status = figure_data_done(f, "frontier.dat", err, errlen);
    f = NULL;
done:
    if (f) fclose(f);
    if (fams)
        for (int i = 0; i < np; i++) free(fams[i]);
    free(pts), free(texts), free(fams), free(tset), free(fset);
    return status;
}

// --- Panel (g): architecture x cache ---

// The arch figure's files (arch.gp's ARG3 and ARG4 in nt and na) from the CSV's "arch" rows: per
// text, the Pareto frontier over every row (bytes per token ascending, each whose increase over
// micro's fp32 cache is below every one before it), then each architecture's points. 0 rows: *na 0.
static int write_arch_data(const Csv *c, FigureData *d, int *nt, int *na, char *err, size_t errlen) {
    const int panel = csv_col(c, "panel"), text = csv_col(c, "text"), bytes = csv_col(c, "bytes_per_token"),
              delta = csv_col(c, "delta_micro"), arch = csv_col(c, "arch");
    *nt = *na = 0;
    if (panel < 0 || text < 0 || bytes < 0 || delta < 0 || arch < 0) return 0;
    const int n = c->n_rows;
    Point *pts = malloc(sizeof *pts * (size_t)n);
    char **texts = malloc(sizeof *texts * (size_t)n), **names = malloc(sizeof *names * (size_t)n);
    char **tset = NULL, **aset = NULL;
    int np = 0, status = -1;
    FILE *f = NULL;
    if (!pts || !texts || !names) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int r = 1; r < n; r++) {
        if (strcmp(at(c, r, panel), "arch") || !*at(c, r, bytes) || !*at(c, r, delta)) continue;
        texts[np] = (char *)at(c, r, text), names[np] = (char *)at(c, r, arch);
        pts[np] = (Point){strtod(at(c, r, bytes), NULL), strtod(at(c, r, delta), NULL), r, 0, 0};
        np++;
    }
    if (!np) {
        status = 0;
        goto done;
    }
    tset = distinct(texts, np, nt);
    aset = distinct(names, np, na);
    if (!tset || !aset) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int i = 0; i < np; i++) pts[i].text = index_of(tset, *nt, texts[i]), pts[i].family = index_of(aset, *na, names[i]);
    qsort(pts, (size_t)np, sizeof *pts, by_point);
    if (put_names(d, "arch_texts", tset, *nt, err, errlen) || put_names(d, "archs", aset, *na, err, errlen)) goto done;
    if (!(f = figure_data_file(d, "arch.dat", err, errlen))) goto done;
    put_pareto_blocks(f, c, pts, np, *nt, *na, delta, tset, NULL, -1, -1);
    status = figure_data_done(f, "arch.dat", err, errlen);
    f = NULL;
done:
    if (f) fclose(f);
    free(pts), free(texts), free(names), free(tset), free(aset);
    return status;
}

int figure_check_csv_outputs(const char *out_dir, int plate, char *err, size_t errlen) {
    if (plate && (figure_check_outputs(out_dir, "plate", err, errlen) || figure_check_outputs(out_dir, "serve", err, errlen) ||
                  figure_check_outputs(out_dir, "arch", err, errlen)))
        return -1;
    return figure_check_outputs(out_dir, "frontier", err, errlen);
}

int figure_from_csv(const char *csv_path, const char *out_dir, FILE *members, char *drawn, size_t drawnlen, char *err,
                    size_t errlen) {
    Csv c;
    if (csv_load(&c, csv_path, err, errlen)) return FIGURE_FAILED;
    FigureData d;
    if (figure_data_open(&d, err, errlen)) {
        csv_free(&c);
        return FIGURE_FAILED;
    }
    const int plate = csv_col(&c, "panel") >= 0;
    int status = FIGURE_FAILED, nt = 0, nf = 0, at_nt = 0, na = 0;
    char ntext[16], nfam[16], atext[16], narch[16];
    if (figure_check_csv_outputs(out_dir, plate, err, errlen)) goto done;
    if (plate && write_plate_data(&c, &d, err, errlen)) goto done;
    if (write_frontier_data(&c, csv_path, &d, members, &nt, &nf, err, errlen)) goto done;
    if (plate && write_arch_data(&c, &d, &at_nt, &na, err, errlen)) goto done;
    snprintf(ntext, sizeof ntext, "%d", nt);
    snprintf(nfam, sizeof nfam, "%d", nf);
    snprintf(atext, sizeof atext, "%d", at_nt);
    snprintf(narch, sizeof narch, "%d", na);
    const FigureSpec figures[] = {
        {"plate", out_dir, "plate", 1100, 460, 12, 10, {NULL}},
        {"serve", out_dir, "serve", 1100, 420, 12, 10, {NULL}},
        {"frontier", out_dir, "frontier", 1200, 520, 12, 10, {ntext, nfam, NULL}},
        {"arch", out_dir, "arch", 1200, 520, 12, 10, {atext, narch, NULL}},
    };
    for (int i = plate ? 0 : 2; i < (plate && na ? 4 : 3); i++)
        if ((status = figure_draw(&d, &figures[i], err, errlen)) != FIGURE_DRAWN) goto done;
    const char *dir = SHOWN(out_dir);
    if (plate)
        snprintf(drawn, drawnlen, "%s/plate.svg and .png, %s/serve.svg and .png, %s/frontier.svg and .png%s%s%s", dir,
                 dir, dir, na ? ", " : "", na ? dir : "", na ? "/arch.svg and .png" : "");
    else
        snprintf(drawn, drawnlen, "%s/frontier.svg and .png", dir);
done:
    figure_data_close(&d);
    csv_free(&c);
    return status;
}
