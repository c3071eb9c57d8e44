// The shared arithmetic of quant.h against references written independently here: formats decoded
// by their defining formulas (and literal values), encoders checked against a brute-force search for
// the nearest value, bit packing against a bit-by-bit writer.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

#include "check.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) { return (uint32_t)(check_next(&rng_state) >> 32); }

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int same_value(double a, double b) { return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)); }

// ---- Reference encoders: the formats' definitions by generic minifloat rounding ---------------
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


static uint16_t ref_fp16_encode(float x) { return (uint16_t)minifloat_encode(x, &fp16_ieee); }
static uint16_t ref_fp16_sat_encode(float x) { return (uint16_t)minifloat_encode(x, &fp16_sat); }
static uint16_t ref_bf16_encode(float x) { return (uint16_t)minifloat_encode(x, &bf16_ieee); }
static uint8_t ref_fp8_encode(float x, QuantFp8Format format) {
    return (uint8_t)minifloat_encode(x, format == QUANT_FP8_E5M2 ? &fp8_e5m2 : &fp8_e4m3);
}

// The kernels' fp8 decoders (quant.h), by format.
static float fp8_decode(uint8_t c, QuantFp8Format f) { return f == QUANT_FP8_E4M3 ? quant_e4m3_to_fp32(c) : quant_e5m2_to_fp32(c); }

// ---- Reference decoders: the formats' defining formulas, in double -----------------------------
static double ref_fp16(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, -24);       // m · 2^-10 · 2^-14
    else v = ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -v : v;
}

static double ref_bf16(uint16_t b) {
    const int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
    double v;
    if (e == 255) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, -133);      // m · 2^-7 · 2^-126
    else v = ldexp(1.0 + m / 128.0, e - 127);
    return s ? -v : v;
}

static double ref_e4m3(uint8_t c) {
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    double v;
    if (e == 15 && m == 7) v = NAN;
    else if (e == 0) v = m * pow(2.0, -9);
    else v = (1.0 + m / 8.0) * pow(2.0, e - 7);
    return s ? -v : v;
}

static double ref_e5m2(uint8_t c) {
    const int s = c >> 7, e = (c >> 2) & 31, m = c & 3;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = m * pow(2.0, -16);
    else v = (1.0 + m / 4.0) * pow(2.0, e - 15);
    return s ? -v : v;
}

// ---- Brute-force nearest: the magnitude code nearest to a (ties to the even code), given the
// sorted table of finite magnitudes vals[0..n) (vals[c] is the value of magnitude code c). Returns
// n when a lies at or beyond the midpoint between the last value and the next one `beyond`.
static int nearest_code(const double *vals, int n, double beyond, double a) {
    int lo = 0, hi = n - 1; // largest c with vals[c] <= a
    if (a >= vals[n - 1]) {
        const double mid = (vals[n - 1] + beyond) / 2;
        if (a < mid) return n - 1;
        if (a > mid) return n;
        return ((n - 1) % 2 == 0) ? n - 1 : n;
    }
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (vals[mid] <= a) lo = mid;
        else hi = mid;
    }
    const int c = vals[hi] <= a ? hi : lo;
    const double dl = a - vals[c], du = vals[c + 1] - a;
    if (dl < du) return c;
    if (du < dl) return c + 1;
    return c % 2 == 0 ? c : c + 1;
}

