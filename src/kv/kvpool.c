// The paged KV cache: a byte budget, blocks taken from it as sequences grow, block tables, and
// attention that reads a sequence's blocks in order. See kvpool.h.
#include "kvpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rope.h"

static int div_up(int a, int b) { return (a + b - 1) / b; }

KVLayout kv_layout_uniform(int n_heads, int head_dim) {
    return (KVLayout){{n_heads, n_heads}, {head_dim, head_dim}, {KV_ROLE_KEY, KV_ROLE_VALUE}};
}

KVLayout kv_layout_multi_head(const ModelConfig *c) { return kv_layout_uniform(c->n_heads, c->head_dim); }

KVLayout kv_layout_of(const ModelConfig *c) {
    if (c->latent_dim > 0) return (KVLayout){{1, 1}, {c->latent_dim, c->rope_dim}, {KV_ROLE_KEY, KV_ROLE_KEY}};
    return kv_layout_uniform(c->n_kv_heads, c->head_dim);
}

int kv_layout_check_spec(const ModelConfig *c, KVRole slot, const char *spec, char *err, size_t errlen) {
    const KVLayout l = kv_layout_of(c);
    const KVShape shape = {.n_heads = l.n_heads[slot], .head_dim = l.head_dim[slot], .context = c->max_seq_len};
    return kvstream_check_spec_shape(spec, l.role[slot], &shape, err, errlen);
}

int kv_layout_check_specs(const ModelConfig *c, const char *k_spec, const char *v_spec, char *err, size_t errlen) {
    const char *specs[2] = {k_spec, v_spec};
    for (int s = 0; s < 2; s++) {
        if (!kv_layout_check_spec(c, (KVRole)s, specs[s], err, errlen)) continue;
        if (c->latent_dim > 0) { // say which of latent attention's two streams the spec cannot hold
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, errlen, "%s (%d numbers, %s): %s", s ? "the RoPE key" : "the latent",
                     s ? c->rope_dim : c->latent_dim, s ? "its spec is --v" : "its spec is --cache or --k", why);
        }
        return -1;
    }
    return 0;
}

// A block of the pool. When one block holds a whole sequence (block == context) the codec is not
// told of blocks: its alignment rules (kivi's groups) are about a sequence spread over blocks.
// `first`: the block's first token in its sequence; `layer`: its model layer.
// `slot`: KV_ROLE_KEY or KV_ROLE_VALUE, the stream's place in the layout (whose role the codec gets).
static int block_init(const KVPool *p, KVStream *b, KVRole slot, int first, int layer, char *err, size_t errlen) {
    const KVStreamPlace place = {p->block < p->context ? p->block : 0, first, layer};
    const KVLayout *l = &p->layout;
    return kvstream_init_at(b, &p->spec[slot], l->role[slot], l->n_heads[slot], l->head_dim[slot], p->block, &place,
                            err, errlen);
}

// What a full block costs open and settled, measured on a block: `block` tokens appended (their
// values do not change any codec's byte count), then all of them given their final form.
static int measure_block(const KVPool *p, KVRole role, int first, size_t *open, size_t *settled, char *normalised,
                         char *err, size_t errlen) {
    KVStream b;
    if (block_init(p, &b, role, first, 0, err, errlen)) return -1;
    const int width = p->layout.n_heads[role] * p->layout.head_dim[role];
    float *vec = malloc(sizeof(float) * (size_t)width);
    if (!vec) {
        kvstream_free(&b);
        snprintf(err, errlen, "out of memory measuring a cache block");
        return -1;
    }
    for (int i = 0; i < width; i++) vec[i] = (float)(i % 7) - 3.0f;
    for (int t = 0; t < p->block; t++) kvstream_append(&b, vec);
    free(vec);
    *open = b.ops->bytes(b.state);
    if (b.ops->settle) b.ops->settle(b.state, p->block);
    *settled = b.ops->bytes(b.state);
    if (*settled > *open) *open = *settled;
    if (normalised) snprintf(normalised, SPEC_NORMALISED, "%s", b.spec);
    kvstream_free(&b);
    return 0;
}

// A block of a sequence past its first ones (whose cost every block of growth has), and what the
// first ones cost more: a stream with sink tokens keeps them exact in the blocks that hold them. A
// pool of one block per sequence has only a first block.
static int measure_cost(KVPool *p, KVRole role, char *err, size_t errlen) {
    PoolStreamCost *c = &p->cost[role];
    const int later = p->block < p->context ? p->context : 0; // past every sink token
    if (measure_block(p, role, later, &c->open_bytes, &c->settled_bytes, c->spec, err, errlen)) return -1;
    c->first_extra = 0;
    for (int first = 0; later && first < p->context; first += p->block) { // sink tokens may fill blocks
        size_t open, settled;
        if (measure_block(p, role, first, &open, &settled, NULL, err, errlen)) return -1;
        if (open <= c->open_bytes) break;
        c->first_extra += open - c->open_bytes;
    }
    if (block_init(p, &p->rule[role], role, 0, 0, err, errlen)) return -1;
    c->settles = p->rule[role].ops->settle != NULL;
    return 0;
}

