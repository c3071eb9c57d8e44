// Reading a pool alone: every block of some sequences read whole, in the order a batched step's
// attention reaches them, with nothing computed. micro bench --batch prints it beside the streaming
// bandwidth (membw.h), which reads one buffer in order where a pool's blocks lie anywhere in memory.
// A reference for a step's reading, not a bound: a step may overlap some of it with its products.
#ifndef MICRO_POOL_READ_H
#define MICRO_POOL_READ_H

#include <stddef.h>

#include "kvpool.h"
#include "threadpool.h"

// The best of `repeat` reads of every block of seqs[0, n), layer after layer and in each layer
// sequence after sequence (tasks over the sequences on `threads`, as the step's attention), keys then
// values: *seconds, and *bytes the blocks' extents read. -1 (nothing measured) when a block's codec
// keeps its state in several allocations (CodecOps.extent NULL).
int pool_read_time(const KVSeq *seqs, int n, ThreadPool *threads, int repeat, double *seconds, double *bytes);

#endif
