// The code store (code_store.h). Writing and reading single tokens is not a kernel: compiled once.
#include "code_store.h"

#include <stdlib.h>
#include <string.h>

size_t code_store_shape(CodeStore *cs, QuantLayout layout, int bits, int n_heads, int head_dim, int capacity) {
    cs->layout = layout;
    cs->bits = bits;
    cs->unit = layout == QUANT_TILES ? QUANT_TILE : layout == QUANT_GROUPS ? 4 / bits : 1;
    cs->units = (capacity + cs->unit - 1) / cs->unit;
    cs->n_heads = n_heads;
    cs->row_bytes = quant_packed_bytes((size_t)head_dim, bits);
    cs->unit_bytes = (size_t)cs->unit * cs->row_bytes;
    cs->codes = NULL;
    return (size_t)n_heads * (size_t)cs->units * cs->unit_bytes;
}

int code_store_init(CodeStore *cs, QuantLayout layout, int bits, int n_heads, int head_dim, int capacity) {
    const size_t bytes = code_store_shape(cs, layout, bits, n_heads, head_dim, capacity);
    cs->codes = calloc(bytes, 1);
    return cs->codes ? 0 : -1;
}

void code_store_free(CodeStore *cs) {
    free(cs->codes);
    cs->codes = NULL;
}

void code_store_copy(CodeStore *dst, const CodeStore *src) {
    memcpy(dst->codes, src->codes, (size_t)src->n_heads * (size_t)src->units * src->unit_bytes);
}

void code_store_put(CodeStore *cs, int head, int token, int c, const uint8_t *q, int n) {
    uint8_t *unit = code_store_unit(cs, head, token / cs->unit);
    if (cs->layout == QUANT_TILES) {
        uint8_t packed[32];
        quant_pack(packed, q, 32, cs->bits);
        quant_tile_put((uint32_t *)(void *)unit + (size_t)c * cs->bits * QUANT_TILE, token % QUANT_TILE, packed,
                       cs->bits);
    } else if (cs->layout == QUANT_GROUPS) {
        quant_group_put(unit + (size_t)c * 16, token % cs->unit, q, 32, cs->bits);
    } else {
        quant_pack(unit + quant_packed_bytes((size_t)c * 32, cs->bits), q, (size_t)n, cs->bits);
    }
}

// A lane's codes of a tile, or a token's of a group, with a constant width (code_store_get's switch),
// so that every shift is a constant and the loop unrolls: the fast evaluator's mirror reads every
// token's codes through here.
static QUANT_ALWAYS_INLINE void tile_get(const uint32_t *w, int lane, uint8_t *q, int n, const int bits) {
    for (int i = 0; i < n; i++) q[i] = (uint8_t)quant_tile_code(w, lane, i, bits);
}

static QUANT_ALWAYS_INLINE void group_get(const uint8_t *chunk, int t, uint8_t *q, int n, const int bits) {
    for (int i = 0; i < n; i++) q[i] = (uint8_t)quant_group_code(chunk, t, i, bits);
}

void code_store_get(const CodeStore *cs, int head, int token, int c, uint8_t *q, int n) {
    const uint8_t *unit = code_store_unit(cs, head, token / cs->unit);
    if (cs->layout == QUANT_TILES) {
        const uint32_t *w = (const uint32_t *)(const void *)unit + (size_t)c * cs->bits * QUANT_TILE;
        const int lane = token % QUANT_TILE;
        switch (cs->bits) {
        case 1: tile_get(w, lane, q, n, 1); break;
        case 2: tile_get(w, lane, q, n, 2); break;
        case 3: tile_get(w, lane, q, n, 3); break;
        case 4: tile_get(w, lane, q, n, 4); break;
        case 5: tile_get(w, lane, q, n, 5); break;
        case 6: tile_get(w, lane, q, n, 6); break;
        case 7: tile_get(w, lane, q, n, 7); break;
        default: tile_get(w, lane, q, n, 8); break;
        }
    } else if (cs->layout == QUANT_GROUPS) {
        const uint8_t *chunk = unit + (size_t)c * 16;
        const int t = token % cs->unit;
        switch (cs->bits) {
        case 1: group_get(chunk, t, q, n, 1); break;
        case 2: group_get(chunk, t, q, n, 2); break;
        default: group_get(chunk, t, q, n, 4); break;
        }
    } else {
        quant_unpack(unit + quant_packed_bytes((size_t)c * 32, cs->bits), q, (size_t)n, cs->bits);
    }
}
