// The calibration a calibrated codec reads (kvq_view.h): loaded once, on first use, under a lock
// (the plate builds caches on several threads).
#include "kvq_view.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *calib_path;
static const Model *calib_model;
static Kvq loaded;
static int state; // 0 not yet loaded, 1 loaded, -1 failed (load_error says why)
static char load_error[600];

static void load_locked(void) {
    if (state) return;
    char err[512];
    if (!calib_path) {
        snprintf(load_error, sizeof load_error, "no calibration file");
        state = -1;
    } else if (kvq_load(&loaded, calib_path, calib_model, err, sizeof err)) {
        snprintf(load_error, sizeof load_error, "%s", err);
        state = -1;
    } else {
        state = 1;
    }
}

int kvq_view_set(const char *path, const Model *model, int load_now, char *err, size_t errlen) {
    pthread_mutex_lock(&lock);
    if (state == 1) kvq_free(&loaded);
    state = 0;
    free(calib_path);
    calib_path = path ? strdup(path) : NULL;
    calib_model = model;
    int rc = 0;
    if (load_now) {
        load_locked();
        if (state < 0) snprintf(err, errlen, "%s", load_error), rc = -1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

// The calibration, loaded, for a stream of that shape in that layer: 0, or -1 with one line in err
// naming `who`.
static int loaded_for(const char *who, int layer, int n_heads, int head_dim, char *err, size_t errlen) {
    pthread_mutex_lock(&lock);
    load_locked();
    const int ok = state > 0;
    // The hint names a way that works: a command without a model has no calibration to take, and
    // micro calibrate does not calibrate latent attention.
    const char *hint = !calib_path && !calib_model ? " (this command takes no model or calibration)"
                       : calib_model && calib_model->config.latent_dim > 0
                           ? " (micro calibrate takes multi-head and grouped-query models, not latent attention)"
                           : " (micro calibrate --model MODEL writes one beside the model; --calib FILE names another)";
    if (!ok) snprintf(err, errlen, "%s needs a calibration: %s%s", who, load_error, hint);
    pthread_mutex_unlock(&lock);
    if (!ok) return -1;
    // Loaded once and never changed while caches use it: read without the lock.
    if (loaded.n_kv_heads != n_heads || loaded.head_dim != head_dim || layer >= loaded.n_layers) {
        snprintf(err, errlen, "%s: the calibration is for %d layers of %d heads x %d, not layer %d of %d heads x %d", who,
                 loaded.n_layers, loaded.n_kv_heads, loaded.head_dim, layer, n_heads, head_dim);
        return -1;
    }
    return 0;
}

int kvq_view_stream_max(const char *who, int layer, KvqStream which, int n_heads, int head_dim, float *amax,
                        char *err, size_t errlen) {
    if (loaded_for(who, layer, n_heads, head_dim, err, errlen)) return -1;
    const float *m = kvq_stream_max(&loaded, layer, which);
    if (!m) {
        snprintf(err, errlen, "%s: the calibration is format version %u, which holds no stream maxima: rerun micro calibrate",
                 who, loaded.version);
        return -1;
    }
    *amax = *m;
    return 0;
}

int kvq_view(int layer, int is_key, int bits, double outliers, int qnorm, int n_heads, int head_dim, KvqView *v,
             char *err, size_t errlen) {
    memset(v, 0, sizeof *v);
    if (loaded_for("kvquant", layer, n_heads, head_dim, err, errlen)) return -1;
    const int bi = kvq_bits_index(&loaded, bits);
    const long hundredths = lround(outliers * 100.0);
    const int pi = kvq_percent_index(&loaded, (uint32_t)hundredths);
    if (bi < 0 || pi < 0 || fabs(outliers * 100.0 - (double)hundredths) > 1e-9) {
        char have[160] = "";
        size_t at = 0;
        for (int i = 0; i < loaded.n_percents && at < sizeof have; i++)
            at += (size_t)snprintf(have + at, sizeof have - at, "%s%g", i ? ", " : "", loaded.percents[i] / 100.0);
        snprintf(err, errlen, "kvquant: the calibration has no %s (it holds bits 1..%u and outliers %s)",
                 bi < 0 ? "codebook of that width" : "thresholds for that outlier percent",
                 loaded.bits[loaded.n_bits - 1], have);
        return -1;
    }
    v->levels = kvq_codebook(&loaded, layer, is_key ? KVQ_KEY : KVQ_VALUE, bi, pi, qnorm ? KVQ_QNORM : KVQ_PLAIN);
    v->key_ranges = kvq_key_range(&loaded, layer, pi, 0);
    return 0;
}
