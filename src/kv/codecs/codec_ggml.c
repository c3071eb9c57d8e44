// llama.cpp's block formats along each head: q8_0, q4_0, q4_1, q5_0, q5_1 and iq4_nl. A block is
// 32 consecutive numbers of one head's vector (one block per head per token at head_dim 32), with
// llama.cpp's byte layout (fp16 d [, fp16 m] [, qh[4]], qs) and the rounding rules of its reference
// quantisers (ggml-quants.c), rewritten here:
//   q8_0   d = absmax/127, q = roundf(x/d) (half away from zero)             34 bytes per block
//   q4_0   d = extreme/−8, q = min(15, trunc(x/d + 8.5)), x̂ = (q − 8)·d       18
//   q4_1   d = (max−min)/15, m = min, q = min(15, trunc((x−min)/d + 0.5))    20
//   q5_0   d = extreme/−16, q = min(31, trunc(x/d + 16.5)), x̂ = (q − 16)·d    22
//   q5_1   d = (max−min)/31, m = min, q = min(31, trunc((x−min)/d + 0.5))    24
//   iq4_nl non-uniform codebook {−127 … 113}, llama.cpp's reference quantiser      18
//          (iq4_nl:search: its weighted scale search, see quantise_iq4_nl)
// Option qround=q8 scores keys as llama.cpp's CPU attention does (block_scores_qround).
// As in llama.cpp, codes are computed with the fp32 scale (1/d) and d, m are stored as fp16 (round
// to nearest even); decode uses the stored fp16 values. Nibbles: number j in the low nibble of
// qs[j], number j+16 in the high one; q5's fifth bits in qh (bit j for number j).
// head_dim must be a multiple of 32.
//
// In memory a block's fields are kept apart, laid out for the kernel that reads them (quant.h,
// "Kernel layouts"): d, m and qh in arrays [head][block][token]; qs (or q8_0's codes) of keys in
// token tiles (16 tokens, word-interleaved: lanes = tokens), of values one row per token. read()
// puts a block back together byte for byte. The score kernel of q4_0, q4_1 and iq4_nl looks each
// nibble up in a table q_j · level per call and multiplies by d after the block (q4_1 adds m·Σq);
// their mix kernel builds a table p · x̂(c) per token and looks up both nibbles of each byte. q8_0,
// q5_0 and q5_1 decode in registers.
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "code_store.h"
#include "codec_core.h"
#include "codecs.h"

#define TILE QUANT_TILE

#define QK 32

typedef enum { FMT_Q8_0, FMT_Q4_0, FMT_Q4_1, FMT_Q5_0, FMT_Q5_1, FMT_IQ4_NL } BlockFormat;

// A format's name, its block's bytes, and where qs (or q8_0's codes) start in the block: after d,
// then m, then qh, as far as the format has them.
typedef struct {
    const char *name;
    size_t block_bytes, qs_offset;
} BlockInfo;

static const BlockInfo block_info[] = {
    [FMT_Q8_0] = {"q8_0", 34, 2}, [FMT_Q4_0] = {"q4_0", 18, 2}, [FMT_Q4_1] = {"q4_1", 20, 4},
    [FMT_Q5_0] = {"q5_0", 22, 6}, [FMT_Q5_1] = {"q5_1", 24, 8}, [FMT_IQ4_NL] = {"iq4_nl", 18, 2},
};

// Every format, and the id its family and kernels are named by.
#define BLOCK_FORMATS(X) X(q8_0, FMT_Q8_0) X(q4_0, FMT_Q4_0) X(q4_1, FMT_Q4_1) X(q5_0, FMT_Q5_0) X(q5_1, FMT_Q5_1) \
    X(iq4_nl, FMT_IQ4_NL)

// iq4_nl's codebook (kvalues_iq4nl).
static const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

typedef struct {
    // qs (or q8_0's codes) as 4-bit (8-bit) codes of a code store: keys in token tiles,
    // [head][tile][block][code_bytes / 4 words][16 lanes]; values in rows, [head][token][block][code_bytes]
    CodeStore cs;
    BlockFormat format;
    int n_heads, head_dim, capacity, length, is_key;
    int blocks;           // per head per token: head_dim / 32
    int slots;            // per head: capacity rounded up to whole tiles
    size_t block_bytes;   // llama.cpp's block, all fields
    size_t code_bytes;    // of a block's qs (16) or q8_0's codes (32)
    uint16_t *d, *m;      // [head][block][slot]; m for q4_1 and q5_1
    uint32_t *qh;         // [head][block][slot] for q5_0 and q5_1
    size_t d_at, m_at, qh_at; // where d, m and qh lie from the state
    size_t extent;            // the state's allocation: this struct, the codes, d, m, qh
    int search;           // iq4_nl:search (else llama.cpp's reference quantiser)
    int qround;           // qround=q8: keys are scored against the query rounded to q8_0 / q8_1
} BlockState;

// A state is one allocation (codec_core.h): this struct, the codes, d, m, qh.
#define BLOCK_CODES_AT codec_line(sizeof(BlockState))

static void block_destroy(void *state) {
    if (state) codec_state_free(state, ((BlockState *)state)->extent);
}

// ---- Block layout helpers -------------------------------------------------------------------
static inline float load_f16(const uint8_t *p) {
    uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
    return quant_fp16_to_fp32(h);
}

