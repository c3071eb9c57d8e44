// SentencePiece as llama.cpp runs it (spm.h; llama.cpp's llm_tokenizer_spm and the SPM case of
// llama_vocab::impl::tokenize). The vocabulary is an stb_ds string map. A fragment's symbols are a
// linked list; the candidate pairs are a heap, highest score first and the leftmost of equal scores,
// each entry remembering the joined length it was scored at, so that an entry whose symbols changed
// since is passed over (a symbol only grows by taking in its right neighbour, so the length tells).
// llama.cpp records each merge to undo it at the end for a symbol that is no token; but a merged
// symbol is always a token (a pair is only queued when its joined text is one, and is only merged
// while that text is unchanged), so only a symbol never merged can fail to be one, and it has no
// merge to undo: it goes straight to its bytes' tokens.
#include "spm.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stb_ds_setup.h"
#include "vec_heap.h"
#include "whole_tokens.h"

typedef struct {
    char *key; // into the Spm's arena
    int32_t value;
} StrMap;

struct Spm {
    StrMap *vocab;    // token text -> id (no two tokens have one text)
    TokBytes *texts;  // [n_tokens] the texts as llama.cpp keeps them, NUL-terminated in the arena
    uint8_t *arena;
    float *scores;    // [n_tokens]
    int32_t *types;   // [n_tokens]
    int n_tokens;
    size_t longest;   // the longest text: a longer piece is no token
    int32_t byte_token[256]; // a byte's fallback: <0xXX>, else the byte's own token, else -1
    int32_t *whole;   // the user-defined tokens, longest text first
    int n_whole;
    int add_space_prefix;
};

void spm_free(Spm *s) {
    if (!s) return;
    shfree(s->vocab);
    free(s->texts);
    free(s->arena);
    free(s->scores);
    free(s->types);
    free(s->whole);
    free(s);
}

int spm_size(const Spm *s) { return s->n_tokens; }


#define EMPTY_NAME 24 // "[EMPTY_16777215]" and its NUL

