// Stream transforms (kvtransform.h): a layer with the codec interface around any codec's state.
#include "kvtransform.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "quant.h"
#include "rng.h"

#define MAX_SINK 64
#define MAX_OUTLIER_PERCENT 20.0

// ---- options ----------------------------------------------------------------------------------

static int power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Entries kept exact per side (smallest, largest) for n numbers per token at P percent.
static int outliers_per_side(double percent, int n) { return (int)lround((double)n * percent / 200.0); }

static int parse_rot(const char *value, const char *family, int head_dim, TransformOptions *t, char *err,
                     size_t errlen) {
    if (strcmp(value, "none") == 0) return 0; // a family's default rotation turned off (quarot:rot=none)
    if (strcmp(value, "hadamard") == 0) {
        if (!power_of_two(head_dim)) {
            snprintf(err, errlen, "%s: rot=hadamard needs head_dim a power of two (got %d)", family, head_dim);
            return -1;
        }
        t->rot = 1;
        return 0;
    }
    if (strncmp(value, "random:", 7) == 0 && value[7] >= '0' && value[7] <= '9') {
        char *end;
        errno = 0;
        const unsigned long long seed = strtoull(value + 7, &end, 10);
        if (*end == '\0' && errno == 0 && seed <= 0xffffffffULL) {
            t->rot = 2;
            t->seed = (unsigned long)seed;
            return 0;
        }
    }
    snprintf(err, errlen, "%s: rot=%s: expected rot=hadamard, rot=random:SEED (SEED 0..4294967295) or rot=none", family,
             value);
    return -1;
}

// Whether `key` is in the comma-separated list.
static int listed(const char *list, const char *key) {
    const size_t n = strlen(key);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, key, n) == 0) return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

int transform_options(CodecSpec *spec, KVRole role, int n_heads, int head_dim, const char *owned, TransformOptions *t,
                      char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    const char *rot = spec_string(spec, "rot");
    if (rot && parse_rot(rot, spec->name, head_dim, t, err, errlen)) return -1;
    t->prerope = spec_flag(spec, "prerope");
    if (t->prerope && role != KV_ROLE_KEY) {
        snprintf(err, errlen, "%s: prerope is for keys (values carry no RoPE): give it with --k", spec->name);
        return -1;
    }
    if (spec_int(spec, "sink", 0, 0, MAX_SINK, &t->sink, err, errlen)) return -1;
    const char *pct = listed(owned, "outliers") ? NULL : spec_string(spec, "outliers");
    if (pct) {
        char *end = NULL;
        const double p = *pct ? strtod(pct, &end) : NAN;
        if (!end || *end != '\0' || !(p >= 0.0 && p <= MAX_OUTLIER_PERCENT)) {
            snprintf(err, errlen, "%s: outliers=%s: expected a percent from 0 to %g", spec->name, pct,
                     MAX_OUTLIER_PERCENT);
            return -1;
        }
        const int n = n_heads * head_dim;
        if (p > 0.0 && outliers_per_side(p, n) < 1) {
            snprintf(err, errlen,
                     "%s: outliers=%s keeps no entry of a token's %d numbers (round(%d x P / 200) is 0; P >= %.3g "
                     "keeps one at each end)",
                     spec->name, pct, n, n, 100.0 / n);
            return -1;
        }
        t->outliers = p;
    }
    return 0;
}

int transform_any(const TransformOptions *t) { return t->rot || t->prerope || t->sink || t->outliers > 0.0; }

