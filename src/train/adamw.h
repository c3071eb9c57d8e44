// AdamW with global gradient-norm clipping, the learning-rate schedule and the initialisation.
#ifndef MICRO_TRAIN_ADAMW_H
#define MICRO_TRAIN_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "threadpool.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
} AdamWConfig;

typedef struct {
    AdamWConfig cfg;
    size_t n;
    float *m, *v;                       // first and second moments, payload layout
    size_t decay_end[MODEL_N_TENSORS];  // tensor boundaries (cumulative counts)
    int decay[MODEL_N_TENSORS];         // weight decay on this tensor (TensorInfo.is_matrix)
} AdamW;

int adamw_init(AdamW *o, const ModelConfig *c, AdamWConfig cfg);
void adamw_free(AdamW *o);
// The global L2 norm of grads (in double, a fixed order).
double grad_norm(const float *grads, size_t n);
// One update at step t (1-based, for bias correction), learning rate lr; grads are multiplied by
// grad_scale first (clipping). Parallel over fixed chunks: the result does not depend on threads.
void adamw_update(AdamW *o, float *params, const float *grads, int t, float lr, float grad_scale, ThreadPool *pool);

// Linear warm-up over `warmup` steps to `peak`, then cosine decay to min_frac*peak at step `steps`.
// step is 0-based.
double lr_schedule(int step, int steps, int warmup, double peak, double min_frac);

// Deterministic initialisation from seed: normal(0, 0.02) for matrices, wo and w2 scaled by
// 1/sqrt(2*n_layers), norm gains 1.
void train_init_weights(Model *m, uint64_t seed);

#endif
