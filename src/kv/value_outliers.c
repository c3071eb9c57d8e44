#include "value_outliers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int calib_value_outliers(const float *v, int n, uint32_t percent_hundredths, unsigned char *is_outlier,
                         float *s) {
    memset(is_outlier, 0, (size_t)n);
    int m = (int)(((long long)n * percent_hundredths + 9999) / 10000);
    if (m == 0) return 0;
    memcpy(s, v, sizeof(float) * (size_t)n);
    qsort(s, (size_t)n, sizeof(float), cmp_float);
    double median = 0.5 * ((double)s[(n - 1) / 2] + (double)s[n / 2]);
    for (int k = 0; k < m; k++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!is_outlier[i] && (best < 0 || fabs(v[i] - median) > fabs(v[best] - median))) best = i;
        is_outlier[best] = 1;
    }
    return m;
}
