// Workers spin on a generation counter instead of sleeping on a condition variable: a decode step
// has ~20 fork-join points of a few microseconds each, and waking a sleeping thread costs more than that.
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

typedef struct {
    ThreadPool *pool;
    int index;
} Worker;

struct ThreadPool {
    int n_threads;
    pthread_t *threads;
    Worker *workers;
    PoolTask task;
    void *ctx;
    atomic_uint generation;
    atomic_int pending; // workers still running the current task
    atomic_int stop;
};

// Spin briefly, then yield, so an idle pool does not starve other processes of the core.
static void backoff(unsigned *spins) {
    if (++*spins < 4096)
        CPU_RELAX();
    else
        sched_yield();
}

static void *worker_main(void *arg) {
    Worker *w = arg;
    ThreadPool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned spins = 0, gen;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen)
            backoff(&spins);
        seen = gen;
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return NULL;
        p->task(p->ctx, w->index, p->n_threads);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

ThreadPool *pool_create(int n_threads) {
    if (n_threads < 1) return NULL;
    ThreadPool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    if (n_threads == 1) return p;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->threads || !p->workers) goto fail;
    for (int i = 1; i < n_threads; i++) {
        p->workers[i] = (Worker){p, i};
        if (pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]) != 0) {
            p->n_threads = i; // destroy joins only the ones that started
            pool_destroy(p);
            return NULL;
        }
    }
    return p;
fail:
    free(p->threads);
    free(p->workers);
    free(p);
    return NULL;
}

void pool_run(ThreadPool *p, PoolTask task, void *ctx) {
    if (p->n_threads == 1) {
        task(ctx, 0, 1);
        return;
    }
    p->task = task;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    task(ctx, 0, p->n_threads);
    unsigned spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) backoff(&spins);
}

typedef struct {
    PoolIndexedTask fn;
    void *ctx;
    int n_tasks;
    atomic_int next;
} TaskQueue;

static void drain_queue(void *arg, int thread, int n_threads) {
    (void)n_threads;
    TaskQueue *q = arg;
    for (int i; (i = atomic_fetch_add_explicit(&q->next, 1, memory_order_relaxed)) < q->n_tasks;) q->fn(q->ctx, i, thread);
}

void pool_run_tasks(ThreadPool *p, int n_tasks, PoolIndexedTask fn, void *ctx) {
    if (n_tasks <= 0) return;
    TaskQueue q = {fn, ctx, n_tasks, 0};
    if (n_tasks == 1) {
        drain_queue(&q, 0, 1);
        return;
    }
    pool_run(p, drain_queue, &q);
}

int pool_threads(const ThreadPool *p) { return p->n_threads; }

void pool_destroy(ThreadPool *p) {
    if (!p) return;
    if (p->n_threads > 1) {
        atomic_store_explicit(&p->stop, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
        for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    }
    free(p->threads);
    free(p->workers);
    free(p);
}
