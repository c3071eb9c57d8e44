// Batch invariance: a sequence's logits are the same to the bit whether it is decoded alone or in a
// batch, whatever its companions (other tokens, other lengths, joining and leaving), its row in the
// batch, and the thread count (1 or 2), for every codec family in blocks of 16; on grouped-query and
// latent-attention models too (each family's first catalog spec, the RoPE key in fp16 where it cannot
// take the spec, on 2 threads), and on a model with the parts of the architectures users bring. And
// the paged single-sequence decoder agrees with the one-block decoder to rounding.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib_for_test.h"
#include "check.h"
#include "forward.h"
#include "random_model.h"
#include "spec_catalog.h"

enum { T = 72, COMPANIONS = 3, BLOCK = 16, VOCAB = 256 };


// A pool for one spec: "K|V" gives keys and values their own codecs.
static int open_pool(KVPool *pool, const ModelConfig *c, const char *spec, char *err, size_t errlen) {
    char k[128], v[128];
    const char *bar = strchr(spec, '|');
    snprintf(k, sizeof k, "%.*s", bar ? (int)(bar - spec) : (int)strlen(spec), spec);
    snprintf(v, sizeof v, "%s", bar ? bar + 1 : spec);
    return kvpool_init_model(pool, c, BLOCK, c->max_seq_len, 1u << 30, SPEC(k), SPEC(v), err, errlen);
}

// The sequence under test alone, one row per step: its logits at every step.
static int alone(const Model *m, const char *spec, const int *tokens, float *logits) {
    char err[256];
    const ModelConfig *c = &m->config;
    KVPool pool;
    if (open_pool(&pool, c, spec, err, sizeof err)) {
        CHECK(0, "%s: %s", spec, err);
        return -1;
    }
    BatchForward fwd;
    if (batch_init(&fwd, m, 1, m->config.max_seq_len, 1, err, sizeof err)) return -1;
    KVSeq s;
    kvseq_init(&s, &pool);
    for (int t = 0; t < T; t++) {
        if (kvseq_reserve(&s, t + 1, err, sizeof err)) return -1;
        BatchRow row = {&s, tokens[t], t};
        memcpy(logits + (size_t)t * VOCAB, batch_forward(&fwd, &row, 1), sizeof(float) * VOCAB);
    }
    kvseq_release(&s);
    batch_free(&fwd);
    kvpool_free(&pool);
    return 0;
}

// The same sequence among companions: companion i runs steps [start_i, stop_i) with its own tokens;
// the rows are rotated every step, so the sequence under test sits at every row index in turn.
static int differing_steps(const Model *m, const char *spec, const int *tokens, const float *want, int threads,
                           uint64_t seed) {
    char err[256];
    const ModelConfig *c = &m->config;
    KVPool pool;
    if (open_pool(&pool, c, spec, err, sizeof err)) return -1;
    BatchForward fwd;
    if (batch_init(&fwd, m, 1 + COMPANIONS, m->config.max_seq_len, threads, err, sizeof err)) return -1;
    KVSeq seqs[1 + COMPANIONS];
    int start[1 + COMPANIONS] = {0, 0, 9, 23}, stop[1 + COMPANIONS] = {T, 40, T, 61}, pos[1 + COMPANIONS] = {0};
    int other[1 + COMPANIONS][T];
    uint64_t rng = seed;
    for (int i = 0; i <= COMPANIONS; i++) {
        kvseq_init(&seqs[i], &pool);
        for (int t = 0; t < T; t++) other[i][t] = i == 0 ? tokens[t] : (int)(check_next(&rng) % VOCAB);
    }
    int differ = 0;
    for (int t = 0; t < T; t++) {
        BatchRow rows[1 + COMPANIONS];
        int n = 0, mine = -1;
        for (int k = 0; k <= COMPANIONS; k++) {
            const int i = (k + t) % (1 + COMPANIONS);
            if (t < start[i] || t >= stop[i]) continue;
            if (kvseq_reserve(&seqs[i], pos[i] + 1, err, sizeof err)) return -1;
            if (i == 0) mine = n;
            rows[n++] = (BatchRow){&seqs[i], other[i][pos[i]], pos[i]};
        }
        const float *logits = batch_forward(&fwd, rows, n);
        for (int k = 0; k < n; k++) pos[rows[k].seq - seqs]++;
        differ += !check_same_bits(logits + (size_t)mine * VOCAB, want + (size_t)t * VOCAB, VOCAB);
    }
    for (int i = 0; i <= COMPANIONS; i++) kvseq_release(&seqs[i]);
    batch_free(&fwd);
    kvpool_free(&pool);
    return differ;
}

