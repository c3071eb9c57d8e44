// Shared quantisation arithmetic: rounding, fp16 / bf16 / fp8 conversion and dense bit packing.
// Every codec builds on these; nothing here knows about caches, heads or tokens.
#ifndef MICRO_QUANT_H
#define MICRO_QUANT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
// Which kernel build this is (meson.build's kernel_isas): KERNELS_AVX512 or KERNELS_AVX2 in the
// codec libraries built for those sets, neither in the portable one nor in any other file, whatever
// -march says, so that each build holds exactly its own set's code.
#if defined(KERNELS_AVX512) || defined(KERNELS_AVX2)
#include <immintrin.h> // both convert fp16 with F16C's vcvtph2ps / vcvtps2ph
#define QUANT_F16C 1
#endif

// ---- Rounding -------------------------------------------------------------------------------
// Round to nearest, ties to even (the default floating-point rounding mode, which micro never
// changes): 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -2.5 -> -2.
static inline float quant_round_even(float x) { return nearbyintf(x); }

// Round to nearest even and clamp to [lo, hi]; NaN gives lo. Never converts an out-of-range float.
// Clamped first, without branches, so that an encoder's loop over a vector's numbers vectorises.
static inline int quant_round_clamp(float x, int lo, int hi) {
    const float a = x > (float)lo ? x : (float)lo; // NaN: lo
    return (int)nearbyintf(a < (float)hi ? a : (float)hi);
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
#ifdef QUANT_AVX512
    // The AVX-512 build: one vcvtph2ps, exact for every finite and infinite fp16 (a NaN takes the path
    // below, which keeps a signalling NaN signalling as the portable build does). Not in the AVX2
    // build: there the branch keeps gcc from vectorising the loops this is inlined into, which the
    // branch-free conversion below lets it do eight lanes at a time.
    if ((h & 0x7c00u) != 0x7c00u) return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
#endif
    const uint32_t em = h & 0x7fffu, e = em >> 10;
    const uint32_t normal = (em << 13) + (112u << 23);
    const uint32_t special = 0x7f800000u | ((em & 0x3ffu) << 13);
    const uint32_t tiny = quant_to_bits((float)(int32_t)(em & 0x3ffu) * 0x1p-24f);
    return quant_from_bits(quant_select3(e == 0, tiny, e == 0x1f, special, normal) | ((uint32_t)(h & 0x8000u) << 16));
}

// ---- bfloat16 -------------------------------------------------------------------------------
// fp32 -> bf16, round to nearest even; overflow gives ±inf; NaN stays (quiet) NaN.
uint16_t quant_fp32_to_bf16(float x);

static inline float quant_bf16_to_fp32(uint16_t b) { return quant_from_bits((uint32_t)b << 16); }

// ---- FP8 ------------------------------------------------------------------------------------
// E4M3 is OCP's E4M3FN: bias 7, no infinities, max ±448, NaN only as S.1111.111.
// E5M2: bias 15, max ±57344, IEEE-style ±inf (S.11111.00) and NaN (S.11111.xx, xx != 0).
// Encoding rounds to nearest even and saturates: every value beyond the largest finite one,
// ±inf included, becomes ±max (as CUDA's __NV_SATFINITE); NaN stays NaN.
typedef enum { QUANT_FP8_E4M3 = 0, QUANT_FP8_E5M2 = 1 } QuantFp8Format;

uint8_t quant_fp32_to_fp8(float x, QuantFp8Format format);

// Branch-free decoders for the kernels, built as quant_fp16_to_fp32 is (test_quant checks all 256
// codes against the formats' defining formulas).
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

// ---- Dense bit packing ----------------------------------------------------------------------
// n codes of `bits` bits (1..8) form one little-endian bit stream: code i occupies bits
// [i*bits, (i+1)*bits), least significant bit first, so 3-, 5-, 6- and 7-bit codes straddle
// bytes. Eight codes always fill exactly `bits` bytes. Unused high bits of the last byte are zero.
static inline size_t quant_packed_bytes(size_t n, int bits) { return (n * (size_t)bits + 7) / 8; }

// Writes quant_packed_bytes(n, bits) bytes; only the low `bits` bits of each code are kept.
void quant_pack(uint8_t *dst, const uint8_t *codes, size_t n, int bits);
void quant_unpack(const uint8_t *src, uint8_t *codes, size_t n, int bits);

