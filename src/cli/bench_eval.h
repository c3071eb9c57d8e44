// micro bench --eval: the fast evaluator against the decode loop on one window (bench_eval.c).
#ifndef MICRO_BENCH_EVAL_H
#define MICRO_BENCH_EVAL_H

#include <stddef.h>

#include "model.h"

// Prints the table for fp32 and the given specs on a window of n tokens; -1 with one line in err.
int bench_eval(const Model *m, const char *k_spec, const char *v_spec, int n, int threads, int repeat, char *err,
               size_t errlen);

#endif