static inline void store_f16(uint8_t *p, float x) {
    uint16_t h = quant_fp32_to_fp16(x);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

static inline uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

// llama.cpp converts `x + 8.5f` etc. with a truncating cast; the operand is never negative here
// beyond rounding noise, and the clamp keeps it in 0..hi.
static inline int trunc_clamp(float v, int hi) {
    if (!(v > 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

// ---- Quantisers: one block of 32 numbers --------------------------------------------------
// q8_0's rounding, of a cached block and of a query (qround=q8): d = absmax/127 in fp32, q =
// roundf(x/d) (half away from zero) within ±127 (|x/d| <= 127 up to rounding; NaN gives 0).
static float round_q8(const float *x, int8_t *q) {
    const float amax = quant_absmax(x, QK);
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK; j++) {
        const float v = x[j] * id;
        q[j] = (int8_t)(v >= 127.0f ? 127 : v <= -127.0f ? -127 : v == v ? (int)roundf(v) : 0);
    }
    return d;
}

static void quantise_q8_0(const float *x, uint8_t *b) {
    int8_t q[QK];
    store_f16(b, round_q8(x, q));
    memcpy(b + 2, q, QK);
}

// llama.cpp's code layout from `at` (after d [and m]): number j in the low nibble of qs[j], number
// j + 16 in the high one; at 5 bits the fifth bits first, in the 4 bytes of qh (bit j for number j).
static void pack_block_codes(const uint8_t *q, uint8_t *at, int bits) {
    uint8_t *qs = at + (bits == 5 ? 4 : 0);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + QK / 2] & 0x0f) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j | (uint32_t)((q[j + QK / 2] >> 4) & 1) << (j + QK / 2);
    }
    if (bits == 5)
        for (int i = 0; i < 4; i++) at[i] = (uint8_t)(qh >> (8 * i));
}

// q4_0 (bits 4) and q5_0 (bits 5): d = signed extreme / −2^(bits−1).
static void quantise_qx_0(const float *x, uint8_t *b, int bits) {
    const int half = 1 << (bits - 1), top = (1 << bits) - 1;
    float amax;
    const float max = quant_extreme(x, QK, &amax);
    const float d = max / (float)-half;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    uint8_t q[QK];
    for (int j = 0; j < QK; j++) q[j] = (uint8_t)trunc_clamp(x[j] * id + ((float)half + 0.5f), top);
    pack_block_codes(q, b + 2, bits);
}

// q4_1 (bits 4) and q5_1 (bits 5): d = (max − min) / (2^bits − 1), m = min.
static void quantise_qx_1(const float *x, uint8_t *b, int bits) {
    const int top = (1 << bits) - 1;
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < QK; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / (float)top;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b, d);
    store_f16(b + 2, min);
    uint8_t q[QK];
    for (int j = 0; j < QK; j++) q[j] = (uint8_t)trunc_clamp((x[j] - min) * id + 0.5f, top);
    pack_block_codes(q, b + 4, bits);
}

// The codebook index nearest to v (ties to the upper entry), as llama.cpp's best_index_int8: the
// interval [values[lo], values[lo+1]) holding v is found by counting the entries not above it (no
// branches: the encoder calls this 500 times per block, and a binary search mispredicts), then the
// nearer end wins, upper on a tie; below the first entry 0, from the last 15 (NaN too).
// Without a branch, so that a block's loop over its numbers runs in SIMD lanes: the table repeats
// its last entry for lo = 15, whose choice is then overruled.
static const float iq4nl_floats[17] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113, 113};

static inline int iq4nl_nearest(float v) {
    int lo = 0;
    for (int k = 1; k < 16; k++) lo += v >= iq4nl_floats[k];
    const int near = v - iq4nl_floats[lo] < iq4nl_floats[lo + 1] - v ? lo : lo + 1;
    return lo == 15 || v != v ? 15 : near;
}

