// kivi: KIVI (Liu et al. 2024), asymmetric B-bit quantisation with a full-precision residual,
// streamed as KIVI's own decode loop does. Spec `kivi:bits=B,group=G,residual=R` (defaults 2, 32,
// 128; R a multiple of G). The same family serves both streams of a layer: it reads the option
// `role` (k or v, default k; the stream injects it) and applies KIVI's key or value scheme.
//
// Both schemes: per group, s = (max − min) / (2^B − 1) and min stored as fp16 (saturating), and
// q = round_to_even((x − min) / s) clamped to 0..2^B−1 with the *stored* s and min; x̂ = q·s + min.
// A constant group (max = min) stores s = 0, codes 0 and decodes exactly to min.
//
// Keys, per channel over groups of G consecutive tokens: a new key enters the residual; once the
// residual holds R keys, end_step (after the step's attention) quantises them as R/G groups and the
// residual empties. So keys [0, n_quant) are quantised, n_quant a multiple of R, and the residual
// holds the newest 1..R keys while attention reads them.
// Values, per token over groups of G channels (G must divide head_dim; at head_dim 32 and G = 32,
// one group per head per token): a new value enters the window of full-precision values; after
// attention, once the window holds more than R, the oldest value is quantised as it leaves. So
// attention sees the newest R + 1 values exact, and R remain exact between steps.
// If end_step is never called, append does the same work just before it would overflow.
//
// The full-precision residual and window are stored as fp16, as KIVI keeps them (its model runs in
// fp16): 2 bytes per number, counted in bytes(); groups are quantised from those fp16 numbers.
//
// Layout (quant.h, "Kernel layouts"). Keys, when head_dim is a multiple of 32, G of 16 and B <= 4:
// quantised codes in token tiles and the residual in tiles of 16 fp16 keys ([d][16 lanes]); the
// score kernel runs one lane per token, looking each code (at B = 2 and 1, each pair or four) up in
// a table of q_d · x̂_d(c) built per token group from its per-channel scale and minimum. Values,
// when head_dim and G are multiples of 32 and B is 4, 2 or 1: codes in token groups of 4/B tokens,
// looked up in a table Σ_t p_t · x̂_t(c) per group (one scale and minimum per token and chunk of
// 32 numbers); the window stays one fp16 row per slot. Other shapes keep one packed row per token
// and are read back (codec_core.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "code_store.h"
#include "codec_core.h"
#include "codecs.h"

#define TILE QUANT_TILE
#define ALWAYS_INLINE QUANT_ALWAYS_INLINE

typedef struct {
    int n_heads, head_dim, capacity, length;
    int bits, group, residual, is_value;
    int n_quant;       // tokens [0, n_quant) are quantised, [n_quant, length) full precision
    CodeStore cs;      // the quantised tokens' codes (their layout is the residual's too)
    // keys: [head][token group][2][head_dim] (scales then minimums, per channel)
    // values: [head][token][head_dim / group][2] (scale, minimum per channel group)
    uint16_t *meta;
    size_t meta_per_head; // uint16 entries per head
    uint16_t *full;       // fp16 [head][full_rows][head_dim]; key tiles: [head][full_rows / 16][head_dim][16]
    int full_rows;        // keys: residual slot = token − n_quant; values: ring slot = token % (R + 1)
} KiviState;

static void kivi_destroy(void *state) {
    KiviState *s = state;
    if (s) code_store_free(&s->cs), free(s->meta), free(s->full);
    free(s);
}

