// Grids of cache specs (micro sweep --grid): each {a|b|...} stands for every alternative, so
// "int:bits={2|3|4}{|,rot=hadamard}" is six specs. The expansion is iterative and linear in the
// pattern's length per spec made, so no pattern that fits on a command line can exhaust the stack
// or the time: the count is known, and refused beyond the limit, before any spec is built.
#ifndef MICRO_GRID_H
#define MICRO_GRID_H

#include <stddef.h>

typedef struct {
    char **specs; // malloc'ed strings
    int n, max;   // max: the most specs the list may hold
} SpecList;

// Appends every expansion of pattern, the first group varying slowest, each group's alternatives
// left to right. Where a group had an empty choice, the separators it leaves are tidied ("x:,b"
// gives "x:b", trailing ',' and ':' go). -1 with err set on an unbalanced or nested brace, or
// when the list would pass max; then nothing is appended. A message quotes at most a short
// excerpt of the pattern.
int grid_expand(const char *pattern, SpecList *out, char *err, size_t errlen);
void grid_free(SpecList *l);

#endif
