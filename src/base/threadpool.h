// A tiny fork-join pool for the decode step. Work is split by output rows or heads, and every row is
// computed whole by one thread, so results do not depend on the thread count.
#ifndef MICRO_THREADPOOL_H
#define MICRO_THREADPOOL_H

typedef struct ThreadPool ThreadPool;
typedef void (*PoolTask)(void *ctx, int thread, int n_threads);

// NULL on failure. At most the online cores run (pool_threads says how many). n_threads == 1 creates
// no threads: pool_run calls the task inline.
ThreadPool *pool_create(int n_threads);
// Runs task(ctx, i, n) for i in [0, n), n the pool's threads, and waits for all: each share i once,
// by whichever thread takes it first (the caller too), so i, not the thread, must pick its work.
void pool_run(ThreadPool *pool, PoolTask task, void *ctx);
// Runs fn(ctx, task, thread) for every task in [0, n_tasks), handed out one at a time to whichever
// thread is free. Tasks must write disjoint outputs; `thread` only selects per-thread scratch, so
// which thread ran a task never changes the result.
typedef void (*PoolIndexedTask)(void *ctx, int task, int thread);
void pool_run_tasks(ThreadPool *pool, int n_tasks, PoolIndexedTask fn, void *ctx);
int pool_threads(const ThreadPool *pool);
void pool_destroy(ThreadPool *pool);

// The half-open share [*begin, *end) of n items for thread i of n_threads.
static inline void pool_share(int n, int i, int n_threads, int *begin, int *end) {
    *begin = (int)((long long)n * i / n_threads);
    *end = (int)((long long)n * (i + 1) / n_threads);
}

#endif