static void test_rounding(void) {
    const float in[] = {0.5f, 1.5f, 2.5f, 3.5f, -0.5f, -1.5f, -2.5f, 2.4999998f, 2.5000002f, -7.5f};
    const float want[] = {0.0f, 2.0f, 2.0f, 4.0f, -0.0f, -2.0f, -2.0f, 2.0f, 3.0f, -8.0f};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        CHECK(quant_round_even(in[i]) == want[i], "round_even(%g) = %g, want %g", in[i], quant_round_even(in[i]), want[i]);
    CHECK(quant_round_clamp(2.5f, -7, 7) == 2, "round_clamp tie");
    CHECK(quant_round_clamp(7.6f, -7, 7) == 7, "round_clamp high");
    CHECK(quant_round_clamp(-1e30f, -7, 7) == -7, "round_clamp low");
    CHECK(quant_round_clamp(NAN, -7, 7) == -7, "round_clamp NaN");
    CHECK(quant_round_clamp(INFINITY, 0, 3) == 3, "round_clamp inf");
    CHECK(quant_round_clamp(-6.5f, -8, 7) == -6, "round_clamp negative tie");
}

static void test_fp16(void) {
    // Every code decodes to its defining value.
    for (uint32_t h = 0; h < 65536; h++) {
        const double want = ref_fp16((uint16_t)h);
        CHECK(same_value(quant_fp16_to_fp32((uint16_t)h), want), "fp16 %04x decodes to %g, want %g", h,
              quant_fp16_to_fp32((uint16_t)h), want);
        if (!isnan(want)) {
            CHECK(quant_fp32_to_fp16((float)want) == h, "fp16 %04x does not round-trip (%04x)", h,
                  quant_fp32_to_fp16((float)want));
        } else {
            const uint16_t e = quant_fp32_to_fp16((float)want);
            CHECK((e & 0x7c00) == 0x7c00 && (e & 0x3ff), "fp16 NaN encodes to non-NaN %04x", e);
        }
    }
    // Literal values and ties.
    struct { float x; uint16_t code; } lit[] = {
        {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff}, {0x1p-24f, 0x0001}, {0x1p-14f, 0x0400},
        {0.0f, 0x0000}, {-0.0f, 0x8000}, {0.333333343f, 0x3555},
        {1.0f + 0x1p-11f, 0x3c00},        // tie between 0x3c00 and 0x3c01: to even
        {1.0f + 3 * 0x1p-11f, 0x3c02},    // tie between 0x3c01 and 0x3c02: to even
        {0x1p-25f, 0x0000},               // tie between 0 and the smallest subnormal
        {3 * 0x1p-25f, 0x0002},           // tie between 0x0001 and 0x0002
        {0x1p-26f, 0x0000}, {65519.0f, 0x7bff}, {65520.0f, 0x7c00}, {1e6f, 0x7c00}, {-1e6f, 0xfc00},
        {INFINITY, 0x7c00}, {-INFINITY, 0xfc00}, {0x1p-30f, 0x0000}, {-0x1p-30f, 0x8000},
    };
    for (size_t i = 0; i < sizeof lit / sizeof lit[0]; i++)
        CHECK(quant_fp32_to_fp16(lit[i].x) == lit[i].code, "fp16(%a) = %04x, want %04x", lit[i].x,
              quant_fp32_to_fp16(lit[i].x), lit[i].code);
    // Saturating variant for scales.
    CHECK(quant_fp32_to_fp16_sat(65520.0f) == 0x7bff, "fp16_sat overflow");
    CHECK(quant_fp32_to_fp16_sat(INFINITY) == 0x7bff, "fp16_sat inf");
    CHECK(quant_fp32_to_fp16_sat(-1e9f) == 0xfbff, "fp16_sat -overflow");
    CHECK(quant_fp32_to_fp16_sat(0.5f) == 0x3800, "fp16_sat normal");
    CHECK(isnan(quant_fp16_to_fp32(quant_fp32_to_fp16_sat(NAN))), "fp16_sat NaN");
    // Random floats against a brute-force nearest search over all finite fp16 magnitudes.
    static double vals[0x7c00];
    for (int c = 0; c < 0x7c00; c++) vals[c] = ref_fp16((uint16_t)c);
    for (int i = 0; i < 400000; i++) {
        // Exponents from well below the subnormals to beyond the range, all mantissas.
        const uint32_t e = 127 - 30 + rnd() % 50, u = (rnd() & 0x807fffffu) | (e << 23);
        const float x = from_bits(i % 4 ? u : (rnd() & 0x8000ffffu) | ((127 - 26 + rnd() % 4) << 23));
        const int c = nearest_code(vals, 0x7c00, 65536.0, fabs((double)x));
        const uint16_t want = (uint16_t)((signbit(x) ? 0x8000 : 0) | (c == 0x7c00 ? 0x7c00 : c));
        CHECK(quant_fp32_to_fp16(x) == want, "fp16(%a) = %04x, nearest is %04x", x, quant_fp32_to_fp16(x), want);
    }
}

