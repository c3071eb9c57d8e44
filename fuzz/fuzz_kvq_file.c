// The calibration-file loader (src/kvq_file.c) on arbitrary bytes: each input is loaded as it is,
// then again with its checksum recomputed, so that mutations of the tables reach the checks after
// the checksum (finite values, thresholds, sorted codebooks) instead of all stopping at it. A load
// either fails with one line or gives tables whose every size agrees with the file.
#include <math.h>

#include "fuzz.h"
#include "kvq_file.h"
#include "model_file.h"

static void load(const uint8_t *data, size_t size) {
    Kvq k;
    char err[512];
    if (kvq_load_bytes(&k, data, size, NULL, "fuzz.kvq", err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        FUZZ_REQUIRE(k.ranges == NULL && k.codebooks == NULL);
        return;
    }
    FUZZ_REQUIRE(size == kvq_file_bytes(&k));
    // The last lookups end exactly at the tables' ends, and every codebook is sorted within [-1, 1].
    int last_bits = k.n_bits - 1, channels = k.n_kv_heads * k.head_dim;
    FUZZ_REQUIRE(kvq_key_range(&k, k.n_layers - 1, k.n_percents - 1, channels - 1) + 2 == k.ranges + k.n_ranges);
    const float *cb = kvq_codebook(&k, k.n_layers - 1, KVQ_VALUE, last_bits, k.n_percents - 1, KVQ_QNORM);
    FUZZ_REQUIRE(cb + (1 << k.bits[last_bits]) == k.codebooks + k.n_codebooks);
    for (size_t i = 0; i < k.n_codebooks; i++) FUZZ_REQUIRE(k.codebooks[i] >= -1.0f && k.codebooks[i] <= 1.0f);
    // Version 2's stream maxima: one per layer and stream, each finite and not negative; none in version 1.
    FUZZ_REQUIRE(k.version == 1 ? k.stream_max == NULL : k.n_stream_max == (size_t)k.n_layers * KVQ_N_MAX);
    for (size_t i = 0; i < k.n_stream_max; i++) FUZZ_REQUIRE(k.stream_max[i] >= 0.0f && isfinite(k.stream_max[i]));
    kvq_free(&k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_as_is_and_resummed(data, size, KVQ_HEADER_BYTES, 88, load);
    return 0;
}
