#include "opts.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msgtext.h"

void opts_init(Opts *o, int argc, char **argv, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->argc = argc;
    o->argv = argv;
    o->i = 0; // argv[0] is the command's name
    o->err = err;
    o->errlen = errlen;
    if (errlen) err[0] = '\0';
}

const char *opts_next(Opts *o) {
    if (o->i + 1 >= o->argc) return NULL;
    return o->argv[++o->i];
}

int opts_is(const Opts *o, const char *name) { return strcmp(o->argv[o->i], name) == 0; }

int opts_is_help(const Opts *o) { return opts_is(o, "-h") || opts_is(o, "--help"); }

int opts_fail(Opts *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->err, o->errlen, fmt, ap);
    va_end(ap);
    return OPTS_ERROR;
}

int opts_unknown(Opts *o) {
    char shown[MSG_TEXT];
    opts_fail(o, "unknown option '%s'", msg_text(o->argv[o->i], shown, sizeof shown));
    return OPTS_UNKNOWN;
}

static const char *name_of(const Opts *o) { return o->argv[o->i]; }

// Refuses the current option if it was given before; remembers it otherwise. The names compared
// are the parser's known options, so OPTS_MAX_SEEN (more than any command has) is never reached.
static int once(Opts *o) {
    for (int k = 0; k < o->n_seen; k++)
        if (strcmp(o->seen[k], name_of(o)) == 0) return opts_fail(o, "%s given twice", name_of(o));
    if (o->n_seen < OPTS_MAX_SEEN) o->seen[o->n_seen++] = name_of(o);
    return 0;
}

int opts_flag(Opts *o) { return once(o); }

int opts_value(Opts *o, const char **out) {
    if (o->i + 1 >= o->argc) return opts_fail(o, "%s needs a value", name_of(o));
    *out = o->argv[++o->i];
    return 0;
}

int opts_string(Opts *o, const char **out) { return once(o) ? -1 : opts_value(o, out); }

int opts_path(Opts *o, const char **out) {
    if (opts_string(o, out)) return -1;
    if (**out == '\0') return opts_fail(o, "%s: empty path", o->argv[o->i - 1]);
    return 0;
}

int opts_parse_long(const char *s, long lo, long hi, long *out, const char **why) {
    char *end;
    errno = 0;
    // strtol skips leading blanks and takes a sign; a number here is digits with an optional sign.
    long v = isspace((unsigned char)s[0]) ? 0 : strtol(s, &end, 10);
    if (isspace((unsigned char)s[0]) || end == s || *end != '\0') {
        *why = "is not an integer";
        return -1;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        *why = "is out of range";
        return -1;
    }
    *out = v;
    return 0;
}

// "NAME: 'VALUE' why" with the range when the value is out of it.
static int bad_number(Opts *o, const char *name, const char *value, const char *why, const char *range) {
    char shown[MSG_TEXT];
    return opts_fail(o, "%s: '%s' %s%s", name, msg_text(value, shown, sizeof shown), why, range);
}

int opts_int(Opts *o, long lo, long hi, int *out) {
    const char *s, *why;
    long v;
    if (opts_string(o, &s)) return -1;
    if (opts_parse_long(s, lo, hi, &v, &why)) {
        char range[64] = "";
        if (strcmp(why, "is out of range") == 0) snprintf(range, sizeof range, " (%ld..%ld)", lo, hi);
        return bad_number(o, o->argv[o->i - 1], s, why, range);
    }
    *out = (int)v;
    return 0;
}

int opts_double(Opts *o, double lo, double hi, double *out) {
    const char *s;
    if (opts_string(o, &s)) return -1;
    const char *name = o->argv[o->i - 1];
    char *end;
    errno = 0;
    double v = isspace((unsigned char)s[0]) ? 0 : strtod(s, &end);
    if (isspace((unsigned char)s[0]) || end == s || *end != '\0') return bad_number(o, name, s, "is not a number", "");
    char range[64];
    snprintf(range, sizeof range, " (%g..%g)", lo, hi);
    // strtod reads "nan" and "inf", and saturates on overflow: none is a usable setting.
    if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1)) return bad_number(o, name, s, "is not a finite number", range);
    if (v < lo || v > hi) return bad_number(o, name, s, "is out of range", range);
    *out = v;
    return 0;
}

int opts_u64(Opts *o, unsigned long long *out) {
    const char *s;
    if (opts_string(o, &s)) return -1;
    const char *name = o->argv[o->i - 1];
    char *end;
    errno = 0;
    // strtoull accepts "-1" (as 2^64 - 1): only digits are a non-negative integer here.
    if (!isdigit((unsigned char)s[0])) return bad_number(o, name, s, "is not a non-negative integer", "");
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0') return bad_number(o, name, s, "is not a non-negative integer", "");
    if (errno == ERANGE) return bad_number(o, name, s, "is out of range", " (0..18446744073709551615)");
    *out = v;
    return 0;
}

int opts_int_list(Opts *o, long lo, long hi, int *out, int max, int *n) {
    const char *s;
    if (opts_string(o, &s)) return -1;
    const char *name = o->argv[o->i - 1];
    char shown[MSG_TEXT];
    if (*s == '\0') return opts_fail(o, "%s: empty list (expected integers in %ld..%ld, comma separated)", name, lo, hi);
    *n = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0) return opts_fail(o, "%s: empty item in '%s'", name, msg_text(s, shown, sizeof shown));
        if (*n == max) return opts_fail(o, "%s: more than %d values", name, max);
        long v;
        const char *why = "is not an integer";
        if (len >= sizeof item) {
            // Too long for any integer in range; say which kind of wrong it is.
            size_t sign = p[0] == '-' || p[0] == '+';
            why = strspn(p + sign, "0123456789") >= len - sign ? "is out of range" : why;
        } else {
            memcpy(item, p, len);
            item[len] = '\0';
            if (!opts_parse_long(item, lo, hi, &v, &why)) {
                out[(*n)++] = (int)v;
                if (!comma) return 0;
                p = comma + 1;
                continue;
            }
        }
        char piece[MSG_TEXT], text[MSG_TEXT + 4];
        snprintf(text, sizeof text, "%.*s", (int)(len < MSG_TEXT ? len : MSG_TEXT - 1), p);
        if (strcmp(why, "is out of range") == 0)
            return opts_fail(o, "%s: %s is out of range (%ld..%ld)", name, msg_text(text, piece, sizeof piece), lo, hi);
        return opts_fail(o, "%s: '%s' in '%s' is not an integer", name, msg_text(text, piece, sizeof piece),
                         msg_text(s, shown, sizeof shown));
    }
}
