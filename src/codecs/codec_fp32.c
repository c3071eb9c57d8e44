// fp32: the reference codec. Stores every number as it is; every delta is measured against it.
// Keys and values are laid out for the kernel that reads them: keys in tiles of 16 tokens stored
// dimension-major, so a score kernel computes 16 dot products at once with no horizontal sums;
// values token-major, so the mix kernel adds whole vectors.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_core.h"
#include "codecs.h"

#define TILE 16

typedef struct {
    int n_heads, head_dim, capacity, length, is_key;
    int tiles;   // per head, keys only
    float *data; // keys: [head][tile][head_dim][TILE]; values: [head][token][head_dim]
} Fp32State;

static void fp32_destroy(void *state) {
    Fp32State *s = state;
    if (s) free(s->data);
    free(s);
}

static void *fp32_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                         size_t normalised_len, char *err, size_t errlen) {
    const char *role = spec_string(spec, "role");
    Fp32State *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->n_heads = n_heads, s->head_dim = head_dim, s->capacity = capacity;
    s->is_key = !role || strcmp(role, "v") != 0;
    s->tiles = (capacity + TILE - 1) / TILE;
    size_t per_head = s->is_key ? (size_t)s->tiles * TILE * head_dim : (size_t)capacity * head_dim;
    // Zeroed so the unused lanes of a partial key tile hold finite numbers.
    s->data = calloc((size_t)n_heads * per_head, sizeof(float));
    if (!s->data) goto oom;
    snprintf(normalised, normalised_len, "fp32");
    return s;
oom:
    fp32_destroy(s);
    snprintf(err, errlen, "out of memory allocating an fp32 cache stream");
    return NULL;
}

static float *key_tile(const Fp32State *s, int head, int tile) {
    return s->data + ((size_t)head * s->tiles + tile) * TILE * s->head_dim;
}

static void fp32_append(void *state, const float *vec) {
    Fp32State *s = state;
    int hd = s->head_dim, t = s->length;
    for (int h = 0; h < s->n_heads; h++) {
        if (s->is_key) {
            float *tile = key_tile(s, h, t / TILE);
            for (int d = 0; d < hd; d++) tile[d * TILE + t % TILE] = vec[h * hd + d];
        } else {
            memcpy(s->data + ((size_t)h * s->capacity + t) * hd, vec + h * hd, sizeof(float) * (size_t)hd);
        }
    }
    s->length++;
}

// The tile of 16 keys holding token t of one head, in whichever block it lies (blocks hold whole
// tiles: a pool's block is a multiple of 16 tokens).
static const float *fp32_tile(const CodecBlocks *b, int head, int t) {
    int local;
    const Fp32State *s = codec_block(b, t, &local);
    return key_tile(s, head, local / TILE);
}

// Four tiles (64 tokens) at a time: four independent accumulators hide the FMA latency that a
// single 16-lane accumulator over head_dim steps would wait on.
static void fp32_scores(const CodecBlocks *b, int head, const float *q, float *out, int n) {
    const int hd = b->head_dim;
    int t0 = 0;
    for (; t0 + 4 * TILE <= n; t0 += 4 * TILE) {
        const float *k0 = fp32_tile(b, head, t0);
        float a0[TILE] = {0}, a1[TILE] = {0}, a2[TILE] = {0}, a3[TILE] = {0};
        if (n <= b->block || t0 % b->block + 4 * TILE <= b->block) { // one block: the tiles follow one another
            const int tile_floats = TILE * hd;
            for (int d = 0; d < hd; d++) {
                const float qd = q[d], *r = k0 + d * TILE;
#pragma omp simd
                for (int l = 0; l < TILE; l++) {
                    a0[l] += qd * r[l];
                    a1[l] += qd * r[tile_floats + l];
                    a2[l] += qd * r[2 * tile_floats + l];
                    a3[l] += qd * r[3 * tile_floats + l];
                }
            }
        } else {
            const float *k1 = fp32_tile(b, head, t0 + TILE), *k2 = fp32_tile(b, head, t0 + 2 * TILE),
                        *k3 = fp32_tile(b, head, t0 + 3 * TILE);
            for (int d = 0; d < hd; d++) {
                const float qd = q[d];
                const size_t r = (size_t)d * TILE;
#pragma omp simd
                for (int l = 0; l < TILE; l++) {
                    a0[l] += qd * k0[r + l];
                    a1[l] += qd * k1[r + l];
                    a2[l] += qd * k2[r + l];
                    a3[l] += qd * k3[r + l];
                }
            }
        }
        memcpy(out + t0, a0, sizeof a0);
        memcpy(out + t0 + TILE, a1, sizeof a1);
        memcpy(out + t0 + 2 * TILE, a2, sizeof a2);
        memcpy(out + t0 + 3 * TILE, a3, sizeof a3);
    }
    for (; t0 < n; t0 += TILE) {
        const float *tile = fp32_tile(b, head, t0);
        float acc[TILE] = {0};
        for (int d = 0; d < hd; d++)
#pragma omp simd
            for (int l = 0; l < TILE; l++) acc[l] += q[d] * tile[d * TILE + l];
        int m = n - t0 < TILE ? n - t0 : TILE;
        memcpy(out + t0, acc, sizeof(float) * (size_t)m);
    }
}

