// The figures drawn from micro's own CSV: plate's (plate, serve and frontier) and sweep's (the
// frontier). The rows are read as data and written to figure.h's private folder, never into a
// program.
#ifndef MICRO_FIGURE_CSV_H
#define MICRO_FIGURE_CSV_H

#include <stddef.h>
#include <stdio.h>

// The most a figure's CSV may hold (sweep's 4,096 specs on a few texts are a few MB).
#define FIGURE_CSV_MAX_BYTES (64ll << 20)

// A CSV with a "panel" column is plate's: OUT_DIR/plate, serve and frontier (.svg and .png) are
// drawn. Any other is sweep's (text, k_cache, v_cache, delta, bits_per_element): OUT_DIR/frontier,
// and when members is not NULL the frontier's members printed to it, a line per text.
// drawn gets the list of what was drawn. Returns figure.h's FIGURE_DRAWN, FIGURE_NO_GNUPLOT or
// FIGURE_FAILED, with err set for the last two.
int figure_from_csv(const char *csv_path, const char *out_dir, FILE *members, char *drawn, size_t drawnlen, char *err,
                    size_t errlen);
// The outputs figure_from_csv would write, checked before any work (safe_check_output).
int figure_check_csv_outputs(const char *out_dir, int plate, char *err, size_t errlen);

#endif
