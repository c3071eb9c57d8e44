// A model's own tokenizer, whichever scheme it is: byte-level BPE (bpe.h) or SentencePiece (spm.h).
// The engine and the commands hold a Tokenizer and call these; a new scheme is one more case here.
#ifndef MICRO_TOKENIZER_H
#define MICRO_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "spm.h"

typedef struct Tokenizer Tokenizer;

// Each takes its tokenizer (freed with the Tokenizer, or here when out of memory); NULL when out of memory.
Tokenizer *tokenizer_from_bpe(Bpe *b);
Tokenizer *tokenizer_from_spm(Spm *s);
void tokenizer_free(Tokenizer *t);

// The ids of n bytes of text (no BOS added), appended to *ids (a malloc'ed array of *n_ids, grown
// as needed). 0, or -1 with one line in err.
int tokenizer_encode(const Tokenizer *t, const uint8_t *text, size_t n, int32_t **ids, size_t *n_ids, char *err,
                     size_t errlen);
// The bytes token id stands for, into out (at most cap); the count, or -1 for an id with none.
int tokenizer_token_bytes(const Tokenizer *t, int32_t id, uint8_t *out, size_t cap);
// The number of tokens in the vocabulary.
int tokenizer_size(const Tokenizer *t);

#endif
