// models/micro.kvq: the calibration of one model's KV cache: KVQuant's per-channel key ranges and
// outlier thresholds and non-uniform codebooks per layer and stream, and (version 2) each layer's
// and stream's largest magnitude, from which nvfp4:scale2=calib takes its second-level scale.
// Reading (validated before anything is trusted), writing, and lookups. Format: docs/kvq-format.md.
// Written by `micro calibrate`.
#ifndef MICRO_KVQ_FILE_H
#define MICRO_KVQ_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define KVQ_MAGIC "MICROKVQ"
#define KVQ_VERSION 2u // written; version 1 (no stream maxima) is still read
#define KVQ_HEADER_BYTES 96
#define KVQ_MAX_PERCENTS 16
#define KVQ_MAX_BITS 8     // widths 1..8: a codebook holds at most 256 signposts
#define KVQ_PERCENT_ONE 100 // outlier percents are stored in hundredths of a percent: 1% = 100
#define KVQ_PERCENT_LIMIT 5000 // below 50%: some numbers must remain to quantise

typedef enum { KVQ_KEY = 0, KVQ_VALUE = 1 } KvqRole;
typedef enum { KVQ_PLAIN = 0, KVQ_QNORM = 1 } KvqVariant;
// The streams whose largest magnitude a version-2 file holds per layer: keys as a stream's codec gets
// them by default (after RoPE), keys before RoPE (the `prerope` transform), values.
typedef enum { KVQ_MAX_KEY = 0, KVQ_MAX_KEY_PREROPE = 1, KVQ_MAX_VALUE = 2, KVQ_N_MAX = 3 } KvqStream;

typedef struct {
    // the model it belongs to
    int n_layers, n_kv_heads, head_dim;
    uint64_t model_checksum; // the model file's payload checksum (model_checksum of its parameters)
    uint32_t version; // KVQ_VERSION from kvq_init; 1 when loaded from a version-1 file
    // how it was made
    uint32_t sequences, length;
    uint64_t seed;
    unsigned char corpus_sha256[32]; // of the corpus's four files (as micro.json records); zeros: none
    // what it holds
    int n_percents, n_bits;
    uint32_t percents[KVQ_MAX_PERCENTS]; // ascending, hundredths of a percent, each < KVQ_PERCENT_LIMIT
    uint32_t bits[KVQ_MAX_BITS];         // ascending, 1..KVQ_MAX_BITS
    float *ranges;    // [layer][percent][channel] {lo, hi}: pre-RoPE key thresholds (percent 0: min, max)
    float *codebooks; // [layer][role][bits][percent][variant] blocks of 2^bits ascending signposts in [−1, 1]
    float *stream_max; // [layer][KvqStream] max |x| over the calibration's numbers; NULL in version 1
    size_t n_ranges, n_codebooks, n_stream_max; // floats in each
} Kvq;

// Sets the shape and lists and allocates zeroed tables (calibration fills them), version KVQ_VERSION. -1 with err set on
// a bad shape or list, or when out of memory.
int kvq_init(Kvq *k, int n_layers, int n_kv_heads, int head_dim, const uint32_t *percents, int n_percents,
             const uint32_t *bits, int n_bits, char *err, size_t errlen);
void kvq_free(Kvq *k);

// Loads and validates path. With a model, also refuses a file calibrated for another one (shape or
// payload checksum). On failure: one line naming the file and the problem in err, k left empty, -1
// (callers exit with status 2).
int kvq_load(Kvq *k, const char *path, const Model *model, char *err, size_t errlen);
// The same on bytes in memory (the fuzz harness's entry point); label names them in messages.
int kvq_load_bytes(Kvq *k, const void *bytes, size_t n, const Model *model, const char *label, char *err,
                   size_t errlen);
// Writes k to path atomically (temporary file renamed into place), in k->version's form (a file
// loaded from version 1 is written back as version 1). -1 with a message on failure.
int kvq_save(const Kvq *k, const char *path, char *err, size_t errlen);
// The exact encoded size, or 0 when the shape's sizes overflow.
size_t kvq_file_bytes(const Kvq *k);

// Index of an outlier percent (hundredths) or a width in the file's lists, or -1 when absent.
int kvq_percent_index(const Kvq *k, uint32_t percent_hundredths);
int kvq_bits_index(const Kvq *k, int bits);
// {lo, hi} of a key channel (head · head_dim + dim) at a percent index: entries outside are outliers.
const float *kvq_key_range(const Kvq *k, int layer, int percent_index, int channel);
float *kvq_key_range_mut(Kvq *k, int layer, int percent_index, int channel);
// The 2^bits signposts of a layer, role, width index, percent index and variant.
const float *kvq_codebook(const Kvq *k, int layer, KvqRole role, int bits_index, int percent_index,
                          KvqVariant variant);
float *kvq_codebook_mut(Kvq *k, int layer, KvqRole role, int bits_index, int percent_index, KvqVariant variant);
// The largest magnitude of a layer's stream; NULL in a version-1 file.
const float *kvq_stream_max(const Kvq *k, int layer, KvqStream which);

// The model's payload checksum, as the model file's header stores it.
uint64_t kvq_model_checksum(const Model *m);

// The calibration file a command uses: `given` (a --calib FILE) when set, else the model's path with
// its ".bin" or ".gguf" replaced by ".kvq" (or ".kvq" appended): models/micro.bin → models/micro.kvq,
// qwen.gguf → qwen.kvq. -1 when
// it does not fit in buf.
int kvq_default_path(const char *given, const char *model_path, char *buf, size_t n);

#endif
