// The paged pool under random traffic: up to four sequences, of a codec pair and a pool shape the
// first bytes choose, grow, attend and end in the order the rest of the input gives, in a pool of a
// few blocks. Properties (the serving engine's, whatever the order):
//   - each sequence reads back, scores and counts exactly what one contiguous stream of its codec,
//     fed the same vectors, holds (its mix finite, and the stream's bits but for KIVI and q5, whose
//     values sum block by block: to rounding): no sequence reads another's blocks;
//   - a layer's every head at once (paged_scores_heads, paged_mix_heads) gives each head's bits;
//   - the pool charges every sequence kvpool_sequence_bytes of its length, so never more than its
//     budget, and holds exactly its sequences' blocks;
//   - a refused reservation (the budget, or the context) is one line and changes nothing;
//   - a sequence's copy (kvseq_copy, into another's place) holds what it holds and then lives on as
//     any other; a refused copy (the budget, a codec that cannot copy) is one line and changes nothing;
//   - once every sequence ends, every byte and block is back.
#include <math.h>

#include "fuzz.h"
#include "kvpool.h"

enum { SEQS = 4, MAX_LAYERS = 2, MAX_HEADS = 3, MAX_HD = 64, MAX_CONTEXT = 160, MAX_GROW = 24 };
// The last block is the whole context: kvpool_init cuts a block longer than the context to it.
static const int blocks[4] = {16, 32, 64, MAX_CONTEXT}, head_dims[4] = {32, 16, 64, 48};
static const int contexts[8] = {32, 48, 64, 80, 96, 128, 144, 160};

typedef struct {
    KVSeq seq;
    KVStream ref[MAX_LAYERS][2]; // [layer][role]: one contiguous stream each, fed what the blocks are
    int len, has_ref;
} Conv;

typedef struct {
    KVPool pool;
    Conv conv[SEQS];
    int layers, heads, hd;
    const char *spec[2];
    uint32_t rng;
} World;

static float next_value(World *w) {
    w->rng = w->rng * 1664525u + 1013904223u;
    // Mostly ordinary values, a few large outliers (KIVI's and the outlier transform's reason to be).
    return (float)((int32_t)w->rng >> 16) / 8192.0f * ((w->rng & 0x1F) == 0 ? 60.0f : 1.0f);
}

static int exact_mix(const char *spec) { return strncmp(spec, "kivi", 4) != 0 && strncmp(spec, "q5", 2) != 0; }

static void end_conv(World *w, Conv *c) {
    kvseq_release(&c->seq);
    for (int l = 0; l < w->layers && c->has_ref; l++)
        for (int r = 0; r < 2; r++) kvstream_free(&c->ref[l][r]);
    c->has_ref = 0, c->len = 0;
}

