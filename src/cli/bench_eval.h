// micro bench --eval: the fast evaluator against the decode loop on one window (bench_eval.c).
#ifndef MICRO_BENCH_EVAL_H
#define MICRO_BENCH_EVAL_H

#include <stddef.h>

#include "model.h"

// Prints the table for fp32 and the given specs on a window of n tokens, the decode loop beside the
// fast evaluator unless `decode` is 0; -1 with one line in err.
int bench_eval(const Model *m, const char *k_spec, const char *v_spec, int n, int threads, int repeat, int decode,
               char *err, size_t errlen);

// The memory line (bench_memory.c): `micro eval` on the model file, the plates repeated to 1,500 tokens,
// run as a child; its peak resident memory against the fp32 weights + 1 GB. -1 with one line in err.
int bench_eval_memory(const Model *m, const char *model_path, const char *calib_path, const char *k_spec,
                      const char *v_spec, int threads, char *err, size_t errlen);

// Multiply-adds of scoring texts of tokens[0..n_texts) tokens (BOS included) through every one of
// `runs` caches: the arithmetic under micro plate's loss runs.
double eval_text_multiply_adds(const ModelConfig *c, const int *tokens, int n_texts, int runs);

#endif
