// Running a helper program (gnuplot) without a shell: the arguments go to it as they are, so a path
// holding a newline, an apostrophe, a semicolon or `$(...)` is a path and nothing else.
#ifndef MICRO_SUBPROCESS_H
#define MICRO_SUBPROCESS_H

#include <stddef.h>

// Runs argv[0] (a path, not searched in PATH) with argv and waits for it. Its standard input is
// /dev/null; its standard output and error go to the files named (created or truncated), or to
// /dev/null where NULL. While it runs, a signal that ends micro ends it too (safe_track_helper).
// Returns its exit status (0..255), or -1 with err set when it could not start or was killed.
int spawn_wait(char *const argv[], const char *out_path, const char *err_path, char *err, size_t errlen);
// Finds an executable called name in PATH (the usual folders when PATH is unset or empty) and
// writes its path to buf: 0, or -1 when there is none (or the path does not fit).
int spawn_find(const char *name, char *buf, size_t n);

#endif
