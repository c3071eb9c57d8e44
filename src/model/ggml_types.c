// ggml's weight types decoded to fp32 (ggml_types.h). Each decoder follows ggml's reference
// dequantiser's arithmetic step by step (the same products in the same order, in fp32), so that a
// weight micro reads is the number llama.cpp's reference path reads.
#include "ggml_types.h"

#include <string.h>

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float ggml_half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) { // zero or subnormal: man · 2^-24, exact in fp32
        const float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 0x1f) return from_bits(sign | 0x7f800000u | man << 13); // infinity, NaN (payload kept)
    return from_bits(sign | (exp + 112u) << 23 | man << 13);
}

float ggml_bf16_to_float(uint16_t b) { return from_bits((uint32_t)b << 16); }

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static float half_at(const uint8_t *p) { return ggml_half_to_float(u16(p)); }

static void decode_f32(const uint8_t *src, float *dst, size_t n) { memcpy(dst, src, n * sizeof(float)); }

static void decode_f16(const uint8_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = half_at(src + 2 * i);
}

static void decode_bf16(const uint8_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ggml_bf16_to_float(u16(src + 2 * i));
}

// Q8_0: 32 signed bytes and an fp16 scale d; x = q·d.
static void decode_q8_0(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n; b++, src += 34, dst += 32) {
        const float d = half_at(src);
        for (int j = 0; j < 32; j++) dst[j] = (float)(int8_t)src[2 + j] * d;
    }
}

// Q4_0 and Q4_1: 32 four-bit codes, the low nibbles the block's first half and the high its second;
// x = (q - 8)·d, or q·d + m.
static void decode_q4_0(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n; b++, src += 18, dst += 32) {
        const float d = half_at(src);
        const uint8_t *qs = src + 2;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)((qs[j] & 0x0f) - 8) * d;
            dst[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

static void decode_q4_1(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n; b++, src += 20, dst += 32) {
        const float d = half_at(src), m = half_at(src + 2);
        const uint8_t *qs = src + 4;
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)(qs[j] & 0x0f) * d + m;
            dst[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

// Q5_0 and Q5_1: Q4's nibbles with a fifth bit each from a 32-bit mask (bit j for number j, bit
// j + 16 for number j + 16); x = (q - 16)·d, or q·d + m.
static uint32_t high_bits(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void decode_q5_0(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n; b++, src += 22, dst += 32) {
        const float d = half_at(src);
        const uint32_t qh = high_bits(src + 2);
        const uint8_t *qs = src + 6;
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0x0f) | (int)((qh >> j) << 4 & 0x10), hi = (qs[j] >> 4) | (int)(qh >> (j + 12) & 0x10);
            dst[j] = (float)(lo - 16) * d;
            dst[j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void decode_q5_1(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n; b++, src += 24, dst += 32) {
        const float d = half_at(src), m = half_at(src + 2);
        const uint32_t qh = high_bits(src + 4);
        const uint8_t *qs = src + 8;
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0x0f) | (int)((qh >> j) << 4 & 0x10), hi = (qs[j] >> 4) | (int)(qh >> (j + 12) & 0x10);
            dst[j] = (float)lo * d + m;
            dst[j + 16] = (float)hi * d + m;
        }
    }
}

// The K-quants' super-blocks of 256: Q4_K and Q5_K keep eight 6-bit scales and eight 6-bit minimums
// packed in 12 bytes (the first four of each in the low six bits of bytes 0-3 and 4-7, the last
// four split between bytes 8-11 and the top two bits of bytes 0-7).
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

// Q4_K: fp16 d and dmin, the scales, 128 bytes of nibbles; each 64 numbers are two sub-blocks of 32
// (low nibbles, then high) with x = (d·sc)·q - (dmin·m).
static void decode_q4_k(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n; b++, src += 144) {
        const float d = half_at(src), dmin = half_at(src + 2);
        const uint8_t *scales = src + 4, *q = src + 16;
        for (int j = 0; j < 8; j += 2, q += 32) {
            int sc, m;
            scale_min_k4(j, scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            scale_min_k4(j + 1, scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

// Q5_K: Q4_K with a fifth bit for each number from 32 bytes, sub-block pair k's bits at 2k and 2k + 1.
static void decode_q5_k(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n; b++, src += 176) {
        const float d = half_at(src), dmin = half_at(src + 2);
        const uint8_t *scales = src + 4, *qh = src + 16, *ql = src + 48;
        unsigned u1 = 1, u2 = 2;
        for (int j = 0; j < 8; j += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            int sc, m;
            scale_min_k4(j, scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            scale_min_k4(j + 1, scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

// Q6_K: 128 bytes of low nibbles, 64 of high bit pairs, sixteen signed 8-bit scales and an fp16 d
// last; each half of 128 numbers is four runs of 32, x = d·sc·(q - 32).
static void decode_q6_k(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n; b++, src += 210) {
        const float d = half_at(src + 208);
        const uint8_t *ql = src, *qh = src + 128;
        const int8_t *sc = (const int8_t *)(src + 192);
        for (int half = 0; half < 2; half++, dst += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | (qh[l] & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (qh[l] >> 2 & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32;
                dst[l] = d * (float)sc[is] * (float)q1;
                dst[l + 32] = d * (float)sc[is + 2] * (float)q2;
                dst[l + 64] = d * (float)sc[is + 4] * (float)q3;
                dst[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
    }
}

static const GgmlType types[] = {
    {0, "F32", 1, 4, decode_f32},        {1, "F16", 1, 2, decode_f16},        {2, "Q4_0", 32, 18, decode_q4_0},
    {3, "Q4_1", 32, 20, decode_q4_1},    {6, "Q5_0", 32, 22, decode_q5_0},    {7, "Q5_1", 32, 24, decode_q5_1},
    {8, "Q8_0", 32, 34, decode_q8_0},    {12, "Q4_K", 256, 144, decode_q4_k}, {13, "Q5_K", 256, 176, decode_q5_k},
    {14, "Q6_K", 256, 210, decode_q6_k}, {30, "BF16", 1, 2, decode_bf16},
};

const GgmlType *ggml_type_of(uint32_t id) {
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].id == id) return &types[i];
    return NULL;
}

const char *ggml_type_unread_name(uint32_t id) {
    // ggml's numbers 0..39 (4 and 5, Q4_2 and Q4_3, were removed long ago).
    static const char *const names[] = {"F32",     "F16",    "Q4_0",   "Q4_1",   NULL,     NULL,    "Q5_0",
                                        "Q5_1",    "Q8_0",   "Q8_1",   "Q2_K",   "Q3_K",   "Q4_K",  "Q5_K",
                                        "Q6_K",    "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
                                        "IQ3_S",   "IQ2_S",  "IQ4_XS", "I8",     "I16",    "I32",   "I64",
                                        "F64",     "IQ1_M",  "BF16",   NULL,     NULL,     NULL,    "TQ1_0",
                                        "TQ2_0",   NULL,     NULL,     NULL,     "MXFP4"};
    return id < sizeof names / sizeof names[0] ? names[id] : NULL;
}
