// Option parsing that never exits and never allocates: each command reads its whole argv into an
// options struct with these readers before it loads or starts anything, so that a bad argument
// costs nothing to clean up, and so that a fuzzer can call the parsers directly. A reader that
// fails writes one line (without the "micro: " prefix) to the parser's err and returns -1.
#ifndef MICRO_OPTS_H
#define MICRO_OPTS_H

#include <stddef.h>

// What a command's parse function returns.
enum {
    OPTS_RUN = 0,      // options are complete and valid: go on
    OPTS_HELP = 1,     // -h or --help: print the usage to stdout, exit 0
    OPTS_ERROR = -1,   // err holds the reason: exit 2
    OPTS_UNKNOWN = -2, // err names an unknown option: exit 2 after the usage
};

#define OPTS_MAX_SEEN 64

typedef struct {
    int argc;
    char **argv;
    int i; // index of the option being read
    char *err;
    size_t errlen;
    const char *seen[OPTS_MAX_SEEN]; // options already given once, to refuse a second one
    int n_seen;
} Opts;

void opts_init(Opts *o, int argc, char **argv, char *err, size_t errlen);
// The next argument after the current option and its value, or NULL after the last.
const char *opts_next(Opts *o);
// 1 when the current argument is `name`.
int opts_is(const Opts *o, const char *name);
// 1 when the current argument is -h or --help.
int opts_is_help(const Opts *o);

// Readers for the current option. Each refuses a second occurrence of the same option (a
// repeatable option uses opts_value), a missing value, and a value of the wrong form or range.
int opts_flag(Opts *o);
int opts_value(Opts *o, const char **out);  // any value, the option may repeat
int opts_string(Opts *o, const char **out); // any value, once
int opts_path(Opts *o, const char **out);   // a non-empty value, once
int opts_int(Opts *o, long lo, long hi, int *out);
int opts_double(Opts *o, double lo, double hi, double *out); // finite only
int opts_u64(Opts *o, unsigned long long *out);
// A comma-separated list of at most max integers in [lo, hi] (no empty items), once.
int opts_int_list(Opts *o, long lo, long hi, int *out, int max, int *n);

// Writes the message and returns OPTS_ERROR.
int opts_fail(Opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// "unknown option 'X'"; returns OPTS_UNKNOWN.
int opts_unknown(Opts *o);
// A number as text in [lo, hi]: 0 and *out, or -1 with why (e.g. "is not an integer") in why.
int opts_parse_long(const char *s, long lo, long hi, long *out, const char **why);

#endif
