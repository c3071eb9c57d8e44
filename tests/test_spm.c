// SentencePiece as llama.cpp runs it (src/tokenizer/spm.c) on small vocabularies written here,
// against ids worked out by hand: the pair whose joined text scores highest merges first (not the
// first pair), the leftmost of equal scores, merges that never happen because a better one took a
// character first, the space before a text and after a user-defined token, user-defined tokens read
// whole (the longest first) and control tokens not, byte fallback (<0xXX>, else the byte's own
// token, else the text refused), llama.cpp's reading of ill-formed UTF-8, the texts llama.cpp makes
// of a GGUF's strings (cut at a NUL, "[EMPTY_i]"), every token's bytes, and any bytes' ids spelling
// them back; and a GGUF's llama keys read as llama.cpp reads them (gguf_tokenizer: micro's own 256
// bytes stay bytes; the defaults; each key missing or of another type refused naming it). Each
// case was also run through llama.cpp (node-llama-cpp 3.21.1) when written; the real Llama 2
// vocabulary: scripts/tokenizer-check.
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "gguf_tokenizer.h"
#include "spm.h"

#define MARK "\xe2\x96\x81" // U+2581, SentencePiece's space

enum { UNK = 0, BOS = 1, EOS = 2, BYTE0 = 3, FIRST = 259 }; // <unk>, <s>, </s>, <0x00>..<0xFF>, then each case's pieces

typedef struct {
    const char *text;
    float score;
    int type;
} Piece;

static char byte_names[256][8];

// <unk>, <s>, </s> and the 256 byte tokens (those of skip_byte left out, ids kept: the slot gets a
// piece no text spells), then pieces from id 259 on.
static Spm *make_full(const Piece *pieces, int n, int add_space_prefix, int skip_byte) {
    TokBytes tokens[FIRST + 32];
    float scores[FIRST + 32];
    int32_t types[FIRST + 32];
    static const char *const specials[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) tokens[i] = (TokBytes){(const uint8_t *)specials[i], strlen(specials[i])}, scores[i] = 0, types[i] = i ? SPM_CONTROL : SPM_UNKNOWN;
    for (int b = 0; b < 256; b++) {
        snprintf(byte_names[b], sizeof byte_names[b], b == skip_byte ? "<skip>" : "<0x%02X>", b);
        tokens[BYTE0 + b] = (TokBytes){(const uint8_t *)byte_names[b], strlen(byte_names[b])};
        scores[BYTE0 + b] = 0, types[BYTE0 + b] = b == skip_byte ? SPM_UNUSED : SPM_BYTE;
    }
    for (int i = 0; i < n; i++) {
        tokens[FIRST + i] = (TokBytes){(const uint8_t *)pieces[i].text, strlen(pieces[i].text)};
        scores[FIRST + i] = pieces[i].score, types[FIRST + i] = pieces[i].type;
    }
    char err[256];
    Spm *s = spm_create(tokens, scores, types, FIRST + n, add_space_prefix, err, sizeof err);
    CHECK(s != NULL, "spm_create: %s", err);
    return s;
}

static Spm *make(const Piece *pieces, int n) { return make_full(pieces, n, 1, -1); }

static void expect_n(const Spm *s, const char *label, const char *text, size_t len, const int32_t *want, int n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    char err[256];
    const int rc = spm_encode(s, (const uint8_t *)text, len, &ids, &n, err, sizeof err);
    int same = rc == 0 && n == (size_t)n_want;
    for (int i = 0; same && i < n_want; i++) same = ids[i] == want[i];
    CHECK(same, "%s: '%s' gave %d ids (%s), first %d %d %d %d; wanted %d: %d %d %d %d", label, text, (int)n, rc ? err : "ok",
          n > 0 ? ids[0] : -1, n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1, n > 3 ? ids[3] : -1, n_want, want[0],
          n_want > 1 ? want[1] : -1, n_want > 2 ? want[2] : -1, n_want > 3 ? want[3] : -1);
    if (same) printf("ok   %s\n", label);
    free(ids);
}

static void expect(const Spm *s, const char *label, const char *text, const int32_t *want, int n_want) {
    expect_n(s, label, text, strlen(text), want, n_want);
}

#define IDS(...) (const int32_t[]){__VA_ARGS__}, (int)(sizeof (const int32_t[]){__VA_ARGS__} / sizeof(int32_t))
#define B(c) (BYTE0 + (uint8_t)(c))


