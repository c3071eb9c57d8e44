// SentencePiece (the tokenizer of Llama 2 and TinyLlama vocabularies) on any bytes, through one of
// two vocabularies chosen by the input's first byte: (0) the 256 byte tokens and a few pieces, a
// space first; (1) no byte tokens above 0x7F, user-defined tokens, no space first. Any bytes are
// taken (ill-formed UTF-8 as llama.cpp reads it): every id is in range, (0) at most three a byte
// and three more (a space is three bytes once escaped); a refusal is one line, and only in (1) where
// a byte above 0x7F has no token. On well-formed
// UTF-8 without a ▁ of its own the ids spell the text back: (0) a space and the text, exactly;
// (1) the text, spaces aside (one comes before the text after each user-defined token).
#include "fuzz.h"
#include "spm.h"
#include "utf8.h"

#define MARK "\xe2\x96\x81"

static Spm *make(int which) {
    static char names[256][8];
    static const char *const pieces[] = {MARK, MARK "t", "th", "the", MARK "the", "in", "ing", MARK MARK, "\xe4\xb8\xad",
                                         "12", "123", "<t>", "<think>", "x<t", "a"};
    static const float scores[] = {-1, -2, -3, -4, -5, -6, -7, -1e9f, -8, -9, -10, 0, 0, 0, -11};
    enum { N_PIECES = sizeof pieces / sizeof pieces[0] };
    TokBytes tokens[3 + 256 + N_PIECES];
    float sc[3 + 256 + N_PIECES];
    int32_t types[3 + 256 + N_PIECES];
    int n = 0;
    static const char *const specials[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++, n++) tokens[n] = (TokBytes){(const uint8_t *)specials[i], strlen(specials[i])}, sc[n] = 0, types[n] = i ? SPM_CONTROL : SPM_UNKNOWN;
    for (int b = 0; b < 256; b++) {
        if (which == 1 && b >= 0x80) continue;
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        tokens[n] = (TokBytes){(const uint8_t *)names[b], strlen(names[b])}, sc[n] = 0, types[n++] = SPM_BYTE;
    }
    for (int i = 0; i < N_PIECES; i++, n++) {
        tokens[n] = (TokBytes){(const uint8_t *)pieces[i], strlen(pieces[i])}, sc[n] = scores[i];
        types[n] = which == 1 && pieces[i][0] == '<' ? SPM_USER_DEFINED : which == 1 && i == 13 ? SPM_USER_DEFINED : SPM_NORMAL;
    }
    char err[256];
    Spm *s = spm_create(tokens, sc, types, n, which == 0, err, sizeof err);
    FUZZ_REQUIRE(s != NULL);
    return s;
}

// The bytes of t without its spaces, into out; their count.
static size_t without_spaces(const uint8_t *t, size_t n, uint8_t *out) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i] != ' ') out[m++] = t[i];
    return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Spm *spm[2];
    if (!spm[0]) spm[0] = make(0), spm[1] = make(1);
    if (size < 1 || size > 1 << 16) return 0;
    const int which = data[0] % 2;
    const Spm *s = spm[which];
    const uint8_t *text = data + 1;
    const size_t n = size - 1;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char err[256];
    int valid = 1, high = 0;
    for (size_t i = 0; i < n && valid;) {
        const int len = utf8_char_len(text + i, n - i);
        valid = len > 0 && !(len == 3 && !memcmp(text + i, MARK, 3));
        i += len > 0 ? (size_t)len : 1;
    }
    for (size_t i = 0; i < n; i++) high |= text[i] >= 0x80;
    if (spm_encode(s, text, n, &ids, &n_ids, err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        FUZZ_REQUIRE(which == 1 && high && strstr(err, "has no token"));
        FUZZ_REQUIRE(n_ids == 0);
    } else {
        FUZZ_REQUIRE(which == 1 || n_ids <= 3 * n + 3);
        uint8_t *back = malloc(3 * n + 3 * n_ids + 8), *a = malloc(n + 1), *b = malloc(3 * n + 3 * n_ids + 8);
        FUZZ_REQUIRE(back && a && b);
        size_t m = 0;
        for (size_t i = 0; i < n_ids; i++) {
            FUZZ_REQUIRE(ids[i] >= 0 && ids[i] < spm_size(s));
            const int w = spm_token_bytes(s, ids[i], back + m, 3 * n + 3 * n_ids + 8 - m);
            FUZZ_REQUIRE(w >= 0);
            m += (size_t)w;
        }
        if (valid && which == 0) FUZZ_REQUIRE(m == n + (n > 0) && (n == 0 || (back[0] == ' ' && memcmp(back + 1, text, n) == 0)));
        if (valid && which == 1) {
            const size_t ka = without_spaces(text, n, a), kb = without_spaces(back, m, b);
            FUZZ_REQUIRE(ka == kb && memcmp(a, b, ka) == 0);
        }
        free(back), free(a), free(b);
    }
    free(ids);
    return 0;
}