int main(void) {
    ModelConfig c = small_config();
    Model m;
    random_model(&m, &c, 11);
    int tokens[T];
    uint64_t rng = 5;
    tokens[0] = MICRO_BOS;
    for (int t = 1; t < T; t++) tokens[t] = (int)(check_next(&rng) % VOCAB);
    char dir[] = "/tmp/micro-test-batch-XXXXXX", calib[256];
    if (calibrate_for_test(&m, tokens, T, dir, calib, sizeof calib)) return 1;
    float *want = malloc(sizeof(float) * T * VOCAB);
    // Every spec of the catalog (spec_catalog.h), "K|V" as open_pool takes it.
    int n_specs;
    const CatalogEntry *cat = spec_catalog(&n_specs);
    char specs[256][200];
    for (int s = 0; s < n_specs; s++) snprintf(specs[s], sizeof specs[s], "%s|%s", cat[s].k, cat[s].v);
    for (int s = 0; s < n_specs; s++) {
        if (alone(&m, specs[s], tokens, want)) {
            CHECK(0, "%s: could not decode alone", specs[s]);
            continue;
        }
        for (int threads = 1; threads <= 2; threads++) {
            const int differ = differing_steps(&m, specs[s], tokens, want, threads, 100 + (uint64_t)threads);
            CHECK(differ == 0, "%s, %d thread(s): %d of %d steps' logits differ from the sequence alone", specs[s],
                  threads, differ, T);
        }
        printf("ok   %s\n", specs[s]);
    }
    // The decoder with one block per stream against blocks of 16: the same but for the order in
    // which the blocks' mixes are added.
    char err[256];
    Decoder one, paged;
    if (decoder_init(&one, &m, SPEC("int:bits=4"), SPEC("int:bits=4"), T, 1, err, sizeof err) ||
        decoder_init_paged(&paged, &m, SPEC("int:bits=4"), SPEC("int:bits=4"), T, BLOCK, 1, err, sizeof err)) {
        CHECK(0, "%s", err);
    } else {
        double worst = 0;
        for (int t = 0; t < T; t++) {
            const float *a = decoder_forward(&one, tokens[t], t), *b = decoder_forward(&paged, tokens[t], t);
            for (int v = 0; v < VOCAB; v++) worst = fmax(worst, fabs((double)a[v] - b[v]));
        }
        CHECK(worst < 1e-4, "paged and one-block decoders differ by %.3g", worst);
        decoder_free(&one);
        decoder_free(&paged);
    }
    // The forward pass's buffers serve the positions asked, 1..the model's context (else one line),
    // and start on a cache line, as the weights do (calloc_lines.h).
    BatchForward fwd;
    CHECK(batch_init(&fwd, &m, 1, 0, 1, err, sizeof err) != 0 && !strchr(err, '\n'), "a context of 0 was taken");
    CHECK(batch_init(&fwd, &m, 1, c.max_seq_len + 1, 1, err, sizeof err) != 0, "a context beyond the model's was taken");
    if (batch_init(&fwd, &m, 3, 40, 1, err, sizeof err)) {
        CHECK(0, "%s", err);
    } else {
        const void *buffers[] = {m.params, fwd.x,   fwd.xb,     fwd.xb2,          fwd.q,        fwd.k,        fwd.v,
                                 fwd.hb,   fwd.hb2, fwd.att,    fwd.top_position, fwd.kept_att, fwd.rope_cos, fwd.rope_sin,
                                 fwd.logits};
        for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
            CHECK((uintptr_t)buffers[i] % 64 == 0, "buffer %zu starts %zu bytes into a cache line", i,
                  (size_t)((uintptr_t)buffers[i] % 64));
        CHECK(fwd.context == 40, "context %d, not the 40 asked", fwd.context);
        batch_free(&fwd);
    }
    // The siblings: a family's first spec each (calibrated ones are of multi-head caches).
    for (int kind = 0; kind < 2; kind++) {
        ModelConfig s = small_config();
        s.n_kv_heads = 1;
        if (kind) s.latent_dim = 64, s.rope_dim = 16;
        Model sm;
        random_model(&sm, &s, 41 + (unsigned)kind);
        int checked = 0;
        for (int i = 0; i < n_specs; i++) {
            if (cat[i].calibrated || strstr(cat[i].k, "prerope") || strstr(cat[i].v, "prerope")) continue;
            if (i > 0 && strcspn(cat[i].k, ":") == strcspn(cat[i - 1].k, ":") &&
                !strncmp(cat[i].k, cat[i - 1].k, strcspn(cat[i].k, ":")))
                continue; // not the family's first
            // Under latent attention the RoPE key takes the latent's spec where it can, else fp16.
            const char *v = !kind ? cat[i].v : kv_layout_check_spec(&s, KV_ROLE_VALUE, cat[i].k, err, sizeof err) ? "fp16" : cat[i].k;
            char spec[200];
            snprintf(spec, sizeof spec, "%s|%s", cat[i].k, v);
            const int bad = kv_layout_check_specs(&s, cat[i].k, v, err, sizeof err) != 0;
            if (bad) continue; // refused for this shape, with its line (test_eval_fast counts them)
            if (alone(&sm, spec, tokens, want)) {
                CHECK(0, "%s: could not decode alone", spec);
                continue;
            }
            const int differ = differing_steps(&sm, spec, tokens, want, 2, 300 + (uint64_t)i);
            CHECK(differ == 0, "%s, %s: %d of %d steps' logits differ from the sequence alone", kind ? "latent" : "grouped",
                  spec, differ, T);
            checked++;
        }
        printf("ok   %s attention: %d families batch-invariant\n", kind ? "latent" : "grouped-query", checked);
        model_free(&sm);
    }
    // A model of the architectures users bring (docs/models.md): NeoX RoPE with Llama 3's frequency
    // factors, q/k/v biases, per-head q/k norms, a classifier of its own and query heads wider than the
    // residual shares, over one key/value head: the same invariance through each part.
    {
        ModelConfig g = small_config();
        g.n_kv_heads = 1, g.head_dim = 64; // 2 query heads of 64 over a residual of 64
        g.rope_halves = 1, g.qkv_bias = 1, g.qk_norm = 1, g.separate_output = 1, g.rope_factors = 1;
        Model gm;
        random_model(&gm, &g, 53);
        for (int i = 0; i < g.n_layers * g.head_dim; i++) gm.w.q_norm[i] += 1.0f, gm.w.k_norm[i] += 1.0f;
        for (int i = 0; i < g.head_dim / 2; i++) gm.w.rope_freqs[i] = 1.0f + 4.0f * (float)i / (float)g.head_dim;
        static const char *const brought[] = {"fp16|fp16", "int:bits=4|int:bits=4", "q4_0|q8_0", "kivi:bits=2,group=16,residual=32|kivi:bits=2,group=16,residual=32",
                                              "turboquant:bits=3|turboquant:bits=3", "int:bits=4,rot=hadamard|fp8:e4m3"};
        for (size_t i = 0; i < sizeof brought / sizeof brought[0]; i++) {
            if (alone(&gm, brought[i], tokens, want)) {
                CHECK(0, "%s: could not decode alone", brought[i]);
                continue;
            }
            const int differ = differing_steps(&gm, brought[i], tokens, want, 2, 500 + (uint64_t)i);
            CHECK(differ == 0, "a brought model's parts, %s: %d of %d steps' logits differ from the sequence alone",
                  brought[i], differ, T);
        }
        printf("ok   a brought model's parts (NeoX RoPE, rope factors, biases, q/k norms, own classifier): %zu specs "
               "batch-invariant\n", sizeof brought / sizeof brought[0]);
        model_free(&gm);
    }
    free(want);
    model_free(&m);
    remove(calib);
    rmdir(dir);
    printf("%d failures\n", failures);
    return failures != 0;
}
