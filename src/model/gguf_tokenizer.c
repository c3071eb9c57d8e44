// A GGUF file's tokenizer (gguf_tokenizer.h), from its tokenizer.ggml.* keys as llama.cpp's
// converter writes them and llama.cpp's llama-vocab.cpp reads them.
#include "gguf_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "le_bytes.h"

// The strings of an array key, each a TokBytes into the file; NULL with one line in err.
static TokBytes *string_array(const Gguf *g, const char *key, uint64_t *n, char *err, size_t errlen) {
    const GgufKv *kv = gguf_find(g, key);
    if (!kv || kv->type != GGUF_ARRAY || kv->array_type != GGUF_STRING || kv->count == 0 || kv->count > (1u << 24)) {
        snprintf(err, errlen, "no array of strings %s", key);
        return NULL;
    }
    TokBytes *out = malloc(sizeof *out * (size_t)kv->count);
    if (!out) {
        snprintf(err, errlen, "out of memory reading %s", key);
        return NULL;
    }
    const uint8_t *at = kv->at;
    for (uint64_t i = 0; i < kv->count; i++) {
        const GgufString s = gguf_next_string(&at);
        out[i] = (TokBytes){s.ptr, (size_t)s.len};
    }
    *n = kv->count;
    return out;
}

// Whether the vocabulary is micro's own: llama's SentencePiece form with exactly the 256 byte tokens
// <0x00>..<0xFF> in order, token b the byte b (what export --gguf writes). Its ids are the bytes.
static int byte_vocabulary(const Gguf *g) {
    const GgufKv *tokens = gguf_find(g, "tokenizer.ggml.tokens");
    int bytes = tokens && tokens->type == GGUF_ARRAY && tokens->array_type == GGUF_STRING && tokens->count == 256;
    const uint8_t *at = bytes ? tokens->at : NULL;
    for (int b = 0; b < 256 && bytes; b++) {
        char want[8];
        snprintf(want, sizeof want, "<0x%02X>", b);
        bytes = gguf_string_is(gguf_next_string(&at), want);
    }
    return bytes;
}

// An array of n 32-bit numbers (type one of a and b, at least n of them), or NULL.
static const GgufKv *numbers(const Gguf *g, const char *key, uint32_t a, uint32_t b, uint64_t n) {
    const GgufKv *kv = gguf_find(g, key);
    return kv && kv->type == GGUF_ARRAY && (kv->array_type == a || kv->array_type == b) && kv->count >= n ? kv : NULL;
}

// Any other llama vocabulary: SentencePiece as llama.cpp's LLAMA_VOCAB_TYPE_SPM reads it (tokens,
// scores, token types; add_space_prefix, add_bos_token and bos_token_id default true, true and 1).
static int spm_vocabulary(const Gguf *g, GgufTokenizer *t, char *err, size_t errlen) {
    uint64_t n_tokens = 0;
    TokBytes *tokens = string_array(g, "tokenizer.ggml.tokens", &n_tokens, err, errlen);
    if (!tokens) return -1;
    // llama.cpp takes int32 scores too (as floats); more scores or types than tokens are left unread.
    const GgufKv *sk = numbers(g, "tokenizer.ggml.scores", GGUF_FLOAT32, GGUF_INT32, n_tokens);
    const GgufKv *tk = numbers(g, "tokenizer.ggml.token_type", GGUF_INT32, GGUF_INT32, n_tokens);
    if (!sk || !tk) {
        snprintf(err, errlen, "no tokenizer.ggml.%s (an array of %s, one for each of the %llu tokens)", sk ? "token_type" : "scores",
                 sk ? "int32" : "float32", (unsigned long long)n_tokens);
        free(tokens);
        return -1;
    }
    float *scores = malloc(sizeof *scores * (size_t)n_tokens);
    int32_t *types = malloc(sizeof *types * (size_t)n_tokens);
    for (uint64_t i = 0; scores && types && i < n_tokens; i++) {
        const uint32_t u = le_get_u32(sk->at + 4 * i);
        if (sk->array_type == GGUF_FLOAT32) memcpy(&scores[i], &u, sizeof u);
        else scores[i] = (float)(int32_t)u;
        types[i] = (int32_t)le_get_u32(tk->at + 4 * i);
    }
    char why[300];
    int prefix = 1, add_bos = 1;
    uint64_t bos = 1; // llama.cpp's SPM defaults: a space first, BOS 1 added
    const int has_prefix = gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &prefix, why, sizeof why);
    const int has_add = has_prefix < 0 ? 0 : gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, why, sizeof why);
    const int has_bos = has_prefix < 0 || has_add < 0 ? 0 : gguf_get_uint(g, "tokenizer.ggml.bos_token_id", 0, n_tokens - 1, &bos, why, sizeof why);
    Spm *spm = NULL;
    if (!scores || !types) snprintf(err, errlen, "out of memory reading the tokenizer");
    else if (has_prefix < 0 || has_add < 0 || has_bos < 0) snprintf(err, errlen, "%s", why);
    else if (has_bos > 0 && bos >= n_tokens && add_bos)
        snprintf(err, errlen, "tokenizer.ggml.add_bos_token is true but there is no BOS (no tokenizer.ggml.bos_token_id, and "
                 "the default 1 is no token)");
    else if ((spm = spm_create(tokens, scores, types, (int)n_tokens, prefix, why, sizeof why)) == NULL)
        snprintf(err, errlen, "tokenizer.ggml.tokens: %s", why);
    free(tokens);
    free(scores);
    free(types);
    if (!spm) return -1;
    if (!(t->tok = tokenizer_from_spm(spm))) {
        snprintf(err, errlen, "out of memory reading the tokenizer");
        return -1;
    }
    t->n_tokens = (int)n_tokens;
    t->bos = add_bos ? (int32_t)bos : -1;
    return 0;
}