// What a sequence's first blocks cost beyond kvpool_block_set_bytes (sink tokens).
static size_t first_extra_bytes(const KVPool *p) {
    return (size_t)p->n_layers * (p->cost[0].first_extra + p->cost[1].first_extra);
}

int kvpool_check_block(int block, int context, char *err, size_t errlen) {
    if (block >= 1 && (block >= context || block % 16 == 0)) return 0;
    snprintf(err, errlen,
             "a block of %d tokens: blocks hold a multiple of 16 tokens (the kernels' token tiles), or the whole "
             "context of %d",
             block, context);
    return -1;
}

int kvpool_init(KVPool *p, int n_layers, int n_heads, int head_dim, int block, int context, size_t budget,
                const CodecSpec *k_spec, const CodecSpec *v_spec, char *err, size_t errlen) {
    const KVLayout layout = kv_layout_uniform(n_heads, head_dim);
    return kvpool_init_layout(p, n_layers, &layout, block, context, budget, k_spec, v_spec, err, errlen);
}

int kvpool_init_model(KVPool *p, const ModelConfig *c, int block, int context, size_t budget, const CodecSpec *k_spec,
                      const CodecSpec *v_spec, char *err, size_t errlen) {
    const KVLayout layout = kv_layout_of(c);
    if (kvpool_init_layout(p, c->n_layers, &layout, block, context, budget, k_spec, v_spec, err, errlen)) return -1;
    if (c->latent_dim > 0 && (p->rule[0].prerope || p->rule[1].prerope)) {
        snprintf(err, errlen, "prerope keeps keys before RoPE: latent attention caches a latent that has no RoPE and "
                 "a RoPE key rotated before it is cached");
        kvpool_free(p);
        return -1;
    }
    return 0;
}

int kvpool_init_layout(KVPool *p, int n_layers, const KVLayout *layout, int block, int context, size_t budget,
                       const CodecSpec *k_spec, const CodecSpec *v_spec, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    for (int s = 0; s < 2; s++)
        if (n_layers < 1 || layout->n_heads[s] < 1 || layout->head_dim[s] < 1 || context < 1) {
            snprintf(err, errlen, "cache pool shape %d layers x %d heads x %d, context %d is not a shape", n_layers,
                     layout->n_heads[s], layout->head_dim[s], context);
            return -1;
        }
    if (kvpool_check_block(block, context, err, errlen)) return -1;
    if (block > context) block = context;
    if (div_up(context, block) > KV_MAX_BLOCKS) {
        snprintf(err, errlen, "a context of %d in blocks of %d is more than %d blocks a stream: give a larger block",
                 context, block, KV_MAX_BLOCKS);
        return -1;
    }
    p->n_layers = n_layers, p->layout = *layout;
    p->block = block, p->context = context, p->budget = budget;
    p->spec[KV_ROLE_KEY] = *k_spec, p->spec[KV_ROLE_VALUE] = *v_spec;
    if (measure_cost(p, KV_ROLE_KEY, err, errlen) || measure_cost(p, KV_ROLE_VALUE, err, errlen)) {
        kvpool_free(p);
        return -1;
    }
    if (budget < kvpool_block_set_bytes(p) + first_extra_bytes(p)) {
        snprintf(err, errlen,
                 "a pool of %zu bytes cannot hold one block of every layer and stream (%zu bytes for %d tokens of "
                 "%s / %s)",
                 budget, kvpool_block_set_bytes(p) + first_extra_bytes(p), block, p->cost[0].spec, p->cost[1].spec);
        kvpool_free(p);
        return -1;
    }
    return 0;
}

void kvpool_free(KVPool *p) {
    for (int r = 0; r < 2; r++)
        if (p->rule[r].ops) kvstream_free(&p->rule[r]);
}

size_t kvpool_block_set_bytes(const KVPool *p) {
    return (size_t)p->n_layers * (p->cost[0].open_bytes + p->cost[1].open_bytes);
}


// Blocks of one stream that are wholly final once a sequence holds `tokens` tokens.
static int settled_blocks_at(const KVPool *p, KVRole role, int tokens) {
    const KVStream *rule = &p->rule[role];
    const int settled = rule->ops->settled ? rule->ops->settled(rule->state, tokens) : tokens;
    return settled / p->block;
}

