// fp32, fp16, bf16 and fp8: one codec for every float format, driven by a format description. Each
// number is stored as one code of the format, rounded to nearest even (quant.h); fp8 saturates.
// fp32 is the reference codec: a 32-bit format whose conversion is the identity, so it stores every
// number as it is; every delta is measured against it. It takes any head_dim and no options.
// Specs: `fp16`, `bf16`, `fp8:e4m3`, `fp8:e5m2` (fp8 needs its format), each optionally with
//   scale=none  (default) numbers are cast as they are, as inference servers ship a float cache;
//   scale=token one fp16 scale per head per token, absmax / the format's largest finite value, so
//               that the largest number of the vector lands on it; numbers are divided by the
//               stored (fp16-rounded) scale before the cast.
// and fp16 with
//   qround=f16  the other operand of attention's products rounded to fp16 first: the query a key
//               stream scores, the weights a stream mixes. That is llama.cpp's f16 cache without
//               flash attention, where both products are matrix products in f16 (docs/gguf.md):
//               the arithmetic the interop check compares, not a cache format of its own.
//
// Keys lie in tiles of 16 tokens, dimension-major ([tile][d][16 lanes]), values one row per token: the score kernel runs one lane per token with no horizontal sums, the
// mix kernel 16 numbers per vector. Both sum in the same order in their portable and AVX-512 forms
// (per token Σ_d q_d · x_d in order of d, then · scale; per number even and odd tokens apart, then
// added), and the AVX-512 decoders are exact, so both give the same bits.
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "codec_core.h"
#include "codecs.h"

#define TILE QUANT_TILE
#ifdef VEC16
#define VEC16_ON 1
#else
#define VEC16_ON 0
#endif
#define ALWAYS_INLINE QUANT_ALWAYS_INLINE

typedef enum { FMT_FP16, FMT_BF16, FMT_E4M3, FMT_E5M2, FMT_FP32 } FloatFormat;

// What a format is: its name in a spec, the bytes of a code, the largest finite value (scale=token
// maps absmax there), how to tell a code that holds an infinity or NaN, and what the AVX-512
// kernels' decoders need (see float_lo16): the unit their decoded values are divided by, and the
// bound below which a query number or weight times the unit stays finite.
typedef struct {
    const char *option; // fp8's format option; NULL for the families named after their format
    int bytes;
    float max;
    uint32_t special_mask, special_min; // (code & mask) >= min: an infinity or NaN
    float unit, limit;
} FloatFormatInfo;

static const FloatFormatInfo formats[] = {
    [FMT_FP16] = {NULL, 2, 65504.0f, 0x7fff, 0x7c00, 0x1p112f, 0x1p15f},
    [FMT_BF16] = {NULL, 2, 0x1.fep127f, 0x7fff, 0x7f80, 1.0f, INFINITY},
    [FMT_E4M3] = {"e4m3", 1, 448.0f, 0x7f, 0x7f, 0x1p8f, 0x1p100f},
    [FMT_E5M2] = {"e5m2", 1, 57344.0f, 0x7f, 0x7c, 0x1p112f, 0x1p15f},
    [FMT_FP32] = {NULL, 4, FLT_MAX, 0, 1, 1.0f, INFINITY}, // the AVX-512 kernels load it as it is
};

typedef struct {
    FloatFormat format;
    int n_heads, head_dim, capacity, length, is_key;
    int scaled;
    int qround;       // qround=f16: queries and weights rounded to fp16 before their products
    int tiles, slots; // per head: key tiles, and scale slots (capacity rounded up to whole tiles)
    int special;      // an infinity or NaN was stored: the AVX-512 kernels leave the stream alone
    size_t bytes;     // of one code
    uint8_t *codes;   // keys: [head][tile][d][16 lanes]; values: [head][token][head_dim]
    uint16_t *scales; // [head][slot] fp16, only with scale=token (zero past the last token)
    size_t scales_at; // the scales' offset from the state
    size_t extent;    // the state's allocation: this struct, the codes, the scales
} FloatState;

// A state is one allocation (codec_core.h): this struct, the codes, the scales.
#define FLOAT_CODES_AT codec_line(sizeof(FloatState))

static void float_destroy(void *state) {
    if (state) codec_state_free(state, ((FloatState *)state)->extent);
}

static uint32_t float_encode(float x, FloatFormat f) {
    switch (f) {
    case FMT_FP16: return quant_fp32_to_fp16(x);
    case FMT_BF16: return quant_fp32_to_bf16(x);
    case FMT_E4M3: return quant_fp32_to_fp8(x, QUANT_FP8_E4M3);
    case FMT_FP32: return quant_to_bits(x);
    default: return quant_fp32_to_fp8(x, QUANT_FP8_E5M2);
    }
}

// Code i of an array of codes of format f (constant in the kernels, so the switch folds away).
static ALWAYS_INLINE float float_decode(const uint8_t *codes, size_t i, const FloatFormat f) {
    switch (f) {
    case FMT_FP16: return quant_fp16_to_fp32(((const uint16_t *)(const void *)codes)[i]);
    case FMT_BF16: return quant_bf16_to_fp32(((const uint16_t *)(const void *)codes)[i]);
    case FMT_E4M3: return quant_e4m3_to_fp32(codes[i]);
    case FMT_FP32: return ((const float *)(const void *)codes)[i];
    default: return quant_e5m2_to_fp32(codes[i]);
    }
}

// Which format a spec names: the family gives fp32, fp16 and bf16, fp8 takes exactly one bare option.
static int float_format(const char *family, CodecSpec *spec, FloatFormat *f, char *err, size_t errlen) {
    if (strcmp(family, "fp8") != 0) {
        *f = strcmp(family, "fp32") == 0 ? FMT_FP32 : family[0] == 'f' ? FMT_FP16 : FMT_BF16;
        return 0;
    }
    const char *e4 = spec_string(spec, "e4m3"), *e5 = spec_string(spec, "e5m2");
    if ((e4 && *e4) || (e5 && *e5)) {
        snprintf(err, errlen, "fp8: the format is a bare option (fp8:e4m3 or fp8:e5m2), not key=value");
        return -1;
    }
    if (!e4 == !e5) {
        snprintf(err, errlen, "fp8: give exactly one format: fp8:e4m3 or fp8:e5m2");
        return -1;
    }
    *f = e5 ? FMT_E5M2 : FMT_E4M3;
    return 0;
}

