// Shared quantisation arithmetic (see quant.h). Plain software: no F16C, no intrinsics.
#include "quant.h"

#include <math.h>
#include <string.h>

// One small-float format: `mbits` mantissa bits, exponent bias `bias`; codes are
// sign | exponent | mantissa with the sign at bit (ebits + mbits).
typedef struct {
    int mbits;
    int bias;
    int sign_shift;        // ebits + mbits
    uint32_t max_finite;   // magnitude code of the largest finite value
    uint32_t overflow;     // magnitude code an overflow becomes: inf (IEEE) or max_finite (saturate)
    uint32_t nan;          // magnitude code of the NaN we produce
} MiniFloat;

// |x| (finite, not NaN) -> magnitude code, rounded to nearest even.
// The code of a positive value is ((E + bias) << mbits) + (m - 2^mbits) for a normal value
// m * 2^(E - mbits), m in [2^mbits, 2^(mbits+1)), and m for a subnormal m * 2^(emin - mbits).
// Both read as one monotone integer line, so a mantissa that rounds up to 2^(mbits+1) carries into
// the exponent by itself, and a subnormal that rounds up to 2^mbits lands on the smallest normal.
static uint32_t minifloat_magnitude(float a, const MiniFloat *f) {
    if (a == 0.0f) return 0;
    int e;
    (void)frexpf(a, &e); // a = frac * 2^e, frac in [0.5, 1): unbiased exponent E = e - 1
    const int E = e - 1;
    const int emin = 1 - f->bias;
    const int emax_code = (int)(f->max_finite >> f->mbits); // biased exponent of max_finite
    if (E + f->bias > emax_code + 1) return f->overflow;     // far beyond the range
    if (E < emin) {
        // Subnormal: the quantum is 2^(emin - mbits). Scaling by a power of two is exact.
        float m = nearbyintf(ldexpf(a, f->mbits - emin));
        return (uint32_t)m;
    }
    float m = nearbyintf(ldexpf(a, f->mbits - E)); // in [2^mbits, 2^(mbits+1)]
    uint32_t code = ((uint32_t)(E + f->bias) << f->mbits) + ((uint32_t)m - (1u << f->mbits));
    return code > f->max_finite ? f->overflow : code;
}

static uint32_t minifloat_encode(float x, const MiniFloat *f) {
    uint32_t sign = signbit(x) ? 1u << f->sign_shift : 0u;
    if (isnan(x)) return sign | f->nan;
    if (isinf(x)) return sign | f->overflow;
    return sign | minifloat_magnitude(fabsf(x), f);
}

// IEEE binary16: 5 exponent bits, 10 mantissa bits; overflow -> inf (0x7c00); quiet NaN 0x7e00.
static const MiniFloat fp16_ieee = {10, 15, 15, 0x7bff, 0x7c00, 0x7e00};
static const MiniFloat fp16_sat = {10, 15, 15, 0x7bff, 0x7bff, 0x7e00};
// bfloat16: 8 exponent bits, 7 mantissa bits; overflow -> inf (0x7f80); quiet NaN 0x7fc0.
static const MiniFloat bf16_ieee = {7, 127, 15, 0x7f7f, 0x7f80, 0x7fc0};
// E4M3FN: max 0x7e = 1.75 * 2^8 = 448; NaN 0x7f; saturating.
static const MiniFloat fp8_e4m3 = {3, 7, 7, 0x7e, 0x7e, 0x7f};
// E5M2: max 0x7b = 1.75 * 2^15 = 57344; NaN 0x7e (quiet); saturating.
static const MiniFloat fp8_e5m2 = {2, 15, 7, 0x7b, 0x7b, 0x7e};

// fp16 and bf16 are encoded on every cached number, so they take the usual bit-level shortcuts
// (Giesen's float_to_half_fast3_rtne for fp16), which give exactly what minifloat_encode gives
// (checked on all 2^32 inputs when they were written; test_quant checks them against a
// brute-force nearest search).
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

// The reference encoders, by the formats' definitions (the fast ones above must agree).
uint16_t quant_fp32_to_fp16_ref(float x) { return (uint16_t)minifloat_encode(x, &fp16_ieee); }
uint16_t quant_fp32_to_fp16_sat_ref(float x) { return (uint16_t)minifloat_encode(x, &fp16_sat); }
uint16_t quant_fp32_to_bf16_ref(float x) { return (uint16_t)minifloat_encode(x, &bf16_ieee); }

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

uint8_t quant_fp32_to_fp8_ref(float x, QuantFp8Format format) {
    return (uint8_t)minifloat_encode(x, format == QUANT_FP8_E5M2 ? &fp8_e5m2 : &fp8_e4m3);
}

float quant_fp8_to_fp32(uint8_t code, QuantFp8Format format) {
    const float sign = (code & 0x80) ? -1.0f : 1.0f;
    int e, m, mbits, bias;
    if (format == QUANT_FP8_E5M2) {
        e = (code >> 2) & 0x1f;
        m = code & 0x3;
        mbits = 2;
        bias = 15;
        if (e == 0x1f) return m == 0 ? sign * INFINITY : NAN;
    } else {
        e = (code >> 3) & 0xf;
        m = code & 0x7;
        mbits = 3;
        bias = 7;
        if (e == 0xf && m == 0x7) return NAN;
    }
    if (e == 0) return sign * ldexpf((float)m, 1 - bias - mbits);
    return sign * ldexpf((float)(m + (1 << mbits)), e - bias - mbits);
}

float quant_fp8_max(QuantFp8Format format) { return format == QUANT_FP8_E5M2 ? 57344.0f : 448.0f; }

void quant_fp8_table(QuantFp8Format format, float table[256]) {
    for (int c = 0; c < 256; c++) table[c] = quant_fp8_to_fp32((uint8_t)c, format);
}

void quant_pack(uint8_t *dst, const uint8_t *codes, size_t n, int bits) {
    const uint32_t mask = (1u << bits) - 1u;
    memset(dst, 0, quant_packed_bytes(n, bits));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { // eight codes fill exactly `bits` bytes
        uint64_t w = 0;
        for (int k = 0; k < 8; k++) w |= (uint64_t)(codes[i + k] & mask) << (k * bits);
        uint8_t *g = dst + (i / 8) * (size_t)bits;
        for (int b = 0; b < bits; b++) g[b] = (uint8_t)(w >> (8 * b));
    }
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

void quant_unpack_float(const uint8_t *src, int n, int bits, float mul, float offset, float *out) {
    uint8_t codes[256];
    for (int i = 0; i < n; i += 256) { // 256 codes fill whole bytes: each run unpacks on its own
        const int m = n - i < 256 ? n - i : 256;
        quant_unpack(src + (size_t)i / 8 * (size_t)bits, codes, (size_t)m, bits);
        for (int k = 0; k < m; k++) out[i + k] = (float)codes[k] * mul - offset;
    }
}
