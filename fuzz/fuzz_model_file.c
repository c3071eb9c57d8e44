// The model-file loader on arbitrary bytes: each input is loaded as it is, then again with its
// header checksum recomputed, so that mutations of the payload reach the checks after the checksum
// (finite values) instead of all stopping at it. A load either fails with one line or gives a model
// whose every size agrees with its header.
#include "fuzz.h"
#include "model_file.h"

static void load(const uint8_t *data, size_t size) {
    Model m;
    char err[512];
    if (model_load_bytes(&m, data, size, "fuzz.bin", err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        FUZZ_REQUIRE(m.params == NULL);
        return;
    }
    FUZZ_REQUIRE(size == model_file_header_bytes(&m.config) + m.n_params * sizeof(float));
    FUZZ_REQUIRE(m.n_params == model_param_count(&m.config));
    FUZZ_REQUIRE(model_config_validate(&m.config, err, sizeof err) == 0);
    // The weights' pointers cover the buffer exactly: the last tensor ends at its end.
    FUZZ_REQUIRE(m.w.final_norm + m.config.dim == m.params + m.n_params);
    model_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // A latent-attention file's payload starts after its longer header.
    const size_t from = size >= 12 && data[8] == MODEL_FILE_VERSION_LATENT ? MODEL_FILE_HEADER_BYTES_LATENT
                                                                           : MODEL_FILE_HEADER_BYTES;
    fuzz_as_is_and_resummed(data, size, from, 60, load);
    return 0;
}
