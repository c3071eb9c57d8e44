#include "train/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct TrainPool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    unsigned long generation; // bumped for every run
    int quit;
    int active;               // workers still inside the current run
    TrainTaskFn fn;
    void *ctx;
    int n_tasks;
    atomic_int next;          // next task index to hand out
};

typedef struct {
    TrainPool *pool;
    int thread;
} WorkerArg;

static void run_tasks(TrainPool *p, int thread) {
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_tasks) break;
        p->fn(p->ctx, i, thread);
    }
}

static void *worker(void *arg) {
    WorkerArg a = *(WorkerArg *)arg;
    free(arg);
    TrainPool *p = a.pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->start, &p->mu);
        if (p->quit) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, a.thread);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

TrainPool *train_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    TrainPool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return NULL;
    }
    for (int t = 1; t < n_threads; t++) {
        WorkerArg *a = malloc(sizeof *a);
        if (!a || (a->pool = p, a->thread = t, pthread_create(&p->threads[t], NULL, worker, a) != 0)) {
            free(a);
            p->n_threads = t; // destroy joins the ones that started
            train_pool_destroy(p);
            return NULL;
        }
    }
    return p;
}

void train_pool_run(TrainPool *p, int n_tasks, TrainTaskFn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    p->active = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int train_pool_threads(const TrainPool *p) {
    return p->n_threads;
}

void train_pool_destroy(TrainPool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t < p->n_threads; t++) pthread_join(p->threads[t], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}
