// Small zeroed allocations, each starting on a cache line, carved out of 2 MiB chunks that the kernel
// is asked to back with huge pages: the paged pool's block states (src/kv/codecs/codec_core.h). A
// pool of many conversations holds tens of thousands of blocks of a few KB; from malloc each lay in
// 4 KiB pages of its own, and attention's walk through them waited on the TLB at nearly every block
// (docs/history/speed.md has the measurement). Objects of one size share chunks; a chunk is
// returned to the system when its last object is freed (one emptied chunk is kept for the next of
// any size), so a process holds about what it uses. Thread-safe (one lock: a block is taken once
// per 16 tokens).
#ifndef MICRO_SLAB_H
#define MICRO_SLAB_H

#include <stddef.h>

// Objects above this size come from calloc_lines (whole-context streams: 2 MiB pages of their own).
#define SLAB_MAX_OBJECT ((size_t)256 << 10)

// bytes > 0 zeroed bytes from a cache line on, or NULL when out of memory.
void *slab_calloc(size_t bytes);
// Frees what slab_calloc(bytes) gave (the same bytes, or them rounded up to a cache line); NULL does
// nothing.
void slab_free(void *p, size_t bytes);

#endif
