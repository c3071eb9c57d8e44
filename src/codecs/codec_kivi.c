// kivi: KIVI (Liu et al. 2024), asymmetric B-bit quantisation with a full-precision residual,
// streamed as KIVI's own decode loop does. Spec `kivi:bits=B,group=G,residual=R` (defaults 2, 32,
// 128; R a multiple of G). The same family serves both streams of a layer: it reads the option
// `role` (k or v, default k; kvcache_init injects it) and applies KIVI's key or value scheme.
//
// Both schemes: per group, s = (max − min) / (2^B − 1) and min stored as fp16 (saturating), and
// q = round_to_even((x − min) / s) clamped to 0..2^B−1 with the *stored* s and min; x̂ = q·s + min.
// A constant group (max = min) stores s = 0, codes 0 and decodes exactly to min.
//
// Keys, per channel over groups of G consecutive tokens: a new key enters the residual; once the
// residual holds R keys, end_step (after the step's attention) quantises them as R/G groups and the
// residual empties. So keys [0, n_quant) are quantised, n_quant a multiple of R, and the residual
// holds the newest 1..R keys while attention reads them.
// Values, per token over groups of G channels (G must divide head_dim; at head_dim 32 and G = 32,
// one group per head per token): a new value enters the window of full-precision values; after
// attention, once the window holds more than R, the oldest value is quantised as it leaves. So
// attention sees the newest R + 1 values exact, and R remain exact between steps.
// If end_step is never called, append does the same work just before it would overflow.
//
// The full-precision residual and window are stored as fp16, as KIVI keeps them (its model runs in
// fp16): 2 bytes per number, counted in bytes(); groups are quantised from those fp16 numbers.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codecs.h"

typedef struct {
    int n_heads, head_dim, capacity, length;
    int bits, group, residual, is_value;
    int n_quant;      // tokens [0, n_quant) are quantised, [n_quant, length) full precision
    size_t row_bytes; // packed codes of one head at one token
    uint8_t *codes;   // [head][token][row_bytes]
    // keys: [head][token group][2][head_dim] (scales then minimums, per channel)
    // values: [head][token][head_dim / group][2] (scale, minimum per channel group)
    uint16_t *meta;
    size_t meta_per_head; // uint16 entries per head
    uint16_t *full;       // fp16 [head][full_rows][head_dim]
    int full_rows;        // keys: residual slot = token − n_quant; values: ring slot = token % (R + 1)
} KiviState;

static void *kivi_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                         size_t normalised_len, char *err, size_t errlen) {
    const char *role = spec_string(spec, "role");
    if (role && strcmp(role, "k") != 0 && strcmp(role, "v") != 0) {
        snprintf(err, errlen, "kivi: role must be k or v (got '%s')", role);
        return NULL;
    }
    const int is_value = role && strcmp(role, "v") == 0;
    int bits, group, residual;
    if (spec_int(spec, "bits", 2, 1, 8, &bits, err, errlen) ||
        spec_int(spec, "group", 32, 1, 1 << 16, &group, err, errlen) ||
        spec_int(spec, "residual", 128, 1, 1 << 20, &residual, err, errlen))
        return NULL;
    if (residual % group) {
        snprintf(err, errlen, "kivi: residual=%d must be a multiple of group=%d", residual, group);
        return NULL;
    }
    if (n_heads < 1 || capacity < 1 || head_dim < 2 || head_dim % 2) {
        snprintf(err, errlen, "kivi: needs an even head_dim >= 2 and at least one head and token (got %d, %d, %d)",
                 head_dim, n_heads, capacity);
        return NULL;
    }
    if (is_value && head_dim % group) {
        snprintf(err, errlen, "kivi: values are grouped along head_dim, so group=%d must divide head_dim %d",
                 group, head_dim);
        return NULL;
    }
    KiviState *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->n_heads = n_heads;
    s->head_dim = head_dim;
    s->capacity = capacity;
    s->bits = bits;
    s->group = group;
    s->residual = residual;
    s->is_value = is_value;
    s->row_bytes = quant_packed_bytes((size_t)head_dim, bits);
    if (is_value) {
        s->meta_per_head = (size_t)capacity * (size_t)(head_dim / group) * 2;
        s->full_rows = residual + 1 < capacity ? residual + 1 : capacity;
    } else {
        s->meta_per_head = (size_t)(capacity / group + 1) * 2 * (size_t)head_dim;
        s->full_rows = residual < capacity ? residual : capacity;
    }
    s->codes = malloc((size_t)n_heads * (size_t)capacity * s->row_bytes);
    s->meta = malloc(sizeof(uint16_t) * (size_t)n_heads * s->meta_per_head);
    s->full = malloc(sizeof(uint16_t) * (size_t)n_heads * (size_t)s->full_rows * (size_t)head_dim);
    if (!s->codes || !s->meta || !s->full) goto oom;
    snprintf(normalised, normalised_len, "kivi:bits=%d,group=%d,residual=%d", bits, group, residual);
    return s;
oom:
    if (s) {
        free(s->codes);
        free(s->meta);
        free(s->full);
        free(s);
    }
    snprintf(err, errlen, "out of memory allocating a kivi cache stream");
    return NULL;
}

