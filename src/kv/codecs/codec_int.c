// int: the plate's scheme. Each head's vector at every token is quantised on its own, symmetric
// round-to-nearest (ties to even) with one scale per head per token:
//   levels=sym  (default) codes -L..L, L = 2^(B-1) - 1, scale d = absmax / L;
//   levels=full codes -2^(B-1)..2^(B-1)-1; the signed extreme maps to -2^(B-1), d = extreme / -2^(B-1)
//               (the rule of llama.cpp's q4_0; d is negative when the extreme is positive);
//   bits=1      (levels=sign, the only choice) one bit per number, its sign, and one scale, the mean
//               |x| of the vector: x̂ = sign(x) · mean|x| (x >= 0 counts as +).
// The scale is stored as fp16 (scale=fp16, default, saturating) or exactly (scale=fp32); numbers
// are quantised with the stored scale so that decode is consistent. An all-zero vector stores scale
// 0 and decodes to zeros. Codes are packed densely, B bits each (quant.h): the level q as a B-bit
// two's complement number (q mod 2^B), and at B = 1 the sign bit (1 for x < 0).
// Bytes per head per token: ceil(head_dim·B / 8) + 2 (or + 4), e.g. bits=4: 16 + 2 = 18.
//
// Layout (quant.h, "Kernel layouts"), when head_dim is a multiple of 32 (micro's 32):
//   keys    token tiles: the score kernel runs one lane per token and looks each code up in a table
//           q_d · level (at B = 2 and 1, two and four numbers per lookup), then multiplies by the
//           token's scale;
//   values  at B = 4, 2, 1 token groups of 4/B tokens: the mix kernel looks each number's 4-bit
//           group value up in a table Σ_t p_t · scale_t · level(code_t) built per group; at other
//           widths one packed row per token, decoded in registers and weighted.
// Any other head_dim keeps one packed row per token for both (the general kernels).
// Scales are stored [head][token].
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "affine_kernels.h"
#include "code_store.h"
#include "codec_core.h"
#include "codecs.h"

#define TILE QUANT_TILE
#define ALWAYS_INLINE QUANT_ALWAYS_INLINE

enum { LEVELS_SYM, LEVELS_FULL, LEVELS_SIGN };

// Every product is w · level: the query number (then the token's scale), or p · scale.
static const AffineForm INT_FORM = {0, 0, 0, 0};

// A state is one allocation (codec_core.h): this struct, the codes, the scales.
typedef struct {
    CodeStore cs;      // the codes (unit: 16 tokens for tiles, 4/B for groups, 1 for rows)
    int slots;         // scale slots per head: capacity rounded up to whole tiles
    int scale_fp32;
    uint16_t *scale16; // [head][slots] with scale=fp16 (zero past the last token)
    float *scale32;    // [head][slots] with scale=fp32
    size_t scales_at;  // the scales' offset from the state
    size_t extent;     // the state's allocation: this struct, the codes, the scales
    int n_heads, head_dim, capacity, length;
    int bits, levels;
} IntState;

#define INT_CODES_AT codec_line(sizeof(IntState))

static void int_destroy(void *state) {
    if (state) codec_state_free(state, ((IntState *)state)->extent);
}

static void int_read(const void *state, int head, int token, float *out);

static const char *levels_name[] = {"sym", "full", "sign"};

