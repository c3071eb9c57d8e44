// Normalise-then-round to a level table: KVQuant's non-uniform quantiser and QuaRot's uniform one.
//
// Each number is normalised as x_n = (x − z) / r, with z = (max + min) / 2 and r = (max − min) / 2 in
// fp16, and stored as the index of the nearest of 2^B levels in [−1, 1]; it reads back as
// level · r + z.
//   kvquant:bits=B  (Hooper et al. 2024) keys per channel with static ranges from calibration
//                   (models/micro.kvq), values per head per token with online ranges; levels from
//                   Fisher-weighted k-means over calibration activations, per layer and stream
//                   (`qnorm`: the Q-Norm variant). Dense-and-sparse `outliers=P` (default 1, a
//                   percent the calibration holds): keys beyond their channel's calibrated
//                   thresholds are kept exact (fp16 + index), at most round(n·P/100) a token (n the
//                   token's numbers; the most extreme first, the rest clamped); values: the
//                   round(n·P/200) smallest and as many largest of the token. The family's streams
//                   take keys before RoPE (`prerope`) and keep the first token exact (`sink=1`) by
//                   default (kvtransform.h).
//   quarot:bits=B   (Ashkboos et al. 2024, KV setting) asymmetric per head per token with 2^B
//                   evenly spaced levels, the range clipped to 0.95 of min and max; the family's
//                   streams rotate by the Hadamard (`rot=hadamard`) by default.
// Keys per channel are read back number by number (codec_core's fallback; attention rotates them by
// RoPE as it reads); per-token streams have plain C kernels, and at head_dim 32 their AVX-512 forms
// (row_kernels.h), which the plate's evaluations of these families spend most of their time in.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq_view.h"
#include "quant.h"
#include "value_outliers.h"
#include "codec_core.h"
#include "codecs.h"
#include "row_kernels.h"

typedef struct {
    int n_heads, head_dim, n, capacity, length;
    int bits, per_channel; // per_channel: keys of kvquant (static ranges); else per head per token
    float clip;            // quarot's range clip (1 for kvquant)
    int n_levels;
    float levels[16];      // sorted
    float *z, *r;          // per_channel: [n] from calibration (fp16-rounded)
    float *lo, *hi;        // per_channel: [n] outlier thresholds (NULL: no outliers)
    int slots;             // outlier slots a token: exact entries kept (unused ones hold index n)
    uint32_t percent;      // outliers, hundredths of a percent (values: the calibration's rule)
    int index_bytes;
    size_t row_bytes;      // packed codes of one head at one token
    uint8_t *codes;        // [token][head][row_bytes]
    uint16_t *zr;          // per head per token: [token][head][2] fp16 z, r
    uint16_t *out_val;     // [token][slots] fp16
    uint8_t *out_idx;      // [token][slots][index_bytes]
    uint8_t *picked;       // [n] scratch of append
    float scratch[MICRO_MAX_WIDTH];   // scratch of append (one head)
} NuqState;

static void nuq_destroy(void *state) {
    NuqState *s = state;
    if (!s) return;
    free(s->z), free(s->r), free(s->lo), free(s->hi), free(s->codes), free(s->zr), free(s->out_val), free(s->out_idx);
    free(s->picked);
    free(s);
}

