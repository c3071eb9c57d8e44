// micro figure's CSV reader and the figures' data (figure_csv.h), gnuplot left out: any bytes are
// one line of refusal, or data within the figures' limits that reads back as the programs expect —
// two blocks a text, a frontier whose increase never rises, names without a line break or a quote.
#include "figure.h"
#include "figure_csv.h"
#include "fuzz.h"

#include <math.h>

// The data folder's file name, read whole (NULL when it is not there).
static char *slurp(const FigureData *d, const char *name, size_t *n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", d->dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            char *bigger = realloc(buf, (cap *= 2) + 1);
            if (!bigger) free(buf);
            buf = bigger;
        }
    }
    fclose(f);
    FUZZ_REQUIRE(buf);
    buf[len] = 0;
    *n = len;
    return buf;
}

static int count_char(const char *s, size_t n, char c) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == c;
    return k;
}

// A names file: want lines, each short, with no control character and no double quote.
static void check_names(const FigureData *d, const char *name, int want) {
    size_t n;
    char *s = slurp(d, name, &n);
    FUZZ_REQUIRE(s);
    FUZZ_REQUIRE(count_char(s, n, '\n') == want && (n == 0 || s[n - 1] == '\n'));
    for (char *line = s; *line;) {
        char *end = strchr(line, '\n');
        FUZZ_REQUIRE(end && end - line <= 160);
        for (char *c = line; c < end; c++) FUZZ_REQUIRE((unsigned char)*c >= 0x20 && *c != 0x7f && *c != '"');
        line = end + 1;
    }
    free(s);
}

// frontier.dat or arch.dat: 2 * texts blocks; in each frontier block the increase never rises (and
// never falls below the floor), in each points block every line has four fields.
static void check_blocks(const FigureData *d, const char *name, int texts) {
    size_t n;
    char *s = slurp(d, name, &n);
    FUZZ_REQUIRE(s);
    int blocks = 0;
    for (char *b = s; *b; blocks++) {
        char *end = strstr(b, "\n\n\n");
        FUZZ_REQUIRE(end);
        *end = 0;
        double last = INFINITY;
        for (char *line = b; line;) {
            char *next = strchr(line, '\n');
            if (next) *next++ = 0;
            double x, y;
            int pt, lc, fields = sscanf(line, "%lf %lf %d %d", &x, &y, &pt, &lc);
            if (blocks % 2 == 0) {
                FUZZ_REQUIRE(fields == 2);
                if (!isnan(y)) {
                    FUZZ_REQUIRE(y >= 1e-4 && y <= last);
                    last = y;
                }
            } else {
                FUZZ_REQUIRE(fields == 4 && pt >= 1 && lc >= 1);
            }
            line = next;
        }
        b = end + 3;
    }
    FUZZ_REQUIRE(blocks == 2 * texts);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char err[600];
    FigureCsv *c = figure_csv_parse(text, "fuzz.csv", err, sizeof err);
    FUZZ_REQUIRE(c); // a 64 KiB input holds fewer rows than the limit
    FigureData d;
    FUZZ_REQUIRE(figure_data_open(&d, err, sizeof err) == 0);
    char *listed = NULL;
    size_t listed_len = 0;
    FILE *members = open_memstream(&listed, &listed_len);
    FUZZ_REQUIRE(members);
    FigureCsvCounts n;
    if (figure_csv_write(c, &d, members, &n, err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
    } else {
        FUZZ_REQUIRE(n.texts >= 1 && n.texts <= FIGURE_MAX_TEXTS && n.families >= 1 && n.families <= FIGURE_MAX_FAMILIES);
        FUZZ_REQUIRE(n.arch_texts >= 0 && n.arch_texts <= FIGURE_MAX_TEXTS && n.archs >= 0 && n.archs <= FIGURE_MAX_FAMILIES);
        FUZZ_REQUIRE(!n.archs == !n.arch_texts);
        FUZZ_REQUIRE(!n.archs || figure_csv_is_plate(c));
        check_names(&d, "texts", n.texts);
        check_names(&d, "families", n.families);
        check_blocks(&d, "frontier.dat", n.texts);
        if (n.archs) {
            check_names(&d, "arch_texts", n.arch_texts);
            check_names(&d, "archs", n.archs);
            check_blocks(&d, "arch.dat", n.arch_texts);
        }
        FUZZ_REQUIRE(fflush(members) == 0);
        FUZZ_REQUIRE(count_char(listed, listed_len, '\n') == n.texts); // a line per text
    }
    fclose(members);
    free(listed);
    figure_data_close(&d);
    figure_csv_free(c);
    free(text);
    return 0;
}
