// How far ahead a reader of a paged cache's blocks asks for lines: the codecs' every-head kernels
// and the benchmark's plain pool read (src/bench/pool_read.c) read the same way.
#ifndef MICRO_PREFETCH_H
#define MICRO_PREFETCH_H

#include <stddef.h>

// Tiles (or blocks) ahead for such a kernel: CODEC_AHEAD_BYTES of what it reads in one, at least
// one. In micro bench --batch 32, one core read a pool fastest asking about 12 KB ahead, a line for
// each line read, whatever the block's bytes (pool_read.c, codec_float.c's every-head kernels).
#define CODEC_AHEAD_BYTES 12288
static inline int codec_ahead_tiles(size_t bytes) {
    return bytes >= CODEC_AHEAD_BYTES ? 1 : (int)((CODEC_AHEAD_BYTES + bytes - 1) / bytes);
}

#endif