// codes[d] = the nearest level to xn[d], the first of equals (a NaN: level 0), for n numbers: each
// number's levels in turn, as a scan one number at a time would take them, with the loop over
// numbers inside so that it runs a vector of numbers a step; 16 numbers at a time, whose best
// distances and codes stay in registers across the levels.
static void nearest_levels(const NuqState *s, const float *xn, uint8_t *codes, int n) {
    for (int d0 = 0; d0 < n; d0 += 16) {
        const int m = n - d0 < 16 ? n - d0 : 16;
        float best_d[16], x[16];
        int32_t code[16];
        for (int k = 0; k < 16; k++) x[k] = k < m ? xn[d0 + k] : 0.0f;
#pragma omp simd
        for (int k = 0; k < 16; k++) best_d[k] = fabsf(x[k] - s->levels[0]), code[k] = 0;
        for (int i = 1; i < s->n_levels; i++) {
            const float level = s->levels[i];
#pragma omp simd
            for (int k = 0; k < 16; k++) { // selects by masks: gcc's masked stores jumped over empty masks
                const float dist = fabsf(x[k] - level);
                const uint32_t closer = 0u - (uint32_t)(dist < best_d[k]);
                best_d[k] = quant_from_bits((quant_to_bits(dist) & closer) | (quant_to_bits(best_d[k]) & ~closer));
                code[k] = (int32_t)(((uint32_t)i & closer) | ((uint32_t)code[k] & ~closer));
            }
        }
        for (int k = 0; k < m; k++) codes[d0 + k] = (uint8_t)code[k];
    }
}

static float fp16_round(float x) { return quant_fp16_to_fp32(quant_fp32_to_fp16(x)); }

static void put_index(NuqState *s, int t, int k, int i) {
    uint8_t *p = s->out_idx + ((size_t)t * s->slots + k) * s->index_bytes;
    p[0] = (uint8_t)i;
    if (s->index_bytes == 2) p[1] = (uint8_t)(i >> 8);
}

static int get_index(const NuqState *s, int t, int k) {
    const uint8_t *p = s->out_idx + ((size_t)t * s->slots + k) * s->index_bytes;
    return s->index_bytes == 1 ? p[0] : p[0] | p[1] << 8;
}

// Keys (kvquant): entries beyond their channel's thresholds, most extreme first, into the slots.
static void pick_key_outliers(NuqState *s, int t, const float *x) {
    memset(s->picked, 0, (size_t)s->n);
    for (int k = 0; k < s->slots; k++) {
        int best = -1;
        float best_far = 0.0f;
        for (int c = 0; c < s->n; c++) {
            if (s->picked[c] || (x[c] >= s->lo[c] && x[c] <= s->hi[c])) continue;
            const float far = fabsf(x[c] - s->z[c]) / s->r[c];
            if (best < 0 || far > best_far) best = c, best_far = far;
        }
        put_index(s, t, k, best < 0 ? s->n : best);
        s->out_val[(size_t)t * s->slots + k] = best < 0 ? 0 : quant_fp32_to_fp16(x[best]);
        if (best >= 0) s->picked[best] = 1;
    }
}

// Values (kvquant): per head, the ceil(head_dim·P/100) numbers farthest from the head's median, the
// rule the calibration's codebooks were made with (calib_value_outliers).
static void pick_value_outliers(NuqState *s, int t, const float *x) {
    const int hd = s->head_dim, per_head = s->slots / s->n_heads;
    for (int h = 0; h < s->n_heads; h++) {
        uint8_t *pk = s->picked + h * hd;
        calib_value_outliers(x + h * hd, hd, s->percent, pk, s->scratch);
        int k = 0;
        for (int d = 0; d < hd && k < per_head; d++)
            if (pk[d]) {
                put_index(s, t, h * per_head + k, h * hd + d);
                s->out_val[(size_t)t * s->slots + h * per_head + k++] = quant_fp32_to_fp16(x[h * hd + d]);
            }
    }
}

