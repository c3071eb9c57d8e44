#include "adamw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

int adamw_init(AdamW *o, const ModelConfig *c, AdamWConfig cfg) {
    memset(o, 0, sizeof *o);
    TensorInfo info[MODEL_N_TENSORS];
    if (model_tensor_infos(c, info)) return -1;
    o->cfg = cfg;
    size_t end = 0;
    for (int i = 0; i < MODEL_N_TENSORS; i++) {
        end += info[i].count;
        o->decay_end[i] = end;
        o->decay[i] = info[i].is_matrix; // the embedding (tied classifier) is a matrix: decayed
    }
    o->n = end;
    o->m = calloc(end, sizeof(float));
    o->v = calloc(end, sizeof(float));
    if (!o->m || !o->v) {
        adamw_free(o);
        return -1;
    }
    return 0;
}

void adamw_free(AdamW *o) {
    free(o->m);
    free(o->v);
    memset(o, 0, sizeof *o);
}

double grad_norm(const float *grads, size_t n) {
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)grads[i] * grads[i];
    return sqrt(ss);
}

#define ADAM_CHUNK 16384

typedef struct {
    AdamW *o;
    float *params;
    const float *grads;
    float lr, scale, bc1, bc2;
} AdamJob;

static void adam_task(void *ctx, int task, int thread) {
    (void)thread;
    AdamJob *j = ctx;
    AdamW *o = j->o;
    size_t i0 = (size_t)task * ADAM_CHUNK, i1 = i0 + ADAM_CHUNK < o->n ? i0 + ADAM_CHUNK : o->n;
    const float b1 = o->cfg.beta1, b2 = o->cfg.beta2, eps = o->cfg.eps;
    int t = 0;
    while (i0 >= o->decay_end[t]) t++;
    while (i0 < i1) {
        size_t end = o->decay_end[t] < i1 ? o->decay_end[t] : i1;
        float wd = o->decay[t] ? o->cfg.weight_decay : 0.0f;
        for (size_t i = i0; i < end; i++) {
            float g = j->grads[i] * j->scale;
            float m = o->m[i] = b1 * o->m[i] + (1.0f - b1) * g;
            float v = o->v[i] = b2 * o->v[i] + (1.0f - b2) * g * g;
            float mhat = m / j->bc1, vhat = v / j->bc2;
            j->params[i] -= j->lr * (mhat / (sqrtf(vhat) + eps) + wd * j->params[i]);
        }
        i0 = end;
        t++;
    }
}

void adamw_update(AdamW *o, float *params, const float *grads, int t, float lr, float grad_scale, ThreadPool *pool) {
    AdamJob j = {o, params, grads, lr, grad_scale, 1.0f - powf(o->cfg.beta1, (float)t),
                 1.0f - powf(o->cfg.beta2, (float)t)};
    pool_run_tasks(pool, (int)((o->n + ADAM_CHUNK - 1) / ADAM_CHUNK), adam_task, &j);
}

double lr_schedule(int step, int steps, int warmup, double peak, double min_frac) {
    if (step < warmup) return peak * (step + 1) / warmup;
    double lo = peak * min_frac;
    if (steps <= warmup) return lo;
    double p = (double)(step - warmup) / (double)(steps - warmup);
    if (p > 1.0) p = 1.0;
    return lo + 0.5 * (peak - lo) * (1.0 + cos(M_PI * p));
}

void train_init_weights(Model *m, uint64_t seed) {
    const ModelConfig *c = &m->config;
    TensorInfo info[MODEL_N_TENSORS];
    model_tensor_infos(c, info);
    Rng r;
    rng_seed(&r, seed ^ 0x1217a7e5eed5ULL); // its own stream: the data loader seeds another
    float *p = m->params;
    double out_scale = 1.0 / sqrt(2.0 * c->n_layers);
    for (int t = 0; t < MODEL_N_TENSORS; t++) {
        const char *name = info[t].name;
        if (!info[t].is_matrix) {
            for (size_t i = 0; i < info[t].count; i++) p[i] = 1.0f;
        } else {
            double std = 0.02;
            if (strcmp(name, "wo") == 0 || strcmp(name, "w2") == 0) std *= out_scale;
            for (size_t i = 0; i < info[t].count; i++) p[i] = (float)(std * rng_normal(&r));
        }
        p += info[t].count;
    }
}
