// Zeroed memory that starts on a cache line, released with free(): for the weights, the forward
// pass's buffers and the cache's blocks (src/kv/codecs/codec_core.h), whose 64-byte vector loads
// would otherwise straddle two lines each (calloc aligns to 16 bytes; a large block comes from mmap
// 16 bytes into a page), and whose speed would then depend on where the allocator put them.
#ifndef MICRO_CALLOC_LINES_H
#define MICRO_CALLOC_LINES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline void *calloc_lines(size_t count, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(count, size, &bytes) || bytes > SIZE_MAX - 63) return NULL;
    bytes = bytes ? (bytes + 63) / 64 * 64 : 64; // aligned_alloc asks a multiple of the alignment
    void *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

#endif
