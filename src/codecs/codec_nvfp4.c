// NVFP4 as a cache codec: nvfp4[:scale2=token|none][,4over6].
//
// Each head's vector at one token is cut into blocks of 16 numbers. A block stores an FP8 E4M3
// scale s_b and 16 E2M1 elements; above the blocks sits a second-level fp32 scale s_2 (formats.h:
// s_b = E4M3((amax_b / 6) / s_2), elements E2M1(x / (s_2·s_b))). NVIDIA's recipe takes s_2 per
// tensor, amax / (448·6); a cache has no tensor to take it from before the tokens arrive, so:
//   scale2=token  s_2 per head per token from the vector's own amax, stored in fp32 and counted
//                 (4 + 8/16 + 32/head_dim bits: 5.5 at head_dim 32);
//   scale2=none   s_2 = 1: the E4M3 block scales alone carry the range (4.5 bits), which micro's
//                 keys and values (magnitudes well inside E4M3's 2^−9 .. 448) allow.
// A calibrated per-layer s_2 (from models/micro.kvq) is not implemented: the calibration artefact
// holds no value ranges to take it from.
//   4over6        each block also tries the scale target amax_b / 4 and keeps whichever of the two
//                 reads back with the smaller squared error (vLLM's nvfp4_4over6); with scale2=token
//                 s_2 is then amax / (256·6) so that the larger block scales stay under 448.
// Attention reads the blocks back number by number (codec_core's fallback), each element a lookup
// in E2M1's decode table times the block's scale.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../quant.h"
#include "codec_core.h"
#include "codecs.h"
#include "formats.h"

enum { NV_BLOCK = 16, NV_BLOCK_BYTES = 1 + NV_BLOCK / 2 };

typedef struct {
    CodecRows r; // a head at a token: [fp32 s_2 when token_scale][blocks: E4M3 scale, 8 bytes of E2M1 pairs]
    int head_dim;
    int token_scale, four_over_six;
    const float *e2m1; // mx_elem_table(MX_E2M1)
} Nvfp4State;

static void nvfp4_append(void *state, const float *x) {
    Nvfp4State *s = state;
    uint8_t codes[NV_BLOCK];
    for (int h = 0; h < s->r.n_heads; h++) {
        const float *v = x + h * s->head_dim;
        uint8_t *row = codec_row(&s->r, h, s->r.length);
        float s2 = 1.0f;
        if (s->token_scale) {
            float amax = 0.0f;
            for (int d = 0; d < s->head_dim; d++) amax = fmaxf(amax, fabsf(v[d]));
            s2 = nvfp4_second_scale(amax, s->four_over_six);
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
    float s2 = 1.0f;
    if (s->token_scale) {
        memcpy(&s2, row, sizeof s2);
        row += sizeof s2;
    }
    uint8_t codes[NV_BLOCK];
    for (int b = 0; b * NV_BLOCK < s->head_dim; b++) {
        const uint8_t *block = row + (size_t)b * NV_BLOCK_BYTES;
        const float scale = s2 * quant_e4m3_to_fp32(block[0]);
        quant_unpack(block + 1, codes, NV_BLOCK, 4);
        for (int i = 0; i < NV_BLOCK; i++) out[b * NV_BLOCK + i] = s->e2m1[codes[i]] * scale;
    }
}

CODEC_ROWS_OPS_BY_READ(nvfp4);

static void *nvfp4_create(CodecSpec *spec, int n_heads, int head_dim, int capacity, char *normalised,
                          size_t normalised_len, char *err, size_t errlen) {
    const char *scale2 = spec_string(spec, "scale2");
    const int four_over_six = spec_flag(spec, "4over6");
    if (scale2 && strcmp(scale2, "token") != 0 && strcmp(scale2, "none") != 0) {
        snprintf(err, errlen, "nvfp4: scale2=%.20s: expected token or none", scale2);
        return NULL;
    }
    if (codec_check_shape("nvfp4", n_heads, head_dim, capacity, NV_BLOCK, err, errlen)) return NULL;
    const int token_scale = !scale2 || strcmp(scale2, "token") == 0;
    snprintf(normalised, normalised_len, "nvfp4:scale2=%s%s", token_scale ? "token" : "none",
             four_over_six ? ",4over6" : "");
    Nvfp4State *s = calloc(1, sizeof *s);
    if (s) {
        s->head_dim = head_dim, s->token_scale = token_scale, s->four_over_six = four_over_six;
        s->e2m1 = mx_elem_table(MX_E2M1);
        codec_rows_alloc(&s->r, n_heads, (token_scale ? sizeof(float) : 0) + (size_t)(head_dim / NV_BLOCK) * NV_BLOCK_BYTES,
                         capacity);
    }
    return codec_created(s, s && s->r.rows, codec_rows_destroy, err, errlen);
}

const CodecFamily CODEC_FAMILY(codec_nvfp4) = {
    .name = "nvfp4", .ops = &nvfp4_ops, .create = nvfp4_create,
    .help = "nvfp4[:scale2=S]     NVFP4: E2M1 in blocks of 16 with an E4M3 scale; S=token (fp32 per head per "
            "token, 5.5 bits) or none (4.5), 4over6; head_dim a multiple of 16"};
