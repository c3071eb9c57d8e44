// The model-file loader on arbitrary bytes: each input is loaded as it is, then again with its
// header checksum recomputed, so that mutations of the payload reach the checks after the checksum
// (finite values) instead of all stopping at it. A load either fails with one line or gives a model
// whose every size agrees with its header.
#include "fuzz.h"
#include "le_bytes.h"
#include "model_file.h"

static size_t header_bytes(const uint8_t *data, size_t size) {
    return size >= 12 ? model_file_header_bytes_of(le_get_u32(data + 8)) : 0;
}

static void load(const uint8_t *data, size_t size) {
    Model m;
    char err[512];
    if (model_load_bytes(&m, data, size, "fuzz.bin", err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        FUZZ_REQUIRE(m.params == NULL);
        return;
    }
    FUZZ_REQUIRE(size == header_bytes(data, size) + m.n_params * sizeof(float));
    FUZZ_REQUIRE(m.n_params == model_param_count(&m.config));
    FUZZ_REQUIRE(model_config_validate(&m.config, err, sizeof err) == 0);
    // The weights' pointers cover the buffer exactly: the last tensor ends at its end.
    FUZZ_REQUIRE(m.w.final_norm + m.config.dim == m.params + m.n_params);
    model_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const size_t from = header_bytes(data, size);
    if (size >= 12 && le_get_u32(data + 8) == MODEL_FILE_VERSION_WHOLE) {
        // Version 3's checksum covers the header too: recomputed over both.
        load(data, size);
        if (size < from) return 0;
        uint8_t *copy = malloc(size);
        if (!copy) return 0;
        memcpy(copy, data, size);
        le_put_u64(copy + MODEL_FILE_CHECKSUM_AT, model_file_checksum(copy, copy + from, size - from));
        load(copy, size);
        free(copy);
        return 0;
    }
    // Versions 1 and 2: over the payload, which starts after the header (a latent file's is longer).
    fuzz_as_is_and_resummed(data, size, from ? from : MODEL_FILE_HEADER_BYTES, MODEL_FILE_CHECKSUM_AT, load);
    return 0;
}
