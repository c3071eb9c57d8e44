// Shared quantisation arithmetic: rounding, fp16 / bf16 / fp8 conversion and dense bit packing.
// Every codec builds on these; nothing here knows about caches, heads or tokens.
#ifndef MICRO_QUANT_H
#define MICRO_QUANT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// ---- Rounding -------------------------------------------------------------------------------
// Round to nearest, ties to even (the default floating-point rounding mode, which micro never
// changes): 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2.
static inline float quant_round_even(float x) { return nearbyintf(x); }

// Round to nearest even and clamp to [lo, hi]; NaN gives lo. Never converts an out-of-range float.
static inline int quant_round_clamp(float x, int lo, int hi) {
    if (!(x > (float)lo)) return lo;
    if (x >= (float)hi) return hi;
    return (int)nearbyintf(x);
}

// ---- IEEE binary16 (fp16) -------------------------------------------------------------------
// fp32 -> fp16, round to nearest even; subnormals kept; overflow gives ±inf; NaN stays (quiet) NaN.
uint16_t quant_fp32_to_fp16(float x);
// As above but finite values that overflow saturate to ±65504 (for stored scales, which must stay
// finite). ±inf also saturates; NaN stays NaN.
uint16_t quant_fp32_to_fp16_sat(float x);

// fp16 -> fp32, exact for every code (subnormals, ±inf, NaN with its payload). Branch-free so that
// kernels vectorise it, and without arithmetic on fp32 subnormals (slow on x86): a normal number
// gets its exponent rebiased by an integer add, a subnormal is m · 2^-24 by a conversion, ±inf and
// NaN keep their mantissa under fp32's all-ones exponent.
static inline float quant_from_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t quant_to_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

// a if ca, else b if cb, else c (ca and cb not both true), with masks rather than branches so that
// the decoders vectorise inside kernel loops.
static inline uint32_t quant_select3(int ca, uint32_t a, int cb, uint32_t b, uint32_t c) {
    const uint32_t ma = 0u - (uint32_t)ca, mb = 0u - (uint32_t)cb;
    return (a & ma) | (b & mb) | (c & ~(ma | mb));
}

static inline float quant_fp16_to_fp32(uint16_t h) {
    const uint32_t em = h & 0x7fffu, e = em >> 10;
    const uint32_t normal = (em << 13) + (112u << 23);
    const uint32_t special = 0x7f800000u | ((em & 0x3ffu) << 13);
    const uint32_t tiny = quant_to_bits((float)(int32_t)(em & 0x3ffu) * 0x1p-24f);
    return quant_from_bits(quant_select3(e == 0, tiny, e == 0x1f, special, normal) | ((uint32_t)(h & 0x8000u) << 16));
}

// ---- bfloat16 -------------------------------------------------------------------------------
// fp32 -> bf16, round to nearest even; overflow gives ±inf; NaN stays (quiet) NaN.
uint16_t quant_fp32_to_bf16(float x);
static inline float quant_bf16_to_fp32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

// ---- FP8 ------------------------------------------------------------------------------------
// E4M3 is OCP's E4M3FN: bias 7, no infinities, max ±448, NaN only as S.1111.111.
// E5M2: bias 15, max ±57344, IEEE-style ±inf (S.11111.00) and NaN (S.11111.xx, xx != 0).
// Encoding rounds to nearest even and saturates: every value beyond the largest finite one,
// ±inf included, becomes ±max (as CUDA's __NV_SATFINITE); NaN stays NaN.
typedef enum { QUANT_FP8_E4M3 = 0, QUANT_FP8_E5M2 = 1 } QuantFp8Format;

uint8_t quant_fp32_to_fp8(float x, QuantFp8Format format);
// The reference decoder (by the formats' definitions).
float quant_fp8_to_fp32(uint8_t code, QuantFp8Format format);

// Branch-free decoders for the kernels, equal to quant_fp8_to_fp32 on all 256 codes (a test checks),
// built as quant_fp16_to_fp32 is.
static inline float quant_e4m3_to_fp32(uint8_t c) {
    const uint32_t mag = c & 0x7fu;
    const uint32_t normal = (mag << 20) + (120u << 23);
    const uint32_t tiny = quant_to_bits((float)(int32_t)(mag & 7u) * 0x1p-9f);
    // S.1111.111 is E4M3FN's only NaN.
    return quant_from_bits(quant_select3(mag == 0x7fu, 0x7fc00000u, (mag >> 3) == 0, tiny, normal) |
                           ((uint32_t)(c & 0x80u) << 24));
}

static inline float quant_e5m2_to_fp32(uint8_t c) {
    const uint32_t mag = c & 0x7fu;
    const uint32_t normal = (mag << 21) + (112u << 23);
    const uint32_t special = 0x7f800000u | ((mag & 3u) << 21); // inf, NaN
    const uint32_t tiny = quant_to_bits((float)(int32_t)(mag & 3u) * 0x1p-16f);
    return quant_from_bits(quant_select3((mag >> 2) == 0x1f, special, (mag >> 2) == 0, tiny, normal) |
                           ((uint32_t)(c & 0x80u) << 24));
}