static void *int_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                        size_t normalised_len, char *err, size_t errlen) {
    const char *bits_text = spec_string(spec, "bits");
    if (!bits_text) {
        snprintf(err, errlen, "int: give the width, e.g. int:bits=4 (bits=1..8)");
        return NULL;
    }
    int bits;
    if (spec_int(spec, "bits", 0, 1, 8, &bits, err, errlen)) return NULL;
    const char *lv = spec_string(spec, "levels");
    int levels = LEVELS_SIGN, scale_fp32;
    if (bits == 1 && lv && strcmp(lv, "sign") != 0) {
        snprintf(err, errlen, "int: bits=1 stores sign x mean|x| (levels=sign); levels=%s needs bits >= 2", lv);
        return NULL;
    }
    if ((bits > 1 && spec_choice(spec, "levels", (const char *const[]){"sym", "full", NULL}, &levels, err, errlen)) ||
        spec_choice(spec, "scale", (const char *const[]){"fp16", "fp32", NULL}, &scale_fp32, err, errlen))
        return NULL;
    if (codec_check_shape("int", n_heads, head_dim, capacity, 2, err, errlen)) return NULL;
    const int is_value = spec_is_value(spec);
    QuantLayout layout = QUANT_ROWS;
    if (head_dim % 32 == 0 && !is_value)
        layout = QUANT_TILES;
    else if (head_dim % 32 == 0 && (bits == 1 || bits == 2 || bits == 4))
        layout = QUANT_GROUPS;
    CodeStore cs;
    const size_t codes = code_store_shape(&cs, layout, bits, n_heads, head_dim, capacity);
    const int slots = (capacity + TILE - 1) / TILE * TILE;
    const size_t scales_at = INT_CODES_AT + codec_line(codes);
    const size_t scales = (size_t)n_heads * (size_t)slots * (scale_fp32 ? sizeof(float) : sizeof(uint16_t));
    IntState *s = codec_state_alloc(scales_at + scales);
    if (!s) return codec_created(s, 0, int_destroy, err, errlen);
    s->extent = codec_line(scales_at + scales);
    s->cs = cs;
    s->cs.codes = (uint8_t *)s + INT_CODES_AT;
    s->n_heads = n_heads, s->head_dim = head_dim, s->capacity = capacity;
    s->bits = bits, s->levels = levels, s->scale_fp32 = scale_fp32;
    s->slots = slots;
    s->scales_at = scales_at;
    if (scale_fp32)
        s->scale32 = (float *)(void *)((uint8_t *)s + scales_at);
    else
        s->scale16 = (uint16_t *)(void *)((uint8_t *)s + scales_at);
    snprintf(normalised, normalised_len, "int:bits=%d,levels=%s,scale=%s", bits, levels_name[levels],
             scale_fp32 ? "fp32" : "fp16");
    return s;
}

// Bytes of one stored scale.
static inline size_t int_scale_size(const IntState *s) { return s->scale_fp32 ? sizeof(float) : sizeof(uint16_t); }

static inline size_t int_slot(const IntState *s, int head, int token) {
    return (size_t)head * (size_t)s->slots + (size_t)token;
}

// Store a scale in the stream's format; returns the value decode will use.
static float int_store_scale(IntState *s, size_t slot, float d) {
    if (s->scale_fp32) {
        s->scale32[slot] = d;
        return d;
    }
    s->scale16[slot] = quant_fp32_to_fp16_sat(d);
    return quant_fp16_to_fp32(s->scale16[slot]);
}

static inline float int_scale(const IntState *s, size_t slot) {
    return s->scale_fp32 ? s->scale32[slot] : quant_fp16_to_fp32(s->scale16[slot]);
}

// The level of a B-bit code: its two's complement value, or at B = 1 the sign: 0 -> +1, 1 -> -1.
static inline int32_t int_level(uint32_t code, int bits) {
    if (bits == 1) return code ? -1 : 1;
    return (int32_t)(code << (32 - bits)) >> (32 - bits);
}

static void int_encode(IntState *s, int head, const float *x) {
    const int hd = s->head_dim, half = 1 << (s->bits - 1);
    const unsigned mask = (1u << s->bits) - 1u;
    int lo = -half, hi = half - 1;
    float d;
    if (s->levels == LEVELS_SIGN) {
        float sum = 0.0f;
        for (int i = 0; i < hd; i++) sum += fabsf(x[i]);
        d = sum / (float)hd;
    } else if (s->levels == LEVELS_SYM) {
        lo = -(half - 1);
        d = quant_absmax(x, hd) / (float)hi;
    } else {
        float amax;
        const float extreme = quant_extreme(x, hd, &amax);
        d = extreme / (float)-half;
    }
    const float ds = int_store_scale(s, int_slot(s, head, s->length), d);
    // Chunks of 32 numbers start on a byte boundary (32·B bits), so each packs on its own.
    uint8_t q[32];
    for (int c = 0; c < hd; c += 32) {
        const int n = hd - c < 32 ? hd - c : 32;
        if (s->levels != LEVELS_SIGN && ds != 0.0f) {
#pragma omp simd
            for (int i = 0; i < n; i++) q[i] = (uint8_t)((unsigned)quant_round_clamp(x[c + i] / ds, lo, hi) & mask);
        } else {
            for (int i = 0; i < n; i++) q[i] = s->levels == LEVELS_SIGN ? x[c + i] < 0.0f : 0;
        }
        code_store_put(&s->cs, head, s->length, c / 32, q, n);
    }
}

static void int_append(void *state, const float *vec) {
    IntState *s = state;
    for (int h = 0; h < s->n_heads; h++) int_encode(s, h, vec + h * s->head_dim);
    s->length++;
}

// ---- Keys: token tiles (affine_kernels.h) ---------------------------------------------------
// A token's score: its lane's sum over the chunk's lookups (B <= 4: tables of q_d · level, two
// and four numbers per lookup at B = 2 and 1) or products q_d · level (B >= 5) in order of d, all
// chunks in order, times the token's scale. The kernels walk the stream's blocks: the tables are
// made once per query, and each tile, scale and row is read from its own block.