static inline uint8_t *kivi_row(const KiviState *s, int head, int token) {
    return s->codes + ((size_t)head * s->capacity + (size_t)token) * s->row_bytes;
}

static inline uint16_t *kivi_full(const KiviState *s, int head, int token) {
    const int slot = s->is_value ? token % (s->residual + 1) : token - s->n_quant;
    return s->full + ((size_t)head * s->full_rows + (size_t)slot) * s->head_dim;
}

// Keys: scales of token group g (head_dim entries), then its minimums.
static inline uint16_t *kivi_key_meta(const KiviState *s, int head, int g) {
    return s->meta + (size_t)head * s->meta_per_head + (size_t)g * 2 * s->head_dim;
}

// Values: (scale, minimum) pairs of the channel groups of one token.
static inline uint16_t *kivi_value_meta(const KiviState *s, int head, int token) {
    return s->meta + (size_t)head * s->meta_per_head + (size_t)token * (s->head_dim / s->group) * 2;
}

// One group's parameters from its min and max: stores them, returns the values quantising uses.
static void kivi_params(const KiviState *s, float mn, float mx, uint16_t *scale, uint16_t *minimum,
                        float *sd, float *md) {
    *scale = quant_fp32_to_fp16_sat((mx - mn) / (float)((1 << s->bits) - 1));
    *minimum = quant_fp32_to_fp16_sat(mn);
    *sd = quant_fp16_to_fp32(*scale);
    *md = quant_fp16_to_fp32(*minimum);
}

static inline uint8_t kivi_code(float x, float sd, float md, int top) {
    return sd > 0.0f ? (uint8_t)quant_round_clamp((x - md) / sd, 0, top) : 0;
}

// Keys: quantise the R residual keys [n_quant, n_quant + R) as R/G groups, per channel.
static void kivi_flush_keys(KiviState *s) {
    const int hd = s->head_dim, G = s->group, top = (1 << s->bits) - 1;
    uint8_t q[32];
    for (int h = 0; h < s->n_heads; h++) {
        for (int t0 = s->n_quant; t0 < s->n_quant + s->residual; t0 += G) {
            uint16_t *meta = kivi_key_meta(s, h, t0 / G);
            for (int d = 0; d < hd; d++) {
                float mn = INFINITY, mx = -INFINITY;
                for (int t = t0; t < t0 + G; t++) {
                    const float x = quant_fp16_to_fp32(kivi_full(s, h, t)[d]);
                    mn = fminf(mn, x);
                    mx = fmaxf(mx, x);
                }
                float sd, md;
                kivi_params(s, mn, mx, &meta[d], &meta[hd + d], &sd, &md);
            }
            for (int t = t0; t < t0 + G; t++) {
                const uint16_t *x = kivi_full(s, h, t);
                uint8_t *row = kivi_row(s, h, t);
                for (int c = 0; c < hd; c += 32) {
                    const int n = hd - c < 32 ? hd - c : 32;
                    for (int i = 0; i < n; i++)
                        q[i] = kivi_code(quant_fp16_to_fp32(x[c + i]), quant_fp16_to_fp32(meta[c + i]),
                                         quant_fp16_to_fp32(meta[hd + c + i]), top);
                    quant_pack(row + quant_packed_bytes((size_t)c, s->bits), q, (size_t)n, s->bits);
                }
            }
        }
    }
    s->n_quant += s->residual;
}