static void *kivi_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                         size_t normalised_len, char *err, size_t errlen) {
    int is_value, bits, group, residual;
    if (spec_choice(spec, "role", (const char *const[]){"k", "v", NULL}, &is_value, err, errlen) || spec_int(spec, "bits", 2, 1, 8, &bits, err, errlen) ||
        spec_int(spec, "group", 32, 1, 1 << 16, &group, err, errlen) ||
        spec_int(spec, "residual", 128, 1, 1 << 20, &residual, err, errlen))
        return NULL;
    if (residual % group) {
        snprintf(err, errlen, "kivi: residual=%d must be a multiple of group=%d", residual, group);
        return NULL;
    }
    // Checked against a model (kvstream_check_spec_shape), the cache passes its context: a residual
    // of a whole context would keep every token in fp16 and quantise nothing, silently.
    int context;
    if (spec_int(spec, "context", 0, 0, 1 << 30, &context, err, errlen)) return NULL;
    if (context > 0 && residual >= context) {
        snprintf(err, errlen,
                 "kivi: residual=%d keeps the newest %d tokens in fp16, but a stream holds at most %d (the model's "
                 "context): nothing would be quantised; give a residual below %d",
                 residual, residual, context, context);
        return NULL;
    }
    // One block of a pool's sequence: the key rule quantises whole groups at multiples of R, so a group
    // must lie within one block (its scales and minimums are the block's), and the residual must
    // fill whole blocks or a block whole residuals.
    int block;
    if (spec_int(spec, "block", 0, 0, 1 << 30, &block, err, errlen)) return NULL;
    if (block > 0 && !is_value && (block % group || (residual % block && block % residual))) {
        snprintf(err, errlen,
                 "kivi: keys are quantised in groups of %d tokens every %d tokens, which must align with the pool's "
                 "blocks of %d tokens (use a block that is a multiple of group=%d and divides or is divided by "
                 "residual=%d, e.g. --block %d)",
                 group, residual, block, group, residual, group > 16 ? group : 16);
        return NULL;
    }
    if (codec_check_shape("kivi", n_heads, head_dim, capacity, 2, err, errlen)) return NULL;
    if (is_value && head_dim % group) {
        snprintf(err, errlen, "kivi: values are grouped along head_dim, so group=%d must divide head_dim %d",
                 group, head_dim);
        return NULL;
    }
    KiviState *s = calloc(1, sizeof *s);
    if (!s) return codec_created(s, 0, kivi_destroy, err, errlen);
    s->n_heads = n_heads, s->head_dim = head_dim, s->capacity = capacity;
    s->bits = bits, s->group = group, s->residual = residual, s->is_value = is_value;
    if (is_value) {
        s->meta_per_head = (size_t)capacity * (size_t)(head_dim / group) * 2;
        s->full_rows = residual + 1 < capacity ? residual + 1 : capacity;
    } else {
        s->meta_per_head = (size_t)(capacity / group + 1) * 2 * (size_t)head_dim;
        s->full_rows = residual < capacity ? residual : capacity;
    }
    QuantLayout layout = QUANT_ROWS;
    if (head_dim % 32 == 0 && !is_value && group % 16 == 0) {
        layout = QUANT_TILES;
        s->full_rows = (s->full_rows + TILE - 1) / TILE * TILE;
    } else if (head_dim % 32 == 0 && is_value && group % 32 == 0 && (bits == 1 || bits == 2 || bits == 4)) {
        layout = QUANT_GROUPS;
    }
    s->meta = calloc((size_t)n_heads * s->meta_per_head, sizeof(uint16_t));
    s->full = calloc((size_t)n_heads * (size_t)s->full_rows * (size_t)head_dim, sizeof(uint16_t));
    snprintf(normalised, normalised_len, "kivi:bits=%d,group=%d,residual=%d", bits, group, residual);
    const int ok = !code_store_init(&s->cs, layout, bits, n_heads, head_dim, capacity) && s->meta && s->full;
    return codec_created(s, ok, kivi_destroy, err, errlen);
}

// Keys: scales of token group g (head_dim entries), then its minimums.
static inline uint16_t *kivi_key_meta(const KiviState *s, int head, int g) {
    return s->meta + (size_t)head * s->meta_per_head + (size_t)g * 2 * s->head_dim;
}

// Values: (scale, minimum) pairs of the channel groups of one token.
static inline uint16_t *kivi_value_meta(const KiviState *s, int head, int token) {
    return s->meta + (size_t)head * s->meta_per_head + (size_t)token * (s->head_dim / s->group) * 2;
}

// The full-precision number d of a token in the residual (keys) or window (values).
static inline uint16_t *kivi_full_at(const KiviState *s, int head, int token, int d) {
    const int slot = s->is_value ? token % (s->residual + 1) : token - s->n_quant;
    if (s->cs.layout == QUANT_TILES)
        return s->full + (((size_t)head * (size_t)(s->full_rows / TILE) + (size_t)(slot / TILE)) * (size_t)s->head_dim +
                          (size_t)d) * TILE + (size_t)(slot % TILE);
    return s->full + ((size_t)head * (size_t)s->full_rows + (size_t)slot) * (size_t)s->head_dim + (size_t)d;
}

// One group's parameters from its min and max: stores them, returns the values quantising uses.
static void kivi_params(const KiviState *s, float mn, float mx, uint16_t *scale, uint16_t *minimum,
                        float *sd, float *md) {
    *scale = quant_fp32_to_fp16_sat((mx - mn) / (float)((1 << s->bits) - 1));
    *minimum = quant_fp32_to_fp16_sat(mn);
    *sd = quant_fp16_to_fp32(*scale);
    *md = quant_fp16_to_fp32(*minimum);
}

// fminf and fmaxf as glibc computes them (the second operand on a tie, the other one past a NaN),
// inline.
static inline float kivi_min(float a, float b) { return a < b ? a : (b == b ? b : a); }
static inline float kivi_max(float a, float b) { return a > b ? a : (b == b ? b : a); }

static inline uint8_t kivi_code(float x, float sd, float md, int top) {
    return sd > 0.0f ? (uint8_t)quant_round_clamp((x - md) / sd, 0, top) : 0;
}

