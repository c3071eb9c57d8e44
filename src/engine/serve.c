// The serving loop: admission, growth with preemption, one batched step, greedy replies. See serve.h.
#include "serve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "clock.h"
#include "exp_fixed.h"
#include "threadpool.h"

// xorshift64*: the workload's lengths and text offsets, the same for a seed on every machine.
static uint64_t next_random(uint64_t *s) {
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

// Uniform on 1..hi.
static int uniform_1(uint64_t *s, int hi) { return 1 + (int)(next_random(s) % (uint64_t)hi); }

int workload_make(Workload *w, WorkloadKind kind, int n, int length, uint64_t seed, const uint8_t *text,
                  size_t text_len) {
    memset(w, 0, sizeof *w);
    w->conversations = calloc((size_t)(n > 0 ? n : 1), sizeof *w->conversations);
    if (!w->conversations) return -1;
    w->n = n, w->text = text, w->text_len = text_len;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull; // never 0
    for (int i = 0; i < n; i++) {
        Conversation *c = &w->conversations[i];
        if (kind == WORKLOAD_FIXED) {
            c->prompt = length / 2 > 0 ? length / 2 : 1;
            c->reply = length - c->prompt;
        } else {
            c->prompt = uniform_1(&s, 321);
            c->reply = uniform_1(&s, 675);
            if (c->prompt > length) c->prompt = length;
            if (c->prompt + c->reply > length) c->reply = length - c->prompt;
        }
        c->text_at = (size_t)(next_random(&s) % (uint64_t)text_len);
    }
    return 0;
}

void workload_free(Workload *w) {
    free(w->conversations);
    memset(w, 0, sizeof *w);
}

// ---------------------------------------------------------------------------------------------

enum { WAITING, RUNNING, DONE };

typedef struct {
    KVSeq seq;
    int *tokens;  // [total]: the prompt, then each reply token as it is generated
    double *nll;  // [total]: nll[t] = −log p(tokens[t+1] | tokens[0..t])
    int total;    // prompt + reply
    int known;    // tokens known so far (prompt + generated)
    int pos;      // tokens cached: the next row's position
    int computed; // the most positions ever computed (recomputation re-runs [pos, computed))
    int state;
} Sequence;


static int compare_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// The value below which a share q of the sorted values lie (nearest rank).
static double percentile(const double *sorted, long n, double q) {
    if (n == 0) return 0;
    long i = (long)ceil(q * (double)n) - 1;
    return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

// log-softmax of one row of logits at `token`, in double (exp_fixed: the same bits everywhere).
static double log_prob(const float *logits, int vocab, int token) {
    double max = logits[0], sum = 0;
    for (int i = 1; i < vocab; i++) max = logits[i] > max ? logits[i] : max;
    for (int i = 0; i < vocab; i++) sum += exp_fixed((double)logits[i] - max);
    return (double)logits[token] - max - log(sum);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) best = x[i] > x[best] ? i : best;
    return best;
}

typedef struct {
    Sequence *seqs;
    int n;
    int *waiting; // queue of sequence indices; preempted ones go back to its front
    int n_waiting;
    int *running; // in order of admission: the last is the newest
    int n_running;
} Scheduler;

static void preempt_newest(Scheduler *s, long *preemptions) {
    const int i = s->running[--s->n_running];
    Sequence *q = &s->seqs[i];
    kvseq_release(&q->seq);
    q->pos = 0;
    q->state = WAITING;
    memmove(s->waiting + 1, s->waiting, sizeof(int) * (size_t)s->n_waiting);
    s->waiting[0] = i;
    s->n_waiting++;
    (*preemptions)++;
}

static int workload_longest(const Workload *w) {
    int longest = 0;
    for (int i = 0; i < w->n; i++) {
        const int total = w->conversations[i].prompt + w->conversations[i].reply;
        longest = total > longest ? total : longest;
    }
    return longest;
}

int serve_fits(const KVPool *pool, const Workload *w, char *err, size_t errlen) {
    const int longest = workload_longest(w);
    if (longest > pool->context) {
        snprintf(err, errlen, "a conversation of %d tokens is longer than the model's context (%d)", longest,
                 pool->context);
        return -1;
    }
    // The longest conversation alone must fit, with one block per stream of slack for the step in
    // which a block is taken before the previous one's tokens settle.
    const size_t alone = kvpool_sequence_bytes(pool, longest) + kvpool_block_set_bytes(pool);
    if (alone > pool->budget) {
        snprintf(err, errlen,
                 "a pool of %.2f MB cannot hold one conversation of %d tokens in %s / %s (%.2f MB): give a "
                 "larger --pool-mb",
                 (double)pool->budget / 1e6, longest, pool->cost[0].spec, pool->cost[1].spec, (double)alone / 1e6);
        return -1;
    }
    return 0;
}

int serve_run(const Model *m, KVPool *pool, const Workload *w, const ServeConfig *cfg, ServeStats *st,
              ServeTrace *trace, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    const int vocab = m->config.vocab_size, n = w->n;
    if (serve_fits(pool, w, err, errlen)) return -1;
    BatchForward fwd;
    const int max_batch = cfg->max_batch < n ? cfg->max_batch : n > 0 ? n : 1;
    // The forward's buffers for the longest conversation (serve_fits: within the context), not the context.
    const int longest = workload_longest(w);
    if (batch_init(&fwd, m, max_batch, longest > 0 ? longest : 1, cfg->n_threads, err, errlen)) return -1;
    fwd.track_top = 0;
    Scheduler s = {0};
    s.seqs = calloc((size_t)(n > 0 ? n : 1), sizeof *s.seqs);
    s.waiting = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    s.running = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    BatchRow *rows = calloc((size_t)max_batch, sizeof *rows);
    int *row_seq = calloc((size_t)max_batch, sizeof(int));
    long total_tokens = 0;
    for (int i = 0; i < n; i++) total_tokens += w->conversations[i].prompt + w->conversations[i].reply;
    // One step per token of the longest chain of work at worst; the list grows as needed.
    long cap_steps = 1024, n_steps = 0;
    double *step_s = malloc(sizeof(double) * (size_t)cap_steps);
    int status = -1;
    if (!s.seqs || !s.waiting || !s.running || !rows || !row_seq || !step_s) goto oom;
    for (int i = 0; i < n; i++) {
        Sequence *q = &s.seqs[i];
        const Conversation *c = &w->conversations[i];
        q->total = c->prompt + c->reply;
        q->tokens = malloc(sizeof(int) * (size_t)q->total);
        q->nll = calloc((size_t)q->total, sizeof(double));
        if (!q->tokens || !q->nll) goto oom;
        if (w->ids) { // a vocabulary of its own: its ids, after its BOS if it has one
            const int first = w->bos >= 0;
            if (first) q->tokens[0] = w->bos;
            for (int t = first; t < c->prompt; t++) q->tokens[t] = w->ids[(c->text_at + (size_t)(t - first)) % w->n_ids];
        } else {
            q->tokens[0] = MICRO_BOS;
            for (int t = 1; t < c->prompt; t++) {
                // A BOS byte in the text would end the document: the prompt skips it.
                uint8_t b = w->text[(c->text_at + (size_t)t - 1) % w->text_len];
                q->tokens[t] = b == MICRO_BOS ? ' ' : b;
            }
        }
        q->known = c->prompt;
        kvseq_init(&q->seq, pool);
        s.waiting[s.n_waiting++] = i;
    }
    st->weight_bytes = (double)m->n_params * sizeof(float);
    double held_sum = 0, util_sum = 0, bytes_sum = 0;
    long done_tokens = 0;
    while (s.n_waiting > 0 || s.n_running > 0) {
        // 1. Admission, first come first served: the head of the queue is admitted when the pool has
        // the bytes of every token it knows (its prompt, or all it had before a preemption) beside
        // what the running ones still need for theirs, or nobody behind it is. Blocks are then taken
        // token by token as the prompt is read, so a block is charged only once it holds tokens.
        size_t promised = 0;
        for (int r = 0; r < s.n_running; r++) {
            const Sequence *q = &s.seqs[s.running[r]];
            if (q->pos < q->known)
                promised += kvpool_sequence_bytes(pool, q->known) - kvpool_sequence_bytes(pool, q->pos);
        }
        while (s.n_waiting > 0 && s.n_running < max_batch) {
            Sequence *q = &s.seqs[s.waiting[0]];
            const size_t need = kvpool_sequence_bytes(pool, q->known);
            if (pool->used + promised + need > pool->budget) break;
            promised += need;
            q->state = RUNNING;
            s.running[s.n_running++] = s.waiting[0];
            memmove(s.waiting, s.waiting + 1, sizeof(int) * (size_t)--s.n_waiting);
        }
        // 2. Growth, oldest first: a sequence that cannot have its next token's blocks preempts the
        // newest running one (itself, when it is the newest).
        for (int r = 0; r < s.n_running; r++) {
            Sequence *q = &s.seqs[s.running[r]];
            while (kvseq_reserve(&q->seq, q->pos + 1, err, errlen)) {
                const int newest = s.running[s.n_running - 1];
                preempt_newest(&s, &st->preemptions);
                if (newest == (int)(q - s.seqs)) break;
            }
        }
        if (s.n_running == 0) {
            // Nothing could run: only possible when the pool cannot hold the head of the queue,
            // which the check above excludes; stop rather than loop.
            snprintf(err, errlen, "the pool could not run any conversation");
            goto done;
        }
        // 3. One step: a row per running sequence.
        for (int r = 0; r < s.n_running; r++) {
            Sequence *q = &s.seqs[s.running[r]];
            rows[r] = (BatchRow){&q->seq, q->tokens[q->pos], q->pos};
            row_seq[r] = s.running[r];
        }
        const int n_rows = s.n_running;
        const double t0 = seconds_now();
        const float *logits = batch_forward(&fwd, rows, n_rows);
        const double dt = seconds_now() - t0;
        if (!logits) {
            snprintf(err, errlen, "serving: %s", fwd.err);
            goto done;
        }
        // 4. Book-keeping: what attention read, what the pool holds.
        size_t read = 0;
        int long_step = cfg->long_from > 0 && n_rows == max_batch;
        for (int r = 0; r < n_rows; r++) {
            read += kvseq_bytes(rows[r].seq);
            long_step = long_step && rows[r].pos >= cfg->long_from;
        }
        size_t held = read;
        const size_t charged = pool->used;
        held_sum += n_rows;
        util_sum += (double)held / (double)pool->budget;
        bytes_sum += (double)read;
        const double block_stream = (double)(pool->cost[0].open_bytes + pool->cost[1].open_bytes) / 2.0;
        const double waste = ((double)charged - (double)held) / (block_stream * 2.0 * pool->n_layers * n_rows);
        if (waste > st->pool_waste_blocks) st->pool_waste_blocks = waste;
        if (n_rows > st->conversations_max) st->conversations_max = n_rows;
        if (long_step) {
            st->long_steps++;
            st->long_seconds += dt;
            st->long_tokens += n_rows;
            st->long_bytes += (double)read + st->weight_bytes;
        }
        if (n_steps == cap_steps) {
            cap_steps *= 2;
            double *grown = realloc(step_s, sizeof(double) * (size_t)cap_steps);
            if (!grown) goto oom;
            step_s = grown;
        }
        step_s[n_steps++] = dt;
        st->seconds += dt;
        st->tokens += n_rows;
        // 5. Each row's next token: the prompt's (teacher forcing) or the greedy reply.
        for (int r = 0; r < n_rows; r++) {
            Sequence *q = &s.seqs[row_seq[r]];
            const float *lg = logits + (size_t)r * vocab;
            if (q->pos < q->computed) st->recomputed++;
            if (q->pos + 1 < q->total) {
                if (q->pos + 1 == q->known) q->tokens[q->known++] = argmax(lg, vocab);
                q->nll[q->pos] = -log_prob(lg, vocab, q->tokens[q->pos + 1]);
            }
            q->pos++;
            if (q->pos > q->computed) q->computed = q->pos, done_tokens++;
        }
        // 6. Finished conversations give their blocks back; the running list keeps its order.
        int kept = 0;
        for (int r = 0; r < s.n_running; r++) {
            Sequence *q = &s.seqs[s.running[r]];
            if (q->pos == q->total) {
                kvseq_release(&q->seq);
                q->state = DONE;
            } else {
                s.running[kept++] = s.running[r];
            }
        }
        s.n_running = kept;
        if (cfg->progress)
            cfg->progress(cfg->progress_ctx, n_steps, n_rows, done_tokens, total_tokens, st->preemptions);
    }
    st->steps = n_steps;
    if (n_steps > 0) {
        st->conversations_mean = held_sum / (double)n_steps;
        st->pool_utilisation = util_sum / (double)n_steps;
        st->cache_bytes_per_step = bytes_sum / (double)n_steps;
        qsort(step_s, (size_t)n_steps, sizeof(double), compare_double);
        st->step_ms_p50 = 1e3 * percentile(step_s, n_steps, 0.50);
        st->step_ms_p99 = 1e3 * percentile(step_s, n_steps, 0.99);
    }
    if (trace) {
        trace->tokens = calloc((size_t)(n > 0 ? n : 1), sizeof(int *));
        trace->nll = calloc((size_t)(n > 0 ? n : 1), sizeof(double *));
        if (!trace->tokens || !trace->nll) goto oom;
        for (int i = 0; i < n; i++) {
            trace->tokens[i] = s.seqs[i].tokens, s.seqs[i].tokens = NULL;
            trace->nll[i] = s.seqs[i].nll, s.seqs[i].nll = NULL;
        }
    }
    status = 0;
    goto done;
oom:
    snprintf(err, errlen, "out of memory running the serving workload");
done:
    for (int i = 0; s.seqs && i < n; i++) {
        if (s.seqs[i].seq.pool) kvseq_release(&s.seqs[i].seq);
        free(s.seqs[i].tokens);
        free(s.seqs[i].nll);
    }
    free(s.seqs);
    free(s.waiting);
    free(s.running);
    free(rows);
    free(row_seq);
    free(step_s);
    batch_free(&fwd);
    return status;
}

void serve_trace_free(ServeTrace *t, int n) {
    for (int i = 0; t->tokens && i < n; i++) free(t->tokens[i]);
    for (int i = 0; t->nll && i < n; i++) free(t->nll[i]);
    free(t->tokens);
    free(t->nll);
    memset(t, 0, sizeof *t);
}