static void nuq_append(void *state, const float *x) {
    NuqState *s = state;
    const int t = s->length, hd = s->head_dim;
    if (s->slots) (s->per_channel ? pick_key_outliers : pick_value_outliers)(s, t, x);
    uint8_t codes[MICRO_MAX_WIDTH];
    float xn[MICRO_MAX_WIDTH];
    for (int h = 0; h < s->n_heads; h++) {
        const float *v = x + h * hd;
        const uint8_t *pk = s->slots ? s->picked + h * hd : NULL;
        float z = 0.0f, r = 1.0f;
        if (!s->per_channel) { // the head's range without its outliers, clipped, in fp16
            // fminf and fmaxf as comparisons (libm calls otherwise): lo and hi are never NaN, so a
            // NaN v[d] leaves them as fminf would, and a zero's sign cannot reach z or r.
            float lo = INFINITY, hi = -INFINITY;
            for (int d = 0; d < hd; d++)
                if (!pk || !pk[d]) lo = v[d] < lo ? v[d] : lo, hi = v[d] > hi ? v[d] : hi;
            if (lo > hi) lo = hi = 0.0f;
            z = fp16_round(s->clip * 0.5f * (hi + lo));
            r = fp16_round(s->clip * 0.5f * (hi - lo));
            uint16_t *zr = s->zr + ((size_t)t * s->n_heads + h) * 2;
            zr[0] = quant_fp32_to_fp16(z), zr[1] = quant_fp32_to_fp16(r);
        }
        // x normalised to the range and clipped to [-1, 1]; a NaN stays NaN (nearest_levels then picks
        // level 0). Per channel and per token in loops of their own, so that each runs a vector at a time.
        if (s->per_channel) {
            const float *zc = s->z + h * hd, *rc = s->r + h * hd;
            for (int d = 0; d < hd; d++) xn[d] = rc[d] > 0.0f ? (v[d] - zc[d]) / rc[d] : 0.0f;
        } else
            for (int d = 0; d < hd; d++) xn[d] = r > 0.0f ? (v[d] - z) / r : 0.0f;
        for (int d = 0; d < hd; d++) xn[d] = xn[d] < -1.0f ? -1.0f : xn[d] > 1.0f ? 1.0f : xn[d];
        nearest_levels(s, xn, codes, hd);
        quant_pack(s->codes + ((size_t)t * s->n_heads + h) * s->row_bytes, codes, (size_t)hd, s->bits);
    }
    s->length++;
}

// One head's codes at token t, and (per head per token) its midpoint z and range r; per channel
// z = 0, r = 1 (the channels' own are in s->z, s->r).
static void nuq_token(const NuqState *s, int head, int t, uint8_t *codes, float *z, float *r) {
    quant_unpack(s->codes + ((size_t)t * s->n_heads + head) * s->row_bytes, codes, (size_t)s->head_dim, s->bits);
    *z = 0.0f, *r = 1.0f;
    if (!s->per_channel) {
        const uint16_t *zr = s->zr + ((size_t)t * s->n_heads + head) * 2;
        *z = quant_fp16_to_fp32(zr[0]), *r = quant_fp16_to_fp32(zr[1]);
    }
}

static void nuq_read(const void *state, int head, int t, float *out) {
    const NuqState *s = state;
    const int hd = s->head_dim;
    uint8_t codes[MICRO_MAX_WIDTH];
    float z, r;
    nuq_token(s, head, t, codes, &z, &r);
    for (int d = 0; d < hd; d++) {
        const int c = head * hd + d;
        out[d] = s->per_channel ? s->levels[codes[d]] * s->r[c] + s->z[c] : s->levels[codes[d]] * r + z;
    }
    for (int k = 0; k < s->slots; k++) {
        const int i = get_index(s, t, k) - head * hd;
        if (i >= 0 && i < hd) out[i] = quant_fp16_to_fp32(s->out_val[(size_t)t * s->slots + k]);
    }
}

// Per head per token (values, quarot): x̂_d = level(c_d)·r + z, so q·x̂ = r·Σ_d q_d·level(c_d) + z·Σ_d q_d
// with the products q_d·level(c) tabled once per query; Σ_j p_j·x̂_j[d] = Σ_j (p_j r_j)·level(c_jd) +
// Σ_j p_j z_j. Keys per channel (kvquant) are read back whole: attention rotates them (prerope).
static const uint8_t *nuq_row(const CodecBlocks *b, int head, int j, const NuqState **s) {
    int t;
    *s = codec_block(b, j, &t);
    return (*s)->codes + ((size_t)t * (*s)->n_heads + head) * (*s)->row_bytes;
}

static const uint16_t *nuq_zr(const NuqState *s, const uint8_t *row) {
    return s->zr + (size_t)(row - s->codes) / s->row_bytes * 2;
}

