// Plates and other texts: UTF-8 checking, the character cut that never splits a character, bytes→tokens.
#include "text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "safe_file.h"

// Length of the UTF-8 sequence starting at s[0] (1..4), or 0 if it is not a valid, shortest-form one.
static int utf8_sequence(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    int len;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

long utf8_first_invalid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int len = utf8_sequence(s + i, n - i);
        if (!len) return (long)i;
        i += (size_t)len;
    }
    return -1;
}

size_t utf8_prefix_bytes(const uint8_t *s, size_t n, long chars, long *chars_found) {
    size_t i = 0;
    long count = 0;
    while (i < n && count < chars) {
        int len = utf8_sequence(s + i, n - i);
        i += (size_t)(len ? len : 1);
        count++;
    }
    if (chars_found) *chars_found = count;
    return i;
}

// Splits "FILE:CHARS" at the last ':' when what follows looks like a number (so paths with ':' work).
static int split_limit(const char *arg, char *path, size_t pathlen, long *chars, char *err, size_t errlen) {
    const char *colon = strrchr(arg, ':');
    *chars = -1;
    size_t plen = strlen(arg);
    if (colon && colon[1] != '\0' && strspn(colon + 1, "-+0123456789") == strlen(colon + 1)) {
        char *end;
        errno = 0;
        long v = strtol(colon + 1, &end, 10);
        if (errno || *end != '\0' || v <= 0) {
            snprintf(err, errlen, "%s: the character count must be a positive integer", arg);
            return -1;
        }
        *chars = v;
        plen = (size_t)(colon - arg);
    }
    if (plen == 0 || plen >= pathlen) {
        snprintf(err, errlen, "'%s': bad text path", arg);
        return -1;
    }
    memcpy(path, arg, plen);
    path[plen] = '\0';
    return 0;
}

void text_context_error(const char *path, size_t tokens, int max_tokens, char *err, size_t errlen) {
    snprintf(err, errlen, "%s: %zu tokens after the cut (BOS included) exceed the context of %d; give fewer characters",
             path, tokens, max_tokens);
}

int text_load(Text *t, const char *arg, int max_tokens, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    long limit;
    if (split_limit(arg, t->path, sizeof t->path, &limit, err, errlen)) return -1;
    const char *base = strrchr(t->path, '/');
    base = base ? base + 1 : t->path;
    snprintf(t->name, sizeof t->name, "%.*s", (int)sizeof t->name - 1, base);
    char *dot = strrchr(t->name, '.');
    if (dot && dot != t->name) *dot = '\0';

    long long size = 0;
    FILE *f = safe_open_read(t->path, &size, err, errlen); // a regular file: never block on a FIFO
    if (!f) return -1;
    size_t n = (size_t)size;
    uint8_t *bytes = malloc(n + 1);
    size_t got = bytes ? fread(bytes, 1, n, f) : 0;
    fclose(f);
    if (!bytes || got != n) {
        free(bytes);
        snprintf(err, errlen, "%s: read failed", t->path);
        return -1;
    }
    long bad = utf8_first_invalid(bytes, n);
    int ok = 0;
    if (bad >= 0) {
        snprintf(err, errlen, "%s: invalid UTF-8 at byte offset %ld", t->path, bad);
    } else {
        long found;
        size_t keep = utf8_prefix_bytes(bytes, n, limit > 0 ? limit : (long)n + 1, &found);
        const uint8_t *bos = memchr(bytes, MICRO_BOS, keep);
        if (keep == 0) {
            snprintf(err, errlen, "%s: empty text", t->path);
        } else if (bos) {
            snprintf(err, errlen, "%s: byte 0x01 (the BOS token) at offset %ld", t->path, (long)(bos - bytes));
        } else if (keep + 1 > (size_t)max_tokens) {
            text_context_error(t->path, keep + 1, max_tokens, err, errlen);
        } else {
            t->chars = found;
            t->n_tokens = (int)keep + 1;
            t->tokens = malloc(keep + 1);
            if (t->tokens) {
                t->tokens[0] = MICRO_BOS;
                memcpy(t->tokens + 1, bytes, keep);
                ok = 1;
            } else {
                snprintf(err, errlen, "out of memory");
            }
        }
    }
    free(bytes);
    return ok ? 0 : -1;
}

void text_free(Text *t) {
    free(t->tokens);
    memset(t, 0, sizeof *t);
}

int utf8_byte_allowed(const Utf8State *s, uint8_t b) {
    if (s->owed) return b >= s->lo && b <= s->hi;
    return b < 0x80 || (b >= 0xC2 && b <= 0xF4);
}

// The ranges of the second byte follow the shortest-form and surrogate rules of RFC 3629.
void utf8_push(Utf8State *s, uint8_t b) {
    if (s->owed) {
        s->owed--;
        s->lo = 0x80, s->hi = 0xBF;
        return;
    }
    s->lo = 0x80, s->hi = 0xBF;
    if (b < 0x80) s->owed = 0;
    else if (b <= 0xDF) s->owed = 1;
    else if (b <= 0xEF) {
        s->owed = 2;
        if (b == 0xE0) s->lo = 0xA0;
        if (b == 0xED) s->hi = 0x9F;
    } else {
        s->owed = 3;
        if (b == 0xF0) s->lo = 0x90;
        if (b == 0xF4) s->hi = 0x8F;
    }
}