// Values: the scale and minimum of each number [c, c + n) of a token, from its channel groups' (meta).
static void kivi_value_chunk_params(const KiviState *s, const uint16_t *meta, int c, int n, float *sd, float *md) {
    const int G = s->group;
    for (int g = c / G; g * G < c + n; g++) { // the groups the chunk meets
        const float sg = quant_fp16_to_fp32(meta[2 * g]), mg = quant_fp16_to_fp32(meta[2 * g + 1]);
        for (int i = g * G > c ? g * G - c : 0; i < n && c + i < (g + 1) * G; i++) sd[i] = sg, md[i] = mg;
    }
}

// Keys: quantise the residual keys [n_quant, upto) as groups of G, per channel, 32 channels at a
// time (their scales and minimums converted once; the codes are what kivi_code gives). upto − n_quant
// is R in a whole-sequence stream, and a multiple of G that fits the residual in a block of a pool.
// Channels [c, c + n) of window keys [t, t + m) (m <= 16) as floats, xf[i][k] for channel c + i and
// token t + k. In tiles (the window's layout at head_dim 32) 16 tokens of a channel from a tile's
// start lie together: one conversion of 16.
static void kivi_key_floats(const KiviState *s, int h, int t, int m, int c, int n, float (*xf)[16]) {
    const int whole = s->cs.layout == QUANT_TILES && m == TILE && (t - s->n_quant) % TILE == 0;
    for (int i = 0; i < n; i++) {
        if (whole) {
            quant_fp16_to_fp32_16(kivi_full_at(s, h, t, c + i), xf[i]);
            continue;
        }
        for (int k = 0; k < m; k++) xf[i][k] = quant_fp16_to_fp32(*kivi_full_at(s, h, t + k, c + i));
    }
}

static void kivi_flush_keys(KiviState *s, int upto) {
    const int hd = s->head_dim, G = s->group, top = (1 << s->bits) - 1;
    uint8_t q[32];
    float sd[32], md[32], xf[32][16];
    for (int h = 0; h < s->n_heads; h++) {
        for (int t0 = s->n_quant; t0 + G <= upto; t0 += G) {
            uint16_t *meta = kivi_key_meta(s, h, t0 / G);
            for (int c = 0; c < hd; c += 32) {
                const int n = hd - c < 32 ? hd - c : 32;
                float mn[32], mx[32];
                for (int i = 0; i < n; i++) mn[i] = INFINITY, mx[i] = -INFINITY;
                for (int t = t0; t < t0 + G; t += TILE) { // token after token, as one pass would
                    const int m = t0 + G - t < TILE ? t0 + G - t : TILE;
                    kivi_key_floats(s, h, t, m, c, n, xf);
                    for (int k = 0; k < m; k++)
                        for (int i = 0; i < n; i++) mn[i] = kivi_min(mn[i], xf[i][k]), mx[i] = kivi_max(mx[i], xf[i][k]);
                }
                for (int i = 0; i < n; i++)
                    kivi_params(s, mn[i], mx[i], &meta[c + i], &meta[hd + c + i], &sd[i], &md[i]);
                for (int t = t0; t < t0 + G; t += TILE) {
                    const int m = t0 + G - t < TILE ? t0 + G - t : TILE;
                    kivi_key_floats(s, h, t, m, c, n, xf);
                    for (int k = 0; k < m; k++) {
                        for (int i = 0; i < n; i++) q[i] = kivi_code(xf[i][k], sd[i], md[i], top);
                        for (int i = n; i < 32; i++) q[i] = 0;
                        code_store_put(&s->cs, h, t + k, c / 32, q, n);
                    }
                }
            }
        }
    }
    s->n_quant = s->n_quant + (upto - s->n_quant) / G * G;
}

// Values: quantise the oldest window value (token n_quant), per token over channel groups.
static void kivi_quantise_oldest_value(KiviState *s) {
    const int hd = s->head_dim, G = s->group, top = (1 << s->bits) - 1;
    const int t = s->n_quant;
    uint8_t q[32];
    float x[32], sd[32], md[32];
    for (int h = 0; h < s->n_heads; h++) {
        uint16_t *meta = kivi_value_meta(s, h, t);
        const uint16_t *row = kivi_full_at(s, h, t, 0); // the window keeps rows
        for (int c = 0; c < hd; c += 32) {
            const int n = hd - c < 32 ? hd - c : 32;
            for (int i = 0; i < n; i++) x[i] = quant_fp16_to_fp32(row[c + i]);
            // the channel groups that start in this chunk get their parameters here (G divides head_dim)
            for (int g = (c + G - 1) / G; g * G < c + n; g++) {
                float mn = INFINITY, mx = -INFINITY;
                for (int d = g * G; d < (g + 1) * G; d++) {
                    const float v = d < c + n ? x[d - c] : quant_fp16_to_fp32(row[d]);
                    mn = kivi_min(mn, v);
                    mx = kivi_max(mx, v);
                }
                float sdd, mdd;
                kivi_params(s, mn, mx, &meta[2 * g], &meta[2 * g + 1], &sdd, &mdd);
            }
            kivi_value_chunk_params(s, meta, c, n, sd, md);
            for (int i = 0; i < n; i++) q[i] = kivi_code(x[i], sd[i], md[i], top);
            for (int i = n; i < 32; i++) q[i] = 0;
            code_store_put(&s->cs, h, t, c / 32, q, n);
        }
    }
    s->n_quant++;
}