// Token t's block (its state) and t's place in it.
static ALWAYS_INLINE const uint8_t *int_block(const CodecBlocks *b, int t, int *local) {
    return (const uint8_t *)codec_block(b, t, local);
}

// The scales of head h's 16 tokens from `local` (a multiple of 16) in `block`: found from the
// block's pointer and the first block's shape s0, so that no block's state is read.
static ALWAYS_INLINE void int_block_scales(const IntState *s0, const uint8_t *block, int h, int local, float *sc) {
    const uint8_t *scales = block + s0->scales_at;
    if (s0->scale_fp32)
        memcpy(sc, (const float *)(const void *)scales + int_slot(s0, h, local), sizeof(float) * TILE);
    else
        quant_fp16_to_fp32_16((const uint16_t *)(const void *)scales + int_slot(s0, h, local), sc);
}

// The same for the 16 tokens from t (a multiple of 16), from t's block.
static ALWAYS_INLINE void int_scales(const CodecBlocks *b, int head, int t, float *sc) {
    int local;
    const uint8_t *block = int_block(b, t, &local);
    int_block_scales(b->states[0], block, head, local, sc);
}

// Asks for a head's scales of the 16 tokens from t ahead of their use (when t < n): in a pool they
// lie in their block, which the hardware prefetcher does not find. Heads after the first had theirs
// asked for by the head before (int_prefetch_next_head).
static ALWAYS_INLINE void int_prefetch_scales(const CodecBlocks *b, int head, int t, int n) {
    if (t >= n || n <= b->block || head > 0) return; // one block: the scales are one stream the hardware follows
    const IntState *s = b->states[0];
    int local;
    const uint8_t *scales = int_block(b, t, &local) + s->scales_at;
    __builtin_prefetch(scales + int_slot(s, head, local) * int_scale_size(s));
}

// Asks for the next head's codes and scales of the 16 tokens from t (t < n, a multiple of 16) while
// this head reads its own: the decoder runs a row's heads one after another (forward.c), so they are
// in cache a head's pass later; the last head asks for the first head of the stream attention reads
// next (CodecBlocks.next: the next row's, which nothing else would ask for ahead of its start). Spread over the heads' passes, a stream's bytes come from DRAM at
// the rate the kernels use them; head 0 asking for whole blocks left heads 1.. computing on what
// it had already fetched, and head 0 waiting on six times its share.
static ALWAYS_INLINE void int_prefetch_next_head(const CodecBlocks *b, int head, int t, int n) {
    const IntState *s = b->states[0];
    if (t >= n || n <= b->block) return;
    int local;
    const uint8_t *block = codec_next_head_block(b, s->n_heads, &head, t, &local);
    if (!block) return;
    code_store_prefetch16(&s->cs, block + INT_CODES_AT, head, local);
    __builtin_prefetch(block + s->scales_at + int_slot(s, head, local) * int_scale_size(s));
}

// The head's codes of one chunk (from `offset` in a unit) in every block of the n tokens.
static inline AffineChunk int_chunk(const CodecBlocks *b, int head, int n, size_t offset) {
    return code_store_chunk_at(b, &((const IntState *)b->states[0])->cs, INT_CODES_AT, head, n, offset);
}

typedef struct {
    const CodecBlocks *b;
    int head, n, chunks;
    const float *q;
    float tables[32][16] __attribute__((aligned(64))); // the chunk's
} IntKeys;

static inline void int_key_job(void *ctx, int c, int t0, int nt, int bits, AffineTileJob *job) {
    IntKeys *k = ctx;
    (void)nt;
    for (int i = 20; i < 24; i++) int_prefetch_scales(k->b, k->head, t0 + i * TILE, k->n); // five groups ahead
    for (int i = 0; i < 4 && c == 0; i++) int_prefetch_next_head(k->b, k->head, t0 + i * TILE, k->n);
    if (t0 == 0 && bits <= 4) { // a chunk's tables serve every token
        float lv[4][16] __attribute__((aligned(64)));
        affine_levels(bits, 1, lv);
        affine_step_tables(k->q + 32 * c, NULL, bits, (const float(*)[16])lv, INT_FORM, k->tables);
    }
    for (int i = 0; i < 4; i++) job->tables[i] = (const float(*)[16])k->tables, job->sm[i] = NULL, job->qh[i] = NULL;
    job->shared = 1;
}