// iq4_nl, two ways. Both weight each number by x² (llama.cpp without an importance matrix) and
// fit the scale by weighted least squares, d = Σw·q·x / Σw·q², summing in order of j as llama.cpp.
//   reference (default; llama.cpp's quantize_row_iq4_nl_ref, ntry = -1, which is what its KV cache
//     writes): d0 = extreme/−127 maps the signed extreme onto −127; every number takes the entry
//     nearest to x/d0; the block stores those entries with the refitted d (no re-assignment).
//   search (`iq4_nl:search`; quantize_iq4_nl, ntry = 7): start from d = extreme/127 (the extreme on
//     +127, clipped to 113), refit, then try the 15 scales that map the extreme to −127 + t
//     (t = −7..7) and keep the best fit (Σw·q·x)²/Σw·q²; finally re-assign every number to its
//     nearest entry under the chosen scale.
// The 16 assignments of the search are independent, so they run side by side, one per SIMD lane
// (each lane's sums in order of j; gcc vectorises the lookups); the choice between them is then made
// in order.
static void quantise_iq4_nl(const float *x, uint8_t *b, int search) {
    static const float values[17] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113, 113};
    const int ntry = 7;
    float w[QK];
    for (int j = 0; j < QK; j++) w[j] = x[j] * x[j];
    float amax;
    const float max = quant_extreme(x, QK, &amax);
    float d = 0.0f;
    uint8_t L[QK];
    if (amax >= 1e-15f && !search) {
        const float id = 1.0f / (max / (float)iq4nl_values[0]);
#pragma omp simd
        for (int j = 0; j < QK; j++) L[j] = (uint8_t)iq4nl_nearest(id * x[j]); // SIMD lanes; the sums in order
        float sumqx = 0.0f, sumq2 = 0.0f;
        for (int j = 0; j < QK; j++) {
            const float q = (float)iq4nl_values[L[j]];
            sumqx += w[j] * q * x[j];
            sumq2 += w[j] * q * q;
        }
        d = sumqx / sumq2;
    } else if (amax >= 1e-15f) {
        const float d0 = -max / (float)iq4nl_values[0]; // max/127: the extreme maps to +127
        float ids[16], sumqx[16] = {0}, sumq2[16] = {0};
        ids[0] = 1.0f / d0;
        for (int t = -ntry; t <= ntry; t++) ids[t + ntry + 1] = ((float)t + iq4nl_values[0]) / max;
        for (int j = 0; j < QK; j++) {
#pragma omp simd
            for (int k = 0; k < 16; k++) { // q = the codebook value nearest to ids[k] · x[j], as iq4nl_nearest
                const float v = ids[k] * x[j];
                int lo = 0;
                for (int e = 1; e < 16; e++) lo += v >= values[e];
                const int near = v - values[lo] < values[lo + 1] - v ? lo : lo + 1;
                const float q = values[lo == 15 || v != v ? 15 : near];
                sumqx[k] += w[j] * q * x[j];
                sumq2[k] += w[j] * q * q;
            }
        }
        d = sumqx[0] / sumq2[0];
        float best = d * sumqx[0];
        for (int k = 1; k < 16; k++) {
            if (sumq2[k] > 0.0f && sumqx[k] * sumqx[k] > best * sumq2[k]) {
                d = sumqx[k] / sumq2[k];
                best = d * sumqx[k];
            }
        }
    }
    store_f16(b, d);
    if (search || !(amax >= 1e-15f)) { // a zero block takes the entry nearest to 0 throughout
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
#pragma omp simd
        for (int j = 0; j < QK; j++) L[j] = (uint8_t)iq4nl_nearest(id * x[j]);
    }
    for (int j = 0; j < QK / 2; j++) b[2 + j] = (uint8_t)(L[j] | (L[j + QK / 2] << 4));
}

static void quantise_block(BlockFormat f, const float *x, uint8_t *b, int search) {
    switch (f) {
    case FMT_Q8_0: quantise_q8_0(x, b); break;
    case FMT_Q4_0: quantise_qx_0(x, b, 4); break;
    case FMT_Q5_0: quantise_qx_0(x, b, 5); break;
    case FMT_Q4_1: quantise_qx_1(x, b, 4); break;
    case FMT_Q5_1: quantise_qx_1(x, b, 5); break;
    case FMT_IQ4_NL: quantise_iq4_nl(x, b, search); break;
    }
}

// ---- The codec ------------------------------------------------------------------------------
// Whether a format's blocks have m / qh.
static int block_has_m(BlockFormat f) { return f == FMT_Q4_1 || f == FMT_Q5_1; }
static int block_has_qh(BlockFormat f) { return f == FMT_Q5_0 || f == FMT_Q5_1; }

// The options: `search` (iq4_nl only) and `qround=none|q8`.
static int block_options(BlockFormat f, CodecSpec *spec, int *search, int *qround, char *err, size_t errlen) {
    const char *name = block_info[f].name;
    const char *sr = f == FMT_IQ4_NL ? spec_string(spec, "search") : NULL;
    if (sr && *sr) {
        snprintf(err, errlen, "%s: search is a bare option (iq4_nl:search), not key=value", name);
        return -1;
    }
    *search = sr != NULL;
    return spec_choice(spec, "qround", (const char *const[]){"none", "q8", NULL}, qround, err, errlen);
}

static void *block_create(BlockFormat f, CodecSpec *spec, int n_heads, int head_dim, int capacity,
                          char *normalised, size_t normalised_len, char *err, size_t errlen) {
    const char *name = block_info[f].name;
    if (codec_check_shape(name, n_heads, head_dim, capacity, QK, err, errlen)) return NULL; // blocks of 32
    int search, qround;
    if (block_options(f, spec, &search, &qround, err, errlen)) return NULL;
    const int is_key = !spec_is_value(spec), slots = (capacity + TILE - 1) / TILE * TILE;
    CodeStore cs;
    const size_t codes = code_store_shape(&cs, is_key ? QUANT_TILES : QUANT_ROWS, f == FMT_Q8_0 ? 8 : 4, n_heads,
                                          head_dim, capacity),
                 meta = (size_t)n_heads * (size_t)(head_dim / QK) * (size_t)slots,
                 d_at = BLOCK_CODES_AT + codec_line(codes), m_at = d_at + codec_line(meta * sizeof(uint16_t)),
                 qh_at = m_at + (block_has_m(f) ? codec_line(meta * sizeof(uint16_t)) : 0);
    // zeroed: the lanes of a partial tile, and scales past the last token, hold finite numbers
    const size_t extent = qh_at + (block_has_qh(f) ? meta * sizeof(uint32_t) : 0);
    BlockState *s = codec_state_alloc(extent);
    if (!s) return codec_created(s, 0, block_destroy, err, errlen);
    s->extent = codec_line(extent);
    s->cs = cs;
    s->cs.codes = (uint8_t *)s + BLOCK_CODES_AT;
    s->format = f;
    s->search = search;
    s->qround = qround;
    s->n_heads = n_heads, s->head_dim = head_dim, s->capacity = capacity;
    s->is_key = is_key;
    s->block_bytes = block_info[f].block_bytes;
    s->blocks = head_dim / QK;
    s->slots = slots;
    s->code_bytes = f == FMT_Q8_0 ? 32 : 16;
    s->d_at = d_at, s->m_at = m_at, s->qh_at = qh_at;
    s->d = (uint16_t *)(void *)((uint8_t *)s + d_at);
    if (block_has_m(f)) s->m = (uint16_t *)(void *)((uint8_t *)s + m_at);
    if (block_has_qh(f)) s->qh = (uint32_t *)(void *)((uint8_t *)s + qh_at);
    // Options that are not the default show (so that `q4_0` stays `q4_0`).
    snprintf(normalised, normalised_len, "%s%s%s%s", name, search || qround ? ":" : "", search ? "search" : "",
             qround ? (search ? ",qround=q8" : "qround=q8") : "");
    return s;
}

