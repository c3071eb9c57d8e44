// What every unit test shares: a failure counter and CHECK, which reports the first 40 failures
// with their file and line and lets the test run on to count the rest.
#ifndef MICRO_TESTS_CHECK_H
#define MICRO_TESTS_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (failures < 40) {                                                                   \
                fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                    \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fprintf(stderr, "\n");                                                             \
            }                                                                                      \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#endif
