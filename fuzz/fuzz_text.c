// The text cut: the first line is a FILE[:CHARS] argument, the rest the text's bytes. Whatever the
// input, the cut is valid UTF-8, a prefix of the text, never splits a character and keeps at most
// CHARS characters; the streaming validator used by sampling agrees with the batch one; and a
// message echoing the text stays one line of whole characters.
#include <limits.h>

#include "fuzz.h"
#include "msgtext.h"
#include "text.h"

// The sampler's byte-by-byte rule: 1 when the whole buffer passes it and ends between characters.
static int streaming_valid(const uint8_t *s, size_t n) {
    Utf8State u = {0, 0x80, 0xBF};
    for (size_t i = 0; i < n; i++) {
        if (!utf8_byte_allowed(&u, s[i])) return 0;
        utf8_push(&u, s[i]);
    }
    return u.owed == 0;
}

static void check_msg_text(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1), buf[64], big[MSG_TEXT];
    if (!s) return;
    memcpy(s, data, size);
    s[size] = '\0';
    for (size_t n = 16; n <= sizeof buf; n += 16) {
        msg_text(s, buf, n);
        size_t len = strlen(buf);
        FUZZ_REQUIRE(len < n);
        FUZZ_REQUIRE(utf8_first_invalid((const uint8_t *)buf, len) < 0);
        for (size_t i = 0; i < len; i++) FUZZ_REQUIRE((unsigned char)buf[i] >= 0x20 && buf[i] != 0x7f);
    }
    // Text that fits comes back unchanged when it has nothing to escape.
    msg_text(s, big, sizeof big);
    size_t n = strlen(s);
    int plain = utf8_first_invalid((const uint8_t *)s, n) < 0;
    for (size_t i = 0; i < n && plain; i++) plain = (unsigned char)s[i] >= 0x20 && s[i] != 0x7f;
    if (plain && n < sizeof big) FUZZ_REQUIRE(strcmp(s, big) == 0);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size);
    size_t arg_len = nl ? (size_t)(nl - data) : size;
    const uint8_t *bytes = nl ? nl + 1 : data + size;
    size_t n = size - (size_t)(bytes - data);
    check_msg_text(data, size);

    char *arg = malloc(arg_len + 1), err[512];
    if (!arg) return 0;
    memcpy(arg, data, arg_len);
    arg[arg_len] = '\0';
    Text t;
    memset(&t, 0, sizeof t);
    long limit;
    if (text_split_arg(arg, t.path, sizeof t.path, &limit, err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        limit = 1 + (long)(size % 7); // still cut the bytes
        snprintf(t.path, sizeof t.path, "fuzz.txt");
    } else {
        FUZZ_REQUIRE(limit == -1 || limit > 0);
        FUZZ_REQUIRE(strlen(t.path) > 0 && strlen(t.path) <= arg_len);
    }
    free(arg);

    long bad = utf8_first_invalid(bytes, n);
    FUZZ_REQUIRE(bad >= -1 && bad < (long)n);
    FUZZ_REQUIRE((bad < 0) == streaming_valid(bytes, n));
    long found;
    size_t keep = utf8_prefix_bytes(bytes, n, limit > 0 ? limit : LONG_MAX, &found);
    FUZZ_REQUIRE(keep <= n);

    int max_tokens = 1 + (int)(size % 64) * 8;
    if (text_from_bytes(&t, bytes, n, limit, max_tokens, err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        FUZZ_REQUIRE(t.tokens == NULL && t.bytes == NULL);
        return 0;
    }
    FUZZ_REQUIRE(bad < 0);
    FUZZ_REQUIRE(t.tokens[0] == 1 && t.n_tokens <= max_tokens);
    for (int i = 0; i < t.n_tokens; i++) FUZZ_REQUIRE(t.tokens[i] == t.bytes[i]); // micro's byte vocabulary
    if (n > 0 && bytes[0] == 1) { // the corpus's form: documents each after a 0x01, the tokens the bytes
        const size_t cut = (size_t)t.n_tokens;
        int documents = 0;
        for (size_t i = 0; i < cut; i++) documents += t.tokens[i] == 1;
        FUZZ_REQUIRE(cut >= 2 && cut <= n && memcmp(t.bytes, bytes, cut) == 0 && t.documents == documents);
        FUZZ_REQUIRE(t.chars > 0 && (limit <= 0 || t.chars <= limit));
        if (cut < n) FUZZ_REQUIRE(limit > 0 && t.chars == limit);
        text_free(&t);
        return 0;
    }
    size_t cut = (size_t)t.n_tokens - 1;
    FUZZ_REQUIRE(t.documents == 1);
    FUZZ_REQUIRE(cut > 0 && cut <= n && memcmp(t.bytes + 1, bytes, cut) == 0);
    FUZZ_REQUIRE(utf8_first_invalid(t.bytes + 1, cut) < 0);
    FUZZ_REQUIRE(memchr(t.bytes + 1, 1, cut) == NULL);
    FUZZ_REQUIRE(t.chars > 0 && (limit <= 0 || t.chars <= limit));
    // A cut shorter than the text stopped because it had its CHARS characters.
    if (cut < n) FUZZ_REQUIRE(limit > 0 && t.chars == limit);
    text_free(&t);
    return 0;
}
