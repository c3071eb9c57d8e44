// The paged pool: a sequence spread over blocks of 16 tokens decodes, scores, mixes and counts its
// bytes exactly as one contiguous stream of the same codec (every family, KIVI's window included;
// KIVI's and q5's mixes to rounding, each block's sum added in turn); the budget is never exceeded, a refused
// reservation changes nothing, sequences never share a block, and every byte comes back.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec_dispatch.h"
#include "kvpool.h"
#include "spec_catalog.h"
#include "pool_read.h"
#include "threadpool.h"

enum { LAYERS = 2, HEADS = 3, HD = 32, BLOCK = 16, CONTEXT = 256, T = 150 };


static void fill(float *x, int n, uint64_t *rng) {
    for (int i = 0; i < n; i++) x[i] = (float)(check_uniform(rng) * 4.0 - 2.0);
}

// Families whose mix kernels run their sums on across blocks give a contiguous stream's bits; KIVI
// and q5's values sum block by block (each block's sum added in turn): the same to rounding.
static int mixes_exactly(const char *spec) { return strncmp(spec, "kivi", 4) != 0 && strncmp(spec, "q5", 2) != 0; }

// A pool of the test's shape for one spec: 0, or -1 counted as a failure.
static int pool_open(KVPool *pool, const char *spec, size_t budget) {
    char err[256];
    if (!kvpool_init(pool, LAYERS, HEADS, HD, BLOCK, CONTEXT, budget, SPEC(spec), SPEC(spec), err, sizeof err)) return 0;
    CHECK(0, "%s: %s", spec, err);
    return -1;
}

// A block's extent (CodecOps.extent, for the families whose state is one allocation) holds its codes
// and metadata: at least its bytes, and a full block's at most those and the state's struct, each
// part rounded up to a line. The pool read (pool_read.h) reads every block's extent, here under the
// sanitizers in their build, and counts exactly those bytes; for a family without extents it refuses.
static void check_extents(const KVSeq *seq, const char *spec) {
    double extents = 0;
    int with = 0, without = 0, short_extent = 0, long_extent = 0;
    for (int l = 0; l < LAYERS; l++)
        for (int r = 0; r < 2; r++) {
            const PagedStream *ps = r ? &seq->v[l] : &seq->k[l];
            for (int b = 0; b < ps->n_blocks; b++) {
                const KVStream *s = &ps->blocks[b];
                if (!s->ops->extent) {
                    without++;
                    continue;
                }
                with++;
                const size_t e = s->ops->extent(s->state), bytes = s->ops->bytes(s->state);
                extents += (double)e;
                short_extent += e < bytes;
                long_extent += s->length == BLOCK && e > bytes + 1024;
            }
        }
    CHECK(!with || !without, "%s: %d blocks with an extent, %d without", spec, with, without);
    CHECK(!short_extent && !long_extent, "%s: %d extents shorter than the block's bytes, %d far longer", spec,
          short_extent, long_extent);
    ThreadPool *tp = pool_create(2);
    double seconds = -1, bytes = -1;
    const int rc = pool_read_time(seq, 1, tp, 1, &seconds, &bytes);
    pool_destroy(tp);
    if (with)
        CHECK(rc == 0 && seconds > 0 && bytes == extents, "%s: the pool read gave %d, %g s, %g of %g bytes", spec, rc,
              seconds, bytes, extents);
    else
        CHECK(rc == -1, "%s: the pool read of blocks without extents gave %d", spec, rc);
}

