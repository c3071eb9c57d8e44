// A GGUF file (version 3, ggml's docs/gguf.md) read from bytes in memory: its key/value metadata and
// its tensors' names, shapes, types and data, every count, length and offset checked against the
// bytes before it is trusted. The bytes are not copied: strings and data point into them.
#ifndef MICRO_GGUF_H
#define MICRO_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "ggml_types.h"

// GGUF's value types.
enum {
    GGUF_UINT8, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32, GGUF_BOOL,
    GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64, GGUF_N_TYPES
};

// Limits that refuse nonsense before anything is sized by it, far beyond any model micro reads.
#define GGUF_MAX_KV 4096
#define GGUF_MAX_TENSORS 65536
#define GGUF_MAX_STRING (1u << 20)  // bytes in one string (a key at most 256)
#define GGUF_MAX_ARRAY (1u << 24)   // elements of one array (a vocabulary of 152k, its merges)
#define GGUF_MAX_DIMS 4

typedef struct {
    const uint8_t *ptr; // not NUL-terminated
    uint64_t len;
} GgufString;

typedef struct {
    GgufString key;
    uint32_t type;       // GGUF_*
    uint32_t array_type; // for GGUF_ARRAY: its elements' type (never an array)
    uint64_t count;      // for GGUF_ARRAY: its length
    const uint8_t *at;   // the value's bytes (an array's first element)
} GgufKv;

typedef struct {
    GgufString name;
    int n_dims;
    uint64_t dims[GGUF_MAX_DIMS]; // innermost first, as ggml lists them
    uint64_t n_elements;
    const GgmlType *type;
    uint64_t offset; // in the data section, as the file gives it
    const uint8_t *data;
    uint64_t bytes;
} GgufTensor;

typedef struct {
    uint32_t version;
    GgufKv *kv;
    uint64_t n_kv;
    GgufTensor *tensors;
    uint64_t n_tensors;
    uint32_t alignment;
} Gguf;

// Parses size bytes at data; label names the file in messages. 0, or -1 with one line in err.
int gguf_parse(Gguf *g, const uint8_t *data, size_t size, const char *label, char *err, size_t errlen);
void gguf_free(Gguf *g);
// A file's bytes, mapped read-only (a regular, non-empty file); 0, or -1 with one line in err.
int gguf_map(const char *path, const uint8_t **data, size_t *size, char *err, size_t errlen);
void gguf_unmap(const uint8_t *data, size_t size);
// Gives back the resident pages of bytes at data, inside gguf_map's mapping (never other memory:
// anonymous pages would read back as zeros).
void gguf_release(const uint8_t *data, uint64_t bytes);

// The pair with this key, or NULL.
const GgufKv *gguf_find(const Gguf *g, const char *key);
// The tensor of this name, or NULL.
const GgufTensor *gguf_tensor(const Gguf *g, const char *name);
// A string of the file as a message shows it: printable ASCII, at most 60 bytes, '?' for any other
// byte; into buf (n bytes), which is returned.
const char *gguf_shown(GgufString s, char *buf, size_t n);
// Whether s holds exactly the text t.
int gguf_string_is(GgufString s, const char *t);

// Typed reads of a key: 0 with the value, 1 when the key is absent, -1 with one line in err when it
// has another type or its value is out of the range asked.
int gguf_get_uint(const Gguf *g, const char *key, uint64_t lo, uint64_t hi, uint64_t *out, char *err, size_t errlen);
int gguf_get_float(const Gguf *g, const char *key, float *out, char *err, size_t errlen);
int gguf_get_string(const Gguf *g, const char *key, GgufString *out, char *err, size_t errlen);
int gguf_get_bool(const Gguf *g, const char *key, int *out, char *err, size_t errlen);
// The string at *at (an array of strings' elements one after another, from kv->at; gguf_parse
// checked every one), *at moved past it.
GgufString gguf_next_string(const uint8_t **at);

#endif
