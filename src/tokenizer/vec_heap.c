#include "vec_heap.h"

#include <stdlib.h>
#include <string.h>

void *vec_push(Vec *v) {
    if (v->failed) return NULL;
    if (v->n == v->cap) {
        const size_t cap = v->cap ? 2 * v->cap : 64;
        void *grown = realloc(v->at, cap * v->size);
        if (!grown) {
            v->failed = 1;
            return NULL;
        }
        v->at = grown, v->cap = cap;
    }
    return (char *)v->at + v->n++ * v->size;
}

void vec_free(Vec *v) {
    free(v->at);
    v->at = NULL, v->n = v->cap = 0;
}

static void *at(const Vec *v, size_t i) { return (char *)v->at + i * v->size; }

static void swap(Vec *v, size_t i, size_t j) {
    unsigned char t[HEAP_MAX_ELEMENT];
    memcpy(t, at(v, i), v->size);
    memcpy(at(v, i), at(v, j), v->size);
    memcpy(at(v, j), t, v->size);
}

void heap_push(Vec *v, const void *element, HeapBefore before) {
    void *slot = vec_push(v);
    if (!slot) return;
    memcpy(slot, element, v->size);
    for (size_t i = v->n - 1; i > 0;) {
        const size_t up = (i - 1) / 2;
        if (!before(at(v, i), at(v, up))) break;
        swap(v, i, up);
        i = up;
    }
}

void heap_pop(Vec *v, void *out, HeapBefore before) {
    memcpy(out, at(v, 0), v->size);
    if (--v->n > 0) memcpy(at(v, 0), at(v, v->n), v->size);
    for (size_t i = 0, n = v->n;;) {
        size_t m = i;
        const size_t l = 2 * i + 1, r = l + 1;
        if (l < n && before(at(v, l), at(v, m))) m = l;
        if (r < n && before(at(v, r), at(v, m))) m = r;
        if (m == i) break;
        swap(v, i, m);
        i = m;
    }
}