// One sequence of T tokens against contiguous streams fed the same vectors and end_steps.
static void check_against_contiguous(const char *spec) {
    char err[256];
    KVPool pool;
    if (pool_open(&pool, spec, 1 << 30)) return;
    KVStream ref[LAYERS][2];
    for (int l = 0; l < LAYERS; l++)
        for (int r = 0; r < 2; r++)
            if (kvstream_init(&ref[l][r], SPEC(spec), (KVRole)r, HEADS, HD, CONTEXT, err, sizeof err)) {
                CHECK(0, "%s: %s", spec, err);
                return;
            }
    KVSeq seq;
    kvseq_init(&seq, &pool);
    uint64_t rng = 12345;
    float k[HEADS * HD], v[HEADS * HD], q[HD], p[T], a[T], b[T], ma[HD], mb[HD];
    int mismatched_read = 0, mismatched_scores = 0, mixed_far = 0, mixed_other = 0, bytes_differ = 0;
    for (int t = 0; t < T; t++) {
        CHECK(!kvseq_reserve(&seq, t + 1, err, sizeof err), "%s: reserve %d: %s", spec, t + 1, err);
        for (int l = 0; l < LAYERS; l++) {
            fill(k, HEADS * HD, &rng), fill(v, HEADS * HD, &rng);
            kvseq_append(&seq, l, k, v);
            kvstream_append(&ref[l][0], k);
            kvstream_append(&ref[l][1], v);
            // Attention reads here, before the step ends (KIVI's newest token still in fp16).
            fill(q, HD, &rng);
            const int n = t + 1;
            for (int j = 0; j < n; j++) p[j] = (float)check_uniform(&rng) / (float)n;
            for (int h = 0; h < HEADS; h++) {
                paged_scores(&seq.k[l], h, q, a, n);
                kvstream_scores(&ref[l][0], h, q, b, n);
                mismatched_scores += !check_same_bits(a, b, n);
                paged_mix(&seq.v[l], h, p, ma, n);
                kvstream_mix(&ref[l][1], h, p, mb, n);
                for (int d = 0; d < HD; d++) mixed_far += !(fabsf(ma[d] - mb[d]) <= 1e-5f * (1.0f + fabsf(mb[d])));
                mixed_other += mixes_exactly(spec) && !check_same_bits(ma, mb, HD);
            }
            kvseq_end_step(&seq, l);
            kvstream_end_step(&ref[l][0]);
            kvstream_end_step(&ref[l][1]);
        }
        // Every token read back, every step: the pool's blocks hold what one stream would.
        for (int l = 0; l < LAYERS; l++)
            for (int r = 0; r < 2; r++) {
                const PagedStream *ps = r ? &seq.v[l] : &seq.k[l];
                bytes_differ += paged_stream_bytes(ps) != ref[l][r].ops->bytes(ref[l][r].state);
                for (int h = 0; h < HEADS; h++)
                    for (int j = 0; j <= t; j += 7) {
                        float x[HD], y[HD];
                        paged_read(ps, h, j, x);
                        ref[l][r].ops->read(ref[l][r].state, h, j, y);
                        mismatched_read += !check_same_bits(x, y, HD);
                    }
            }
        CHECK(pool.used <= pool.budget, "%s: over budget", spec);
        // Charged but not holding tokens: under one open block per stream.
        // (A stream with sink tokens is charged for all of them with its first block.)
        CHECK(pool.used - kvseq_bytes(&seq) < (size_t)LAYERS * (pool.cost[0].open_bytes + pool.cost[1].open_bytes +
                                                                pool.cost[0].first_extra + pool.cost[1].first_extra),
              "%s at %d tokens: %zu charged, %zu held", spec, t + 1, pool.used, kvseq_bytes(&seq));
    }
    CHECK(!mismatched_read, "%s: %d read-backs differ from a contiguous stream", spec, mismatched_read);
    CHECK(!mismatched_scores, "%s: %d score rows differ from a contiguous stream", spec, mismatched_scores);
    CHECK(!mixed_far, "%s: %d mixed numbers differ beyond rounding", spec, mixed_far);
    CHECK(!mixed_other, "%s: %d mixes are not a contiguous stream's bits", spec, mixed_other);
    CHECK(!bytes_differ, "%s: bytes differ from a contiguous stream %d times", spec, bytes_differ);
    check_extents(&seq, spec);
    kvseq_release(&seq);
    CHECK(pool.used == 0 && pool.blocks == 0, "%s: %zu bytes, %ld blocks left after release", spec, pool.used,
          pool.blocks);
    for (int l = 0; l < LAYERS; l++) kvstream_free(&ref[l][0]), kvstream_free(&ref[l][1]);
    kvpool_free(&pool);
}