static int tokenizer_of(const Gguf *g, GgufTokenizer *t, char *err, size_t errlen);

// The vocabulary's end of generation (tokenizer.ggml.eos_token_id), where generation stops; -1 for
// none or one outside the vocabulary (llama.cpp warns and goes on too). Not for micro's bytes.
int gguf_tokenizer(const Gguf *g, GgufTokenizer *t, char *err, size_t errlen) {
    if (tokenizer_of(g, t, err, errlen)) return -1;
    uint64_t eos = 0;
    char why[200];
    t->eos = t->tok && gguf_get_uint(g, "tokenizer.ggml.eos_token_id", 0, (uint64_t)t->n_tokens - 1, &eos, why, sizeof why) == 0
                 ? (int32_t)eos
                 : -1;
    return 0;
}

static int tokenizer_of(const Gguf *g, GgufTokenizer *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    t->bos = -1;
    GgufString model, pre = {(const uint8_t *)"gpt2", 4};
    char why[300];
    if (gguf_get_string(g, "tokenizer.ggml.model", &model, why, sizeof why)) {
        snprintf(err, errlen, "no tokenizer.ggml.model");
        return -1;
    }
    if (gguf_string_is(model, "llama")) // micro's bytes (t->tok stays NULL), or SentencePiece
        return byte_vocabulary(g) ? 0 : spm_vocabulary(g, t, err, errlen);
    if (!gguf_string_is(model, "gpt2")) {
        char shown[64];
        snprintf(err, errlen, "tokenizer '%s': micro reads gpt2 (byte-level BPE) and llama (SentencePiece) vocabularies so far",
                 gguf_shown(model, shown, sizeof shown));
        return -1;
    }
    if (gguf_get_string(g, "tokenizer.ggml.pre", &pre, why, sizeof why) < 0) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    char pre_name[64];
    gguf_shown(pre, pre_name, sizeof pre_name); // a name with other bytes is no pre-tokenizer micro knows
    uint64_t n_tokens = 0, n_merges = 0;
    TokBytes *tokens = string_array(g, "tokenizer.ggml.tokens", &n_tokens, err, errlen);
    TokBytes *merges = tokens ? string_array(g, "tokenizer.ggml.merges", &n_merges, err, errlen) : NULL;
    // User-defined tokens (token type 4, llama.cpp's USER_DEFINED) are read whole in a text.
    int32_t *user = NULL;
    int n_user = 0;
    const GgufKv *types = gguf_find(g, "tokenizer.ggml.token_type");
    if (types && types->type == GGUF_ARRAY && types->array_type == GGUF_INT32 && types->count == n_tokens) {
        user = malloc(sizeof(int32_t) * (size_t)n_tokens);
        for (uint64_t i = 0; user && i < n_tokens; i++)
            if ((int32_t)le_get_u32(types->at + 4 * i) == 4) user[n_user++] = (int32_t)i;
    }
    Bpe *bpe = tokens && merges ? bpe_create(tokens, (int)n_tokens, merges, (int)n_merges, user, n_user, pre_name, err, errlen)
                                : NULL;
    free(user);
    free(tokens);
    free(merges);
    if (!bpe) return -1;
    if (!(t->tok = tokenizer_from_bpe(bpe))) {
        snprintf(err, errlen, "out of memory reading the tokenizer");
        return -1;
    }
    t->n_tokens = (int)n_tokens;
    uint64_t bos = 0;
    int add_bos = 0;
    const int has_bos = gguf_get_uint(g, "tokenizer.ggml.bos_token_id", 0, n_tokens - 1, &bos, why, sizeof why);
    const int has_add = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, why, sizeof why);
    if (has_bos < 0 || has_add < 0) {
        tokenizer_free(t->tok);
        t->tok = NULL;
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    // BOS as the file says: added only when add_bos_token is true and there is a BOS token.
    t->bos = has_bos == 0 && has_add == 0 && add_bos ? (int32_t)bos : -1;
    return 0;
}

void gguf_tokenizer_free(GgufTokenizer *t) {
    tokenizer_free(t->tok);
    memset(t, 0, sizeof *t);
}