static void nuq_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    const NuqState *s0 = b->states[0];
    const int hd = b->head_dim;
    if (s0->per_channel || s0->slots) {
        codec_scores_by_read(b, nuq_read, hd, head, q, out, n);
        return;
    }
    float qsum = 0.0f;
    for (int d = 0; d < hd; d++) qsum += q[d];
#ifdef ROW_KERNELS
    if (hd == 32) { // sixteen tokens at a time, each q_d · level summed in order of d
        RowLevels rl;
        row_levels_init(&rl, s0->levels, s0->bits);
        const __m512 q0 = _mm512_loadu_ps(q), q1 = _mm512_loadu_ps(q + 16);
        for (int j0 = 0; j0 < n; j0 += 16) {
            const int m = n - j0 < 16 ? n - j0 : 16;
            float v[16][32] __attribute__((aligned(64))), acc[16] __attribute__((aligned(64)));
            const uint8_t *rows[16];
            const NuqState *st[16];
            for (int t = 0; t < 16; t++) {
                if (t < m) rows[t] = nuq_row(b, head, j0 + t, &st[t]);
                _mm512_store_ps(v[t], t < m ? _mm512_mul_ps(q0, row_levels16(&rl, rows[t], 0)) : _mm512_setzero_ps());
                _mm512_store_ps(v[t] + 16, t < m ? _mm512_mul_ps(q1, row_levels16(&rl, rows[t], 1)) : _mm512_setzero_ps());
            }
            _mm512_store_ps(acc, row_sums16((const float(*)[32])v));
            for (int t = 0; t < m; t++) {
                const uint16_t *zr = nuq_zr(st[t], rows[t]);
                out[j0 + t] = quant_fp16_to_fp32(zr[1]) * acc[t] + quant_fp16_to_fp32(zr[0]) * qsum;
            }
        }
        return;
    }
#endif
    float table[1024 * 16];
    uint8_t codes[MICRO_MAX_WIDTH];
    for (int d = 0; d < hd; d++)
        for (int c = 0; c < s0->n_levels; c++) table[d * s0->n_levels + c] = q[d] * s0->levels[c];
    for (int j = 0; j < n; j++) {
        const NuqState *s;
        const uint8_t *row = nuq_row(b, head, j, &s);
        quant_unpack(row, codes, (size_t)hd, s->bits);
        float acc = 0.0f;
        for (int d = 0; d < hd; d++) acc += table[d * s->n_levels + codes[d]];
        const uint16_t *zr = nuq_zr(s, row);
        out[j] = quant_fp16_to_fp32(zr[1]) * acc + quant_fp16_to_fp32(zr[0]) * qsum;
    }
}

// An exact entry's correction to a head's sum: what its code gave at number i taken back.
static inline float nuq_exact(const NuqState *s, int t, int k, float level, float r, float z) {
    return quant_fp16_to_fp32(s->out_val[(size_t)t * s->slots + k]) - (level * r + z);
}

static void nuq_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    const NuqState *s0 = b->states[0];
    const int hd = b->head_dim;
    if (s0->per_channel) {
        codec_mix_by_read(b, nuq_read, hd, head, p, out, n);
        return;
    }
    // Exact entries are kept per head (values: slots [head·per, (head+1)·per) hold this head's).
    const int per = s0->slots / s0->n_heads, k0 = head * per;
    float acc[MICRO_MAX_WIDTH] __attribute__((aligned(64))) = {0}, zsum = 0.0f;