static inline size_t block_meta(const BlockState *s, int head, int block, int token) {
    return ((size_t)head * (size_t)s->blocks + (size_t)block) * (size_t)s->slots + (size_t)token;
}

// One block in llama.cpp's byte layout, put together from the arrays (read) or taken apart (append).
// Byte j of qs is the code store's numbers 2j (low nibble) and 2j + 1 (high); q8_0's are its bytes.
static void block_gather(const BlockState *s, int head, int token, int i, uint8_t *b) {
    const size_t at = block_meta(s, head, i, token);
    b[0] = (uint8_t)(s->d[at] & 0xff);
    b[1] = (uint8_t)(s->d[at] >> 8);
    if (block_has_m(s->format)) {
        b[2] = (uint8_t)(s->m[at] & 0xff);
        b[3] = (uint8_t)(s->m[at] >> 8);
    }
    if (block_has_qh(s->format))
        for (int k = 0; k < 4; k++) b[block_info[s->format].qs_offset - 4 + k] = (uint8_t)(s->qh[at] >> (8 * k));
    uint8_t *qs = b + block_info[s->format].qs_offset, q[QK];
    code_store_get(&s->cs, head, token, i, q, QK);
    for (int k = 0; k < (int)s->code_bytes; k++) qs[k] = s->cs.bits == 8 ? q[k] : (uint8_t)(q[2 * k] | q[2 * k + 1] << 4);
}

static void block_scatter(BlockState *s, int head, int token, int i, const uint8_t *b) {
    const size_t at = block_meta(s, head, i, token);
    s->d[at] = (uint16_t)(b[0] | b[1] << 8);
    if (block_has_m(s->format)) s->m[at] = (uint16_t)(b[2] | b[3] << 8);
    if (block_has_qh(s->format)) s->qh[at] = load_u32(b + block_info[s->format].qs_offset - 4);
    const uint8_t *qs = b + block_info[s->format].qs_offset;
    uint8_t q[QK];
    for (int k = 0; k < QK; k++) q[k] = s->cs.bits == 8 ? qs[k] : (uint8_t)(qs[k / 2] >> (4 * (k % 2)) & 15);
    code_store_put(&s->cs, head, token, i, q, QK);
}

static void block_append(void *state, const float *vec) {
    BlockState *s = state;
    uint8_t b[34];
    for (int h = 0; h < s->n_heads; h++)
        for (int i = 0; i < s->blocks; i++) {
            quantise_block(s->format, vec + h * s->head_dim + i * QK, b, s->search);
            block_scatter(s, h, s->length, i, b);
        }
    s->length++;
}

// The integer level of each number of a block (llama.cpp's byte layout), before d and m.
static void block_levels(BlockFormat f, const uint8_t *b, int *lv) {
    const uint8_t *qs = b + block_info[f].qs_offset;
    const uint32_t qh = block_has_qh(f) ? load_u32(qs - 4) : 0;
    for (int j = 0; j < QK; j++) {
        const int c = f == FMT_Q8_0 ? (int8_t)qs[j] : j < QK / 2 ? qs[j] & 15 : qs[j - QK / 2] >> 4;
        const int hi = (int)((qh >> j) & 1) << 4;
        lv[j] = f == FMT_Q4_0 ? c - 8 : f == FMT_Q5_0 ? (c | hi) - 16 : f == FMT_Q5_1 ? c | hi
              : f == FMT_IQ4_NL ? iq4nl_values[c] : c;
    }
}

// x̂ = level · d (+ m), as every kernel decodes.
static void block_read(const void *state, int head, int token, float *out) {
    const BlockState *s = state;
    uint8_t b[34];
    int lv[QK];
    for (int i = 0; i < s->blocks; i++) {
        block_gather(s, head, token, i, b);
        block_levels(s->format, b, lv);
        const float d = load_f16(b), m = block_has_m(s->format) ? load_f16(b + 2) : 0.0f;
        for (int j = 0; j < QK; j++) out[i * QK + j] = block_has_m(s->format) ? (float)lv[j] * d + m : (float)lv[j] * d;
    }
}

// ---- Kernels ---------------------------------------------------------------------------------
#define ALWAYS_INLINE QUANT_ALWAYS_INLINE

// The level a code stands for before the scale: q4_0 c − 8, iq4_nl the codebook, q4_1 c (then
// ·d + m).
static ALWAYS_INLINE float block_level(BlockFormat f, int c) {
    return f == FMT_IQ4_NL ? (float)iq4nl_values[c] : f == FMT_Q4_0 ? (float)(c - 8) : (float)c;
}