void transform_normalise(const TransformOptions *t, const char *defaults, char *spec, size_t len) {
    size_t at = strlen(spec);
    const char *sep = strchr(spec, ':') ? "," : ":";
#define ADD(...)                                                                                                   \
    do {                                                                                                           \
        if (at < len) at += (size_t)snprintf(spec + at, len - at, __VA_ARGS__);                                    \
        sep = ",";                                                                                                 \
    } while (0)
    if (t->rot == 1) ADD("%srot=hadamard", sep);
    if (t->rot == 2) ADD("%srot=random:%lu", sep, t->seed);
    if (t->prerope) ADD("%sprerope", sep);
    if (t->sink) ADD("%ssink=%d", sep, t->sink);
    if (t->outliers > 0.0) ADD("%soutliers=%g", sep, t->outliers);
    // A family default turned off stays off when the normalised spec is read again.
    if (!t->rot && listed(defaults, "rot=hadamard")) ADD("%srot=none", sep);
    if (!t->sink && listed(defaults, "sink=1")) ADD("%ssink=0", sep);
#undef ADD
}

// ---- rotations --------------------------------------------------------------------------------

void transform_sylvester(int n, signed char *h) {
    h[0] = 1;
    for (int size = 1; size < n; size *= 2) // H_2m = [[H_m, H_m], [H_m, -H_m]]
        for (int i = 0; i < size; i++)
            for (int j = 0; j < size; j++) {
                const signed char x = h[i * n + j];
                h[i * n + j + size] = x;
                h[(i + size) * n + j] = x;
                h[(i + size) * n + j + size] = (signed char)-x;
            }
}

// Q of the QR factorisation of a seeded Gaussian matrix, by modified Gram-Schmidt in double on its
// columns (Q's column signs follow R's positive diagonal, so the seed alone fixes the matrix).
static void random_orthogonal(unsigned long seed, int n, double *q) {
    Rng rng;
    rng_seed(&rng, 0x6b76726f74ULL ^ (uint64_t)seed); // "kvrot"
    for (int i = 0; i < n * n; i++) q[i] = rng_normal(&rng);
    for (int c = 0; c < n; c++) {
        for (int p = 0; p < c; p++) {
            double dot = 0.0;
            for (int r = 0; r < n; r++) dot += q[r * n + p] * q[r * n + c];
            for (int r = 0; r < n; r++) q[r * n + c] -= dot * q[r * n + p];
        }
        double norm = 0.0;
        for (int r = 0; r < n; r++) norm += q[r * n + c] * q[r * n + c];
        norm = sqrt(norm);
        for (int r = 0; r < n; r++) q[r * n + c] /= norm;
    }
}

// Every stream using a rotation shares one copy, kept until exit (a pool's blocks are many; the
// matrix is a constant of the scheme, like a codebook, not a cached number).
typedef struct {
    int kind, head_dim;
    unsigned long seed;
    float *m;
} SharedRotation;

static SharedRotation rotations[16];
static int n_rotations;
static pthread_mutex_t rotations_lock = PTHREAD_MUTEX_INITIALIZER;

static float *make_rotation(int kind, unsigned long seed, int n) {
    float *m = malloc(sizeof(float) * 2 * (size_t)n * (size_t)n);
    double *work = malloc(sizeof(double) * (size_t)n * (size_t)n);
    signed char *h = malloc((size_t)n * (size_t)n);
    if (m && work && h) {
        if (kind == 1) {
            transform_sylvester(n, h);
            for (int i = 0; i < n * n; i++) m[i] = (float)(h[i] / sqrt((double)n));
        } else {
            random_orthogonal(seed, n, work);
            for (int i = 0; i < n * n; i++) m[i] = (float)work[i];
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) m[(size_t)n * n + (size_t)j * n + i] = m[(size_t)i * n + j];
    } else {
        free(m);
        m = NULL;
    }
    free(work);
    free(h);
    return m;
}

const float *transform_rotation(int kind, unsigned long seed, int head_dim) {
    const float *found = NULL;
    pthread_mutex_lock(&rotations_lock);
    for (int i = 0; i < n_rotations && !found; i++)
        if (rotations[i].kind == kind && rotations[i].head_dim == head_dim && rotations[i].seed == seed)
            found = rotations[i].m;
    if (!found) {
        float *m = make_rotation(kind, seed, head_dim);
        if (m && n_rotations < (int)(sizeof rotations / sizeof rotations[0]))
            rotations[n_rotations++] = (SharedRotation){kind, head_dim, seed, m};
        else if (m)
            free(m), m = NULL; // more distinct rotations than any run uses: refuse rather than leak
        found = m;
    }
    pthread_mutex_unlock(&rotations_lock);
    return found;
}

