// Byte-level BPE (src/tokenizer/bpe.c) on a vocabulary written here, against results worked out by
// hand: the pre-tokenizers' pieces (a merge never crosses a piece's edge: Llama 3's digits in threes,
// Qwen's one by one, SmolLM's digits alone before GPT-2's expression), merges by rank and not by
// order of appearance, the byte fallback of a symbol that is no token, every byte's stand-in, and
// any text's ids spelling its bytes back (the real vocabularies: scripts/tokenizer-check, against
// the npm packages' implementation).
#include <stdlib.h>

#include "bpe.h"
#include "check.h"

// GPT-2's stand-in of byte b, as UTF-8 into out; its length.
static int stand_in_utf8(int b, char *out) {
    const int cp = b <= 32 ? 256 + b : b >= 127 && b <= 160 ? 256 + 33 + b - 127 : b == 173 ? 256 + 67 : b;
    if (cp < 0x80) return out[0] = (char)cp, 1;
    out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static char texts[256 + 16][16];

// 256 byte tokens (id = byte), then the merged tokens below (ids 256...).
static Bpe *make_with(const char *pre, const char *const *merged, int n_merged, const char *const *merges, int n_merges,
                     const int32_t *user, int n_user) {
    TokBytes tokens[256 + 16], m[16];
    for (int b = 0; b < 256; b++) {
        const int n = stand_in_utf8(b, texts[b]);
        tokens[b] = (TokBytes){(const uint8_t *)texts[b], (size_t)n};
    }
    for (int i = 0; i < n_merged; i++) tokens[256 + i] = (TokBytes){(const uint8_t *)merged[i], strlen(merged[i])};
    for (int i = 0; i < n_merges; i++) m[i] = (TokBytes){(const uint8_t *)merges[i], strlen(merges[i])};
    char err[256];
    Bpe *b = bpe_create(tokens, 256 + n_merged, m, n_merges, user, n_user, pre, err, sizeof err);
    CHECK(b != NULL, "%s: %s", pre, err);
    return b;
}

static Bpe *make(const char *pre, const char *const *merged, int n_merged, const char *const *merges, int n_merges) {
    return make_with(pre, merged, n_merged, merges, n_merges, NULL, 0);
}

static int encode(const Bpe *b, const char *text, int32_t *out, int cap) {
    int32_t *ids = NULL;
    size_t n = 0;
    char err[256];
    CHECK(bpe_encode(b, (const uint8_t *)text, strlen(text), &ids, &n, err, sizeof err) == 0, "'%s': %s", text, err);
    for (size_t i = 0; i < n && (int)i < cap; i++) out[i] = ids[i];
    free(ids);
    return (int)n;
}

static void expect(const Bpe *b, const char *label, const char *text, const int32_t *want, int n_want) {
    int32_t got[64];
    const int n = encode(b, text, got, 64);
    int same = n == n_want;
    for (int i = 0; same && i < n; i++) same = got[i] == want[i];
    CHECK(same, "%s: '%s' gave %d ids (first %d), wanted %d (first %d)", label, text, n, n ? got[0] : -1, n_want, want[0]);
    if (same) printf("ok   %s\n", label);
}

int main(void) {
    // Digits: "1 2" -> 12 (256), "12 3" -> 123 (257), "3 4" -> 34 (258). A pre-tokenizer that keeps
    // 1234 one piece merges 12 then 123 (rank 1 before "3 4", rank 2), leaving 4.
    static const char *const digit_tokens[] = {"12", "123", "34"};
    static const char *const digit_merges[] = {"1 2", "12 3", "3 4"};
    Bpe *gpt2 = make("gpt2", digit_tokens, 3, digit_merges, 3);
    Bpe *llama3 = make("llama-bpe", digit_tokens, 3, digit_merges, 3);
    Bpe *qwen2 = make("qwen2", digit_tokens, 3, digit_merges, 3);
    Bpe *smollm = make("smollm", digit_tokens, 3, digit_merges, 3);
    expect(gpt2, "gpt2: 1234 one piece, merged by rank", "1234", (const int32_t[]){257, '4'}, 2);
    expect(llama3, "llama-bpe: digits in threes, 1234 -> 123|4", "1234", (const int32_t[]){257, '4'}, 2);
    expect(llama3, "llama-bpe: 12345 -> 123|45", "12345", (const int32_t[]){257, '4', '5'}, 3);
    expect(qwen2, "qwen2: each digit its own piece", "1234", (const int32_t[]){'1', '2', '3', '4'}, 4);
    expect(smollm, "smollm: each digit its own piece first", "1234", (const int32_t[]){'1', '2', '3', '4'}, 4);
    // Ranks, not order: "b c" (rank 0) before "a b" (rank 1) in "abc".
    static const char *const abc_tokens[] = {"bc", "ab", "abc"};
    static const char *const abc_merges[] = {"b c", "a b", "a bc"};
    Bpe *abc = make("gpt2", abc_tokens, 3, abc_merges, 3);
    expect(abc, "the lowest rank first: abc -> a|bc -> abc", "abc", (const int32_t[]){258}, 1);
    expect(abc, "ab alone", "ab", (const int32_t[]){257}, 1);
    // A space belongs to the word after it (" ?\p{L}+"), as its stand-in Ġ.
    static const char *const space_tokens[] = {"\304\240a"};
    static const char *const space_merges[] = {"\304\240 a"};
    Bpe *space = make("gpt2", space_tokens, 1, space_merges, 1);
    expect(space, "' a' is one token (Ġa)", "a a", (const int32_t[]){'a', 256}, 2);
    // A merge whose result is no token: its symbol falls back to the single-byte tokens of its text.
    static const char *const orphan_merges[] = {"x y"};
    Bpe *orphan = make("gpt2", NULL, 0, orphan_merges, 1);
    expect(orphan, "a merged symbol that is no token: byte fallback", "xy", (const int32_t[]){'x', 'y'}, 2);
    // User-defined tokens read whole wherever they occur, the longest first ("<t>" and "<th>" both
    // 256 + i): "a<th>b<t>" -> a, <th>, b, <t>; a token not listed as user-defined stays text.
    static const char *const user_tokens[] = {"<t>", "<th>", "<x>"};
    Bpe *user = make_with("gpt2", user_tokens, 3, NULL, 0, (const int32_t[]){256, 257}, 2);
    expect(user, "user-defined tokens cut out whole, the longest first", "a<th>b<t>",
           (const int32_t[]){'a', 257, 'b', 256}, 4);
    expect(user, "a token not user-defined is text", "<x>", (const int32_t[]){'<', 'x', '>'}, 3);
    bpe_free(user);
    // Every byte's stand-in, and any text's ids spelling it back.
    uint64_t rng = 5;
    int round_trips = 0;
    for (int rep = 0; rep < 300; rep++) {
        char text[200];
        int n = 0;
        while (n < 180) { // valid UTF-8 from ASCII, Latin-1, CJK and emoji
            const int kind = (int)(check_next(&rng) % 4);
            const uint32_t cp = kind == 0 ? 1 + (uint32_t)(check_next(&rng) % 127) : kind == 1 ? 0xa0 + (uint32_t)(check_next(&rng) % 0x60)
                                : kind == 2 ? 0x4e00 + (uint32_t)(check_next(&rng) % 0x500) : 0x1f600 + (uint32_t)(check_next(&rng) % 0x40);
            if (cp < 0x80) text[n++] = (char)cp;
            else if (cp < 0x800) text[n++] = (char)(0xc0 | cp >> 6), text[n++] = (char)(0x80 | (cp & 0x3f));
            else if (cp < 0x10000) text[n++] = (char)(0xe0 | cp >> 12), text[n++] = (char)(0x80 | (cp >> 6 & 0x3f)), text[n++] = (char)(0x80 | (cp & 0x3f));
            else text[n++] = (char)(0xf0 | cp >> 18), text[n++] = (char)(0x80 | (cp >> 12 & 0x3f)), text[n++] = (char)(0x80 | (cp >> 6 & 0x3f)), text[n++] = (char)(0x80 | (cp & 0x3f));
        }
        text[n] = 0;
        int32_t ids[256];
        const int k = encode(llama3, text, ids, 256);
        uint8_t back[256];
        int m = 0, ok = k <= 256;
        for (int i = 0; i < k && ok; i++) {
            const int w = bpe_token_bytes(llama3, ids[i], back + m, sizeof back - (size_t)m);
            ok = w > 0;
            m += w;
        }
        round_trips += ok && m == n && memcmp(back, text, (size_t)n) == 0;
    }
    CHECK(round_trips == 300, "%d of 300 texts spelled back", round_trips);
    printf("ok   300 random texts' ids spell their bytes back\n");
    char err[256];
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(bpe_encode(gpt2, (const uint8_t *)"a\xff", 2, &ids, &n, err, sizeof err) != 0 && strstr(err, "invalid UTF-8"),
          "invalid UTF-8 refused: %s", err);
    free(ids);
    CHECK(bpe_create(NULL, 0, NULL, 0, NULL, 0, "gpt5", err, sizeof err) == NULL && strstr(err, "pre-tokenizer 'gpt5'"),
          "an unknown pre-tokenizer named: %s", err);
    bpe_free(gpt2), bpe_free(llama3), bpe_free(qwen2), bpe_free(smollm), bpe_free(abc), bpe_free(space), bpe_free(orphan);
    printf("%d failures\n", failures);
    return failures != 0;
}
