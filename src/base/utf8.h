// The one UTF-8 decoding rule (RFC 3629: shortest form, no surrogates, at most U+10FFFF), shared by
// the text cut and by messages that echo user text.
#ifndef MICRO_UTF8_H
#define MICRO_UTF8_H

#include <stddef.h>
#include <stdint.h>

// Length of the UTF-8 sequence starting at s[0] (1..4), or 0 if it is not a valid, shortest-form
// one within the n bytes available (n >= 1).
static inline int utf8_char_len(const uint8_t *s, size_t n) {
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

#endif