// In the kernel set the registry hands out (codec_projection): every set gives these bits.
void transform_rotate(const float *m, int n, const float *x, float *y, int back) { codec_projection()(m, n, x, y, back); }

// ---- the layer ---------------------------------------------------------------------------------

// An outlier entry as the kernels visit it: its token, its place k among the token's entries, its
// channel in its head, and (fixed_at_append) its fix, so that the fixes' loop reads one array.
typedef struct {
    int token, k, channel;
    float fix;
} OutlierEntry;

typedef struct {
    CodecOps ops; // the layer's table (settle passes through only when the codec has one)
    const CodecOps *inner_ops;
    void *inner;
    int n_heads, head_dim, n, capacity, length;
    const float *rot;   // NULL: no rotation
    CodecProjectFn project; // the rotation's kernel set: the one in use when the stream was made
    int sink_tokens;    // this block's tokens that are sink tokens (its first ones)
    int sink_all;       // the sequence's sink tokens (its first ones, in this block and before it)
    uint16_t *sink;     // [sink_tokens][n] fp16 of the vectors as given
    int per_token;      // outlier entries per token (both ends)
    int index_bytes;    // 1 when n <= 256, else 2
    uint16_t *out_val;  // [capacity][per_token] fp16, in the rotated space
    uint8_t *out_idx;   // [capacity][per_token][index_bytes] little-endian
    // 1 when the codec's tokens never change form: each outlier entry's fix (its value less the
    // codec's reconstruction of it, what scores and mix add for it) is taken once at append, into
    // head_entries, where it would else read the head back at every query.
    int fixed_at_append;
    // [n_heads][capacity · per_token] and [n_heads]: each head's outlier entries (in order of token
    // and k), so that scores and mix visit those alone rather than ask every token of every query.
    // An index of out_idx and a decode table, like a kernel's: not stored data, not in bytes().
    OutlierEntry *head_entries;
    int *head_count;
    float *work;        // [n] the vector on its way in (append is one thread per stream)
    uint32_t *picked;   // [n] 1 where picked (a word, which the scans' SIMD lanes use as a mask)
    int *chosen;        // [per_token]
    // The codec's mirror forms passed on (transform_mirror_init); NULL where there are none.
    const MirrorOps *inner_key_m, *inner_value_m;
    MirrorOps key_m, value_m;
} Transform;

static int outlier_index(const Transform *s, int token, int i) {
    const uint8_t *p = s->out_idx + ((size_t)token * s->per_token + i) * s->index_bytes;
    return s->index_bytes == 1 ? p[0] : p[0] | p[1] << 8;
}

// The index of the smallest (sign -1) or largest (+1) entry not yet picked; the first on ties. As
// a scan from the first entry not picked that moves on a strictly better entry: that is the first
// place of the extreme value (a minimum of -w for the largest), found in SIMD lanes (NaNs never
// win), unless the scan's first entry is NaN, which no comparison beats.
static int pick_extreme(const Transform *s, const float *w, int sign) {
    const uint32_t *picked = s->picked;
    const int n = s->n;
    int first = 0;
    while (first < n && picked[first]) first++;
    if (first == n) return -1;
    if (isnan(w[first])) return first;
    const float flip = sign > 0 ? -1.0f : 1.0f; // exact: -w orders as w reversed, NaN stays NaN
    float m = INFINITY;
#pragma omp simd reduction(min : m)
    for (int i = 0; i < n; i++) {
        const float v = flip * w[i], c = picked[i] ? INFINITY : v;
        m = c < m ? c : m;
    }
    int i = first;
    while (picked[i] || flip * w[i] != m) i++;
    return i;
}

