// Figures, drawn by gnuplot without ever making a user's text into code. micro writes the data to a
// private folder and the gnuplot program (one of src/cli/figures/*.gp, built into micro) beside it, then
// runs gnuplot with an argument vector: the output's temporary name, the data folder and any title
// arrive as ARG1, ARG2, ... strings, never pasted into the program. Each output goes through
// safe_file like every other file micro writes: a temporary beside the target, renamed at the end,
// and a target that exists and is not a regular file is refused. gnuplot's own messages are kept
// in the private folder and never printed raw; micro says what failed in one line.
#ifndef MICRO_FIGURE_H
#define MICRO_FIGURE_H

#include <stddef.h>
#include <stdio.h>

#define FIGURE_FILES 32

// A private folder for a figure's data (under TMPDIR, else /tmp), removed with everything in it
// by figure_data_close, or by the signal handler (safe_cleanup_on_signals) if micro is killed.
typedef struct {
    char dir[4096];
    char *files[FIGURE_FILES];
    int n_files;
} FigureData;

int figure_data_open(FigureData *d, char *err, size_t errlen);
// Creates DIR/name for writing (tracked for removal; its path is the folder's newest, files[n_files
// - 1]). NULL with err set.
FILE *figure_data_file(FigureData *d, const char *name, char *err, size_t errlen);
// Closes a data file: 0, or -1 with err set when a write failed.
int figure_data_done(FILE *f, const char *name, char *err, size_t errlen);
void figure_data_close(FigureData *d);

typedef struct {
    const char *program;    // the built-in gnuplot program's name ("plate", "attention", ...)
    const char *out_dir;    // OUT_DIR/stem.svg and OUT_DIR/stem.png are drawn
    const char *stem;
    int width, height;      // pixels
    int font_svg, font_png; // points
    const char *args[6];    // ARG3, ARG4, ... of the program (ARG1 is the output, ARG2 the data folder); NULL ends them
} FigureSpec;

enum { FIGURE_DRAWN = 0, FIGURE_NO_GNUPLOT = 1, FIGURE_FAILED = -1 };
// Draws both outputs. FIGURE_NO_GNUPLOT with err saying so, FIGURE_FAILED with err set (the
// targets as they were), or FIGURE_DRAWN.
int figure_draw(FigureData *d, const FigureSpec *f, char *err, size_t errlen);
// A command's figure to the end: draws it, says in one line what happened ("figure: OUT/stem.svg
// and .png", or that gnuplot is missing, on stdout; micro's line on stderr when it failed), closes
// the data folder and returns the command's status (0, or 2 after a failure). With data_err set
// (the data could not be written), only says so and cleans up.
int figure_finish(FigureData *d, const FigureSpec *f, const char *data_err);
// Whether OUT_DIR/stem.svg and .png may be written (safe_check_output): checked before any work.
int figure_check_outputs(const char *out_dir, const char *stem, char *err, size_t errlen);

// The built-in programs (generated from src/cli/figures/*.gp by src/cli/figures/embed.py).
typedef struct {
    const char *name;
    const char *text;
} FigureProgram;
extern const FigureProgram figure_programs[];
extern const int figure_program_count;

#endif