static void kivi_append(void *state, const float *vec) {
    KiviState *s = state;
    // Normally end_step has already made room; this covers callers that never call it.
    if (!s->is_value && s->length - s->n_quant == s->residual) kivi_flush_keys(s, s->length);
    if (s->is_value && s->length - s->n_quant == s->residual + 1) kivi_quantise_oldest_value(s);
    for (int h = 0; h < s->n_heads; h++) {
        const float *x = vec + h * s->head_dim;
        if (s->cs.layout == QUANT_TILES) { // a lane of the residual's tile
            uint16_t *lane = kivi_full_at(s, h, s->length, 0);
            for (int d = 0; d < s->head_dim; d++) lane[(size_t)d * TILE] = quant_fp32_to_fp16(x[d]);
        } else {
            uint16_t *row = kivi_full_at(s, h, s->length, 0);
            for (int d = 0; d < s->head_dim; d++) row[d] = quant_fp32_to_fp16(x[d]);
        }
    }
    s->length++;
}

// KIVI's streaming rule, in a sequence's numbering: after the step at `length` tokens, keys are
// quantised in whole residuals of R (the residual empties when it fills), values all but the newest R.
static int kivi_settled(const void *state, int length) {
    const KiviState *s = state;
    if (!s->is_value) return length / s->residual * s->residual;
    return length > s->residual ? length - s->residual : 0;
}

static void kivi_settle(void *state, int n) {
    KiviState *s = state;
    if (n > s->length) n = s->length;
    if (!s->is_value) {
        if (n - s->n_quant >= s->group) kivi_flush_keys(s, n);
    } else {
        while (s->n_quant < n) kivi_quantise_oldest_value(s);
    }
    // A stream whose every token is quantised (a full block of a pool) keeps no full-precision rows:
    // what it holds is what bytes() counts.
    if (s->n_quant == s->capacity) free(s->full), s->full = NULL;
}

// ---- Decoding -------------------------------------------------------------------------------
// x̂ = code · scale + minimum, in that order, everywhere (read() and every kernel's table).

// Numbers [c, c + n) of one head at one token, whatever state the token is in (c a multiple of 32).
// (The fast evaluator's mirror reads every token through here twice, as appended and once settled:
// number c + i's place is found once, and whole runs of 16 fp16 numbers convert together.)
static void kivi_decode_chunk(const KiviState *s, int head, int token, int c, int n, float *out) {
    if (token >= s->n_quant) {
        const uint16_t *x = kivi_full_at(s, head, token, c);
        const size_t step = s->cs.layout == QUANT_TILES ? TILE : 1; // a tile's lane, or a row
        int i = 0;
        for (; step == 1 && i + 16 <= n; i += 16) quant_fp16_to_fp32_16(x + i, out + i);
        for (; i < n; i++) out[i] = quant_fp16_to_fp32(x[(size_t)i * step]);
        return;
    }
    uint8_t q[32];
    float sc[32], mn[32];
    code_store_get(&s->cs, head, token, c / 32, q, n);
    if (s->is_value) {
        kivi_value_chunk_params(s, kivi_value_meta(s, head, token), c, n, sc, mn);
    } else {
        const uint16_t *meta = kivi_key_meta(s, head, token / s->group);
        int i = 0;
        for (; i + 16 <= n; i += 16) {
            quant_fp16_to_fp32_16(meta + c + i, sc + i);
            quant_fp16_to_fp32_16(meta + s->head_dim + c + i, mn + i);
        }
        for (; i < n; i++) sc[i] = quant_fp16_to_fp32(meta[c + i]), mn[i] = quant_fp16_to_fp32(meta[s->head_dim + c + i]);
    }
    for (int i = 0; i < n; i++) out[i] = (float)q[i] * sc[i] + mn[i];
}

static void kivi_read(const void *state, int head, int token, float *out) {
    const KiviState *s = state;
    for (int c = 0; c < s->head_dim; c += 32)
        kivi_decode_chunk(s, head, token, c, s->head_dim - c < 32 ? s->head_dim - c : 32, out + c);
}