// The range of a head's entries not picked (lo > hi when there are none), as fminf and fmaxf find
// it entry by entry. Without a NaN, and with both ends nonzero, the ends are the set's least and
// greatest values whatever the order, and SIMD lanes find them; else the library calls decide (NaNs,
// and a zero end, whose sign their ties choose), one entry after another as before.
static void unpicked_range(const float *v, const uint32_t *pk, int n, float *lo, float *hi) {
    float l = INFINITY, h = -INFINITY;
    int nan = 0;
#pragma omp simd reduction(min : l) reduction(max : h) reduction(| : nan)
    for (int d = 0; d < n; d++) {
        const float a = pk[d] ? INFINITY : v[d], b = pk[d] ? -INFINITY : v[d];
        l = a < l ? a : l;
        h = b > h ? b : h;
        nan |= v[d] != v[d];
    }
    if (nan || l == 0.0f || h == 0.0f) {
        l = INFINITY, h = -INFINITY;
        for (int d = 0; d < n; d++)
            if (!pk[d]) l = fminf(l, v[d]), h = fmaxf(h, v[d]);
    }
    *lo = l, *hi = h;
}

// Stores token t's outlier entries exactly and clamps the codec's copy of each into the range of
// the rest of its head.
static void take_outliers(Transform *s, int t, float *w) {
    memset(s->picked, 0, sizeof(uint32_t) * (size_t)s->n);
    int *chosen = s->chosen;
    const int per_side = s->per_token / 2;
    for (int k = 0; k < per_side; k++)
        for (int sign = -1; sign <= 1; sign += 2) {
            const int i = pick_extreme(s, w, sign);
            s->picked[i] = 1;
            chosen[2 * k + (sign > 0)] = i;
        }
    for (int k = 0; k < s->per_token; k++) {
        const int i = chosen[k];
        s->out_val[(size_t)t * s->per_token + k] = quant_fp32_to_fp16(w[i]);
        uint8_t *p = s->out_idx + ((size_t)t * s->per_token + k) * s->index_bytes;
        p[0] = (uint8_t)i;
        if (s->index_bytes == 2) p[1] = (uint8_t)(i >> 8);
    }
    for (int h = 0; h < s->n_heads; h++) {
        float *v = w + h * s->head_dim;
        const uint32_t *pk = s->picked + h * s->head_dim;
        float lo, hi;
        unpicked_range(v, pk, s->head_dim, &lo, &hi);
        if (lo > hi) lo = hi = 0.0f; // every entry of the head is an outlier
        for (int d = 0; d < s->head_dim; d++)
            if (pk[d]) v[d] = v[d] < lo ? lo : v[d] > hi ? hi : v[d];
    }
}

static void transform_append(void *state, const float *vec) {
    Transform *s = state;
    const int t = s->length;
    float *w = s->work;
    memcpy(w, vec, sizeof(float) * (size_t)s->n);
    if (t < s->sink_tokens)
        for (int i = 0; i < s->n; i++) s->sink[(size_t)t * s->n + i] = quant_fp32_to_fp16(vec[i]);
    if (s->rot) {
        float x[MICRO_MAX_WIDTH];
        for (int h = 0; h < s->n_heads; h++) {
            memcpy(x, w + h * s->head_dim, sizeof(float) * (size_t)s->head_dim);
            s->project(s->rot, s->head_dim, x, w + h * s->head_dim, 0);
        }
    }
    if (s->per_token && t >= s->sink_tokens) take_outliers(s, t, w);
    s->inner_ops->append(s->inner, w);
    if (s->per_token && t >= s->sink_tokens) {
        float x[MICRO_MAX_WIDTH];
        int read_head = -1;
        for (int k = 0; k < s->per_token; k++) {
            const int i = outlier_index(s, t, k), head = i / s->head_dim;
            float fix = 0.0f;
            if (s->fixed_at_append) {
                if (head != read_head) s->inner_ops->read(s->inner, head, t, x), read_head = head;
                fix = quant_fp16_to_fp32(s->out_val[(size_t)t * s->per_token + k]) - x[i - head * s->head_dim];
            }
            s->head_entries[(size_t)head * s->capacity * s->per_token + s->head_count[head]++] =
                (OutlierEntry){t, k, i - head * s->head_dim, fix};
        }
    }
    s->length++;
}

