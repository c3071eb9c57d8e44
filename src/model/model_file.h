// models/micro.bin: reading (validated before anything is trusted) and writing. Format: docs/model-format.md.
#ifndef MICRO_MODEL_FILE_H
#define MICRO_MODEL_FILE_H

#include <stddef.h>

#include "model.h"

#define MODEL_FILE_MAGIC "MICROLM\0"
// Version 1: multi-head and grouped-query models, a 68-byte header. Version 2: latent attention,
// the same header and then latent_dim and rope_dim (76 bytes). A model is written in the lowest
// version that holds it, so micro.bin stays version 1.
#define MODEL_FILE_VERSION 1u
#define MODEL_FILE_VERSION_LATENT 2u
#define MODEL_FILE_HEADER_BYTES 68
#define MODEL_FILE_HEADER_BYTES_LATENT 76
// The header's length for a model of this config.
static inline size_t model_file_header_bytes(const ModelConfig *c) {
    return c->latent_dim > 0 ? MODEL_FILE_HEADER_BYTES_LATENT : MODEL_FILE_HEADER_BYTES;
}

// Loads and validates path into m. On failure writes one line naming the problem to err, leaves m
// empty and returns -1 (callers exit with status 2).
int model_load(Model *m, const char *path, char *err, size_t errlen);
// The same checks on a file's bytes already in memory (the fuzz harness's entry point); `label`
// names it in messages.
int model_load_bytes(Model *m, const void *bytes, size_t n, const char *label, char *err, size_t errlen);
// Writes m to path (atomically: a temporary file renamed into place). -1 with a message on failure.
int model_save(const Model *m, const char *path, char *err, size_t errlen);
// 64-bit FNV-1a over the payload bytes, as stored in the header.
unsigned long long model_checksum(const void *bytes, size_t n);

#endif
