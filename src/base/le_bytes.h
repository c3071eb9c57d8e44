// Little-endian integers and floats in a byte buffer: the fixed headers of micro's own file formats
// (models/micro.bin, models/micro.kvq) are read and written with these, whatever the host's order.
#ifndef MICRO_LE_BYTES_H
#define MICRO_LE_BYTES_H

#include <stdint.h>
#include <string.h>

static inline uint32_t le_get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t le_get_u64(const unsigned char *p) { return le_get_u32(p) | (uint64_t)le_get_u32(p + 4) << 32; }
static inline float le_get_f32(const unsigned char *p) {
    uint32_t u = le_get_u32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline void le_put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void le_put_u64(unsigned char *p, uint64_t v) {
    le_put_u32(p, (uint32_t)v);
    le_put_u32(p + 4, (uint32_t)(v >> 32));
}
static inline void le_put_f32(unsigned char *p, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    le_put_u32(p, u);
}

#endif
