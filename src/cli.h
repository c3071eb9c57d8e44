// Small helpers every subcommand shares: errors (one line, exit status 2), default paths, CSV fields.
// cli_value & co. exit on a bad value: the commands parse with opts.h instead, before any work.
#ifndef MICRO_CLI_H
#define MICRO_CLI_H

#include <stddef.h>
#include <stdio.h>

// If argv[*i] is `name`, stores the next argument in *out, advances *i and returns 1; exits with
// status 2 when the value is missing. Returns 0 when argv[*i] is another option.
int cli_value(int argc, char **argv, int *i, const char *name, const char **out);
// As cli_value, parsing an integer in [lo, hi] or a finite double in [lo, hi]; exits 2 on a bad value.
int cli_int(int argc, char **argv, int *i, const char *name, long lo, long hi, int *out);
int cli_double(int argc, char **argv, int *i, const char *name, double lo, double hi, double *out);
int cli_u64(int argc, char **argv, int *i, const char *name, unsigned long long *out);
// Prints "micro: <message>" to stderr and returns 2 (for `return cli_error(...)`).
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// An unknown option: says which, prints the usage to stderr, exits 2.
_Noreturn void cli_unknown(const char *usage, const char *arg);
// `given` when set; else `relative` when it exists from the current directory; else the installed copy.
const char *cli_default_path(const char *given, const char *relative, char *buf, size_t n);

// After a command's parse function (cmd_options.h): -1 to go on; else the exit status, after printing
// the usage to stdout (--help, 0) or the error line and, for an unknown option, the usage (2).
int cli_after_parse(int status, const char *err, const char *usage);

// Prints one CSV field, quoted as RFC 4180 says when it holds a comma, a quote or a newline
// (normalised specs such as int:bits=4,levels=sym,scale=fp16 do).
void csv_field(const char *text);
void csv_field_to(FILE *out, const char *text);

#endif