static inline void int_key_finish(void *ctx, int c, int t0, int nt, float (*acc)[TILE], float *out) {
    const IntKeys *k = ctx;
    for (int i = 0; i < nt; i++) {
        float *o = out + t0 + i * TILE, sc[TILE];
        const int m = k->n - t0 - i * TILE < TILE ? k->n - t0 - i * TILE : TILE;
        if (c + 1 < k->chunks) { // the sums so far
            memcpy(o, acc[i], sizeof(float) * (size_t)m);
            continue;
        }
        int_scales(k->b, k->head, t0 + i * TILE, sc);
        if (m == TILE) {
#pragma omp simd
            for (int l = 0; l < TILE; l++) o[l] = acc[i][l] * sc[l];
        } else {
            for (int l = 0; l < m; l++) o[l] = acc[i][l] * sc[l];
        }
    }
}

static ALWAYS_INLINE void int_scores_tiled(const CodecBlocks *b, int head, const float *q, float *out, int n,
                                           const int hd, const int bits) {
    IntKeys k = {.b = b, .head = head, .n = n, .chunks = hd / 32, .q = q};
    affine_score_tiles(int_chunk(b, head, n, 0), n, hd, bits, AFFINE_SIGNED, 0, bits <= 4, 1, INT_FORM, q, int_key_job, int_key_finish, &k,
                       out);
}

// The mix kernels' parameters (AffinePrep): w[i] = p · scale of tokens j0 + i, i < 64 (0 from n on).
static const float *int_weights(const void *ctx, int head, int c, const float *p, int n, int j0, float *w, float *sm) {
    const CodecBlocks *b = ctx;
    (void)c, (void)sm;
    for (int i = 16 * TILE; i < 20 * TILE; i += TILE) int_prefetch_scales(b, head, j0 + i, n); // 256 tokens ahead
    for (int i = 0; i < 4 * TILE && c == 0; i += TILE) int_prefetch_next_head(b, head, j0 + i, n);
    for (int i = 0; i < 4 * TILE && j0 + i < n; i += TILE) {
        int_scales(b, head, j0 + i, w + i);
        if (n - j0 - i >= TILE) {
#pragma omp simd
            for (int l = 0; l < TILE; l++) w[i + l] *= p[j0 + i + l];
        } else {
            for (int l = 0; l < TILE; l++) w[i + l] = j0 + i + l < n ? w[i + l] * p[j0 + i + l] : 0.0f;
        }
    }
    return w;
}

// ---- Values ---------------------------------------------------------------------------------
// Token groups (B = 4, 2, 1): per group of g = 4/B tokens a table Σ_t w_t · level(code_t), w_t =
// p_t · scale_t; other widths: rows, w_j · level decoded in registers (affine_kernels.h).
static ALWAYS_INLINE void int_mix_hd(const CodecBlocks *b, int head, const float *p, float *out, int n, const int hd,
                                     const int bits) {
    float lv[4][16] __attribute__((aligned(64)));
    affine_levels(bits, 1, lv);
    for (int c = 0; c < hd / 32; c++) {
        const int groups = bits == 1 || bits == 2 || bits == 4; // else rows
        const AffineChunk ch = int_chunk(b, head, n, (size_t)c * (groups ? 16 : 4 * bits));
        if (groups) {
            float acc[2][2][16] __attribute__((aligned(64)));
            affine_mix_groups(ch, 4 / bits, (const float(*)[16])lv, INT_FORM, int_weights, b, head, c, p, n, acc);
            quant_group_sum((const float(*)[2][16])acc, out + 32 * c);
        } else {
            float even[32] __attribute__((aligned(64))), odd[32] __attribute__((aligned(64)));
            affine_mix_rows(ch, NULL, bits, AFFINE_SIGNED, 0, INT_FORM, int_weights, b, head, c, p, n, even, odd);
            for (int i = 0; i < 32; i++) out[32 * c + i] = even[i] + odd[i];
        }
    }
}

// Instances per width at micro's head_dim 32; other head_dims that are multiples of 32 take the same
// code with run-time values.
AFFINE_INSTANCES_32(int, const CodecBlocks *, int_scores_tiled, int_mix_hd);

static void int_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    const IntState *s = b->states[0];
    if (s->cs.layout != QUANT_TILES)
        codec_scores_by_read(b, int_read, s->head_dim, head, q, out, n);
    else if (s->head_dim == 32)
        int_scores_32[s->bits](b, head, q, out, n);
    else
        int_scores_tiled(b, head, q, out, n, s->head_dim, s->bits);
}

static void int_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    const IntState *s = b->states[0];
    if (s->cs.layout == QUANT_TILES || s->head_dim % 32 != 0)
        codec_mix_by_read(b, int_read, s->head_dim, head, p, out, n);
    else if (s->head_dim == 32)
        int_mix_32[s->bits](b, head, p, out, n);
    else
        int_mix_hd(b, head, p, out, n, s->head_dim, s->bits);
}

