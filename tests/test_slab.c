// The slab (src/base/slab.h) that holds a paged pool's block states: every object zeroed, on a cache
// line, apart from every other live one (each filled with its own bytes and read back after the
// others came and went), freed objects taken again, a chunk given back to the system when its last
// object goes (the process's resident memory falls), objects above SLAB_MAX_OBJECT from calloc_lines,
// and two threads taking and freeing at once.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "slab.h"

#include "check.h"

typedef struct {
    unsigned char *p;
    size_t bytes;
    unsigned char mark;
} Object;

static int zeroed(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static int marked(const Object *o) {
    for (size_t i = 0; i < o->bytes; i++)
        if (o->p[i] != o->mark) return 0;
    return 1;
}

// Takes an object for o (bytes already set): zeroed and aligned, then filled with its mark.
static int take(Object *o, unsigned char mark) {
    o->p = slab_calloc(o->bytes);
    o->mark = mark;
    if (!o->p) return 0;
    const int ok = (uintptr_t)o->p % 64 == 0 && zeroed(o->p, o->bytes);
    memset(o->p, mark, o->bytes);
    return ok;
}

// Resident bytes of this process (Linux /proc/self/statm), 0 when unknown.
static size_t resident(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, pages = 0;
    if (!f) return 0;
    if (fscanf(f, "%lu %lu", &size, &pages) != 2) pages = 0;
    fclose(f);
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

// n objects of `bytes`: taken, half freed in a scattered order and taken again, every survivor's
// bytes checked after each round, then all freed.
static void run_size(size_t bytes, int n) {
    Object *o = calloc((size_t)n, sizeof *o);
    if (!o) {
        CHECK(0, "out of memory for the test's own table");
        return;
    }
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ bytes;
    int bad = 0;
    for (int i = 0; i < n; i++) o[i].bytes = bytes, bad += !take(&o[i], (unsigned char)(1 + i % 251));
    CHECK(bad == 0, "%zu bytes: %d of %d objects not zeroed, aligned or there", bytes, bad, n);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < n; i++) {
            if (check_next(&rng) % 2) continue;
            slab_free(o[i].p, o[i].bytes);
            bad += !take(&o[i], (unsigned char)(1 + (i + round + 1) % 251));
        }
        for (int i = 0; i < n; i++) bad += !marked(&o[i]);
        CHECK(bad == 0, "%zu bytes, round %d: %d objects zeroed late, unaligned or overwritten by another", bytes,
              round, bad);
    }
    for (int i = 0; i < n; i++) slab_free(o[i].p, o[i].bytes);
    free(o);
}

typedef struct {
    int seed, bad;
} Worker;

static void *worker(void *arg) {
    Worker *w = arg;
    enum { LIVE = 400, STEPS = 20000 };
    static const size_t sizes[4] = {1728, 6528, 64, 3000};
    Object o[LIVE] = {{0}};
    uint64_t rng = 0x2545f4914f6cdd1dull + (uint64_t)w->seed;
    for (int s = 0; s < STEPS; s++) {
        Object *x = &o[check_next(&rng) % LIVE];
        if (x->p) {
            w->bad += !marked(x);
            slab_free(x->p, x->bytes);
            x->p = NULL;
        } else {
            x->bytes = sizes[check_next(&rng) % 4];
            w->bad += !take(x, (unsigned char)(1 + (w->seed * 7 + s) % 251));
        }
    }
    for (int i = 0; i < LIVE; i++)
        if (o[i].p) w->bad += !marked(&o[i]), slab_free(o[i].p, o[i].bytes);
    return NULL;
}

int main(void) {
    static const size_t sizes[] = {1, 63, 64, 100, 1728, 6528, 200000, SLAB_MAX_OBJECT, SLAB_MAX_OBJECT + 1,
                                   (size_t)3 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) { // ~5 MB of each: chunks filled and begun
        const size_t n = ((size_t)5 << 20) / sizes[i];
        run_size(sizes[i], n < 8 ? 8 : n > 3000 ? 3000 : (int)n);
    }

    // A chunk goes back when its last object does: 3,000 blocks of 6.5 KB (~19 MB in ten chunks) raise
    // the resident memory, and freeing them all lowers it again.
    enum { N = 3000 };
    static Object o[N];
    const size_t before = resident();
    for (int i = 0; i < N; i++) o[i].bytes = 6528, take(&o[i], 7);
    const size_t full = resident();
    for (int i = 0; i < N; i++) slab_free(o[i].p, o[i].bytes);
    const size_t after = resident();
    CHECK(before && full > before + ((size_t)15 << 20) && after + ((size_t)15 << 20) < full,
          "resident memory %zu -> %zu -> %zu bytes: the freed chunks were not given back", before, full, after);

    Worker w[2] = {{.seed = 1}, {.seed = 2}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, worker, &w[i]) == 0, "cannot start a thread");
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK(w[0].bad == 0 && w[1].bad == 0, "two threads: %d and %d objects wrong", w[0].bad, w[1].bad);

    printf("slab: objects of %zu sizes taken, freed and taken again; chunks given back; two threads\n",
           sizeof sizes / sizeof sizes[0]);
    return failures ? 1 : 0;
}
