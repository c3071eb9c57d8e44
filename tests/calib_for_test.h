// kvquant's calibration of a test's model from its own tokens, saved in a fresh folder under /tmp
// and made the one the codecs read (kvq_view_set): for tests that run kvquant on a random model.
#ifndef MICRO_TESTS_CALIB_FOR_TEST_H
#define MICRO_TESTS_CALIB_FOR_TEST_H

#include <stdio.h>
#include <stdlib.h>

#include "calibrate.h"
#include "check.h"
#include "kvq_view.h"

// dir: a mkdtemp template (it becomes the folder); path gets dir/m.kvq. 0, or -1 after a CHECK.
static inline int calibrate_for_test(Model *m, const int *tokens, int n, char *dir, char *path, size_t len) {
    static const uint32_t percents[] = {0, 100}, bits[] = {1, 2, 3, 4};
    const CalibSettings settings = {percents, 2, bits, 4, 1};
    char err[256] = "cannot make a temporary folder";
    Kvq k;
    if (!mkdtemp(dir)) {
        CHECK(0, "calibration: %s", err);
        return -1;
    }
    snprintf(path, len, "%s/m.kvq", dir);
    int rc = calibrate_model(m, tokens, tokens + 1, 1, n - 1, &settings, &k, NULL, err, sizeof err);
    if (!rc) {
        rc = kvq_save(&k, path, err, sizeof err) || kvq_view_set(path, m, 1, err, sizeof err);
        kvq_free(&k);
    }
    CHECK(!rc, "calibration: %s", err);
    return rc;
}

#endif