// Values: quantise the oldest window value (token n_quant), per token over channel groups.
static void kivi_quantise_oldest_value(KiviState *s) {
    const int hd = s->head_dim, G = s->group, top = (1 << s->bits) - 1;
    const int t = s->n_quant;
    float x[32];
    uint8_t q[32];
    for (int h = 0; h < s->n_heads; h++) {
        const uint16_t *v = kivi_full(s, h, t);
        uint16_t *meta = kivi_value_meta(s, h, t);
        float sd = 0.0f, md = 0.0f;
        for (int g = 0; g < hd / G; g++) {
            float mn = INFINITY, mx = -INFINITY;
            for (int d = g * G; d < (g + 1) * G; d++) {
                mn = fminf(mn, quant_fp16_to_fp32(v[d]));
                mx = fmaxf(mx, quant_fp16_to_fp32(v[d]));
            }
            kivi_params(s, mn, mx, &meta[2 * g], &meta[2 * g + 1], &sd, &md);
        }
        uint8_t *row = kivi_row(s, h, t);
        for (int c = 0; c < hd; c += 32) {
            const int n = hd - c < 32 ? hd - c : 32;
            for (int i = 0; i < n; i++) {
                const int g = (c + i) / G;
                x[i] = quant_fp16_to_fp32(v[c + i]);
                q[i] = kivi_code(x[i], quant_fp16_to_fp32(meta[2 * g]), quant_fp16_to_fp32(meta[2 * g + 1]), top);
            }
            quant_pack(row + quant_packed_bytes((size_t)c, s->bits), q, (size_t)n, s->bits);
        }
    }
    s->n_quant++;
}

static void kivi_append(void *state, const float *vec) {
    KiviState *s = state;
    // Normally end_step has already made room; this covers callers that never call it.
    if (!s->is_value && s->length - s->n_quant == s->residual) kivi_flush_keys(s);
    if (s->is_value && s->length - s->n_quant == s->residual + 1) kivi_quantise_oldest_value(s);
    for (int h = 0; h < s->n_heads; h++) {
        uint16_t *dst = kivi_full(s, h, s->length);
        for (int d = 0; d < s->head_dim; d++) dst[d] = quant_fp32_to_fp16(vec[h * s->head_dim + d]);
    }
    s->length++;
}

static void kivi_end_step(void *state) {
    KiviState *s = state;
    if (!s->is_value) {
        if (s->length - s->n_quant == s->residual) kivi_flush_keys(s);
    } else {
        while (s->length - s->n_quant > s->residual) kivi_quantise_oldest_value(s);
    }
}

// ---- Decoding -------------------------------------------------------------------------------
// Each kernel decodes 32 numbers at a time (a chunk starts on a byte boundary of the packed row)
// into a local float[32], exactly as read() does, then multiplies.

static inline void kivi_decode_full(const uint16_t *x, int n, float *out) {
    for (int i = 0; i < n; i++) out[i] = quant_fp16_to_fp32(x[i]);
}

// Key token t of group meta `meta`, numbers [c, c + n).
#define ALWAYS_INLINE inline __attribute__((always_inline))

static ALWAYS_INLINE void kivi_decode_key(const uint8_t *row, const float *sc, const float *mn, int c, int n,
                                          const int bits, float *out) {
    quant_unpack_float(row + quant_packed_bytes((size_t)c, bits), n, bits, 1.0f, 0.0f, out);
    for (int i = 0; i < n; i++) out[i] = out[i] * sc[i] + mn[i];
}