static int block_tabled(BlockFormat f) { return f == FMT_Q4_0 || f == FMT_Q4_1 || f == FMT_IQ4_NL; }

// Sixteen tokens' d (or m) of one block as floats, 0 past `n`.
static ALWAYS_INLINE void block_scales16(const uint16_t *h, int n_left, float *out) {
    quant_fp16_to_fp32_16(h, out);
    for (int l = n_left; l < TILE; l++) out[l] = 0.0f;
}

// Scores on key tiles (affine_kernels.h). Per block: q4_0, q4_1 and iq4_nl sum table lookups
// table[s][nibble s], nibble s being number s/2 + 16·(s%2) (qs byte s/2, low or high); q8_0 and q5
// sum q_j · level in order of j. Then per token: Σ over blocks of sum · d (q4_1, q5_1: + m · Σq).
// The kernels walk the stream's blocks (a pool's): tables once per query, each tile's codes, scales
// and fifth bits from its own block.
typedef struct {
    const CodecBlocks *b;
    BlockFormat f;
    int head, n;
    const float *q;
    float qsum; // the block's Σq
    float tables[32][16] __attribute__((aligned(64)));
} BlockKeys;

// Token t's entry (d, m or qh: `field_at` from the state, entries of `size` bytes) for llama.cpp block
// i, in t's block, found from the block's pointer and the first block's shape.
static ALWAYS_INLINE const void *block_field(const CodecBlocks *b, size_t field_at, size_t size, int head, int i, int t) {
    int local;
    const uint8_t *block = codec_block(b, t, &local);
    return block + field_at + block_meta(b->states[0], head, i, local) * size;
}

// The head's codes of one chunk (from `offset` in a unit) in every block of the n tokens.
static inline AffineChunk block_chunk(const CodecBlocks *b, int head, int n, size_t offset) {
    return code_store_chunk_at(b, &((const BlockState *)b->states[0])->cs, BLOCK_CODES_AT, head, n, offset);
}

// Asks for the d and m (and qh) of llama.cpp block i of the 16 tokens from t ahead of their use
// (when t < n), and the next head's codes and fields there while this head reads its own: the
// decoder runs a row's heads one after another, and a pool's blocks lie where the hardware
// prefetcher does not look (as int's kernels do); the last head asks for the first head of the
// stream read next (CodecBlocks.next). Heads after the first ask ahead only for the fields of
// blocks i > 0, which the head before did not ask for.
static ALWAYS_INLINE void block_prefetch(const CodecBlocks *b, int head, int i, int t, int n, int next_head) {
    const BlockState *s0 = b->states[0];
    if (t >= n) return;
    int local;
    const uint8_t *block = next_head ? codec_next_head_block(b, s0->n_heads, &head, t, &local) : codec_block(b, t, &local);
    if (!block) return;
    const size_t at = block_meta(s0, head, i, local);
    __builtin_prefetch(block + s0->d_at + 2 * at);
    if (s0->m) __builtin_prefetch(block + s0->m_at + 2 * at);
    if (s0->qh) __builtin_prefetch(block + s0->qh_at + 4 * at);
    if (next_head) code_store_prefetch16(&s0->cs, block + BLOCK_CODES_AT, head, local);
}

static inline void block_key_job(void *ctx, int i, int t0, int nt, int bits, AffineTileJob *job) {
    BlockKeys *k = ctx;
    const BlockFormat f = k->f;
    if (t0 == 0) { // block i's tables and Σq
        float lv[4][16] __attribute__((aligned(64))), qs[QK]; // lv[0] used (one code per lookup)
        k->qsum = 0.0f;
        for (int j = 0; j < QK; j++) k->qsum += k->q[i * QK + j];
        for (int c = 0; c < 16; c++) lv[0][c] = block_level(f, c);
        for (int st = 0; st < QK; st++) qs[st] = k->q[i * QK + st / 2 + 16 * (st % 2)];
        if (block_tabled(f)) affine_step_tables(qs, NULL, bits, (const float(*)[16])lv, (AffineForm){0, 0, 0, 0}, k->tables);
    }
    const BlockState *s0 = k->b->states[0];
    for (int t = 0; t < 4 && k->n > k->b->block; t++) { // one block: the hardware prefetcher follows it
        if (k->head == 0 || i > 0) block_prefetch(k->b, k->head, i, t0 + (16 + t) * TILE, k->n, 0); // 256 tokens ahead
        if (i == 0) block_prefetch(k->b, k->head, i, t0 + t * TILE, k->n, 1);
    }
    for (int t = 0; t < 4; t++) {
        job->tables[t] = (const float(*)[16])k->tables, job->sm[t] = NULL, job->qh[t] = NULL;
        if (block_has_qh(f) && t < nt) job->qh[t] = block_field(k->b, s0->qh_at, 4, k->head, i, t0 + t * TILE);
    }
    job->shared = 1;
}

static inline void block_key_finish(void *ctx, int i, int t0, int nt, float (*acc)[TILE], float *out) {
    const BlockKeys *k = ctx;
    for (int t = 0; t < nt; t++) {
        const BlockState *s0 = k->b->states[0];
        float d[TILE], m[TILE], *o = out + t0 + t * TILE;
        const int cnt = k->n - t0 - t * TILE < TILE ? k->n - t0 - t * TILE : TILE;
        block_scales16(block_field(k->b, s0->d_at, 2, k->head, i, t0 + t * TILE), TILE, d);
        if (s0->m) block_scales16(block_field(k->b, s0->m_at, 2, k->head, i, t0 + t * TILE), TILE, m);
        for (int l = 0; l < cnt; l++) {
            const float sum = i == 0 ? 0.0f : o[l]; // the blocks before
            o[l] = s0->m ? sum + (acc[t][l] * d[l] + m[l] * k->qsum) : sum + acc[t][l] * d[l];
        }
    }
}