static void *float_create(const char *family, CodecSpec *spec, int n_heads, int head_dim, int capacity,
                          char *normalised, size_t normalised_len, char *err, size_t errlen) {
    FloatFormat f;
    if (float_format(family, spec, &f, err, errlen)) return NULL;
    int scaled = 0;
    if (f != FMT_FP32 && spec_choice(spec, "scale", (const char *const[]){"none", "token", NULL}, &scaled, err, errlen))
        return NULL;
    int qround = 0;
    if (f == FMT_FP16 && spec_choice(spec, "qround", (const char *const[]){"none", "f16", NULL}, &qround, err, errlen))
        return NULL;
    // fp32 takes any width its scratch holds; the narrower formats store pairs.
    if (codec_check_shape(family, n_heads, head_dim, capacity, f == FMT_FP32 ? 1 : 2, err, errlen)) return NULL;
    const int is_key = !spec_is_value(spec), tiles = (capacity + TILE - 1) / TILE;
    const size_t codes = (size_t)n_heads * (size_t)(is_key ? tiles * TILE : capacity) * (size_t)head_dim *
                         (size_t)formats[f].bytes,
                 scales_at = FLOAT_CODES_AT + codec_line(codes);
    // zeroed: the lanes of a partial tile hold finite numbers
    const size_t extent = scales_at + (scaled ? (size_t)n_heads * (size_t)tiles * TILE * 2 : 0);
    FloatState *s = codec_state_alloc(extent);
    if (!s) return codec_created(s, 0, float_destroy, err, errlen);
    s->extent = codec_line(extent);
    s->format = f;
    s->n_heads = n_heads, s->head_dim = head_dim, s->capacity = capacity;
    s->scaled = scaled;
    s->qround = qround;
    s->bytes = (size_t)formats[f].bytes;
    s->is_key = is_key;
    s->tiles = tiles;
    s->slots = tiles * TILE;
    s->codes = (uint8_t *)s + FLOAT_CODES_AT;
    s->scales_at = scales_at;
    if (scaled) s->scales = (uint16_t *)(void *)((uint8_t *)s + scales_at);
    // fp8 always names its format and scale (its normalised form since it was written); fp16 and
    // bf16 name the scale only when it is not the default, so that `fp16` stays `fp16`.
    if (formats[f].option)
        snprintf(normalised, normalised_len, "%s:%s,scale=%s", family, formats[f].option, scaled ? "token" : "none");
    else
        snprintf(normalised, normalised_len, "%s%s%s%s", family, scaled || qround ? ":" : "",
                 scaled ? "scale=token" : "", qround ? (scaled ? ",qround=f16" : "qround=f16") : "");
    return s;
}

// Where number d of one head at one token is stored, counted in codes. Key tiles hold a lane's
// 16-bit numbers in pairs, 2i and 2i+1 in one 32-bit word ([tile][d / 2][16 lanes][2]), so that an
// AVX-512 load of 16 words gives both as floats by shifts; 8- and 32-bit codes lie [tile][d][16 lanes].
static inline size_t float_at(const FloatState *s, int head, int token, int d) {
    if (!s->is_key) return ((size_t)head * (size_t)s->capacity + (size_t)token) * (size_t)s->head_dim + (size_t)d;
    const size_t tile = ((size_t)head * (size_t)s->tiles + (size_t)(token / TILE)) * (size_t)s->head_dim * TILE;
    if (s->bytes == 2) return tile + ((size_t)(d / 2) * TILE + (size_t)(token % TILE)) * 2 + (size_t)(d % 2);
    return tile + (size_t)d * TILE + (size_t)(token % TILE);
}

static inline size_t float_slot(const FloatState *s, int head, int token) {
    return (size_t)head * (size_t)s->slots + (size_t)token;
}

static inline float float_scale(const FloatState *s, int head, int token) {
    return s->scaled ? quant_fp16_to_fp32(s->scales[float_slot(s, head, token)]) : 1.0f;
}