// Outlier entry k of token t, which lies in `head`: what the scores or mix add for it per unit of
// weight (the fp16 value less the codec's reconstruction there, x the head read back), at *i its
// channel.
static float outlier_fix(const Transform *s, int head, int t, int k, const float *x, int *i) {
    *i = outlier_index(s, t, k) - head * s->head_dim;
    return quant_fp16_to_fp32(s->out_val[(size_t)t * s->per_token + k]) - x[*i];
}

// Token t's outlier entries of one head written over x (the codec's read of that head), in the
// rotated space. Returns how many there were.
static int restore_outliers(const Transform *s, int head, int t, float *x) {
    int found = 0;
    for (int k = 0; k < s->per_token; k++) {
        const int i = outlier_index(s, t, k) - head * s->head_dim;
        if (i >= 0 && i < s->head_dim) {
            x[i] = quant_fp16_to_fp32(s->out_val[(size_t)t * s->per_token + k]);
            found++;
        }
    }
    return found;
}

static const OutlierEntry *head_entries(const Transform *s, int head) {
    return s->head_entries + (size_t)head * s->capacity * s->per_token;
}

static void sink_read(const Transform *s, int head, int t, float *out) {
    const uint16_t *src = s->sink + (size_t)t * s->n + (size_t)head * s->head_dim;
    for (int d = 0; d < s->head_dim; d++) out[d] = quant_fp16_to_fp32(src[d]);
}

static void transform_read(const void *state, int head, int t, float *out) {
    const Transform *s = state;
    if (t < s->sink_tokens) {
        sink_read(s, head, t, out);
        return;
    }
    float x[MICRO_MAX_WIDTH];
    s->inner_ops->read(s->inner, head, t, x);
    if (s->per_token) restore_outliers(s, head, t, x);
    if (s->rot)
        s->project(s->rot, s->head_dim, x, out, 1);
    else
        memcpy(out, x, sizeof(float) * (size_t)s->head_dim);
}

// The codec's states of the blocks b covers, for its kernels. A stream spans at most
// context / 16 blocks; beyond the stack array (contexts over 64k) one allocation per call.
typedef struct {
    const void *states[KV_MAX_BLOCKS];
} InnerStates;

static CodecBlocks inner_blocks(const CodecBlocks *b, int n, InnerStates *is) {
    const int nb = (n + b->block - 1) / b->block; // at most KV_MAX_BLOCKS (kvpool_init)
    for (int i = 0; i < nb; i++) is->states[i] = ((const Transform *)b->states[i])->inner;
    return (CodecBlocks){is->states, b->block, b->head_dim, NULL, 0};
}

// The scores of the sink tokens, the sequence's first, read whole from their exact copies.
static void sink_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    const int hd = b->head_dim;
    float x[MICRO_MAX_WIDTH];
    for (int j = 0; j < n; j++) {
        const Transform *s = b->states[j / b->block];
        const int t = j % b->block;
        if (t >= s->sink_tokens) break;
        sink_read(s, head, t, x);
        float acc = 0.0f;
        for (int d = 0; d < hd; d++) acc += q[d] * x[d];
        out[j] = acc;
    }
}

