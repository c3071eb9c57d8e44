// A small serving engine in the manner of vLLM: a seeded workload of conversations, a paged cache
// pool shared by all of them, and continuous batching. Every step advances each running
// conversation by one token (its next prompt token, or the token it generates); a waiting
// conversation is admitted when the pool has the blocks for its prompt; when a running one cannot
// grow, the newest running one is preempted: its blocks are freed and it is recomputed later from
// its tokens so far (vLLM's recompute preemption). Replies are greedy (the most likely byte, the
// lowest on a tie), so a conversation's tokens and losses depend only on the model, the cache
// scheme and its prompt: never on its companions (batch invariance) or on being preempted.
#ifndef MICRO_SERVE_H
#define MICRO_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool.h"
#include "model.h"

typedef struct {
    int prompt; // tokens of its prompt, BOS included
    int reply;  // tokens it generates
    size_t text_at; // where its prompt's bytes start in the workload's text (read cyclically)
} Conversation;

typedef enum { WORKLOAD_FIXED, WORKLOAD_CHAT } WorkloadKind;

typedef struct {
    Conversation *conversations;
    int n;
    const uint8_t *text; // prompt bytes (not owned)
    size_t text_len;
    // Under a model's own tokenizer: the prompts' ids instead (not owned), read cyclically from
    // text_at % n_ids, after bos when bos >= 0. NULL: micro's bytes, BOS first.
    const int32_t *ids;
    size_t n_ids;
    int32_t bos;
} Workload;

// n conversations from seed. FIXED: every one `length` tokens, half prompt and half reply. CHAT:
// prompt and reply lengths uniform on 1..321 and 1..675 (means 161 and 338, KIVI's ShareGPT
// setting), each cut so that prompt + reply <= length. text_len: the prompt tokens the text holds
// (its bytes; or, with text NULL, the ids the caller sets in w->ids next), at least 1. -1 on no memory.
int workload_make(Workload *w, WorkloadKind kind, int n, int length, uint64_t seed, const uint8_t *text,
                  size_t text_len);
void workload_free(Workload *w);

typedef struct {
    int conversations_max;     // held (running) at once, at most
    double conversations_mean; // held at once, mean over steps
    long preemptions;
    long steps;
    long tokens;            // rows processed (every token of every conversation, recomputed ones too)
    long recomputed;        // of them, tokens processed again after a preemption
    double seconds;         // wall time of all steps
    double step_ms_p50, step_ms_p99;
    double pool_utilisation;     // mean over steps: bytes holding tokens / pool budget
    double pool_waste_blocks;    // most, over steps, of (charged − held) bytes / one block per running stream
    double cache_bytes_per_step; // mean over steps: cache bytes attention read
    double weight_bytes;         // read once per step
    // Steps at long context: every running conversation past `long_from` positions, as many as
    // max_batch running (the pool's steady state the speed targets are about).
    long long_steps;
    double long_seconds, long_tokens, long_bytes;
} ServeStats;

// What each conversation produced, for tests: tokens[i] (prompt + reply) and nll[i][t] of token t+1.
typedef struct {
    int **tokens;
    double **nll;
} ServeTrace;

typedef void (*ServeProgress)(void *ctx, long step, int running, long done_tokens, long total_tokens, long preemptions);

typedef struct {
    int max_batch;   // conversations running at once, at most
    int n_threads;
    int long_from;   // positions from which a step counts as long context (0: none)
    ServeProgress progress; // called after every step (may be NULL)
    void *progress_ctx;
} ServeConfig;

// Whether every conversation of the workload fits the model's context and, alone, the pool's budget
// (with a block per stream of slack): 0, else -1 with one line. serve_run checks it first.
int serve_fits(const KVPool *pool, const Workload *w, char *err, size_t errlen);

// Runs the workload to the end through `pool` (empty, its budget enough for the longest
// conversation alone: else -1 with one line). trace may be NULL.
int serve_run(const Model *m, KVPool *pool, const Workload *w, const ServeConfig *cfg, ServeStats *st,
              ServeTrace *trace, char *err, size_t errlen);
void serve_trace_free(ServeTrace *t, int n);

#endif
