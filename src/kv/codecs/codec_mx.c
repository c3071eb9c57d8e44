// OCP Microscaling (MX v1.0) as a cache codec: mx:elem=E.
//
// Each head's vector at one token is cut into blocks of 32 numbers (at micro's head_dim 32: one
// block per head per token). A block stores one E8M0 scale 2^X, X = floor(log2 max|v|) − emax_elem,
// and 32 elements, each v / 2^X rounded to nearest even in the element format and saturated to its
// largest value (formats.h). E is one of e2m1 (FP4), e2m3 and e3m2 (FP6), e4m3 and e5m2 (FP8) and
// int8, so a number costs its element's bits plus 8/32: 4.25, 6.25 and 8.25 bits.
//
// Attention reads the blocks back number by number (codec_core's fallback), each element a lookup
// in its format's decode table times the block scale: the family is here for what the format costs
// in loss, not for speed.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "codec_core.h"
#include "codecs.h"
#include "formats.h"

enum { MX_BLOCK = 32 };

typedef struct {
    CodecRows r; // a head at a token: its blocks (scale + packed elements)
    int head_dim;
    MxElem elem;
    const float *decode; // mx_elem_table(elem)
    int bits;
    size_t block_bytes;
} MxState;

static void mx_append(void *state, const float *x) {
    MxState *s = state;
    uint8_t codes[MX_BLOCK];
    for (int h = 0; h < s->r.n_heads; h++) {
        uint8_t *row = codec_row(&s->r, h, s->r.length);
        for (int b = 0; b * MX_BLOCK < s->head_dim; b++) {
            uint8_t *block = row + (size_t)b * s->block_bytes;
            mx_block_encode(s->elem, x + h * s->head_dim + b * MX_BLOCK, MX_BLOCK, block, codes);
            quant_pack(block + 1, codes, MX_BLOCK, s->bits);
        }
    }
    s->r.length++;
}

static void mx_read(const void *state, int head, int t, float *out) {
    const MxState *s = state;
    const uint8_t *row = codec_row(&s->r, head, t);
    uint8_t codes[MX_BLOCK];
    for (int b = 0; b * MX_BLOCK < s->head_dim; b++) {
        const uint8_t *block = row + (size_t)b * s->block_bytes;
        const float scale = mx_scale_decode(block[0]);
        const uint8_t *packed = block + 1;
        if (s->bits == 8) // one code a byte, and FP4 two a byte (quant_pack's order: the low nibble
            memcpy(codes, packed, MX_BLOCK); // first): cheaper than the general unpacking
        else if (s->bits == 4)
            for (int i = 0; i < MX_BLOCK / 2; i++) codes[2 * i] = packed[i] & 15, codes[2 * i + 1] = packed[i] >> 4;
        else
            quant_unpack(packed, codes, MX_BLOCK, s->bits);
        for (int i = 0; i < MX_BLOCK; i++) out[b * MX_BLOCK + i] = s->decode[codes[i]] * scale;
    }
}

CODEC_ROWS_OPS_BY_READ(mx);

static void *mx_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                       size_t normalised_len, char *err, size_t errlen) {
    const char *name = spec_string(spec, "elem");
    const int elem = name ? mx_elem_from_name(name) : MX_E2M1;
    if (elem < 0) {
        snprintf(err, errlen, "mx: elem=%.20s: expected e2m1, e2m3, e3m2, e4m3, e5m2 or int8", name);
        return NULL;
    }
    if (codec_check_shape("mx", n_heads, head_dim, capacity, MX_BLOCK, err, errlen)) return NULL;
    snprintf(normalised, normalised_len, "mx:elem=%s", mx_elem_info((MxElem)elem)->name);
    MxState *s = calloc(1, sizeof *s);
    if (s) {
        s->head_dim = head_dim, s->elem = (MxElem)elem, s->bits = mx_elem_info(s->elem)->bits;
        s->decode = mx_elem_table(s->elem);
        s->block_bytes = 1 + quant_packed_bytes(MX_BLOCK, s->bits);
        codec_rows_alloc(&s->r, n_heads, (size_t)(head_dim / MX_BLOCK) * s->block_bytes, capacity);
    }
    return codec_created(s, s && s->r.rows, codec_rows_destroy, err, errlen);
}

const CodecFamily CODEC_FAMILY(codec_mx) = {
    .name = "mx", .ops = &mx_ops, .create = mx_create,
    .help = "mx:elem=E            OCP Microscaling: blocks of 32 with an E8M0 scale, E=e2m1 (4.25 bits), "
            "e2m3, e3m2 (6.25), e4m3, e5m2, int8 (8.25); head_dim a multiple of 32",
    .examples = (const char *const[]){"mx:elem=e2m1", "mx:elem=e2m3", "mx:elem=int8", "mx:elem=e2m1|mx:elem=e4m3", NULL}};