// The codes of numbers v[0, n): fp16 16 at a time by the CPU's conversion (round to nearest even,
// subnormals kept, overflow to infinity: the same bits as quant_fp32_to_fp16 for every number, checked
// over all 2^32 inputs) where no NaN is among them; the rest one by one. Filling a pool's fp16 blocks
// spent most of its time converting.
static void float_encode_row(const float *v, int n, FloatFormat f, uint32_t *codes) {
    int d = 0;
#ifdef QUANT_AVX512
    for (; f == FMT_FP16 && d + 16 <= n; d += 16) {
        const __m512 x = _mm512_loadu_ps(v + d);
        if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q)) break; // a NaN: its payload, as quant.c keeps it
        _mm512_storeu_si512(codes + d, _mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
#elif defined(QUANT_F16C)
    for (; f == FMT_FP16 && d + 8 <= n; d += 8) {
        const __m256 x = _mm256_loadu_ps(v + d);
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) break; // a NaN: as above
        _mm256_storeu_si256((__m256i *)(void *)(codes + d),
                            _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
#endif
    for (; d < n; d++) codes[d] = float_encode(v[d], f);
}

static void float_append(void *state, const float *vec) {
    FloatState *s = state;
    const int hd = s->head_dim;
    const FloatFormatInfo *info = &formats[s->format];
    for (int h = 0; h < s->n_heads; h++) {
        const float *x = vec + h * hd;
        float sd = 1.0f;
        if (s->scaled) {
            float amax = 0.0f;
            for (int d = 0; d < hd; d++) amax = quant_max_abs(amax, x[d]);
            uint16_t code = quant_fp32_to_fp16_sat(amax / info->max);
            sd = quant_fp16_to_fp32(code);
            // An all-zero vector (or one whose scale underflows fp16) keeps scale 1: no 0/0.
            if (!(sd > 0.0f)) {
                code = quant_fp32_to_fp16(1.0f);
                sd = 1.0f;
            }
            s->scales[float_slot(s, h, s->length)] = code;
        }
        float v[MICRO_MAX_WIDTH];
        uint32_t codes[MICRO_MAX_WIDTH];
        for (int d = 0; d < hd; d++) {
            v[d] = x[d];
            if (s->scaled) { // divided by the rounded scale the extreme may pass max: saturate (NaN stays)
                v[d] /= sd;
                v[d] = v[d] > info->max ? info->max : v[d] < -info->max ? -info->max : v[d];
            }
        }
        float_encode_row(v, hd, s->format, codes);
        // Number d's place from the first's, without float_at's divisions; the state's fields read
        // once (the stores could alias them, so the compiler reloaded them for every number).
        const size_t at0 = float_at(s, h, s->length, 0), bytes = s->bytes;
        const size_t step = !s->is_key ? 1 : bytes == 2 ? 2 * TILE : TILE; // from one number (pair) to the next
        const int pair = s->is_key && bytes == 2;
        uint8_t *restrict out = s->codes;
        uint32_t special = 0;
        for (int d = 0; d < hd; d++) {
            const uint32_t c = codes[d];
            special |= (c & info->special_mask) >= info->special_min;
            const size_t at = at0 + (pair ? (size_t)(d / 2) * step + (size_t)(d % 2) : (size_t)d * step);
            if (bytes == 4)
                ((uint32_t *)(void *)out)[at] = c;
            else if (bytes == 2)
                ((uint16_t *)(void *)out)[at] = (uint16_t)c;
            else
                out[at] = (uint8_t)c;
        }
        s->special |= (int)special;
    }
    s->length++;
}

// One head's numbers at one token, of a constant format: number d lies at at0 + d (values), at0 +
// d·16 (8- and 32-bit keys) or at0 + (d/2)·32 + d%2 (16-bit keys), float_at's places without its
// divisions for every number (the fast evaluator's mirror reads every token this way).
static ALWAYS_INLINE void float_read_format(const FloatState *s, size_t at0, float sd, float *out, const FloatFormat f) {
    const int hd = s->head_dim, key = s->is_key, pair = formats[f].bytes == 2;
    for (int d = 0; d < hd; d++) {
        const size_t at = !key ? at0 + (size_t)d : pair ? at0 + (size_t)(d / 2) * 2 * TILE + (size_t)(d % 2)
                                                        : at0 + (size_t)d * TILE;
        const float x = float_decode(s->codes, at, f);
        out[d] = s->scaled ? x * sd : x;
    }
}

// One head's numbers at one token times sd: the token's scale (a read), or 1 (the stored numbers).
static void float_read_times(const FloatState *s, int head, int token, float sd, float *out) {
    const size_t at0 = float_at(s, head, token, 0);
    switch (s->format) {
    case FMT_FP16: float_read_format(s, at0, sd, out, FMT_FP16); break;
    case FMT_BF16: float_read_format(s, at0, sd, out, FMT_BF16); break;
    case FMT_E4M3: float_read_format(s, at0, sd, out, FMT_E4M3); break;
    case FMT_E5M2: float_read_format(s, at0, sd, out, FMT_E5M2); break;
    case FMT_FP32: float_read_format(s, at0, sd, out, FMT_FP32); break;
    }
}

static void float_read(const void *state, int head, int token, float *out) {
    const FloatState *s = state;
    float_read_times(s, head, token, float_scale(s, head, token), out);
}

// Whether the vector kernels (AVX2, AVX-512) may take the stream with these query numbers or weights:
// no infinity or NaN stored in any block the n tokens lie in, and every |x| · unit finite. 0 in the
// portable build.
static ALWAYS_INLINE int float_fast(const CodecBlocks *b, int n_tokens, const float *x, int n, const FloatFormat f) {
#ifndef VEC16
    return 0;
#endif
    for (int i = 0; i * b->block < n_tokens; i++)
        if (((const FloatState *)b->states[i])->special) return 0;
    if (formats[f].limit == INFINITY) return 1; // bf16: no unit, nothing can overflow
    float m = 0.0f;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m < formats[f].limit;
}

// The codes of token t of one head (its key tile, or its value row), in whichever block it lies (a
// pool's blocks hold whole tiles: multiples of 16 tokens), found from the block's pointer alone.
static ALWAYS_INLINE const uint8_t *float_codes_at(const CodecBlocks *b, int head, int t) {
    const FloatState *s0 = b->states[0];
    int local;
    const uint8_t *block = codec_block(b, t, &local);
    return block + FLOAT_CODES_AT + float_at(s0, head, local, 0) * s0->bytes;
}

// Asks for the codes of the 16 tokens from t (a key tile, or 16 value rows: contiguous in a block)
// ahead of their use. A pool's blocks lie anywhere in memory, so the hardware prefetcher, which
// follows one stream of addresses, loses the way at every block; this keeps DRAM busy. The kernels
// ask 192 tokens ahead: at 64, the mix over a pool of 32 long conversations still waited on DRAM.
static ALWAYS_INLINE void float_prefetch16(const CodecBlocks *b, int head, int t, int n) {
    if (t >= n || n <= b->block) return; // one block is one stream of addresses: the hardware follows it
    const uint8_t *p = float_codes_at(b, head, t);
    const size_t bytes = (size_t)TILE * (size_t)b->head_dim * ((const FloatState *)b->states[0])->bytes;
    for (size_t i = 0; i < bytes; i += 64) __builtin_prefetch(p + i);
}

// The fp16 scales of the 16 tokens from t (a multiple of 16) as floats.
static ALWAYS_INLINE void float_scales16(const CodecBlocks *b, int head, int t, float *sc) {
    const FloatState *s0 = b->states[0];
    int local;
    const uint8_t *block = codec_block(b, t, &local);
    quant_fp16_to_fp32_16((const uint16_t *)(const void *)(block + s0->scales_at) + float_slot(s0, head, local), sc);
}

#ifdef VEC16
// The vector decoders give each number divided by the format's unit, with shifts where they can;
// the query or weights carry the unit instead, so each product is the same real number as q · x and
// rounds the same (the portable code computes q · x). Infinities and NaNs do not survive them.
//   fp16: sign-extended to bit 31, moved down three bits and masked, exponent and fraction land
//         where an fp32's are with the bias 15 instead of 127: x · 2^-112 (unit 2^112); a subnormal
//         fp16 becomes a subnormal fp32, exact.
//   bf16: the top half of an fp32 (unit 1).
//   E5M2: the top byte of an fp16, decoded as fp16 is (unit 2^112).
//   E4M3: ((c + (c & 0x80)) << 7) is the fp16 of x · 2^-8 (fp16's range holds every E4M3 number),
//         converted by vcvtph2ps (unit 2^8).
// 16-bit formats: numbers 2i (lo) and 2i+1 (hi) of 16 words.
static ALWAYS_INLINE v16 float_lo16(v16i w, const FloatFormat f) {
    if (f == FMT_BF16) return v16i_shl_bits(w, 16);
    return v16i_shl_sra_and_bits(w, 16, 3, 0x8fffe000u);
}
static ALWAYS_INLINE v16 float_hi16(v16i w, const FloatFormat f) {
    if (f == FMT_BF16) return v16i_and_bits(w, 0xffff0000u);
    return v16i_sra_and_bits(w, 3, 0x8fffe000u);
}
// 8-bit formats: 16 consecutive codes.
static ALWAYS_INLINE v16 float_decode8(const uint8_t *p, const FloatFormat f) {
    if (f == FMT_E5M2) return v16_bytes_shl_and_bits(p, 21, 0x8fe00000u);
    return v16_e4m3_scaled(p);
}

// a += x · (the 32 numbers at p): numbers 0..15 to lo, 16..31 to hi (8- and 32-bit), or 2i to lo
// and 2i+1 to hi (16-bit, both from one load).
static ALWAYS_INLINE void float_madd(const uint8_t *p, v16 x0, v16 x1, const FloatFormat f, v16 *lo, v16 *hi) {
    if (formats[f].bytes == 4) {
        *lo = v16_add(*lo, v16_mul(x0, v16_load(p)));
        *hi = v16_add(*hi, v16_mul(x1, v16_load(p + 64)));
    } else if (formats[f].bytes == 2) {
        const v16i w = v16i_load(p);
        *lo = v16_add(*lo, v16_mul(x0, float_lo16(w, f)));
        *hi = v16_add(*hi, v16_mul(x1, float_hi16(w, f)));
    } else {
        *lo = v16_add(*lo, v16_mul(x0, float_decode8(p, f)));
        *hi = v16_add(*hi, v16_mul(x1, float_decode8(p + 16, f)));
    }
}
// One step of a lane's score on a key tile at k: a + q[0] · x_d (+ q[1] · x_d+1 for 16-bit codes,
// which come in pairs), the order of the portable kernel.
static ALWAYS_INLINE v16 float_tile_step(v16 a, const uint8_t *k, const float *q, const FloatFormat f) {
    if (f == FMT_FP32) return v16_add(a, v16_mul(v16_set1(q[0]), v16_load(k)));
    if (formats[f].bytes == 2) {
        const v16i w = v16i_load(k);
        return v16_add(v16_add(a, v16_mul(v16_set1(q[0]), float_lo16(w, f))), v16_mul(v16_set1(q[1]), float_hi16(w, f)));
    }
    return v16_add(a, v16_mul(v16_set1(q[0]), float_decode8(k, f)));
}
#endif

// Scores on key tiles: per lane (token) Σ_d q_d · x_d in order of d, four tiles at a time (their
// independent chains hide the latency of the adds), then times the token's scale. qu: the query
// times the unit when the AVX-512 kernel may run, else NULL. Each tile is found in its own block.
static ALWAYS_INLINE void float_score_tiles(const CodecBlocks *b, int head, const float *q, const float *qu, int t0,
                                            const int nt, const int hd, const FloatFormat f, float (*acc)[TILE],
                                            const uint8_t *const *ahead) {
    const size_t es = (size_t)formats[f].bytes, pair = es == 2 ? 2 : 1; // 16-bit codes come in pairs
    const uint8_t *tiles[4];
    tiles[0] = float_codes_at(b, head, t0);
    // Within one block (the first, or a stream that is one, without a division) the tiles follow one
    // another.
    const int same_block = t0 + nt * TILE <= b->block || codec_in_block(b, t0) + nt * TILE <= b->block;
    for (int t = 1; t < nt; t++)
        tiles[t] = same_block ? tiles[0] + (size_t)t * TILE * (size_t)hd * es : float_codes_at(b, head, t0 + t * TILE);
#ifdef VEC16
    if (qu) {
        if (nt == 4) { // four tiles at once: their independent chains hide the latency of the adds
            v16 a0 = v16_zero(), a1 = a0, a2 = a0, a3 = a0;
            for (int d = 0; d < hd; d += (int)pair) { // 16-bit: numbers d and d + 1 from one word
                const size_t at = (size_t)d * TILE * es;
                if (ahead && at % 64 == 0) // the same line of the four tiles 192 tokens ahead
                    for (int t = 0; t < 4; t++) __builtin_prefetch(ahead[t] + at);
                a0 = float_tile_step(a0, tiles[0] + at, qu + d, f);
                a1 = float_tile_step(a1, tiles[1] + at, qu + d, f);
                a2 = float_tile_step(a2, tiles[2] + at, qu + d, f);
                a3 = float_tile_step(a3, tiles[3] + at, qu + d, f);
            }
            v16_store4(acc[0], acc[2], a0, a1, a2, a3); // acc[k] follows acc[k - 1]
            return;
        }
        for (int t = 0; t < nt; t++) { // the last tiles of a stream, one at a time
            v16 a = v16_zero();
            for (int d = 0; d < hd; d += (int)pair) a = float_tile_step(a, tiles[t] + (size_t)d * TILE * es, qu + d, f);
            v16_store(acc[t], a);
        }
        return;
    }
#endif
    (void)qu, (void)ahead;
    for (int k = 0; k < nt; k++)
        for (int d = 0; d < hd; d++) {
            const float qd = q[d];
            const size_t at = es == 2 ? (size_t)(d / 2) * 2 * TILE + (size_t)(d % 2) : (size_t)d * TILE;
#pragma omp simd
            for (int l = 0; l < TILE; l++) acc[k][l] += qd * float_decode(tiles[k], at + (size_t)l * pair, f);
        }
}

static ALWAYS_INLINE void float_scores_keys(const CodecBlocks *b, int head, const float *q, float *out, int n,
                                            const int hd, const FloatFormat f) {
    const FloatState *s0 = b->states[0];
    float scaled[MICRO_MAX_WIDTH];
    const float *qu = NULL;
    if (float_fast(b, n, q, hd, f)) { // a format without a unit (fp32, bf16) takes the query itself
        for (int d = 0; d < hd && formats[f].unit != 1.0f; d++) scaled[d] = q[d] * formats[f].unit;
        qu = formats[f].unit != 1.0f ? scaled : q;
    }
    for (int t0 = 0; t0 < n; t0 += 4 * TILE) {
        const int nt = n - t0 >= 4 * TILE ? 4 : (n - t0 + TILE - 1) / TILE;
        // The four tiles 192 tokens ahead: asked for a line of each at a time as the four at hand
        // are read (the fast kernel), not all 64 lines at once, which left the adds waiting.
        const uint8_t *ahead[4];
        const int spread = qu && nt == 4 && n > b->block && t0 + 16 * TILE <= n;
        for (int k = 0; k < 4 && spread; k++) ahead[k] = float_codes_at(b, head, t0 + (12 + k) * TILE);
        if (!spread)
            for (int k = 12; k < 16; k++) float_prefetch16(b, head, t0 + k * TILE, n);
        float acc[4][TILE] = {{0}};
        if (nt == 4)
            float_score_tiles(b, head, q, qu, t0, 4, hd, f, acc, spread ? ahead : NULL);
        else
            float_score_tiles(b, head, q, qu, t0, nt, hd, f, acc, NULL);
        for (int k = 0; k < nt; k++) {
            float sc[TILE];
            if (s0->scaled) float_scales16(b, head, t0 + k * TILE, sc);
            const int m = n - t0 - k * TILE < TILE ? n - t0 - k * TILE : TILE;
            if (!s0->scaled)
                memcpy(out + t0 + k * TILE, acc[k], sizeof(float) * (size_t)m);
            else if (m == TILE)
#pragma omp simd
                for (int l = 0; l < TILE; l++) out[t0 + k * TILE + l] = acc[k][l] * sc[l];
            else
                for (int l = 0; l < m; l++) out[t0 + k * TILE + l] = acc[k][l] * sc[l];
        }
    }
}

// Mix on value rows: out = even + odd, the sums over even and odd tokens of w_j · x_j with
// w_j = p_j · scale_j (· unit for the AVX-512 kernel). The weights of 64 tokens are made ahead of
// their use: a broadcast that reads a vector store still in flight would wait for it. The sums run
// on across blocks (16 tokens at a time, each 16 from its block), as over one stream.
static ALWAYS_INLINE void float_weights(const CodecBlocks *b, int head, const float *p, int n, int j0, float unit,
                                        int scaled, int round, float *w) {
    for (int i = 0; i < 4 * TILE && j0 + i < n; i += TILE) {
        float sc[TILE], pr[TILE];
        const float *pj = p + j0 + i;
        if (scaled) float_scales16(b, head, j0 + i, sc);
        if (round) { // qround=f16
            for (int l = 0; l < TILE && j0 + i + l < n; l++) pr[l] = quant_fp16_to_fp32(quant_fp32_to_fp16(pj[l]));
            pj = pr;
        }
        if (n - j0 - i >= TILE) {
#pragma omp simd
            for (int l = 0; l < TILE; l++) w[i + l] = (scaled ? pj[l] * sc[l] : pj[l]) * unit;
        } else {
            for (int l = 0; l < TILE; l++) w[i + l] = j0 + i + l < n ? (scaled ? pj[l] * sc[l] : pj[l]) * unit : 0.0f;
        }
    }
}

// out = even + odd, the mix's two sums. interleaved: the AVX-512 kernels' sums of 16-bit codes,
// whose lane i holds number 2i in the first vector and 2i+1 in the second (head_dim 32).
static ALWAYS_INLINE void float_mix_out(const float *even, const float *odd, int interleaved, int hd, float *out) {
    if (interleaved) {
        for (int i = 0; i < 16; i++) {
            out[2 * i] = even[i] + odd[i];
            out[2 * i + 1] = even[16 + i] + odd[16 + i];
        }
        return;
    }
    for (int d = 0; d < hd; d++) out[d] = even[d] + odd[d];
}

static ALWAYS_INLINE void float_mix_rows(const CodecBlocks *b, int head, const float *p, float *out, int n,
                                         const FloatFormat f) {
    const FloatState *s0 = b->states[0];
    const int hd = b->head_dim, scaled = s0->scaled, round = s0->qround;
    const size_t es = (size_t)formats[f].bytes;
    float even[64] __attribute__((aligned(64))) = {0}, odd[64] __attribute__((aligned(64))) = {0};
    float wbuf[2][4 * TILE] __attribute__((aligned(64)));
    int fast = 0;
    if (hd == 32 && !scaled) {
        fast = float_fast(b, n, p, n, f);
    } else if (hd == 32 && float_fast(b, n, NULL, 0, FMT_BF16)) { // the largest weight p · scale decides
        float m = 0.0f;
        for (int j0 = 0; j0 < n; j0 += 4 * TILE) {
            float_weights(b, head, p, n, j0, 1.0f, scaled, round, wbuf[0]);
#pragma omp simd reduction(max : m)
            for (int i = 0; i < 4 * TILE; i++) m = fabsf(wbuf[0][i]) > m ? fabsf(wbuf[0][i]) : m;
        }
        fast = m < formats[f].limit;
    }
    const float unit = fast ? formats[f].unit : 1.0f;
#ifdef VEC16
    v16 e0 = v16_zero(), e1 = e0, o0 = e0, o1 = e0;
#endif
    // The weights: p itself where there is neither scale nor unit nor rounding (bf16), else made in
    // a buffer.
    const int direct = !scaled && !round && formats[f].unit == 1.0f;
    if (!direct) float_weights(b, head, p, n, 0, unit, scaled, round, wbuf[0]);
    for (int j0 = 0; j0 < n; j0 += 4 * TILE) {
        if (!direct && j0 + 4 * TILE < n)
            float_weights(b, head, p, n, j0 + 4 * TILE, unit, scaled, round, wbuf[(j0 / (4 * TILE) + 1) % 2]);
        const float *w = direct ? p + j0 : wbuf[(j0 / (4 * TILE)) % 2];
        const int cnt = n - j0 < 4 * TILE ? n - j0 : 4 * TILE;
        // 16 rows at a time, each 16 asking for the rows 192 tokens ahead as it starts; all the
        // chunk's at once in a stream of one block (which the hardware prefetcher follows). Asking
        // as each 16 rows start spreads the requests over the reading: passes of 64 that asked for
        // 16 rows of every 64, or for all 64 at once, left the step waiting on DRAM at blocks of 64
        // tokens and more.
        const int whole = n <= b->block;
        for (int k0 = 0; k0 < cnt; k0 += whole ? cnt : TILE) {
            const int k1 = whole || cnt - k0 < TILE ? cnt : k0 + TILE;
            float_prefetch16(b, head, j0 + k0 + 12 * TILE, n);
            const uint8_t *row = float_codes_at(b, head, j0 + k0);
#ifdef VEC16
            if (fast) {
                __asm__("" ::: "memory"); // the weights broadcast from memory
                const size_t rb = 32 * es;
                int k = k0;
                for (; k + 2 <= k1; k += 2, row += 2 * rb) {
                    const v16 w0 = v16_set1(w[k]), w1 = v16_set1(w[k + 1]);
                    float_madd(row, w0, w0, f, &e0, &e1);
                    float_madd(row + rb, w1, w1, f, &o0, &o1);
                }
                if (k < k1) float_madd(row, v16_set1(w[k]), v16_set1(w[k]), f, &e0, &e1);
                continue;
            }
#endif
            for (int k = k0; k < k1; k++, row += (size_t)hd * es) {
                float *acc = k % 2 ? odd : even;
                const float wk = w[k];
#pragma omp simd
                for (int d = 0; d < hd; d++) acc[d] += wk * float_decode(row, (size_t)d, f);
            }
        }
    }
#ifdef VEC16
    if (fast) v16_store4(even, odd, e0, e1, o0, o1);
#endif
    float_mix_out(even, odd, fast && es == 2, hd, out);
}

// ---- Every head of a row at once (CodecOps.scores_heads, mix_heads) ---------------------------
// A pool's block holds each head's tile (or 16 rows) one after another. The kernels above read a
// head at a time, 1 KB of each 6 KB fp16 block per pass, and a pool of 32 long conversations read
// so left one core's DRAM reading well below its streaming rate. These go tile by tile through
// every head, so each block's bytes are read in order, and ask for the tile ~12 KB on
// (codec_ahead_tiles) a line for each line they read: asking for the next tiles as each is read
// keeps one core's DRAM reading near its streaming rate, where asking for a whole block at once
// left the arithmetic waiting behind the requests. Each head's sums are the per-head kernels' own,
// in their order: the same bits. Only in the AVX-512 build, micro's head_dim 32, unscaled formats
// and up to eight heads; everything else (and the portable build) goes head by head.
// 12 KB ahead is two tiles of fp16 at six heads and one of fp32: nearer, the lines came too late;
// farther, the step was slower again.
#define FLOAT_HEADS_MAX 8

#ifdef VEC16
static ALWAYS_INLINE void float_scores_heads_fast(const CodecBlocks *b, const float *qu, float *out, size_t stride,
                                                  int n, const int H, const FloatFormat f) {
    const FloatState *s0 = b->states[0];
    const size_t es = (size_t)formats[f].bytes, pair = es == 2 ? 2 : 1;
    const int ahead_tiles = codec_ahead_tiles((size_t)H * TILE * 32 * es);
    for (int t0 = 0; t0 < n; t0 += TILE) {
        int local, alocal = 0;
        const uint8_t *block = codec_block(b, t0, &local), *tiles[FLOAT_HEADS_MAX], *ahead[FLOAT_HEADS_MAX];
        const uint8_t *ablock = (const uint8_t *)codec_ahead_block(b, t0 / TILE + ahead_tiles, n, &alocal);
        v16 a[FLOAT_HEADS_MAX];
        for (int h = 0; h < H; h++) {
            tiles[h] = block + FLOAT_CODES_AT + float_at(s0, h, local, 0) * es;
            ahead[h] = ablock ? ablock + FLOAT_CODES_AT + float_at(s0, h, alocal, 0) * es : NULL;
            a[h] = v16_zero();
        }
        for (int d = 0; d < 32; d += (int)pair) {
            const size_t at = (size_t)d * TILE * es;
            for (int h = 0; h < H; h++) {
                if (ablock && at % 64 == 0) __builtin_prefetch(ahead[h] + at);
                a[h] = float_tile_step(a[h], tiles[h] + at, qu + h * 32 + d, f);
            }
        }
        const int m = n - t0 < TILE ? n - t0 : TILE;
        for (int h = 0; h < H; h++) {
            if (m == TILE) {
                v16_store(out + (size_t)h * stride + t0, a[h]);
            } else {
                float acc[TILE];
                v16_store(acc, a[h]);
                memcpy(out + (size_t)h * stride + t0, acc, sizeof(float) * (size_t)m);
            }
        }
    }
}

static ALWAYS_INLINE void float_mix_heads_fast(const CodecBlocks *b, const float *p, size_t stride, float *out, int n,
                                               const int H, const FloatFormat f) {
    const FloatState *s0 = b->states[0];
    const size_t es = (size_t)formats[f].bytes, rb = 32 * es;
    const float unit = formats[f].unit;
    const int direct = unit == 1.0f; // the weights are p itself
    const int ahead_tiles = codec_ahead_tiles((size_t)H * TILE * 32 * es);
    float wbuf[2][FLOAT_HEADS_MAX][TILE] __attribute__((aligned(64)));
    v16 e0[FLOAT_HEADS_MAX], e1[FLOAT_HEADS_MAX], o0[FLOAT_HEADS_MAX], o1[FLOAT_HEADS_MAX];
    for (int h = 0; h < H; h++) e0[h] = e1[h] = o0[h] = o1[h] = v16_zero();
    // The weights of a tile are made a tile ahead of their use: a broadcast that reads a vector
    // store still in flight would wait for it.
#define FLOAT_HEADS_WEIGHTS(buf, t)                                                                \
    for (int h = 0; h < H && !direct && (t) < n; h++) {                                            \
        const int m_ = n - (t) < TILE ? n - (t) : TILE;                                            \
        for (int l = 0; l < TILE; l++) (buf)[h][l] = l < m_ ? p[(size_t)h * stride + (t) + l] * unit : 0.0f; \
    }
    FLOAT_HEADS_WEIGHTS(wbuf[0], 0)
    for (int t0 = 0; t0 < n; t0 += TILE) {
        const int cur = (t0 / TILE) % 2, m = n - t0 < TILE ? n - t0 : TILE;
        FLOAT_HEADS_WEIGHTS(wbuf[1 - cur], t0 + TILE)
        int local, alocal = 0;
        const uint8_t *block = codec_block(b, t0, &local);
        const uint8_t *ablock = (const uint8_t *)codec_ahead_block(b, t0 / TILE + ahead_tiles, n, &alocal);
        __asm__("" ::: "memory"); // the weights broadcast from memory
        for (int h = 0; h < H; h++) {
            const uint8_t *row = block + FLOAT_CODES_AT + float_at(s0, h, local, 0) * es;
            const uint8_t *arow = ablock ? ablock + FLOAT_CODES_AT + float_at(s0, h, alocal, 0) * es : NULL;
            const float *w = direct ? p + (size_t)h * stride + t0 : wbuf[cur][h];
            // The head's sums in locals for its tile: indexed by h across the token loop, they were
            // kept in memory, each add waiting on the store of the one before.
            v16 a0 = e0[h], a1 = e1[h], b0 = o0[h], b1 = o1[h];
            int k = 0;
            for (; k + 2 <= m; k += 2) {
                for (size_t at = (size_t)k * rb; arow && at < (size_t)(k + 2) * rb; at += 64)
                    __builtin_prefetch(arow + at);
                const v16 w0 = v16_set1(w[k]), w1 = v16_set1(w[k + 1]);
                float_madd(row + (size_t)k * rb, w0, w0, f, &a0, &a1);
                float_madd(row + (size_t)(k + 1) * rb, w1, w1, f, &b0, &b1);
            }
            if (k < m) float_madd(row + (size_t)k * rb, v16_set1(w[k]), v16_set1(w[k]), f, &a0, &a1);
            e0[h] = a0, e1[h] = a1, o0[h] = b0, o1[h] = b1;
        }
    }
#undef FLOAT_HEADS_WEIGHTS
    for (int h = 0; h < H; h++) {
        float even[32], odd[32];
        v16_store4(even, odd, e0[h], e1[h], o0[h], o1[h]);
        float_mix_out(even, odd, es == 2, 32, out + (size_t)h * 32);
    }
}

// Whether the every-head kernels take this stream: AVX-512, head_dim 32, no scale, up to eight
// heads. In one block too (a pool of one block per sequence, as micro bench --batch 32 --block 2048
// makes): reading every head's bytes in order and asking for them ahead beats passes head by head,
// which leave the reading of each block to the hardware prefetcher.
static ALWAYS_INLINE int float_heads_fit(const CodecBlocks *b, int n) {
    const FloatState *s0 = b->states[0];
    return VEC16_ON && b->head_dim == 32 && !s0->scaled && s0->n_heads <= FLOAT_HEADS_MAX && n > 0;
}
#endif

// scores_heads and mix_heads of one format: the every-head kernels when the stream and every head's
// numbers fit them (float_fast, as the per-head kernels ask), else head by head. micro's six heads
// get an instance of their own (constant loops keep the heads' sums in registers).
#ifdef VEC16
#define FLOAT_HEADS_INSTANCE(id, fmt)                                                              \
    static int heads_scores_##id(const CodecBlocks *b, const float *q, float *out, size_t stride, int n) { \
        const int H = ((const FloatState *)b->states[0])->n_heads;                                 \
        float qu[FLOAT_HEADS_MAX * 32];                                                             \
        if (!float_heads_fit(b, n)) return 0;                                                      \
        for (int h = 0; h < H; h++)                                                                \
            if (!float_fast(b, h ? 0 : n, q + h * 32, 32, fmt)) return 0;                          \
        for (int i = 0; i < H * 32; i++) qu[i] = q[i] * formats[fmt].unit;                         \
        if (H == 6)                                                                                \
            float_scores_heads_fast(b, qu, out, stride, n, 6, fmt);                                \
        else                                                                                       \
            float_scores_heads_fast(b, qu, out, stride, n, H, fmt);                                \
        return 1;                                                                                  \
    }                                                                                              \
    static int heads_mix_##id(const CodecBlocks *b, const float *p, size_t stride, float *out, int n) { \
        const int H = ((const FloatState *)b->states[0])->n_heads;                                 \
        if (!float_heads_fit(b, n)) return 0;                                                      \
        for (int h = 0; h < H; h++)                                                                \
            if (!float_fast(b, h ? 0 : n, p + (size_t)h * stride, n, fmt)) return 0;               \
        if (H == 6)                                                                                \
            float_mix_heads_fast(b, p, stride, out, n, 6, fmt);                                    \
        else                                                                                       \
            float_mix_heads_fast(b, p, stride, out, n, H, fmt);                                    \
        return 1;                                                                                  \
    }