static void test_bf16(void) {
    for (uint32_t b = 0; b < 65536; b++) {
        const double want = ref_bf16((uint16_t)b);
        CHECK(same_value(quant_bf16_to_fp32((uint16_t)b), want), "bf16 %04x decodes wrong", b);
        if (!isnan(want))
            CHECK(quant_fp32_to_bf16((float)want) == b, "bf16 %04x does not round-trip", b);
        else
            CHECK(isnan(quant_bf16_to_fp32(quant_fp32_to_bf16((float)want))), "bf16 NaN lost");
    }
    struct { float x; uint16_t code; } lit[] = {
        {1.0f, 0x3f80}, {1.0f + 0x1p-8f, 0x3f80}, {1.0f + 3 * 0x1p-8f, 0x3f82}, {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81},
        {-3.0f, 0xc040}, {3.4028235e38f, 0x7f80} /* FLT_MAX rounds past bf16's max: inf */,
        {INFINITY, 0x7f80}, {-INFINITY, 0xff80}, {0x1p-133f, 0x0001}, {0x1p-134f, 0x0000}, {-0.0f, 0x8000},
    };
    for (size_t i = 0; i < sizeof lit / sizeof lit[0]; i++)
        CHECK(quant_fp32_to_bf16(lit[i].x) == lit[i].code, "bf16(%a) = %04x, want %04x", lit[i].x,
              quant_fp32_to_bf16(lit[i].x), lit[i].code);
    // Random floats: compare against the two bf16 neighbours found by truncation, in double.
    for (int i = 0; i < 400000; i++) {
        const uint32_t u = rnd();
        const float x = from_bits(u);
        if (isnan(x) || isinf(x)) continue;
        const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
        // Above the largest finite value the next step is 2^128 (IEEE rounds to inf from its midpoint).
        const double a = fabs((double)x), vl = fabs(ref_bf16(lo));
        const double vh = (hi & 0x7fff) == 0x7f80 ? ldexp(1.0, 128) : fabs(ref_bf16(hi));
        uint16_t want;
        if (a - vl < vh - a) want = lo;
        else if (vh - a < a - vl) want = hi;
        else want = (lo & 1) ? hi : lo;
        CHECK(quant_fp32_to_bf16(x) == want, "bf16(%a) = %04x, want %04x", x, quant_fp32_to_bf16(x), want);
    }
}

