// GGUF reading (gguf.h): a cursor over the bytes that refuses to read past them, then the checks
// that make every later use of a count, a length or an offset safe.
#include "gguf.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "le_bytes.h"
#include "msgtext.h"

typedef struct {
    const uint8_t *p, *end;
    int bad; // a read ran past the end
} Cursor;

static const uint8_t *take(Cursor *c, uint64_t n) {
    if (c->bad || n > (uint64_t)(c->end - c->p)) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *at = c->p;
    c->p += n;
    return at;
}
static uint32_t take_u32(Cursor *c) {
    const uint8_t *p = take(c, 4);
    return p ? le_get_u32(p) : 0;
}
static uint64_t take_u64(Cursor *c) {
    const uint8_t *p = take(c, 8);
    return p ? le_get_u64(p) : 0;
}
static GgufString take_string(Cursor *c, uint64_t max) {
    GgufString s = {NULL, take_u64(c)};
    if (s.len > max) c->bad = 1;
    s.ptr = take(c, s.len);
    return s;
}

// Bytes of one value of a fixed-size type; 0 for strings and arrays.
static uint64_t fixed_bytes(uint32_t type) {
    static const uint8_t size[GGUF_N_TYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type < GGUF_N_TYPES ? size[type] : 0;
}

static const char *const type_names[GGUF_N_TYPES] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32", "float32",
                                                     "bool",  "string", "array",  "uint64", "int64",  "float64"};

const char *gguf_shown(GgufString k, char *buf, size_t n) {
    size_t o = 0;
    for (uint64_t i = 0; i < k.len && o + 1 < n && i < 60; i++) buf[o++] = k.ptr[i] >= 0x20 && k.ptr[i] < 0x7f ? (char)k.ptr[i] : '?';
    buf[o] = 0;
    return buf;
}

int gguf_string_is(GgufString s, const char *t) { return s.len == strlen(t) && memcmp(s.ptr, t, s.len) == 0; }

static int same_string(GgufString a, GgufString b) { return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0; }

#define FAIL(...)                                                                   \
    do {                                                                            \
        int n_ = snprintf(err, errlen, "%s: ", label);                              \
        if (n_ >= 0 && (size_t)n_ < errlen) snprintf(err + n_, errlen - (size_t)n_, __VA_ARGS__); \
        gguf_free(g);                                                               \
        return -1;                                                                  \
    } while (0)

