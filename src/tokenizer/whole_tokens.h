// The tokens both tokenizers read whole wherever their text occurs in a text (user-defined tokens,
// llama.cpp's USER_DEFINED): tried longest first, so that a longer text wins where two begin at one
// place, and by id among texts of one length.
#ifndef MICRO_WHOLE_TOKENS_H
#define MICRO_WHOLE_TOKENS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t len; // the token's text's bytes
    int32_t id;
} WholeToken;

// Sorts order[0..n) into that order and writes their ids, in it, to ids[0..n).
void whole_tokens_sort(WholeToken *order, int n, int32_t *ids);

#endif