// What the codec's copy of tokens [0, n) lacks at this head's outlier entries, in order of token and
// entry: fix at channel i of token j added to scores (out[j] += w[i] · fix, w the query as the codec
// took it) or to a mix's sums (out[i] += w[j] · fix, w the weights).
static void add_outlier_fixes(const CodecBlocks *b, int head, int n, const float *w, float *out, int into_scores) {
    float x[MICRO_MAX_WIDTH];
    for (int j0 = 0; j0 < n; j0 += b->block) {
        const Transform *s = b->states[j0 / b->block];
        const OutlierEntry *e = head_entries(s, head);
        const int count = s->head_count[head];
        if (s->fixed_at_append) {
            const float *wj = into_scores ? w : w + j0;
            float *o = into_scores ? out + j0 : out;
            for (int k = 0; k < count && e[k].token < n - j0; k++) {
                if (into_scores)
                    o[e[k].token] += w[e[k].channel] * e[k].fix;
                else
                    o[e[k].channel] += wj[e[k].token] * e[k].fix;
            }
            continue;
        }
        int read_t = -1;
        for (int k = 0; k < count && e[k].token < n - j0; k++) {
            const int t = e[k].token;
            if (t != read_t) s->inner_ops->read(s->inner, head, t, x), read_t = t;
            int i;
            const float fix = outlier_fix(s, head, t, e[k].k, x, &i);
            if (into_scores)
                out[j0 + t] += w[i] * fix;
            else
                out[i] += w[j0 + t] * fix;
        }
    }
}

static void transform_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    const Transform *s0 = b->states[0];
    const int hd = s0->head_dim;
    float qr[MICRO_MAX_WIDTH];
    const float *qq = q;
    if (s0->rot) s0->project(s0->rot, hd, q, qr, 0), qq = qr;
    InnerStates is;
    const CodecBlocks ib = inner_blocks(b, n, &is);
    s0->inner_ops->scores(&ib, head, qq, out, n);
    sink_scores(b, head, q, out, n);
    if (s0->per_token) add_outlier_fixes(b, head, n, qq, out, 1); // what the codec's copy lacks
}

// The codec's mix acc (rotated space) made the layer's: sink tokens' codec copies taken out,
// outlier entries put right, the sum rotated back and the sink tokens' exact copies added.
static void finish_mix(const CodecBlocks *b, int head, const float *p, float *acc, float *out, int n) {
    const Transform *s0 = b->states[0];
    const int hd = s0->head_dim;
    float x[MICRO_MAX_WIDTH];
    // In the rotated space: sink tokens' codec copies taken out, outlier entries put right (sink
    // tokens first: they are the sequence's first, and hold no outlier entries).
    for (int j = 0; j < n; j++) {
        const Transform *s = b->states[j / b->block];
        const int t = j % b->block;
        if (t >= s->sink_tokens) break;
        s->inner_ops->read(s->inner, head, t, x);
        for (int d = 0; d < hd; d++) acc[d] -= p[j] * x[d];
    }
    if (s0->per_token) add_outlier_fixes(b, head, n, p, acc, 0);
    if (s0->rot)
        s0->project(s0->rot, hd, acc, out, 1);
    else
        memcpy(out, acc, sizeof(float) * (size_t)hd);
    for (int j = 0; j < n; j++) { // sink tokens are the sequence's first: they may fill blocks
        const Transform *s = b->states[j / b->block];
        if (j % b->block >= s->sink_tokens) break;
        sink_read(s, head, j % b->block, x);
        for (int d = 0; d < hd; d++) out[d] += p[j] * x[d];
    }
}

static void transform_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    const Transform *s0 = b->states[0];
    float acc[MICRO_MAX_WIDTH];
    InnerStates is;
    const CodecBlocks ib = inner_blocks(b, n, &is);
    s0->inner_ops->mix(&ib, head, p, acc, n);
    finish_mix(b, head, p, acc, out, n);
}

// The fast evaluator's mirror (MirrorOps): a layer that rotates and keeps sink tokens keeps its
// codec's forms. Its scores are the codec's with q̃ made from R·q, then the sink tokens scored
// again and the outlier entries put right (transform_fix_scores, as transform_scores does after
// its codec's scores); its mix is the codec's, put right by finish_mix; and the codec's x̃, factors
// and offsets are the stored ones. So the layer's forms are the codec's with the rotation added to
// query, finish_mix to post, and transform_fix_scores after the scores. With outlier entries,
// finish_mix puts a value's entries right with every token's weight: post is given all of them
// (MirrorOps.all_weights).
static void transform_key_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    const Transform *s = state;
    s->inner_key_m->read(s->inner, head, token, x, factor, offset);
}

