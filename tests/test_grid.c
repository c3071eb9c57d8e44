// The grid expander (micro sweep --grid) against a reference written the obvious way (recursion
// on the first brace, the separators tidied by repeated search), on every short pattern drawn at
// random from the characters that matter; and
// the patterns that once crashed or took minutes: long runs of braces, many alternatives.
#include <stdlib.h>

#include "check.h"
#include "grid.h"

// The separators an empty choice leaves, tidied the slow way: ":," and ",," lose their comma until
// none is left, then every trailing ',' or ':' goes.
static char *tidied(char *one) {
    char *p;
    while ((p = strstr(one, ":,")) || (p = strstr(one, ",,"))) memmove(p + 1, p + 2, strlen(p + 2) + 1);
    size_t k = strlen(one);
    while (k && (one[k - 1] == ',' || one[k - 1] == ':')) one[--k] = '\0';
    return one;
}

// The reference: recursion on the first brace, each expansion tidied once made (the patterns
// without braces are left as they are).
static int reference(const char *pattern, char **out, int *n, int max, int top) {
    const char *open = strchr(pattern, '{');
    if (!open) {
        if (*n == max) return -1;
        out[(*n)++] = top ? strdup(pattern) : tidied(strdup(pattern));
        return 0;
    }
    const char *close = strchr(open, '}'), *nested = strchr(open + 1, '{');
    if (!close || (nested && nested < close)) return -1;
    const size_t head = (size_t)(open - pattern), len = strlen(pattern);
    char *one = malloc(len + 1);
    int rc = 0;
    for (const char *alt = open + 1; !rc;) {
        const char *end = alt;
        while (end < close && *end != '|') end++;
        snprintf(one, len + 1, "%.*s%.*s%s", (int)head, pattern, (int)(end - alt), alt, close + 1);
        rc = reference(one, out, n, max, 0);
        if (end == close) break;
        alt = end + 1;
    }
    free(one);
    return rc;
}

static void compare_random(void) {
    static const char alphabet[] = "ab:,{}|";
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    char pattern[24], err[512];
    int compared = 0;
    for (int trial = 0; trial < 200000; trial++) {
        const int len = (int)(check_next(&rng) % 16);
        for (int i = 0; i < len; i++) pattern[i] = alphabet[check_next(&rng) % 7];
        pattern[len] = 0;
        char *want[64];
        int nw = 0;
        const int ref = reference(pattern, want, &nw, 64, 1);
        SpecList got = {calloc(64, sizeof(char *)), 0, 64};
        const int rc = grid_expand(pattern, &got, err, sizeof err);
        if (ref == 0) {
            CHECK(rc == 0 && got.n == nw, "'%s': %d specs (rc %d: %s), the reference %d", pattern, got.n, rc, err, nw);
            for (int i = 0; rc == 0 && i < nw && i < got.n; i++)
                CHECK(!strcmp(got.specs[i], want[i]), "'%s' #%d: '%s', the reference '%s'", pattern, i, got.specs[i], want[i]);
            compared++;
        } else {
            // The reference stops at the first unbalanced brace it reaches, or at the limit; the
            // expander refuses the same pattern whole, before making any spec.
            CHECK(rc != 0 && got.n == 0, "'%s': accepted (%d specs), the reference refuses it", pattern, got.n);
        }
        for (int i = 0; i < nw; i++) free(want[i]);
        grid_free(&got);
    }
    CHECK(compared > 10000, "only %d patterns compared", compared);
}

// A pattern that fits on a command line: one message, no crash, within the limit of specs.
static void bombs(void) {
    char err[512];
    const size_t big = 120000;
    char *p = malloc(big * 3 + 8);
    // fp16{}{}{}...: one spec, fp16.
    strcpy(p, "fp16");
    for (size_t i = 0; i < 43000; i++) strcat(p + 4 + 2 * i, "{}");
    SpecList l = {calloc(8, sizeof(char *)), 0, 8};
    CHECK(grid_expand(p, &l, err, sizeof err) == 0 && l.n == 1 && !strcmp(l.specs[0], "fp16"), "fp16{}x43000: %d specs", l.n);
    grid_free(&l);
    // {f}{f}...: one spec of 20,000 f's.
    size_t w = 0;
    for (int i = 0; i < 20000; i++) memcpy(p + w, "{f}", 3), w += 3;
    p[w] = 0;
    l = (SpecList){calloc(8, sizeof(char *)), 0, 8};
    CHECK(grid_expand(p, &l, err, sizeof err) == 0 && l.n == 1 && strlen(l.specs[0]) == 20000, "{f}x20000");
    grid_free(&l);
    // {a|b}x13: 8,192 specs, refused before any is made, the message short.
    w = 0;
    for (int i = 0; i < 13; i++) memcpy(p + w, "{a|b}", 5), w += 5;
    p[w] = 0;
    l = (SpecList){calloc(4096, sizeof(char *)), 0, 4096};
    CHECK(grid_expand(p, &l, err, sizeof err) != 0 && l.n == 0 && strstr(err, "more than 4096"), "2^13: %s", err);
    grid_free(&l);
    // An unclosed brace at the end of 100,000 characters: the message quotes an excerpt.
    memset(p, 'x', big);
    p[big] = '{', p[big + 1] = 0;
    l = (SpecList){calloc(8, sizeof(char *)), 0, 8};
    CHECK(grid_expand(p, &l, err, sizeof err) != 0 && strlen(err) < 300 && strstr(err, "needs a '}'"), "unclosed: %.80s", err);
    grid_free(&l);
    // 400 alternatives and 110,000 commas: 400 specs, each tidied.
    w = 0;
    memcpy(p, "int:bits={", 10), w = 10;
    for (int i = 0; i < 400; i++) p[w++] = i ? '|' : '2', p[w++] = i ? '2' : '|';
    p[w++] = '}';
    memset(p + w, ',', 110000), w += 110000;
    p[w] = 0;
    l = (SpecList){calloc(4096, sizeof(char *)), 0, 4096};
    CHECK(grid_expand(p, &l, err, sizeof err) == 0 && l.n == 401, "commas: %d specs (%s)", l.n, err);
    for (int i = 0; i < l.n; i++) CHECK(strlen(l.specs[i]) <= 11, "commas: spec %d is %zu long", i, strlen(l.specs[i]));
    grid_free(&l);
    free(p);
}

int main(void) {
    compare_random();
    bombs();
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures != 0;
}
