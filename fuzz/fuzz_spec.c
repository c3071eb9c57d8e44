// Cache spec strings through the parser, the pre-load check for both roles, and real streams of a
// shape chosen by the first byte: a stream that a spec creates must append, score, mix, read back
// and count its bytes without fault, and give finite numbers for finite input.
#include <math.h>

#include "fuzz.h"
#include "kvcache.h"

static const int head_dims[8] = {2, 4, 8, 16, 32, 64, 6, 128};

static void run_stream(const CodecSpec *spec, KVRole role, int heads, int hd, int tokens, uint8_t seed) {
    KVStream s;
    char err[512];
    if (kvstream_init(&s, spec, role, heads, hd, tokens, err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        return;
    }
    FUZZ_REQUIRE(strlen(s.spec) > 0 && strlen(s.spec) < sizeof s.spec);
    float *vec = malloc(sizeof(float) * (size_t)heads * hd), *q = malloc(sizeof(float) * (size_t)hd);
    float *scores = malloc(sizeof(float) * (size_t)tokens), *out = malloc(sizeof(float) * (size_t)hd);
    FUZZ_REQUIRE(vec && q && scores && out);
    uint32_t r = seed * 2654435761u + 1;
    for (int d = 0; d < hd; d++) q[d] = (float)((int)(r = r * 1664525u + 1013904223u) >> 20) / 512.0f;
    for (int t = 0; t < tokens; t++) {
        for (int i = 0; i < heads * hd; i++) {
            r = r * 1664525u + 1013904223u;
            // Mostly ordinary values, some large outliers (KIVI's reason to exist).
            vec[i] = (float)((int)r >> 16) / 4096.0f * ((r & 0xF) == 0 ? 100.0f : 1.0f);
        }
        kvstream_append(&s, vec);
        int n = t + 1;
        for (int h = 0; h < heads; h++) {
            // A key stream is scored against queries, a value stream mixed by weights (the two
            // may lay their bytes out differently), and both read back.
            if (role == KV_ROLE_KEY) {
                kvstream_scores(&s, h, q, scores, n);
                for (int j = 0; j < n; j++) FUZZ_REQUIRE(isfinite(scores[j]));
            } else {
                for (int j = 0; j < n; j++) scores[j] = 1.0f / (float)n;
                kvstream_mix(&s, h, scores, out, n);
                for (int d = 0; d < hd; d++) FUZZ_REQUIRE(isfinite(out[d]));
            }
            s.ops->read(s.state, h, t, out);
            for (int d = 0; d < hd; d++) FUZZ_REQUIRE(isfinite(out[d]));
        }
        kvstream_end_step(&s);
    }
    double bits = kvstream_bits_per_element(&s);
    FUZZ_REQUIRE(isfinite(bits) && bits > 0 && bits <= 64);
    free(vec);
    free(q);
    free(scores);
    free(out);
    kvstream_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    // Byte 0: the shape (head_dim, 1 or 2 heads, 1..8 tokens); the rest: the spec, up to a NUL.
    int hd = head_dims[data[0] & 7], heads = 1 + (data[0] >> 3 & 1), tokens = 1 + (data[0] >> 4 & 7);
    char *spec = malloc(size);
    if (!spec) return 0;
    memcpy(spec, data + 1, size - 1);
    spec[size - 1] = '\0';
    CodecSpec parsed;
    char err[512];
    if (spec_parse(spec, &parsed, err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
    } else {
        FUZZ_REQUIRE(parsed.n_options >= 0 && parsed.n_options <= SPEC_MAX_OPTIONS);
        FUZZ_REQUIRE(strlen(parsed.name) > 0 && strlen(parsed.name) < SPEC_TEXT);
    }
    for (int role = 0; role < 2; role++) {
        if (kvstream_check_spec(spec, (KVRole)role, err, sizeof err)) fuzz_check_message(err, sizeof err);
        if (!spec_parse(spec, &parsed, err, sizeof err)) run_stream(&parsed, (KVRole)role, heads, hd, tokens, data[0]);
    }
    free(spec);
    return 0;
}