// Several sequences in one pool of a few blocks: the budget holds, refusals change nothing, no
// block belongs to two sequences, and each reads back its own vectors.
static void check_sharing(const char *spec) {
    char err[256];
    KVPool probe, pool;
    if (pool_open(&probe, spec, 1 << 30)) return;
    const size_t budget = 7 * kvpool_block_set_bytes(&probe) + 5;
    kvpool_free(&probe);
    if (pool_open(&pool, spec, budget)) return;
    enum { S = 3 };
    KVSeq seqs[S];
    float vecs[S][HEADS * HD];
    uint64_t rng = 99;
    for (int i = 0; i < S; i++) kvseq_init(&seqs[i], &pool), fill(vecs[i], HEADS * HD, &rng);
    int refused = 0;
    for (int t = 0; t < 4 * BLOCK; t++)
        for (int i = 0; i < S; i++) {
            const size_t before = pool.used;
            const long blocks = pool.blocks;
            if (kvseq_reserve(&seqs[i], kvseq_length(&seqs[i]) + 1, err, sizeof err)) {
                refused++;
                CHECK(pool.used == before && pool.blocks == blocks, "%s: a refused reservation took blocks", spec);
                continue;
            }
            CHECK(pool.used <= pool.budget, "%s: %zu bytes charged, budget %zu", spec, pool.used, pool.budget);
            for (int l = 0; l < LAYERS; l++) {
                kvseq_append(&seqs[i], l, vecs[i], vecs[i]);
                kvseq_end_step(&seqs[i], l);
            }
        }
    CHECK(refused > 0, "%s: a pool of 7 block sets never refused 3 sequences of 64 tokens", spec);
    // No block state is in two tables.
    int shared = 0;
    for (int i = 0; i < S; i++)
        for (int j = i + 1; j < S; j++)
            for (int l = 0; l < LAYERS; l++)
                for (int a = 0; a < seqs[i].k[l].n_blocks; a++)
                    for (int b = 0; b < seqs[j].k[l].n_blocks; b++)
                        shared += seqs[i].k[l].blocks[a].state == seqs[j].k[l].blocks[b].state;
    CHECK(!shared, "%s: %d blocks shared between sequences", spec, shared);
    // Each sequence reads its own vector back, as one stream fed the same tokens decodes it.
    for (int i = 0; i < S; i++) {
        KVStream lone;
        if (kvstream_init(&lone, SPEC(spec), KV_ROLE_VALUE, HEADS, HD, CONTEXT, err, sizeof err)) {
            CHECK(0, "%s: %s", spec, err);
            break;
        }
        for (int t = 0; t < kvseq_length(&seqs[i]); t++) {
            kvstream_append(&lone, vecs[i]);
            kvstream_end_step(&lone);
        }
        for (int t = 0; t < kvseq_length(&seqs[i]); t += 5) {
            float x[HD], y[HD];
            paged_read(&seqs[i].v[1], 2, t, x);
            lone.ops->read(lone.state, 2, t, y);
            CHECK(check_same_bits(x, y, HD), "%s: sequence %d token %d is not its own", spec, i, t);
        }
        kvstream_free(&lone);
    }
    for (int i = 0; i < S; i++) kvseq_release(&seqs[i]);
    CHECK(pool.used == 0 && pool.blocks == 0, "%s: %zu bytes, %ld blocks not returned", spec, pool.used, pool.blocks);
    kvpool_free(&pool);
}