// ---- Kernel layouts -------------------------------------------------------------------------
// The attention kernels of the codecs read codes in one of two layouts, chosen by role:
//   keys (scores): token tiles, SIMD lanes = tokens, as the fp32 codec lays out its keys;
//   values (mix):  token groups, SIMD lanes = numbers of the vector.
// Either way a kernel turns each B-bit code (or 4-bit combination of codes) into a float by a
// 16-entry table built per call (or per group of tokens): the table holds the products the kernel
// adds, e.g. q_d · level(c), so a lookup replaces unpacking, conversion and a multiplication. With
// AVX-512 a lookup is one _mm512_permutexvar_ps; the portable code does the same lookups in plain
// C, so both give the same bits (the products are computed once, in the table, either way; the
// portable build is compiled with MICRO_PORTABLE defined, and test_codec_simd runs both on the same
// vectors and compares).
#ifdef KERNELS_AVX512
#define QUANT_AVX512 1
#define QUANT_SIMD 1
#else
#define QUANT_SIMD 0
#endif

// The kernels are written once with head_dim and width as parameters and instanced for micro's
// shape (constant shifts and trip counts): forced inlining and full unrolling make those instances.
// Under the sanitizers that would multiply what gets instrumented (minutes of compile time for
// nothing), so sanitized and unoptimised builds leave inlining and unrolling to the compiler.
#define QUANT_PRAGMA(x) _Pragma(#x)
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define QUANT_ALWAYS_INLINE inline __attribute__((always_inline))
#define QUANT_UNROLL(n) QUANT_PRAGMA(GCC unroll n)
#else
#define QUANT_ALWAYS_INLINE inline
#define QUANT_UNROLL(n)
#endif

#include "vec16.h" // sixteen float lanes in the AVX2 and AVX-512 builds (VEC16)

#if defined(QUANT_AVX512) && defined(__AVX512VBMI__)
// The row kernels read 16 numbers of a packed row (32 numbers of `bits` bits) at a time: ctrl[h]
// gathers (vpermb) into lane i the byte holding the start of number 16h + i and the byte after it,
// and off[h] holds where in that word the number's code starts.
static inline void quant_row_gather(int bits, __m512i *ctrl, __m512i *off) {
    uint8_t c[2][64];
    uint32_t o[2][16];
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 16; i++) {
            const int bit = (16 * h + i) * bits;
            for (int b = 0; b < 4; b++) c[h][4 * i + b] = (uint8_t)(bit / 8 + (b > 0));
            o[h][i] = (uint32_t)(bit % 8);
        }
    ctrl[0] = _mm512_loadu_si512(c[0]), ctrl[1] = _mm512_loadu_si512(c[1]);
    off[0] = _mm512_loadu_si512(o[0]), off[1] = _mm512_loadu_si512(o[1]);
}
#endif

// fmaxf(m, fabsf(x)) for an m that is not NaN (a NaN x leaves m, as fmaxf does), inline: gcc calls
// libm's fmaxf unless NaNs may be ignored, and an encoder's absmax would make that call for every
// number it stores, which slowed the filling of a pool (micro plate's panel (d)).
static inline float quant_max_abs(float m, float x) {
    const float a = fabsf(x);
    return a > m ? a : m;
}

// max |x_i| over n numbers (0 for none; NaNs never win): the same value whatever order the numbers
// are taken in, so the loop runs in SIMD lanes joined at the end, where a chain of maxima over one
// register waited on each step.
static inline float quant_absmax(const float *x, int n) {
    float m = 0.0f;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = quant_max_abs(m, x[i]);
    return m;
}

// The signed number of largest magnitude, the first of equals, with that magnitude in *amax: what a
// scan finds that takes a number whose magnitude beats the best so far (from 0, so 0 when every
// magnitude is 0 or NaN), as quant_absmax's maximum and then its first place.
static inline float quant_extreme(const float *x, int n, float *amax) {
    const float m = quant_absmax(x, n);
    *amax = m;
    if (!(m > 0.0f)) return 0.0f;
    int i = 0;
    while (fabsf(x[i]) != m) i++;
    return x[i];
}