#ifdef ROW_KERNELS
    if (hd == 32) { // the 32 sums in two vectors, token after token as below
        RowLevels rl;
        row_levels_init(&rl, s0->levels, s0->bits);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        for (int j = 0; j < n; j++) {
            int t;
            const NuqState *s = codec_block(b, j, &t);
            const uint8_t *row = s->codes + ((size_t)t * s->n_heads + head) * s->row_bytes;
            const uint16_t *zr = s->zr + ((size_t)t * s->n_heads + head) * 2;
            const float z = quant_fp16_to_fp32(zr[0]), r = quant_fp16_to_fp32(zr[1]);
            const __m512 w = _mm512_set1_ps(p[j] * r), l0 = row_levels16(&rl, row, 0), l1 = row_levels16(&rl, row, 1);
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(w, l0));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(w, l1));
            zsum += p[j] * z;
            for (int k = k0; k < k0 + per; k++) { // acc[i] += ..., as one lane's add
                const int i = get_index(s, t, k) - head * hd;
                if (i < 0 || i >= hd) continue;
                float lv[32] __attribute__((aligned(64)));
                _mm512_store_ps(lv, l0), _mm512_store_ps(lv + 16, l1);
                const __m512 add = _mm512_set1_ps(p[j] * nuq_exact(s, t, k, lv[i], r, z));
                if (i < 16)
                    a0 = _mm512_mask_add_ps(a0, (__mmask16)(1u << i), a0, add);
                else
                    a1 = _mm512_mask_add_ps(a1, (__mmask16)(1u << (i - 16)), a1, add);
            }
        }
        _mm512_store_ps(acc, a0), _mm512_store_ps(acc + 16, a1);
        for (int d = 0; d < hd; d++) out[d] = acc[d] + zsum;
        return;
    }
#endif
    uint8_t codes[MICRO_MAX_WIDTH];
    for (int j = 0; j < n; j++) {
        int t;
        const NuqState *s = codec_block(b, j, &t);
        quant_unpack(s->codes + ((size_t)t * s->n_heads + head) * s->row_bytes, codes, (size_t)hd, s->bits);
        const uint16_t *zr = s->zr + ((size_t)t * s->n_heads + head) * 2;
        const float z = quant_fp16_to_fp32(zr[0]), r = quant_fp16_to_fp32(zr[1]), w = p[j] * r;
        for (int d = 0; d < hd; d++) acc[d] += w * s->levels[codes[d]];
        zsum += p[j] * z;
        for (int k = k0; k < k0 + per; k++) { // exact entries: what the codes gave, taken back
            const int i = get_index(s, t, k) - head * hd;
            if (i >= 0 && i < hd) acc[i] += p[j] * nuq_exact(s, t, k, s->levels[codes[i]], r, z);
        }
    }
    for (int d = 0; d < hd; d++) out[d] = acc[d] + zsum;
}

static size_t nuq_bytes(const void *state) {
    const NuqState *s = state;
    const size_t per_token = (size_t)s->n_heads * s->row_bytes + (s->per_channel ? 0 : (size_t)s->n_heads * 4) +
                             (size_t)s->slots * (2 + (size_t)s->index_bytes);
    return (size_t)s->length * per_token;
}

// nuq_scores and nuq_mix: what reads back (latent attention's fast evaluator mirrors it).
static int nuq_by_read(const void *state) {
    const NuqState *s = state;
    return (s->per_channel || s->slots ? CODEC_SCORES_BY_READ : 0) | (s->per_channel ? CODEC_MIX_BY_READ : 0);
}

// The fast evaluator's mirror (MirrorOps) for per-token ranges without exact entries: nuq_scores
// gives r · Σ_d q_d · level + z · Σ_d q_d, each sum in order of d from 0, and nuq_mix gives
// Σ_j (p_j · r_j) · level + Σ_j p_j · z_j, each in order of j from 0: the forms with a factor (r)
// and an offset (z). A value's exact entries are added into the sum right after its token's levels,
// p_j · (value − (level · r + z)) at each: the correction row (its numbers nuq_exact's). Keys'
// exact entries (kvquant's, per channel) are read back.
static void nuq_mirror_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    const NuqState *s = state;
    uint8_t codes[MICRO_MAX_WIDTH];
    nuq_token(s, head, token, codes, offset, factor);
    for (int d = 0; d < s->head_dim; d++) x[d] = s->levels[codes[d]];
}

