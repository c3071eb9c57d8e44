// The forward pass of decoding: rows of (sequence, position) pairs in, each row's key and value
// encoded into its sequence's paged cache, logits out. One step pushes every row through each
// weight matrix together (the weights are read once per step, not once per row), and each row's
// attention reads only its own sequence's blocks.
//
// Every number a row computes is the same whatever the other rows are and however many threads
// run: each output element is one dot product computed whole, in a fixed order, by one thread.
// So a sequence's logits do not depend on its batch companions (tests/test_batch.c).
#ifndef MICRO_FORWARD_H
#define MICRO_FORWARD_H

#include "kvpool.h"
#include "model.h"
#include "latent_mirror.h"
#include "span_mirror.h"

typedef struct ThreadPool ThreadPool;

typedef struct {
    KVSeq *seq; // the cache this row appends its key and value to and attends over
    int token;  // the input token
    int pos;    // its position: the tokens seq holds before this row
} BatchRow;

// Every buffer a step needs, sized once for at most max_rows rows at positions below `context` (no
// allocation per step).
typedef struct {
    const Model *model;
    int max_rows, context, n_threads;
    ThreadPool *pool;
    float *x;      // [row][dim] residual stream
    float *xb;     // [row][dim] normalised input of a sublayer
    float *xb2;    // [row][max(dim, q width)] attention output before Wo; then W2's output
    float *q;      // [row][n_heads*(head_dim + rope_dim)]
    float *k, *v;  // [row][the key and value slots' widths, kv_layout_of]: keys and values, or the
                   // latent and the RoPE key
    float *att_rope;   // latent attention: [row][n_heads][context] the RoPE key's part of the scores
    float *latent_q;   // [row][n_heads][latent_dim] each head's query in the latent's space
    float *latent_mix; // [row][n_heads][latent_dim] the latents mixed by its weights
    float *hb;     // [row][max(hidden, dim)] W1 h, then silu(W1 h) * W3 h; Wo's output before that
    float *hb2;    // [row][hidden] W3 h
    float *att;    // [row][n_heads][context] attention scores then weights
    float *att2;   // the fast evaluator's (span_mirror.h) second scores and weights, where a mirror has a
                   // second sum or correction rows: [thread][SPAN_TILE][att2_span], a task's scratch
                   // (a tile's rows), small enough to stay in cache
    size_t att2_span;
    float *logits; // [row][vocab]
    int *top_position; // [row][n_layers][n_heads]: the most-attended cached position of this step
    int track_top;     // fill top_position (eval's top1 agreement); serving turns it off
    int keep_layer;    // -1, or the layer whose attention weights row 0 keeps in kept_att (micro attention)
    float *kept_att;   // [n_heads][context]: that layer's weights of row 0, its first pos + 1 numbers
    float *rope_cos, *rope_sin; // [context][rotated/2]: head_dim, or rope_dim under latent attention
    // Spans (batch_enable_spans): the decoded cache their rows attend over, for streams that read back.
    int spans;
    SpanMirror mirror;           // multi-head and grouped-query attention
    LatentMirror latent_mirror;  // latent attention
    char err[160]; // why batch_forward returned NULL
} BatchForward;

// context: the positions served, 1..the model's; a short text's evaluator need not pay for the
// attention rows, RoPE tables and decoded mirror of the whole context.
int batch_init(BatchForward *b, const Model *m, int max_rows, int context, int n_threads, char *err, size_t errlen);
// One step: rows[r] appends to rows[r].seq at position rows[r].pos and attends over its first
// pos + 1 tokens, each sequence reserved for its rows (kvseq_reserve). Returns logits [n_rows][vocab].
// Either one row per sequence (serving: each row's attention reads its packed codes), or a span:
// every row of one sequence, at consecutive positions in order (evaluation, after
// batch_enable_spans). A span's rows are appended and settled in order, exactly as the decode loop
// would, and each attends over what the cache held at its own step, decoded once to floats
// (span_mirror.h); its numbers are the decode loop's to the bit (tests/test_eval_fast.c).
// NULL, with the reason in b->err, for a caller's mistake: a row at a position outside those served
// or beyond what its sequence reserved, more rows than batch_init's, a span without spans enabled.
float *batch_forward(BatchForward *b, const BatchRow *rows, int n_rows);
// Makes b take spans of sequences from `pool` (the decoded mirror's buffers). -1 with one line in err.
int batch_enable_spans(BatchForward *b, const KVPool *pool, char *err, size_t errlen);
void batch_free(BatchForward *b);