Spm *spm_create(const TokBytes *tokens, const float *scores, const int32_t *types, int n_tokens, int add_space_prefix,
                char *err, size_t errlen) {
    if (n_tokens < 1 || n_tokens > (1 << 24)) {
        snprintf(err, errlen, "a vocabulary of %d tokens: micro reads 1 to 16777216", n_tokens);
        return NULL;
    }
    // The texts as llama.cpp reads them: up to the first NUL (it takes a GGUF string as a C string).
    size_t total = 0;
    for (int i = 0; i < n_tokens; i++) {
        const uint8_t *nul = tokens[i].n ? memchr(tokens[i].p, 0, tokens[i].n) : NULL;
        const size_t n = nul ? (size_t)(nul - tokens[i].p) : tokens[i].n;
        total += (n ? n : EMPTY_NAME) + 1;
    }
    Spm *s = calloc(1, sizeof *s);
    if (s) {
        s->texts = malloc(sizeof *s->texts * (size_t)n_tokens);
        s->arena = malloc(total);
        s->scores = malloc(sizeof *s->scores * (size_t)n_tokens);
        s->types = malloc(sizeof *s->types * (size_t)n_tokens);
        s->whole = malloc(sizeof *s->whole * (size_t)n_tokens);
    }
    WholeToken *order = malloc(sizeof *order * (size_t)n_tokens);
    if (!s || !s->texts || !s->arena || !s->scores || !s->types || !s->whole || !order) {
        free(order);
        spm_free(s);
        snprintf(err, errlen, "out of memory for a vocabulary of %d tokens", n_tokens);
        return NULL;
    }
    s->n_tokens = n_tokens;
    s->add_space_prefix = add_space_prefix != 0;
    size_t at = 0;
    int n_order = 0;
    for (int i = 0; i < n_tokens; i++) {
        const uint8_t *nul = tokens[i].n ? memchr(tokens[i].p, 0, tokens[i].n) : NULL;
        size_t n = nul ? (size_t)(nul - tokens[i].p) : tokens[i].n;
        char *key = (char *)s->arena + at;
        if (n) memcpy(key, tokens[i].p, n);
        else n = (size_t)snprintf(key, EMPTY_NAME, "[EMPTY_%d]", i); // llama.cpp's name for an empty token
        key[n] = 0;
        at += n + 1;
        s->texts[i] = (TokBytes){(const uint8_t *)key, n};
        if (isnan(scores[i])) {
            free(order);
            spm_free(s);
            snprintf(err, errlen, "token %d's score is not a number", i);
            return NULL;
        }
        s->scores[i] = scores[i];
        s->types[i] = types[i];
        const ptrdiff_t same = shgeti(s->vocab, key);
        if (same >= 0) {
            const int first = s->vocab[same].value;
            free(order);
            spm_free(s);
            snprintf(err, errlen, "tokens %d and %d have the same text (llama.cpp refuses such a vocabulary too)", first, i);
            return NULL;
        }
        shput(s->vocab, key, i);
        if (n > s->longest) s->longest = n;
        if (types[i] == SPM_USER_DEFINED) order[n_order++] = (WholeToken){n, i};
    }
    // The user-defined tokens, longest first (a longer text wins where two begin at one place), by id among equals.
    whole_tokens_sort(order, n_order, s->whole);
    s->n_whole = n_order;
    free(order);
    // Byte fallback as llama.cpp's byte_to_token: the token <0xXX>, else the token of the byte alone.
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        ptrdiff_t t = shgeti(s->vocab, name);
        if (t < 0 && b) {
            const char one[2] = {(char)b, 0};
            t = shgeti(s->vocab, one);
        }
        s->byte_token[b] = t >= 0 ? s->vocab[t].value : -1;
    }
    return s;
}

// ---------------------------------------------------------------------------------------------
// One fragment's merges.

typedef struct {
    int prev, next;
    size_t start, n; // in the escaped fragment; n 0 once merged into its left neighbour
} Symbol;

typedef struct {
    float score;
    int left, right;
    size_t size; // the joined length when queued: stale once either symbol changed
} Bigram;

// Higher score first; the leftmost of equal scores (llama.cpp's llm_bigram_spm::comparator).
static int bigram_before(const void *x, const void *y) {
    const Bigram *a = x, *b = y;
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct {
    const Spm *s;
    StrMap *vocab;       // the map, which stb_ds's lookups write their last index into
    const uint8_t *text; // the escaped fragment
    Symbol *sym;
    Vec heap;            // of Bigram
    char *key;           // scratch: the longest token's length + 1
    Vec out;             // of int32_t
    int missing;         // a byte with no fallback token, or -1
} Session;

// The id of the n bytes at start, or -1 when they are no token.
static int32_t lookup(Session *m, size_t start, size_t n) {
    if (n > m->s->longest || memchr(m->text + start, 0, n)) return -1;
    memcpy(m->key, m->text + start, n);
    m->key[n] = 0;
    const ptrdiff_t i = shgeti(m->vocab, m->key);
    return i >= 0 ? m->vocab[i].value : -1;
}

static void try_bigram(Session *m, int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t n = m->sym[left].n + m->sym[right].n; // right begins where left ends
    const int32_t id = lookup(m, m->sym[left].start, n);
    if (id >= 0) heap_push(&m->heap, &(Bigram){m->s->scores[id], left, right, n}, bigram_before);
}

static void emit(Session *m, int32_t id) {
    int32_t *slot = vec_push(&m->out);
    if (slot) *slot = id;
}

// A character's length as llama.cpp's unicode_len_utf8 reads it from its first byte (a stray
// continuation byte is one; 0xF8-0xFF four), cut at the fragment's end by the caller.
static size_t char_len(uint8_t b) {
    static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[b >> 4];
}

// The ids of one escaped fragment of len bytes (len ≥ 1, at most INT_MAX symbols), appended to m->out.
static void encode_fragment(Session *m, const uint8_t *text, size_t len) {
    m->text = text;
    int count = 0;
    for (size_t at = 0; at < len; count++) {
        size_t n = char_len(text[at]);
        if (n > len - at) n = len - at;
        m->sym[count] = (Symbol){count - 1, at + n < len ? count + 1 : -1, at, n};
        at += n;
    }
    m->heap.n = 0;
    for (int i = 1; i < count; i++) try_bigram(m, i - 1, i);
    while (m->heap.n > 0) {
        Bigram b;
        heap_pop(&m->heap, &b, bigram_before);
        Symbol *l = &m->sym[b.left], *r = &m->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; // stale
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) m->sym[r->next].prev = b.left;
        try_bigram(m, l->prev, b.left);
        try_bigram(m, b.left, l->next);
    }
    for (int i = 0; i >= 0 && count > 0; i = m->sym[i].next) {
        const int32_t id = lookup(m, m->sym[i].start, m->sym[i].n);
        if (id >= 0) {
            emit(m, id);
            continue;
        }
        for (size_t j = 0; j < m->sym[i].n; j++) { // byte fallback
            const uint8_t byte = text[m->sym[i].start + j];
            if (m->s->byte_token[byte] < 0) {
                if (m->missing < 0) m->missing = byte;
                continue;
            }
            emit(m, m->s->byte_token[byte]);
        }
    }
}