// ---------------------------------------------------------------------------------------------
// A GGUF holding only tokenizer keys, written here.

typedef struct {
    uint8_t b[16384];
    size_t n;
    int kvs;
} Gg;

static void put(Gg *g, const void *p, size_t n) {
    if (g->n + n <= sizeof g->b) memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void put_u32(Gg *g, uint32_t v) { put(g, (uint8_t[]){(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)}, 4); }
static void put_u64(Gg *g, uint64_t v) { put_u32(g, (uint32_t)v), put_u32(g, (uint32_t)(v >> 32)); }
static void put_str(Gg *g, const char *s) { put_u64(g, strlen(s)), put(g, s, strlen(s)); }
static void key(Gg *g, const char *k, uint32_t type) { put_str(g, k), put_u32(g, type), g->kvs++; }

// The keys llama.cpp's converter writes for <unk>, <s>, </s>, the 256 byte tokens and pieces; what
// leave (a bit mask) leaves out, and scores of type score_type.
enum { NO_SCORES = 1, NO_TYPES = 2, FLOAT_TYPES = 4, NO_PREFIX_KEY = 8, NO_BOS_KEYS = 16, NO_ADD_BOS = 32 };
static void llama_keys(Gg *g, const Piece *pieces, int n, uint32_t score_type, int leave, int prefix) {
    g->n = 0, g->kvs = 0;
    put(g, "GGUF", 4), put_u32(g, 3), put_u64(g, 0), put_u64(g, 0); // the count of keys is patched at the end
    key(g, "tokenizer.ggml.model", GGUF_STRING), put_str(g, "llama");
    const int total = FIRST + n;
    key(g, "tokenizer.ggml.tokens", GGUF_ARRAY), put_u32(g, GGUF_STRING), put_u64(g, (uint64_t)total);
    put_str(g, "<unk>"), put_str(g, "<s>"), put_str(g, "</s>");
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        put_str(g, name);
    }
    for (int i = 0; i < n; i++) put_str(g, pieces[i].text);
    if (!(leave & NO_SCORES)) {
        key(g, "tokenizer.ggml.scores", GGUF_ARRAY), put_u32(g, score_type), put_u64(g, (uint64_t)total);
        for (int i = 0; i < total; i++) {
            const float f = i < FIRST ? 0 : pieces[i - FIRST].score;
            uint32_t u;
            if (score_type == GGUF_FLOAT32) memcpy(&u, &f, 4);
            else u = (uint32_t)(int32_t)f;
            put_u32(g, u);
        }
    }
    if (!(leave & NO_TYPES)) {
        key(g, "tokenizer.ggml.token_type", GGUF_ARRAY), put_u32(g, leave & FLOAT_TYPES ? GGUF_FLOAT32 : GGUF_INT32);
        put_u64(g, (uint64_t)total);
        for (int i = 0; i < total; i++) put_u32(g, i < 3 ? (i ? SPM_CONTROL : SPM_UNKNOWN) : i < FIRST ? SPM_BYTE : (uint32_t)pieces[i - FIRST].type);
    }
    if (!(leave & NO_PREFIX_KEY)) key(g, "tokenizer.ggml.add_space_prefix", GGUF_BOOL), put(g, (uint8_t[]){(uint8_t)prefix}, 1);
    if (!(leave & NO_BOS_KEYS)) {
        key(g, "tokenizer.ggml.bos_token_id", GGUF_UINT32), put_u32(g, 1);
        key(g, "tokenizer.ggml.add_bos_token", GGUF_BOOL), put(g, (uint8_t[]){leave & NO_ADD_BOS ? 0 : 1}, 1);
    }
    const uint64_t kvs = (uint64_t)g->kvs;
    for (int i = 0; i < 8; i++) g->b[16 + i] = (uint8_t)(kvs >> (8 * i));
}

// The tokenizer of g (0), or its refusal (-1, the message in err).
static int read_keys(Gg *g, GgufTokenizer *t, char *err, size_t errlen) {
    Gguf parsed = {0};
    CHECK(g->n <= sizeof g->b, "the test's GGUF is too big");
    if (gguf_parse(&parsed, g->b, g->n, "t.gguf", err, errlen)) {
        CHECK(0, "the test's GGUF does not parse: %s", err);
        return -1;
    }
    const int rc = gguf_tokenizer(&parsed, t, err, errlen);
    gguf_free(&parsed);
    return rc;
}

