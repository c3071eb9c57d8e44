// Texts to evaluate: a file, cut after its first N UTF-8 characters, as bytes after BOS.
#ifndef MICRO_TEXT_H
#define MICRO_TEXT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char name[256];   // file name without directory and extension ("en")
    char path[4096];
    long chars;       // characters kept (the whole file when no limit was given)
    int n_tokens;     // BOS included
    int n_bytes;      // BOS included (the same as n_tokens under micro's byte vocabulary)
    // [n_tokens]: BOS, then the UTF-8 bytes, as the text is shown (its characters, its continuations).
    uint8_t *bytes;
    // [n_tokens]: the ids the model reads, BOS first; with micro's byte vocabulary, bytes[i]. Ids,
    // not bytes, are what a text carries into eval, the forward pass and the cache.
    int32_t *tokens;
    int documents;    // 1; or, for a file in the corpus's form (each document after a 0x01 byte,
                      // the first at offset 0), its documents: tokens are the file's bytes, each
                      // 0x01 a document's BOS
} Text;

// Checks UTF-8; returns the byte offset of the first invalid sequence, or -1 when valid.
long utf8_first_invalid(const uint8_t *s, size_t n);
// Bytes spanned by the first `chars` characters of valid UTF-8 (all of it when shorter).
size_t utf8_prefix_bytes(const uint8_t *s, size_t n, long chars, long *chars_found);

// The most a text may take in memory: a file longer than this is read only with a cut (FILE:CHARS)
// short enough to fit, and only as far as the cut needs.
#define TEXT_MAX_BYTES (64 << 20)

// arg is FILE or FILE:CHARS. max_tokens is the model's context. One line in err on failure.
int text_load(Text *t, const char *arg, int max_tokens, char *err, size_t errlen);
void text_free(Text *t);
// Splits FILE[:CHARS] into path (pathlen bytes) and *chars (-1 when no count is given).
int text_split_arg(const char *arg, char *path, size_t pathlen, long *chars, char *err, size_t errlen);
// The cut of text_load from bytes in memory: checks UTF-8 and BOS, keeps the first `limit`
// characters (all when limit <= 0) and fills t's tokens; t->path and t->name are left as they are
// (they name the text in messages). One line in err on failure.
int text_from_bytes(Text *t, const uint8_t *bytes, size_t n, long limit, int max_tokens, char *err, size_t errlen);
// The text's ids under a model's own tokenizer (text_load gives micro's bytes): bos (if >= 0), then
// the tokenizer's ids of the bytes after BOS; at most max_tokens. A file in the corpus's form (its
// documents each after a 0x01) is refused. 0, or -1 with one line in err.
struct Tokenizer;
int text_tokenize(Text *t, const struct Tokenizer *tok, int32_t bos, int max_tokens, char *err, size_t errlen);
// The one message for a text longer than the model's context.
void text_context_error(const char *path, size_t tokens, int max_tokens, char *err, size_t errlen);



// Streaming UTF-8 validity, for sampling that never emits a broken character: `state` is the number
// of continuation bytes still owed and the allowed range of the next one (0 when between characters).
typedef struct {
    int owed;
    uint8_t lo, hi; // range of the next continuation byte
} Utf8State;
int utf8_byte_allowed(const Utf8State *s, uint8_t b);
void utf8_push(Utf8State *s, uint8_t b);
#endif