// A fragment of the text: its bytes [start, start + len), or the user-defined token id (len its text's).
typedef struct {
    size_t start, len;
    int32_t id; // -1 for text
} Fragment;

int spm_encode(const Spm *s, const uint8_t *text, size_t n, int32_t **ids, size_t *n_ids, char *err, size_t errlen) {
    if (n > (size_t)INT_MAX / 4) {
        snprintf(err, errlen, "a text of %zu bytes: micro tokenises at most %d at once", n, INT_MAX / 4);
        return -1;
    }
    // The user-defined tokens cut out, longest first, then leftmost first, as llama.cpp's
    // tokenizer_st_partition does with parse_special off (control and unknown tokens are not read).
    Vec frags = {NULL, 0, 0, sizeof(Fragment), 0};
    Fragment *f0 = n ? vec_push(&frags) : NULL;
    if (f0) *f0 = (Fragment){0, n, -1};
    for (int w = 0; w < s->n_whole && !frags.failed; w++) {
        const TokBytes t = s->texts[s->whole[w]];
        Vec next = {NULL, 0, 0, sizeof(Fragment), 0};
        for (size_t k = 0; k < frags.n; k++) {
            const Fragment f = ((Fragment *)frags.at)[k];
            Fragment *p;
            if (f.id >= 0) {
                if ((p = vec_push(&next))) *p = f;
                continue;
            }
            size_t at = f.start;
            const size_t end = f.start + f.len;
            const uint8_t *hit;
            while (at < end && (hit = memmem(text + at, end - at, t.p, t.n))) {
                const size_t h = (size_t)(hit - text);
                if (h > at && (p = vec_push(&next))) *p = (Fragment){at, h - at, -1};
                if ((p = vec_push(&next))) *p = (Fragment){h, t.n, s->whole[w]};
                at = h + t.n;
            }
            if (at < end && (p = vec_push(&next))) *p = (Fragment){at, end - at, -1};
        }
        if (next.failed) frags.failed = 1;
        free(frags.at);
        frags.at = next.at, frags.n = next.n, frags.cap = next.cap;
    }
    // The longest fragment once escaped: a space before it, each space three bytes.
    size_t longest = 0;
    for (size_t k = 0; k < frags.n; k++) {
        const Fragment *f = (Fragment *)frags.at + k;
        if (f->id < 0 && f->len > longest) longest = f->len;
    }
    const size_t cap = 3 * longest + 3;
    Session m = {s, s->vocab, NULL, NULL, {NULL, 0, 0, sizeof(Bigram), 0}, NULL, {NULL, 0, 0, sizeof(int32_t), 0}, -1};
    uint8_t *escaped = malloc(cap);
    m.sym = malloc(sizeof *m.sym * cap);
    m.key = malloc(s->longest + 1);
    int rc = frags.failed || !escaped || !m.sym || !m.key ? -1 : 0;
    // Each piece of text is escaped and merged on its own; the first, and each after a user-defined
    // token, takes a space first (llama.cpp's is_prev_special).
    int after_token = 1;
    for (size_t k = 0; k < frags.n && !rc; k++) {
        const Fragment *f = (Fragment *)frags.at + k;
        if (f->id >= 0) {
            emit(&m, f->id);
            after_token = 1;
            continue;
        }
        size_t len = 0;
        const uint8_t mark[3] = {0xe2, 0x96, 0x81}; // U+2581
        if (s->add_space_prefix && after_token) memcpy(escaped, mark, 3), len = 3;
        for (size_t i = f->start; i < f->start + f->len; i++) {
            if (text[i] == ' ') memcpy(escaped + len, mark, 3), len += 3;
            else escaped[len++] = text[i];
        }
        encode_fragment(&m, escaped, len);
        after_token = 0;
        if (m.heap.failed || m.out.failed) rc = -1;
    }
    if (!rc && m.missing >= 0) {
        snprintf(err, errlen, "byte 0x%02X has no token: the vocabulary holds neither <0x%02X> nor that byte "
                 "(llama.cpp stops on it too)", m.missing, m.missing);
        rc = -2;
    }
    if (!rc && m.out.n > 0) {
        int32_t *grown = realloc(*ids, sizeof(int32_t) * (*n_ids + m.out.n));
        if (!grown) {
            rc = -1;
        } else {
            memcpy(grown + *n_ids, m.out.at, sizeof(int32_t) * m.out.n);
            *ids = grown;
            *n_ids += m.out.n;
        }
    }
    if (rc == -1) snprintf(err, errlen, "out of memory tokenising %zu bytes", n);
    free(frags.at);
    free(escaped);
    free(m.sym);
    free(m.key);
    free(m.heap.at);
    free(m.out.at);
    return rc ? -1 : 0;
}

