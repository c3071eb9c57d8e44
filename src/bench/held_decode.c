#include "held_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "forward.h"
#include "pool_read.h"
#include "threadpool.h"


// Positions the recording pushes through the weights at once: spans, as the fast evaluator does
// (each row's numbers are the decode loop's to the bit), so that recording 2,048 tokens is matrix
// products, not 2,048 decode steps: a span reads the weights once for all its positions, which
// matters most under ASan (the tests' bench --batch 4).
#define RECORD_SPAN 64

int kv_record(const Model *m, const int *tokens, int n, int n_threads, KVRecording *rec, char *err, size_t errlen) {
    memset(rec, 0, sizeof *rec);
    const ModelConfig *c = &m->config;
    const KVLayout lay = kv_layout_of(c);
    const int kd = lay.n_heads[0] * lay.head_dim[0], vd = lay.n_heads[1] * lay.head_dim[1];
    Decoder d;
    if (decoder_init_spans(&d, m, &codec_spec_fp32, &codec_spec_fp32, n, RECORD_SPAN, n_threads, err, errlen)) return -1;
    rec->n = n, rec->n_layers = c->n_layers, rec->k_dim = kd, rec->v_dim = vd;
    rec->tokens = malloc(sizeof(int) * (size_t)n);
    rec->k = malloc(sizeof(float) * (size_t)n * (size_t)c->n_layers * (size_t)kd);
    rec->v = malloc(sizeof(float) * (size_t)n * (size_t)c->n_layers * (size_t)vd);
    if (!rec->tokens || !rec->k || !rec->v) {
        decoder_free(&d);
        kv_recording_free(rec);
        snprintf(err, errlen, "out of memory recording keys and values");
        return -1;
    }
    memcpy(rec->tokens, tokens, sizeof(int) * (size_t)n);
    for (int t0 = 0; t0 < n; t0 += RECORD_SPAN)
        if (!decoder_forward_span(&d, tokens + t0, t0, n - t0 < RECORD_SPAN ? n - t0 : RECORD_SPAN)) {
            snprintf(err, errlen, "recording keys and values: %s", d.fwd.err);
            decoder_free(&d);
            kv_recording_free(rec);
            return -1;
        }
    // fp32 stores every number as it is: reading back gives the keys and values themselves.
    for (int t = 0; t < n; t++)
        for (int l = 0; l < c->n_layers; l++) {
            const size_t row = (size_t)t * c->n_layers + l;
            for (int h = 0; h < lay.n_heads[0]; h++) paged_read(&d.seq.k[l], h, t, rec->k + row * kd + (size_t)h * lay.head_dim[0]);
            for (int h = 0; h < lay.n_heads[1]; h++) paged_read(&d.seq.v[l], h, t, rec->v + row * vd + (size_t)h * lay.head_dim[1]);
        }
    decoder_free(&d);
    return 0;
}

void kv_recording_free(KVRecording *rec) {
    free(rec->tokens);
    free(rec->k);
    free(rec->v);
    memset(rec, 0, sizeof *rec);
}

// Token t of the recording appended to every layer of a sequence (its block reserved), as a decode
// step appends it.
static void fill_token(KVSeq *s, const KVRecording *rec, int t) {
    for (int l = 0; l < rec->n_layers; l++) {
        const size_t row = (size_t)t * rec->n_layers + l;
        kvseq_append(s, l, rec->k + row * rec->k_dim, rec->v + row * rec->v_dim);
        kvseq_end_step(s, l);
    }
}

// Conversation i's cache filled with the recording's first end[i] − steps tokens (its blocks are
// reserved): a task of held_fill, one per conversation.
typedef struct {
    KVSeq *seqs;
    const int *end;
    const KVRecording *rec;
    int steps;
} HeldFill;

static void held_fill(void *ctx, int i, int thread) {
    (void)thread;
    const HeldFill *f = ctx;
    for (int t = 0; t < f->end[i] - f->steps; t++) fill_token(&f->seqs[i], f->rec, t);
}

