// Held-out loss through the decode loop: the evaluator.
#ifndef MICRO_EVAL_H
#define MICRO_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct {
    int tokens;              // tokens run through the decoder (BOS included)
    double loss;             // mean NLL, nats per predicted token
    double bits_per_element; // cache storage bits per cached number, metadata included, at the end
    size_t cache_bytes;      // exact bytes the cache holds at the end
    char k_spec[96], v_spec[96]; // the specs as normalised
} EvalResult;

// Runs tokens[0..n) from BOS through a decoder with the given cache and scores every next token.
int eval_tokens(const Model *m, const uint8_t *tokens, int n, const char *k_spec, const char *v_spec,
                int n_threads, EvalResult *out, char *err, size_t errlen);



#endif
