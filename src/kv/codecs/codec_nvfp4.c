// NVFP4 as a cache codec: nvfp4[:scale2=token|calib|none][,4over6].
//
// Each head's vector at one token is cut into blocks of 16 numbers. A block stores an FP8 E4M3
// scale s_b and 16 E2M1 elements; above the blocks sits a second-level fp32 scale s_2 (formats.h:
// s_b = E4M3((amax_b / 6) / s_2), elements E2M1(x / (s_2·s_b))). NVIDIA's recipe takes s_2 per
// tensor, amax / (448·6); a cache has no tensor to take it from before the tokens arrive, so:
//   scale2=token  s_2 per head per token from the vector's own amax, stored in fp32 and counted
//                 (4 + 8/16 + 32/head_dim bits: 5.5 at head_dim 32);
//   scale2=calib  s_2 per layer and stream, NVIDIA's per-tensor recipe with the tensor's amax taken
//                 from calibration: amax / (448·6), amax the largest magnitude `micro calibrate` saw
//                 in that layer's stream (models/micro.kvq version 2: keys after RoPE, or before it
//                 under the prerope transform; values). Like kvquant's calibrated ranges it lives in
//                 the artefact, not in the cache: 4.5 bits. A token beyond the calibrated range
//                 clamps, it does not overflow: its block's scale saturates at E4M3's 448 and its
//                 elements at E2M1's 6, so a number reads back as at most ±6·448·s_2 = ±amax (with
//                 4over6, s_2 = amax / (256·6): ±1.75·amax); the block's smaller numbers keep
//                 their steps of 448·s_2. Rotations (rot=) are refused: the maxima are of unrotated
//                 vectors.
//   scale2=none   s_2 = 1: the E4M3 block scales alone carry the range (4.5 bits), which micro's
//                 keys and values (magnitudes well inside E4M3's 2^−9 .. 448) allow.
//   4over6        each block also tries the scale target amax_b / 4 and keeps whichever of the two
//                 reads back with the smaller squared error (vLLM's nvfp4_4over6); with scale2=token
//                 s_2 is then amax / (256·6) so that the larger block scales stay under 448.
// Attention reads the blocks back number by number (codec_core's fallback), each element a lookup
// in E2M1's decode table times the block's scale.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq_view.h"
#include "quant.h"
#include "codec_core.h"
#include "codecs.h"
#include "formats.h"

enum { NV_BLOCK = 16, NV_BLOCK_BYTES = 1 + NV_BLOCK / 2 };

typedef struct {
    CodecRows r; // a head at a token: [fp32 s_2 when token_scale][blocks: E4M3 scale, 8 bytes of E2M1 pairs]
    int head_dim;
    int token_scale, four_over_six;
    float s2; // the second-level scale when it is not per token: calibrated, or 1 (none)
    const float *e2m1; // mx_elem_table(MX_E2M1)
} Nvfp4State;

static void nvfp4_append(void *state, const float *x) {
    Nvfp4State *s = state;
    uint8_t codes[NV_BLOCK];
    for (int h = 0; h < s->r.n_heads; h++) {
        const float *v = x + h * s->head_dim;
        uint8_t *row = codec_row(&s->r, h, s->r.length);
        float s2 = s->s2;
        if (s->token_scale) {
            s2 = nvfp4_second_scale(quant_absmax(v, s->head_dim), s->four_over_six);
            memcpy(row, &s2, sizeof s2);
            row += sizeof s2;
        }
        for (int b = 0; b * NV_BLOCK < s->head_dim; b++) {
            uint8_t *block = row + (size_t)b * NV_BLOCK_BYTES;
            block[0] = nvfp4_block_encode(v + b * NV_BLOCK, NV_BLOCK, s2, s->four_over_six, codes);
            quant_pack(block + 1, codes, NV_BLOCK, 4);
        }
    }
    s->r.length++;
}

