// Shared codec plumbing (codec_core.h). Plain C, compiled once: nothing here is a kernel.
#include "codec_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int codec_check_shape(const char *family, int n_heads, int head_dim, int capacity, int multiple, char *err,
                      size_t errlen) {
    if (n_heads >= 1 && capacity >= 1 && head_dim >= multiple && head_dim % multiple == 0 && head_dim <= MICRO_MAX_WIDTH)
        return 0;
    snprintf(err, errlen,
             "%s: needs head_dim a multiple of %d from %d to %d and at least one head and token "
             "(got head_dim %d, %d heads, %d tokens)",
             family, multiple, multiple, MICRO_MAX_WIDTH, head_dim, n_heads, capacity);
    return -1;
}

// Block i + 4's state, and what fn reads of block i + 2 (its state asked for two blocks ago).
static void per_block_ahead(const CodecBlocks *b, CodecStateAheadFn ahead, int head, int i, int n) {
    if (!ahead) return;
    if ((i + 4) * b->block < n) __builtin_prefetch(b->states[i + 4]);
    if ((i + 2) * b->block < n) ahead(b->states[i + 2], head);
}

void codec_scores_per_block(const CodecBlocks *b, CodecStateScoresFn fn, CodecStateAheadFn ahead, int head,
                            const float *q, float *out, int n) {
    for (int i = 0; i * b->block < n; i++) {
        const int m = n - i * b->block < b->block ? n - i * b->block : b->block;
        per_block_ahead(b, ahead, head, i, n);
        fn(b->states[i], head, q, out + (size_t)i * b->block, m);
    }
}

void codec_mix_per_block(const CodecBlocks *b, CodecStateScoresFn fn, CodecStateAheadFn ahead, int head_dim, int head,
                         const float *p, float *out, int n) {
    float part[MICRO_MAX_WIDTH];
    for (int i = 0; i * b->block < n; i++) {
        const int m = n - i * b->block < b->block ? n - i * b->block : b->block;
        per_block_ahead(b, ahead, head, i, n);
        fn(b->states[i], head, p + (size_t)i * b->block, i == 0 ? out : part, m);
        if (i > 0)
            for (int d = 0; d < head_dim; d++) out[d] += part[d];
    }
}

// One pass over the tokens as over one stream, each read from its block: a paged stream gives the
// bits of a contiguous one.
void codec_scores_by_read(const CodecBlocks *b, CodecReadFn read, int head_dim, int head, const float *q,
                                 float *out, int n) {
    float x[MICRO_MAX_WIDTH];
    for (int j = 0; j < n; j++) {
        int local;
        const void *state = codec_block(b, j, &local);
        read(state, head, local, x);
        float acc = 0.0f;
        for (int d = 0; d < head_dim; d++) acc += q[d] * x[d];
        out[j] = acc;
    }
}

void codec_mix_by_read(const CodecBlocks *b, CodecReadFn read, int head_dim, int head, const float *p,
                              float *out, int n) {
    float x[MICRO_MAX_WIDTH];
    memset(out, 0, sizeof(float) * (size_t)head_dim);
    for (int j = 0; j < n; j++) {
        int local;
        const void *state = codec_block(b, j, &local);
        read(state, head, local, x);
        for (int d = 0; d < head_dim; d++) out[d] += p[j] * x[d];
    }
}

void *codec_created(void *state, int allocated, void (*destroy)(void *), char *err, size_t errlen) {
    if (state && allocated) return state;
    destroy(state);
    snprintf(err, errlen, "out of memory allocating a cache stream");
    return NULL;
}

int codec_rows_alloc(CodecRows *r, int n_heads, size_t row_bytes, int capacity) {
    r->n_heads = n_heads, r->row_bytes = row_bytes;
    r->rows = calloc((size_t)capacity * (size_t)n_heads, row_bytes);
    return r->rows ? 0 : -1;
}

void codec_rows_destroy(void *state) {
    CodecRows *r = state;
    if (r) free(r->rows);
    free(r);
}

void codec_rows_copy(void *dst, const void *src) {
    CodecRows *d = dst;
    const CodecRows *s = src;
    memcpy(d->rows, s->rows, (size_t)s->length * (size_t)s->n_heads * s->row_bytes);
    d->length = s->length;
}

size_t codec_rows_bytes(const void *state) {
    const CodecRows *r = state;
    return (size_t)r->length * (size_t)r->n_heads * r->row_bytes;
}
