// The thread pool's contract: in every run each share runs exactly once and the run has ended when
// pool_run returns, whichever thread took it; every task of pool_run_tasks runs once; a worker kept
// off its core (here: a second pool and a busy thread beside it, more threads than cores) changes
// neither. Many short runs, as a decode step's joins are.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "threadpool.h"

enum { RUNS = 20000, SHARES_MAX = 8, TASKS = 37 };

typedef struct {
    atomic_int ran[SHARES_MAX];
    int run; // the run in progress: a share of an ended run would see a later value
    int stale;
} Shares;

static void share_task(void *ctx, int share, int n) {
    Shares *s = ctx;
    if (share < 0 || share >= n || n > SHARES_MAX) {
        s->stale++;
        return;
    }
    const int before = atomic_fetch_add(&s->ran[share], 1);
    if (before != s->run) s->stale++; // this share ran twice in a run, or in a run that had ended
}

typedef struct {
    atomic_int ran[TASKS];
} Tasks;

static void indexed_task(void *ctx, int task, int thread) {
    Tasks *t = ctx;
    (void)thread;
    atomic_fetch_add(&t->ran[task], 1);
}

static atomic_int stop_busy;
static void *busy(void *arg) {
    (void)arg;
    volatile unsigned x = 0;
    while (!atomic_load(&stop_busy)) x++;
    return NULL;
}

static int check_pool(ThreadPool *p, const char *label) {
    int failures = 0;
    Shares s;
    memset(&s, 0, sizeof s);
    const int n = pool_threads(p);
    for (int r = 0; r < RUNS; r++) {
        s.run = r;
        pool_run(p, share_task, &s);
        for (int i = 0; i < n; i++)
            if (atomic_load(&s.ran[i]) != r + 1) {
                printf("FAIL %s: run %d, share %d ran %d times in all, want %d\n", label, r, i, atomic_load(&s.ran[i]), r + 1);
                return 1;
            }
    }
    if (s.stale) {
        printf("FAIL %s: %d shares ran twice or outside their run\n", label, s.stale);
        failures++;
    }
    Tasks t;
    memset(&t, 0, sizeof t);
    for (int r = 0; r < RUNS / 10; r++) pool_run_tasks(p, TASKS, indexed_task, &t);
    for (int i = 0; i < TASKS; i++)
        if (atomic_load(&t.ran[i]) != RUNS / 10) {
            printf("FAIL %s: task %d ran %d times, want %d\n", label, i, atomic_load(&t.ran[i]), RUNS / 10);
            failures++;
            break;
        }
    if (!failures) printf("ok   %s: %d runs of %d shares, %d runs of %d tasks\n", label, RUNS, n, RUNS / 10, TASKS);
    return failures;
}

int main(void) {
    int failures = 0;
    ThreadPool *one = pool_create(1), *two = pool_create(2);
    if (!one || !two) {
        printf("FAIL cannot create the pools\n");
        return 1;
    }
    failures += check_pool(one, "1 thread");
    failures += check_pool(two, "2 threads");
    // Oversubscribed: a busy thread and a second pool's runs beside this one.
    pthread_t b;
    const int started = pthread_create(&b, NULL, busy, NULL) == 0;
    ThreadPool *other = pool_create(2);
    failures += check_pool(two, "2 threads beside a busy thread");
    if (other) failures += check_pool(other, "a second pool of 2");
    atomic_store(&stop_busy, 1);
    if (started) pthread_join(b, NULL);
    pool_destroy(other);
    pool_destroy(two);
    pool_destroy(one);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
