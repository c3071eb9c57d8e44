// models/micro.bin: reading (validated before anything is trusted) and writing. Format: docs/model-format.md.
#ifndef MICRO_MODEL_FILE_H
#define MICRO_MODEL_FILE_H

#include <stddef.h>

#include "model.h"

#define MODEL_FILE_MAGIC "MICROLM\0"
// Version 1: multi-head and grouped-query models, a 68-byte header. Version 2: latent attention,
// the same header and then latent_dim and rope_dim (76 bytes). Both checksum the payload alone, so
// a changed header field that keeps the parameter count (max_seq_len, rope_theta) went unnoticed.
// Version 3, the one written: every model in version 2's header (latent_dim and rope_dim 0 without
// latent attention), its checksum over every byte of the file but its own eight. Versions 1 and 2
// are still read as they always were (models/ keeps them).
#define MODEL_FILE_VERSION 1u
#define MODEL_FILE_VERSION_LATENT 2u
#define MODEL_FILE_VERSION_WHOLE 3u
#define MODEL_FILE_HEADER_BYTES 68
#define MODEL_FILE_HEADER_BYTES_LATENT 76
#define MODEL_FILE_CHECKSUM_AT 60 // the checksum's offset in every version's header
// The header's length in a file of this version (0 for a version this build does not read).
static inline size_t model_file_header_bytes_of(unsigned version) {
    return version == MODEL_FILE_VERSION ? MODEL_FILE_HEADER_BYTES
           : version == MODEL_FILE_VERSION_LATENT || version == MODEL_FILE_VERSION_WHOLE ? MODEL_FILE_HEADER_BYTES_LATENT
                                                                                           : 0;
}

// Loads and validates path into m. On failure writes one line naming the problem to err, leaves m
// empty and returns -1 (callers exit with status 2).
int model_load(Model *m, const char *path, char *err, size_t errlen);
// The same checks on a file's bytes already in memory (the fuzz harness's entry point); `label`
// names it in messages.
int model_load_bytes(Model *m, const void *bytes, size_t n, const char *label, char *err, size_t errlen);
// Writes m to path (atomically: a temporary file renamed into place). -1 with a message on failure.
int model_save(const Model *m, const char *path, char *err, size_t errlen);
// 64-bit FNV-1a over the payload bytes, as versions 1 and 2 store it (and kvq files name a model by).
unsigned long long model_checksum(const void *bytes, size_t n);
// Version 3's checksum: the same hash over the header's 76 bytes but the checksum's own, then the
// payload's.
unsigned long long model_file_checksum(const unsigned char *header, const void *payload, size_t payload_bytes);

#endif
