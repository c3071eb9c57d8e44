// The token-by-token decoder: one token in, its key and value into the cache, logits out.
#ifndef MICRO_FORWARD_H
#define MICRO_FORWARD_H

#include "kvcache.h"
#include "model.h"

typedef struct ThreadPool ThreadPool;

// Every buffer one decode step needs, sized once up front (no allocation per token).
typedef struct {
    const Model *model;
    KVCache cache;
    int capacity;  // positions the cache can hold
    int n_threads;
    ThreadPool *pool;
    float *x;      // [dim] residual stream
    float *xb;     // [dim] normalised input of a sublayer
    float *xb2;    // [dim] attention output before Wo
    float *q;      // [n_heads*head_dim]
    float *k;      // [n_kv_heads*head_dim]
    float *v;      // [n_kv_heads*head_dim]
    float *hb;     // [hidden] W1 h, then silu(W1 h) * W3 h
    float *hb2;    // [hidden] W3 h
    float *att;    // [n_heads, capacity] attention scores then weights
    float *logits; // [vocab]
    int *top_position; // [n_layers, n_heads]: the most-attended cached position of this step
    float *rope_cos, *rope_sin; // [capacity, head_dim/2]
} Decoder;

// k_spec / v_spec are codec spec strings ("fp32", "int:bits=4", ...). One line in err on failure.
int decoder_init(Decoder *d, const Model *m, const char *k_spec, const char *v_spec, int capacity,
                 int n_threads, char *err, size_t errlen);
// Starts a new sequence with an empty cache (same specs).
int decoder_reset(Decoder *d, char *err, size_t errlen);
// Runs one token at position pos (== tokens already cached) and returns logits[vocab].
float *decoder_forward(Decoder *d, int token, int pos);
void decoder_free(Decoder *d);

// One head's attention over n cached tokens, read back from the encoded streams: scores, softmax
// (att holds n weights after), then the weighted sum of values into out[head_dim].
void attention_head(const KVStream *ks, const KVStream *vs, int kv_head, const float *q, float *att, float *out,
                    int n);

#endif
