// Reading a pool alone: see pool_read.h.
#include "pool_read.h"

#include <stdint.h>
#include <string.h>

#include "membw.h"

typedef struct {
    const KVSeq *seqs;
    int layer;
} PoolRead;

// One word of every 64-byte line of a block brings the line in: what is timed is the memory. The
// block `AHEAD` further on is asked for meanwhile (a pool's blocks lie anywhere in memory, and the
// hardware prefetcher loses the way at each). For fp16's blocks of 16 tokens (6 KB) on the machine
// here the distance mattered little: 0 to 16 blocks ahead within ~10%, 4 among the fastest.
#define AHEAD 4
static uint64_t read_stream(const PagedStream *ps) {
    uint64_t sink = 0;
    for (int b = 0; b < ps->n_blocks; b++) {
        if (b + AHEAD < ps->n_blocks) {
            const KVStream *a = &ps->blocks[b + AHEAD];
            const uint8_t *p = a->state;
            for (size_t k = 0, e = a->ops->extent(a->state); k < e; k += 64) __builtin_prefetch(p + k);
        }
        const KVStream *s = &ps->blocks[b];
        const uint8_t *p = s->state;
        for (size_t k = 0, e = s->ops->extent(s->state); k + sizeof(uint64_t) <= e; k += 64) {
            uint64_t w;
            memcpy(&w, p + k, sizeof w);
            sink ^= w;
        }
    }
    return sink;
}

static void task_read(void *arg, int i, int thread) {
    (void)thread;
    const PoolRead *r = arg;
    const KVSeq *s = &r->seqs[i];
    const uint64_t sink = read_stream(&s->k[r->layer]) ^ read_stream(&s->v[r->layer]);
    __asm__ volatile("" ::"r"(sink)); // the loads' result is used
}

static int readable(const PagedStream *ps, double *bytes) {
    for (int b = 0; b < ps->n_blocks; b++) {
        if (!ps->blocks[b].ops->extent) return 0;
        *bytes += (double)ps->blocks[b].ops->extent(ps->blocks[b].state);
    }
    return 1;
}

int pool_read_time(const KVSeq *seqs, int n, ThreadPool *threads, int repeat, double *seconds, double *bytes) {
    *seconds = 0, *bytes = 0;
    if (n < 1) return -1;
    const int layers = seqs[0].pool->n_layers;
    for (int i = 0; i < n; i++)
        for (int l = 0; l < layers; l++)
            if (!readable(&seqs[i].k[l], bytes) || !readable(&seqs[i].v[l], bytes)) return -1;
    PoolRead r = {seqs, 0};
    for (int rep = 0; rep < (repeat > 0 ? repeat : 1); rep++) {
        const double t0 = seconds_now();
        for (r.layer = 0; r.layer < layers; r.layer++) pool_run_tasks(threads, n, task_read, &r);
        const double dt = seconds_now() - t0;
        if (rep == 0 || dt < *seconds) *seconds = dt;
    }
    return 0;
}