static void test_fp8_format(QuantFp8Format f, const char *name, double (*ref)(uint8_t), float max,
                            int n_finite /* finite magnitude codes 0..n_finite-1 */) {
    CHECK(fp8_decode((uint8_t)(n_finite - 1), f) == max, "%s max", name);
    for (int c = 0; c < 256; c++) {
        const double want = ref((uint8_t)c);
        CHECK(same_value(fp8_decode((uint8_t)c, f), want), "%s kernel decoder: code %02x gives %g, want %g", name, c,
              fp8_decode((uint8_t)c, f), want);
        if (!isnan(want) && !isinf(want))
            CHECK(quant_fp32_to_fp8((float)want, f) == c, "%s code %02x does not round-trip (%02x)", name, c,
                  quant_fp32_to_fp8((float)want, f));
    }
    // Ties between neighbours go to the even code; just off the midpoint goes to the nearer.
    for (int c = 0; c + 1 < n_finite; c++) {
        const double lo = ref((uint8_t)c), hi = ref((uint8_t)(c + 1));
        const float mid = (float)((lo + hi) / 2); // exact: a few significant bits
        CHECK((double)mid == (lo + hi) / 2, "%s midpoint not exact", name);
        const int even = c % 2 == 0 ? c : c + 1;
        CHECK(quant_fp32_to_fp8(mid, f) == even, "%s tie %g -> %02x, want %02x", name, mid, quant_fp32_to_fp8(mid, f), even);
        CHECK(quant_fp32_to_fp8(-mid, f) == (0x80 | even), "%s negative tie %g", name, -mid);
        CHECK(quant_fp32_to_fp8(nextafterf(mid, 0.0f), f) == c, "%s below tie %g", name, mid);
        CHECK(quant_fp32_to_fp8(nextafterf(mid, INFINITY), f) == c + 1, "%s above tie %g", name, mid);
    }
    // Saturation: anything beyond the largest finite value, infinities included, gives ±max.
    const uint8_t top = (uint8_t)(n_finite - 1);
    const float beyond[] = {max * 1.01f, max * 1.0625f, max * 1.2f, 1e30f, INFINITY};
    for (size_t i = 0; i < sizeof beyond / sizeof beyond[0]; i++) {
        CHECK(quant_fp32_to_fp8(beyond[i], f) == top, "%s saturate %g -> %02x", name, beyond[i], quant_fp32_to_fp8(beyond[i], f));
        CHECK(quant_fp32_to_fp8(-beyond[i], f) == (0x80 | top), "%s saturate %g", name, -beyond[i]);
    }
    CHECK(isnan(fp8_decode(quant_fp32_to_fp8(NAN, f), f)), "%s NaN stays NaN", name);
    CHECK(isnan(fp8_decode(quant_fp32_to_fp8(-NAN, f), f)), "%s -NaN stays NaN", name);
    CHECK(quant_fp32_to_fp8(-0.0f, f) == 0x80, "%s -0", name);
    CHECK(quant_fp32_to_fp8(1e-30f, f) == 0x00, "%s underflow", name);
    // Random values against a brute-force nearest search over the finite magnitudes.
    double vals[128];
    for (int c = 0; c < n_finite; c++) vals[c] = ref((uint8_t)c);
    for (int i = 0; i < 200000; i++) {
        const uint32_t e = 127 - 20 + rnd() % 38;
        const float x = from_bits((rnd() & 0x807fffffu) | (e << 23));
        int c = nearest_code(vals, n_finite, 2 * max, fabs((double)x)); // `beyond` only matters for ties
        if (c >= n_finite) c = n_finite - 1;
        const uint8_t want = (uint8_t)((signbit(x) ? 0x80 : 0) | c);
        CHECK(quant_fp32_to_fp8(x, f) == want, "%s(%a) = %02x, nearest %02x", name, x, quant_fp32_to_fp8(x, f), want);
    }
}

