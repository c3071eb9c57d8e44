// Sixteen float lanes, as one AVX-512 register or two AVX2 registers: the few operations the float
// codec's kernels (codec_float.c) are written in, so that one kernel text serves both x86 sets. Lane
// i is the same number in both, and every operation is one IEEE add, multiply or exact bit move per
// lane, so both builds compute the same bits (as the portable C does, one lane at a time).
// Defined only in the AVX2 and AVX-512 builds (VEC16). Included by quant.h, whose QUANT_AVX512,
// QUANT_F16C and QUANT_ALWAYS_INLINE it uses.
#ifndef MICRO_VEC16_H
#define MICRO_VEC16_H

#if defined(QUANT_AVX512)
#define VEC16 1
typedef __m512 v16;
typedef __m512i v16i; // sixteen 32-bit words

static QUANT_ALWAYS_INLINE v16 v16_zero(void) { return _mm512_setzero_ps(); }
static QUANT_ALWAYS_INLINE v16 v16_set1(float x) { return _mm512_set1_ps(x); }
static QUANT_ALWAYS_INLINE v16 v16_load(const void *p) { return _mm512_loadu_ps(p); }
static QUANT_ALWAYS_INLINE void v16_store(float *p, v16 a) { _mm512_storeu_ps(p, a); }
static QUANT_ALWAYS_INLINE v16 v16_add(v16 a, v16 b) { return _mm512_add_ps(a, b); }
static QUANT_ALWAYS_INLINE v16 v16_mul(v16 a, v16 b) { return _mm512_mul_ps(a, b); }
static QUANT_ALWAYS_INLINE v16i v16i_load(const void *p) { return _mm512_loadu_si512(p); }
// (w << s) as floats' bits, (w >> s arithmetic) & mask, w & mask: the 16-bit formats' decoders.
static QUANT_ALWAYS_INLINE v16 v16i_shl_bits(v16i w, int s) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, (unsigned)s)); }
static QUANT_ALWAYS_INLINE v16 v16i_sra_and_bits(v16i w, int s, uint32_t mask) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_srai_epi32(w, (unsigned)s), _mm512_set1_epi32((int)mask)));
}
static QUANT_ALWAYS_INLINE v16 v16i_shl_sra_and_bits(v16i w, int l, int s, uint32_t mask) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_srai_epi32(_mm512_slli_epi32(w, (unsigned)l), (unsigned)s), _mm512_set1_epi32((int)mask)));
}
static QUANT_ALWAYS_INLINE v16 v16i_and_bits(v16i w, uint32_t mask) {
    return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)mask)));
}
// Sixteen signed bytes at p, each shifted left by s into a 32-bit word, masked: E5M2's decoder.
static QUANT_ALWAYS_INLINE v16 v16_bytes_shl_and_bits(const uint8_t *p, int s, uint32_t mask) {
    const __m512i w = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(w, (unsigned)s), _mm512_set1_epi32((int)mask)));
}
// Sixteen E4M3 codes at p as x · 2^-8: ((c + (c & 0x80)) << 7) is that number's fp16 (codec_float.c).
static QUANT_ALWAYS_INLINE v16 v16_e4m3_scaled(const uint8_t *p) {
    const __m256i h = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_add_epi16(h, _mm256_and_si256(h, _mm256_set1_epi16(0x80))), 7));
}
// The table lookups of the code kernels (quant.h): lane i gets t[idx_i & 15].
static QUANT_ALWAYS_INLINE v16 v16_lookup(v16i idx, v16 t) { return _mm512_permutexvar_ps(idx, t); }
// Sixteen fp16 numbers at p (vcvtph2ps: exact for every number; a signalling NaN comes out quiet).
static QUANT_ALWAYS_INLINE v16 v16_from_fp16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
static QUANT_ALWAYS_INLINE v16i v16i_srli(v16i w, int s) { return _mm512_srli_epi32(w, (unsigned)s); }
static QUANT_ALWAYS_INLINE v16i v16i_slli(v16i w, int s) { return _mm512_slli_epi32(w, (unsigned)s); }
static QUANT_ALWAYS_INLINE v16i v16i_or(v16i a, v16i b) { return _mm512_or_si512(a, b); }
// Sixteen bytes at p, each zero-extended into its lane.
static QUANT_ALWAYS_INLINE v16i v16i_load_bytes(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
}
#elif defined(QUANT_F16C)
#define VEC16 1
typedef struct {
    __m256 lo, hi; // lanes 0..7, 8..15
} v16;
typedef struct {
    __m256i lo, hi;
} v16i;

