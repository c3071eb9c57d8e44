// A small fixed thread pool for the trainer: run n tasks, each a function of its index.
// Which thread runs a task never changes its result (tasks are independent and write disjoint
// outputs; `thread` only selects per-thread scratch), so training is bit-reproducible.
#ifndef MICRO_TRAIN_POOL_H
#define MICRO_TRAIN_POOL_H

typedef void (*TrainTaskFn)(void *ctx, int task, int thread);
typedef struct TrainPool TrainPool;

// n_threads >= 1 (the calling thread is one of them). NULL on failure.
TrainPool *train_pool_create(int n_threads);
// Runs fn(ctx, i, thread) for every i in [0, n_tasks) and returns when all are done.
void train_pool_run(TrainPool *p, int n_tasks, TrainTaskFn fn, void *ctx);
int train_pool_threads(const TrainPool *p);
void train_pool_destroy(TrainPool *p);

#endif
