// Plates and other texts: UTF-8 checking, the character cut that never splits a character, bytes→tokens.
#include "text.h"
#include "tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "msgtext.h"
#include "safe_file.h"
#include "utf8.h"

long utf8_first_invalid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int len = utf8_char_len(s + i, n - i);
        if (!len) return (long)i;
        i += (size_t)len;
    }
    return -1;
}

size_t utf8_prefix_bytes(const uint8_t *s, size_t n, long chars, long *chars_found) {
    size_t i = 0;
    long count = 0;
    while (i < n && count < chars) {
        int len = utf8_char_len(s + i, n - i);
        i += (size_t)(len ? len : 1);
        count++;
    }
    if (chars_found) *chars_found = count;
    return i;
}

// Splits "FILE:CHARS" at the last ':' when what follows looks like a number (so paths with ':' work).
int text_split_arg(const char *arg, char *path, size_t pathlen, long *chars, char *err, size_t errlen) {
    const char *colon = strrchr(arg, ':');
    char shown[MSG_TEXT];
    *chars = -1;
    size_t plen = strlen(arg);
    if (colon && colon[1] != '\0' && strspn(colon + 1, "-+0123456789") == strlen(colon + 1)) {
        char *end;
        errno = 0;
        long v = strtol(colon + 1, &end, 10);
        if (errno || *end != '\0' || v <= 0) {
            snprintf(err, errlen, "%s: the character count %s (1..%ld)", msg_text(arg, shown, sizeof shown),
                     errno == ERANGE && v > 0 ? "is out of range" : "must be a positive integer", LONG_MAX);
            return -1;
        }
        *chars = v;
        plen = (size_t)(colon - arg);
    }
    if (plen == 0) {
        snprintf(err, errlen, "'%s': empty text path", msg_text(arg, shown, sizeof shown));
        return -1;
    }
    if (plen >= pathlen) {
        snprintf(err, errlen, "%s: text path longer than %zu bytes", msg_text(arg, shown, sizeof shown), pathlen - 1);
        return -1;
    }
    memcpy(path, arg, plen);
    path[plen] = '\0';
    return 0;
}

void text_context_error(const char *path, size_t tokens, int max_tokens, char *err, size_t errlen) {
    char shown[MSG_TEXT];
    snprintf(err, errlen, "%s: %zu tokens after the cut (BOS included) exceed the context of %d; give fewer characters",
             msg_text(path, shown, sizeof shown), tokens, max_tokens);
}