int serve_held_decode(const Model *m, KVPool *pool, const KVRecording *rec, int max_conversations, int lo, int hi,
                      int steps, int n_threads, int fill_threads, int read_repeat, HeldDecode *out, char *err,
                      size_t errlen) {
    memset(out, 0, sizeof *out);
    if (steps < 1 || lo < steps + 1 || hi < lo || hi > rec->n || hi > pool->context || max_conversations < 1) {
        snprintf(err, errlen, "held decode: positions %d..%d with %d steps do not fit a recording of %d tokens", lo,
                 hi, steps, rec->n);
        return -1;
    }
    KVSeq *seqs = calloc((size_t)max_conversations, sizeof *seqs);
    BatchRow *rows = calloc((size_t)max_conversations, sizeof *rows);
    int *end = calloc((size_t)max_conversations, sizeof(int));
    BatchForward fwd = {0};
    int status = -1;
    if (!seqs || !rows || !end) {
        snprintf(err, errlen, "out of memory holding conversations");
        goto done;
    }
    // Admission: conversation after conversation, blocks taken token by token as its cache is filled
    // (so a codec whose tokens settle into fewer bytes, KIVI, is charged what it holds), and then
    // the blocks of the steps to come. The first that does not fit is not held, and the pool is full.
    // Where no token settles, a block's charge does not depend on what it holds: the blocks are taken
    // token by token first (the same calls, so the same blocks in the same order of allocation), and
    // the caches are filled afterwards, a conversation per task on fill_threads threads (what is
    // timed is only the steps, on n_threads).
    // When every conversation ends at the same position, each holds the same bytes: the first is
    // filled and the others are its copies (kvseq_copy), admitted while the pool has what the first
    // took at its most (its reservations' peak: a codec that settles is charged less once its tokens
    // settle), which is where the first's way would have stopped.
    const int settles = pool->rule[KV_ROLE_KEY].ops->settle || pool->rule[KV_ROLE_VALUE].ops->settle;
    const int copies = lo == hi && kvpool_can_copy(pool);
    size_t peak = 0;
    HeldFill fill = {seqs, end, rec, steps};
    for (int i = 0; i < max_conversations; i++) {
        end[i] = lo == hi ? hi : hi - (int)((long)(hi - lo) * i / max_conversations);
        kvseq_init(&seqs[i], pool);
        if (copies && i > 0) {
            if (pool->budget - pool->used < peak || kvseq_copy(&seqs[i], &seqs[0], err, errlen)) break;
            out->held++;
            continue;
        }
        const size_t start = pool->used;
        int fits = 1;
        for (int t = 0; t < end[i] - steps && fits; t++) {
            if ((fits = !kvseq_reserve(&seqs[i], t + 1, err, errlen)) && settles) fill_token(&seqs[i], rec, t);
            if (fits && pool->used - start > peak) peak = pool->used - start;
        }
        if (!fits || kvseq_reserve(&seqs[i], end[i], err, errlen)) {
            kvseq_release(&seqs[i]);
            break;
        }
        if (pool->used - start > peak) peak = pool->used - start;
        if (copies && !settles) held_fill(&fill, i, 0);
        out->held++;
    }
    if (out->held == 0) {
        snprintf(err, errlen, "the pool cannot hold one conversation of %d tokens", hi);
        goto done;
    }
    if (!settles && !copies) {
        ThreadPool *fillers = pool_create(fill_threads);
        if (!fillers) {
            snprintf(err, errlen, "cannot start %d threads", fill_threads);
            goto done;
        }
        pool_run_tasks(fillers, out->held, held_fill, &fill);
        pool_destroy(fillers);
    }
    if (batch_init(&fwd, m, out->held, hi, n_threads, err, errlen)) goto done; // positions below hi, no more
    fwd.track_top = 0;
    double bytes = 0, attended = 0;
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < out->held; i++) {
            const int pos = end[i] - steps + s;
            rows[i] = (BatchRow){&seqs[i], rec->tokens[pos], pos};
            attended += pos + 1;
        }
        const double t0 = seconds_now();
        const float *logits = batch_forward(&fwd, rows, out->held);
        out->seconds += seconds_now() - t0;
        if (!logits) {
            snprintf(err, errlen, "decode at a full pool: %s", fwd.err);
            goto done;
        }
        for (int i = 0; i < out->held; i++) bytes += (double)kvseq_bytes(&seqs[i]);
    }
    if (read_repeat > 0 &&
        pool_read_time(seqs, out->held, fwd.pool, read_repeat, &out->read_seconds, &out->read_bytes))
        out->read_seconds = out->read_bytes = 0;
    out->steps = steps;
    out->tokens_per_s = (double)out->held * steps / out->seconds;
    out->cache_bytes_per_step = bytes / steps;
    out->attended_per_step = attended / steps;
    out->weight_bytes = (double)m->n_params * sizeof(float);
    status = 0;
done:
    for (int i = 0; seqs && i < max_conversations; i++)
        if (seqs[i].pool) kvseq_release(&seqs[i]);
    free(seqs);
    free(rows);
    free(end);
    if (fwd.model) batch_free(&fwd);
    return status;
}