static int hex_digit(uint8_t c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int spm_token_bytes(const Spm *s, int32_t id, uint8_t *out, size_t cap) {
    if (id < 0 || id >= s->n_tokens) return -1;
    const TokBytes t = s->texts[id];
    switch (s->types[id]) {
    case SPM_NORMAL: { // each "▁" a space
        size_t n = 0;
        for (size_t i = 0; i < t.n;) {
            const int mark = i + 3 <= t.n && t.p[i] == 0xe2 && t.p[i + 1] == 0x96 && t.p[i + 2] == 0x81;
            if (n >= cap) return -1;
            out[n++] = mark ? ' ' : t.p[i];
            i += mark ? 3 : 1;
        }
        return (int)n;
    }
    case SPM_BYTE: {
        const int hi = t.n == 6 ? hex_digit(t.p[3]) : -1, lo = t.n == 6 ? hex_digit(t.p[4]) : -1;
        if (hi < 0 || lo < 0 || memcmp(t.p, "<0x", 3) || t.p[5] != '>' || cap < 1) return -1;
        out[0] = (uint8_t)(hi << 4 | lo);
        return 1;
    }
    case SPM_UNKNOWN:
    case SPM_CONTROL:
    case SPM_USER_DEFINED:
        if (t.n > cap) return -1;
        memcpy(out, t.p, t.n);
        return (int)t.n;
    default: // unused, undefined: llama.cpp gives no text
        return 0;
    }
}
