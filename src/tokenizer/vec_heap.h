// The tokenizers' merge loops' containers (bpe.c, spm.c): growable arrays whose failed growth is
// remembered and reported once at the end, and a binary heap kept in one, ordered by the caller's
// `before` (BPE: the lowest merge rank first; SentencePiece: the highest score first; the leftmost
// pair first among equals, so that both tokenizers merge as llama.cpp does).
#ifndef MICRO_VEC_HEAP_H
#define MICRO_VEC_HEAP_H

#include <stddef.h>

typedef struct {
    void *at;
    size_t n, cap, size; // elements held, room, bytes an element
    int failed;          // a growth failed: every push since returned NULL
} Vec;

#define VEC_OF(type) ((Vec){NULL, 0, 0, sizeof(type), 0})

// Room for one more element at the end (its bytes the caller's to write), or NULL once out of memory.
void *vec_push(Vec *v);
void vec_free(Vec *v);

// 1 when a comes out of the heap before b.
typedef int (*HeapBefore)(const void *a, const void *b);
// Elements of at most HEAP_MAX_ELEMENT bytes.
#define HEAP_MAX_ELEMENT 64
void heap_push(Vec *v, const void *element, HeapBefore before);
// Takes the first element out into *out (v->n > 0).
void heap_pop(Vec *v, void *out, HeapBefore before);

#endif