static void check_gguf_keys(void) {
    static Gg g;
    GgufTokenizer t;
    char err[512];
    const Piece pieces[] = {{MARK, -100, 1}, {"a", -100, 1}, {"b", -100, 1}, {"c", -100, 1}, {"ab", -2, 1}, {"bc", -1, 1}};
    llama_keys(&g, pieces, 6, GGUF_FLOAT32, 0, 1);
    CHECK(read_keys(&g, &t, err, sizeof err) == 0 && t.tok && t.bos == 1 && t.n_tokens == FIRST + 6, "a llama vocabulary: %s", err);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(t.tok && tokenizer_encode(t.tok, (const uint8_t *)"abc", 3, &ids, &n, err, sizeof err) == 0 && n == 3 && ids[0] == 259 &&
              ids[1] == 260 && ids[2] == 264 && tokenizer_size(t.tok) == FIRST + 6,
          "through the facade: abc -> ▁|a|bc");
    free(ids);
    gguf_tokenizer_free(&t);
    printf("ok   a GGUF's llama vocabulary is SentencePiece, BOS 1 added, through the Tokenizer facade\n");
    // int32 scores, as llama.cpp reads them; no add_space_prefix key: a space first (llama.cpp's default).
    llama_keys(&g, pieces, 6, GGUF_INT32, NO_PREFIX_KEY, 0);
    ids = NULL, n = 0;
    CHECK(read_keys(&g, &t, err, sizeof err) == 0 && tokenizer_encode(t.tok, (const uint8_t *)"abc", 3, &ids, &n, err, sizeof err) == 0 &&
              n == 3 && ids[0] == 259 && ids[2] == 264,
          "int32 scores and the default space: %s", err);
    free(ids);
    gguf_tokenizer_free(&t);
    llama_keys(&g, pieces, 6, GGUF_FLOAT32, 0, 0);
    ids = NULL, n = 0;
    CHECK(read_keys(&g, &t, err, sizeof err) == 0 && tokenizer_encode(t.tok, (const uint8_t *)"abc", 3, &ids, &n, err, sizeof err) == 0 &&
              n == 2 && ids[0] == 260 && ids[1] == 264,
          "add_space_prefix false: abc -> a|bc");
    free(ids);
    gguf_tokenizer_free(&t);
    printf("ok   int32 scores; add_space_prefix absent (a space first) and false (none)\n");
    // BOS: none when add_bos_token is false; 1 when neither key is there (llama.cpp's SPM defaults).
    llama_keys(&g, pieces, 6, GGUF_FLOAT32, NO_ADD_BOS, 1);
    CHECK(read_keys(&g, &t, err, sizeof err) == 0 && t.bos == -1, "add_bos_token false: bos %d", t.bos);
    gguf_tokenizer_free(&t);
    llama_keys(&g, pieces, 6, GGUF_FLOAT32, NO_BOS_KEYS, 1);
    CHECK(read_keys(&g, &t, err, sizeof err) == 0 && t.bos == 1, "no BOS keys: bos %d", t.bos);
    gguf_tokenizer_free(&t);
    printf("ok   BOS as add_bos_token says, 1 when the keys are absent\n");
    // Each key missing or of another type refused in one line naming it.
    static const struct {
        int leave;
        const char *needle;
    } refused[] = {{NO_SCORES, "no tokenizer.ggml.scores"}, {NO_TYPES, "no tokenizer.ggml.token_type"},
                   {FLOAT_TYPES, "no tokenizer.ggml.token_type"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        llama_keys(&g, pieces, 6, GGUF_FLOAT32, refused[i].leave, 1);
        err[0] = 0;
        CHECK(read_keys(&g, &t, err, sizeof err) == -1 && strstr(err, refused[i].needle) && !strchr(err, '\n'),
              "refused with '%s': %s", refused[i].needle, err);
    }
    llama_keys(&g, pieces, 6, GGUF_UINT32, 0, 1);
    CHECK(read_keys(&g, &t, err, sizeof err) == -1 && strstr(err, "no tokenizer.ggml.scores"), "uint32 scores refused: %s", err);
    printf("ok   scores and token types missing or of another type refused naming the key (%s)\n", err);
    // micro's own 256 byte tokens stay micro's bytes: no tokenizer, the ids are the bytes.
    g.n = 0, g.kvs = 0;
    put(&g, "GGUF", 4), put_u32(&g, 3), put_u64(&g, 0), put_u64(&g, 2);
    key(&g, "tokenizer.ggml.model", GGUF_STRING), put_str(&g, "llama");
    key(&g, "tokenizer.ggml.tokens", GGUF_ARRAY), put_u32(&g, GGUF_STRING), put_u64(&g, 256);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        put_str(&g, name);
    }
    CHECK(read_keys(&g, &t, err, sizeof err) == 0 && t.tok == NULL && t.bos == -1, "micro's bytes: %s", err);
    printf("ok   micro's 256 byte tokens in order: micro's bytes, no tokenizer\n");
}