// Sums even and odd tokens in separate accumulators (two FMA chains instead of one), 32 dimensions
// per pass so each value row is read once. The sums run on from block to block (blocks hold an even
// number of tokens), so a paged stream gives the bits of a contiguous one.
static void fp32_mix(const CodecBlocks *b, int head, const float *p, float *out, int n) {
    const int hd = b->head_dim;
    int d0 = 0;
    for (; d0 + 2 * TILE <= hd; d0 += 2 * TILE) {
        float even[2 * TILE] = {0}, odd[2 * TILE] = {0};
        for (int j0 = 0; j0 < n; j0 += b->block) {
            const Fp32State *s = b->states[j0 / b->block];
            const float *v = s->data + (size_t)head * s->capacity * hd; // token j0 of the stream
            const int j1 = n - j0 < b->block ? n : j0 + b->block;
            int j = j0;
            for (; j + 2 <= j1; j += 2) {
                const float *r0 = v + (size_t)(j - j0) * hd + d0, *r1 = r0 + hd;
                const float w0 = p[j], w1 = p[j + 1];
#pragma omp simd
                for (int l = 0; l < 2 * TILE; l++) {
                    even[l] += w0 * r0[l];
                    odd[l] += w1 * r1[l];
                }
            }
            for (; j < j1; j++) {
                const float *r0 = v + (size_t)(j - j0) * hd + d0;
#pragma omp simd
                for (int l = 0; l < 2 * TILE; l++) even[l] += p[j] * r0[l];
            }
        }
        for (int l = 0; l < 2 * TILE; l++) out[d0 + l] = even[l] + odd[l];
    }
    for (; d0 < hd; d0++) {
        float acc = 0;
        for (int j = 0; j < n; j++) {
            int local;
            const Fp32State *s = codec_block(b, j, &local);
            acc += p[j] * s->data[((size_t)head * s->capacity + (size_t)local) * hd + (size_t)d0];
        }
        out[d0] = acc;
    }
}

static void fp32_read(const void *state, int head, int token, float *out) {
    const Fp32State *s = state;
    if (s->is_key) {
        const float *tile = key_tile(s, head, token / TILE);
        for (int d = 0; d < s->head_dim; d++) out[d] = tile[d * TILE + token % TILE];
    } else {
        memcpy(out, s->data + ((size_t)head * s->capacity + token) * s->head_dim, sizeof(float) * (size_t)s->head_dim);
    }
}

static size_t fp32_bytes(const void *state) {
    const Fp32State *s = state;
    return sizeof(float) * (size_t)s->length * s->n_heads * s->head_dim;
}


CODEC_OPS(fp32, NULL, NULL);

const CodecFamily CODEC_FAMILY(codec_fp32) = {.name = "fp32", .ops = &fp32_ops, .create = fp32_create,
    .help = "fp32                 full precision, the reference (32 bits per number)"};
