// Shared quantisation arithmetic (see quant.h). Plain software: no F16C, no intrinsics.
#include "quant.h"

#include <math.h>
#include <string.h>

// fp16 and bf16 are encoded on every cached number, so they take the usual bit-level shortcuts
// (Giesen's float_to_half_fast3_rtne for fp16). test_quant checks them against a brute-force
// nearest search and against generic minifloat rounding by the formats' definitions.
static uint16_t fp16_encode(float x, int saturate) {
    uint32_t u = quant_to_bits(x);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return sign | 0x7e00u;                               // NaN
    if (u >= 0x477ff000u) return sign | (saturate ? 0x7bffu : 0x7c00u);       // from 65520 (a tie) up, and inf
    if (u < 0x38800000u)                                                      // below 2^-14: subnormal or zero,
        return sign | (uint16_t)(quant_to_bits(quant_from_bits(u) + 0.5f) - 0x3f000000u); // rounded by the add
    u += 0xc8000fffu + ((u >> 13) & 1u); // rebias the exponent (−112), round half to even
    return sign | (uint16_t)(u >> 13);
}

uint16_t quant_fp32_to_fp16(float x) { return fp16_encode(x, 0); }
uint16_t quant_fp32_to_fp16_sat(float x) { return fp16_encode(x, 1); }

uint16_t quant_fp32_to_bf16(float x) {
    const uint32_t u = quant_to_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u); // NaN
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); // half to even; overflow carries to inf
}

// FP8 the same way: saturate from the largest finite value up, subnormals rounded by adding a power
// of two whose ulp is their quantum, normal numbers by rebiasing and rounding the dropped bits.
uint8_t quant_fp32_to_fp8(float x, QuantFp8Format format) {
    const int e5 = format == QUANT_FP8_E5M2, mbits = e5 ? 2 : 3, bias = e5 ? 15 : 7;
    uint32_t u = quant_to_bits(x);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return sign | (e5 ? 0x7eu : 0x7fu);                  // NaN
    if (u >= (e5 ? 0x47600000u : 0x43e00000u)) return sign | (e5 ? 0x7bu : 0x7eu); // 57344 / 448 and up
    if (u < (uint32_t)(128 - bias) << 23) {                                    // below 2^(1-bias)
        const uint32_t magic = (uint32_t)(127 + 23 + 1 - bias - mbits) << 23;  // ulp = the subnormal quantum
        return sign | (uint8_t)(quant_to_bits(quant_from_bits(u) + quant_from_bits(magic)) - magic);
    }
    const int drop = 23 - mbits;
    u += ((uint32_t)(bias - 127) << 23) + (1u << (drop - 1)) - 1u + ((u >> drop) & 1u);
    return sign | (uint8_t)(u >> drop);
}

// Whole groups of 8 codes into `bits` bytes each, lowest bits first; inlined with a constant width
// (quant_pack's switch), as unpack_groups below: every encoder packs each vector it stores.
static inline __attribute__((always_inline)) size_t pack_groups(uint8_t *dst, const uint8_t *codes, size_t n,
                                                                const int bits) {
    const uint64_t mask = (1u << bits) - 1u;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { // eight codes fill exactly `bits` bytes
        uint64_t w = 0;
        for (int k = 0; k < 8; k++) w |= (codes[i + (size_t)k] & mask) << (k * bits);
        uint8_t *g = dst + (i / 8) * (size_t)bits;
        for (int b = 0; b < bits; b++) g[b] = (uint8_t)(w >> (8 * b));
    }
    return i;
}

void quant_pack(uint8_t *dst, const uint8_t *codes, size_t n, int bits) {
    const uint32_t mask = (1u << bits) - 1u;
    size_t i;
    switch (bits) {
    case 1: i = pack_groups(dst, codes, n, 1); break;
    case 2: i = pack_groups(dst, codes, n, 2); break;
    case 3: i = pack_groups(dst, codes, n, 3); break;
    case 4: i = pack_groups(dst, codes, n, 4); break;
    case 5: i = pack_groups(dst, codes, n, 5); break;
    case 6: i = pack_groups(dst, codes, n, 6); break;
    case 7: i = pack_groups(dst, codes, n, 7); break;
    case 8: i = pack_groups(dst, codes, n, 8); break;
    default: i = 0;
    }
    // The codes past the whole groups are OR-ed into bytes zeroed first.
    const size_t done = (i / 8) * (size_t)bits;
    memset(dst + done, 0, quant_packed_bytes(n, bits) - done);
    for (; i < n; i++) {
        size_t bit = i * (size_t)bits;
        uint32_t v = (codes[i] & mask) << (bit & 7);
        dst[bit >> 3] |= (uint8_t)v;
        if ((bit & 7) + (size_t)bits > 8) dst[(bit >> 3) + 1] |= (uint8_t)(v >> 8);
    }
}

// Whole groups of 8 codes (`bits` bytes each), lowest bits first. Inlined with a constant width
// (quant_unpack's switch), so that the byte and shift loops unroll: the read-back kernels unpack
// every token they read.
static inline __attribute__((always_inline)) size_t unpack_groups(const uint8_t *src, uint8_t *codes, size_t n,
                                                                  const int bits) {
    const uint64_t mask = (1u << bits) - 1u;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint8_t *g = src + (i / 8) * (size_t)bits;
        uint64_t w = 0;
        for (int b = 0; b < bits; b++) w |= (uint64_t)g[b] << (8 * b);
        for (int k = 0; k < 8; k++) codes[i + (size_t)k] = (uint8_t)((w >> (k * bits)) & mask);
    }
    return i;
}

void quant_unpack(const uint8_t *src, uint8_t *codes, size_t n, int bits) {
    const uint32_t mask = (1u << bits) - 1u;
    size_t i;
    switch (bits) {
    case 1: i = unpack_groups(src, codes, n, 1); break;
    case 2: i = unpack_groups(src, codes, n, 2); break;
    case 3: i = unpack_groups(src, codes, n, 3); break;
    case 4: i = unpack_groups(src, codes, n, 4); break;
    case 5: i = unpack_groups(src, codes, n, 5); break;
    case 6: i = unpack_groups(src, codes, n, 6); break;
    case 7: i = unpack_groups(src, codes, n, 7); break;
    case 8: i = unpack_groups(src, codes, n, 8); break;
    default: i = 0;
    }
    for (; i < n; i++) {
        size_t bit = i * (size_t)bits;
        uint32_t v = src[bit >> 3];
        if ((bit & 7) + (size_t)bits > 8) v |= (uint32_t)src[(bit >> 3) + 1] << 8;
        codes[i] = (uint8_t)((v >> (bit & 7)) & mask);
    }
}