static void test_fp8(void) {
    // Literal anchors, independent of any formula.
    struct { uint8_t c; float v; } e4[] = {{0x00, 0.0f}, {0x01, 0.001953125f}, {0x07, 0.013671875f}, {0x08, 0.015625f},
                                           {0x38, 1.0f}, {0x40, 2.0f}, {0x77, 240.0f}, {0x7e, 448.0f},
                                           {0xfe, -448.0f}, {0xb8, -1.0f}, {0x3c, 1.5f}, {0x3f, 1.875f}};
    for (size_t i = 0; i < sizeof e4 / sizeof e4[0]; i++)
        CHECK(fp8_decode(e4[i].c, QUANT_FP8_E4M3) == e4[i].v, "e4m3 %02x literal", e4[i].c);
    CHECK(isnan(fp8_decode(0x7f, QUANT_FP8_E4M3)) && isnan(fp8_decode(0xff, QUANT_FP8_E4M3)),
          "e4m3 NaN codes");
    CHECK(fp8_decode(0x78, QUANT_FP8_E4M3) == 256.0f, "e4m3 0x78 is 256, not infinity");
    struct { uint8_t c; float v; } e5[] = {{0x01, 0x1p-16f}, {0x03, 3 * 0x1p-16f}, {0x04, 0x1p-14f}, {0x3c, 1.0f},
                                           {0x3e, 1.5f}, {0x7b, 57344.0f}, {0xfb, -57344.0f}, {0x7a, 49152.0f}};
    for (size_t i = 0; i < sizeof e5 / sizeof e5[0]; i++)
        CHECK(fp8_decode(e5[i].c, QUANT_FP8_E5M2) == e5[i].v, "e5m2 %02x literal", e5[i].c);
    CHECK(fp8_decode(0x7c, QUANT_FP8_E5M2) == INFINITY && fp8_decode(0xfc, QUANT_FP8_E5M2) == -INFINITY,
          "e5m2 infinities");
    CHECK(isnan(fp8_decode(0x7d, QUANT_FP8_E5M2)) && isnan(fp8_decode(0x7e, QUANT_FP8_E5M2)) &&
              isnan(fp8_decode(0xff, QUANT_FP8_E5M2)), "e5m2 NaN codes");
    // Specific ties and saturation points.
    CHECK(quant_fp32_to_fp8(0x1p-10f, QUANT_FP8_E4M3) == 0x00, "e4m3 half the smallest subnormal -> 0");
    CHECK(quant_fp32_to_fp8(0x1.0002p-10f, QUANT_FP8_E4M3) == 0x01, "e4m3 just above -> smallest subnormal");
    CHECK(quant_fp32_to_fp8(464.0f, QUANT_FP8_E4M3) == 0x7e, "e4m3 464 -> 448 (never the NaN code)");
    CHECK(quant_fp32_to_fp8(1.0625f, QUANT_FP8_E4M3) == 0x38, "e4m3 tie 1.0625 -> 1.0");
    CHECK(quant_fp32_to_fp8(1.1875f, QUANT_FP8_E4M3) == 0x3a, "e4m3 tie 1.1875 -> 1.25");
    CHECK(quant_fp32_to_fp8(61440.0f, QUANT_FP8_E5M2) == 0x7b, "e5m2 61440 -> 57344 (no infinity)");
    CHECK(quant_fp32_to_fp8(1.125f, QUANT_FP8_E5M2) == 0x3c, "e5m2 tie 1.125 -> 1.0");
    CHECK(quant_fp32_to_fp8(1.375f, QUANT_FP8_E5M2) == 0x3e, "e5m2 tie 1.375 -> 1.5");
    test_fp8_format(QUANT_FP8_E4M3, "e4m3", ref_e4m3, 448.0f, 0x7f);
    test_fp8_format(QUANT_FP8_E5M2, "e5m2", ref_e5m2, 57344.0f, 0x7c);
}

// Independent packer: set bit (i·bits + k) for every set bit k of code i.
static void ref_pack(uint8_t *dst, const uint8_t *codes, size_t n, int bits) {
    memset(dst, 0, (n * (size_t)bits + 7) / 8);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < bits; k++)
            if ((codes[i] >> k) & 1) {
                const size_t bit = i * (size_t)bits + (size_t)k;
                dst[bit / 8] |= (uint8_t)(1u << (bit % 8));
            }
}