int text_from_bytes(Text *t, const uint8_t *bytes, size_t n, long limit, int max_tokens, char *err, size_t errlen) {
    char shown[MSG_TEXT];
    const char *path = msg_text(t->path, shown, sizeof shown);
    long bad = utf8_first_invalid(bytes, n);
    if (bad >= 0) {
        snprintf(err, errlen, "%s: invalid UTF-8 at byte offset %ld", path, bad);
        return -1;
    }
    long found;
    size_t keep = utf8_prefix_bytes(bytes, n, limit > 0 ? limit : LONG_MAX, &found);
    // The corpus's form: documents each after a 0x01 (BOS), the first at offset 0.
    const int documents = keep > 0 && bytes[0] == MICRO_BOS;
    const uint8_t *bos = documents ? NULL : memchr(bytes, MICRO_BOS, keep);
    if (keep == 0 || (documents && keep == 1)) {
        snprintf(err, errlen, "%s: empty text", path);
    } else if (bos) {
        snprintf(err, errlen, "%s: byte 0x01 (the BOS token) at offset %ld", path, (long)(bos - bytes));
    } else if (max_tokens < 1 || keep + !documents > (size_t)max_tokens) {
        text_context_error(t->path, keep + !documents, max_tokens, err, errlen);
    } else {
        t->bytes = malloc(keep + 1);
        t->tokens = malloc(sizeof(int32_t) * (keep + 1));
        if (!t->bytes || !t->tokens) {
            free(t->bytes), free(t->tokens);
            t->bytes = NULL, t->tokens = NULL;
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        t->chars = found;
        t->n_tokens = t->n_bytes = (int)keep + !documents;
        t->bytes[0] = MICRO_BOS;
        memcpy(t->bytes + !documents, bytes, keep);
        for (int i = 0; i < t->n_tokens; i++) t->tokens[i] = t->bytes[i]; // micro's byte vocabulary
        t->documents = 1;
        for (size_t i = 1; documents && i < keep; i++) t->documents += bytes[i] == MICRO_BOS;
        return 0;
    }
    return -1;
}

int text_load(Text *t, const char *arg, int max_tokens, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    long limit;
    if (text_split_arg(arg, t->path, sizeof t->path, &limit, err, errlen)) return -1;
    const char *base = strrchr(t->path, '/');
    base = base ? base + 1 : t->path;
    snprintf(t->name, sizeof t->name, "%.*s", (int)sizeof t->name - 1, base);
    char *dot = strrchr(t->name, '.');
    if (dot && dot != t->name) *dot = '\0';

    char shown[MSG_TEXT];
    const char *path = msg_text(t->path, shown, sizeof shown);
    long long size = 0;
    FILE *f = safe_open_read(t->path, &size, err, errlen); // a regular file: never block on a FIFO
    if (!f) return -1;
    // Only as far as the cut needs: CHARS characters span at most 4 bytes each.
    long long need = size;
    if (limit > 0 && limit < TEXT_MAX_BYTES / 4 && 4 * (long long)limit < size) need = 4 * (long long)limit;
    if (need > TEXT_MAX_BYTES) {
        fclose(f);
        if (limit > 0)
            snprintf(err, errlen, "%s: %ld characters may need more than the %d MiB a text may hold; give fewer", path,
                     limit, TEXT_MAX_BYTES >> 20);
        else
            snprintf(err, errlen, "%s: %lld bytes, more than the %d MiB a text may hold; give FILE:CHARS to read its start",
                     path, size, TEXT_MAX_BYTES >> 20);
        return -1;
    }
    size_t n = (size_t)need;
    uint8_t *bytes = malloc(n + 1);
    size_t got = bytes ? fread(bytes, 1, n, f) : 0;
    const int failed = f && ferror(f);
    fclose(f);
    if (!bytes || failed) {
        free(bytes);
        snprintf(err, errlen, "%s: %s", path, bytes ? "read failed" : "out of memory");
        return -1;
    }
    // A file that shrank while read is taken as it now is; the cut's characters are the ones checked.
    if (limit > 0) got = utf8_prefix_bytes(bytes, got, limit, NULL);
    int status = text_from_bytes(t, bytes, got, limit, max_tokens, err, errlen);
    free(bytes);
    return status;
}

int text_tokenize(Text *t, const struct Tokenizer *tok, int32_t bos, int max_tokens, char *err, size_t errlen) {
    char shown[MSG_TEXT];
    const char *path = msg_text(t->path, shown, sizeof shown);
    if (t->documents != 1 || t->bytes[0] != MICRO_BOS) {
        snprintf(err, errlen, "%s: a file of documents (each after a 0x01) is read in micro's byte vocabulary only", path);
        return -1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (bos >= 0) {
        ids = malloc(sizeof *ids);
        if (!ids) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        ids[n++] = bos;
    }
    char why[256];
    if (tokenizer_encode(tok, t->bytes + 1, (size_t)t->n_bytes - 1, &ids, &n, why, sizeof why)) {
        free(ids);
        snprintf(err, errlen, "%s: %s", path, why);
        return -1;
    }
    if (n > (size_t)max_tokens || n < 1) {
        free(ids);
        if (n < 1) snprintf(err, errlen, "%s: no tokens", path);
        else text_context_error(t->path, n, max_tokens, err, errlen);
        return -1;
    }
    free(t->tokens);
    t->tokens = ids;
    t->n_tokens = (int)n;
    return 0;
}

void text_free(Text *t) {
    free(t->bytes);
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