static void nvfp4_read(const void *state, int head, int t, float *out) {
    const Nvfp4State *s = state;
    const uint8_t *row = codec_row(&s->r, head, t);
    float s2 = s->s2;
    if (s->token_scale) {
        memcpy(&s2, row, sizeof s2);
        row += sizeof s2;
    }
    for (int b = 0; b * NV_BLOCK < s->head_dim; b++) {
        const uint8_t *block = row + (size_t)b * NV_BLOCK_BYTES;
        const float scale = s2 * quant_e4m3_to_fp32(block[0]);
        for (int i = 0; i < NV_BLOCK / 2; i++) { // quant_pack's order: element 2i low nibble, 2i+1 high
            out[b * NV_BLOCK + 2 * i] = s->e2m1[block[1 + i] & 15] * scale;
            out[b * NV_BLOCK + 2 * i + 1] = s->e2m1[block[1 + i] >> 4] * scale;
        }
    }
}

CODEC_ROWS_OPS_BY_READ(nvfp4);

// scale2=calib: the layer's stream's calibrated amax (the stream places the codec in its layer; a
// spec checked before any model is loaded takes layer 0's) as s_2. The transforms the stream applies
// before this codec are in the spec: prerope picks the pre-RoPE keys' maximum; a rotation has none.
static int calibrated_scale(CodecSpec *spec, int four_over_six, int n_heads, int head_dim, float *s2, char *err,
                            size_t errlen) {
    const char *rot = spec_string(spec, "rot");
    const int is_key = !spec_is_value(spec);
    int layer;
    if (spec_int(spec, "layer", -1, 0, 1 << 20, &layer, err, errlen)) return -1;
    if (rot && strcmp(rot, "none") != 0) {
        snprintf(err, errlen, "nvfp4: scale2=calib holds maxima of unrotated vectors: with rot=%.20s use scale2=token", rot);
        return -1;
    }
    const KvqStream which = !is_key ? KVQ_MAX_VALUE : spec_flag(spec, "prerope") ? KVQ_MAX_KEY_PREROPE : KVQ_MAX_KEY;
    float amax;
    if (kvq_view_stream_max("nvfp4:scale2=calib", layer < 0 ? 0 : layer, which, n_heads, head_dim, &amax, err, errlen))
        return -1;
    *s2 = nvfp4_second_scale(amax, four_over_six);
    return 0;
}

static void *nvfp4_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                          size_t normalised_len, char *err, size_t errlen) {
    const char *scale2 = spec_string(spec, "scale2");
    const int four_over_six = spec_flag(spec, "4over6");
    const int token_scale = !scale2 || strcmp(scale2, "token") == 0, calib = scale2 && strcmp(scale2, "calib") == 0;
    if (!token_scale && !calib && strcmp(scale2, "none") != 0) {
        snprintf(err, errlen, "nvfp4: scale2=%.20s: expected token, calib or none", scale2);
        return NULL;
    }
    if (codec_check_shape("nvfp4", n_heads, head_dim, capacity, NV_BLOCK, err, errlen)) return NULL;
    float s2 = 1.0f;
    if (calib && calibrated_scale(spec, four_over_six, n_heads, head_dim, &s2, err, errlen)) return NULL;
    snprintf(normalised, normalised_len, "nvfp4:scale2=%s%s", token_scale ? "token" : calib ? "calib" : "none",
             four_over_six ? ",4over6" : "");
    Nvfp4State *s = calloc(1, sizeof *s);
    if (s) {
        s->head_dim = head_dim, s->token_scale = token_scale, s->four_over_six = four_over_six, s->s2 = s2;
        s->e2m1 = mx_elem_table(MX_E2M1);
        codec_rows_alloc(&s->r, n_heads, (token_scale ? sizeof(float) : 0) + (size_t)(head_dim / NV_BLOCK) * NV_BLOCK_BYTES,
                         capacity);
    }
    return codec_created(s, s && s->r.rows, codec_rows_destroy, err, errlen);
}

const CodecFamily CODEC_FAMILY(codec_nvfp4) = {
    .name = "nvfp4", .ops = &nvfp4_ops, .create = nvfp4_create,
    .help = "nvfp4[:scale2=S]     NVFP4: E2M1 in blocks of 16 with an E4M3 scale; S=token (fp32 per head per "
            "token, 5.5 bits), calib (per layer, models/micro.kvq) or none (4.5), 4over6",
    .examples = (const char *const[]){"nvfp4", "nvfp4:4over6", "nvfp4:scale2=none", "nvfp4:4over6|nvfp4", NULL},
    .calibrated_examples = (const char *const[]){"nvfp4:scale2=calib", "nvfp4:scale2=calib|nvfp4:scale2=calib,4over6", NULL}};
