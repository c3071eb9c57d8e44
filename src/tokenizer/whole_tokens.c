#include "whole_tokens.h"

#include <stdlib.h>

static int longer_first(const void *a, const void *b) {
    const WholeToken *x = a, *y = b;
    return x->len != y->len ? (x->len < y->len) - (x->len > y->len) : (x->id > y->id) - (x->id < y->id);
}

void whole_tokens_sort(WholeToken *order, int n, int32_t *ids) {
    qsort(order, (size_t)n, sizeof *order, longer_first);
    for (int i = 0; i < n; i++) ids[i] = order[i].id;
}
