// The serving loop: a workload is the same for a seed (and another for another seed), chat lengths
// follow their stated distribution; a pool too small for the workload preempts and recomputes, and
// every conversation still gets the same tokens and the same losses, to the bit, as in a pool that
// never preempts (on 1 and 2 threads, any batch size); every block comes back.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "random_model.h"
#include "forward.h"
#include "held_decode.h"
#include "serve.h"

static const uint8_t text[] = "The KV cache holds one key and one value per token, layer and head; a server keeps "
                              "one per conversation, and the bytes decide how many conversations fit.";

static void check_workloads(void) {
    Workload a, b, c;
    workload_make(&a, WORKLOAD_CHAT, 500, 2048, 7, text, sizeof text - 1);
    workload_make(&b, WORKLOAD_CHAT, 500, 2048, 7, text, sizeof text - 1);
    workload_make(&c, WORKLOAD_CHAT, 500, 2048, 8, text, sizeof text - 1);
    CHECK(!memcmp(a.conversations, b.conversations, sizeof *a.conversations * 500), "seed 7 gave two workloads");
    CHECK(memcmp(a.conversations, c.conversations, sizeof *a.conversations * 500), "seeds 7 and 8 gave one workload");
    workload_free(&a), workload_free(&b), workload_free(&c);
    // Uniform on 1..321 and 1..675: means 161 and 338, within four standard errors at n = 20000.
    Workload w;
    workload_make(&w, WORKLOAD_CHAT, 20000, 2048, 1, text, sizeof text - 1);
    double prompt = 0, reply = 0;
    int in_range = 1;
    for (int i = 0; i < w.n; i++) {
        prompt += w.conversations[i].prompt, reply += w.conversations[i].reply;
        in_range &= w.conversations[i].prompt >= 1 && w.conversations[i].prompt <= 321 &&
                    w.conversations[i].reply >= 1 && w.conversations[i].reply <= 675;
    }
    CHECK(in_range, "chat lengths outside 1..321 / 1..675");
    CHECK(fabs(prompt / w.n - 161) < 4 * 92.7 / sqrt(w.n), "chat prompt mean %.1f", prompt / w.n);
    CHECK(fabs(reply / w.n - 338) < 4 * 194.9 / sqrt(w.n), "chat reply mean %.1f", reply / w.n);
    workload_free(&w);
    workload_make(&w, WORKLOAD_FIXED, 3, 2048, 1, text, sizeof text - 1);
    CHECK(w.conversations[0].prompt + w.conversations[0].reply == 2048, "fixed conversations are not 2048 tokens");
    workload_free(&w);
    // Cut to the length asked.
    workload_make(&w, WORKLOAD_CHAT, 300, 100, 3, text, sizeof text - 1);
    int within = 1;
    for (int i = 0; i < w.n; i++) within &= w.conversations[i].prompt + w.conversations[i].reply <= 100;
    CHECK(within, "chat conversations longer than --length");
    workload_free(&w);
}

// The workload through a pool of `budget` bytes; returns its trace (tokens, nll) and stats.
static int run(const Model *m, const Workload *w, const char *spec, size_t budget, int max_batch, int threads,
               ServeStats *st, ServeTrace *trace) {
    char err[256];
    const ModelConfig *c = &m->config;
    KVPool pool;
    if (kvpool_init(&pool, c->n_layers, c->n_kv_heads, c->head_dim, 16, c->max_seq_len, budget, SPEC(spec), SPEC(spec), err,
                    sizeof err)) {
        CHECK(0, "%s: %s", spec, err);
        return -1;
    }
    ServeConfig cfg = {.max_batch = max_batch, .n_threads = threads};
    int rc = serve_run(m, &pool, w, &cfg, st, trace, err, sizeof err);
    CHECK(!rc, "%s: %s", spec, err);
    CHECK(pool.used == 0 && pool.blocks == 0, "%s: %zu bytes in %ld blocks not returned", spec, pool.used, pool.blocks);
    CHECK(pool.peak <= pool.budget, "%s: peak %zu over the budget %zu", spec, pool.peak, pool.budget);
    kvpool_free(&pool);
    return rc;
}

