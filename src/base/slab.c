// See slab.h. A chunk is 2 MiB, aligned to 2 MiB, so an object's chunk is its address rounded down;
// the chunk's header sits in its first line(s), its objects after it, each `size` bytes (a multiple
// of the cache line). Freed objects form a list inside the chunk (each holds the next), taken again
// before the chunk's untouched tail.
#include "slab.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "calloc_lines.h"

#if defined(__SANITIZE_ADDRESS__)
#define SLAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_ASAN 1
#endif
#endif
#ifdef SLAB_ASAN
// A freed object (past its list link) and a chunk's untouched tail are poisoned, so that the
// sanitizer builds still catch a block read after its sequence let it go.
#include <sanitizer/asan_interface.h>
#define SLAB_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define SLAB_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define SLAB_POISON(p, n) ((void)(p), (void)(n))
#define SLAB_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define SLAB_CHUNK ((size_t)2 << 20)
#define SLAB_LINE ((size_t)64)

typedef struct Chunk {
    struct Chunk *prev, *next; // in its size's list of chunks with room
    void *freed;               // the first freed object, NULL when none
    size_t list;               // its size's list (lists[list]: a list with chunks is never reused)
    size_t size;               // its objects' bytes
    size_t untouched;          // where the never-used tail starts
    size_t live;               // objects handed out
    int has_room;              // in the list
} Chunk;

#define SLAB_FIRST ((sizeof(Chunk) + SLAB_LINE - 1) / SLAB_LINE * SLAB_LINE)

// The chunks with room, one list per object size in use (sizes with no chunk are reused).
typedef struct {
    size_t size;
    Chunk *room;
    size_t chunks;
} SizeList;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static SizeList *lists;
static size_t n_lists;
// One emptied chunk kept for the next chunk of any size: a pool whose last block of a size comes
// and goes (a spec's check, a sequence crossing a block boundary alone) would otherwise map and
// fault in a fresh 2 MiB each time.
static Chunk *spare;

static size_t round_line(size_t bytes) { return (bytes + SLAB_LINE - 1) / SLAB_LINE * SLAB_LINE; }

// The list for `size`: its own, else one no chunk uses any more, else a new one (NULL: no memory).
static SizeList *list_for(size_t size) {
    SizeList *idle = NULL;
    for (size_t i = 0; i < n_lists; i++) {
        if (lists[i].size == size) return &lists[i];
        if (!lists[i].chunks && !idle) idle = &lists[i];
    }
    if (!idle) {
        SizeList *grown = realloc(lists, (n_lists + 1) * sizeof *lists);
        if (!grown) return NULL;
        lists = grown;
        idle = &lists[n_lists++];
    }
    *idle = (SizeList){.size = size};
    return idle;
}

static void unlink_room(SizeList *l, Chunk *c) {
    if (c->prev) c->prev->next = c->next;
    else l->room = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->has_room = 0;
}

static void link_room(SizeList *l, Chunk *c) {
    c->prev = NULL;
    c->next = l->room;
    if (l->room) l->room->prev = c;
    l->room = c;
    c->has_room = 1;
}

// 2 MiB on a 2 MiB boundary: the spare, else fresh pages (twice that mapped, the edges unmapped).
static Chunk *chunk_new(SizeList *l, size_t list) {
    char *a = (char *)spare;
    spare = NULL;
    if (!a) {
        char *m = mmap(NULL, 2 * SLAB_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        a = (char *)(((uintptr_t)m + SLAB_CHUNK - 1) & ~(uintptr_t)(SLAB_CHUNK - 1));
        if (a > m) munmap(m, (size_t)(a - m));
        if (a + SLAB_CHUNK < m + 2 * SLAB_CHUNK) munmap(a + SLAB_CHUNK, (size_t)(m + 2 * SLAB_CHUNK - (a + SLAB_CHUNK)));
#ifdef MADV_HUGEPAGE
        (void)madvise(a, SLAB_CHUNK, MADV_HUGEPAGE); // a hint: refused, the chunk is in 4 KiB pages
#endif
    }
    Chunk *c = (Chunk *)(void *)a;
    *c = (Chunk){.list = list, .size = l->size, .untouched = SLAB_FIRST};
    SLAB_POISON(a + SLAB_FIRST, SLAB_CHUNK - SLAB_FIRST);
    l->chunks++;
    link_room(l, c);
    return c;
}

void *slab_calloc(size_t bytes) {
    if (bytes == 0) bytes = 1;
    const size_t size = round_line(bytes);
    if (bytes > SLAB_MAX_OBJECT) return calloc_lines(1, size);
    pthread_mutex_lock(&lock);
    SizeList *l = list_for(size);
    Chunk *c = l ? l->room : NULL;
    if (l && !c) c = chunk_new(l, (size_t)(l - lists));
    if (!c) {
        pthread_mutex_unlock(&lock);
        return NULL;
    }
    char *p;
    if (c->freed) {
        p = c->freed;
        SLAB_UNPOISON(p, size);
        memcpy(&c->freed, p, sizeof c->freed);
    } else {
        p = (char *)c + c->untouched;
        SLAB_UNPOISON(p, size);
        c->untouched += size;
    }
    c->live++;
    if (!c->freed && c->untouched + size > SLAB_CHUNK) unlink_room(l, c);
    pthread_mutex_unlock(&lock);
    memset(p, 0, size);
    return p;
}

void slab_free(void *p, size_t bytes) {
    if (!p) return;
    if (bytes > SLAB_MAX_OBJECT) {
        free(p);
        return;
    }
    Chunk *c = (Chunk *)((uintptr_t)p & ~(uintptr_t)(SLAB_CHUNK - 1));
    pthread_mutex_lock(&lock);
    SizeList *l = &lists[c->list];
    memcpy(p, &c->freed, sizeof c->freed);
    c->freed = p;
    SLAB_POISON((char *)p + sizeof c->freed, c->size - sizeof c->freed);
    if (--c->live == 0) { // the chunk goes back whole: kept as the spare, or to the system
        if (c->has_room) unlink_room(l, c);
        l->chunks--;
        if (!spare) {
            spare = c;
        } else {
            SLAB_UNPOISON(c, SLAB_CHUNK);
            munmap(c, SLAB_CHUNK);
        }
    } else if (!c->has_room) {
        link_room(l, c);
    }
    pthread_mutex_unlock(&lock);
}
