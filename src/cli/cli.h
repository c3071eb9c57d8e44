// Small helpers every subcommand shares: errors (one line, exit status 2), default paths, CSV fields.
// Options are read with opts.h (cmd_options.h: one parse function per command), before any work.
#ifndef MICRO_CLI_H
#define MICRO_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvcache.h"
#include "model.h"
#include "text.h"

// Prints "micro: <message>" to stderr and returns 2 (for `return cli_error(...)`).
// The kernel set this run uses, as every benchmark header names it: "avx2", or "portable (MICRO_ISA;
// this CPU runs avx512)" when the environment chose a lower set than the CPU's best.
const char *cli_kernels(void);

int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// `given` when set; else `relative` when it exists from the current directory; else the installed copy.
const char *cli_default_path(const char *given, const char *relative, char *buf, size_t n);

// Loads the model (`given`, else models/micro.bin as cli_default_path finds it) and points the
// calibrated codecs at their calibration: `calib` (--calib FILE, loaded and checked now) or the
// file beside the model (loaded when a kvquant cache first needs it). -1 with one line in err.
// Loads a model for a command that reads micro's byte vocabulary: a model with a tokenizer of its own
// is refused in one line (cli_byte_vocabulary).
int cli_load_model(Model *m, const char *given, const char *calib, char *err, size_t errlen);
// The same for the commands that read any vocabulary micro tokenizes (eval, sweep).
int cli_load_any_model(Model *m, const char *given, const char *calib, char *err, size_t errlen);
// 0 when m reads micro's byte vocabulary, else -1 with one line in err naming path.
int cli_byte_vocabulary(const Model *m, const char *path, char *err, size_t errlen);
// The texts' ids under the model's own tokenizer (nothing to do for micro's bytes). 0, or -1.
int cli_tokenize_texts(const Model *m, Text *texts, int n, char *err, size_t errlen);

// Makes the folder a figure goes to, or takes it as it is: 0, or 2 after one line when it is not a
// folder that can be made.
int cli_out_dir(const char *dir);

// A spec text as the layers below take it, parsed once for the run: the same text gives the same
// CodecSpec (thread-safe; texts a command checked with cmd_check_specs, or constants). A text that
// does not parse gives a spec of no family, which the cache refuses in one line where it is used.
const CodecSpec *cli_spec(const char *text);

// A file a command names: its option and its path (NULL: not given, skipped).
typedef struct {
    const char *option, *path;
} CliFile;
// Each output against the inputs and the other outputs, by what the paths name (safe_same_file), not
// by their spelling: 0, or -1 with one line in err naming both options.
int cli_check_distinct(const CliFile *outputs, int n_outputs, const CliFile *inputs, int n_inputs, char *err,
                       size_t errlen);

// After a command's parse function (cmd_options.h): -1 to go on; else the exit status, after printing
// the usage to stdout (--help, 0) or the error line and, for an unknown option, the usage (2).
int cli_after_parse(int status, const char *err, const char *usage);

// Prints one CSV field, quoted as RFC 4180 says when it holds a comma, a quote or a newline
// (normalised specs such as int:bits=4,levels=sym,scale=fp16 do).
void csv_field(const char *text);
void csv_field_to(FILE *out, const char *text);
// A JSON string literal of text (quotes and backslashes escaped; control bytes as \u00XX; each byte
// that begins no valid UTF-8 sequence as \ufffd, so that a file name in any encoding gives JSON).
void json_string_to(FILE *out, const char *text);
// The same for n bytes of UTF-8 that need not end in a NUL (a generated text, a plate's prefix).
void json_bytes_to(FILE *out, const uint8_t *text, size_t n);

#endif