// The single-sequence decoder: the same forward with one row, over a pool holding one sequence.
typedef struct {
    BatchForward fwd;
    KVPool cache;
    KVSeq seq;
    int capacity; // positions the cache can hold
    int n_threads;
    BatchRow *span_rows; // [rows] of decoder_init_spans; NULL for a decoder of one row
    // Row 0 of fwd's buffers, for readers of one step (bench, inspect, eval).
    float *q, *xb2, *att, *logits, *rope_cos, *rope_sin;
    int *top_position;
} Decoder;

// k_spec / v_spec: the parsed specs (spec_parse of "fp32", "int:bits=4", ...). One line in err on failure.
// The cache is one block of `capacity` tokens per stream; decoder_init_paged takes blocks of `block`.
int decoder_init(Decoder *d, const Model *m, const CodecSpec *k_spec, const CodecSpec *v_spec, int capacity,
                 int n_threads, char *err, size_t errlen);
int decoder_init_paged(Decoder *d, const Model *m, const CodecSpec *k_spec, const CodecSpec *v_spec, int capacity, int block,
                       int n_threads, char *err, size_t errlen);
// The same decoder, also taking spans of up to `rows` consecutive tokens (decoder_forward_span).
int decoder_init_spans(Decoder *d, const Model *m, const CodecSpec *k_spec, const CodecSpec *v_spec, int capacity, int rows,
                       int n_threads, char *err, size_t errlen);
// Runs tokens[0, n) at positions pos, pos + 1, ... (pos == tokens already cached; n at most the rows
// given to decoder_init_spans) as one span: logits [n][vocab]; fwd.top_position holds each row's.
float *decoder_forward_span(Decoder *d, const int *tokens, int pos, int n);
// Starts a new sequence with an empty cache (same specs).
int decoder_reset(Decoder *d, char *err, size_t errlen);
// Runs one token at position pos (== tokens already cached) and returns logits[vocab]. The decoder
// reserves its whole capacity when made, so this cannot fail for a position below it; beyond it,
// NULL with the reason in d->fwd.err.
float *decoder_forward(Decoder *d, int token, int pos);
void decoder_free(Decoder *d);
// The cache's exact bytes and bits per cached number (metadata included); its normalised specs.
size_t decoder_cache_bytes(const Decoder *d);
double decoder_bits_per_element(const Decoder *d);
const char *decoder_spec(const Decoder *d, KVRole role);

// One head's attention over n cached tokens, read back from the encoded streams: scores, softmax
// (att holds n weights after), then the weighted sum of values into out[head_dim]; returns the first
// position of the largest weight. rope_cos/sin:
// the RoPE tables [position][head_dim/2] and rope_halves the model's pairing (rope.h), for keys a
// cache keeps before RoPE.
// next_k, next_v: the streams attention most likely reads next (NULL: unknown), whose first head
// some codecs' kernels ask for while they read the last one of these.
int attention_head(const PagedStream *ks, const PagedStream *vs, const PagedStream *next_k, const PagedStream *next_v,
                   int kv_head, const float *q, int rope_halves, const float *rope_cos, const float *rope_sin, float *att,
                   float *out, int n);
// One head of latent attention over n cached tokens, absorbed (batch_forward's): q the head's
// head_dim + rope_dim numbers (RoPE applied); scratch qt and mix of latent_dim numbers, att and
// att_rope of n (att holds the weights after); the head's head_dim outputs to out. Returns the first
// position of the largest weight.
int attention_latent_head(const Model *m, int layer, int head, const PagedStream *latent, const PagedStream *rope_key,
                          const float *q, float *qt, float *mix, float *att, float *att_rope, float *out, int n);
// Every head of one row, when attention_heads_fit: each head's numbers are attention_head's, att
// holding head h's n weights at att + h·stride, top[h] (unless top is NULL) the first position of its
// largest weight, and out the heads' mixes one after another. A codec
// with CodecOps.scores_heads reads each block once for all heads.
// attention_heads_fit: a key and value head per query head, and keys not kept before RoPE (which
// attention_head rotates as it reads them).
int attention_heads_fit(const ModelConfig *p, const PagedStream *ks);
void attention_heads(const PagedStream *ks, const PagedStream *vs, const PagedStream *next_k, const PagedStream *next_v,
                     int n_heads, const float *q, float *att, size_t stride, float *out, int n, int *top);

#endif