size_t kvpool_sequence_bytes(const KVPool *p, int tokens) {
    size_t total = 0;
    for (int r = 0; r < 2; r++) {
        const int blocks = div_up(tokens, p->block), settled = settled_blocks_at(p, (KVRole)r, tokens);
        total += (size_t)settled * p->cost[r].settled_bytes + (size_t)(blocks - settled) * p->cost[r].open_bytes;
        if (tokens > 0) total += p->cost[r].first_extra;
    }
    return total * (size_t)p->n_layers;
}

size_t kvpool_budget_for(const KVPool *p, int sequences, int tokens) {
    return (size_t)sequences * kvpool_sequence_bytes(p, tokens);
}

// ---------------------------------------------------------------------------------------------

void kvseq_init(KVSeq *s, KVPool *p) {
    memset(s, 0, sizeof *s);
    s->pool = p;
}

static PagedStream *stream_of(const KVSeq *s, KVRole role, int layer) { return role == KV_ROLE_KEY ? &s->k[layer] : &s->v[layer]; }

// What a stream's blocks are charged now.
static size_t stream_charge(const KVPool *p, KVRole role, const PagedStream *ps) {
    return (size_t)ps->settled_blocks * p->cost[role].settled_bytes +
           (size_t)(ps->n_blocks - ps->settled_blocks) * p->cost[role].open_bytes +
           (ps->n_blocks > 0 ? p->cost[role].first_extra : 0);
}

// The block tables, once per sequence, for the longest sequence the pool allows.
static int alloc_tables(KVSeq *s) {
    const KVPool *p = s->pool;
    const int most = div_up(p->context, p->block);
    s->k = calloc((size_t)p->n_layers, sizeof *s->k);
    s->v = calloc((size_t)p->n_layers, sizeof *s->v);
    for (int l = 0; s->k && s->v && l < p->n_layers; l++) {
        s->k[l].blocks = calloc((size_t)most, sizeof(KVStream));
        s->v[l].blocks = calloc((size_t)most, sizeof(KVStream));
        s->k[l].states = calloc((size_t)most, sizeof(void *));
        s->v[l].states = calloc((size_t)most, sizeof(void *));
        if (!s->k[l].blocks || !s->v[l].blocks || !s->k[l].states || !s->v[l].states) break;
        if (l == p->n_layers - 1) return 0;
    }
    kvseq_release(s);
    return -1;
}

// A failed call's undo: the blocks [from, to) it made so far, of every layer and slot (those not yet
// made are empty: the tables are zeroed and a freed block is zeroed again).
static void free_made_blocks(KVSeq *s, int from, int to) {
    for (int l = 0; l < s->pool->n_layers; l++)
        for (int r = 0; r < 2; r++)
            for (int b = from; b < to; b++) {
                KVStream *blk = &stream_of(s, (KVRole)r, l)->blocks[b];
                if (blk->ops) kvstream_free(blk);
            }
}

int kvseq_reserve(KVSeq *s, int tokens, char *err, size_t errlen) {
    KVPool *p = s->pool;
    if (tokens <= s->reserved) return 0;
    if (tokens > p->context) {
        snprintf(err, errlen, "a sequence of %d tokens is longer than the context (%d)", tokens, p->context);
        return -1;
    }
    if (!s->k && alloc_tables(s)) {
        snprintf(err, errlen, "out of memory allocating block tables");
        return -1;
    }
    const int have = s->k[0].n_blocks, want = div_up(tokens, p->block);
    const size_t cost = (size_t)(want - have) * kvpool_block_set_bytes(p) + (have == 0 ? first_extra_bytes(p) : 0);
    if (p->used + cost > p->budget) {
        snprintf(err, errlen, "the pool has %zu of %zu bytes free, %zu needed", p->budget - p->used, p->budget, cost);
        return -1;
    }
    for (int l = 0; l < p->n_layers; l++) {
        for (int r = 0; r < 2; r++) {
            PagedStream *ps = stream_of(s, (KVRole)r, l);
            for (int b = have; b < want; b++) {
                if (!block_init(p, &ps->blocks[b], (KVRole)r, b * p->block, l, err, errlen)) {
                    ps->states[b] = ps->blocks[b].state;
                } else {
                    free_made_blocks(s, have, want); // the sequence is as it was
                    return -1;
                }
            }
        }
    }
    for (int l = 0; l < p->n_layers; l++) s->k[l].n_blocks = s->v[l].n_blocks = want;
    p->used += cost;
    p->blocks += (long)(want - have) * 2 * p->n_layers;
    if (p->used > p->peak) p->peak = p->used;
    s->reserved = want * p->block < p->context ? want * p->block : p->context;
    return 0;
}