// ---- Keys on tiles (affine_kernels.h) -------------------------------------------------------
// Per token group and chunk of 32 channels, tables of q_d · x̂_d(c), x̂_d(c) = c · scale_d + minimum_d
// (at B = 2 and 1, two and four channels per lookup); at B > 4, q_d · x̂_d decoded in order of d.
// A few token groups' tables are kept while the tiles walk through them (groups arrive in order, so
// replacing the slot after the newest is enough). The parameters of the group after the newest are
// converted ahead: the tables broadcast them from memory, and a broadcast reading a vector store
// still in flight would wait for it.
#define KIVI_SLOTS 5
typedef struct {
    const KiviState *s;
    int head, nq;
    const float *q;
    int group[KIVI_SLOTS];
    int next;
    int ahead; // the group whose parameters sm[ahead % 2] hold, or -1
    float table[KIVI_SLOTS][32][16] __attribute__((aligned(64))); // a table row in one cache line
    float lv[4][16] __attribute__((aligned(64)));                 // lv[t][e] = code_t(e)
    float sm[2][64] __attribute__((aligned(64))); // a group's scales of the chunk, then its minimums
    float dec[4][64];                             // B > 4: each tile's
} KiviKeys;

static const AffineForm KIVI_KEY_FORM = {1, 1, 1, 32}; // q_d · (c · scale_d + minimum_d)

static void kivi_key_params(const KiviState *s, int head, int g, int c, float *sm) {
    const uint16_t *meta = kivi_key_meta(s, head, g);
    for (int i = 0; i < 32; i += 16) {
        quant_fp16_to_fp32_16(meta + 32 * c + i, sm + i);
        quant_fp16_to_fp32_16(meta + s->head_dim + 32 * c + i, sm + 32 + i);
    }
}

static inline const float (*kivi_tables_for(KiviKeys *kt, int g, int c, const int bits))[16] {
    for (int i = 0; i < KIVI_SLOTS; i++)
        if (kt->group[i] == g) return (const float(*)[16])kt->table[i];
    const int i = kt->next;
    kt->next = (kt->next + 1) % KIVI_SLOTS;
    kt->group[i] = g;
    if (kt->ahead != g) kivi_key_params(kt->s, kt->head, g, c, kt->sm[g % 2]);
    if ((g + 1) * kt->s->group < kt->s->n_quant) kivi_key_params(kt->s, kt->head, g + 1, c, kt->sm[(g + 1) % 2]);
    kt->ahead = g + 1;
#ifdef VEC16
    __asm__("" ::: "memory"); // the parameters broadcast from memory
#endif
    affine_step_tables(kt->q + 32 * c, kt->sm[g % 2], bits, (const float(*)[16])kt->lv, KIVI_KEY_FORM, kt->table[i]);
    return (const float(*)[16])kt->table[i];
}

static inline void kivi_key_job(void *ctx, int c, int t0, int nt, int bits, AffineTileJob *job) {
    KiviKeys *kt = ctx;
    const int tpg = kt->s->group / TILE; // tiles per group
    if (t0 == 0) { // a new chunk
        for (int i = 0; i < KIVI_SLOTS; i++) kt->group[i] = -1;
        kt->next = 0;
        kt->ahead = -1;
    }
    for (int k = 0; k < nt; k++) {
        const int g = (t0 / TILE + k) / tpg;
        job->qh[k] = NULL;
        job->sm[k] = kt->dec[k];
        if (bits > 4)
            kivi_key_params(kt->s, kt->head, g, c, kt->dec[k]);
        else
            job->tables[k] = kivi_tables_for(kt, g, c, bits);
    }
    job->shared = nt == 4 && t0 / TILE / tpg == (t0 / TILE + 3) / tpg; // one group
}

static void kivi_key_finish(void *ctx, int c, int t0, int nt, float (*acc)[TILE], float *out) {
    const KiviKeys *kt = ctx;
    (void)c;
    for (int k = 0; k < nt; k++)
        memcpy(out + t0 + k * TILE, acc[k],
               sizeof(float) * (size_t)(kt->nq - t0 - k * TILE < TILE ? kt->nq - t0 - k * TILE : TILE));
}

// Quantised keys [0, nq).
static ALWAYS_INLINE void kivi_scores_quantised(const KiviState *s, int head, const float *q, float *out, int nq,
                                                const int hd, const int bits) {
    // Not zeroed: 11 KB of tables, and in a pool this runs once per block of every head (kivi's
    // kernels read one state), so clearing them would be paid again for every block. Every field is
    // written before it is read (kivi_key_job at t0 = 0, kivi_tables_for, kivi_key_params).
    KiviKeys kt;
    kt.s = s, kt.head = head, kt.nq = nq, kt.q = q;
    affine_levels(bits, 0, kt.lv);
    affine_score_tiles((AffineChunk){code_store_unit(&s->cs, head, 0), s->cs.unit_bytes, s->cs.units, NULL, 0, 0, 0}, nq, hd, bits, AFFINE_UNSIGNED,
                       0, bits <= 4, 1, KIVI_KEY_FORM, q, kivi_key_job, kivi_key_finish, &kt, out);
}

