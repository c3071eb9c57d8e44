// Texts: the UTF-8 validator, the character cut and the streaming state used by sampling, checked
// against each other and against facts of RFC 3629, exhaustively for every sequence of up to 3 bytes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "text.h"

static int failures = 0;
#define CHECK(cond, ...)                 \
    do {                                 \
        if (!(cond)) {                   \
            printf("FAIL " __VA_ARGS__); \
            printf("\n");                \
            failures++;                  \
        }                                \
    } while (0)

// A byte string is accepted by the streaming state iff every byte is allowed and nothing is owed at the end.
static int stream_valid(const uint8_t *s, size_t n) {
    Utf8State u = {0, 0x80, 0xBF};
    for (size_t i = 0; i < n; i++) {
        if (!utf8_byte_allowed(&u, s[i])) return 0;
        utf8_push(&u, s[i]);
    }
    return u.owed == 0;
}

int main(void) {
    // Known facts.
    CHECK(utf8_first_invalid((const uint8_t *)"abc", 3) == -1, "ascii");
    CHECK(utf8_first_invalid((const uint8_t *)"\xe4\xb8\xad", 3) == -1, "U+4E2D");
    CHECK(utf8_first_invalid((const uint8_t *)"ab\xc0\x80", 4) == 2, "overlong NUL at 2");
    CHECK(utf8_first_invalid((const uint8_t *)"\xed\xa0\x80", 3) == 0, "surrogate");
    CHECK(utf8_first_invalid((const uint8_t *)"\xf4\x90\x80\x80", 4) == 0, "above U+10FFFF");
    CHECK(utf8_first_invalid((const uint8_t *)"x\xe4\xb8", 3) == 1, "truncated at the end");
    CHECK(utf8_first_invalid((const uint8_t *)"\xf0\x9f\x98\x80", 4) == -1, "emoji");

    // The validator and the streaming state agree on every sequence of 1, 2 and 3 bytes.
    long disagree = 0, checked = 0;
    uint8_t s[4];
    for (int a = 0; a < 256; a++) {
        s[0] = (uint8_t)a;
        disagree += (utf8_first_invalid(s, 1) == -1) != stream_valid(s, 1);
        for (int b = 0; b < 256; b++) {
            s[1] = (uint8_t)b;
            disagree += (utf8_first_invalid(s, 2) == -1) != stream_valid(s, 2);
            for (int c = 0; c < 256; c++) {
                s[2] = (uint8_t)c;
                disagree += (utf8_first_invalid(s, 3) == -1) != stream_valid(s, 3);
                checked++;
            }
        }
    }
    // Four-byte sequences: every lead byte with every second byte and a few continuations.
    for (int a = 0xF0; a < 0x100; a++)
        for (int b = 0; b < 256; b++)
            for (int c = 0x7F; c <= 0xC0; c += 0x41)
                for (int d = 0x7F; d <= 0xC0; d += 0x01) {
                    s[0] = (uint8_t)a, s[1] = (uint8_t)b, s[2] = (uint8_t)c, s[3] = (uint8_t)d;
                    disagree += (utf8_first_invalid(s, 4) == -1) != stream_valid(s, 4);
                    checked++;
                }
    CHECK(disagree == 0, "validator and streaming state disagree on %ld of %ld sequences", disagree, checked);
    printf("utf8: %ld sequences checked, %ld disagreements\n", checked, disagree);

    // The cut counts characters and never splits one.
    const uint8_t *mixed = (const uint8_t *)"a\xe4\xb8\xad" "b\xf0\x9f\x98\x80" "c";
    size_t n = strlen((const char *)mixed);
    long found;
    CHECK(utf8_prefix_bytes(mixed, n, 1, &found) == 1 && found == 1, "cut 1");
    CHECK(utf8_prefix_bytes(mixed, n, 2, &found) == 4 && found == 2, "cut 2");
    CHECK(utf8_prefix_bytes(mixed, n, 4, &found) == 9 && found == 4, "cut 4");
    CHECK(utf8_prefix_bytes(mixed, n, 99, &found) == n && found == 5, "cut beyond the end");

    // text_load: the plates from the source tree, cut as the plate says.
    const char *root = getenv("MICRO_SOURCE_ROOT");
    if (root) {
        char arg[4096], err[512];
        Text t;
        snprintf(arg, sizeof arg, "%s/data/plates/zh.txt:500", root);
        int rc = text_load(&t, arg, 2048, err, sizeof err);
        CHECK(rc == 0, "zh plate: %s", err);
        if (rc == 0) {
            CHECK(t.chars == 500 && t.tokens[0] == MICRO_BOS && strcmp(t.name, "zh") == 0, "zh plate cut");
            CHECK(utf8_first_invalid(t.bytes + 1, (size_t)t.n_tokens - 1) == -1, "zh cut is valid UTF-8");
            printf("zh plate: 500 characters = %d tokens with BOS\n", t.n_tokens);
            text_free(&t);
        }
        snprintf(arg, sizeof arg, "%s/data/plates/en.txt:1500", root);
        rc = text_load(&t, arg, 2048, err, sizeof err);
        CHECK(rc == 0 && t.n_tokens == 1501, "en plate: %s", err);
        if (rc == 0) text_free(&t);
        snprintf(arg, sizeof arg, "%s/data/plates/en.txt", root);
        rc = text_load(&t, arg, 100, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "exceed the context of 100"), "too long: %s", err);
        snprintf(arg, sizeof arg, "%s/data/plates/en.txt:0", root);
        rc = text_load(&t, arg, 2048, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "positive"), "CHARS 0: %s", err);
    }
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
