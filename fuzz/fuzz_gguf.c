// GGUF files (the model the user brings) through the reader and the model loader: any bytes give one
// line or a parse whose every tensor lies inside the bytes, and a model only from a parse.
#include "fuzz.h"
#include "gguf.h"
#include "gguf_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Gguf g;
    char err[512];
    const int parsed = gguf_parse(&g, data, size, "fuzz.gguf", err, sizeof err) == 0;
    if (!parsed) fuzz_check_message(err, sizeof err);
    for (uint64_t i = 0; parsed && i < g.n_tensors; i++) {
        const GgufTensor *t = &g.tensors[i];
        FUZZ_REQUIRE(t->data >= data && t->bytes <= size && t->data - data <= (ptrdiff_t)(size - t->bytes));
        FUZZ_REQUIRE(t->n_elements % (uint64_t)t->type->block == 0);
    }
    if (parsed) gguf_free(&g);
    Model m;
    if (gguf_model_from_bytes(&m, data, size, "fuzz.gguf", err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        FUZZ_REQUIRE(m.params == NULL);
        return 0;
    }
    FUZZ_REQUIRE(parsed);
    FUZZ_REQUIRE(model_config_validate(&m.config, err, sizeof err) == 0);
    model_free(&m);
    return 0;
}
