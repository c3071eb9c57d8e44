#include "tokenizer.h"

#include <stdlib.h>

struct Tokenizer { // one of the two
    Bpe *bpe;
    Spm *spm;
};

Tokenizer *tokenizer_from_bpe(Bpe *b) {
    Tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        bpe_free(b);
        return NULL;
    }
    t->bpe = b;
    return t;
}

Tokenizer *tokenizer_from_spm(Spm *s) {
    Tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        spm_free(s);
        return NULL;
    }
    t->spm = s;
    return t;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    bpe_free(t->bpe);
    spm_free(t->spm);
    free(t);
}

int tokenizer_encode(const Tokenizer *t, const uint8_t *text, size_t n, int32_t **ids, size_t *n_ids, char *err,
                     size_t errlen) {
    return t->spm ? spm_encode(t->spm, text, n, ids, n_ids, err, errlen) : bpe_encode(t->bpe, text, n, ids, n_ids, err, errlen);
}

int tokenizer_token_bytes(const Tokenizer *t, int32_t id, uint8_t *out, size_t cap) {
    return t->spm ? spm_token_bytes(t->spm, id, out, cap) : bpe_token_bytes(t->bpe, id, out, cap);
}

int tokenizer_size(const Tokenizer *t) { return t->spm ? spm_size(t->spm) : bpe_size(t->bpe); }
