// QJL (Zandieh et al. 2024, arXiv 2406.03482) as a cache codec: qjl[:m=M][,seed=S].
//
// A vector k is stored as the m signs of a seeded Gaussian projection, sign(S·k) (S an m × head_dim
// matrix of standard normals, formats.h), and its norm in fp16: m + 16 bits a head (1.5 bits a
// number at m = 32 = head_dim). A score is the unbiased estimate
//     q·k ≈ √(π/2)/m · ‖k‖ · ⟨S·q, sign(S·k)⟩
// with the query unquantised: S·q is computed once per query. The paper's keys; for a value stream
// the same read back, √(π/2)/m · ‖v‖ · Sᵀ·sign(S·v), is an unbiased estimate of v too (its variance,
// of order ‖v‖²·d/m a coordinate, is what the plate measures).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "codec_core.h"
#include "codecs.h"
#include "formats.h"

typedef struct {
    CodecRows r;         // a head at a token: [fp16 ‖k‖][signs]
    int head_dim, m;
    const float *sketch; // S, m × head_dim (shared, tq_gaussian's)
    float alpha;         // √(π/2) / m, as qjl_decode's
} QjlState;

static void qjl_append(void *state, const float *x) {
    QjlState *s = state;
    for (int h = 0; h < s->r.n_heads; h++) qjl_encode(s->sketch, s->m, s->head_dim, x + h * s->head_dim, codec_row(&s->r, h, s->r.length));
    s->r.length++;
}

static void qjl_read(const void *state, int head, int t, float *out) {
    const QjlState *s = state;
    qjl_decode(s->sketch, s->m, s->head_dim, codec_row(&s->r, head, t), out);
}

static void qjl_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    if (n <= 0) return;
    const QjlState *s0 = b->states[0];
    float sq[4096];
    tq_project(s0->sketch, s0->m, s0->head_dim, q, sq);
    for (int j = 0; j < n; j++) {
        int local;
        const QjlState *s = codec_block(b, j, &local);
        const uint8_t *row = codec_row(&s->r, head, local);
        out[j] = qjl_estimate(row, sq, s->m);
    }
}

static void qjl_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    const QjlState *s0 = b->states[0];
    float acc[4096];
    memset(acc, 0, sizeof(float) * (size_t)s0->m);
    for (int j = 0; j < n; j++) {
        int local;
        const QjlState *s = codec_block(b, j, &local);
        const uint8_t *row = codec_row(&s->r, head, local);
        const float g = p[j] * s->alpha * fmt_fp16_load(row);
        for (int i = 0; i < s->m; i++) acc[i] += tq_sign(row + 2, i) * g;
    }
    tq_project_back(s0->sketch, s0->m, s0->head_dim, acc, out);
}

// The state begins with its rows: the shared destroy() and bytes() serve it.
#define qjl_destroy codec_rows_destroy
#define qjl_bytes codec_rows_bytes

// Keys for the fast evaluator's mirror (MirrorOps) when the sketch has head_dim rows: a score is
// (√(π/2)/m · ‖k‖) · Σ_i ±(S·q)_i in order of i from 0 (qjl_estimate, tq_sign_dot), so x̃ is the
// signs as ±1, q̃ = S·q and the factor √(π/2)/m · ‖k‖, formed as qjl_estimate forms it.
static void qjl_key_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    (void)offset;
    const QjlState *s = state;
    const uint8_t *row = codec_row(&s->r, head, token);
    for (int i = 0; i < s->m; i++) x[i] = tq_sign(row + 2, i);
    *factor = s->alpha * fmt_fp16_load(row); // alpha: qjl_estimate's (float)(√(π/2)/m)
}

static void qjl_key_query(const void *state, const float *q, float *out) {
    const QjlState *s = state;
    tq_project(s->sketch, s->m, s->head_dim, q, out);
}

static const MirrorOps qjl_key_mirror_ops = {.read = qjl_key_read, .query = qjl_key_query, .has_factor = 1};

static const MirrorOps *qjl_key_mirror(const void *state) {
    const QjlState *s = state;
    return s->m == s->head_dim ? &qjl_key_mirror_ops : NULL;
}

static const CodecOps qjl_ops = {.append = qjl_append, .scores = qjl_scores, .mix = qjl_mix, .read = qjl_read,
                                 .key_mirror = qjl_key_mirror, .bytes = qjl_bytes, .copy = codec_rows_copy,
                                 .destroy = qjl_destroy};

static void *qjl_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                        size_t normalised_len, char *err, size_t errlen) {
    int m, seed;
    if (spec_int(spec, "m", 32, 1, 4096, &m, err, errlen) || spec_int(spec, "seed", 1, 0, 1 << 30, &seed, err, errlen) ||
        codec_check_shape("qjl", n_heads, head_dim, capacity, 1, err, errlen))
        return NULL;
    snprintf(normalised, normalised_len, "qjl:m=%d,seed=%d", m, seed);
    QjlState *s = calloc(1, sizeof *s);
    if (s) {
        s->head_dim = head_dim, s->m = m;
        s->alpha = (float)(sqrt(M_PI / 2.0) / m); // as qjl_decode's
        s->sketch = tq_gaussian((unsigned long)seed, m, head_dim);
        codec_rows_alloc(&s->r, n_heads, 2 + (size_t)(m + 7) / 8, capacity);
    }
    return codec_created(s, s && s->sketch && s->r.rows, codec_rows_destroy, err, errlen);
}

const CodecFamily CODEC_FAMILY(codec_qjl) = {
    .name = "qjl", .ops = &qjl_ops, .create = qjl_create,
    .help = "qjl[:m=M]            QJL: signs of a seeded Gaussian projection (M rows, 32) and an fp16 norm, "
            "unbiased scores with the query unquantised; seed=S",
    // A sketch of other than head_dim rows keeps its kernel (m=40, m=64).
    .examples = (const char *const[]){"qjl|fp16", "qjl:m=40", "qjl:m=64|qjl", NULL}};