// The residual keys [n_quant, n): fp16 tiles, per lane Σ_d q_d · k̂_d, the even and the odd d in
// two sums (two chains) added at the end.
static ALWAYS_INLINE void kivi_scores_residual(const KiviState *s, int head, const float *q, float *out, int n,
                                               const int hd) {
    const int r = n - s->n_quant;
    for (int t0 = 0; t0 < r; t0 += TILE) {
        const uint16_t *tile = kivi_full_at(s, head, s->n_quant + t0, 0);
        float acc[TILE] __attribute__((aligned(64))) = {0};
#ifdef VEC16
        v16 even = v16_zero(), odd = even;
        for (int d = 0; d + 2 <= hd; d += 2) {
            even = v16_add(even, v16_mul(v16_set1(q[d]), v16_from_fp16(tile + (size_t)d * TILE)));
            odd = v16_add(odd, v16_mul(v16_set1(q[d + 1]), v16_from_fp16(tile + (size_t)(d + 1) * TILE)));
        }
        v16_store(acc, v16_add(even, odd));
#else
        float odd[TILE] = {0};
        for (int d = 0; d + 2 <= hd; d += 2) {
#pragma omp simd
            for (int l = 0; l < TILE; l++) {
                acc[l] += q[d] * quant_fp16_to_fp32(tile[(size_t)d * TILE + l]);
                odd[l] += q[d + 1] * quant_fp16_to_fp32(tile[(size_t)(d + 1) * TILE + l]);
            }
        }
        for (int l = 0; l < TILE; l++) acc[l] += odd[l];
#endif
        const int m = r - t0 < TILE ? r - t0 : TILE;
        memcpy(out + s->n_quant + t0, acc, sizeof(float) * (size_t)m);
    }
}

// ---- Values ---------------------------------------------------------------------------------
// The quantised tokens [0, nq), p_t · x̂_t with x̂_t(c) = c · scale_t + minimum_t (affine_kernels.h):
// in token groups of g = 4/B tokens a table Σ_t p_t · x̂_t(code_t(e)) per group; in rows (other
// widths and shapes) decoded in registers. Even and odd tokens in separate sums; then the window's
// tokens [nq, n), fp16 rows, p_j · v̂_j into the sums of parity j % 2. out = even + odd.

// AffinePrep: p and the (scale, minimum) pairs of tokens j0 .. j0+63 for chunk c (zero from nq on).
static const float *kivi_value_params(const void *state, int head, int c, const float *p, int nq, int j0, float *pw,
                                      float *sm) {
    const KiviState *s = state;
    const int ng = s->head_dim / s->group, g = 32 * c / s->group;
    const uint16_t *meta = s->meta + (size_t)head * s->meta_per_head;
    if (ng == 1) { // (scale, minimum) pairs side by side, converted 8 tokens' at a time (a pool's
                   // blocks of 32 tokens are never 64 in one call, and one by one held the step back)
        const int pairs = 2 * (nq - j0 < 4 * TILE ? nq - j0 : 4 * TILE);
        int i = 0;
        for (; i + TILE <= pairs; i += TILE) quant_fp16_to_fp32_16(meta + (size_t)j0 * 2 + i, sm + i);
        for (; i < pairs; i++) sm[i] = quant_fp16_to_fp32(meta[(size_t)j0 * 2 + i]);
        for (; i < 8 * TILE; i++) sm[i] = 0.0f;
        if (pairs == 8 * TILE) return p + j0;
        for (int k = 0; k < 4 * TILE; k++) pw[k] = 2 * k < pairs ? p[j0 + k] : 0.0f;
        return pw;
    }
    for (int i = 0; i < 4 * TILE; i++) {
        const int j = j0 + i;
        const uint16_t *m = meta + ((size_t)j * ng + (size_t)g) * 2;
        pw[i] = j < nq ? p[j] : 0.0f;
        sm[2 * i] = j < nq ? quant_fp16_to_fp32(m[0]) : 0.0f;
        sm[2 * i + 1] = j < nq ? quant_fp16_to_fp32(m[1]) : 0.0f;
    }
    return pw;
}

static const AffineForm KIVI_FORM = {1, 1, 2, 1}; // p · (c · scale + minimum), (scale, minimum) pairs

// ---- Values in rows (other widths), and the window -----------------------------------------

// sums[j % 2] += p_j · v̂_j for the window's tokens [nq, n) of chunk c: numbers 2i and 2i + 1 to
// sums[.][i] and sums[.][16 + i] (the token groups' order, `pairs`), else number i to sums[.][i].
static ALWAYS_INLINE void kivi_window(const KiviState *s, int head, int c, const float *p, int nq, int n,
                                      const int pairs, float (*sums)[32]) {
    for (int j = nq; j < n; j++) {
        float *restrict a = sums[j % 2], v[32];
        const uint16_t *row = kivi_full_at(s, head, j, 32 * c);
        quant_fp16_to_fp32_16(row, v);
        quant_fp16_to_fp32_16(row + 16, v + 16);
        const float pj = p[j];
        if (pairs) {
#pragma omp simd
            for (int i = 0; i < 16; i++) {
                a[i] += pj * v[2 * i];
                a[16 + i] += pj * v[2 * i + 1];
            }
        } else {
#pragma omp simd
            for (int i = 0; i < 32; i++) a[i] += pj * v[i];
        }
    }
}