static void check_preemption(const Model *m, const char *spec) {
    // Short prompts and long replies: admitted on their prompts, they outgrow a pool for two.
    Workload w;
    workload_make(&w, WORKLOAD_CHAT, 6, 100, 3, text, sizeof text - 1);
    for (int i = 0; i < w.n; i++) w.conversations[i].prompt = 10 + 2 * i, w.conversations[i].reply = 90 - 2 * i;
    const ModelConfig *c = &m->config;
    char err[256];
    KVPool sizing;
    kvpool_init(&sizing, c->n_layers, c->n_kv_heads, c->head_dim, 16, c->max_seq_len, 1u << 30, SPEC(spec), SPEC(spec), err,
                sizeof err);
    const size_t roomy = 1u << 30, tight = kvpool_budget_for(&sizing, 2, 100);
    kvpool_free(&sizing);
    ServeStats a, b, d;
    ServeTrace ta = {0}, tb = {0}, td = {0};
    if (run(m, &w, spec, roomy, 64, 1, &a, &ta) || run(m, &w, spec, tight, 64, 2, &b, &tb) ||
        run(m, &w, spec, roomy, 2, 1, &d, &td))
        return;
    CHECK(a.preemptions == 0, "%s: a roomy pool preempted %ld times", spec, a.preemptions);
    CHECK(b.preemptions > 0, "%s: a pool for 2 of 6 conversations never preempted", spec);
    CHECK(b.recomputed > 0, "%s: preempted but nothing recomputed", spec);
    CHECK(d.conversations_max == 2, "%s: --max-batch 2 ran %d at once", spec, d.conversations_max);
    for (int i = 0; i < w.n; i++) {
        const int total = w.conversations[i].prompt + w.conversations[i].reply;
        CHECK(!memcmp(ta.tokens[i], tb.tokens[i], sizeof(int) * (size_t)total) &&
                  !memcmp(ta.tokens[i], td.tokens[i], sizeof(int) * (size_t)total),
              "%s: conversation %d's tokens differ after preemption or in a smaller batch", spec, i);
        CHECK(!memcmp(ta.nll[i], tb.nll[i], sizeof(double) * (size_t)total) &&
                  !memcmp(ta.nll[i], td.nll[i], sizeof(double) * (size_t)total),
              "%s: conversation %d's losses differ after preemption or in a smaller batch", spec, i);
    }
    printf("ok   %s: %ld preemptions, %ld tokens recomputed, same tokens and losses\n", spec, b.preemptions,
           b.recomputed);
    serve_trace_free(&ta, w.n), serve_trace_free(&tb, w.n), serve_trace_free(&td, w.n);
    workload_free(&w);
}

// kv_record pushes the text through the weights in spans: its keys and values are those a
// token-by-token decode caches, bit for bit (two spans and part of a third, on 2 threads).
static void check_record(const Model *m) {
    enum { N = 150 };
    const ModelConfig *c = &m->config;
    const int hd = c->head_dim, kvd = c->n_kv_heads * hd;
    int tokens[N];
    for (int t = 0; t < N; t++) tokens[t] = text[t % (sizeof text - 1)];
    char err[256];
    KVRecording rec;
    Decoder d;
    if (kv_record(m, tokens, N, 2, &rec, err, sizeof err)) {
        CHECK(0, "kv_record: %s", err);
        return;
    }
    if (decoder_init(&d, m, SPEC("fp32"), SPEC("fp32"), N, 1, err, sizeof err)) {
        CHECK(0, "decoder: %s", err);
        kv_recording_free(&rec);
        return;
    }
    for (int t = 0; t < N; t++) decoder_forward(&d, tokens[t], t);
    long differ = 0;
    float x[1024];
    for (int t = 0; t < N; t++)
        for (int l = 0; l < c->n_layers; l++)
            for (int h = 0; h < c->n_kv_heads; h++) {
                const size_t at = ((size_t)t * c->n_layers + l) * kvd + (size_t)h * hd;
                paged_read(&d.seq.k[l], h, t, x);
                differ += memcmp(x, rec.k + at, sizeof(float) * (size_t)hd) != 0;
                paged_read(&d.seq.v[l], h, t, x);
                differ += memcmp(x, rec.v + at, sizeof(float) * (size_t)hd) != 0;
            }
    CHECK(differ == 0, "kv_record: %ld of %d head rows differ from the decode loop's", differ,
          2 * N * c->n_layers * c->n_kv_heads);
    if (!differ) printf("ok   kv_record's keys and values are the decode loop's, bit for bit\n");
    decoder_free(&d);
    kv_recording_free(&rec);
}

// Conversations a pool of `budget` bytes admits when each is encoded token by token, reserving as
// it goes and its tokens settling (KIVI's window): serve_held_decode's way before copies, the truth
// its copies must meet.
static int held_by_encoding(const Model *m, const KVRecording *rec, const char *spec, size_t budget, int n, int steps,
                            int most) {
    const ModelConfig *c = &m->config;
    char err[256];
    KVPool pool;
    if (kvpool_init(&pool, c->n_layers, c->n_kv_heads, c->head_dim, 16, c->max_seq_len, budget, SPEC(spec), SPEC(spec), err,
                    sizeof err))
        return -1;
    KVSeq *seqs = calloc((size_t)most, sizeof *seqs);
    int held = 0;
    for (; held < most; held++) {
        KVSeq *s = &seqs[held];
        kvseq_init(s, &pool);
        int fits = 1;
        for (int t = 0; t < n - steps && fits; t++) {
            if (!(fits = !kvseq_reserve(s, t + 1, err, sizeof err))) break;
            for (int l = 0; l < c->n_layers; l++) {
                const size_t row = (size_t)t * c->n_layers + l;
                kvseq_append(s, l, rec->k + row * rec->k_dim, rec->v + row * rec->v_dim);
                kvseq_end_step(s, l);
            }
        }
        if (!fits || kvseq_reserve(s, n, err, sizeof err)) {
            kvseq_release(s);
            break;
        }
    }
    for (int i = 0; i < held; i++) kvseq_release(&seqs[i]);
    free(seqs);
    kvpool_free(&pool);
    return held;
}

