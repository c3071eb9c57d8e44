// User text inside a one-line message: a path or an option value is echoed so that the reason after
// it always fits, and so that it cannot break the line or the terminal's character stream.
#ifndef MICRO_MSGTEXT_H
#define MICRO_MSGTEXT_H

#include <stddef.h>

// Room for one echoed text: enough to recognise a path, small enough that two of them and a
// reason fit the 512-byte message buffers the code uses.
#define MSG_TEXT 160

// Writes s to buf (n bytes, n >= 16) as it should appear in a message: whole UTF-8 characters kept,
// control characters and invalid bytes written as \xNN, and a text longer than n - 1 bytes shortened
// to its head and tail around "...". Returns buf.
const char *msg_text(const char *s, char *buf, size_t n);

// err = "NAME: " + the formatted reason, cut to errlen (a loader's one line about a file; name is
// already shortened by msg_text).
void msg_named(char *err, size_t errlen, const char *name, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
// A file loader's failure: the named line into the locals err / errlen, then `goto fail`.
#define MSG_FAIL(...)                                  \
    do {                                               \
        msg_named(err, errlen, name, __VA_ARGS__);     \
        goto fail;                                     \
    } while (0)

#endif
