#include "grid.h"
#include "msgtext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t start, len;
} Span;

// A comma after ':' or ',' is dropped, and then every trailing ',' or ':': the separators an
// empty choice leaves. One pass, in place.
static void tidy(char *s) {
    size_t w = 0;
    for (size_t r = 0; s[r]; r++) {
        if (s[r] == ',' && w && (s[w - 1] == ':' || s[w - 1] == ',')) continue;
        s[w++] = s[r];
    }
    while (w && (s[w - 1] == ',' || s[w - 1] == ':')) w--;
    s[w] = 0;
}

int grid_expand(const char *pattern, SpecList *out, char *err, size_t errlen) {
    const size_t len = strlen(pattern);
    char shown[MSG_TEXT];
    // The pattern as literal pieces and groups: piece i comes before group i; the last piece ends it.
    // A group's alternatives are alts[first[g]] .. alts[first[g + 1] - 1].
    Span *pieces = malloc(sizeof *pieces * (len / 2 + 2)), *alts = malloc(sizeof *alts * (len + 1));
    size_t *first = malloc(sizeof *first * (len / 2 + 2)), *pick = calloc(len / 2 + 2, sizeof *pick);
    char *one = malloc(len + 1);
    int status = -1;
    if (!pieces || !alts || !first || !pick || !one) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    size_t groups = 0, n_alts = 0, at = 0;
    for (;;) {
        const char *open = strchr(pattern + at, '{');
        const size_t end = open ? (size_t)(open - pattern) : len;
        pieces[groups] = (Span){at, end - at};
        if (!open) break;
        first[groups] = n_alts;
        size_t a = end + 1, i = a;
        for (; i < len && pattern[i] != '}' && pattern[i] != '{'; i++)
            if (pattern[i] == '|') alts[n_alts++] = (Span){a, i - a}, a = i + 1;
        if (i == len || pattern[i] == '{') {
            snprintf(err, errlen, "grid '%s': every '{' needs a '}' (no nesting)", msg_text(pattern, shown, sizeof shown));
            goto done;
        }
        alts[n_alts++] = (Span){a, i - a};
        groups++;
        at = i + 1;
    }
    first[groups] = n_alts;
    // How many specs, counted before any is made (stopping as soon as the limit is passed).
    long long count = 1;
    for (size_t g = 0; g < groups && count <= out->max; g++) count *= (long long)(first[g + 1] - first[g]);
    if (count > out->max - out->n) {
        snprintf(err, errlen, "the grid makes more than %d specs", out->max);
        goto done;
    }
    const int before = out->n;
    for (long long k = 0; k < count; k++) {
        size_t w = 0;
        for (size_t g = 0; g <= groups; g++) {
            memcpy(one + w, pattern + pieces[g].start, pieces[g].len), w += pieces[g].len;
            if (g == groups) break;
            const Span alt = alts[first[g] + pick[g]];
            memcpy(one + w, pattern + alt.start, alt.len), w += alt.len;
        }
        one[w] = 0;
        if (groups) tidy(one);
        if (!(out->specs[out->n] = strdup(one))) {
            while (out->n > before) free(out->specs[--out->n]);
            snprintf(err, errlen, "out of memory");
            goto done;
        }
        out->n++;
        // The next choice: the last group turns fastest.
        for (size_t g = groups; g-- > 0;) {
            if (++pick[g] < first[g + 1] - first[g]) break;
            pick[g] = 0;
        }
    }
    status = 0;
done:
    free(pieces), free(alts), free(first), free(pick), free(one);
    return status;
}

void grid_free(SpecList *l) {
    for (int i = 0; i < l->n; i++) free(l->specs[i]);
    free(l->specs);
    l->specs = NULL;
    l->n = 0;
}