int gguf_parse(Gguf *g, const uint8_t *data, size_t size, const char *label, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    Cursor c = {data, data + size, 0};
    const uint8_t *magic = take(&c, 4);
    if (!magic || memcmp(magic, "GGUF", 4) != 0) FAIL("not a GGUF file (no GGUF magic)");
    g->version = take_u32(&c);
    if (c.bad) FAIL("a GGUF file cut short in its header");
    if (g->version != 3) FAIL("GGUF version %u: micro reads version 3", g->version);
    g->n_tensors = take_u64(&c);
    g->n_kv = take_u64(&c);
    if (c.bad) FAIL("a GGUF file cut short in its header");
    if (g->n_kv > GGUF_MAX_KV) FAIL("%llu metadata keys, more than the %d micro reads", (unsigned long long)g->n_kv, GGUF_MAX_KV);
    if (g->n_tensors > GGUF_MAX_TENSORS)
        FAIL("%llu tensors, more than the %d micro reads", (unsigned long long)g->n_tensors, GGUF_MAX_TENSORS);
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) FAIL("out of memory");
    char key[64];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        GgufKv *kv = &g->kv[i];
        kv->key = take_string(&c, 256);
        kv->type = take_u32(&c);
        if (c.bad) FAIL("metadata key %llu is cut short or longer than 256 bytes", (unsigned long long)i);
        if (kv->type >= GGUF_N_TYPES) FAIL("key %s has value type %u, which GGUF does not define", gguf_shown(kv->key, key, sizeof key), kv->type);
        for (uint64_t j = 0; j < i; j++)
            if (same_string(g->kv[j].key, kv->key)) FAIL("key %s is given twice", gguf_shown(kv->key, key, sizeof key));
        uint32_t elem = kv->type;
        kv->count = 1;
        if (kv->type == GGUF_ARRAY) {
            kv->array_type = elem = take_u32(&c);
            kv->count = take_u64(&c);
            if (c.bad) FAIL("key %s: an array cut short", gguf_shown(kv->key, key, sizeof key));
            if (elem >= GGUF_N_TYPES || elem == GGUF_ARRAY)
                FAIL("key %s: an array of type %u (arrays of arrays are not read)", gguf_shown(kv->key, key, sizeof key), elem);
            if (kv->count > GGUF_MAX_ARRAY)
                FAIL("key %s: an array of %llu elements, more than the %u micro reads", gguf_shown(kv->key, key, sizeof key),
                     (unsigned long long)kv->count, GGUF_MAX_ARRAY);
        }
        kv->at = c.p;
        if (elem == GGUF_STRING) {
            for (uint64_t j = 0; j < kv->count && !c.bad; j++) take_string(&c, GGUF_MAX_STRING);
        } else {
            take(&c, fixed_bytes(elem) * kv->count);
        }
        if (c.bad) FAIL("key %s: its value runs past the end of the file", gguf_shown(kv->key, key, sizeof key));
        if (elem == GGUF_BOOL)
            for (uint64_t j = 0; j < kv->count; j++)
                if (kv->at[j] > 1) FAIL("key %s: a bool that is neither 0 nor 1", gguf_shown(kv->key, key, sizeof key));
    }
    uint64_t alignment = 32;
    char why[200];
    const int a = gguf_get_uint(g, "general.alignment", 1, 1u << 16, &alignment, why, sizeof why);
    if (a < 0) FAIL("%s", why);
    if (alignment & (alignment - 1)) FAIL("general.alignment %llu is not a power of two", (unsigned long long)alignment);
    g->alignment = (uint32_t)alignment;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        t->name = take_string(&c, 64); // GGUF_MAX_TENSOR_NAME in ggml
        t->n_dims = (int)take_u32(&c);
        if (c.bad || t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
            FAIL("tensor %llu: its name or dimension count (1..%d) is bad or cut short", (unsigned long long)i, GGUF_MAX_DIMS);
        }
        t->n_elements = 1;
        for (int d = 0; d < t->n_dims; d++) {
            t->dims[d] = take_u64(&c);
            // Every product stays below 2^48: far beyond any model, far from overflow.
            if (t->dims[d] == 0 || t->dims[d] >= (1ull << 48) / t->n_elements) {
                    FAIL("tensor %s: a dimension of 0 or a size beyond 2^48 numbers", gguf_shown(t->name, key, sizeof key));
            }
            t->n_elements *= t->dims[d];
        }
        const uint32_t type = take_u32(&c);
        t->offset = take_u64(&c);
        if (c.bad) {
            FAIL("tensor %llu: its description is cut short", (unsigned long long)i);
        }
        for (uint64_t j = 0; j < i; j++)
            if (same_string(g->tensors[j].name, t->name)) {
                    FAIL("tensor %s is given twice", gguf_shown(t->name, key, sizeof key));
            }
        if (!(t->type = ggml_type_of(type))) {
            const char *name = ggml_type_unread_name(type);
            if (name) FAIL("tensor %s is of type %s, which micro does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                           "Q5_1, Q4_K, Q5_K and Q6_K)", gguf_shown(t->name, key, sizeof key), name);
            FAIL("tensor %s has type %u, which ggml does not define", gguf_shown(t->name, key, sizeof key), type);
        }
        if (t->dims[0] % (uint64_t)t->type->block) {
            FAIL("tensor %s: rows of %llu numbers do not divide into %s's blocks of %d", gguf_shown(t->name, key, sizeof key),
                 (unsigned long long)t->dims[0], t->type->name, t->type->block);
        }
        t->bytes = t->n_elements / (uint64_t)t->type->block * t->type->bytes;
    }
    // The data section starts at the next multiple of the alignment; each tensor within it, aligned.
    const uint64_t here = (uint64_t)(c.p - data), start = (here + alignment - 1) / alignment * alignment;
    if (g->n_tensors > 0 && start > size) { // (a file of metadata alone may end at its last key)
        FAIL("the file ends before its tensor data");
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        if (t->offset % alignment || t->offset > size - start || t->bytes > size - start - t->offset) {
            FAIL("tensor %s: its data (offset %llu, %llu bytes) is unaligned or past the end of the file",
                 gguf_shown(t->name, key, sizeof key), (unsigned long long)t->offset, (unsigned long long)t->bytes);
        }
        t->data = data + start + t->offset;
    }
    return 0;
}

void gguf_free(Gguf *g) {
    free(g->kv);
    free(g->tensors);
    memset(g, 0, sizeof *g);
}

