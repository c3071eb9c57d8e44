// The code store: a stream's packed B-bit codes, per head, in the layout its kernels read (quant.h,
// "Kernel layouts"): units of `unit` tokens (16 for token tiles, 4/B for token groups, 1 for
// rows). `int` keeps every token here; KIVI keeps its quantised part (codes only: each family
// keeps its own scales and minimums, per token or per group, and decides what a code means).
#ifndef MICRO_CODE_STORE_H
#define MICRO_CODE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"
#include "affine_kernels.h" // the kernels that read a store's codes (and llama.cpp's blocks)
#include "codec_core.h"

typedef struct {
    QuantLayout layout;
    int bits;
    int unit, units;   // tokens per unit, units per head (capacity rounded up)
    int n_heads;
    size_t row_bytes;  // packed codes of one head at one token
    size_t unit_bytes; // unit · row_bytes
    uint8_t *codes;    // [head][unit][unit_bytes]; tiles: [chunk of 32][B words][16 lanes] as uint32
} CodeStore;

// Zeroed codes for n_heads × capacity tokens (tokens of a unit not yet written decode to finite
// numbers, and token groups are OR-ed in). -1 when out of memory. TOKEN_GROUPS needs B = 1, 2, 4
// and head_dim a multiple of 32, TILES head_dim a multiple of 32.
int code_store_init(CodeStore *cs, QuantLayout layout, int bits, int n_heads, int head_dim, int capacity);
// The shape of such a store without its codes: every field but `codes` set, and the bytes the codes
// take returned, for a family that keeps them in an allocation of its own (int: one per pool block).
size_t code_store_shape(CodeStore *cs, QuantLayout layout, int bits, int n_heads, int head_dim, int capacity);
void code_store_free(CodeStore *cs);
// dst's codes made src's (stores of one shape).
void code_store_copy(CodeStore *dst, const CodeStore *src);

// Codes of numbers [32c, 32c + n) of one token, n < 32 only at the tail of a head_dim that is
// not a multiple of 32 (rows).
void code_store_put(CodeStore *cs, int head, int token, int c, const uint8_t *q, int n);
void code_store_get(const CodeStore *cs, int head, int token, int c, uint8_t *q, int n);

// Unit `unit` of one head (a token tile, token group or row).
static inline uint8_t *code_store_unit(const CodeStore *cs, int head, int unit) {
    return cs->codes + ((size_t)head * (size_t)cs->units + (size_t)unit) * cs->unit_bytes;
}

// For a family whose block states are one allocation (codec_core.h) with the codes `codes_at` bytes
// from the state, shaped as the first block's store `cs`: one head's codes of a chunk (from `offset`
// in a unit) in every block of the n tokens, found from the blocks' pointers (affine_chunk_at).
// Both such families (int, llama.cpp's blocks) ask for the next head's codes as they read their own
// (code_store_prefetch16) over blocks: heads after the first find theirs in cache (followed), and
// their kernels do not ask again: the bytes are at hand, and asking would only cost time.
static inline AffineChunk code_store_chunk_at(const CodecBlocks *b, const CodeStore *cs, size_t codes_at, int head,
                                              int n, size_t offset) {
    const size_t head_at = (size_t)head * (size_t)cs->units * cs->unit_bytes;
    AffineChunk ch = affine_chunk_at(b, n, codes_at + head_at + offset, cs->unit_bytes, cs->unit, cs->units);
    ch.followed = head > 0 && n > b->block;
    return ch;
}

// Asks for one head's codes of the 16 tokens from `local` in a block whose codes begin at `codes`.
// local is a multiple of 16, which every unit (16, 4/B or 1 tokens) divides: the codes begin
// local · row_bytes into the head's (no division by the unit).
static inline void code_store_prefetch16(const CodeStore *cs, const uint8_t *codes, int head, int local) {
    const uint8_t *p = codes + (size_t)head * (size_t)cs->units * cs->unit_bytes + (size_t)local * cs->row_bytes;
    for (size_t i = 0; i < QUANT_TILE * cs->row_bytes; i += CODEC_LINE) __builtin_prefetch(p + i);
}

#endif