static ALWAYS_INLINE void block_scores_impl(const CodecBlocks *b, int head, const float *q, float *out, int n,
                                            const BlockFormat f, const int hd) {
    BlockKeys k = {.b = b, .f = f, .head = head, .n = n, .q = q};
    affine_score_tiles(block_chunk(b, head, n, 0), n, hd, f == FMT_Q8_0 ? 8 : 4,
                       f == FMT_Q8_0 ? AFFINE_SIGNED : AFFINE_Q5, f == FMT_Q5_0 ? 16 : 0, block_tabled(f), 0,
                       (AffineForm){0, 0, 0, 0}, q, block_key_job, block_key_finish, &k, out);
}

// The mix kernels' parameters (AffinePrep) of tokens j0 .. j0+63 for block i: d in sm[0..64) and m
// in sm[64..128), 0 from n on; the weights p itself (q8_0: p · d).
static const float *block_prep(const void *ctx, int head, int i, const float *p, int n, int j0, float *w, float *sm) {
    const CodecBlocks *b = ctx;
    const BlockState *s0 = b->states[0];
    for (int l = 0; l < 4 * TILE && n > b->block; l += TILE) { // one block: the hardware prefetcher follows it
        if (head == 0 || i > 0) block_prefetch(b, head, i, j0 + l + 16 * TILE, n, 0); // 256 tokens ahead
        if (i == 0) block_prefetch(b, head, i, j0 + l, n, 1);
    }
    for (int l = 0; l < 4 * TILE && j0 + l < n; l += TILE) {
        block_scales16(block_field(b, s0->d_at, 2, head, i, j0 + l), n - j0 - l, sm + l);
        if (s0->m) block_scales16(block_field(b, s0->m_at, 2, head, i, j0 + l), n - j0 - l, sm + 4 * TILE + l);
    }
    if (s0->format != FMT_Q8_0) return p + j0;
    for (int k = 0; k < 4 * TILE && j0 + k < n; k++) w[k] = p[j0 + k] * sm[k];
    return w;
}

// Mix on value rows (affine_kernels.h), even and odd tokens apart (out = even + odd). q4_0, q4_1,
// iq4_nl: a token group of one, a table p · x̂(c) per token with x̂(c) = level(c) · d (+ m) as read()
// decodes, looked up by both nibbles of each qs byte (low: numbers 0..15, high: 16..31). q8_0 and
// q5: decoded in registers, (p · d) · code for q8_0, p · x̂ for q5 (whose fifth bits, a word per
// token, the kernel reads from one array: q5 runs block by block, block_mix).
static ALWAYS_INLINE void block_mix_impl(const CodecBlocks *b, int head, const float *p, float *out, int n,
                                         const BlockFormat f, const int hd) {
    const BlockState *s0 = b->states[0];
    float lv[1][16] __attribute__((aligned(64)));
    for (int c = 0; c < 16; c++) lv[0][c] = block_level(f, c);
    const AffineForm form = {f != FMT_Q8_0, block_has_m(f), 1, 4 * TILE};
    for (int i = 0; i < hd / QK; i++) {
        const AffineChunk ch = block_chunk(b, head, n, (size_t)i * s0->code_bytes);
        float sums[2][32] __attribute__((aligned(64)));
        if (block_tabled(f))
            affine_mix_groups(ch, 1, (const float(*)[16])lv, form, block_prep, b, head, i, p, n, (float(*)[2][16])sums);
        else
            affine_mix_rows(ch, s0->qh ? s0->qh + block_meta(s0, head, i, 0) : NULL, 8,
                            f == FMT_Q8_0 ? AFFINE_SIGNED : AFFINE_Q5, f == FMT_Q5_0 ? 16 : 0, form, block_prep, b,
                            head, i, p, n, sums[0], sums[1]);
        for (int j = 0; j < QK; j++) out[i * QK + j] = sums[0][j] + sums[1][j];
    }
}

// One instance per format at micro's head_dim 32, one for other head_dims (up to 8 blocks).
#define BLOCK_INSTANCE(id, fmt)                                                                    \
    static void scores_##id(const CodecBlocks *b, int head, const float *q, float *out, int n) {   \
        if (b->head_dim == 32)                                                                     \
            block_scores_impl(b, head, q, out, n, fmt, 32);                                        \
        else                                                                                       \
            block_scores_impl(b, head, q, out, n, fmt, b->head_dim);                               \
    }                                                                                              \
    static void mix_##id(const CodecBlocks *b, int head, const float *p, float *out, int n) {      \
        if (b->head_dim == 32)                                                                     \
            block_mix_impl(b, head, p, out, n, fmt, 32);                                           \
        else                                                                                       \
            block_mix_impl(b, head, p, out, n, fmt, b->head_dim);                                  \
    }
BLOCK_FORMATS(BLOCK_INSTANCE)
#undef BLOCK_INSTANCE