static void test_packing(void) {
    const size_t lengths[] = {1, 3, 5, 7, 9, 13, 15, 17, 31, 33, 63, 65, 127, 255};
    uint8_t codes[256], noisy[256], back[256], packed[300], expect[300];
    for (int bits = 1; bits <= 8; bits++) {
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            const size_t n = lengths[li];
            const size_t nbytes = (n * (size_t)bits + 7) / 8;
            CHECK(quant_packed_bytes(n, bits) == nbytes, "packed_bytes(%zu, %d)", n, bits);
            for (size_t i = 0; i < n; i++) {
                codes[i] = (uint8_t)(rnd() & ((1u << bits) - 1));
                noisy[i] = (uint8_t)(codes[i] | (bits < 8 ? (rnd() << bits) & 0xff : 0)); // junk above the width
            }
            memset(packed, 0xa5, sizeof packed);
            quant_pack(packed, noisy, n, bits);
            ref_pack(expect, codes, n, bits);
            CHECK(memcmp(packed, expect, nbytes) == 0, "pack bits=%d n=%zu differs from the bit-by-bit packer", bits, n);
            CHECK(packed[nbytes] == 0xa5, "pack bits=%d n=%zu writes past its %zu bytes", bits, n, nbytes);
            quant_unpack(packed, back, n, bits);
            CHECK(memcmp(back, codes, n) == 0, "unpack bits=%d n=%zu", bits, n);
        }
    }
    // A hand-packed example: 3-bit codes 1..7, 0 -> 0xd1 0x58 0x1f (little-endian bit stream).
    const uint8_t c3[8] = {1, 2, 3, 4, 5, 6, 7, 0};
    quant_pack(packed, c3, 8, 3);
    CHECK(packed[0] == 0xd1 && packed[1] == 0x58 && packed[2] == 0x1f, "3-bit example packs to %02x %02x %02x",
          packed[0], packed[1], packed[2]);
    // 5-bit codes 31, 1: bits 0..4 = 11111, bits 5..9 = 00001 -> 0x3f 0x00.
    const uint8_t c5[2] = {31, 1};
    quant_pack(packed, c5, 2, 5);
    CHECK(packed[0] == 0x3f && packed[1] == 0x00, "5-bit example packs to %02x %02x", packed[0], packed[1]);
}

// The fast encoders against the generic minifloat rounding (the reference), on every 1021st bit
// pattern and on all patterns near each format's thresholds (they agreed on all 2^32 when written).
static void test_fast_encoders(void) {
    static const uint32_t around[] = {0x477ff000u, 0x47800000u, 0x38800000u, 0x33000000u, 0x7f800000u,
                                      0x47600000u, 0x43e00000u, 0x3c800000u, 0x38000000u, 0x7f7fffffu, 0x00800000u};
    int bad = 0;
    const uint64_t strided = (1ull << 32) / 1021 + 1;
    for (uint64_t i = 0; i < strided + 4096 * 11; i++) {
        uint32_t u;
        if (i < strided) {
            u = (uint32_t)(i * 1021);
        } else { // ±1024 patterns around each threshold, both signs
            const uint64_t k = i - strided;
            u = (around[k / 4096] + (uint32_t)(k % 2048) - 1024u) | (uint32_t)((k % 4096) / 2048) << 31;
        }
        const float x = from_bits(u);
        const int ok = quant_fp32_to_fp16(x) == ref_fp16_encode(x) &&
                       quant_fp32_to_fp16_sat(x) == ref_fp16_sat_encode(x) &&
                       quant_fp32_to_bf16(x) == ref_bf16_encode(x) &&
                       quant_fp32_to_fp8(x, QUANT_FP8_E4M3) == ref_fp8_encode(x, QUANT_FP8_E4M3) &&
                       quant_fp32_to_fp8(x, QUANT_FP8_E5M2) == ref_fp8_encode(x, QUANT_FP8_E5M2);
        if (!ok && bad++ < 5) CHECK(0, "fast encoders differ from the reference at %08x", u);
    }
}

int main(void) {
    test_fast_encoders();
    test_rounding();
    test_fp16();
    test_bf16();
    test_fp8();
    test_packing();
    if (failures) {
        fprintf(stderr, "test_quant: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_quant: ok\n");
    return 0;
}