int kvpool_can_copy(const KVPool *p) { return p->rule[KV_ROLE_KEY].ops->copy && p->rule[KV_ROLE_VALUE].ops->copy; }

// Blocks are made in the order kvseq_reserve makes them token by token (a block of every layer and
// stream, then the next), so that a copy lies in the pool's memory as the sequence it copies did.
int kvseq_copy(KVSeq *dst, const KVSeq *src, char *err, size_t errlen) {
    KVPool *p = src->pool;
    if (dst->pool != p || dst->k) {
        snprintf(err, errlen, "a sequence is copied into an empty sequence of its own pool");
        return -1;
    }
    if (!kvpool_can_copy(p)) {
        snprintf(err, errlen, "%s / %s: the codec cannot copy a sequence", p->rule[0].spec, p->rule[1].spec);
        return -1;
    }
    if (!src->k) return 0;
    size_t charge = 0;
    for (int l = 0; l < p->n_layers; l++)
        for (int r = 0; r < 2; r++) charge += stream_charge(p, (KVRole)r, stream_of(src, (KVRole)r, l));
    if (p->used + charge > p->budget) {
        snprintf(err, errlen, "the pool has %zu of %zu bytes free, %zu needed", p->budget - p->used, p->budget, charge);
        return -1;
    }
    if (alloc_tables(dst)) {
        snprintf(err, errlen, "out of memory allocating block tables");
        return -1;
    }
    const int n = src->k[0].n_blocks;
    for (int b = 0; b < n; b++)
        for (int l = 0; l < p->n_layers; l++)
            for (int r = 0; r < 2; r++) {
                const KVStream *from = &stream_of(src, (KVRole)r, l)->blocks[b];
                PagedStream *ps = stream_of(dst, (KVRole)r, l);
                if (block_init(p, &ps->blocks[b], (KVRole)r, b * p->block, l, err, errlen)) {
                    free_made_blocks(dst, 0, b + 1);
                    kvseq_release(dst); // its tables: the sequence stays empty
                    return -1;
                }
                ps->blocks[b].ops->copy(ps->blocks[b].state, from->state);
                ps->blocks[b].length = from->length;
                ps->states[b] = ps->blocks[b].state;
            }
    for (int l = 0; l < p->n_layers; l++)
        for (int r = 0; r < 2; r++) {
            const PagedStream *from = stream_of(src, (KVRole)r, l);
            PagedStream *ps = stream_of(dst, (KVRole)r, l);
            ps->n_blocks = from->n_blocks, ps->length = from->length;
            ps->settled = from->settled, ps->settled_blocks = from->settled_blocks;
        }
    dst->reserved = src->reserved;
    p->used += charge;
    p->blocks += (long)n * 2 * p->n_layers;
    if (p->used > p->peak) p->peak = p->used;
    return 0;
}

void kvseq_append(KVSeq *s, int layer, const float *k, const float *v) {
    const int block = s->pool->block;
    for (int r = 0; r < 2; r++) {
        PagedStream *ps = stream_of(s, (KVRole)r, layer);
        kvstream_append(&ps->blocks[ps->length / block], r == KV_ROLE_KEY ? k : v);
        ps->length++;
    }
}

void kvseq_end_step(KVSeq *s, int layer) {
    KVPool *p = s->pool;
    for (int r = 0; r < 2; r++) {
        PagedStream *ps = stream_of(s, (KVRole)r, layer);
        const KVStream *rule = &p->rule[r];
        if (!rule->ops->settle) {
            ps->settled = ps->length;
            continue;
        }
        const int target = rule->ops->settled(rule->state, ps->length);
        for (int b = ps->settled / p->block; b * p->block < target; b++) {
            const int local = target - b * p->block < p->block ? target - b * p->block : p->block;
            ps->blocks[b].ops->settle(ps->blocks[b].state, local);
        }
        ps->settled = target;
        for (; ps->settled_blocks < target / p->block; ps->settled_blocks++)
            p->used -= p->cost[r].open_bytes - p->cost[r].settled_bytes;
    }
}

void kvseq_release(KVSeq *s) {
    KVPool *p = s->pool;
    for (int l = 0; s->k && l < p->n_layers; l++) {
        for (int r = 0; r < 2; r++) {
            PagedStream *ps = stream_of(s, (KVRole)r, l);
            free(ps->states);
            if (!ps->blocks) continue;
            p->used -= stream_charge(p, (KVRole)r, ps);
            p->blocks -= ps->n_blocks;
            for (int b = 0; b < ps->n_blocks; b++) kvstream_free(&ps->blocks[b]);
            free(ps->blocks);
        }
    }
    free(s->k);
    free(s->v);
    kvseq_init(s, p);
}

