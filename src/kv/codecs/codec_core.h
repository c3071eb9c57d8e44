// What every codec family shares outside its kernels: the shape check and the "read back"
// fallback for the calls attention does not make (scoring a value stream, mixing a key stream) and
// for shapes a family's kernels do not cover.
#ifndef MICRO_CODEC_CORE_H
#define MICRO_CODEC_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "calloc_lines.h"
#include "slab.h"
#include "kvcache.h"
#include "prefetch.h"
#include "quant.h"

// A family's operations table, its functions named prefix_append, prefix_scores, ..., prefix_by_read
// (settled and settle: functions, or NULL for a family whose tokens keep the form they were appended
// in).
#define CODEC_OPS(prefix, settled_fn, settle_fn) CODEC_OPS_WITH(prefix, settled_fn, settle_fn, prefix##_scores, prefix##_mix)
#define CODEC_OPS_WITH(prefix, settled_fn, settle_fn, scores_fn, mix_fn)                           \
    static const CodecOps prefix##_ops = {.append = prefix##_append, .settled = settled_fn,        \
                                          .settle = settle_fn, .scores = scores_fn, .mix = mix_fn, \
                                          .read = prefix##_read, .by_read = prefix##_by_read,      \
                                          .bytes = prefix##_bytes, .destroy = prefix##_destroy}

// The same for a family whose prefix_scores and prefix_mix read one state: they run block by block
// (codec_scores_per_block, codec_mix_per_block).
#define CODEC_OPS_PER_BLOCK(prefix, settled_fn, settle_fn)                                         \
    static void prefix##_scores_blocks(const CodecBlocks *b, int head, const float *q, float *out, int n) { \
        codec_scores_per_block(b, prefix##_scores, prefix##_ahead, head, q, out, n);               \
    }                                                                                              \
    static void prefix##_mix_blocks(const CodecBlocks *b, int head, const float *p, float *out, int n) { \
        codec_mix_per_block(b, prefix##_mix, prefix##_ahead, b->head_dim, head, p, out, n);        \
    }                                                                                              \
    CODEC_OPS_WITH(prefix, settled_fn, settle_fn, prefix##_scores_blocks, prefix##_mix_blocks)

// A stream's read(): the decoded vector of one head at one token.
typedef void (*CodecReadFn)(const void *state, int head, int token, float *out);

// 0 when n_heads, capacity >= 1 and head_dim is a positive multiple of `multiple`; else -1 with one
// line naming the family and the shape.
int codec_check_shape(const char *family, int n_heads, int head_dim, int capacity, int multiple, char *err,
                      size_t errlen);

// The block holding token j of a stream, and j's place in it.
static inline const void *codec_block(const CodecBlocks *b, int j, int *local) {
    if (j < b->block) { // the first block, and every token of a stream that is one block: no division
        *local = j;
        return b->states[0];
    }
    return b->states[quant_divmod(j, b->block, local)];
}

// What a kernel asks for as "the next head" while it reads head *head at token t: head + 1 of t's
// block, or at the last head the first head of the stream attention reads next (b->next, at the same
// token, if it has one). Sets *head and *local; NULL when there is nothing to ask for.
static inline const void *codec_next_head_block(const CodecBlocks *b, int n_heads, int *head, int t, int *local) {
    if (*head + 1 < n_heads) {
        ++*head;
        return codec_block(b, t, local);
    }
    if (!b->next || t >= b->next_n) return NULL;
    const CodecBlocks next = {b->next, b->block, b->head_dim, NULL, 0};
    *head = 0;
    return codec_block(&next, t, local);
}

// For kernels that ask ahead a tile (16 tokens) at a time: the block holding tile k of the n tokens,
// or past their end tile k − ⌈n/16⌉ of the stream attention reads next (b->next, whose first tokens
// it reads soon after), and the tile's first token's place in that block; NULL past both.
static inline const void *codec_ahead_block(const CodecBlocks *b, int k, int n, int *local) {
    const int tiles = (n + 15) / 16;
    if (k < tiles) return codec_block(b, k * 16, local);
    const int t = (k - tiles) * 16;
    if (!b->next || t >= b->next_n) return NULL;
    const CodecBlocks next = {b->next, b->block, b->head_dim, NULL, 0};
    return codec_block(&next, t, local);
}

// Token j's place in its block.
static inline int codec_in_block(const CodecBlocks *b, int j) {
    int at;
    (void)quant_divmod(j, b->block, &at);
    return at;
}

// For a family whose kernels read one state at a time: each block in turn. Scores are per token;
// mix sums each block on its own and adds the blocks' sums in order (head_dim <= MICRO_MAX_WIDTH).
// ahead (or NULL) asks for what fn will read of one head in a state: it is called for the block two
// on, whose state was asked for two blocks before (each call stalls on DRAM at its start otherwise:
// a pool's blocks lie anywhere, and fn's own prefetches end at its block).
typedef void (*CodecStateScoresFn)(const void *state, int head, const float *q, float *out, int n);
typedef void (*CodecStateAheadFn)(const void *state, int head);
void codec_scores_per_block(const CodecBlocks *b, CodecStateScoresFn fn, CodecStateAheadFn ahead, int head,
                            const float *q, float *out, int n);
void codec_mix_per_block(const CodecBlocks *b, CodecStateScoresFn fn, CodecStateAheadFn ahead, int head_dim, int head,
                         const float *p, float *out, int n);
// A stream read back token by token, each token from its block (head_dim <= MICRO_MAX_WIDTH):
// out[j] = Σ_d q[d] · x̂_j[d] in order of d, or out[d] = Σ_j p[j] · x̂_j[d] in order of j.
void codec_scores_by_read(const CodecBlocks *b, CodecReadFn read, int head_dim, int head, const float *q, float *out,
                          int n);
void codec_mix_by_read(const CodecBlocks *b, CodecReadFn read, int head_dim, int head, const float *p, float *out,
                       int n);

// Rows of packed bytes, one per (token, head): the store of a family that keeps each head's vector at
// a token whole (mx, nvfp4, turboquant, qjl). It is the first member of the family's state, so that
// one destroy() and one bytes() serve them all.
typedef struct {
    int n_heads, length;  // length: tokens appended
    size_t row_bytes;     // one head at one token
    uint8_t *rows;        // [token][head][row_bytes]
} CodecRows;

static inline uint8_t *codec_row(const CodecRows *r, int head, int t) {
    return r->rows + ((size_t)t * r->n_heads + head) * r->row_bytes;
}
// Zeroed rows for `capacity` tokens; -1 when out of memory.
int codec_rows_alloc(CodecRows *r, int n_heads, size_t row_bytes, int capacity);
// destroy() and bytes() of a state whose first member is its CodecRows (and owns nothing else).
void codec_rows_destroy(void *state);
size_t codec_rows_bytes(const void *state);
// copy() of such a state: its rows (the tokens appended) and its length, all the state changes.
void codec_rows_copy(void *dst, const void *src);

// The operations of a family whose state begins with its CodecRows and whose attention reads back.
#define CODEC_ROWS_OPS_BY_READ(prefix)                                                             \
    static void prefix##_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) { \
        codec_scores_by_read(b, prefix##_read, b->head_dim, head, q, out, n);                      \
    }                                                                                              \
    static void prefix##_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {  \
        codec_mix_by_read(b, prefix##_read, b->head_dim, head, p, out, n);                         \
    }                                                                                              \
    static const CodecOps prefix##_ops = {.append = prefix##_append, .scores = prefix##_scores,    \
                                          .mix = prefix##_mix, .read = prefix##_read, .reads_back = 1, \
                                          .bytes = codec_rows_bytes, .copy = codec_rows_copy,             \
                                          .destroy = codec_rows_destroy}