static QUANT_ALWAYS_INLINE v16 v16_zero(void) { return (v16){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static QUANT_ALWAYS_INLINE v16 v16_set1(float x) { return (v16){_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
static QUANT_ALWAYS_INLINE v16 v16_load(const void *p) {
    return (v16){_mm256_loadu_ps((const float *)p), _mm256_loadu_ps((const float *)p + 8)};
}
static QUANT_ALWAYS_INLINE void v16_store(float *p, v16 a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
}
static QUANT_ALWAYS_INLINE v16 v16_add(v16 a, v16 b) { return (v16){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
static QUANT_ALWAYS_INLINE v16 v16_mul(v16 a, v16 b) { return (v16){_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
static QUANT_ALWAYS_INLINE v16i v16i_load(const void *p) {
    return (v16i){_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)p + 1)};
}
static QUANT_ALWAYS_INLINE v16 v16i_shl_bits(v16i w, int s) {
    return (v16){_mm256_castsi256_ps(_mm256_slli_epi32(w.lo, s)), _mm256_castsi256_ps(_mm256_slli_epi32(w.hi, s))};
}
static QUANT_ALWAYS_INLINE __m256 v8i_sra_and(__m256i w, int s, uint32_t mask) {
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(w, s), _mm256_set1_epi32((int)mask)));
}
static QUANT_ALWAYS_INLINE v16 v16i_sra_and_bits(v16i w, int s, uint32_t mask) {
    return (v16){v8i_sra_and(w.lo, s, mask), v8i_sra_and(w.hi, s, mask)};
}
static QUANT_ALWAYS_INLINE v16 v16i_shl_sra_and_bits(v16i w, int l, int s, uint32_t mask) {
    return (v16){v8i_sra_and(_mm256_slli_epi32(w.lo, l), s, mask), v8i_sra_and(_mm256_slli_epi32(w.hi, l), s, mask)};
}
static QUANT_ALWAYS_INLINE v16 v16i_and_bits(v16i w, uint32_t mask) {
    const __m256i m = _mm256_set1_epi32((int)mask);
    return (v16){_mm256_castsi256_ps(_mm256_and_si256(w.lo, m)), _mm256_castsi256_ps(_mm256_and_si256(w.hi, m))};
}
static QUANT_ALWAYS_INLINE v16 v16_bytes_shl_and_bits(const uint8_t *p, int s, uint32_t mask) {
    const __m128i c = _mm_loadu_si128((const __m128i *)(const void *)p);
    const __m256i m = _mm256_set1_epi32((int)mask);
    const __m256i lo = _mm256_cvtepi8_epi32(c), hi = _mm256_cvtepi8_epi32(_mm_srli_si128(c, 8));
    return (v16){_mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(lo, s), m)),
                 _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(hi, s), m))};
}
static QUANT_ALWAYS_INLINE v16 v16_e4m3_scaled(const uint8_t *p) {
    const __m256i h = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    const __m256i f = _mm256_slli_epi16(_mm256_add_epi16(h, _mm256_and_si256(h, _mm256_set1_epi16(0x80))), 7);
    return (v16){_mm256_cvtph_ps(_mm256_castsi256_si128(f)), _mm256_cvtph_ps(_mm256_extracti128_si256(f, 1))};
}
// Eight lanes of a 16-entry lookup: entries 0..7 and 8..15 each permuted by the index's low three
// bits, the fourth bit (moved up to the sign) choosing between them.
static QUANT_ALWAYS_INLINE __m256 v8_lookup(__m256i idx, v16 t) {
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t.lo, idx), _mm256_permutevar8x32_ps(t.hi, idx),
                            _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}
static QUANT_ALWAYS_INLINE v16 v16_lookup(v16i idx, v16 t) { return (v16){v8_lookup(idx.lo, t), v8_lookup(idx.hi, t)}; }
static QUANT_ALWAYS_INLINE v16 v16_from_fp16(const uint16_t *p) {
    return (v16){_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)),
                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 8)))};
}
static QUANT_ALWAYS_INLINE v16i v16i_srli(v16i w, int s) { return (v16i){_mm256_srli_epi32(w.lo, s), _mm256_srli_epi32(w.hi, s)}; }
static QUANT_ALWAYS_INLINE v16i v16i_slli(v16i w, int s) { return (v16i){_mm256_slli_epi32(w.lo, s), _mm256_slli_epi32(w.hi, s)}; }
static QUANT_ALWAYS_INLINE v16i v16i_or(v16i a, v16i b) { return (v16i){_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)}; }
static QUANT_ALWAYS_INLINE v16i v16i_load_bytes(const uint8_t *p) {
    const __m128i c = _mm_loadu_si128((const __m128i *)(const void *)p);
    return (v16i){_mm256_cvtepu8_epi32(c), _mm256_cvtepu8_epi32(_mm_srli_si128(c, 8))};
}
#endif

// An empty asm statement that says it changes four vectors: it keeps gcc from moving loads or
// lookups across it (quant_tile_lookup).
#if defined(QUANT_AVX512)
#define V16_KEEP4(a, b, c, d) __asm__("" : "+v"(a), "+v"(b), "+v"(c), "+v"(d))
#elif defined(VEC16)
#define V16_KEEP4(a, b, c, d) __asm__("" : "+x"(a.lo), "+x"(a.hi), "+x"(b.lo), "+x"(b.hi), "+x"(c.lo), "+x"(c.hi), "+x"(d.lo), "+x"(d.hi))
#endif

#ifdef VEC16
// Four vectors to a[0..32) and b[0..32): the kernels' four sums (mix: even tokens' numbers 0..15 and
// 16..31 to `a`, odd tokens' to `b`; scores: tiles 0, 1 to `a` and 2, 3 to `b`).
static QUANT_ALWAYS_INLINE void v16_store4(float *a, float *b, v16 e0, v16 e1, v16 o0, v16 o1) {
    v16_store(a, e0);
    v16_store(a + 16, e1);
    v16_store(b, o0);
    v16_store(b + 16, o1);
}
#endif

#endif
