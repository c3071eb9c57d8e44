// The tokenizer a GGUF file describes: tokenizer.ggml.model gpt2, byte-level BPE (its pre-tokenizer
// named by tokenizer.ggml.pre), and whether texts begin with its BOS (tokenizer.ggml.add_bos_token);
// llama with micro's 256 byte tokens <0x00>..<0xFF> in order (what micro export --gguf writes), for
// which tok stays NULL: the ids are the bytes; or any other llama vocabulary, SentencePiece
// (tokens, scores, token types; a BOS unless add_bos_token says false, as llama.cpp reads it).
#ifndef MICRO_GGUF_TOKENIZER_H
#define MICRO_GGUF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"
#include "gguf.h"

typedef struct {
    Tokenizer *tok; // NULL for micro's bytes
    int n_tokens;
    int32_t bos; // the id a text starts with, or -1 for none
    int32_t eos; // the id that ends generation, or -1 for none
} GgufTokenizer;

// 0, or -1 with one line in err (another tokenizer or vocabulary named; a key missing or of another type).
int gguf_tokenizer(const Gguf *g, GgufTokenizer *t, char *err, size_t errlen);
void gguf_tokenizer_free(GgufTokenizer *t);

#endif
