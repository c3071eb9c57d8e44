#include "cli.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd_options.h"
#include "cpu.h"
#include "forward_kernels.h"
#include "kvcache.h"
#include "kvpool.h"
#include "kvq_file.h"
#include "kvq_view.h"
#include "model_file.h"
#include "msgtext.h"
#include "opts.h"
#include "safe_file.h"
#include "text.h"
#include "utf8.h"

#ifndef MICRO_DATADIR
#define MICRO_DATADIR "/usr/local/share/micro"
#endif

static void vreport(const char *fmt, va_list ap) {
    fputs("micro: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

const char *cli_kernels(void) {
    static char text[96];
    // The forward pass's and the codecs' builds follow the same choice (the set in use, or the next
    // lower one compiled in), so one name says both.
    const char *used = forward_kernels()->name;
    if (!strcmp(used, cpu_isa_name(cpu_isa_supported())))
        snprintf(text, sizeof text, "%s", used);
    else
        snprintf(text, sizeof text, "%s (MICRO_ISA; this CPU runs %s)", used, cpu_isa_name(cpu_isa_supported()));
    return text;
}

int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap);
    va_end(ap);
    return 2;
}

const char *cli_default_path(const char *given, const char *relative, char *buf, size_t n) {
    if (given) return given;
    if (access(relative, R_OK) == 0) return relative;
    snprintf(buf, n, "%s/%s", MICRO_DATADIR, relative);
    if (access(buf, R_OK) == 0) return buf;
    return relative; // so the error names the path a user expects
}

void csv_field_to(FILE *out, const char *text) {
    if (!strpbrk(text, ",\"\n")) {
        fputs(text, out);
        return;
    }
    fputc('"', out);
    for (const char *c = text; *c; c++) {
        if (*c == '"') fputc('"', out);
        fputc(*c, out);
    }
    fputc('"', out);
}

void csv_field(const char *text) { csv_field_to(stdout, text); }

int cli_after_parse(int status, const char *err, const char *usage) {
    if (status == OPTS_RUN) return -1;
    if (status == OPTS_HELP) {
        fputs(usage, stdout);
        return 0;
    }
    fprintf(stderr, "micro: %s\n", err);
    if (status == OPTS_UNKNOWN) fputs(usage, stderr);
    return 2;
}

int cmd_check_specs(const char *k_spec, const char *v_spec, char *err, size_t errlen) {
    return kvstream_check_spec_syntax(k_spec, err, errlen) || kvstream_check_spec_syntax(v_spec, err, errlen) ? -1 : 0;
}

int cmd_check_specs_for_model(const Model *m, const char *k_spec, const char *v_spec, char *err, size_t errlen) {
    return kv_layout_check_specs(&m->config, k_spec, v_spec, err, errlen);
}

