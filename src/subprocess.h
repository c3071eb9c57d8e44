// Running a helper program (scripts/plot) without a shell: the arguments go to it as they are, so
// a path holding an apostrophe, a semicolon or `$(...)` is a path and nothing else.
#ifndef MICRO_SUBPROCESS_H
#define MICRO_SUBPROCESS_H

#include <stddef.h>

// Runs argv[0] (a path, not searched in PATH) with argv, stdout sent to /dev/null when quiet,
// stderr shared, and waits for it. Returns its exit status (0..255), or -1 with err set when it
// could not start or was killed by a signal.
int spawn_wait(char *const argv[], int quiet, char *err, size_t errlen);
// 1 when an executable called name is on PATH (what `command -v` says, without a shell).
int spawn_in_path(const char *name);

#endif