// A sequence and its copy (kvseq_copy) decode the same bits: every token read back, the bytes, the
// charge; then both go on the same tokens (over block edges, KIVI's window moving) and score, mix
// and read the same at every step, neither holding a block of the other. A pool without the budget
// for the copy, or a codec that cannot copy, refuses and changes nothing.
static void check_copy(const char *spec) {
    char err[256];
    KVPool pool;
    if (pool_open(&pool, spec, 1 << 30)) return;
    KVSeq a, b;
    kvseq_init(&a, &pool), kvseq_init(&b, &pool);
    uint64_t rng = 777;
    float k[HEADS * HD], v[HEADS * HD], q[HD], p[T + 40], x[T + 40], y[T + 40];
    for (int t = 0; t < T; t++) {
        CHECK(!kvseq_reserve(&a, t + 1, err, sizeof err), "%s: reserve %d: %s", spec, t + 1, err);
        for (int l = 0; l < LAYERS; l++) {
            fill(k, HEADS * HD, &rng), fill(v, HEADS * HD, &rng);
            kvseq_append(&a, l, k, v);
            kvseq_end_step(&a, l);
        }
    }
    const size_t charged = pool.used;
    const long blocks = pool.blocks;
    if (!kvpool_can_copy(&pool)) {
        CHECK(kvseq_copy(&b, &a, err, sizeof err) && strstr(err, "cannot copy"), "%s: copied without a copy: %s", spec, err);
        CHECK(pool.used == charged && pool.blocks == blocks && !b.k, "%s: a refused copy took blocks", spec);
        kvseq_release(&a);
        kvpool_free(&pool);
        return;
    }
    pool.budget = 2 * charged - 1; // one byte short of the copy's charge
    CHECK(kvseq_copy(&b, &a, err, sizeof err) && strstr(err, "free"), "%s: a copy over the budget: %s", spec, err);
    CHECK(pool.used == charged && pool.blocks == blocks && !b.k, "%s: a refused copy took blocks", spec);
    pool.budget = 1 << 30;
    CHECK(!kvseq_copy(&b, &a, err, sizeof err), "%s: copy: %s", spec, err);
    CHECK(pool.used == 2 * charged && pool.blocks == 2 * blocks, "%s: the copy charged %zu for %zu", spec,
          pool.used - charged, charged);
    CHECK(kvseq_copy(&b, &a, err, sizeof err), "%s: copied into a sequence that holds tokens", spec);
    int differ = 0, shared = 0;
    for (int t = T; t <= T + 40; t++) {
        // Every token read back as copied, and again at the end; the bytes and blocks at every step.
        for (int l = 0; l < LAYERS; l++)
            for (int r = 0; r < 2; r++) {
                const PagedStream *pa = r ? &a.v[l] : &a.k[l], *pb = r ? &b.v[l] : &b.k[l];
                differ += pa->length != pb->length || paged_stream_bytes(pa) != paged_stream_bytes(pb);
                for (int i = 0; i < pa->n_blocks && i < pb->n_blocks; i++) shared += pa->states[i] == pb->states[i];
                for (int h = 0; h < HEADS && (t == T || t == T + 40); h++)
                    for (int j = 0; j < t; j++) {
                        float xa[HD], xb[HD];
                        paged_read(pa, h, j, xa);
                        paged_read(pb, h, j, xb);
                        differ += !check_same_bits(xa, xb, HD);
                    }
            }
        if (t == T + 40) break;
        CHECK(!kvseq_reserve(&a, t + 1, err, sizeof err) && !kvseq_reserve(&b, t + 1, err, sizeof err), "%s: %s", spec, err);
        for (int l = 0; l < LAYERS; l++) {
            fill(k, HEADS * HD, &rng), fill(v, HEADS * HD, &rng), fill(q, HD, &rng);
            for (int j = 0; j <= t; j++) p[j] = (float)check_uniform(&rng) / (float)(t + 1);
            kvseq_append(&a, l, k, v);
            kvseq_append(&b, l, k, v);
            for (int h = 0; h < HEADS; h++) {
                paged_scores(&a.k[l], h, q, x, t + 1);
                paged_scores(&b.k[l], h, q, y, t + 1);
                differ += !check_same_bits(x, y, t + 1);
                paged_mix(&a.v[l], h, p, x, t + 1);
                paged_mix(&b.v[l], h, p, y, t + 1);
                differ += !check_same_bits(x, y, HD);
            }
            kvseq_end_step(&a, l);
            kvseq_end_step(&b, l);
        }
    }
    CHECK(!differ, "%s: a copy and its sequence differ %d times", spec, differ);
    CHECK(!shared, "%s: a copy shares %d blocks with its sequence", spec, shared);
    kvseq_release(&a);
    kvseq_release(&b);
    CHECK(pool.used == 0 && pool.blocks == 0, "%s: %zu bytes, %ld blocks left after release", spec, pool.used, pool.blocks);
    kvpool_free(&pool);
}

