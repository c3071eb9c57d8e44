// Byte-level BPE (GPT-2's scheme, as Llama 3, Qwen and SmolLM use it): a text is split by the
// model's pre-tokenizer (its regular expressions, through PCRE2), each piece's bytes are written as
// GPT-2's printable stand-in characters, and the piece's symbols are merged pair by pair, the pair
// of lowest merge rank first, until no listed pair is left; each symbol is then a token of the
// vocabulary. A text is data: no control token is recognised inside it; a user-defined token (an
// added token that is not special: Qwen's <think>) is, as llama.cpp and the models' own tokenizers
// read it, its text cut out of the text before the pre-tokenizer runs on what is left.
#ifndef MICRO_BPE_H
#define MICRO_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *p;
    size_t n;
} TokBytes;

typedef struct Bpe Bpe;

// The pre-tokenizers micro knows by the names llama.cpp's converter writes (tokenizer.ggml.pre):
// "gpt2", "llama-bpe" (Llama 3), "qwen2", "smollm". NULL for another name.
const char *const *bpe_pre_tokenizers(int *n);

// A tokenizer of n_tokens tokens (token i's text, in GPT-2's stand-in characters) and n_merges
// merges ("left right", rank = index), with pre-tokenizer `pre`. NULL with one line in err.
// user_defined: the ids of the tokens read whole wherever their text occurs (n_user of them).
Bpe *bpe_create(const TokBytes *tokens, int n_tokens, const TokBytes *merges, int n_merges, const int32_t *user_defined,
                int n_user, const char *pre, char *err, size_t errlen);
void bpe_free(Bpe *b);
int bpe_size(const Bpe *b); // the number of tokens

// The ids of n bytes of valid UTF-8 (no BOS added), appended to *ids (a malloc'ed array of *n_ids,
// grown as needed). 0, or -1 with one line in err.
int bpe_encode(const Bpe *b, const uint8_t *text, size_t n, int32_t **ids, size_t *n_ids, char *err, size_t errlen);

// The bytes token id stands for (its stand-in characters turned back), into out (at most cap
// bytes); the count, or -1 for an id out of range or a character that is no stand-in.
int bpe_token_bytes(const Bpe *b, int32_t id, uint8_t *out, size_t cap);

#endif