#else
#define FLOAT_HEADS_INSTANCE(id, fmt)                                                              \
    static int heads_scores_##id(const CodecBlocks *b, const float *q, float *out, size_t stride, int n) { \
        (void)b, (void)q, (void)out, (void)stride, (void)n;                                        \
        return 0;                                                                                  \
    }                                                                                              \
    static int heads_mix_##id(const CodecBlocks *b, const float *p, size_t stride, float *out, int n) { \
        (void)b, (void)p, (void)stride, (void)out, (void)n;                                        \
        return 0;                                                                                  \
    }
#endif

// One instance of each kernel per format (a constant format folds the decoder's switch away).
#define FLOAT_INSTANCE(id, fmt)                                                                    \
    static void scores_##id(const CodecBlocks *b, int head, const float *q, float *out, int n) {   \
        if (b->head_dim == 32) /* micro's: constant trip counts */                                 \
            float_scores_keys(b, head, q, out, n, 32, fmt);                                        \
        else                                                                                       \
            float_scores_keys(b, head, q, out, n, b->head_dim, fmt);                               \
    }                                                                                              \
    static void mix_##id(const CodecBlocks *b, int head, const float *p, float *out, int n) {      \
        float_mix_rows(b, head, p, out, n, fmt);                                                   \
    }                                                                                              \
    FLOAT_HEADS_INSTANCE(id, fmt)
