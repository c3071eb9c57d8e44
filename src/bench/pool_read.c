// Reading a pool alone: see pool_read.h.
#include "pool_read.h"
#include "clock.h"

#include <stdint.h>
#include <string.h>

#include "prefetch.h"
#include "membw.h"

typedef struct {
    const KVSeq *seqs;
    int layer;
} PoolRead;

// One word of every 64-byte line of a block brings the line in: what is timed is the memory. The
// block ~12 KB further on is asked for meanwhile, a line for each line read (a pool's blocks
// lie anywhere in memory, and the hardware prefetcher loses the way at each), as the float codecs'
// every-head kernels do. A line per line read spreads the requests over the reading, where a whole
// block asked for at once left the reads waiting behind them; and the distance that keeps one core
// reading a pool nearest its streaming rate is one of bytes, not of blocks: fp16's 6 KB blocks want
// one or two blocks ahead, int4's 1.8 KB ones several. About 12 KB ahead, then, whatever the block
// (codec_ahead_tiles, which the kernels use too).
static uint64_t read_stream(const PagedStream *ps) {
    uint64_t sink = 0;
    const size_t extent = ps->n_blocks ? ps->blocks[0].ops->extent(ps->blocks[0].state) : 1;
    const int ahead = codec_ahead_tiles(extent);
    for (int b = 0; b < ps->n_blocks; b++) {
        const KVStream *a = b + ahead < ps->n_blocks ? &ps->blocks[b + ahead] : NULL;
        const uint8_t *ap = a ? a->state : NULL;
        const size_t ae = a ? a->ops->extent(a->state) : 0;
        const KVStream *s = &ps->blocks[b];
        const uint8_t *p = s->state;
        for (size_t k = 0, e = s->ops->extent(s->state); k + sizeof(uint64_t) <= e; k += 64) {
            if (k < ae) __builtin_prefetch(ap + k);
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