// j / per, and j % per in *rem, for j >= 0: a stream's block and place in it. A pool's blocks are a
// power of two (the default 16, vLLM's) almost always, and the kernels ask this for every tile: a
// shift and a mask, where an integer division is slow enough to show in the batched step.
static inline int quant_divmod(int j, int per, int *rem) {
    if ((per & (per - 1)) == 0) {
        *rem = j & (per - 1);
        return j >> __builtin_ctz((unsigned)per);
    }
    *rem = j % per;
    return j / per;
}

// Where a stream keeps its codes: one packed row per token, token tiles, or token groups.
typedef enum { QUANT_ROWS, QUANT_TILES, QUANT_GROUPS } QuantLayout;

// Sixteen fp16 numbers to fp32, as quant_fp16_to_fp32 does each (AVX2, AVX-512: vcvtph2ps, which
// agrees on every code but the signalling NaNs, which it quiets; no encoder here produces those).
static QUANT_ALWAYS_INLINE void quant_fp16_to_fp32_16(const uint16_t *h, float *out) {
#if defined(QUANT_AVX512)
    _mm512_storeu_ps(out, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h)));
#elif defined(QUANT_F16C)
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)));
    _mm256_storeu_ps(out + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + 8))));
#else
    for (int i = 0; i < 16; i++) out[i] = quant_fp16_to_fp32(h[i]);
#endif
}

// Token tiles: QUANT_TILE consecutive tokens of one head form a tile, and a chunk of 32 numbers of
// each token, packed as above (32·bits bits = `bits` little-endian 32-bit words), is stored
// word-interleaved: word g of lane (token) l at tile[g * QUANT_TILE + l]. Number d of the chunk is
// bits [d·bits, (d+1)·bits) of its lane's word stream, found by constant shifts.
#define QUANT_TILE 16

