// SentencePiece as llama.cpp runs it for a vocabulary of tokenizer.ggml.model "llama"
// (LLAMA_VOCAB_TYPE_SPM: Llama 2, TinyLlama, Mistral 7B v0.1): each token has a score; a text's
// spaces are written as U+2581 ("▁"), with one "▁" before it (add_space_prefix); its characters are
// merged pair by pair, the adjacent pair whose joined text is the token of highest score first (the
// leftmost of equal scores), until no adjacent pair joins into a token; a piece then left that is no
// token is written as its bytes' tokens <0xXX> (byte fallback). A text is data: no control token is
// recognised in it. A user-defined token (type 4) is read whole wherever its text occurs, cut out
// before the merges run on the rest, and the text after it again takes a "▁" first, as llama.cpp does.
// Any bytes are taken, as llama.cpp takes them: a character is as long as its first byte says
// (cut at the text's end), and an ill-formed one falls back to its bytes' tokens.
// The vocabulary's maps are stb_ds maps, whose lookups write into them: one Spm is not to encode
// on two threads at once.
#ifndef MICRO_SPM_H
#define MICRO_SPM_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h" // TokBytes

// Token types as llama.cpp's converter writes them (tokenizer.ggml.token_type); any other value is
// llama.cpp's UNDEFINED.
enum { SPM_NORMAL = 1, SPM_UNKNOWN = 2, SPM_CONTROL = 3, SPM_USER_DEFINED = 4, SPM_UNUSED = 5, SPM_BYTE = 6 };

typedef struct Spm Spm;

// A tokenizer of n_tokens tokens (1 to 2^24): token i's text, score and type. A text is cut at its
// first NUL and an empty one named "[EMPTY_i]", as llama.cpp reads a GGUF's strings. NULL with one
// line in err: two tokens of the same text (llama.cpp stops on them too), a score that is not a
// number, out of memory.
Spm *spm_create(const TokBytes *tokens, const float *scores, const int32_t *types, int n_tokens, int add_space_prefix,
                char *err, size_t errlen);
void spm_free(Spm *s);
int spm_size(const Spm *s); // the number of tokens

// The ids of n bytes (no BOS added), appended to *ids (a malloc'ed array of *n_ids, grown as
// needed). 0, or -1 with one line in err: a byte whose fallback has no token (neither <0xXX> nor
// the byte itself: llama.cpp stops there with an exception), out of memory.
int spm_encode(const Spm *s, const uint8_t *text, size_t n, int32_t **ids, size_t *n_ids, char *err, size_t errlen);

// The bytes token id stands for, as llama.cpp's token_to_piece gives them with special tokens shown:
// a normal token's text with each "▁" a space, a byte token's byte, a control, unknown or
// user-defined token's text as it is, nothing for an unused or undefined one. Into out (at most cap
// bytes); the count, or -1 for an id out of range, a byte token not of the form <0xXX>, or too
// little room.
int spm_token_bytes(const Spm *s, int32_t id, uint8_t *out, size_t cap);

#endif
