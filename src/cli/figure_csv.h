// The figures drawn from micro's own CSV: plate's (plate, serve and frontier) and sweep's (the
// frontier). The rows are read as data and written to figure.h's private folder, never into a
// program.
#ifndef MICRO_FIGURE_CSV_H
#define MICRO_FIGURE_CSV_H

#include <stddef.h>
#include <stdio.h>

#include "figure.h"

// The most a figure's CSV may hold (sweep's 4,096 specs on a few texts are a few MB).
#define FIGURE_CSV_MAX_BYTES (64ll << 20)
// Its most rows, the header and empty lines not counted: sweep's most, 4,096 specs on 16 texts, and
// room beside them. Memory is the file and, per row, a pointer per column the figures read.
#define FIGURE_CSV_MAX_ROWS 100000
// The most texts a figure draws (a panel each, side by side): sweep's most (SWEEP_MAX_TEXTS).
#define FIGURE_MAX_TEXTS 16
// The most families (the frontier's k_cache/v_cache pairs, panel (g)'s architectures) a figure's
// key tells apart: every codec family and many pairs of them.
#define FIGURE_MAX_FAMILIES 64
// The most bars in each of the plate's bar charts (its capacity and serve rows; micro writes under ten).
#define FIGURE_MAX_BARS 64

// A CSV with a "panel" column is plate's: OUT_DIR/plate, serve and frontier (.svg and .png) are
// drawn. Any other is sweep's (text, k_cache, v_cache, delta, bits_per_element): OUT_DIR/frontier,
// and when members is not NULL the frontier's members printed to it, a line per text.
// drawn gets the list of what was drawn. Returns figure.h's FIGURE_DRAWN, FIGURE_NO_GNUPLOT or
// FIGURE_FAILED, with err set for the last two.
int figure_from_csv(const char *csv_path, const char *out_dir, FILE *members, char *drawn, size_t drawnlen, char *err,
                    size_t errlen);
// The outputs figure_from_csv would write, checked before any work (safe_check_output).
int figure_check_csv_outputs(const char *out_dir, int plate, char *err, size_t errlen);

// figure_from_csv's steps before gnuplot, on a CSV's text (what the fuzzer drives).
typedef struct FigureCsv FigureCsv;
// Cuts text (NUL-terminated, kept and changed in place until figure_csv_free) into the rows and the
// columns the figures read; path names it in messages. NULL with err set (more rows than the limit).
FigureCsv *figure_csv_parse(char *text, const char *path, char *err, size_t errlen);
// Whether it is plate's CSV (it has a "panel" column).
int figure_csv_is_plate(const FigureCsv *c);
// The counts the gnuplot programs take: the frontier's texts and families, panel (g)'s texts and
// architectures (0 when the CSV has none).
typedef struct {
    int texts, families, arch_texts, archs;
} FigureCsvCounts;
// Writes every figure's data into d (the frontier's members to members, when not NULL). 0, or -1
// with err set: not micro's CSV, no rows to draw, more texts or families than a figure draws.
int figure_csv_write(const FigureCsv *c, FigureData *d, FILE *members, FigureCsvCounts *n, char *err, size_t errlen);
void figure_csv_free(FigureCsv *c);

#endif
