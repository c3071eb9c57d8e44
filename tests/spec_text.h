// Spec texts as the layers take them in the tests and fuzzers (parsed once, where they enter).
#ifndef MICRO_TESTS_SPEC_TEXT_H
#define MICRO_TESTS_SPEC_TEXT_H

#include <string.h>

#include "kvcache.h"

// A spec text parsed (spec_parse) for the layers that take a CodecSpec, from a ring of 32 (a cache
// copies what it keeps). A text that does not parse gives a spec of no family, which the cache
// refuses with its one line where it is used.
static inline const CodecSpec *SPEC(const char *text) {
    static CodecSpec ring[32];
    static int next;
    CodecSpec *s = &ring[next++ % 32];
    char err[256];
    if (spec_parse(text, s, err, sizeof err)) memset(s, 0, sizeof *s);
    return s;
}

#endif
