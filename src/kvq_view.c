// The calibration a calibrated codec reads (kvq_view.h).
#include "kvq_view.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *calib_path;

void kvq_view_set_path(const char *path) {
    pthread_mutex_lock(&lock);
    free(calib_path);
    calib_path = path ? strdup(path) : NULL;
    pthread_mutex_unlock(&lock);
}

int kvq_view(int layer, int is_key, int bits, double outliers, int qnorm, int n_heads, int head_dim, KvqView *v,
             char *err, size_t errlen) {
    (void)layer, (void)is_key, (void)bits, (void)outliers, (void)qnorm, (void)n_heads, (void)head_dim;
    memset(v, 0, sizeof *v);
    snprintf(err, errlen, "kvquant: no calibration loaded (micro calibrate writes models/micro.kvq; --calib FILE)");
    return -1;
}