const GgufKv *gguf_find(const Gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (gguf_string_is(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const GgufTensor *gguf_tensor(const Gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (gguf_string_is(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

GgufString gguf_next_string(const uint8_t **at) {
    GgufString s = {*at + 8, le_get_u64(*at)};
    *at += 8 + s.len;
    return s;
}

// A key's pair, or 1 when it is absent, or -1 when it is not a single value of one of the types.
static int typed(const Gguf *g, const char *key, const GgufKv **kv, const uint32_t *types, int n, const char *what,
                 char *err, size_t errlen) {
    if (!(*kv = gguf_find(g, key))) return 1;
    for (int i = 0; i < n; i++)
        if ((*kv)->type == types[i]) return 0;
    snprintf(err, errlen, "key %s is of type %s, not %s", key, type_names[(*kv)->type], what);
    return -1;
}

int gguf_get_uint(const Gguf *g, const char *key, uint64_t lo, uint64_t hi, uint64_t *out, char *err, size_t errlen) {
    static const uint32_t ints[] = {GGUF_UINT8, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32, GGUF_UINT64, GGUF_INT64};
    const GgufKv *kv;
    const int r = typed(g, key, &kv, ints, 8, "an integer", err, errlen);
    if (r) return r;
    const uint8_t *p = kv->at;
    int64_t v;
    switch (kv->type) {
    case GGUF_UINT8: v = p[0]; break;
    case GGUF_INT8: v = (int8_t)p[0]; break;
    case GGUF_UINT16: v = (uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_INT16: v = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_UINT32: v = le_get_u32(p); break;
    case GGUF_INT32: v = (int32_t)le_get_u32(p); break;
    case GGUF_UINT64: v = le_get_u64(p) > INT64_MAX ? -1 : (int64_t)le_get_u64(p); break;
    default: v = (int64_t)le_get_u64(p); break;
    }
    if (v < 0 || (uint64_t)v < lo || (uint64_t)v > hi) {
        snprintf(err, errlen, "key %s = %lld is out of range (%llu..%llu)", key, (long long)v, (unsigned long long)lo,
                 (unsigned long long)hi);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int gguf_get_float(const Gguf *g, const char *key, float *out, char *err, size_t errlen) {
    static const uint32_t floats[] = {GGUF_FLOAT32, GGUF_FLOAT64};
    const GgufKv *kv;
    const int r = typed(g, key, &kv, floats, 2, "a float", err, errlen);
    if (r) return r;
    if (kv->type == GGUF_FLOAT32) {
        *out = le_get_f32(kv->at);
    } else {
        double d;
        const uint64_t u = le_get_u64(kv->at);
        memcpy(&d, &u, sizeof d);
        *out = (float)d;
    }
    return 0;
}

int gguf_get_string(const Gguf *g, const char *key, GgufString *out, char *err, size_t errlen) {
    static const uint32_t strings[] = {GGUF_STRING};
    const GgufKv *kv;
    const int r = typed(g, key, &kv, strings, 1, "a string", err, errlen);
    if (r) return r;
    const uint8_t *at = kv->at;
    *out = gguf_next_string(&at);
    return 0;
}

int gguf_get_bool(const Gguf *g, const char *key, int *out, char *err, size_t errlen) {
    static const uint32_t bools[] = {GGUF_BOOL};
    const GgufKv *kv;
    const int r = typed(g, key, &kv, bools, 1, "a bool", err, errlen);
    if (r) return r;
    *out = kv->at[0];
    return 0;
}

int gguf_map(const char *path, const uint8_t **data, size_t *size, char *err, size_t errlen) {
    char shown[MSG_TEXT];
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); // never blocks on a FIFO
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        if (fd >= 0) close(fd);
        snprintf(err, errlen, "%s: not a regular, non-empty file", msg_text(path, shown, sizeof shown));
        return -1;
    }
    // Mapped, not read: the weights are decoded straight from the file into micro's buffer.
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: cannot map it", msg_text(path, shown, sizeof shown));
        return -1;
    }
    *data = map, *size = (size_t)st.st_size;
    return 0;
}

void gguf_unmap(const uint8_t *data, size_t size) { munmap((void *)data, size); }

void gguf_release(const uint8_t *data, uint64_t bytes) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t from = (uintptr_t)data & ~(page - 1), to = ((uintptr_t)data + bytes + page - 1) & ~(page - 1);
    // A hint: refused, the pages stay until gguf_unmap. Dropped pages of a private, unwritten file
    // mapping read back from the file if touched again, so a neighbour's pages lose nothing.
    (void)madvise((void *)from, to - from, MADV_DONTNEED);
}