// A pool block's state is one allocation, cache-line aligned: the family's struct, then its arrays
// (codes, scales, ...), each from a cache line on (codec_line). In a pool every block is a state, and
// the kernels find a block's arrays from its pointer and the first block's shape (every block's):
// reading each block's struct for its pointers was a cache miss, waited on before the codes' own, and
// a calloc'd tile began 16 bytes into a line. A state is allocated with codec_state_alloc (zeroed,
// NULL when out of memory): a block's from the slab's 2 MiB pages (slab.h), a whole stream's from
// calloc_lines; the family keeps its extent, which codec_state_free takes back.
#define CODEC_LINE 64
static inline size_t codec_line(size_t bytes) { return (bytes + CODEC_LINE - 1) / CODEC_LINE * CODEC_LINE; }
static inline void *codec_state_alloc(size_t bytes) { return slab_calloc(bytes); }
static inline void codec_state_free(void *state, size_t extent) { slab_free(state, extent); }
// A one-allocation state's copy (CodecOps.copy) of everything past its struct, from `at` (its codes'
// offset) to its extent: codes, scales and the rest. The family copies its struct's changing fields.
static inline void codec_payload_copy(void *dst, const void *src, size_t at, size_t extent) {
    memcpy((uint8_t *)dst + at, (const uint8_t *)src + at, extent - at);
}

// The end of a family's create(): the state when its allocations succeeded; else the state
// destroyed, one line in err, and NULL.
void *codec_created(void *state, int allocated, void (*destroy)(void *), char *err, size_t errlen);

// One state (a contiguous stream, or one block of a pool's) as the blocks the kernels walk: one block
// longer than any stream, yet small enough that n + block − 1 does not overflow.
#define CODEC_ONE_BLOCK(state, head_dim) (&(const CodecBlocks){(const void *const[]){(state)}, 1 << 30, (head_dim), NULL, 0})

#endif