// A row's every head at once (paged_scores_heads, paged_mix_heads: the float formats' and int's
// kernels that read each block's heads together, the rest head by head) against each head alone: the same bits,
// at every length from one token past a block to whole and partial tiles, with the stream read
// next given (its first tokens are asked for at the end) and without, with six heads (micro's, an
// instance of its own) and with three, in blocks of 16 and in one block per sequence, under every
// kernel set this CPU runs (main). An infinity stored in a block sends both ways to the portable
// kernels; a spec with a scale goes head by head.
static void check_heads_together(const char *spec, int heads, int block) {
    char err[256];
    KVPool pool;
    if (kvpool_init(&pool, 1, heads, HD, block, CONTEXT, 1 << 30, SPEC(spec), SPEC(spec), err, sizeof err)) {
        CHECK(0, "%s: %s", spec, err);
        return;
    }
    if (!pool.rule[KV_ROLE_KEY].ops->scores_heads && !pool.rule[KV_ROLE_VALUE].ops->mix_heads) {
        kvpool_free(&pool); // a family without every-head kernels: kvpool.c goes head by head
        return;
    }
    KVSeq seq, other;
    kvseq_init(&seq, &pool), kvseq_init(&other, &pool);
    uint64_t rng = 777;
    enum { N = 100 };
    static float k[8 * HD], v[8 * HD], q[8 * HD], p[8 * N], a[8 * N], b[8 * N], ma[8 * HD], mb[8 * HD];
    int scores_differ = 0, mixes_differ = 0;
    for (int t = 0; t < N; t++) {
        CHECK(!kvseq_reserve(&seq, t + 1, err, sizeof err) && !kvseq_reserve(&other, t + 1, err, sizeof err),
              "%s: reserve %d: %s", spec, t + 1, err);
        fill(k, heads * HD, &rng), fill(v, heads * HD, &rng);
        if (t == 70 && strcmp(spec, "fp32") == 0) k[5] = v[7] = INFINITY; // a block the fast kernels leave alone
        kvseq_append(&seq, 0, k, v);
        kvseq_append(&other, 0, v, k);
        kvseq_end_step(&seq, 0), kvseq_end_step(&other, 0);
        const int n = t + 1;
        fill(q, heads * HD, &rng);
        for (int h = 0; h < heads; h++)
            for (int j = 0; j < n; j++) p[h * N + j] = (float)check_uniform(&rng) / (float)n;
        for (int with_next = 0; with_next < 2; with_next++) {
            const KVSeq *nx = with_next ? &other : NULL;
            paged_scores_heads(&seq.k[0], nx ? &nx->k[0] : NULL, heads, q, a, N, n);
            paged_mix_heads(&seq.v[0], nx ? &nx->v[0] : NULL, heads, p, N, ma, n);
            for (int h = 0; h < heads; h++) {
                paged_scores_then(&seq.k[0], nx ? &nx->k[0] : NULL, h, q + h * HD, b + h * N, n);
                paged_mix_then(&seq.v[0], nx ? &nx->v[0] : NULL, h, p + h * N, mb + h * HD, n);
                scores_differ += !check_same_bits(a + h * N, b + h * N, n);
                mixes_differ += !check_same_bits(ma + h * HD, mb + h * HD, HD);
            }
        }
    }
    const char *isa = cpu_isa_name(codec_isa_active());
    CHECK(!scores_differ, "%s %s, %d heads, blocks of %d: %d heads' scores together differ from each head's alone", isa,
          spec, heads, block, scores_differ);
    CHECK(!mixes_differ, "%s %s, %d heads, blocks of %d: %d heads' mixes together differ from each head's alone", isa,
          spec, heads, block, mixes_differ);
    kvseq_release(&seq), kvseq_release(&other);
    kvpool_free(&pool);
}

