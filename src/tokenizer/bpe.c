// Byte-level BPE (bpe.h). The pre-tokenizers' regular expressions need Unicode's letter and number
// classes and look-ahead: PCRE2 (UTF + UCP) runs them. The vocabulary and the merge ranks are
// stb_ds string maps. A piece's merges take the pair of lowest rank first (ties: the leftmost), held
// in a heap over a linked list of symbols, so a piece of n bytes costs n log n, not n².
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stb_ds_setup.h"
#include "utf8.h"
#include "vec_heap.h"
#include "whole_tokens.h"

#define MAX_REGEXES 2

typedef struct {
    char *key;
    int32_t value;
} StrMap;

struct Bpe {
    StrMap *vocab;  // token text -> id (the last of equal texts, as llama.cpp keeps it)
    StrMap *ranks;  // "left right" -> merge rank (the first of equal merges)
    TokBytes *texts; // [n_tokens] copies of the tokens' texts, for bpe_token_bytes
    uint8_t *arena;
    int n_tokens;
    pcre2_code *regex[MAX_REGEXES];
    int n_regex;
    int32_t *whole;  // the user-defined tokens, longest text first
    int n_whole;
};

// The pre-tokenizers as llama.cpp's llama-vocab.cpp runs them: each regular expression splits every
// piece the one before it left, and the text between matches stays a piece of its own.
static const struct {
    const char *name;
    const char *regex[MAX_REGEXES];
} pre_tokenizers[] = {
    {"gpt2", {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", NULL}},
    {"llama-bpe",
     {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      NULL}},
    {"qwen2",
     {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      NULL}},
    {"smollm", {"\\p{N}", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
};
#define N_PRE (int)(sizeof pre_tokenizers / sizeof pre_tokenizers[0])

const char *const *bpe_pre_tokenizers(int *n) {
    static const char *names[N_PRE];
    for (int i = 0; i < N_PRE; i++) names[i] = pre_tokenizers[i].name;
    *n = N_PRE;
    return names;
}

// GPT-2's stand-ins: the printable bytes are themselves, the other 68 (0-32, 127-160 and 173) the
// code points 256-323, in byte order.
static uint32_t stand_in(uint8_t b) {
    if (b <= 32) return 256u + b;
    if (b >= 127 && b <= 160) return 256u + 33 + (b - 127u);
    return b == 173 ? 256u + 67 : b;
}

static int byte_of(uint32_t cp) {
    if (cp >= 256 + 68) return -1;
    if (cp >= 256) return cp < 256 + 33 ? (int)cp - 256 : cp < 256 + 67 ? 127 + ((int)cp - 256 - 33) : 173;
    return stand_in((uint8_t)cp) == cp ? (int)cp : -1;
}

static int put_utf8(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) return out[0] = (uint8_t)cp, 1;
    out[0] = (uint8_t)(0xc0 | cp >> 6), out[1] = (uint8_t)(0x80 | (cp & 0x3f));
    return 2; // stand-ins are below 0x800
}

void bpe_free(Bpe *b) {
    if (!b) return;
    shfree(b->vocab);
    shfree(b->ranks);
    for (int i = 0; i < b->n_regex; i++) pcre2_code_free(b->regex[i]);
    free(b->texts);
    free(b->arena);
    free(b->whole);
    free(b);
}

// A NUL-terminated copy of t in buf (cap bytes); NULL when t holds a NUL or does not fit.
static const char *c_string(TokBytes t, char *buf, size_t cap) {
    if (t.n + 1 > cap || memchr(t.p, 0, t.n)) return NULL;
    memcpy(buf, t.p, t.n);
    buf[t.n] = 0;
    return buf;
}


Bpe *bpe_create(const TokBytes *tokens, int n_tokens, const TokBytes *merges, int n_merges, const int32_t *user_defined,
                int n_user, const char *pre, char *err, size_t errlen) {
    int which = -1;
    for (int i = 0; i < N_PRE; i++)
        if (!strcmp(pre, pre_tokenizers[i].name)) which = i;
    if (which < 0) {
        snprintf(err, errlen, "pre-tokenizer '%.40s': micro knows gpt2, llama-bpe, qwen2 and smollm", pre);
        return NULL;
    }
    Bpe *b = calloc(1, sizeof *b);
    size_t total = 0;
    for (int i = 0; i < n_tokens; i++) total += tokens[i].n;
    if (b) b->texts = malloc(sizeof *b->texts * (size_t)(n_tokens > 0 ? n_tokens : 1));
    if (b) b->arena = malloc(total + 1);
    if (!b || !b->texts || !b->arena) {
        bpe_free(b);
        snprintf(err, errlen, "out of memory for a vocabulary of %d tokens", n_tokens);
        return NULL;
    }
    b->n_tokens = n_tokens;
    sh_new_strdup(b->vocab);
    sh_new_strdup(b->ranks);
    char key[4096];
    size_t at = 0;
    for (int i = 0; i < n_tokens; i++) {
        memcpy(b->arena + at, tokens[i].p, tokens[i].n);
        b->texts[i] = (TokBytes){b->arena + at, tokens[i].n};
        at += tokens[i].n;
        const char *k = c_string(tokens[i], key, sizeof key);
        if (!k) continue; // a token no piece can spell (a NUL, or longer than any symbol here)
        shput(b->vocab, k, i);
    }
    for (int i = 0; i < n_merges; i++) {
        const char *k = c_string(merges[i], key, sizeof key);
        if (!k || !memchr(merges[i].p, ' ', merges[i].n)) {
            bpe_free(b);
            snprintf(err, errlen, "merge %d is not 'left right'", i);
            return NULL;
        }
        if (shgeti(b->ranks, k) < 0) shput(b->ranks, k, i);
    }
    // The user-defined tokens, longest first (a longer text wins where two begin at one place), by id among equals.
    b->whole = malloc(sizeof(int32_t) * (size_t)(n_user > 0 ? n_user : 1));
    WholeToken *order = malloc(sizeof *order * (size_t)(n_user > 0 ? n_user : 1));
    if (!b->whole || !order) {
        free(order);
        bpe_free(b);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int n_order = 0;
    for (int i = 0; i < n_user; i++)
        if (user_defined[i] >= 0 && user_defined[i] < n_tokens && tokens[user_defined[i]].n > 0)
            order[n_order++] = (WholeToken){tokens[user_defined[i]].n, user_defined[i]};
    whole_tokens_sort(order, n_order, b->whole);
    b->n_whole = n_order;
    free(order);
    for (int r = 0; r < MAX_REGEXES && pre_tokenizers[which].regex[r]; r++) {
        int code;
        PCRE2_SIZE offset;
        b->regex[r] = pcre2_compile((PCRE2_SPTR)pre_tokenizers[which].regex[r], PCRE2_ZERO_TERMINATED,
                                    PCRE2_UTF | PCRE2_UCP, &code, &offset, NULL);
        if (!b->regex[r]) {
            bpe_free(b);
            snprintf(err, errlen, "pre-tokenizer %s: PCRE2 refuses its expression (error %d at %zu)", pre, code,
                     (size_t)offset);
            return NULL;
        }
        b->n_regex = r + 1;
    }
    return b;
}

// ---------------------------------------------------------------------------------------------
// One piece's merges.

typedef struct {
    int prev, next;
    size_t start, len; // in the piece's stand-in text; len 0 once merged into its left neighbour
} Symbol;

typedef struct {
    int32_t rank;
    int left;
    size_t left_len, right_len; // the pair as pushed: a pair whose symbols changed since is stale
} Pair;

// The lowest rank first, the leftmost of equal ranks.
static int pair_before(const void *x, const void *y) {
    const Pair *a = x, *b = y;
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

typedef struct {
    const Bpe *b;
    const uint8_t *text; // the piece in stand-in characters
    Symbol *sym;
    Vec heap;            // of Pair
    char *key;           // scratch for "left right" or a symbol's text: 2 · the longest piece + 2 bytes
    Vec out;             // of int32_t: the ids so far
    StrMap *vocab, *ranks; // the maps, which stb_ds's lookups write their last index into
} Merger;

static void emit(Merger *m, int32_t id) {
    int32_t *slot = vec_push(&m->out);
    if (slot) *slot = id;
}

static const char *join(Merger *m, const Symbol *l, const Symbol *r) {
    const size_t n = l->len + 1 + (r ? r->len : 0);
    memcpy(m->key, m->text + l->start, l->len);
    if (r) {
        m->key[l->len] = ' ';
        memcpy(m->key + l->len + 1, m->text + r->start, r->len);
        m->key[n] = 0;
    } else {
        m->key[l->len] = 0;
    }
    return m->key;
}

static void try_pair(Merger *m, int left) {
    if (left < 0 || m->sym[left].next < 0) return;
    const Symbol *l = &m->sym[left], *r = &m->sym[l->next];
    const ptrdiff_t i = shgeti(m->ranks, join(m, l, r));
    if (i >= 0) heap_push(&m->heap, &(Pair){m->ranks[i].value, left, l->len, r->len}, pair_before);
}

// The piece's bytes as stand-ins, merged, each symbol then a token.
static int encode_piece(Merger *m, const uint8_t *piece, size_t n, uint8_t *mapped) {
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        m->sym[i] = (Symbol){(int)i - 1, i + 1 < n ? (int)i + 1 : -1, len, 0};
        const int w = put_utf8(stand_in(piece[i]), mapped + len);
        m->sym[i].len = (size_t)w;
        len += (size_t)w;
    }
    m->text = mapped;
    m->heap.n = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(m, (int)i);
    while (m->heap.n > 0) {
        Pair p;
        heap_pop(&m->heap, &p, pair_before);
        Symbol *l = &m->sym[p.left];
        if (l->len != p.left_len || l->next < 0 || m->sym[l->next].len != p.right_len) continue; // stale
        Symbol *r = &m->sym[l->next];
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0) m->sym[r->next].prev = p.left;
        r->len = 0;
        try_pair(m, l->prev);
        try_pair(m, p.left);
    }
    for (int i = 0; i >= 0; i = m->sym[i].next) {
        const ptrdiff_t at = shgeti(m->vocab, join(m, &m->sym[i], NULL));
        if (at >= 0) {
            emit(m, m->vocab[at].value);
            continue;
        }
        // No such token: each byte of its text that is one, as llama.cpp falls back.
        for (size_t j = 0; j < m->sym[i].len; j++) {
            const char one[2] = {(char)m->text[m->sym[i].start + j], 0};
            const ptrdiff_t t = shgeti(m->vocab, one);
            if (t >= 0) emit(m, m->vocab[t].value);
        }
    }
    return m->heap.failed || m->out.failed ? -1 : 0;
}

static void add_piece(Vec *v, size_t start, size_t len) {
    size_t *p = vec_push(v);
    if (p) p[0] = start, p[1] = len;
}

// The ids of a text with no user-defined token in it, appended to *out: the pre-tokenizer's pieces,
// each merged. 0, or -1 (out of memory, or PCRE2 failed).
static int encode_raw(const Bpe *b, const uint8_t *text, size_t n, Vec *out) {
    // Pieces as (start, length), split by each expression in turn.
    Vec pieces = {NULL, 0, 0, 2 * sizeof(size_t), 0};
    size_t *first = vec_push(&pieces);
    if (first) first[0] = 0, first[1] = n;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    Merger m = {b, NULL, NULL, {NULL, 0, 0, sizeof(Pair), 0}, NULL, *out, b->vocab, b->ranks};
    uint8_t *mapped = NULL;
    int rc = md && first ? 0 : -1;
    for (int r = 0; r < b->n_regex && !rc; r++) {
        Vec next = {NULL, 0, 0, 2 * sizeof(size_t), 0};
        for (size_t k = 0; k < pieces.n && !rc; k++) {
            const size_t start = ((size_t *)pieces.at)[2 * k], len = ((size_t *)pieces.at)[2 * k + 1];
            size_t at = 0;
            while (at < len) {
                const int got = pcre2_match(b->regex[r], text + start, len, at, PCRE2_NO_UTF_CHECK, md, NULL);
                if (got == PCRE2_ERROR_NOMATCH) break;
                if (got < 0) {
                    rc = -1;
                    break;
                }
                const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                if (ov[0] > at) add_piece(&next, start + at, ov[0] - at); // the text between
                if (ov[1] > ov[0]) add_piece(&next, start + ov[0], ov[1] - ov[0]);
                at = ov[1] > ov[0] ? ov[1] : ov[0] + (size_t)utf8_char_len(text + start + ov[0], len - ov[0]);
            }
            if (at < len) add_piece(&next, start + at, len - at);
        }
        if (next.failed) rc = -1;
        free(pieces.at);
        pieces = next;
    }
    size_t longest = 0;
    for (size_t k = 0; k < pieces.n; k++) longest = ((size_t *)pieces.at)[2 * k + 1] > longest ? ((size_t *)pieces.at)[2 * k + 1] : longest;
    m.sym = malloc(sizeof *m.sym * (longest ? longest : 1));
    m.key = malloc(2 * longest + 2);
    mapped = malloc(2 * longest + 1);
    if (!m.sym || !m.key || !mapped) rc = -1;
    for (size_t k = 0; k < pieces.n && !rc; k++) {
        const size_t *p = (size_t *)pieces.at + 2 * k;
        if (p[1] > 0) rc = encode_piece(&m, text + p[0], p[1], mapped);
    }
    *out = m.out;
    free(pieces.at);
    free(m.heap.at);
    free(m.sym);
    free(m.key);
    free(mapped);
    if (md) pcre2_match_data_free(md);
    return rc || out->failed ? -1 : 0;
}

int bpe_encode(const Bpe *b, const uint8_t *text, size_t n, int32_t **ids, size_t *n_ids, char *err, size_t errlen) {
    for (size_t i = 0; i < n;) { // PCRE2 is told the text is valid: make sure
        const int len = utf8_char_len(text + i, n - i);
        if (!len) {
            snprintf(err, errlen, "invalid UTF-8 at byte offset %zu", i);
            return -1;
        }
        i += (size_t)len;
    }
    // Fragments (start, length, id): the user-defined tokens cut out, longest first, leftmost first,
    // as llama.cpp partitions a text; id -1 for text still to encode.
    Vec frags = {NULL, 0, 0, 3 * sizeof(size_t), 0}, out = {NULL, 0, 0, sizeof(int32_t), 0};
    size_t *f0 = vec_push(&frags);
    if (f0) f0[0] = 0, f0[1] = n, f0[2] = (size_t)-1;
    for (int w = 0; w < b->n_whole && !frags.failed; w++) {
        const TokBytes t = b->texts[b->whole[w]];
        Vec next = {NULL, 0, 0, 3 * sizeof(size_t), 0};
        for (size_t k = 0; k < frags.n; k++) {
            const size_t *f = (size_t *)frags.at + 3 * k;
            size_t at = f[0];
            const size_t end = f[0] + f[1];
            const uint8_t *hit;
            while (f[2] == (size_t)-1 && at + t.n <= end && (hit = memmem(text + at, end - at, t.p, t.n))) {
                size_t *p = vec_push(&next);
                if (p && (size_t)(hit - text) > at) p[0] = at, p[1] = (size_t)(hit - text) - at, p[2] = (size_t)-1, p = vec_push(&next);
                if (p) p[0] = (size_t)(hit - text), p[1] = t.n, p[2] = (size_t)b->whole[w];
                at = (size_t)(hit - text) + t.n;
            }
            size_t *p = at < end || f[2] != (size_t)-1 ? vec_push(&next) : NULL;
            if (p) p[0] = f[2] != (size_t)-1 ? f[0] : at, p[1] = f[2] != (size_t)-1 ? f[1] : end - at, p[2] = f[2];
        }
        free(frags.at);
        frags = next;
    }
    int rc = frags.failed ? -1 : 0;
    for (size_t k = 0; k < frags.n && !rc; k++) {
        const size_t *f = (size_t *)frags.at + 3 * k;
        if (f[2] != (size_t)-1) {
            int32_t *slot = vec_push(&out);
            if (slot) *slot = (int32_t)f[2];
        } else {
            rc = encode_raw(b, text + f[0], f[1], &out);
        }
    }
    if (out.failed) rc = -1;
    if (!rc && out.n > 0) {
        int32_t *grown = realloc(*ids, sizeof(int32_t) * (*n_ids + out.n));
        if (!grown) rc = -1;
        else {
            memcpy(grown + *n_ids, out.at, sizeof(int32_t) * out.n);
            *ids = grown;
            *n_ids += out.n;
        }
    }
    if (rc) snprintf(err, errlen, "out of memory or a PCRE2 failure tokenising %zu bytes", n);
    free(out.at);
    free(frags.at);
    return rc;
}

int bpe_token_bytes(const Bpe *b, int32_t id, uint8_t *out, size_t cap) {
    if (id < 0 || id >= b->n_tokens) return -1;
    const TokBytes t = b->texts[id];
    size_t n = 0;
    for (size_t i = 0; i < t.n;) {
        const int len = utf8_char_len(t.p + i, t.n - i);
        if (!len || n >= cap) return -1;
        uint32_t cp = len == 1 ? t.p[i] : len == 2 ? (uint32_t)(t.p[i] & 0x1f) << 6 | (t.p[i + 1] & 0x3f) : 0x110000;
        const int byte = byte_of(cp);
        if (byte < 0) return -1;
        out[n++] = (uint8_t)byte;
        i += (size_t)len;
    }
    return (int)n;
}

int bpe_size(const Bpe *b) { return b->n_tokens; }