typedef void (*BlockKernel)(const CodecBlocks *, int, const float *, float *, int);
#define BLOCK_SCORES(id, fmt) [fmt] = scores_##id,
#define BLOCK_MIX(id, fmt) [fmt] = mix_##id,
static const BlockKernel block_scores_fn[] = {BLOCK_FORMATS(BLOCK_SCORES)}, block_mix_fn[] = {BLOCK_FORMATS(BLOCK_MIX)};
#undef BLOCK_SCORES
#undef BLOCK_MIX

// ---- qround=q8: llama.cpp's arithmetic ---------------------------------------------------------
// llama.cpp's CPU attention does not multiply a quantised key by the float query: it rounds the
// query to q8_0 blocks (q8_1 for q4_1 and q5_1, whose minimum needs the block sum) and takes the
// dot product in integers within a block (ggml's vec_dot_*_q8_* reference code):
//   query block: d = absmax/127 (fp16), q = roundf(x/d) (half away from zero), q8_1 also
//                s = fp16(d · Σq) with the unrounded d;
//   per block:   Σ_j level_j · q_j exactly, then q4_0 (Σ·d_k)·d_q; q8_0, q5_0, iq4_nl (d_k·d_q)·Σ;
//                q4_1, q5_1 (d_k·d_q)·Σ + m_k·s_q; the blocks' results added in order.
typedef struct {
    int8_t q[QK];
    float d, s;
} QueryBlock;

static void round_query(const float *x, QueryBlock *y) {
    const float d = round_q8(x, y->q);
    int sum = 0;
    for (int j = 0; j < QK; j++) sum += y->q[j];
    y->d = quant_fp16_to_fp32(quant_fp32_to_fp16(d));
    y->s = quant_fp16_to_fp32(quant_fp32_to_fp16((float)sum * d));
}

static void block_scores_qround(const void *state, int head, const float *q, float *out, int n) {
    const BlockState *s = state;
    QueryBlock qb[MICRO_MAX_WIDTH / QK];
    for (int i = 0; i < s->blocks; i++) round_query(q + i * QK, &qb[i]);
    for (int t = 0; t < n; t++) {
        float sum = 0.0f;
        for (int i = 0; i < s->blocks; i++) {
            uint8_t b[34];
            int lv[QK], dot = 0;
            block_gather(s, head, t, i, b);
            block_levels(s->format, b, lv);
            for (int j = 0; j < QK; j++) dot += lv[j] * qb[i].q[j];
            const float dk = load_f16(b), dd = dk * qb[i].d;
            switch (s->format) {
            case FMT_Q4_0: sum += (float)dot * dk * qb[i].d; break;
            case FMT_Q4_1:
            case FMT_Q5_1: sum += dd * (float)dot + load_f16(b + 2) * qb[i].s; break;
            default: sum += dd * (float)dot; break;
            }
        }
        out[t] = sum;
    }
}

// What the per-block kernels read of one head in a state (codes, d, m, qh), asked for two blocks ahead
// (codec_core.h): a pool's blocks lie where the hardware prefetcher does not look.
static void block_ahead(const void *state, int head) {
    const BlockState *s = state;
    const uint8_t *base = state;
    const size_t meta = (size_t)s->blocks * (size_t)s->slots, at = (size_t)head * meta;
    const uint8_t *codes = code_store_unit(&s->cs, head, 0);
    for (size_t k = 0; k < (size_t)s->cs.units * s->cs.unit_bytes; k += CODEC_LINE) __builtin_prefetch(codes + k);
    for (size_t k = 0; k < 2 * meta; k += CODEC_LINE) __builtin_prefetch(base + s->d_at + 2 * at + k);
    for (size_t k = 0; s->m && k < 2 * meta; k += CODEC_LINE) __builtin_prefetch(base + s->m_at + 2 * at + k);
    for (size_t k = 0; s->qh && k < 4 * meta; k += CODEC_LINE) __builtin_prefetch(base + s->qh_at + 4 * at + k);
}

static void block_mix_q5_state(const void *state, int head, const float *p, float *out, int n) {
    const BlockState *s = state;
    block_mix_fn[s->format](CODEC_ONE_BLOCK(state, s->head_dim), head, p, out, n);
}

static void block_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    const BlockState *s = b->states[0];
    if (s->is_key && s->qround) // integer dot products per token: block by block
        codec_scores_per_block(b, block_scores_qround, NULL, head, q, out, n);
    else if (s->is_key && s->blocks <= 8)
        block_scores_fn[s->format](b, head, q, out, n);
    else
        codec_scores_by_read(b, block_read, s->head_dim, head, q, out, n);
}

static void block_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    const BlockState *s = b->states[0];
    if (s->is_key)
        codec_mix_by_read(b, block_read, s->head_dim, head, p, out, n);
    else if (s->qh && n > b->block) // q5's fifth bits are one array per block: block by block
        codec_mix_per_block(b, block_mix_q5_state, block_ahead, s->head_dim, head, p, out, n);
    else
        block_mix_fn[s->format](b, head, p, out, n);
}

static size_t block_bytes(const void *state) {
    const BlockState *s = state;
    return s->block_bytes * (size_t)s->blocks * (size_t)s->length * s->n_heads;
}

static size_t block_extent(const void *state) { return ((const BlockState *)state)->extent; }

static void block_copy(void *dst, const void *src) {
    const BlockState *s = src;
    codec_payload_copy(dst, src, BLOCK_CODES_AT, s->extent);
    ((BlockState *)dst)->length = s->length;
}