// ---- Every head of a row at once (CodecOps.scores_heads, mix_heads) ---------------------------
// The kernels above read one head of every block per pass, and in a pool of blocks of 16 tokens
// each pass paid for finding each block, its scales and what to ask for ahead, per head. These go
// four tiles (64 tokens) at a time through every head: the blocks are found once for all heads,
// each head's four tiles are looked up together (the per-head kernels' four chains), and the tiles
// ~12 KB on are asked for a line for each line read, each head's as its pass begins
// (codec_float.c's every-head kernels, prefetch.h; every line, since the lines are not fetched in
// pairs). Each head's sums are the per-head kernels' own, in their order: the same bits. In the
// vector builds, blocks of 16 tokens (int_heads_fit), micro's head_dim 32, keys of up to 4 bits
// (looked up) and values of 1, 2 or 4 bits (token groups), up to eight heads; anything else goes
// head by head.
#define INT_HEADS_MAX 8

#ifdef VEC16
// Asks for head h's codes and scales of the tile from `local` in `block` (NULL: none). Each head
// asks for its own lines of the tiles ahead as its pass begins, so that the requests go out spread
// through the four tiles' work as the lines are read. All heads' asked at once, before the first
// head's pass (120 lines), left the step waiting longer on memory: more, it seems, than a core
// keeps in flight, so that the requests past them waited while the lookups could have run
// (docs/history/speed.md, 2026-12-05, sixth session).
static ALWAYS_INLINE void int_prefetch_tile(const IntState *s0, const uint8_t *block, int local, int h) {
    if (!block) return;
    code_store_prefetch16(&s0->cs, block + INT_CODES_AT, h, local);
    __builtin_prefetch(block + s0->scales_at + int_slot(s0, h, local) * int_scale_size(s0));
}

static ALWAYS_INLINE int int_heads_ahead(const IntState *s0, int H) {
    return codec_ahead_tiles((size_t)H * TILE * (s0->cs.row_bytes + int_scale_size(s0)));
}

// Scores: four tiles (64 tokens) at a time, each head's four looked up in its tables (four chains),
// then times the tokens' scales (int_scores_tiled's sums: from zero, the steps in order).
static ALWAYS_INLINE void int_scores_heads_fast(const CodecBlocks *b, const float *q, float *out, size_t stride,
                                               int n, const int H, const int bits) {
    const IntState *s0 = b->states[0];
    float tables[INT_HEADS_MAX][32][16] __attribute__((aligned(64)));
    float lv[4][16] __attribute__((aligned(64)));
    affine_levels(bits, 1, lv);
    for (int h = 0; h < H; h++) affine_step_tables(q + (size_t)h * 32, NULL, bits, (const float(*)[16])lv, INT_FORM, tables[h]);
    const size_t head_codes = (size_t)s0->cs.units * s0->cs.unit_bytes;
    const int ahead = int_heads_ahead(s0, H);
    for (int t0 = 0; t0 < n; t0 += 4 * TILE) {
        const int nt = n - t0 >= 4 * TILE ? 4 : (n - t0 + TILE - 1) / TILE;
        const uint8_t *block[4], *codes[4];
        int local[4];
        const uint8_t *ablock[4];
        int alocal[4] = {0, 0, 0, 0};
        for (int k = 0; k < nt; k++) {
            block[k] = codec_block(b, t0 + k * TILE, &local[k]);
            codes[k] = block[k] + INT_CODES_AT + (size_t)(local[k] / TILE) * s0->cs.unit_bytes;
            ablock[k] = codec_ahead_block(b, t0 / TILE + k + ahead, n, &alocal[k]);
        }
        for (int h = 0; h < H; h++) {
            for (int k = 0; k < nt; k++) int_prefetch_tile(s0, ablock[k], alocal[k], h);
            const uint32_t *tiles[4];
            const float(*tp[1])[16] = {(const float(*)[16])tables[h]};
            for (int k = 0; k < nt; k++) tiles[k] = (const uint32_t *)(const void *)(codes[k] + (size_t)h * head_codes);
            float acc[4][TILE] __attribute__((aligned(64))) = {{0}};
            if (nt == 4)
                quant_tile_lookup(tiles, 4, tp, 1, bits, acc);
            else
                quant_tile_lookup(tiles, nt, tp, 1, bits, acc);
            for (int k = 0; k < nt; k++) {
                float sc[TILE] __attribute__((aligned(64))), *o = out + (size_t)h * stride + t0 + k * TILE;
                const int m = n - t0 - k * TILE < TILE ? n - t0 - k * TILE : TILE;
                int_block_scales(s0, block[k], h, local[k], sc);
                if (m == TILE) {
                    v16_store(o, v16_mul(v16_load(acc[k]), v16_load(sc)));
                } else {
                    for (int l = 0; l < m; l++) o[l] = acc[k][l] * sc[l];
                }
            }
        }
    }
}