static ALWAYS_INLINE void kivi_decode_value(const KiviState *s, int head, int token, int c, int n, const int bits,
                                            float *out) {
    const uint16_t *meta = kivi_value_meta(s, head, token);
    quant_unpack_float(kivi_row(s, head, token) + quant_packed_bytes((size_t)c, bits), n, bits, 1.0f, 0.0f, out);
    if (s->group % 32 == 0) { // the chunk lies in one channel group
        const int g = c / s->group;
        const float sd = quant_fp16_to_fp32(meta[2 * g]), md = quant_fp16_to_fp32(meta[2 * g + 1]);
        for (int i = 0; i < n; i++) out[i] = out[i] * sd + md;
    } else {
        for (int i = 0; i < n; i++) {
            const int g = (c + i) / s->group;
            out[i] = out[i] * quant_fp16_to_fp32(meta[2 * g]) + quant_fp16_to_fp32(meta[2 * g + 1]);
        }
    }
}

static inline void kivi_group_params(const KiviState *s, int head, int g, int c, int n, float *sc, float *mn) {
    const uint16_t *meta = kivi_key_meta(s, head, g);
    for (int i = 0; i < n; i++) {
        sc[i] = quant_fp16_to_fp32(meta[c + i]);
        mn[i] = quant_fp16_to_fp32(meta[s->head_dim + c + i]);
    }
}

// Numbers [c, c + n) of one head at one token, whatever state the token is in.
static inline void kivi_decode_chunk(const KiviState *s, int head, int token, int c, int n, float *out) {
    float sc[32], mn[32];
    if (token >= s->n_quant) {
        kivi_decode_full(kivi_full(s, head, token) + c, n, out);
    } else if (s->is_value) {
        kivi_decode_value(s, head, token, c, n, s->bits, out);
    } else {
        kivi_group_params(s, head, token / s->group, c, n, sc, mn);
        kivi_decode_key(kivi_row(s, head, token), sc, mn, c, n, s->bits, out);
    }
}

static void kivi_read(const void *state, int head, int token, float *out) {
    const KiviState *s = state;
    for (int c = 0; c < s->head_dim; c += 32)
        kivi_decode_chunk(s, head, token, c, s->head_dim - c < 32 ? s->head_dim - c : 32, out + c);
}

static ALWAYS_INLINE void kivi_scores_impl(const KiviState *s, int head, const float *q, float *out, int n, const int hd,
                                           const int bits) {
    float sc[32], mn[32], k[32];
    if (s->is_value) { // scoring a value stream: not the usual use, kept correct
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int c = 0; c < hd; c += 32) {
                const int m = hd - c < 32 ? hd - c : 32;
                kivi_decode_chunk(s, head, j, c, m, k);
#pragma omp simd reduction(+ : acc)
                for (int i = 0; i < m; i++) acc += q[c + i] * k[i];
            }
            out[j] = acc;
        }
        return;
    }
    const int nq = n < s->n_quant ? n : s->n_quant;
    // Quantised keys, group by group: the group's per-channel scale and minimum are decoded once
    // per 32-channel chunk, then every token of the group is unpacked and dotted.
    for (int j = 0; j < nq; j++) out[j] = 0.0f;
    for (int g0 = 0; g0 < nq; g0 += s->group) {
        const int g1 = g0 + s->group < nq ? g0 + s->group : nq;
        for (int c = 0; c < hd; c += 32) {
            const int m = hd - c < 32 ? hd - c : 32;
            kivi_group_params(s, head, g0 / s->group, c, m, sc, mn);
            for (int j = g0; j < g1; j++) {
                kivi_decode_key(kivi_row(s, head, j), sc, mn, c, m, bits, k);
                float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                for (int i = 0; i < m; i++) acc += q[c + i] * k[i];
                out[j] += acc;
            }
        }
    }
    for (int j = nq; j < n; j++) {
        const uint16_t *x = kivi_full(s, head, j);
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < hd; d++) acc += q[d] * quant_fp16_to_fp32(x[d]);
        out[j] = acc;
    }
}

