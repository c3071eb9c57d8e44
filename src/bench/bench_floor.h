// micro bench --batch's floor: the step if no read of the cache waited on DRAM (bench_floor.c).
#ifndef MICRO_BENCH_FLOOR_H
#define MICRO_BENCH_FLOOR_H

#include <stddef.h>

#include "model.h"
#include "held_decode.h"

// Seconds of attention (scores, softmax, mix) per head and cached token on one thread, its blocks
// in cache: one conversation of up to 1,024 of the recording's tokens in a pool of `block`-token
// blocks, best of `repeat` per layer. -1 with one line in err.
int attention_in_cache(const Model *m, const KVRecording *rec, const CodecSpec *k_spec, const CodecSpec *v_spec, int block,
                       int repeat, double *seconds, char *err, size_t errlen);

#endif