FLOAT_INSTANCE(fp16, FMT_FP16)
FLOAT_INSTANCE(bf16, FMT_BF16)
FLOAT_INSTANCE(e4m3, FMT_E4M3)
FLOAT_INSTANCE(e5m2, FMT_E5M2)
FLOAT_INSTANCE(fp32, FMT_FP32)
#undef FLOAT_INSTANCE

typedef void (*FloatKernel)(const CodecBlocks *, int, const float *, float *, int);
static const FloatKernel float_scores_fn[] = {scores_fp16, scores_bf16, scores_e4m3, scores_e5m2, scores_fp32};
static const FloatKernel float_mix_fn[] = {mix_fp16, mix_bf16, mix_e4m3, mix_e5m2, mix_fp32};
typedef int (*FloatHeadsScores)(const CodecBlocks *, const float *, float *, size_t, int);
typedef int (*FloatHeadsMix)(const CodecBlocks *, const float *, size_t, float *, int);
static const FloatHeadsScores float_scores_heads_fn[] = {heads_scores_fp16, heads_scores_bf16, heads_scores_e4m3,
                                                         heads_scores_e5m2, heads_scores_fp32};
static const FloatHeadsMix float_mix_heads_fn[] = {heads_mix_fp16, heads_mix_bf16, heads_mix_e4m3, heads_mix_e5m2,
                                                      heads_mix_fp32};