// Mix: per head and group of g = 4/B tokens a table Σ_t w_t · level, w_t = p_t · scale_t (0 from n
// on), looked up by the group's 16 bytes; even and odd groups in their own sums (int_mix_hd's).
// Four tiles (64 tokens) at a time, head after head. A group's weights are made a group ahead of
// their use: a broadcast that reads a vector store still in flight would wait for it.
static ALWAYS_INLINE void int_heads_weights(const CodecBlocks *b, const float *p, size_t stride, int n, int t0,
                                           const int H, float (*w)[4 * TILE]) {
    const IntState *s0 = b->states[0];
    for (int k = 0; k < 4 && t0 + k * TILE < n; k++) {
        int local;
        const uint8_t *block = codec_block(b, t0 + k * TILE, &local);
        const int m = n - t0 - k * TILE < TILE ? n - t0 - k * TILE : TILE;
        for (int h = 0; h < H; h++) {
            float *wk = w[h] + k * TILE;
            const float *pk = p + (size_t)h * stride + t0 + k * TILE;
            int_block_scales(s0, block, h, local, wk);
            if (m == TILE) {
                v16_store(wk, v16_mul(v16_load(wk), v16_load(pk)));
            } else {
                for (int l = 0; l < TILE; l++) wk[l] = l < m ? wk[l] * pk[l] : 0.0f;
            }
        }
    }
}

static ALWAYS_INLINE void int_mix_heads_fast(const CodecBlocks *b, const float *p, size_t stride, float *out, int n,
                                            const int H, const int bits) {
    const IntState *s0 = b->states[0];
    const int g = 4 / bits;
    float lv[4][16] __attribute__((aligned(64)));
    affine_levels(bits, 1, lv);
    const size_t head_codes = (size_t)s0->cs.units * s0->cs.unit_bytes;
    const int ahead = int_heads_ahead(s0, H);
    float wbuf[2][INT_HEADS_MAX][4 * TILE] __attribute__((aligned(64)));
    v16 acc[INT_HEADS_MAX][4];
    for (int h = 0; h < H; h++) acc[h][0] = acc[h][1] = acc[h][2] = acc[h][3] = v16_zero();
    int_heads_weights(b, p, stride, n, 0, H, wbuf[0]);
    for (int t0 = 0; t0 < n; t0 += 4 * TILE) {
        const int cur = (t0 / (4 * TILE)) % 2, nt = n - t0 >= 4 * TILE ? 4 : (n - t0 + TILE - 1) / TILE;
        if (t0 + 4 * TILE < n) int_heads_weights(b, p, stride, n, t0 + 4 * TILE, H, wbuf[1 - cur]);
        const uint8_t *codes[4];
        const uint8_t *ablock[4];
        int alocal[4] = {0, 0, 0, 0};
        for (int k = 0; k < nt; k++) {
            int local;
            const uint8_t *block = codec_block(b, t0 + k * TILE, &local);
            codes[k] = block + INT_CODES_AT + (size_t)(local / g) * s0->cs.unit_bytes;
            ablock[k] = codec_ahead_block(b, t0 / TILE + k + ahead, n, &alocal[k]);
        }
        __asm__("" ::: "memory"); // each table broadcasts its weights from memory
        for (int h = 0; h < H; h++) {
            for (int k = 0; k < nt; k++) int_prefetch_tile(s0, ablock[k], alocal[k], h);
            v16 e0 = acc[h][0], e1 = acc[h][1], o0 = acc[h][2], o1 = acc[h][3];
            for (int k = 0; k < nt; k++) {
                const uint8_t *chunk = codes[k] + (size_t)h * head_codes;
                const float *w = wbuf[cur][h] + k * TILE;
                const int m = n - t0 - k * TILE < TILE ? n - t0 - k * TILE : TILE, ng = (m + g - 1) / g;
                int u = 0;
                for (; u + 2 <= ng; u += 2) {
                    quant_group_lookup16(chunk + (size_t)u * 16, affine_table16(w + u * g, NULL, g, (const float(*)[16])lv, INT_FORM),
                                         &e0, &e1);
                    quant_group_lookup16(chunk + (size_t)(u + 1) * 16,
                                         affine_table16(w + (u + 1) * g, NULL, g, (const float(*)[16])lv, INT_FORM), &o0, &o1);
                }
                if (u < ng)
                    quant_group_lookup16(chunk + (size_t)u * 16, affine_table16(w + u * g, NULL, g, (const float(*)[16])lv, INT_FORM),
                                         &e0, &e1);
            }
            acc[h][0] = e0, acc[h][1] = e1, acc[h][2] = o0, acc[h][3] = o1;
        }
    }
    for (int h = 0; h < H; h++) {
        float sums[2][2][16] __attribute__((aligned(64)));
        v16_store4(sums[0][0], sums[1][0], acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
        quant_group_sum((const float(*)[2][16])sums, out + (size_t)h * 32);
    }
}

// Whether the every-head kernels take this stream (keys: tiles of B <= 4; values: groups): in blocks
// of 16 tokens, where a block is one tile of every head, one after another. In larger blocks a
// head's tiles lie together, apart from the next head's, each tile asked for ahead is one piece a
// head, and reading every head of four tiles at a time waited on memory longer than the per-head
// kernels (docs/history/speed.md, 2026-12-05).
static int int_heads_fit(const CodecBlocks *b, int n) {
    const IntState *s0 = b->states[0];
    return b->block == TILE && s0->head_dim == 32 && s0->cs.layout != QUANT_ROWS && s0->n_heads <= INT_HEADS_MAX &&
           n > 0 && (s0->cs.layout == QUANT_GROUPS || s0->bits <= 4);
}

// Instances per width, micro's six heads with their own (constant loops keep the heads' sums in
// registers).
#define INT_HEADS_INSTANCE(B)                                                                      \
    static void int_scores_heads_##B(const CodecBlocks *b, const float *q, float *out, size_t stride, int n) { \
        const int H = ((const IntState *)b->states[0])->n_heads;                                   \
        if (H == 6)                                                                                \
            int_scores_heads_fast(b, q, out, stride, n, 6, B);                                     \
        else                                                                                       \
            int_scores_heads_fast(b, q, out, stride, n, H, B);                                     \
    }                                                                                              \
    static void int_mix_heads_##B(const CodecBlocks *b, const float *p, size_t stride, float *out, int n) { \
        const int H = ((const IntState *)b->states[0])->n_heads;                                   \
        if (H == 6)                                                                                \
            int_mix_heads_fast(b, p, stride, out, n, 6, B);                                        \
        else                                                                                       \
            int_mix_heads_fast(b, p, stride, out, n, H, B);                                        \
    }