int kvseq_length(const KVSeq *s) { return s->k ? s->k[0].length : 0; }

size_t paged_stream_bytes(const PagedStream *ps) {
    size_t total = 0;
    for (int b = 0; b < ps->n_blocks; b++) total += ps->blocks[b].ops->bytes(ps->blocks[b].state);
    return total;
}

size_t kvseq_bytes(const KVSeq *s) {
    size_t total = 0;
    for (int l = 0; s->k && l < s->pool->n_layers; l++) total += paged_stream_bytes(&s->k[l]) + paged_stream_bytes(&s->v[l]);
    return total;
}

// ---------------------------------------------------------------------------------------------

// The blocks of ps as the kernels walk them, with the stream read next (or NULL).
static CodecBlocks paged_blocks(const PagedStream *ps, const PagedStream *next) {
    const KVStream *first = &ps->blocks[0];
    const int next_n = next && next->n_blocks ? next->length : 0;
    return (CodecBlocks){ps->states, first->capacity, first->head_dim, next_n ? next->states : NULL, next_n};
}

void paged_scores(const PagedStream *ps, int head, const float *q, float *out, int n) {
    paged_scores_then(ps, NULL, head, q, out, n);
}

void paged_mix(const PagedStream *ps, int head, const float *p, float *out, int n) {
    paged_mix_then(ps, NULL, head, p, out, n);
}

void paged_mirror_post(const PagedStream *ps, const MirrorOps *ops, int head, const float *p, const float *acc,
                       const float *acc2, float *out, int n) {
    const CodecBlocks b = paged_blocks(ps, NULL);
    ops->post(&b, head, p, acc, acc2, out, n);
}

void paged_mirror_fix_scores(const PagedStream *ps, const MirrorOps *ops, int head, const float *q, float *out, int n) {
    const CodecBlocks b = paged_blocks(ps, NULL);
    ops->fix_scores(&b, head, q, out, n);
}

void paged_scores_then(const PagedStream *ps, const PagedStream *next, int head, const float *q, float *out, int n) {
    const CodecBlocks b = paged_blocks(ps, next);
    ps->blocks[0].ops->scores(&b, head, q, out, n);
}

void paged_mix_then(const PagedStream *ps, const PagedStream *next, int head, const float *p, float *out, int n) {
    const CodecBlocks b = paged_blocks(ps, next);
    ps->blocks[0].ops->mix(&b, head, p, out, n);
}

void paged_scores_heads(const PagedStream *ps, const PagedStream *next, int n_heads, const float *q, float *out,
                        size_t stride, int n) {
    const CodecBlocks b = paged_blocks(ps, next);
    const CodecOps *ops = ps->blocks[0].ops;
    const int hd = b.head_dim;
    if (ops->scores_heads)
        ops->scores_heads(&b, q, out, stride, n);
    else
        for (int h = 0; h < n_heads; h++) ops->scores(&b, h, q + (size_t)h * hd, out + (size_t)h * stride, n);
}

void paged_mix_heads(const PagedStream *ps, const PagedStream *next, int n_heads, const float *p, size_t stride,
                     float *out, int n) {
    const CodecBlocks b = paged_blocks(ps, next);
    const CodecOps *ops = ps->blocks[0].ops;
    const int hd = b.head_dim;
    if (ops->mix_heads)
        ops->mix_heads(&b, p, stride, out, n);
    else
        for (int h = 0; h < n_heads; h++) ops->mix(&b, h, p + (size_t)h * stride, out + (size_t)h * hd, n);
}

void paged_read(const PagedStream *ps, int head, int token, float *out) {
    const KVStream *blk = &ps->blocks[token / ps->blocks[0].capacity];
    blk->ops->read(blk->state, head, token % blk->capacity, out);
}

void paged_scores_rope(const PagedStream *ps, int head, const float *q, int rope_halves, const float *rope_cos,
                       const float *rope_sin, float *out, int n) {
    const int hd = ps->blocks[0].head_dim, half = hd / 2;
    float x[MICRO_MAX_WIDTH];
    for (int j = 0; j < n; j++) {
        paged_read(ps, head, j, x);
        rope_head(x, hd, rope_halves, rope_cos + (size_t)j * half, rope_sin + (size_t)j * half);
        float acc = 0.0f;
        for (int d = 0; d < hd; d++) acc += q[d] * x[d];
        out[j] = acc;
    }
}