// Sequence c's attention at its length against its contiguous streams, and its tokens read back.
static void check_conv(World *w, const Conv *c) {
    const int n = c->len, hd = w->hd;
    if (n == 0) return;
    float q[MAX_HD], p[MAX_CONTEXT], a[MAX_CONTEXT], b[MAX_CONTEXT], x[MAX_HD], y[MAX_HD];
    static float qs[MAX_HEADS * MAX_HD], ps[MAX_HEADS * MAX_CONTEXT], as[MAX_HEADS * MAX_CONTEXT], xs[MAX_HEADS * MAX_HD];
    for (int d = 0; d < hd; d++) q[d] = next_value(w) / 8.0f;
    for (int j = 0; j < n; j++) p[j] = 1.0f / (float)n;
    for (int l = 0; l < w->layers; l++) {
        const PagedStream *ks = &c->seq.k[l], *vs = &c->seq.v[l];
        const KVStream *kr = &c->ref[l][KV_ROLE_KEY], *vr = &c->ref[l][KV_ROLE_VALUE];
        FUZZ_REQUIRE(ks->length == n && vs->length == n);
        FUZZ_REQUIRE(paged_stream_bytes(ks) == kr->ops->bytes(kr->state));
        FUZZ_REQUIRE(paged_stream_bytes(vs) == vr->ops->bytes(vr->state));
        for (int h = 0; h < w->heads; h++) {
            if (!ks->blocks[0].prerope) { // keys kept before RoPE are scored through the decoder's RoPE
                paged_scores(ks, h, q, a, n);
                kvstream_scores(kr, h, q, b, n);
                for (int j = 0; j < n; j++) FUZZ_REQUIRE(isfinite(a[j]));
                FUZZ_REQUIRE(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
            }
            paged_mix(vs, h, p, x, n);
            kvstream_mix(vr, h, p, y, n);
            for (int d = 0; d < hd; d++) {
                FUZZ_REQUIRE(isfinite(x[d]));
                FUZZ_REQUIRE(exact_mix(w->spec[KV_ROLE_VALUE]) ? x[d] == y[d]
                                                                : fabsf(x[d] - y[d]) <= 1e-5f * (1.0f + fabsf(y[d])));
            }
            // A dozen tokens spread over the sequence, and its last (a rotation's read-back is a
            // matrix product per token, and the sanitizers' coverage slows every loop).
            for (int j = 0; j < n; j = j + 1 + n / 12 < n || j == n - 1 ? j + 1 + n / 12 : n - 1)
                for (int r = 0; r < 2; r++) {
                    paged_read(r ? vs : ks, h, j, x);
                    c->ref[l][r].ops->read(c->ref[l][r].state, h, j, y);
                    FUZZ_REQUIRE(memcmp(x, y, sizeof(float) * (size_t)hd) == 0);
                }
        }
        // Every head at once, each head's query its own (scaled per head) and the same weights.
        for (int h = 0; h < w->heads; h++) {
            for (int d = 0; d < hd; d++) qs[h * hd + d] = q[d] * (float)(h + 1);
            memcpy(ps + (size_t)h * n, p, sizeof(float) * (size_t)n);
        }
        if (!ks->blocks[0].prerope) paged_scores_heads(ks, NULL, w->heads, qs, as, (size_t)n, n);
        paged_mix_heads(vs, NULL, w->heads, ps, (size_t)n, xs, n);
        for (int h = 0; h < w->heads; h++) {
            if (!ks->blocks[0].prerope) {
                paged_scores(ks, h, qs + h * hd, a, n);
                FUZZ_REQUIRE(memcmp(a, as + (size_t)h * n, sizeof(float) * (size_t)n) == 0);
            }
            paged_mix(vs, h, p, x, n);
            FUZZ_REQUIRE(memcmp(x, xs + (size_t)h * hd, sizeof(float) * (size_t)hd) == 0);
        }
    }
}

// Grows sequence c by up to `tokens` tokens, a decode step each; stops at a refused reservation.
static void grow(World *w, Conv *c, int tokens) {
    char err[512];
    float k[MAX_HEADS * MAX_HD], v[MAX_HEADS * MAX_HD];
    const int width = w->heads * w->hd;
    for (int i = 0; i < tokens; i++) {
        if (!c->has_ref) {
            for (int l = 0; l < w->layers; l++)
                for (int r = 0; r < 2; r++)
                    FUZZ_REQUIRE(kvstream_init(&c->ref[l][r], SPEC(w->spec[r]), (KVRole)r, w->heads, w->hd,
                                               w->pool.context, err, sizeof err) == 0);
            c->has_ref = 1;
        }
        const size_t used = w->pool.used;
        const long held = w->pool.blocks;
        const int reserved = c->seq.reserved;
        if (kvseq_reserve(&c->seq, c->len + 1, err, sizeof err)) {
            fuzz_check_message(err, sizeof err);
            FUZZ_REQUIRE(w->pool.used == used && w->pool.blocks == held && c->seq.reserved == reserved);
            FUZZ_REQUIRE(c->len + 1 > w->pool.context || used + kvpool_block_set_bytes(&w->pool) > w->pool.budget ||
                         c->len == 0);
            return;
        }
        for (int l = 0; l < w->layers; l++) {
            for (int e = 0; e < width; e++) k[e] = next_value(w), v[e] = next_value(w);
            kvseq_append(&c->seq, l, k, v);
            kvstream_append(&c->ref[l][KV_ROLE_KEY], k);
            kvstream_append(&c->ref[l][KV_ROLE_VALUE], v);
        }
        c->len++;
        if (i + 1 == tokens) check_conv(w, c); // before the step ends: KIVI's newest tokens still open
        for (int l = 0; l < w->layers; l++) {
            kvseq_end_step(&c->seq, l);
            kvstream_end_step(&c->ref[l][KV_ROLE_KEY]);
            kvstream_end_step(&c->ref[l][KV_ROLE_VALUE]);
        }
    }
}

// Sequence c copied into d's place (d ended first): kvseq_copy, and c's contiguous streams copied by
// the codec's own copy, so that the copy is checked, and grows, as any sequence.
static void fork_conv(World *w, Conv *c, Conv *d) {
    if (c == d) return;
    end_conv(w, d);
    char err[512];
    const size_t used = w->pool.used;
    const long held = w->pool.blocks;
    if (kvseq_copy(&d->seq, &c->seq, err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        FUZZ_REQUIRE(w->pool.used == used && w->pool.blocks == held && !d->seq.k);
        FUZZ_REQUIRE(!kvpool_can_copy(&w->pool) || used + kvpool_sequence_bytes(&w->pool, c->len) > w->pool.budget);
        return;
    }
    FUZZ_REQUIRE(kvpool_can_copy(&w->pool) || !c->seq.k);
    for (int l = 0; l < w->layers && c->has_ref; l++)
        for (int r = 0; r < 2; r++) {
            KVStream *to = &d->ref[l][r];
            const KVStream *from = &c->ref[l][r];
            FUZZ_REQUIRE(kvstream_init(to, SPEC(w->spec[r]), (KVRole)r, w->heads, w->hd, w->pool.context, err,
                                       sizeof err) == 0);
            to->ops->copy(to->state, from->state);
            to->length = from->length;
        }
    d->has_ref = c->has_ref, d->len = c->len;
    check_conv(w, d);
}

// What the pool must hold: every sequence charged kvpool_sequence_bytes of its length.
static void check_pool(const World *w) {
    size_t charged = 0;
    long held = 0;
    for (int i = 0; i < SEQS; i++) {
        const int n = w->conv[i].len;
        charged += n ? kvpool_sequence_bytes(&w->pool, n) : 0;
        held += 2L * w->layers * ((n + w->pool.block - 1) / w->pool.block);
    }
    FUZZ_REQUIRE(w->pool.used == charged && w->pool.blocks == held);
    FUZZ_REQUIRE(w->pool.used <= w->pool.budget && w->pool.peak <= w->pool.budget);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4 || size > 512) return 0;
    // Bytes 0-1: the key and value codecs; 2: block, layers, heads, head_dim; 3: context and budget
    // (1..8 sets of blocks and a few bytes); then two bytes an operation: a sequence and what it does
    // (grow, grow one, copy into another's place, end, check) and by how much or where.
    static World w;
    memset(&w, 0, sizeof w);
    // The codecs: every spec of the catalog without a calibration (fuzz.h).
    const char *const *specs;
    const int n_specs = fuzz_catalog_specs(&specs);
    w.spec[0] = specs[data[0] % n_specs], w.spec[1] = specs[data[1] % n_specs];
    const int block = blocks[data[2] & 3], context = contexts[data[3] & 7];
    w.layers = 1 + (data[2] >> 2 & 1), w.heads = 1 + (data[2] >> 3 & 3) % MAX_HEADS, w.hd = head_dims[data[2] >> 5 & 3];
    w.rng = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    char err[512];
    KVPool probe;
    if (kvpool_init(&probe, w.layers, w.heads, w.hd, block, context, SIZE_MAX / 2, SPEC(w.spec[0]),
                    SPEC(w.spec[1]), err, sizeof err)) {
        fuzz_check_message(err, sizeof err); // a codec that does not fit the shape or the blocks
        return 0;
    }
    size_t one = kvpool_block_set_bytes(&probe), first = kvpool_sequence_bytes(&probe, 1) - one;
    kvpool_free(&probe);
    const size_t budget = (size_t)(1 + (data[3] >> 3 & 7)) * one + first + (data[3] >> 6);
    FUZZ_REQUIRE(kvpool_init(&w.pool, w.layers, w.heads, w.hd, block, context, budget, SPEC(w.spec[0]),
                             SPEC(w.spec[1]), err, sizeof err) == 0);
    for (int i = 0; i < SEQS; i++) kvseq_init(&w.conv[i].seq, &w.pool);
    for (size_t at = 4; at + 1 < size; at += 2) {
        Conv *c = &w.conv[data[at] & 3];
        const int op = data[at] >> 2 & 3, arg = data[at + 1];
        if (op == 0) grow(&w, c, 1 + arg % MAX_GROW);
        else if (op == 1 && arg & 1) grow(&w, c, 1);
        else if (op == 1) fork_conv(&w, c, &w.conv[arg >> 1 & 3]);
        else if (op == 2) end_conv(&w, c); // finished, or preempted
        else check_conv(&w, c);
        check_pool(&w);
    }
    for (int i = 0; i < SEQS; i++) end_conv(&w, &w.conv[i]);
    FUZZ_REQUIRE(w.pool.used == 0 && w.pool.blocks == 0);
    kvpool_free(&w.pool);
    return 0;
}