static void nuq_mirror_correction(const void *state, int head, int token, float *xc) {
    const NuqState *s = state;
    const int hd = s->head_dim, per = s->slots / s->n_heads;
    uint8_t codes[MICRO_MAX_WIDTH];
    float z, r;
    nuq_token(s, head, token, codes, &z, &r);
    memset(xc, 0, sizeof(float) * (size_t)hd);
    for (int k = head * per; k < (head + 1) * per; k++) {
        const int i = get_index(s, token, k) - head * hd;
        if (i >= 0 && i < hd) xc[i] = nuq_exact(s, token, k, s->levels[codes[i]], r, z);
    }
}

static const MirrorOps nuq_mirror_ops = {.read = nuq_mirror_read, .has_factor = 1, .has_offset = 1},
                       nuq_corrected_ops = {.read = nuq_mirror_read, .has_factor = 1, .has_offset = 1,
                                            .corrections = 1, .read_correction = nuq_mirror_correction};

static const MirrorOps *nuq_key_mirror(const void *state) {
    const NuqState *s = state;
    return s->per_channel || s->slots ? NULL : &nuq_mirror_ops;
}

static const MirrorOps *nuq_value_mirror(const void *state) {
    const NuqState *s = state;
    return s->per_channel ? NULL : s->slots ? &nuq_corrected_ops : &nuq_mirror_ops;
}

static const CodecOps nuq_ops = {.append = nuq_append, .scores = nuq_scores, .mix = nuq_mix, .read = nuq_read,
                                 .key_mirror = nuq_key_mirror, .value_mirror = nuq_value_mirror, .by_read = nuq_by_read,
                                 .bytes = nuq_bytes, .destroy = nuq_destroy};

// The parts both families share once their levels and ranges are known.
static int nuq_alloc(NuqState *s, int n_heads, int head_dim, int capacity, char *err, size_t errlen) {
    s->n_heads = n_heads, s->head_dim = head_dim, s->n = n_heads * head_dim, s->capacity = capacity;
    s->row_bytes = quant_packed_bytes((size_t)head_dim, s->bits);
    s->index_bytes = s->n + 1 <= 256 ? 1 : 2; // index n marks an unused slot
    s->codes = calloc((size_t)capacity * n_heads, s->row_bytes);
    if (!s->per_channel) s->zr = calloc((size_t)capacity * n_heads * 2, sizeof(uint16_t));
    if (s->slots) {
        s->out_val = calloc((size_t)capacity * s->slots, sizeof(uint16_t));
        s->out_idx = calloc((size_t)capacity * s->slots, (size_t)s->index_bytes);
        s->picked = calloc((size_t)s->n, 1);
    }
    if (!s->codes || (!s->per_channel && !s->zr) || (s->slots && (!s->out_val || !s->out_idx || !s->picked))) {
        snprintf(err, errlen, "out of memory allocating a cache stream");
        return -1;
    }
    return 0;
}