// qround=f16: a vector rounded to fp16 and back.
static void float_round_f16(const float *x, int n, float *out) {
    for (int i = 0; i < n; i++) out[i] = quant_fp16_to_fp32(quant_fp32_to_fp16(x[i]));
}

// Σ_j p̃_j · x̂_j in order of j, p̃_j = p_j rounded to fp16 (codec_mix_by_read's sum, qround=f16): the
// mix of a latent (a key stream mixed, latent attention) and of values past the kernel's 64 numbers.
static void float_mix_by_read_rounded(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    float x[MICRO_MAX_WIDTH];
    memset(out, 0, sizeof(float) * (size_t)b->head_dim);
    for (int j = 0; j < n; j++) {
        int local;
        const void *state = codec_block(b, j, &local);
        float_read(state, head, local, x);
        const float pj = quant_fp16_to_fp32(quant_fp32_to_fp16(p[j]));
        for (int d = 0; d < b->head_dim; d++) out[d] += pj * x[d];
    }
}

// Scoring a value stream or mixing a key stream is not what attention does, except latent
// attention's mix of its latent: read back. The mix kernel's buffers hold head_dims up to 64.
static void float_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    const FloatState *s = b->states[0];
    float rounded[MICRO_MAX_WIDTH];
    if (s->qround) {
        float_round_f16(q, s->head_dim, rounded);
        q = rounded;
    }
    if (s->is_key)
        float_scores_fn[s->format](b, head, q, out, n);
    else
        codec_scores_by_read(b, float_read, s->head_dim, head, q, out, n);
}

