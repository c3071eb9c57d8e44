// Grid patterns (micro sweep --grid) through the expander: any string is one message or a list of
// specs within the limit, each no longer than the pattern, none holding a brace or a '|' that came
// from a group, and the count is the product of the groups' alternatives.
#include "fuzz.h"
#include "grid.h"

#define FUZZ_GRID_MAX 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    char *pattern = malloc(size + 1);
    if (!pattern) return 0;
    memcpy(pattern, data, size);
    pattern[size] = '\0';
    const size_t len = strlen(pattern);
    SpecList l = {calloc(FUZZ_GRID_MAX, sizeof(char *)), 0, FUZZ_GRID_MAX};
    FUZZ_REQUIRE(l.specs);
    char err[512];
    if (grid_expand(pattern, &l, err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        FUZZ_REQUIRE(l.n == 0);
        FUZZ_REQUIRE(strlen(err) < 300); // an excerpt of the pattern, never the whole of it
    } else {
        FUZZ_REQUIRE(l.n >= 1 && l.n <= FUZZ_GRID_MAX);
        // The count: the product of each group's alternatives ('|' inside a group, plus one).
        long long want = 1;
        int in_group = 0, alts = 0;
        for (size_t i = 0; i < len; i++) {
            if (pattern[i] == '{') in_group = 1, alts = 1;
            else if (in_group && pattern[i] == '|') alts++;
            else if (in_group && pattern[i] == '}') in_group = 0, want *= alts;
        }
        FUZZ_REQUIRE(want == l.n);
        for (int i = 0; i < l.n; i++) {
            FUZZ_REQUIRE(strlen(l.specs[i]) <= len);
            if (strchr(pattern, '{')) FUZZ_REQUIRE(!strchr(l.specs[i], '{'));
        }
    }
    grid_free(&l);
    free(pattern);
    return 0;
}
