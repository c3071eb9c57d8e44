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

#endif