INT_HEADS_INSTANCE(1)
INT_HEADS_INSTANCE(2)
INT_HEADS_INSTANCE(4)

static void int_scores_heads_3(const CodecBlocks *b, const float *q, float *out, size_t stride, int n) {
    int_scores_heads_fast(b, q, out, stride, n, ((const IntState *)b->states[0])->n_heads, 3);
}
#endif

static void int_scores_heads(const CodecBlocks *b, const float *q, float *out, size_t stride, int n) {
    const IntState *s = b->states[0];
#ifdef VEC16
    typedef void (*ScoresHeads)(const CodecBlocks *, const float *, float *, size_t, int);
    static const ScoresHeads by_width[5] = {NULL, int_scores_heads_1, int_scores_heads_2, int_scores_heads_3,
                                            int_scores_heads_4};
    if (int_heads_fit(b, n) && s->cs.layout == QUANT_TILES) {
        by_width[s->bits](b, q, out, stride, n);
        return;
    }
#endif
    for (int h = 0; h < s->n_heads; h++) int_scores(b, h, q + (size_t)h * s->head_dim, out + (size_t)h * stride, n);
}

static void int_mix_heads(const CodecBlocks *b, const float *p, size_t stride, float *out, int n) {
    const IntState *s = b->states[0];
#ifdef VEC16
    typedef void (*MixHeads)(const CodecBlocks *, const float *, size_t, float *, int);
    static const MixHeads by_width[5] = {NULL, int_mix_heads_1, int_mix_heads_2, NULL, int_mix_heads_4};
    if (int_heads_fit(b, n) && s->cs.layout == QUANT_GROUPS) {
        by_width[s->bits](b, p, stride, out, n);
        return;
    }
#endif
    for (int h = 0; h < s->n_heads; h++) int_mix(b, h, p + (size_t)h * stride, out + (size_t)h * s->head_dim, n);
}

// One head's levels at one token times sd: the token's scale (a read), or 1 (the levels themselves).
static void int_read_times(const IntState *s, int head, int token, float sd, float *out) {
    uint8_t q[32];
    for (int c = 0; c < s->head_dim; c += 32) {
        const int m = s->head_dim - c < 32 ? s->head_dim - c : 32;
        code_store_get(&s->cs, head, token, c / 32, q, m);
        for (int i = 0; i < m; i++) out[c + i] = (float)int_level(q[i], s->bits) * sd;
    }
}

