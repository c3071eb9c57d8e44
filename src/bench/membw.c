// Streaming read bandwidth: see membw.h.
#include "membw.h"
#include "clock.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

typedef struct {
    float *buf;
    size_t n, passes;
    float sink;
    atomic_int *go; // 1: read; -1: a thread could not start, give up
} Reader;

// The two loops that touch a probe's buffer, which is its own and read and written whole: built
// without the sanitizers' checks, which in the ASan build would be most of what they time (and most
// of the time of every test that reads the bandwidth), not the memory.
#define MEMBW_UNCHECKED __attribute__((no_sanitize("address", "undefined")))

MEMBW_UNCHECKED static float sum_passes(const float *buf, size_t n, size_t passes) {
    float sink = 0;
    for (size_t p = 0; p < passes; p++) {
        float part[16] = {0};
        for (size_t i = 0; i < n; i += 16)
#pragma omp simd
            for (int l = 0; l < 16; l++) part[l] += buf[i + l];
        sink += part[0] + part[15];
    }
    return sink;
}

MEMBW_UNCHECKED static void fill(float *buf, size_t n) {
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
}

static void *read_passes(void *arg) {
    Reader *r = arg;
    int go;
    while ((go = atomic_load_explicit(r->go, memory_order_acquire)) == 0) sched_yield();
    if (go < 0) return NULL;
    r->sink = sum_passes(r->buf, r->n, r->passes); // kept, so that the sums are not optimised away
    return NULL;
}

// The readers' buffers, written once: a buffer only allocated would read as the kernel's one zero
// page, from cache.
struct BandwidthProbe {
    int threads;
    Reader readers[64];
};

BandwidthProbe *bandwidth_probe_open(size_t bytes, int threads) {
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    BandwidthProbe *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->threads = threads;
    size_t n = bytes / (size_t)threads / sizeof(float) / 64 * 64;
    if (n < 64) n = 64;
    const size_t passes = ((size_t)256 << 20) / (n * sizeof(float)) + 1;
    for (int t = 0; t < threads; t++) {
        Reader *r = &p->readers[t];
        r->n = n, r->passes = passes;
        // Mapped with its pages taken at once (MAP_POPULATE), and no huge pages asked for, as none are
        // for the cache's blocks: faulting 512 MiB in page by page as the fill first wrote it was
        // slow on a virtual machine, and every command that reads the bandwidth paid for it.
        void *buf = mmap(NULL, n * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                         -1, 0);
        if (buf == MAP_FAILED) {
            bandwidth_probe_close(p);
            return NULL;
        }
        r->buf = buf;
        fill(r->buf, n);
    }
    return p;
}

double bandwidth_probe_read(BandwidthProbe *p, int rounds) {
    const int threads = p->threads;
    double best = 0;
    pthread_t tid[64];
    for (int round = 0; round < rounds; round++) {
        atomic_int go = 0;
        int started = 1;
        for (int t = 0; t < threads; t++) p->readers[t].go = &go;
        for (int t = 1; t < threads && started == t; t++)
            if (pthread_create(&tid[t], NULL, read_passes, &p->readers[t]) == 0) started++;
        if (started < threads) { // fewer threads than asked: do not report a wrong figure
            atomic_store_explicit(&go, -1, memory_order_release);
            for (int t = 1; t < started; t++) pthread_join(tid[t], NULL);
            return 0;
        }
        const double t0 = seconds_now();
        atomic_store_explicit(&go, 1, memory_order_release);
        read_passes(&p->readers[0]);
        for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
        const Reader *r = &p->readers[0];
        const double bw = (double)threads * (double)(r->passes * r->n * sizeof(float)) / (seconds_now() - t0);
        if (bw > best) best = bw;
    }
    return best;
}

void bandwidth_probe_note(BandwidthProbe *p, int rounds, BandwidthReadings *r) {
    if (r->failed) return;
    const double bw = p ? bandwidth_probe_read(p, rounds) : 0;
    if (!(bw > 0)) {
        r->failed = 1, r->best = 0;
        return;
    }
    r->best = r->count == 0 || bw > r->best ? bw : r->best;
    r->low = r->count == 0 || bw < r->low ? bw : r->low;
    r->count++;
}

void bandwidth_probe_close(BandwidthProbe *p) {
    if (!p) return;
    for (int t = 0; t < p->threads; t++)
        if (p->readers[t].buf) munmap(p->readers[t].buf, p->readers[t].n * sizeof(float));
    free(p);
}

double read_bandwidth(size_t bytes, int threads) {
    BandwidthProbe *p = bandwidth_probe_open(bytes, threads);
    const double bw = p ? bandwidth_probe_read(p, 5) : 0;
    bandwidth_probe_close(p);
    return bw;
}
