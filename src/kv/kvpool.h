// The paged KV cache (vLLM's PagedAttention on the CPU): one pool with a fixed byte budget for every
// sequence, cut into blocks of `block` tokens per layer and stream. A block is a codec stream of
// `block` tokens (kvcache.h), so it holds its tokens' packed codes and their metadata in the
// stream's codec, and its bytes are the codec's own count. A sequence owns a block table per layer
// and stream; blocks are taken from the budget as it grows and given back when it ends.
//
// The single-sequence decoder is this pool with one sequence (and, by default, one block the size of
// its context); the serving engine is the same pool with many.
#ifndef MICRO_KVPOOL_H
#define MICRO_KVPOOL_H

#include <stddef.h>

#include "kvcache.h"
#include "model.h"

// What a model's cache holds per layer and token: two slots, [KV_ROLE_KEY] and [KV_ROLE_VALUE],
// each a stream of n_heads × head_dim numbers whose codec encodes them in `role`. Multi-head and
// grouped-query attention: keys and values, n_kv_heads × head_dim each, in their own roles. Latent
// attention: the key slot holds the latent (1 × latent_dim), the value slot the RoPE key (1 ×
// rope_dim), both encoded as keys (each is dotted with queries; attention mixes the latent too).
typedef struct {
    int n_heads[2], head_dim[2];
    KVRole role[2];
} KVLayout;
KVLayout kv_layout_of(const ModelConfig *c);
// Whether slot (KV_ROLE_KEY or KV_ROLE_VALUE) of c's cache takes spec: the spec against the slot's
// heads, width and role, and c's context (kvstream_check_spec_shape). 0, or -1 with one line in err.
int kv_layout_check_spec(const ModelConfig *c, KVRole slot, const char *spec, char *err, size_t errlen);
// Both slots; under latent attention the line names the stream that cannot take its spec (the
// latent's is --cache or --k, the RoPE key's --v).
int kv_layout_check_specs(const ModelConfig *c, const char *k_spec, const char *v_spec, char *err, size_t errlen);
// Keys and values alike: n_heads × head_dim each, in their own roles.
KVLayout kv_layout_uniform(int n_heads, int head_dim);
// The model's shape with multi-head attention (a key and value head per query head): what pools of
// "N fp16 conversations" are sized by, so that every attention gets the same bytes.
KVLayout kv_layout_multi_head(const ModelConfig *c);

// What one block of a stream (keys or values of one layer) costs the budget. A codec whose tokens
// change form (KIVI keeps its newest tokens in fp16 and quantises them later) has a block cost
// while any token of the block may still be full precision, and a smaller one once all are final.
typedef struct {
    char spec[SPEC_NORMALISED]; // normalised codec spec
    size_t open_bytes;          // a full block whose tokens are not yet final (the most it can hold)
    size_t settled_bytes;       // a full block whose tokens are all final
    int settles;                // 1 when the codec has a settle rule (open_bytes >= settled_bytes)
    size_t first_extra;         // what a sequence's first block costs more (sink tokens kept exact)
} PoolStreamCost;

typedef struct {
    int n_layers;
    KVLayout layout;
    int block;     // tokens per block
    int context;   // the longest sequence (the model's context)
    size_t budget; // bytes all blocks together may hold
    size_t used;   // bytes charged to the blocks now allocated
    size_t peak;   // the most ever charged
    long blocks;   // blocks allocated now (all layers and streams)
    PoolStreamCost cost[2]; // per slot: [KV_ROLE_KEY], [KV_ROLE_VALUE]
    CodecSpec spec[2];      // the specs as given: each new block is made from them, no text parsed
    KVStream rule[2];       // an empty block of each slot: its codec's settle rule
} KVPool;

// One stream (keys or values of one layer) of one sequence: its block table.
typedef struct {
    KVStream *blocks; // blocks[i] holds tokens [i·block, (i+1)·block)
    const void **states; // blocks[i].state: the block table as the codec's kernels walk it
    int n_blocks;     // allocated (the last may be partly filled or still empty)
    int length;       // tokens appended
    int settled;      // tokens [0, settled) are in their final form
    int settled_blocks; // blocks [0, settled_blocks) are charged at settled_bytes
} PagedStream;

// A sequence's cache: a stream per layer and role.
typedef struct {
    KVPool *pool;
    PagedStream *k, *v; // [n_layers]
    int reserved;       // tokens every stream has blocks for
} KVSeq;

// A pool that cannot hold one block of every layer and stream is refused (-1, one line in err).
// block: tokens per block, a multiple of 16 (the kernels' token tiles lie whole in a block) or the
// whole context. The specs are checked here (and must fit blocks of `block` tokens: kivi's groups).
// The block rule alone (kvpool_init's first check), for commands to check before any work.
int kvpool_check_block(int block, int context, char *err, size_t errlen);
int kvpool_init_layout(KVPool *p, int n_layers, const KVLayout *layout, int block, int context, size_t budget,
                       const CodecSpec *k_spec, const CodecSpec *v_spec, char *err, size_t errlen);