static ALWAYS_INLINE void kivi_mix_values(const KiviState *s, int head, const float *p, float *out, int n, const int hd,
                                          const int bits) {
    if (hd % 32 || s->group % 32) { // odd shapes, and chunks of 32 numbers over several channel groups
        codec_mix_by_read(CODEC_ONE_BLOCK(s, s->head_dim), kivi_read, s->head_dim, head, p, out, n);
        return;
    }
    const int nq = n < s->n_quant ? n : s->n_quant;
    const int groups = (bits == 1 || bits == 2 || bits == 4) && s->cs.layout == QUANT_GROUPS, g = groups ? 4 / bits : 1;
    float lv[4][16] __attribute__((aligned(64))); // lv[t][e] = code_t(e)
    affine_levels(bits, 0, lv);
    for (int c = 0; c < hd / 32; c++) {
        float sums[2][32] __attribute__((aligned(64)));
        const AffineChunk ch = {code_store_unit(&s->cs, head, 0) + (size_t)c * (groups ? 16 : 4 * bits),
                                s->cs.unit_bytes, s->cs.units, NULL, 0, 0, 0};
        if (groups) {
            affine_mix_groups(ch, g, (const float(*)[16])lv, KIVI_FORM, kivi_value_params, s, head, c, p, nq,
                              (float(*)[2][16])sums);
        } else { // the chunk lies in one channel group
            affine_mix_rows(ch, NULL, bits, AFFINE_UNSIGNED, 0, KIVI_FORM, kivi_value_params, s, head, c, p, nq, sums[0],
                            sums[1]);
        }
        kivi_window(s, head, c, p, nq, n, groups, sums);
        if (groups)
            quant_group_sum((const float(*)[2][16])sums, out + 32 * c);
        else
            for (int i = 0; i < 32; i++) out[32 * c + i] = sums[0][i] + sums[1][i];
    }
}

// Keys: the quantised ones and the residual on tiles, or all on rows.
static ALWAYS_INLINE void kivi_scores_keys(const KiviState *s, int head, const float *q, float *out, int n,
                                           const int hd, const int bits) {
    if (s->cs.layout == QUANT_ROWS) { // groups of other sizes, other head_dims
        codec_scores_by_read(CODEC_ONE_BLOCK(s, hd), kivi_read, hd, head, q, out, n);
        return;
    }
    kivi_scores_quantised(s, head, q, out, n < s->n_quant ? n : s->n_quant, hd, bits);
    kivi_scores_residual(s, head, q, out, n, hd);
}

// Instances per width at micro's head_dim 32; other head_dims with run-time values.
AFFINE_INSTANCES_32(kivi, const KiviState *, kivi_scores_keys, kivi_mix_values);

static void kivi_scores(const void *state, int head, const float *q, float *out, int n) {
    const KiviState *s = state;
    if (s->is_value)
        codec_scores_by_read(CODEC_ONE_BLOCK(s, s->head_dim), kivi_read, s->head_dim, head, q, out, n);
    else if (s->head_dim == 32)
        kivi_scores_32[s->bits](s, head, q, out, n);
    else
        kivi_scores_keys(s, head, q, out, n, s->head_dim, s->bits);
}

static void kivi_mix(const void *state, int head, const float *p, float *out, int n) {
    const KiviState *s = state;
    if (!s->is_value)
        codec_mix_by_read(CODEC_ONE_BLOCK(s, s->head_dim), kivi_read, s->head_dim, head, p, out, n);
    else if (s->head_dim == 32)
        kivi_mix_32[s->bits](s, head, p, out, n);
    else
        kivi_mix_values(s, head, p, out, n, s->head_dim, s->bits);
}

static size_t kivi_bytes(const void *state) {
    const KiviState *s = state;
    const size_t hd = (size_t)s->head_dim, nq = (size_t)s->n_quant;
    const size_t full = (size_t)(s->length - s->n_quant) * hd * sizeof(uint16_t);
    size_t quant;
    if (s->is_value) // codes + (scale, min) per channel group, per token
        quant = nq * (s->cs.row_bytes + (hd / (size_t)s->group) * 2 * sizeof(uint16_t));
    else // codes per token + (scale, min) per channel, per group of G tokens
        quant = nq * s->cs.row_bytes + (nq / (size_t)s->group) * hd * 2 * sizeof(uint16_t);
    return (quant + full) * (size_t)s->n_heads;
}

// In a pool (codec_core.h's per-block kernels): one head's codes and parameters of a block, ahead of
// the kernels.
static void kivi_ahead(const void *state, int head) {
    const KiviState *s = state;
    const uint8_t *codes = code_store_unit(&s->cs, head, 0);
    const char *meta = (const char *)(s->meta + (size_t)head * s->meta_per_head);
    for (size_t i = 0; i < (size_t)s->cs.units * s->cs.unit_bytes; i += 64) __builtin_prefetch(codes + i);
    for (size_t i = 0; i < s->meta_per_head * sizeof(uint16_t); i += 64) __builtin_prefetch(meta + i);
}

