// Zeroed memory that starts on a cache line, released with free(): for the weights, the forward
// pass's buffers and the cache's whole-context states (a pool's small blocks come from slab.h; see
// src/kv/codecs/codec_core.h), whose 64-byte vector loads would otherwise straddle two lines each
// (calloc aligns to 16 bytes; a large block comes from mmap 16 bytes into a page), and whose speed
// would then depend on where the allocator put them. eval's traces take it for its 2 MiB pages.
#ifndef MICRO_CALLOC_LINES_H
#define MICRO_CALLOC_LINES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

// From this size on, memory is asked for in 2 MiB pages where the kernel has them (transparent huge
// pages, on request): a cache of the model's whole context is ~13 MB, and faulting it in 4 KiB pages
// on a virtual machine was a sixth of scoring a 2,048-token text.
#define CALLOC_LINES_HUGE ((size_t)1 << 20)
#define CALLOC_LINES_HUGE_PAGE ((size_t)2 << 20)

static inline void *calloc_lines(size_t count, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(count, size, &bytes) || bytes > SIZE_MAX - CALLOC_LINES_HUGE_PAGE) return NULL;
    const size_t align = bytes >= CALLOC_LINES_HUGE ? CALLOC_LINES_HUGE_PAGE : 64;
    bytes = bytes ? (bytes + align - 1) / align * align : align; // aligned_alloc asks a multiple of the alignment
    void *p = aligned_alloc(align, bytes);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    if (align == CALLOC_LINES_HUGE_PAGE) (void)madvise(p, bytes, MADV_HUGEPAGE); // a hint: refused, nothing changes
#endif
    memset(p, 0, bytes);
    return p;
}

#endif