// kvpool_init_layout for a model's cache (kv_layout_of): its layers and slots.
int kvpool_init_model(KVPool *p, const ModelConfig *c, int block, int context, size_t budget, const CodecSpec *k_spec,
                      const CodecSpec *v_spec, char *err, size_t errlen);
// kvpool_init_layout with keys and values alike (kv_layout_uniform).
int kvpool_init(KVPool *p, int n_layers, int n_heads, int head_dim, int block, int context, size_t budget,
                const CodecSpec *k_spec, const CodecSpec *v_spec, char *err, size_t errlen);
void kvpool_free(KVPool *p);
// The bytes of blocks that hold `tokens` tokens of one sequence, every token final except the
// newest ones a codec keeps open: what a sequence of that length is charged at most.
size_t kvpool_sequence_bytes(const KVPool *p, int tokens);
// Bytes one block of every layer and stream costs while open: the unit of growth.
size_t kvpool_block_set_bytes(const KVPool *p);
// A budget that holds exactly `sequences` sequences of `tokens` tokens.
size_t kvpool_budget_for(const KVPool *p, int sequences, int tokens);

void kvseq_init(KVSeq *s, KVPool *p);
// Makes every stream able to hold `tokens` tokens, taking blocks from the pool. All or nothing:
// -1 (nothing taken) when the budget lacks the bytes or the blocks cannot be created (err says which).
int kvseq_reserve(KVSeq *s, int tokens, char *err, size_t errlen);
// 1 when both slots' codecs can copy a state (CodecOps.copy), so that kvseq_copy can.
int kvpool_can_copy(const KVPool *p);
// dst (empty, of src's pool) made a copy of src: blocks of its own holding the same bytes, charged
// what src is charged, so that everything dst does next gives src's bits (decoding many
// conversations of one text without encoding each). All or nothing: -1 with one line in err (the
// budget lacks src's charge, a codec cannot copy, or memory ran out), dst still empty.
int kvseq_copy(KVSeq *dst, const KVSeq *src, char *err, size_t errlen);
// Appends one token's keys and values (each its slot's n_heads · head_dim) to a layer; its block must
// be reserved.
void kvseq_append(KVSeq *s, int layer, const float *k, const float *v);
// After the step's attention of this layer: tokens take their final form and blocks whose tokens
// are all final are charged their smaller cost.
void kvseq_end_step(KVSeq *s, int layer);
// Gives every block back to the pool; the sequence is empty (and may be used again).
void kvseq_release(KVSeq *s);
int kvseq_length(const KVSeq *s);

// Exact bytes held by the sequence's tokens (all codecs' bytes()).
size_t kvseq_bytes(const KVSeq *s);
size_t paged_stream_bytes(const PagedStream *ps);

// Attention reads a stream through its block table (the codec's kernels walk it).
// out[j] = q · k̂_j for tokens j in [0, n).
void paged_scores(const PagedStream *ps, int head, const float *q, float *out, int n);
// out[d] = Σ_j p[j] · v̂_j[d] over j in [0, n).
void paged_mix(const PagedStream *ps, int head, const float *p, float *out, int n);
// The fast evaluator's mirror (span_mirror.h) finishing a row with the role's MirrorOps: post's
// values from the sums (p the weights of the first ops->first tokens), fix_scores' keys.
void paged_mirror_post(const PagedStream *ps, const MirrorOps *ops, int head, const float *p, const float *acc,
                       const float *acc2, float *out, int n);
void paged_mirror_fix_scores(const PagedStream *ps, const MirrorOps *ops, int head, const float *q, float *out, int n);
// The same, told which stream attention reads next (NULL: none), whose first head the kernels of
// some codecs ask for while they read the last head of this one.
void paged_scores_then(const PagedStream *ps, const PagedStream *next, int head, const float *q, float *out, int n);
void paged_mix_then(const PagedStream *ps, const PagedStream *next, int head, const float *p, float *out, int n);
// Every head of one row (n_heads queries of head_dim, scores of head h to out + h·stride; weights
// of head h at p + h·stride, mixes to out + h·head_dim): the codec's scores_heads / mix_heads where
// it has them, else head by head. The same numbers either way.
void paged_scores_heads(const PagedStream *ps, const PagedStream *next, int n_heads, const float *q, float *out,
                        size_t stride, int n);
void paged_mix_heads(const PagedStream *ps, const PagedStream *next, int n_heads, const float *p, size_t stride,
                     float *out, int n);
void paged_read(const PagedStream *ps, int head, int token, float *out);
// Scores of keys kept before RoPE (KVStream.prerope): each key read back, rotated by RoPE at its
// position (rope_cos/sin [position][head_dim/2], pairs as rope_halves says: rope.h), then dotted with q.
void paged_scores_rope(const PagedStream *ps, int head, const float *q, int rope_halves, const float *rope_cos,
                       const float *rope_sin, float *out, int n);

#endif
