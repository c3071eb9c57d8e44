// Decode at a full pool, measured (bench --batch, plate's panel (d)): a recording of one text's keys
// and values encoded into as many conversations as a pool holds, then batched decode steps timed.
#ifndef MICRO_HELD_DECODE_H
#define MICRO_HELD_DECODE_H

#include <stddef.h>

#include "kvpool.h"
#include "model.h"

// The keys and values (fp32, after RoPE) one text's tokens make at every position and layer, from
// an fp32 cache: what a conversation's cache holds, to be encoded into each held conversation.
// Under latent attention, what its two slots hold: the latent and the RoPE key (kv_layout_of).
typedef struct {
    int n, n_layers, k_dim, v_dim; // numbers per token and layer of the key and value slots
    int *tokens; // [n]
    float *k;    // [n][n_layers][k_dim]
    float *v;    // [n][n_layers][v_dim]
} KVRecording;

int kv_record(const Model *m, const int *tokens, int n, int n_threads, KVRecording *rec, char *err, size_t errlen);
void kv_recording_free(KVRecording *rec);

// Decode at a full pool, measured: conversations are admitted while the pool can hold them whole
// (at most max_conversations); conversation i will end at position end_i, from `hi` for the first
// down to `lo` for the last (all at `hi` when lo == hi), and its cache is filled to end_i − steps
// tokens by encoding the recording's keys and values through its codec, token by token as decode
// would (KIVI's window included); where no token settles (all but KIVI), conversations are filled
// at once on fill_threads threads. When all end at `hi` and the codecs can copy (kvpool_can_copy),
// only the first is encoded and the rest are its copies: the same bytes, in blocks of their own.
// Then `steps` batched decode steps on n_threads are timed.
typedef struct {
    int held;                    // conversations the pool held
    int steps;
    double seconds;              // all steps
    double tokens_per_s;         // held · steps / seconds
    double cache_bytes_per_step; // mean cache bytes attention read
    double attended_per_step;    // mean Σ over rows of the tokens each attends over (pos + 1)
    double weight_bytes;
    // With read_repeat > 0, after the steps: the best of read_repeat reads of the held caches alone
    // (pool_read.h), and the bytes read; 0 when not asked for or not measurable (a codec whose state
    // is several allocations).
    double read_seconds, read_bytes;
} HeldDecode;

int serve_held_decode(const Model *m, KVPool *pool, const KVRecording *rec, int max_conversations, int lo, int hi,
                      int steps, int n_threads, int fill_threads, int read_repeat, HeldDecode *out, char *err,
                      size_t errlen);

#endif