// block_scores and block_mix: what reads back (latent attention's fast evaluator mirrors it).
static int block_by_read(const void *state) {
    const BlockState *s = state;
    return (s->is_key && (s->qround || s->blocks <= 8) ? 0 : CODEC_SCORES_BY_READ) | (s->is_key ? CODEC_MIX_BY_READ : 0);
}

// The fast evaluator's mirror (kvcache.h, MirrorOps) at one block a head (head_dim 32), of q8_0,
// q4_0 and iq4_nl, whose key kernels finish a score as 0 + sum · d (plus_zero):
// - q8_0: x̃ the codes and the factor d. Its keys' kernel sums q_j · code_j in order of j; its
//   values' sums (p_j · d_j) · code_j over even and odd tokens apart, then adds the two (split_mix),
//   as int's.
// - q4_0 and iq4_nl: the keys' kernel sums the lookups q_j · level_j in the order of the nibbles,
//   number s/2 + 16·(s%2) at step s: x̃ the levels in that order, q̃ the query alike, the factor d.
//   Their values' tables hold p_j · (level · d_j), read's x̂ times p_j, summed even and odd apart.
// Not mirrored: q4_1 and q5 (a minimum's Σq in another order, a fifth bit per word), a query rounded
// to q8 (qround), a head of several blocks (a product per block added to the sum).
static int block_nibble(int s) { return s / 2 + QK / 2 * (s % 2); }

static void block_mirror_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    const BlockState *s = state;
    uint8_t b[34];
    int lv[QK];
    (void)offset;
    block_gather(s, head, token, 0, b);
    block_levels(s->format, b, lv);
    *factor = load_f16(b);
    for (int j = 0; j < QK; j++) x[j] = (float)lv[s->format == FMT_Q8_0 ? j : block_nibble(j)];
}

static void block_mirror_query(const void *state, const float *q, float *out) {
    (void)state;
    for (int j = 0; j < QK; j++) out[j] = q[block_nibble(j)];
}

static void block_value_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    (void)factor, (void)offset;
    block_read(state, head, token, x);
}

static const MirrorOps block_key_mirror_ops = {.read = block_mirror_read, .has_factor = 1, .plus_zero = 1},
                       block_nibble_key_mirror_ops = {.read = block_mirror_read, .query = block_mirror_query,
                                                      .has_factor = 1, .plus_zero = 1},
                       block_value_mirror_ops = {.read = block_mirror_read, .has_factor = 1, .split_mix = 1},
                       block_nibble_value_mirror_ops = {.read = block_value_read, .split_mix = 1};

static int block_mirrored(const BlockState *s) {
    const BlockFormat f = s->format;
    return (f == FMT_Q8_0 || f == FMT_Q4_0 || f == FMT_IQ4_NL) && !s->qround && s->blocks == 1;
}

static const MirrorOps *block_key_mirror(const void *state) {
    const BlockState *s = state;
    if (!s->is_key || !block_mirrored(s)) return NULL;
    return s->format == FMT_Q8_0 ? &block_key_mirror_ops : &block_nibble_key_mirror_ops;
}

static const MirrorOps *block_value_mirror(const void *state) {
    const BlockState *s = state;
    if (s->is_key || !block_mirrored(s)) return NULL;
    return s->format == FMT_Q8_0 ? &block_value_mirror_ops : &block_nibble_value_mirror_ops;
}

static const CodecOps block_ops = {.append = block_append, .scores = block_scores, .mix = block_mix, .read = block_read,
                                   .key_mirror = block_key_mirror, .value_mirror = block_value_mirror,
                                   .by_read = block_by_read, .bytes = block_bytes, .extent = block_extent,
                                   .copy = block_copy, .destroy = block_destroy};

#define BLOCK_FAMILY(id, fmt, help_text)                                                             \
    static void *create_##id(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised, \
                             size_t normalised_len, char *err, size_t errlen) {                      \
        return block_create(fmt, spec, n_heads, head_dim, capacity, normalised, normalised_len, err, errlen); \
    }                                                                                                \
    const CodecFamily CODEC_FAMILY(codec_##id) = {.name = #id, .help = help_text, .ops = &block_ops, .create = create_##id, \
                                                  .examples = (const char *const[]){#id, NULL}};

BLOCK_FAMILY(q8_0, FMT_Q8_0, "q8_0                 llama.cpp q8_0: blocks of 32, int8 codes, fp16 absmax/127 scale (8.5 bits); qround=q8 (any block format) rounds the query as llama.cpp does")
BLOCK_FAMILY(q4_0, FMT_Q4_0, "q4_0                 llama.cpp q4_0: blocks of 32, 4-bit codes, fp16 scale extreme/-8 (4.5 bits)")
BLOCK_FAMILY(q4_1, FMT_Q4_1, "q4_1                 llama.cpp q4_1: blocks of 32, 4-bit codes, fp16 scale and minimum (5 bits)")
BLOCK_FAMILY(q5_0, FMT_Q5_0, "q5_0                 llama.cpp q5_0: blocks of 32, 5-bit codes, fp16 scale extreme/-16 (5.5 bits)")
BLOCK_FAMILY(q5_1, FMT_Q5_1, "q5_1                 llama.cpp q5_1: blocks of 32, 5-bit codes, fp16 scale and minimum (6 bits)")
BLOCK_FAMILY(iq4_nl, FMT_IQ4_NL, "iq4_nl               llama.cpp iq4_nl: blocks of 32, 16-level non-uniform codebook, fp16 scale (4.5 bits); :search for the scale search")
