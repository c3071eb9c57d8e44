// Workers spin on a generation counter before they sleep: a decode step has ~20 fork-join points,
// each shorter than it takes to wake a sleeping thread. They do go to sleep (on a futex) after a
// short spin, and a run's shares go to whichever thread takes them first (run_shares): when another
// process holds the second core, a pool that waited for its worker would wait a whole scheduler
// slice at every join, and decoding would slow far more than the loss of one core explains.
#include "threadpool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

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
    atomic_uint generation;     // raised by every pool_run: the workers wait on it
    _Atomic unsigned long long claim; // the run's generation << 32 | the next share to hand out
    atomic_uint done;           // shares of the current run finished
    atomic_int sleepers;        // workers asleep on generation, or the caller asleep on done
    atomic_int stop;
};

// Spins this many times (tens of microseconds) before sleeping.
#define SPINS 20000

static void futex_wait(atomic_uint *word, unsigned expected) {
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *word) { syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0); }

// Waits until *word differs from `value`: a short spin, then sleeps. `sleepers` is raised before
// sleeping, so the writer, which changes *word first and reads `sleepers` after, always wakes us
// (futex_wait itself returns at once if *word has already changed).
static unsigned wait_while_equal(ThreadPool *p, atomic_uint *word, unsigned value) {
    unsigned now;
    for (int spins = 0; (now = atomic_load_explicit(word, memory_order_acquire)) == value; spins++) {
        if (spins < SPINS) {
            CPU_RELAX();
            continue;
        }
        atomic_fetch_add(&p->sleepers, 1);
        futex_wait(word, value);
        atomic_fetch_sub(&p->sleepers, 1);
    }
    return now;
}

static void wake_sleepers(ThreadPool *p, atomic_uint *word) {
    if (atomic_load(&p->sleepers) > 0) futex_wake_all(word);
}

// Runs shares of the current run until none is left to take. A share goes to whichever thread
// takes it first, the caller included: when another process keeps a worker off its core, the
// caller runs that worker's share and the run ends without waiting a scheduler slice for it. A
// share is computed the same whoever runs it (its index, not the thread, picks its work and its
// scratch), so the results are too. The generation in `claim` keeps a late worker from taking a
// share of a run that has ended: the caller starts the next run only once every share is done,
// so a share taken is always the current run's, and so are the task and context read after it.
static void run_shares(ThreadPool *p) {
    const unsigned long long n = (unsigned long long)p->n_threads;
    unsigned long long c = atomic_load_explicit(&p->claim, memory_order_acquire);
    while ((c & 0xffffffffu) < n) {
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire))
            continue;
        p->task(p->ctx, (int)(c & 0xffffffffu), p->n_threads);
        if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == (unsigned)n) wake_sleepers(p, &p->done);
        c = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *worker_main(void *arg) {
    Worker *w = arg;
    ThreadPool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        seen = wait_while_equal(p, &p->generation, seen);
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return NULL;
        run_shares(p);
    }
}

ThreadPool *pool_create(int n_threads) {
    if (n_threads < 1) return NULL;
    // More threads than online cores cannot run at once: every fork-join would then wait for
    // descheduled workers, and a decode would crawl. Work is split by the pool's own count, so
    // capping it changes no result.
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores >= 1 && n_threads > cores) n_threads = (int)cores;
    ThreadPool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    if (n_threads == 1) return p;
    // No share to take until the first run.
    atomic_store_explicit(&p->claim, (unsigned long long)n_threads, memory_order_relaxed);
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
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const unsigned gen = atomic_load_explicit(&p->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->claim, (unsigned long long)gen << 32, memory_order_release);
    atomic_store_explicit(&p->generation, gen, memory_order_release);
    wake_sleepers(p, &p->generation);
    run_shares(p);
    const unsigned n = (unsigned)p->n_threads;
    for (unsigned d; (d = atomic_load_explicit(&p->done, memory_order_acquire)) != n;) wait_while_equal(p, &p->done, d);
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
        atomic_fetch_add(&p->generation, 1);
        futex_wake_all(&p->generation);
        for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    }
    free(p->threads);
    free(p->workers);
    free(p);
}
