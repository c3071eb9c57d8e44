#include "msgtext.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

// The next piece of s at *i as it will be printed: its bytes go to out (at most 4), its printed
// length is returned, and *i advances past the bytes it stands for.
static size_t next_piece(const unsigned char *s, size_t n, size_t *i, char out[5]) {
    int len = utf8_char_len(s + *i, n - *i);
    unsigned char c = s[*i];
    if (len == 0 || (len == 1 && (c < 0x20 || c == 0x7f))) {
        snprintf(out, 5, "\\x%02X", c);
        *i += 1;
        return 4;
    }
    memcpy(out, s + *i, (size_t)len);
    out[len] = '\0';
    *i += (size_t)len;
    return (size_t)len;
}

const char *msg_text(const char *text, char *buf, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    size_t len = strlen(text), printed = 0;
    char piece[5];
    for (size_t i = 0; i < len;) printed += next_piece(s, len, &i, piece);
    const size_t room = n - 1, dots = 3;
    // Whole when it fits; else the head and the tail, each at most half of what is left after "...".
    size_t head_room = printed <= room ? room : (room - dots) / 2, tail_room = printed <= room ? 0 : room - dots - head_room;
    size_t w = 0, i = 0;
    while (i < len) {
        size_t at = i, k = next_piece(s, len, &i, piece);
        if (w + k > head_room) {
            i = at;
            break;
        }
        memcpy(buf + w, piece, k);
        w += k;
    }
    if (i < len) {
        // The tail starts at the first character from which what remains fits tail_room.
        size_t rest = printed, j = 0;
        for (size_t k = 0; k < i;) rest -= next_piece(s, len, &k, piece);
        j = i;
        while (rest > tail_room) rest -= next_piece(s, len, &j, piece);
        memcpy(buf + w, "...", dots);
        w += dots;
        while (j < len) {
            size_t k = next_piece(s, len, &j, piece);
            memcpy(buf + w, piece, k);
            w += k;
        }
    }
    buf[w] = '\0';
    return buf;
}

void msg_named(char *err, size_t errlen, const char *name, const char *fmt, ...) {
    int n = snprintf(err, errlen, "%s: ", name);
    if (n < 0 || (size_t)n >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
}