static void transform_value_read(const void *state, int head, int token, float *x, float *factor, float *offset) {
    const Transform *s = state;
    s->inner_value_m->read(s->inner, head, token, x, factor, offset);
}

static void transform_value_correction(const void *state, int head, int token, float *xc) {
    const Transform *s = state;
    s->inner_value_m->read_correction(s->inner, head, token, xc);
}

static void transform_query(const void *state, const float *q, float *out) {
    const Transform *s = state;
    if (!s->inner_key_m->query) { // rotated alone (transform_mirror_init: then there is a rotation)
        s->project(s->rot, s->head_dim, q, out, 0);
        return;
    }
    float qr[MICRO_MAX_WIDTH];
    if (s->rot) s->project(s->rot, s->head_dim, q, qr, 0);
    s->inner_key_m->query(s->inner, s->rot ? qr : q, out);
}

static void transform_post(const CodecBlocks *b, int head, const float *p, const float *acc, const float *acc2,
                           float *out, int n) {
    const Transform *s0 = b->states[0];
    float a[MICRO_MAX_WIDTH];
    if (s0->inner_value_m->post) {
        InnerStates is;
        const CodecBlocks ib = inner_blocks(b, n, &is);
        s0->inner_value_m->post(&ib, head, p, acc, acc2, a, n);
    } else
        memcpy(a, acc, sizeof(float) * (size_t)s0->head_dim);
    finish_mix(b, head, p, a, out, n);
}

static void transform_fix_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    const Transform *s0 = b->states[0];
    sink_scores(b, head, q, out, n);
    if (!s0->per_token) return;
    float qr[MICRO_MAX_WIDTH];
    const float *qq = q;
    if (s0->rot) s0->project(s0->rot, s0->head_dim, q, qr, 0), qq = qr;
    add_outlier_fixes(b, head, n, qq, out, 1);
}

static const MirrorOps *transform_key_mirror(const void *state) {
    const Transform *s = state;
    return s->inner_key_m ? &s->key_m : NULL;
}

static const MirrorOps *transform_value_mirror(const void *state) {
    const Transform *s = state;
    return s->inner_value_m ? &s->value_m : NULL;
}

static void transform_mirror_init(Transform *s) {
    if (s->sink_all > MIRROR_MAX_FIRST) return;
    const CodecOps *o = s->inner_ops;
    s->inner_key_m = o->key_mirror ? o->key_mirror(s->inner) : NULL;
    s->inner_value_m = o->value_mirror ? o->value_mirror(s->inner) : NULL;
    if (s->inner_key_m && s->inner_key_m->has_second) s->inner_key_m = NULL; // a second sum is not passed on
    if (s->inner_value_m && s->inner_value_m->has_second) s->inner_value_m = NULL;
    if (s->inner_key_m) {
        s->key_m = *s->inner_key_m;
        s->key_m.read = transform_key_read;
        s->key_m.query = s->rot || s->inner_key_m->query ? transform_query : NULL;
        s->key_m.fix_scores = s->sink_all || s->per_token ? transform_fix_scores : NULL;
    }
    if (s->inner_value_m) {
        s->value_m = *s->inner_value_m;
        s->value_m.read = transform_value_read, s->value_m.post = transform_post, s->value_m.first = s->sink_all;
        s->value_m.all_weights = s->per_token; // finish_mix puts the outlier entries right with every weight
        if (s->value_m.corrections) s->value_m.read_correction = transform_value_correction;
    }
    s->ops.key_mirror = transform_key_mirror, s->ops.value_mirror = transform_value_mirror;
}

static size_t transform_bytes(const void *state) {
    const Transform *s = state;
    const int sunk = s->length < s->sink_tokens ? s->length : s->sink_tokens;
    return s->inner_ops->bytes(s->inner) + (size_t)sunk * (size_t)s->n * sizeof(uint16_t) +
           (size_t)(s->length - sunk) * (size_t)s->per_token * (sizeof(uint16_t) + (size_t)s->index_bytes);
}