int main(void) {
    // Every spec of the catalog (spec_catalog.h) that needs no calibration, each for both streams
    // (a keys-only one, prerope, is the other tests').
    int n_specs;
    const CatalogEntry *cat = spec_catalog(&n_specs);
    for (int i = 0; i < n_specs; i++) {
        if (cat[i].calibrated) continue;
        for (int side = 0; side < 1 + (strcmp(cat[i].k, cat[i].v) != 0); side++) {
            const char *spec = side ? cat[i].v : cat[i].k;
            char why[256];
            if (kvstream_check_spec(spec, KV_ROLE_VALUE, why, sizeof why)) continue; // keys only (prerope)
            check_against_contiguous(spec);
            check_sharing(spec);
            check_copy(spec);
        }
    }
    // The every-head kernels are each vector set's own code (the portable build goes head by head):
    // every set this CPU runs checks its own against its per-head kernels (which test_codec_simd
    // holds to the portable build's bits).
    char ran[64] = "", not_run[64] = "";
    for (int isa = ISA_AVX2; isa <= ISA_AVX512; isa++) {
        char *list = codec_isa_available((Isa)isa) ? ran : not_run;
        snprintf(list + strlen(list), 64 - strlen(list), " %s", cpu_isa_name((Isa)isa));
        if (list == not_run) continue;
        codec_force_isa(isa);
        for (int i = 0; i < n_specs; i++) {
            if (cat[i].calibrated) continue;
            for (int side = 0; side < 1 + (strcmp(cat[i].k, cat[i].v) != 0); side++) {
                const char *spec = side ? cat[i].v : cat[i].k;
                char why[256];
                if (kvstream_check_spec(spec, KV_ROLE_VALUE, why, sizeof why)) continue;
                check_heads_together(spec, 6, BLOCK);
                check_heads_together(spec, HEADS, BLOCK);
                check_heads_together(spec, 6, CONTEXT);
            }
        }
    }
    codec_force_isa(-1);
    printf("every head at once against each alone under:%s%s%s\n", ran, *not_run ? "; not run (not compiled in, or this CPU lacks them):" : "", not_run);
    char err[256];
    KVPool pool;
    // Bad pools: one line each. More blocks a stream than KV_MAX_BLOCKS (the kernels' stack tables).
    CHECK(kvpool_init(&pool, LAYERS, HEADS, HD, 16, 16 * KV_MAX_BLOCKS + 16, 1 << 30, SPEC("int:bits=4,rot=hadamard"), SPEC("q4_0"),
                      err, sizeof err) &&
              strstr(err, "blocks a stream"),
          "a pool of %d blocks a stream accepted: %s", KV_MAX_BLOCKS + 1, err);
    CHECK(!kvpool_init(&pool, LAYERS, HEADS, HD, 16, 16 * KV_MAX_BLOCKS, 1 << 30, SPEC("int:bits=4,rot=hadamard"), SPEC("q4_0"), err,
                       sizeof err),
          "a pool of %d blocks a stream refused: %s", KV_MAX_BLOCKS, err);
    kvpool_free(&pool);
    CHECK(kvpool_init(&pool, LAYERS, HEADS, HD, 0, CONTEXT, 1 << 30, SPEC("fp16"), SPEC("fp16"), err, sizeof err) && strstr(err, "block"),
          "block 0 accepted: %s", err);
    CHECK(kvpool_init(&pool, LAYERS, HEADS, HD, BLOCK, CONTEXT, 100, SPEC("fp16"), SPEC("fp16"), err, sizeof err) &&
              strstr(err, "cannot hold one block"),
          "a 100-byte pool accepted: %s", err);
    CHECK(kvpool_init(&pool, LAYERS, HEADS, HD, BLOCK, CONTEXT, 1 << 30, SPEC("kivi:bits=2"), SPEC("kivi:bits=2"), err, sizeof err) &&
              strstr(err, "group"),
          "kivi groups of 32 in blocks of 16 accepted: %s", err);
    if (!kvpool_init(&pool, LAYERS, HEADS, HD, BLOCK, CONTEXT, 1 << 30, SPEC("fp16"), SPEC("fp16"), err, sizeof err)) {
        KVSeq s;
        kvseq_init(&s, &pool);
        CHECK(kvseq_reserve(&s, CONTEXT + 1, err, sizeof err) && strstr(err, "context"), "beyond the context: %s", err);
        kvseq_release(&s);
        kvpool_free(&pool);
    }
    printf("%d failures\n", failures);
    return failures != 0;
}
