// micro figure: draws the figures again from a CSV micro wrote, plate's or sweep's (figure_csv.h).
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "figure.h"
#include "figure_csv.h"
#include "opts.h"
#include "safe_file.h"

static const char *figure_usage =
    "usage: micro figure [--csv FILE] [--out DIR]\n"
    "  Draws the figures from a CSV micro wrote, with gnuplot: micro plate's (DIR/plate, serve and\n"
    "  frontier, .svg and .png) or micro sweep's (DIR/frontier.svg and .png: real bits against the\n"
    "  increase, the Pareto frontier drawn), and prints each text's frontier.\n"
    "  Limits (a CSV beyond one is refused in one line, nothing drawn): 64 MiB, 100,000 rows, 16 texts,\n"
    "  64 families (k_cache/v_cache pairs; panel (g)'s architectures), 64 capacity and 64 serve rows.\n"
    "options:\n"
    "  --csv FILE    the CSV (default out/plate.csv)\n"
    "  --out DIR     folder for the figures, made when missing (default out)\n"
    "  -h, --help    this help\n";

_Static_assert(FIGURE_CSV_MAX_BYTES == 64ll << 20 && FIGURE_CSV_MAX_ROWS == 100000 && FIGURE_MAX_TEXTS == 16 &&
                   FIGURE_MAX_FAMILIES == 64 && FIGURE_MAX_BARS == 64,
               "figure_usage states the limits");

static int figure_parse(int argc, char **argv, const char **csv, const char **out, char *err, size_t errlen) {
    *csv = "out/plate.csv", *out = "out";
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--csv")) bad = opts_path(&p, csv);
        else if (opts_is(&p, "--out")) bad = opts_path(&p, out);
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    return OPTS_RUN;
}

int cmd_figure(int argc, char **argv) {
    const char *csv, *out;
    char err[600], drawn[800];
    int done = cli_after_parse(figure_parse(argc, argv, &csv, &out, err, sizeof err), err, figure_usage);
    if (done >= 0) return done;
    if (safe_check_input(csv, err, sizeof err)) return cli_error("%s", err);
    if (cli_out_dir(out)) return 2;
    const int rc = figure_from_csv(csv, out, stdout, drawn, sizeof drawn, err, sizeof err);
    if (rc == FIGURE_FAILED) return cli_error("%s", err);
    printf("figure: %s\n", rc == FIGURE_DRAWN ? drawn : err);
    return 0;
}