static int transform_settled(const void *state, int length) {
    const Transform *s = state;
    return s->inner_ops->settled(s->inner, length);
}

static void transform_settle(void *state, int n) {
    Transform *s = state;
    s->inner_ops->settle(s->inner, n);
}

static void transform_destroy(void *state) {
    Transform *s = state;
    s->inner_ops->destroy(s->inner);
    free(s->sink);
    free(s->out_val);
    free(s->out_idx);
    free(s->work);
    free(s->picked);
    free(s->chosen);
    free(s->head_entries);
    free(s->head_count);
    free(s);
}

int transform_wrap(KVStream *st, const TransformOptions *t, int first, char *err, size_t errlen) {
    st->prerope = t->prerope;
    if (!t->rot && !t->sink && !(t->outliers > 0.0)) return 0; // prerope alone changes what is appended, not how
    Transform *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->inner_ops = st->ops, s->inner = st->state;
    s->n_heads = st->n_heads, s->head_dim = st->head_dim, s->n = st->n_heads * st->head_dim;
    s->capacity = st->capacity;
    s->ops = (CodecOps){.append = transform_append, .scores = transform_scores, .mix = transform_mix,
                        .read = transform_read, .bytes = transform_bytes, .destroy = transform_destroy};
    if (s->inner_ops->settle) s->ops.settled = transform_settled, s->ops.settle = transform_settle;
    if (t->rot && !(s->rot = transform_rotation(t->rot, t->seed, s->head_dim))) goto oom_state;
    s->project = codec_projection(); // as a family's state takes its kernel set when it is made
    if (first < t->sink) s->sink_tokens = t->sink - first < s->capacity ? t->sink - first : s->capacity;
    s->sink_all = t->sink;
    if (s->sink_tokens && !(s->sink = malloc(sizeof(uint16_t) * (size_t)s->sink_tokens * (size_t)s->n))) goto oom_state;
    if (t->outliers > 0.0) {
        s->per_token = 2 * outliers_per_side(t->outliers, s->n);
        s->index_bytes = s->n <= 256 ? 1 : 2;
        s->out_val = malloc(sizeof(uint16_t) * (size_t)s->capacity * (size_t)s->per_token);
        s->out_idx = malloc((size_t)s->index_bytes * (size_t)s->capacity * (size_t)s->per_token);
        s->picked = malloc(sizeof(uint32_t) * (size_t)s->n);
        s->chosen = malloc(sizeof(int) * (size_t)s->per_token);
        s->head_entries = malloc(sizeof(OutlierEntry) * (size_t)s->n_heads * (size_t)s->capacity * (size_t)s->per_token);
        s->head_count = calloc((size_t)s->n_heads, sizeof(int));
        if (!s->out_val || !s->out_idx || !s->picked || !s->chosen || !s->head_entries || !s->head_count) goto oom_state;
        s->fixed_at_append = !s->inner_ops->settle;
    }
    if (!(s->work = malloc(sizeof(float) * (size_t)s->n))) goto oom_state;
    transform_mirror_init(s);
    st->ops = &s->ops;
    st->state = s;
    return 0;
oom_state:
    s->inner_ops = NULL;
    free(s->sink), free(s->out_val), free(s->out_idx), free(s->work), free(s->picked), free(s->chosen);
    free(s->head_entries), free(s->head_count);
    free(s);
oom:
    st->ops->destroy(st->state);
    st->ops = NULL, st->state = NULL;
    snprintf(err, errlen, "out of memory creating a cache stream's transforms");
    return -1;
}

const char *const transform_examples[] = {
    "int:bits=4,rot=hadamard",
    "int:bits=3,rot=random:5,sink=20,outliers=2",
    "q4_0:sink=1,outliers=3",
    "kivi:bits=2,group=16,residual=32,rot=hadamard,sink=3,outliers=2",
    "int:bits=4,prerope,sink=2|int:bits=4,rot=hadamard,outliers=2",
    "int:bits=3,rot=random:7|int:bits=3,sink=1",
    NULL,
};