// Held decode with every conversation at one position: the first is encoded and the others are its
// copies (kvseq_copy). At budgets around whole conversations, a byte short and a part of a block
// over, the pool holds as many as encoding each would admit; a codec that cannot copy is encoded.
static void check_held_copies(const Model *m, const KVRecording *rec, const char *spec) {
    const ModelConfig *c = &m->config;
    enum { STEPS = 2, MOST = 6 };
    const int n = rec->n;
    char err[256];
    KVPool sizing;
    if (kvpool_init(&sizing, c->n_layers, c->n_kv_heads, c->head_dim, 16, c->max_seq_len, 1u << 30, SPEC(spec), SPEC(spec),
                    err, sizeof err)) {
        CHECK(0, "%s: %s", spec, err);
        return;
    }
    const size_t one = kvpool_sequence_bytes(&sizing, n), set = kvpool_block_set_bytes(&sizing);
    const int copies = kvpool_can_copy(&sizing);
    kvpool_free(&sizing);
    int cases = 0, differ = 0;
    for (int k = 1; k <= 4; k++)
        for (int e = -2; e <= 2; e++) {
            const size_t budget = (size_t)k * one + (e == -2 ? -set : e == -1 ? (size_t)-1 : e == 1 ? set / 3 : e == 2 ? set : 0);
            KVPool pool;
            if (kvpool_init(&pool, c->n_layers, c->n_kv_heads, c->head_dim, 16, c->max_seq_len, budget, SPEC(spec), SPEC(spec),
                            err, sizeof err))
                continue;
            HeldDecode hd;
            const int rc = serve_held_decode(m, &pool, rec, MOST, n, n, STEPS, 1, 1, 0, &hd, err, sizeof err);
            const int want = held_by_encoding(m, rec, spec, budget, n, STEPS, MOST);
            differ += (rc ? 0 : hd.held) != want;
            CHECK(pool.used == 0 && pool.blocks == 0, "%s: %zu bytes in %ld blocks not returned", spec, pool.used,
                  pool.blocks);
            kvpool_free(&pool);
            cases++;
        }
    CHECK(!differ && cases == 20, "%s: held counts differ from encoding each conversation in %d of %d budgets", spec,
          differ, cases);
    if (!differ) printf("ok   %s: held decode %s holds what encoding each admits, %d budgets\n", spec,
                        copies ? "by copies" : "(encoded)", cases);
}

int main(void) {
    check_workloads();
    ModelConfig c = small_config();
    Model m;
    random_model(&m, &c, 3);
    check_record(&m);
    const char *specs[] = {"fp16", "int:bits=4", "kivi:bits=2,group=16,residual=32", "q4_0"};
    for (int i = 0; i < 4; i++) check_preemption(&m, specs[i]);
    {
        enum { N = 130 }; // filled to 128 tokens: KIVI's keys settle a residual at the last, so its charge peaks before
        int tokens[N];
        for (int t = 0; t < N; t++) tokens[t] = text[t % (sizeof text - 1)];
        KVRecording rec;
        char err[256];
        if (kv_record(&m, tokens, N, 1, &rec, err, sizeof err)) {
            CHECK(0, "kv_record: %s", err);
        } else {
            const char *held_specs[] = {"fp16", "int:bits=4", "kivi:bits=2,group=16,residual=32", "q4_0",
                                        "turboquant:bits=3", "int:bits=4,rot=hadamard"};
            for (int i = 0; i < 6; i++) check_held_copies(&m, &rec, held_specs[i]);
            kv_recording_free(&rec);
        }
    }
    // A pool that cannot hold the longest conversation alone is refused, not spun on.
    Workload w;
    workload_make(&w, WORKLOAD_FIXED, 2, 512, 1, text, sizeof text - 1);
    char err[256];
    KVPool pool;
    if (!kvpool_init(&pool, c.n_layers, c.n_kv_heads, c.head_dim, 16, c.max_seq_len, 200000, SPEC("fp32"), SPEC("fp32"), err,
                     sizeof err)) {
        ServeConfig cfg = {.max_batch = 4, .n_threads = 1};
        ServeStats st;
        CHECK(serve_run(&m, &pool, &w, &cfg, &st, NULL, err, sizeof err) && strstr(err, "cannot hold one conversation"),
              "a pool too small for one conversation: %s", err);
        kvpool_free(&pool);
    }
    workload_free(&w);
    model_free(&m);
    printf("%d failures\n", failures);
    return failures != 0;
}
