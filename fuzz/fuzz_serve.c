// The serving loop under random workloads: a small random model of micro's head shape; conversations
// of any prompt and reply lengths, a codec pair, a block and a pool of any size from the input, any
// limit on the batch. Properties (the paged pool's and the scheduler's, whatever the workload):
//   - every conversation ends with the tokens and the losses, to the bit, of a run in a pool that
//     holds all of them at once and never preempts (batch invariance; recompute after preemption);
//   - at most max_batch run at once, the pool is never over its budget, and every block comes back;
//   - a pool too small for the longest conversation alone is refused in one line, and nothing runs.
#include <math.h>

#include "../tests/random_model.h"
#include "fuzz.h"
#include "kvpool.h"
#include "serve.h"


enum { CONTEXT = 80, MAX_CONVERSATIONS = 6 };
static const int blocks[4] = {16, 32, 16, CONTEXT}; // 16, the default, twice as often
static const uint8_t text[] = "Store it in fewer bits and more users fit: the cache, not the weights, fills a server's "
                              "memory at long contexts, and every decode step reads all of it.";

// The workload through a pool; 0, or -1 with err set. The pool is left for the caller's checks.
static int run(const Model *m, KVPool *pool, const Workload *w, int max_batch, ServeStats *st, ServeTrace *tr,
               char *err, size_t errlen) {
    const ServeConfig cfg = {.max_batch = max_batch, .n_threads = 1};
    memset(tr, 0, sizeof *tr);
    return serve_run(m, pool, w, &cfg, st, tr, err, errlen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 6 || size > 4 + 2 * MAX_CONVERSATIONS) return 0;
    static Model m;
    static int have_model;
    if (!have_model) {
        ModelConfig c = small_config();
        c.max_seq_len = CONTEXT;
        random_model(&m, &c, 11);
        have_model = 1;
    }
    const ModelConfig *c = &m.config;
    // Bytes 0-1: the key and value codecs; 2: the block and the batch limit; 3: the budget, in sets
    // of blocks; then two bytes a conversation (its prompt and its reply).
    // The codecs: every spec of the catalog without a calibration (fuzz.h).
    const char *const *specs;
    const int n_specs = fuzz_catalog_specs(&specs);
    const char *k = specs[data[0] % n_specs], *v = specs[data[1] % n_specs];
    const int block = blocks[data[2] & 3], max_batch = 1 + (data[2] >> 2) % 8;
    Workload w = {.n = (int)(size - 4) / 2, .text = text, .text_len = sizeof text - 1};
    Conversation conv[MAX_CONVERSATIONS];
    w.conversations = conv;
    int longest = 0;
    for (int i = 0; i < w.n; i++) {
        const uint8_t a = data[4 + 2 * i], b = data[5 + 2 * i];
        conv[i].prompt = 1 + a % (CONTEXT - 1);
        conv[i].reply = 1 + b % (CONTEXT - conv[i].prompt);
        conv[i].text_at = (size_t)a * 7;
        longest = conv[i].prompt + conv[i].reply > longest ? conv[i].prompt + conv[i].reply : longest;
    }
    char err[512];
    KVPool ref_pool, pool;
    if (kvpool_init(&ref_pool, c->n_layers, c->n_kv_heads, c->head_dim, block, CONTEXT, SIZE_MAX / 4, SPEC(k), SPEC(v), err,
                    sizeof err)) {
        fuzz_check_message(err, sizeof err); // a codec that does not fit the blocks (KIVI's groups)
        return 0;
    }
    const size_t set = kvpool_block_set_bytes(&ref_pool), first = kvpool_sequence_bytes(&ref_pool, 1) - set;
    const size_t budget = (size_t)(1 + data[3] % 32) * set + first;
    const size_t alone = kvpool_sequence_bytes(&ref_pool, longest) + set;
    FUZZ_REQUIRE(kvpool_init(&pool, c->n_layers, c->n_kv_heads, c->head_dim, block, CONTEXT, budget, SPEC(k), SPEC(v), err,
                             sizeof err) == 0);
    ServeStats ref_st, st;
    ServeTrace ref, got;
    // The reference: every conversation running at once from the start, in a pool for all of them.
    FUZZ_REQUIRE(run(&m, &ref_pool, &w, w.n, &ref_st, &ref, err, sizeof err) == 0);
    FUZZ_REQUIRE(ref_st.preemptions == 0 && ref_pool.used == 0 && ref_pool.blocks == 0);
    const int rc = run(&m, &pool, &w, max_batch, &st, &got, err, sizeof err);
    if (alone > budget) {
        FUZZ_REQUIRE(rc != 0);
        fuzz_check_message(err, sizeof err);
    } else {
        FUZZ_REQUIRE(rc == 0);
        FUZZ_REQUIRE(st.conversations_max >= 1 && st.conversations_max <= max_batch);
        for (int i = 0; i < w.n; i++) {
            const int n = conv[i].prompt + conv[i].reply;
            FUZZ_REQUIRE(memcmp(got.tokens[i], ref.tokens[i], sizeof(int) * (size_t)n) == 0);
            FUZZ_REQUIRE(memcmp(got.nll[i], ref.nll[i], sizeof(double) * (size_t)(n - 1)) == 0);
            for (int t = 0; t + 1 < n; t++) FUZZ_REQUIRE(isfinite(got.nll[i][t]) && got.nll[i][t] >= 0);
        }
    }
    serve_trace_free(&got, w.n);
    FUZZ_REQUIRE(pool.used == 0 && pool.blocks == 0 && pool.peak <= budget);
    serve_trace_free(&ref, w.n);
    kvpool_free(&pool);
    kvpool_free(&ref_pool);
    return 0;
}