int cmd_check_text_arg(const char *option, const char *arg, char *err, size_t errlen) {
    char path[sizeof ((Text *)0)->path], why[512];
    long chars;
    if (text_split_arg(arg, path, sizeof path, &chars, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", option, why);
        return -1;
    }
    return 0;
}

int cmd_text_option(Opts *p, const char **texts, int *n, int max) {
    if (*n == max) return opts_fail(p, "at most %d texts", max);
    if (opts_value(p, &texts[*n]) || cmd_check_text_arg("--text", texts[*n], p->err, p->errlen)) return OPTS_ERROR;
    (*n)++;
    return 0;
}

int cli_check_distinct(const CliFile *outputs, int n_outputs, const CliFile *inputs, int n_inputs, char *err,
                       size_t errlen) {
    for (int i = 0; i < n_outputs; i++) {
        if (!outputs[i].path) continue;
        for (int j = 0; j < n_outputs + n_inputs; j++) {
            const CliFile *other = j < n_outputs ? &outputs[j] : &inputs[j - n_outputs];
            if (j == i || (j < i && j < n_outputs) || !other->path || !safe_same_file(outputs[i].path, other->path))
                continue;
            char shown[MSG_TEXT];
            snprintf(err, errlen, "%s %s names the same file as %s%s", outputs[i].option,
                     msg_text(outputs[i].path, shown, sizeof shown), other->option,
                     j < n_outputs ? ": two outputs cannot share a file" : ", which it would replace");
            return -1;
        }
    }
    return 0;
}

void json_bytes_to(FILE *out, const uint8_t *text, size_t n) {
    fputc('"', out);
    for (size_t i = 0; i < n;) {
        const int len = utf8_char_len(text + i, n - i);
        if (len == 0) { // JSON is UTF-8: a byte that begins no valid sequence becomes U+FFFD
            fputs("\\ufffd", out);
            i++;
        } else if (text[i] == '"' || text[i] == '\\') {
            fprintf(out, "\\%c", text[i++]);
        } else if (text[i] < 0x20) {
            fprintf(out, "\\u%04x", text[i++]);
        } else {
            fwrite(text + i, 1, (size_t)len, out);
            i += (size_t)len;
        }
    }
    fputc('"', out);
}

void json_string_to(FILE *out, const char *text) { json_bytes_to(out, (const uint8_t *)text, strlen(text)); }

int cli_byte_vocabulary(const Model *m, const char *path, char *err, size_t errlen) {
    if (!m->tokenizer) return 0;
    char shown[MSG_TEXT];
    snprintf(err, errlen,
             "%s: a vocabulary of its own (%d tokens): eval, sweep, tokenize, inspect, attention, capacity, generate, "
             "serve-bench, bench --eval and calibrate read it, this command micro's byte vocabulary so far",
             msg_text(path, shown, sizeof shown), m->config.vocab_size);
    return -1;
}

static int load_model(Model *m, const char *given, const char *calib, int any_vocabulary, char *err, size_t errlen) {
    char path[4096], kvq[4200];
    const char *model_path = cli_default_path(given, "models/micro.bin", path, sizeof path);
    if (model_load(m, model_path, err, errlen)) return -1;
    if (!any_vocabulary && cli_byte_vocabulary(m, model_path, err, errlen)) {
        model_free(m);
        return -1;
    }
    if (kvq_default_path(calib, model_path, kvq, sizeof kvq)) {
        snprintf(err, errlen, "the calibration's path is too long");
        model_free(m);
        return -1;
    }
    if (kvq_view_set(kvq, m, calib != NULL, err, errlen)) {
        model_free(m);
        return -1;
    }
    return 0;
}

int cli_load_model(Model *m, const char *given, const char *calib, char *err, size_t errlen) {
    return load_model(m, given, calib, 0, err, errlen);
}

int cli_load_any_model(Model *m, const char *given, const char *calib, char *err, size_t errlen) {
    return load_model(m, given, calib, 1, err, errlen);
}

int cli_tokenize_texts(const Model *m, Text *texts, int n, char *err, size_t errlen) {
    if (!m->tokenizer) return 0; // micro's bytes: text_load's ids
    for (int i = 0; i < n; i++)
        if (text_tokenize(&texts[i], m->tokenizer, m->bos, INT32_MAX, err, errlen)) return -1;
    return 0;
}

int cli_out_dir(const char *dir) {
    struct stat st;
    if (mkdir(dir, 0777) == 0 || (errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))) return 0;
    char shown[MSG_TEXT];
    return cli_error("--out %s: not a folder we can write (%s)", msg_text(dir, shown, sizeof shown),
                     strerror(errno == EEXIST ? ENOTDIR : errno));
}

// Every text cli_spec has parsed, newest first.
typedef struct Parsed {
    struct Parsed *next;
    CodecSpec spec;
    char text[];
} Parsed;
static Parsed *parsed;
static pthread_mutex_t parsed_lock = PTHREAD_MUTEX_INITIALIZER;

const CodecSpec *cli_spec(const char *text) {
    static const CodecSpec none = {.name = ""};
    pthread_mutex_lock(&parsed_lock);
    Parsed *p = parsed;
    while (p && strcmp(p->text, text)) p = p->next;
    if (!p && (p = calloc(1, sizeof *p + strlen(text) + 1))) {
        char err[256];
        strcpy(p->text, text);
        if (spec_parse(text, &p->spec, err, sizeof err)) p->spec = none;
        p->next = parsed;
        parsed = p;
    }
    pthread_mutex_unlock(&parsed_lock);
    return p ? &p->spec : &none;
}