int main(void) {
    // 259 ▁, 260 a, 261 b, 262 c (low scores), then the pairs.
    // The higher score first: "bc" (-1) before "ab" (-2), though "ab" comes first in the text.
    const Piece by_score[] = {{MARK, -100, 1}, {"a", -100, 1}, {"b", -100, 1}, {"c", -100, 1}, {"ab", -2, 1}, {"bc", -1, 1}};
    Spm *s = make(by_score, 6);
    expect(s, "the pair of higher score first: abc -> ▁|a|bc", "abc", IDS(259, 260, 264));
    spm_free(s);
    // Equal scores: the leftmost pair.
    const Piece tie[] = {{MARK, -100, 1}, {"a", -100, 1}, {"b", -100, 1}, {"c", -100, 1}, {"ab", -1, 1}, {"bc", -1, 1}};
    s = make(tie, 6);
    expect(s, "equal scores: the leftmost pair, abc -> ▁|ab|c", "abc", IDS(259, 263, 262));
    spm_free(s);
    // A merged symbol pairs again ("ab" then "abc"); and a better pair that takes a character first
    // keeps a pair from ever merging ("▁a" before "ab": ▁a|bc, not ▁|abc).
    const Piece chain[] = {{MARK, -100, 1}, {"a", -100, 1}, {"b", -100, 1}, {"c", -100, 1}, {"ab", -1, 1}, {"bc", -2, 1}, {"abc", -3, 1}};
    s = make(chain, 7);
    expect(s, "a merged pair merges again: abc -> ▁|abc", "abc", IDS(259, 265));
    spm_free(s);
    const Piece greedy[] = {{MARK, -100, 1}, {"a", -100, 1}, {"b", -100, 1}, {"c", -100, 1}, {"ab", -1, 1}, {"bc", -2, 1}, {"abc", -3, 1},
                            {MARK "a", -0.5f, 1}};
    s = make(greedy, 8);
    expect(s, "greedy by score: abc -> ▁a|bc (ab never merges)", "abc", IDS(266, 264));
    spm_free(s);

    // Spaces: one "▁" before the text, always (a text beginning with spaces too); each space a "▁".
    // 259 ▁, 260 a, 261 b, 262 ▁a, 263 ▁▁ (the lowest score), user-defined 264 <u>, 265 <uu>, 266 xx<u.
    const Piece spaces[] = {{MARK, -10, 1}, {"a", -10, 1}, {"b", -10, 1}, {MARK "a", -1, 1}, {MARK MARK, -1e9f, 1},
                            {"<u>", 0, SPM_USER_DEFINED}, {"<uu>", 0, SPM_USER_DEFINED}, {"xx<u", 0, SPM_USER_DEFINED}};
    s = make(spaces, 8);
    expect(s, "a space before the text: a -> ▁a", "a", IDS(262));
    expect(s, "a leading space is a second ▁: ' a' -> ▁|▁a", " a", IDS(259, 262));
    expect(s, "spaces inside: 'a  b' -> ▁a|▁▁|b", "a  b", IDS(262, 263, 261));
    expect(s, "a run of ▁ of the lowest score still merges: 'b  ' -> ▁|b|▁▁", "b  ", IDS(259, 261, 263));
    expect(s, "a newline is a byte: '\\n a' -> ▁|<0x0A>|▁a", "\n a", IDS(259, B('\n'), 262));
    // User-defined tokens: whole wherever they occur, the text after one taking a ▁ again; where two
    // begin at one place the longer wins (llama.cpp leaves the order of equal lengths open: not tested).
    expect(s, "a user-defined token whole, a ▁ after it: a<u>b -> ▁a|<u>|▁|b", "a<u>b", IDS(262, 264, 259, 261));
    expect(s, "a text that begins with one: <u>a -> <u>|▁a", "<u>a", IDS(264, 262));
    expect(s, "two in a row: <u><u> -> <u>|<u>", "<u><u>", IDS(264, 264));
    expect(s, "the longest first: x<uu> -> ▁|x|<uu>", "x<uu>", IDS(259, B('x'), 265));
    expect(s, "the longest first where they overlap: xx<u> -> xx<u|▁|>", "xx<u>", IDS(266, 259, B('>')));
    expect(s, "a control token is text: <s> -> ▁|<0x3C>|<0x73>|<0x3E>", "<s>", IDS(259, B('<'), B('s'), B('>')));
    spm_free(s);
    s = make_full(spaces, 8, 0, -1);
    expect(s, "add_space_prefix false: a -> a", "a", IDS(260));
    expect(s, "add_space_prefix false: ' a' -> ▁a", " a", IDS(262));
    expect(s, "add_space_prefix false: a<u>b -> a|<u>|b", "a<u>b", IDS(260, 264, 261));
    spm_free(s);

    // Byte fallback: a character that is no token goes out as its bytes' tokens <0xXX>.
    const Piece few[] = {{MARK, -10, 1}, {"a", -10, 1}, {"q", -10, 1}};
    s = make(few, 3);
    expect(s, "byte fallback: aé -> ▁|a|<0xC3>|<0xA9>", "a\xc3\xa9", IDS(259, 260, B(0xc3), B(0xa9)));
    // Ill-formed UTF-8 as llama.cpp reads it: a character as long as its first byte says, cut at
    // the end; a stray continuation byte alone.
    expect(s, "a lead byte takes the next two bytes: \\xE4qq -> one piece, its bytes", "\xe4qq", IDS(259, B(0xe4), B('q'), B('q')));
    expect(s, "a character cut at the end: a\\xF0 -> ▁|a|<0xF0>", "a\xf0", IDS(259, 260, B(0xf0)));
    expect(s, "a stray continuation byte alone: \\x80a -> ▁|<0x80>|a", "\x80" "a", IDS(259, B(0x80), 260));
    expect_n(s, "a NUL is a byte: a\\0 -> ▁|a|<0x00>", "a\0", 2, IDS(259, 260, B(0)));
    spm_free(s);
    // No <0x71>: the byte falls back to the token of the byte alone ("q"); with neither, the text is refused.
    s = make_full(few, 3, 1, 'q');
    expect(s, "no <0x71>: the byte's own token q", "\xe4qq", IDS(259, B(0xe4), 261, 261));
    spm_free(s);
    s = make_full(few, 3, 1, 'z');
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char err[256];
    CHECK(spm_encode(s, (const uint8_t *)"az", 2, &ids, &n_ids, err, sizeof err) != 0 && strstr(err, "byte 0x7A") &&
              n_ids == 0, "a byte with no token refused: %s", err);
    printf("ok   a byte with neither <0x7A> nor its own token: refused (%s)\n", err);
    free(ids);
    spm_free(s);

    // A GGUF's strings as llama.cpp reads them: cut at a NUL, an empty one "[EMPTY_i]"; two of one text refused.
    {
        TokBytes t[4] = {{(const uint8_t *)"<unk>", 5}, {(const uint8_t *)"a\0b", 3}, {(const uint8_t *)"", 0}, {(const uint8_t *)MARK, 3}};
        const float sc[4] = {0, -1, -1, -1};
        const int32_t ty[4] = {SPM_UNKNOWN, SPM_NORMAL, SPM_NORMAL, SPM_NORMAL};
        s = spm_create(t, sc, ty, 4, 1, err, sizeof err);
        CHECK(s != NULL, "%s", err);
        if (s) {
            uint8_t out[32];
            const int n1 = spm_token_bytes(s, 1, out, sizeof out);
            CHECK(n1 == 1 && out[0] == 'a', "a\\0b read as a: %d bytes", n1);
            const int n2 = spm_token_bytes(s, 2, out, sizeof out);
            CHECK(n2 == 9 && !memcmp(out, "[EMPTY_2]", 9), "an empty token named [EMPTY_2]: %d bytes", n2);
            expect(s, "a token cut at its NUL: a -> ▁|a", "a", IDS(3, 1));
            spm_free(s);
        }
        TokBytes d[3] = {{(const uint8_t *)"a", 1}, {(const uint8_t *)"b", 1}, {(const uint8_t *)"a\0c", 3}};
        CHECK(spm_create(d, sc, ty, 3, 1, err, sizeof err) == NULL && strstr(err, "tokens 0 and 2 have the same text"),
              "two tokens of one text refused: %s", err);
        const float nan_scores[3] = {0, NAN, 0};
        CHECK(spm_create(d, nan_scores, ty, 2, 1, err, sizeof err) == NULL && strstr(err, "token 1's score"),
              "a score that is no number refused: %s", err);
        CHECK(spm_create(d, sc, ty, 0, 1, err, sizeof err) == NULL, "no tokens refused");
        printf("ok   a GGUF's strings as llama.cpp reads them; duplicates, NaN scores, no tokens refused\n");
    }

    // Every kind of token's bytes, as llama.cpp's token_to_piece with special tokens shown.
    const Piece kinds[] = {{MARK "a" MARK, -1, SPM_NORMAL}, {"<u>", 0, SPM_USER_DEFINED}, {"[gone]", 0, SPM_UNUSED},
                           {"<0x4g>", 0, SPM_BYTE}, {"odd", 0, 99}};
    s = make(kinds, 5);
    uint8_t out[16];
    int w = spm_token_bytes(s, 259, out, sizeof out);
    CHECK(w == 3 && !memcmp(out, " a ", 3), "▁a▁ -> ' a ': %d", w);
    w = spm_token_bytes(s, B('A'), out, sizeof out);
    CHECK(w == 1 && out[0] == 'A', "<0x41> -> A: %d", w);
    w = spm_token_bytes(s, BOS, out, sizeof out);
    CHECK(w == 3 && !memcmp(out, "<s>", 3), "<s> shown: %d", w);
    CHECK(spm_token_bytes(s, 260, out, sizeof out) == 3, "a user-defined token's text");
    CHECK(spm_token_bytes(s, 261, out, sizeof out) == 0, "an unused token: nothing");
    CHECK(spm_token_bytes(s, 262, out, sizeof out) == -1, "a byte token not <0xXX>: none");
    CHECK(spm_token_bytes(s, 263, out, sizeof out) == 0, "an undefined type: nothing");
    CHECK(spm_token_bytes(s, 264, out, sizeof out) == -1 && spm_token_bytes(s, -1, out, sizeof out) == -1, "ids out of range");
    CHECK(spm_token_bytes(s, 259, out, 2) == -1, "too little room");
    CHECK(spm_size(s) == 264, "size %d", spm_size(s));
    printf("ok   each kind of token's bytes\n");
    spm_free(s);

    // Any text's ids spell a space and the text back (well-formed UTF-8 without a ▁ of its own: an
    // ill-formed character can take in the ▁ of a space, which then comes back as its three bytes).
    const Piece words[] = {{MARK, -1, 1}, {"t", -1, 1}, {"h", -1, 1}, {"e", -1, 1}, {"th", -2, 1}, {"the", -3, 1},
                           {MARK "the", -4, 1}, {"\xe4\xb8\xad", -5, 1}, {MARK MARK, -1e9f, 1}, {"\xc3\xa9", -6, 1}};
    s = make(words, 10);
    uint64_t rng = 7;
    int round_trips = 0;
    for (int rep = 0; rep < 300; rep++) {
        static const char *const parts[] = {"the", " ", "th", "e", "\xe4\xb8\xad", "\xc3\xa9", "\xf0\x9f\x98\x80", "x", "\n", "  ", "a"};
        char text[256];
        size_t n = 0;
        while (n < 200) {
            const char *p = parts[check_next(&rng) % 11];
            memcpy(text + n, p, strlen(p));
            n += strlen(p);
        }
        ids = NULL, n_ids = 0;
        uint8_t back[1024];
        size_t m = 0;
        int ok = spm_encode(s, (const uint8_t *)text, n, &ids, &n_ids, err, sizeof err) == 0;
        for (size_t i = 0; i < n_ids && ok; i++) {
            const int got = spm_token_bytes(s, ids[i], back + m, sizeof back - m);
            ok = got > 0;
            m += (size_t)got;
        }
        round_trips += ok && m == n + 1 && back[0] == ' ' && !memcmp(back + 1, text, n);
        free(ids);
    }
    CHECK(round_trips == 300, "%d of 300 texts spelled back", round_trips);
    printf("ok   300 random texts' ids spell a space and their bytes back\n");
    spm_free(s);
    check_gguf_keys();
    printf("%d failures\n", failures);
    return failures != 0;
}
