// Byte-level BPE (the tokenizer of the models users bring) on any bytes, through each pre-tokenizer
// (chosen by the input's first byte) and a vocabulary of the 256 byte tokens and a few merges: an
// invalid text is one line, a valid one gives ids that spell its bytes back.
#include "bpe.h"
#include "fuzz.h"
#include "utf8.h"

static int stand_in_utf8(int b, char *out) {
    const int cp = b <= 32 ? 256 + b : b >= 127 && b <= 160 ? 256 + 33 + b - 127 : b == 173 ? 256 + 67 : b;
    if (cp < 0x80) return out[0] = (char)cp, 1;
    out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Bpe *bpe[4];
    static char texts[256][4];
    if (!bpe[0]) {
        static const char *const merged[] = {"th", "the", "\304\240the", "12", "123", "in", "ing"};
        static const char *const merges[] = {"t h", "th e", "\304\240 the", "1 2", "12 3", "i n", "in g"};
        TokBytes tokens[256 + 7], m[7];
        for (int b = 0; b < 256; b++) tokens[b] = (TokBytes){(const uint8_t *)texts[b], (size_t)stand_in_utf8(b, texts[b])};
        for (int i = 0; i < 7; i++) {
            tokens[256 + i] = (TokBytes){(const uint8_t *)merged[i], strlen(merged[i])};
            m[i] = (TokBytes){(const uint8_t *)merges[i], strlen(merges[i])};
        }
        int n;
        const char *const *names = bpe_pre_tokenizers(&n);
        char err[256];
        for (int i = 0; i < 4 && i < n; i++) FUZZ_REQUIRE((bpe[i] = bpe_create(tokens, 256 + 7, m, 7, NULL, 0, names[i], err, sizeof err)));
    }
    if (size < 1 || size > 1 << 16) return 0;
    const Bpe *b = bpe[data[0] % 4];
    const uint8_t *text = data + 1;
    const size_t n = size - 1;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char err[256];
    int valid = 1;
    for (size_t i = 0; i < n && valid;) {
        const int len = utf8_char_len(text + i, n - i);
        valid = len > 0;
        i += (size_t)len;
    }
    if (bpe_encode(b, text, n, &ids, &n_ids, err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        FUZZ_REQUIRE(!valid);
    } else {
        FUZZ_REQUIRE(valid && n_ids <= n);
        uint8_t *back = malloc(n + 1);
        size_t m = 0;
        for (size_t i = 0; i < n_ids; i++) {
            const int w = bpe_token_bytes(b, ids[i], back + m, n + 1 - m);
            FUZZ_REQUIRE(w > 0);
            m += (size_t)w;
        }
        FUZZ_REQUIRE(m == n && memcmp(back, text, n) == 0);
        free(back);
    }
    free(ids);
    return 0;
}