static void *kvquant_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                            size_t normalised_len, char *err, size_t errlen) {
    const char *pct = spec_string(spec, "outliers");
    const int is_key = !spec_is_value(spec), qnorm = spec_flag(spec, "qnorm");
    int bits, layer;
    if (spec_int(spec, "bits", 4, 1, 4, &bits, err, errlen) || spec_int(spec, "layer", -1, 0, 1 << 20, &layer, err, errlen) ||
        codec_check_shape("kvquant", n_heads, head_dim, capacity, 1, err, errlen))
        return NULL;
    char *end = NULL;
    const double outliers = !pct ? 1.0 : *pct ? strtod(pct, &end) : NAN;
    if (pct && (!end || *end || !(outliers >= 0.0 && outliers <= 20.0))) {
        snprintf(err, errlen, "kvquant: outliers=%s: expected a percent the calibration holds (e.g. 0 or 1)", pct);
        return NULL;
    }
    snprintf(normalised, normalised_len, "kvquant:bits=%d,outliers=%g%s", bits, outliers, qnorm ? ",qnorm" : "");
    NuqState *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory allocating a cache stream");
        return NULL;
    }
    s->bits = bits, s->per_channel = is_key, s->clip = 1.0f, s->n_levels = 1 << bits;
    s->percent = (uint32_t)lround(outliers * 100.0);
    const int n = n_heads * head_dim;
    // A stream not placed in a layer (a spec checked before a model is loaded) takes layer 0's
    // calibration: its shape and options are what can be checked then.
    KvqView view;
    if (kvq_view(layer < 0 ? 0 : layer, is_key, bits, outliers, qnorm, n_heads, head_dim, &view, err, errlen)) {
        nuq_destroy(s);
        return NULL;
    }
    memcpy(s->levels, view.levels, sizeof(float) * (size_t)s->n_levels);
    if (is_key) {
        s->slots = outliers > 0.0 ? (int)lround(n * outliers / 100.0) : 0;
        s->z = malloc(sizeof(float) * (size_t)n), s->r = malloc(sizeof(float) * (size_t)n);
        s->lo = malloc(sizeof(float) * (size_t)n), s->hi = malloc(sizeof(float) * (size_t)n);
        if (!s->z || !s->r || !s->lo || !s->hi) {
            nuq_destroy(s);
            snprintf(err, errlen, "out of memory allocating a cache stream");
            return NULL;
        }
        for (int c = 0; c < n; c++) {
            s->lo[c] = view.key_ranges[2 * c], s->hi[c] = view.key_ranges[2 * c + 1];
            s->z[c] = fp16_round(0.5f * (s->hi[c] + s->lo[c]));
            s->r[c] = fp16_round(0.5f * (s->hi[c] - s->lo[c]));
        }
    } else {
        s->slots = n_heads * (int)((head_dim * (long)s->percent + 9999) / 10000);
    }
    if (nuq_alloc(s, n_heads, head_dim, capacity, err, errlen)) {
        nuq_destroy(s);
        return NULL;
    }
    return s;
}

static void *quarot_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                           size_t normalised_len, char *err, size_t errlen) {
    int bits;
    if (spec_int(spec, "bits", 4, 1, 4, &bits, err, errlen) ||
        codec_check_shape("quarot", n_heads, head_dim, capacity, 1, err, errlen))
        return NULL;
    snprintf(normalised, normalised_len, "quarot:bits=%d", bits);
    NuqState *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory allocating a cache stream");
        return NULL;
    }
    s->bits = bits, s->clip = 0.95f, s->n_levels = 1 << bits;
    for (int i = 0; i < s->n_levels; i++) s->levels[i] = s->n_levels == 1 ? 0.0f : -1.0f + 2.0f * i / (s->n_levels - 1);
    if (nuq_alloc(s, n_heads, head_dim, capacity, err, errlen)) {
        nuq_destroy(s);
        return NULL;
    }
    return s;
}

const CodecFamily CODEC_FAMILY(codec_kvquant) = {
    .name = "kvquant", .ops = &nuq_ops, .create = kvquant_create, .owned_options = "outliers",
    .key_transforms = "prerope,sink=1", .value_transforms = "sink=1",
    .help = "kvquant:bits=B       KVQuant: keys pre-RoPE per channel (calibrated), values per token, B=1..4 "
            "non-uniform levels, outliers=P (1), sink=1, qnorm; needs models/micro.kvq (micro calibrate)",
    .calibrated_examples = (const char *const[]){"kvquant:bits=2,qnorm", "kvquant:bits=3,outliers=0",
                                                 "kvquant:bits=2,qnorm|kvquant:bits=3,outliers=0", NULL}};

const CodecFamily CODEC_FAMILY(codec_quarot) = {
    .name = "quarot", .ops = &nuq_ops, .create = quarot_create, .key_transforms = "rot=hadamard",
    .value_transforms = "rot=hadamard",
    .help = "quarot:bits=B        QuaRot's KV cache: Hadamard-rotated, asymmetric per head per token, clip 0.95, B=1..4",
    .examples = (const char *const[]){"quarot:bits=3", "quarot:bits=4|quarot:bits=2", NULL}};