static void int_read(const void *state, int head, int token, float *out) {
    const IntState *s = state;
    int_read_times(s, head, token, int_scale(s, int_slot(s, head, token)), out);
}

static size_t int_bytes(const void *state) {
    const IntState *s = state;
    const size_t scale_bytes = s->scale_fp32 ? sizeof(float) : sizeof(uint16_t);
    return (s->cs.row_bytes + scale_bytes) * (size_t)s->length * s->n_heads;
}

static size_t int_extent(const void *state) { return ((const IntState *)state)->extent; }

static void int_copy(void *dst, const void *src) {
    const IntState *s = src;
    codec_payload_copy(dst, src, INT_CODES_AT, s->extent);
    ((IntState *)dst)->length = s->length;
}

// int_scores and int_mix: what reads back (latent attention's fast evaluator mirrors it).
static int int_by_read(const void *state) {
    const IntState *s = state;
    return (s->cs.layout != QUANT_TILES ? CODEC_SCORES_BY_READ : 0) |
           (s->cs.layout == QUANT_TILES || s->head_dim % 32 != 0 ? CODEC_MIX_BY_READ : 0);
}

// The fast evaluator's key mirror (kvcache.h, MirrorOps): x̃ the levels and the factor the token's
// scale, whose plain product in order of d, times the factor, is the score kernel's sum: at B >= 3 a
// table entry or a product holds one number (q_d · level), so the lanes add q_d · level_d in order
// of d and finish with the scale. At B = 2 an entry holds two numbers, added before they reach the
// lane's sum: the mirror's sum in pairs. At B = 1 an entry adds four: not mirrored.
static void int_key_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    const IntState *s = state;
    (void)offset;
    *factor = int_scale(s, int_slot(s, head, token));
    int_read_times(s, head, token, 1.0f, x);
}

static const MirrorOps int_key_mirror_ops[2] = {
    {.read = int_key_read, .has_factor = 1}, {.read = int_key_read, .has_factor = 1, .settled_key_sum = MIRROR_KEYS_IN_PAIRS}};

static const MirrorOps *int_key_mirror(const void *state) {
    const IntState *s = state;
    return s->cs.layout == QUANT_TILES && s->bits >= 2 ? &int_key_mirror_ops[s->bits == 2] : NULL;
}

// The value mirror: the same levels, the weights p_j · scale_j (int_weights), even and odd tokens in
// two sums added at the end. At B = 4 a group is one token, so its table entry is one product, w_j ·
// level; at B = 3 and 5..8 each row's product is w_j · level: both are what the mirror's mix adds in
// order of j. At B = 2 a group's entry adds two tokens' products first, its sum the even one for
// every other group: the mirror's pairs of tokens. At B = 1 a group adds four: not mirrored.
static const MirrorOps int_value_mirror_ops[2] = {
    {.read = int_key_read, .has_factor = 1, .split_mix = 1},
    {.read = int_key_read, .has_factor = 1, .split_mix = 1, .pair_groups = 1}};

static const MirrorOps *int_value_mirror(const void *state) {
    const IntState *s = state;
    const int kernels = s->cs.layout != QUANT_TILES && s->head_dim % 32 == 0; // int_mix's own, not by read
    return kernels && s->head_dim <= 64 && s->bits >= 2 ? &int_value_mirror_ops[s->bits == 2] : NULL;
}

static const CodecOps int_ops = {.append = int_append, .scores = int_scores, .mix = int_mix,
                                 .scores_heads = int_scores_heads, .mix_heads = int_mix_heads, .read = int_read,
                                 .key_mirror = int_key_mirror, .value_mirror = int_value_mirror,
                                 .by_read = int_by_read, .bytes = int_bytes, .extent = int_extent,
                                 .copy = int_copy, .destroy = int_destroy};

const CodecFamily CODEC_FAMILY(codec_int) = {.name = "int", .ops = &int_ops, .create = int_create,
    .help = "int:bits=B           round to nearest per head per token, B=1..8, one scale (scale=fp16|fp32), "
            "levels=sym|full; B=1 stores sign x mean|x|",
    .examples = (const char *const[]){"int:bits=8", "int:bits=4", "int:bits=3", "int:bits=2", "int:bits=1", "int:bits=6",
                                      "int:bits=4,levels=full", "int:bits=8,levels=full", "int:bits=4,scale=fp32",
                                      "int:bits=3|int:bits=2", NULL}};