// The largest finite value (448 or 57344).
float quant_fp8_max(QuantFp8Format format);
// table[c] = quant_fp8_to_fp32(c) for all 256 codes (decode kernels look codes up).
void quant_fp8_table(QuantFp8Format format, float table[256]);

// ---- Dense bit packing ----------------------------------------------------------------------
// n codes of `bits` bits (1..8) form one little-endian bit stream: code i occupies bits
// [i*bits, (i+1)*bits), least significant bit first, so 3-, 5-, 6- and 7-bit codes straddle
// bytes. Eight codes always fill exactly `bits` bytes. Unused high bits of the last byte are zero.
static inline size_t quant_packed_bytes(size_t n, int bits) { return (n * (size_t)bits + 7) / 8; }

// Writes quant_packed_bytes(n, bits) bytes; only the low `bits` bits of each code are kept.
void quant_pack(uint8_t *dst, const uint8_t *codes, size_t n, int bits);
void quant_unpack(const uint8_t *src, uint8_t *codes, size_t n, int bits);

// The kernels' unpack: n codes starting at a byte boundary, written as floats
// out[i] = code_i * mul - offset (small integers, exact). Inline so that the decode loops of the
// codecs see the constant-width inner loop.
static inline void quant_unpack_float(const uint8_t *src, int n, int bits, float mul, float offset,
                                      float *out) {
    const uint32_t mask = (1u << bits) - 1u;
    int i = 0;
    if (bits == 8) {
        for (; i < n; i++) out[i] = (float)src[i] * mul - offset;
        return;
    }
    if (bits == 4) {
        for (; i + 2 <= n; i += 2) {
            out[i] = (float)(src[i / 2] & 0x0f) * mul - offset;
            out[i + 1] = (float)(src[i / 2] >> 4) * mul - offset;
        }
    } else {
        for (; i + 8 <= n; i += 8) {
            const uint8_t *g = src + (i / 8) * bits;
            uint64_t w = 0;
            for (int b = 0; b < bits; b++) w |= (uint64_t)g[b] << (8 * b);
            for (int k = 0; k < 8; k++) out[i + k] = (float)((w >> (k * bits)) & mask) * mul - offset;
        }
    }
    for (; i < n; i++) {
        size_t bit = (size_t)i * (size_t)bits;
        uint32_t v = src[bit >> 3];
        if ((bit & 7) + (size_t)bits > 8) v |= (uint32_t)src[(bit >> 3) + 1] << 8;
        out[i] = (float)((v >> (bit & 7)) & mask) * mul - offset;
    }
}

// ---- Token tiles ----------------------------------------------------------------------------
// The layout the attention kernels read codes from, with SIMD lanes = tokens (as the fp32 codec
// lays out its keys): QUANT_TILE consecutive tokens of one head form a tile, and a chunk of 32
// numbers of each token, packed as above (32·bits bits = `bits` little-endian 32-bit words), is
// stored word-interleaved: word g of lane (token) l at tile[g * QUANT_TILE + l]. Number d of the
// chunk is then bits [d·bits, (d+1)·bits) of its lane's word stream, found by constant shifts.
#define QUANT_TILE 16

// Lane `lane` of a tile of `words`-word chunks from/to quant_pack's byte stream (4·words bytes).
static inline void quant_tile_put(uint32_t *tile, int lane, const uint8_t *packed, int words) {
    for (int g = 0; g < words; g++)
        tile[g * QUANT_TILE + lane] = (uint32_t)packed[4 * g] | (uint32_t)packed[4 * g + 1] << 8 |
                                      (uint32_t)packed[4 * g + 2] << 16 | (uint32_t)packed[4 * g + 3] << 24;
}

static inline void quant_tile_get(const uint32_t *tile, int lane, uint8_t *packed, int words) {
    for (int g = 0; g < words; g++)
        for (int b = 0; b < 4; b++) packed[4 * g + b] = (uint8_t)(tile[g * QUANT_TILE + lane] >> (8 * b));
}

// Code d (0..31) of lane l as an unsigned number. With constant d and bits every shift is a
// constant, so a loop over the 16 lanes vectorises; codes that straddle two words join them.
static inline uint32_t quant_tile_code(const uint32_t *tile, int l, int d, int bits) {
    const int bit = d * bits, g = bit >> 5, sh = bit & 31;
    uint32_t v = tile[g * QUANT_TILE + l] >> sh;
    if (sh + bits > 32) v |= tile[(g + 1) * QUANT_TILE + l] << (32 - sh);
    return v & ((1u << bits) - 1u);
}

// Code d of lane l read as a `bits`-bit two's complement number (sign-extended): two shifts.
// (Right shifts of negative numbers are arithmetic on every compiler micro supports.)
static inline int32_t quant_tile_code_signed(const uint32_t *tile, int l, int d, int bits) {
    const int bit = d * bits, g = bit >> 5, sh = bit & 31;
    const uint32_t w = tile[g * QUANT_TILE + l];
    if (sh + bits <= 32) return (int32_t)(w << (32 - bits - sh)) >> (32 - bits);
    const uint32_t hi = tile[(g + 1) * QUANT_TILE + l];
    return ((int32_t)(hi << (64 - bits - sh)) >> (32 - bits)) | (int32_t)(w >> sh);
}

#endif