static ALWAYS_INLINE void kivi_mix_impl(const KiviState *s, int head, const float *p, float *out, int n, const int hd,
                                        const int bits) {
    float v[32];
    const int nq = n < s->n_quant ? n : s->n_quant;
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (int j = 0; j < nq; j++) {
        for (int c = 0; c < hd; c += 32) {
            const int m = hd - c < 32 ? hd - c : 32;
            if (s->is_value)
                kivi_decode_value(s, head, j, c, m, bits, v);
            else // mixing a key stream: not the usual use, kept correct
                kivi_decode_chunk(s, head, j, c, m, v);
            const float pj = p[j];
#pragma omp simd
            for (int i = 0; i < m; i++) out[c + i] += pj * v[i];
        }
    }
    for (int j = nq; j < n; j++) {
        const uint16_t *x = kivi_full(s, head, j);
        const float pj = p[j];
#pragma omp simd
        for (int d = 0; d < hd; d++) out[d] += pj * quant_fp16_to_fp32(x[d]);
    }
}

// Instantiated for micro's head_dim 32 at each width (constant shifts and trip counts), and generic.
#define KIVI_DISPATCH(s, KERNEL)                                                                   \
    switch ((s)->head_dim == 32 ? (s)->bits : 0) {                                                 \
    case 1: KERNEL(32, 1); break;                                                                  \
    case 2: KERNEL(32, 2); break;                                                                  \
    case 3: KERNEL(32, 3); break;                                                                  \
    case 4: KERNEL(32, 4); break;                                                                  \
    case 5: KERNEL(32, 5); break;                                                                  \
    case 6: KERNEL(32, 6); break;                                                                  \
    case 7: KERNEL(32, 7); break;                                                                  \
    case 8: KERNEL(32, 8); break;                                                                  \
    default: KERNEL((s)->head_dim, (s)->bits); break;                                              \
    }

static void kivi_scores(const void *state, int head, const float *q, float *out, int n) {
    const KiviState *s = state;
#define SCORES(hd, bits) kivi_scores_impl(s, head, q, out, n, hd, bits)
    KIVI_DISPATCH(s, SCORES)
#undef SCORES
}

static void kivi_mix(const void *state, int head, const float *p, float *out, int n) {
    const KiviState *s = state;
#define MIX(hd, bits) kivi_mix_impl(s, head, p, out, n, hd, bits)
    KIVI_DISPATCH(s, MIX)
#undef MIX
}

static size_t kivi_bytes(const void *state) {
    const KiviState *s = state;
    const size_t hd = (size_t)s->head_dim, nq = (size_t)s->n_quant;
    const size_t full = (size_t)(s->length - s->n_quant) * hd * sizeof(uint16_t);
    size_t quant;
    if (s->is_value) // codes + (scale, min) per channel group, per token
        quant = nq * (s->row_bytes + (hd / (size_t)s->group) * 2 * sizeof(uint16_t));
    else // codes per token + (scale, min) per channel, per group of G tokens
        quant = nq * s->row_bytes + (nq / (size_t)s->group) * hd * 2 * sizeof(uint16_t);
    return (quant + full) * (size_t)s->n_heads;
}

static void kivi_destroy(void *state) {
    KiviState *s = state;
    if (!s) return;
    free(s->codes);
    free(s->meta);
    free(s->full);
    free(s);
}

static const CodecOps kivi_ops = {
    .append = kivi_append,
    .end_step = kivi_end_step,
    .scores = kivi_scores,
    .mix = kivi_mix,
    .read = kivi_read,
    .bytes = kivi_bytes,
    .destroy = kivi_destroy,
};

const CodecFamily codec_kivi = {
    .name = "kivi",
    .help = "kivi                 KIVI: B-bit min/max groups of G, keys per channel, values per token, newest R "
            "in fp16 (bits=2,group=32,residual=128)",
    .ops = &kivi_ops,
    .create = kivi_create,
};