static void float_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    const FloatState *s = b->states[0];
    if (!s->is_key && s->head_dim <= 64)
        float_mix_fn[s->format](b, head, p, out, n);
    else if (s->qround)
        float_mix_by_read_rounded(b, head, p, out, n);
    else
        codec_mix_by_read(b, float_read, s->head_dim, head, p, out, n);
}

// The every-head kernels take neither rounding: with qround=f16 the heads go one by one.
static void float_scores_heads(const CodecBlocks *b, const float *q, float *out, size_t stride, int n) {
    const FloatState *s = b->states[0];
    if (s->is_key && !s->qround && float_scores_heads_fn[s->format](b, q, out, stride, n)) return;
    for (int h = 0; h < s->n_heads; h++) float_scores(b, h, q + (size_t)h * s->head_dim, out + (size_t)h * stride, n);
}

static void float_mix_heads(const CodecBlocks *b, const float *p, size_t stride, float *out, int n) {
    const FloatState *s = b->states[0];
    if (!s->is_key && !s->qround && float_mix_heads_fn[s->format](b, p, stride, out, n)) return;
    for (int h = 0; h < s->n_heads; h++) float_mix(b, h, p + (size_t)h * stride, out + (size_t)h * s->head_dim, n);
}

static size_t float_bytes(const void *state) {
    const FloatState *s = state;
    const size_t per_head_token = (size_t)s->head_dim * s->bytes + (s->scaled ? sizeof(uint16_t) : 0);
    return per_head_token * (size_t)s->length * (size_t)s->n_heads;
}