// Lane `lane` of a tile of `words`-word chunks from quant_pack's byte stream (4·words bytes).
static inline void quant_tile_put(uint32_t *tile, int lane, const uint8_t *packed, int words) {
    for (int g = 0; g < words; g++)
        tile[g * QUANT_TILE + lane] = (uint32_t)packed[4 * g] | (uint32_t)packed[4 * g + 1] << 8 |
                                      (uint32_t)packed[4 * g + 2] << 16 | (uint32_t)packed[4 * g + 3] << 24;
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

// The lookups' loop over a chunk's words (bits 1, 2, 4) stays a loop, eight steps a word unrolled:
// unrolled whole, AVX2's kernels (a lookup is two permutes, a blend and two shifts a half) grew
// larger than the level-1 instruction cache, and AVX-512's ran no faster.
// Table lookups on tiles, for widths 1..4. A chunk is read in steps: at bits 1, 2 and 4 step s is
// the 4 bits [4s, 4s+4) of the stream (4/bits numbers: 32·bits/4 steps), at bits 3 step s is
// number s (32 steps). table[s][e] is what the 4-bit value e at step s adds; at bits 3 the entries
// must repeat with period 8 (the fourth bit belongs to the next number).
static inline int quant_tile_steps(int bits) { return bits == 3 ? 32 : 8 * bits; }

// acc[k][l] += Σ_s tables[k][s][index_s(lane l of tile k)], s in order, for nt tiles of one head
// (tiles[k] points at tile k's chunk's first word: the tiles may lie in different blocks). With `shared` every
// tile uses tables[0] (the caller's constant: one set of tables per call, or one per group of
// tokens).
static QUANT_ALWAYS_INLINE void quant_tile_lookup(const uint32_t *const *tiles, int nt,
                                                  const float (*const *tables)[16], const int shared, const int bits,
                                                  float (*acc)[16]) {
    const int steps = quant_tile_steps(bits);
#ifdef VEC16
    // Step s looks up the 4 bits (B = 3: 3) from bit 4s (3s) of each lane's stream, shifted down (a
    // lookup reads only an index's low four bits); at B = 3 a number may continue in the next word.
    // With constant steps the loads of a word are one load and the shifts constants.
    const int sb = bits == 3 ? 3 : 4;
#define QUANT_INDEX(tp)                                                                            \
    (sh + sb <= 32 ? v16i_srli(v16i_load(tp + g * QUANT_TILE), sh)                                 \
                   : v16i_or(v16i_srli(v16i_load(tp + g * QUANT_TILE), sh), v16i_slli(v16i_load(tp + (g + 1) * QUANT_TILE), 32 - sh)))
    // At B = 3, group k of 8 numbers is the stream's bits [24k, 24k + 24): from bit 24k mod 32 of word
    // ⌊24k/32⌋, and the next word's low bits above where the group runs past it (k = 1, 2).
#define QUANT_GROUP3(tp, grp)                                                                      \
    ((24 * (grp) & 31) + 24 <= 32                                                                  \
         ? v16i_srli(v16i_load(tp + (24 * (grp) >> 5) * QUANT_TILE), 24 * (grp) & 31)              \
         : v16i_or(v16i_srli(v16i_load(tp + (24 * (grp) >> 5) * QUANT_TILE), 24 * (grp) & 31),     \
                   v16i_slli(v16i_load(tp + ((24 * (grp) >> 5) + 1) * QUANT_TILE), 32 - (24 * (grp) & 31))))
    if (nt == 4) {
        v16 a0 = v16_load(acc[0]), a1 = v16_load(acc[1]), a2 = v16_load(acc[2]), a3 = v16_load(acc[3]);
        const uint32_t *t0 = tiles[0], *t1 = tiles[1], *t2 = tiles[2], *t3 = tiles[3];
#define QUANT_STEP(i0, i1, i2, i3, s)                                                              \
    {                                                                                              \
        const v16 t = v16_load(tb0[s]);                                                            \
        a0 = v16_add(a0, v16_lookup(i0, t));                                                       \
        a1 = v16_add(a1, v16_lookup(i1, shared ? t : v16_load(tb1[s])));                           \
        a2 = v16_add(a2, v16_lookup(i2, shared ? t : v16_load(tb2[s])));                           \
        a3 = v16_add(a3, v16_lookup(i3, shared ? t : v16_load(tb3[s])));                           \
        V16_KEEP4(a0, a1, a2, a3);                                                                 \
    }
        // The empty asm statements keep gcc from hoisting the tables out of the caller's loop and
        // every lookup above the adds, which runs out of registers and spills.
        const float(*tb0)[16] = tables[0], (*tb1)[16] = tables[shared ? 0 : 1], (*tb2)[16] = tables[shared ? 0 : 2],
                   (*tb3)[16] = tables[shared ? 0 : 3];
        __asm__("" : "+r"(tb0), "+r"(tb1), "+r"(tb2), "+r"(tb3));
        if (sb == 4) { // word g holds steps 8g .. 8g + 7, at shifts 0, 4, .., 28
QUANT_UNROLL(1)
            for (int g = 0; g < bits; g++) {
QUANT_UNROLL(8)
                for (int j = 0; j < 8; j++) {
                    const int s = 8 * g + j, sh = 4 * j;
                    QUANT_STEP(QUANT_INDEX(t0), QUANT_INDEX(t1), QUANT_INDEX(t2), QUANT_INDEX(t3), s)
                }
            }
        } else { // bits 3: four groups of 8 steps, 24 bits each, gathered into one word
QUANT_UNROLL(1)
            for (int k = 0; k < 4; k++) {
                const v16i w0 = QUANT_GROUP3(t0, k), w1 = QUANT_GROUP3(t1, k), w2 = QUANT_GROUP3(t2, k),
                           w3 = QUANT_GROUP3(t3, k);
QUANT_UNROLL(8)
                for (int j = 0; j < 8; j++) {
                    const int s = 8 * k + j, sh = 3 * j;
                    QUANT_STEP(v16i_srli(w0, sh), v16i_srli(w1, sh), v16i_srli(w2, sh), v16i_srli(w3, sh), s)
                }
            }
        }
#undef QUANT_STEP
        v16_store4(acc[0], acc[2], a0, a1, a2, a3); // acc[k] follows acc[k - 1]
        return;
    }
    // Fewer tiles (a stream's last ones; every block of KIVI's, which its kernels read block by
    // block): one at a time, the same lookups and sums (gcc made the portable loop's lookups scalar).
    for (int k = 0; k < nt; k++) {
        const uint32_t *tp = tiles[k];
        const float(*table)[16] = tables[shared ? 0 : k];
        v16 a = v16_load(acc[k]);
        if (sb == 4) {
QUANT_UNROLL(1)
            for (int g = 0; g < bits; g++) {
QUANT_UNROLL(8)
                for (int j = 0; j < 8; j++) {
                    const int s = 8 * g + j, sh = 4 * j;
                    a = v16_add(a, v16_lookup(QUANT_INDEX(tp), v16_load(table[s])));
                }
            }
        } else {
QUANT_UNROLL(1)
            for (int grp = 0; grp < 4; grp++) {
                const v16i w = QUANT_GROUP3(tp, grp);
QUANT_UNROLL(8)
                for (int j = 0; j < 8; j++) a = v16_add(a, v16_lookup(v16i_srli(w, 3 * j), v16_load(table[8 * grp + j])));
            }
        }
        v16_store(acc[k], a);
    }
#undef QUANT_INDEX
#undef QUANT_GROUP3
    return;
#endif
    for (int k = 0; k < nt; k++) {
        const uint32_t *t = tiles[k];
        const float(*table)[16] = tables[shared ? 0 : k];
QUANT_UNROLL(32)
        for (int s = 0; s < steps; s++) {
#pragma omp simd
            for (int l = 0; l < QUANT_TILE; l++)
                acc[k][l] += table[s][bits == 3 ? quant_tile_code(t, l, s, 3) : quant_tile_code(t, l, s, 4)];
        }
    }
}

// Token groups (values) at widths 1, 2 and 4: g = 4/bits consecutive tokens form a group whose
// codes join into one 4-bit value per number, e(d) = Σ_t code_t(d) << (bits·t) over the group's
// tokens t; a group's chunk of 32 numbers is 16 bytes, byte i = e(2i) | e(2i+1) << 4 (at bits 4,
// one token, exactly quant_pack's order). A table per group, table[e] = what the group's tokens add
// to a number whose value is e (e.g. Σ_t w_t · level(code_t)), then serves all its numbers.
// A byte's two numbers are joined before the one OR into it: byte after byte, no byte written twice.
static inline void quant_group_put(uint8_t *chunk, int t, const uint8_t *codes, int n, int bits) {
    const int sh = bits * t;
#pragma omp simd
    for (int i = 0; i < n / 2; i++) chunk[i] |= (uint8_t)((codes[2 * i] | codes[2 * i + 1] << 4) << sh);
    if (n % 2) chunk[n / 2] |= (uint8_t)(codes[n - 1] << sh);
}

static inline uint32_t quant_group_code(const uint8_t *chunk, int t, int d, int bits) {
    return (chunk[d / 2] >> (4 * (d % 2) + bits * t)) & ((1u << bits) - 1u);
}

// For groups u0 .. u0+ng-1 of one chunk (group k's 16 bytes at chunk + k·group_bytes, its table
// table[k]): acc[u % 2][h][i] += table[e] for the value e of number 2i + h, group after group. The
// even and odd groups' sums stay apart (two chains); the caller adds them: out[2i+h] = acc[0][h][i]
// + acc[1][h][i]. (The AVX-512 kernels keep the tables in registers and call quant_group_lookup16
// per group; the sums are the same.)
static QUANT_ALWAYS_INLINE void quant_group_lookup(const uint8_t *chunk, size_t group_bytes, int ng, int u0,
                                                   const float (*table)[16], float (*acc)[2][16]) {
    for (int k = 0; k < ng; k++) {
        const uint8_t *c = chunk + (size_t)k * group_bytes;
        float(*a)[16] = acc[(u0 + k) % 2];
#pragma omp simd
        for (int i = 0; i < 16; i++) {
            a[0][i] += table[k][c[i] & 15];
            a[1][i] += table[k][c[i] >> 4];
        }
    }
}

// out[2i + h] = acc[0][h][i] + acc[1][h][i]: a chunk's number from its even and odd groups' sums.
static inline void quant_group_sum(const float (*acc)[2][16], float *out) {
    for (int i = 0; i < 16; i++) {
        out[2 * i] = acc[0][0][i] + acc[1][0][i];
        out[2 * i + 1] = acc[0][1][i] + acc[1][1][i];
    }
}

#ifdef VEC16
// One group's chunk looked up in table t: lo (numbers 2i) and hi (numbers 2i+1) accumulate.
static QUANT_ALWAYS_INLINE void quant_group_lookup16(const uint8_t *chunk, v16 t, v16 *lo, v16 *hi) {
    const v16i i = v16i_load_bytes(chunk);
    *lo = v16_add(*lo, v16_lookup(i, t));
    *hi = v16_add(*hi, v16_lookup(v16i_srli(i, 4), t));
}
#endif

#endif