// kivi_scores and kivi_mix: what reads back (latent attention's fast evaluator mirrors it, and
// reads a token again when the window's slide gives it its final form).
static int kivi_by_read(const void *state) {
    const KiviState *s = state;
    if (s->is_value) return CODEC_SCORES_BY_READ | (s->head_dim % 32 || s->group % 32 ? CODEC_MIX_BY_READ : 0);
    return (s->cs.layout == QUANT_ROWS ? CODEC_SCORES_BY_READ : 0) | CODEC_MIX_BY_READ;
}

// The fast evaluator's mirror (kvcache.h's MirrorOps, tokens that settle): read gives x̂, the fp16
// number while a token is open, code · scale + minimum once settled, which the kernels' products
// take as they are (q_d · x̂ and p_j · x̂). Keys on tiles: the settled sum in order of d, in pairs at
// B = 2 (a lookup of two channels); at B = 1 a lookup adds four: not mirrored. The residual's sum
// has its even and odd channels apart. Values whose kernels are kivi's own (32-number chunks in one
// channel group): every token by parity, the settled ones in pairs at B = 2 (a token group of two);
// at B = 1 a group adds four tokens: not mirrored.
static void kivi_mirror_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    (void)factor, (void)offset;
    kivi_read(state, head, token, x);
}

static const MirrorOps kivi_key_ops[2] = {
    {.read = kivi_mirror_read, .settles = 1, .settled_key_sum = MIRROR_KEYS_IN_ORDER, .open_key_sum = MIRROR_KEYS_EVEN_ODD},
    {.read = kivi_mirror_read, .settles = 1, .settled_key_sum = MIRROR_KEYS_IN_PAIRS, .open_key_sum = MIRROR_KEYS_EVEN_ODD}};
static const MirrorOps kivi_value_ops[2] = {{.read = kivi_mirror_read, .settles = 1, .split_mix = 1},
                                            {.read = kivi_mirror_read, .settles = 1, .split_mix = 1, .pair_groups = 1}};

static const MirrorOps *kivi_key_mirror(const void *state) {
    const KiviState *s = state;
    return !s->is_value && s->cs.layout == QUANT_TILES && s->bits >= 2 ? &kivi_key_ops[s->bits == 2] : NULL;
}

static const MirrorOps *kivi_value_mirror(const void *state) {
    const KiviState *s = state;
    const int kernels = s->head_dim % 32 == 0 && s->group % 32 == 0; // kivi_mix_values' own, not by read
    return s->is_value && kernels && s->head_dim <= 64 && s->bits >= 2 ? &kivi_value_ops[s->bits == 2] : NULL;
}

static void kivi_scores_blocks(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    codec_scores_per_block(b, kivi_scores, kivi_ahead, head, q, out, n);
}

static void kivi_mix_blocks(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    codec_mix_per_block(b, kivi_mix, kivi_ahead, b->head_dim, head, p, out, n);
}

// The codes, the metadata and the window's rows (gone once every token is quantised), and where
// the window stands.
static void kivi_copy(void *dst, const void *src) {
    KiviState *d = dst;
    const KiviState *s = src;
    code_store_copy(&d->cs, &s->cs);
    memcpy(d->meta, s->meta, sizeof(uint16_t) * (size_t)s->n_heads * s->meta_per_head);
    if (s->full)
        memcpy(d->full, s->full, sizeof(uint16_t) * (size_t)s->n_heads * (size_t)s->full_rows * (size_t)s->head_dim);
    else
        free(d->full), d->full = NULL;
    d->length = s->length;
    d->n_quant = s->n_quant;
}

static const CodecOps kivi_ops = {.append = kivi_append, .settled = kivi_settled, .settle = kivi_settle,
                                  .scores = kivi_scores_blocks, .mix = kivi_mix_blocks, .read = kivi_read,
                                  .key_mirror = kivi_key_mirror, .value_mirror = kivi_value_mirror,
                                  .by_read = kivi_by_read, .bytes = kivi_bytes, .copy = kivi_copy,
                                  .destroy = kivi_destroy};

const CodecFamily CODEC_FAMILY(codec_kivi) = {.name = "kivi", .ops = &kivi_ops, .create = kivi_create,
    .help = "kivi                 KIVI: B-bit min/max groups of G, keys per channel, values per token, newest R "
            "in fp16 (bits=2,group=32,residual=128)",
    // Groups of 16 fit a pool's blocks of 16 tokens.
    .examples = (const char *const[]){"kivi:bits=2,group=16,residual=32", "kivi:bits=4,group=16,residual=16",
                                      "kivi:bits=3,group=16,residual=64", NULL}};