// Unscaled keys: float_scores_keys sums q_d · x̂_d in order of d from 0, as a read back does (the
// AVX-512 kernel's products with the unit moved to the query are the same real numbers), so they
// may be mirrored as they read back. Its mix sums even and odd tokens apart: values are not.
static void float_key_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    (void)factor, (void)offset;
    float_read(state, head, token, x);
}

static const MirrorOps float_key_mirror_ops = {.read = float_key_read};
// Scaled (scale=token): the kernels' sums are the unscaled ones', the keys' then times the token's
// scale and the values' weights p_j · scale_j, so the stored numbers are x̃ and the scale the factor.
static void float_scaled_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    const FloatState *s = state;
    (void)offset;
    *factor = float_scale(s, head, token);
    float_read_times(s, head, token, 1.0f, x);
}
static const MirrorOps float_scaled_key_mirror_ops = {.read = float_scaled_read, .has_factor = 1};
static const MirrorOps float_scaled_value_mirror_ops = {.read = float_scaled_read, .has_factor = 1, .split_mix = 1};
// Unscaled values: float_mix_rows sums w_j · x̂_j over even and odd tokens apart, w_j = p_j (the
// vector kernels' w_j · unit times x̂_j / unit is the same real number), at head_dim up to 64.
static const MirrorOps float_value_mirror_ops = {.read = float_key_read, .split_mix = 1};

static const MirrorOps *float_key_mirror(const void *state) {
    const FloatState *s = state;
    // Measured (bench --eval): faster for fp32 (the kernel reads four bytes a number either way, the
    // mirror serves four queries a load), FP8 (no decode per query) and, since the mirror's scores
    // take the keys in panels and the rows in quads, the 16-bit formats too.
    if (!s->is_key || s->qround) return NULL;
    return s->scaled ? &float_scaled_key_mirror_ops : &float_key_mirror_ops;
}

static const MirrorOps *float_value_mirror(const void *state) {
    const FloatState *s = state;
    if (s->is_key || s->qround || s->head_dim > 64) return NULL;
    return s->scaled ? &float_scaled_value_mirror_ops : &float_value_mirror_ops;
}

// float_scores and float_mix: what reads back (latent attention's fast evaluator mirrors it). Keys'
// scores have kernels of their own (float_key_mirror says when they sum as a read back does).
static int float_by_read(const void *state) {
    const FloatState *s = state;
    if (s->qround) return 0;
    return (s->is_key ? 0 : CODEC_SCORES_BY_READ) | (s->is_key || s->head_dim > 64 ? CODEC_MIX_BY_READ : 0);
}

static size_t float_extent(const void *state) { return ((const FloatState *)state)->extent; }

static void float_copy(void *dst, const void *src) {
    const FloatState *s = src;
    FloatState *d = dst;
    codec_payload_copy(dst, src, FLOAT_CODES_AT, s->extent);
    d->length = s->length;
    d->special = s->special;
}

static const CodecOps float_ops = {.append = float_append, .scores = float_scores, .mix = float_mix,
                                   .scores_heads = float_scores_heads, .mix_heads = float_mix_heads,
                                   .read = float_read, .key_mirror = float_key_mirror,
                                   .value_mirror = float_value_mirror, .by_read = float_by_read,
                                   .bytes = float_bytes, .extent = float_extent, .copy = float_copy,
                                   .destroy = float_destroy};

#define FLOAT_FAMILY(id, help_text, ...)                                                           \
    static void *create_##id(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised, \
                             size_t normalised_len, char *err, size_t errlen) {                      \
        return float_create(#id, spec, n_heads, head_dim, capacity, normalised, normalised_len, err, errlen); \
    }                                                                                                \
    const CodecFamily CODEC_FAMILY(codec_##id) = {.name = #id, .help = help_text, .ops = &float_ops, .create = create_##id, \
                                                  .examples = (const char *const[]){__VA_ARGS__, NULL}};

FLOAT_FAMILY(fp32, "fp32                 full precision, the reference (32 bits per number)", "fp32")
FLOAT_FAMILY(fp16, "fp16                 IEEE half precision, round to nearest even (16 bits per number); "
                   "scale=token adds an fp16 absmax scale per head per token; qround=f16 rounds the query and "
                   "the weights to fp16 as llama.cpp's f16 cache does without flash attention",
             "fp16", "fp16:scale=token", "fp16:qround=f16", "fp16:scale=token,qround=f16|fp16:qround=f16")
FLOAT_FAMILY(bf16, "bf16                 bfloat16, round to nearest even (16 bits per number); scale=token as fp16", "bf16")
FLOAT_FAMILY(fp8, "fp8:e4m3|e5m2        OCP FP8 (E4M3FN, max 448 / E5M2, max 57344), saturating, 8 bits; "
                  "scale=token adds an fp16 absmax scale per head per token",
             "fp8:e4m3", "fp8:e5m2,scale=token", "fp8:e4m3,scale=token|fp8:e5m2", "fp8:e5m2|fp8:e4m3")
