// nvfp4:scale2=calib takes its second-level scale from the calibration file: a file written here
// with known maxima (different for every layer and stream) for a random model, then streams of
// each layer and role read back exactly what the NVFP4 recipe gives with s_2 = amax / (448·6) of
// their own layer and stream (keys after RoPE; before it under prerope; values), and with no other
// maximum's. A token far beyond the calibrated range clamps at ±amax, finite. No calibration, and a
// version-1 file (which holds no maxima), are one-line refusals.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "formats.h"
#include "kvcache.h"
#include "kvq_file.h"
#include "kvq_view.h"
#include "model_file.h"
#include "random_model.h"

#define HEADS 2
#define HD 32

static float maximum(int layer, KvqStream which) { return 1.0f + (float)layer + 0.25f * (float)which; }

// The recipe, written out: per block of 16, sb = E4M3((amax_b / 6) / s2), elements E2M1(x / (s2·sb)).
static void reference(const float *x, float s2, float *out) {
    uint8_t codes[16];
    for (int b = 0; b < HD / 16; b++) {
        const uint8_t sb = nvfp4_block_encode(x + 16 * b, 16, s2, 0, codes);
        for (int i = 0; i < 16; i++)
            out[16 * b + i] = mx_elem_decode(MX_E2M1, codes[i]) * (s2 * quant_e4m3_to_fp32(sb));
    }
}

// A stream of that spec, role and layer, one token x appended; its read-back of every head in out.
static int stream_read(const char *spec, KVRole role, int layer, const float *x, float *out, char *err, size_t n) {
    KVStream s;
    if (kvstream_init_at(&s, SPEC(spec), role, HEADS, HD, 4, &(KVStreamPlace){0, 0, layer}, err, n)) return -1;
    kvstream_append(&s, x);
    for (int h = 0; h < HEADS; h++) s.ops->read(s.state, h, 0, out + h * HD);
    kvstream_free(&s);
    return 0;
}

int main(void) {
    ModelConfig c = small_config();
    Model m;
    random_model(&m, &c, 3);
    static const uint32_t percents[] = {0}, bits[] = {2};
    Kvq k;
    char err[512], dir[] = "/tmp/micro-test-nvcal-XXXXXX", path[256], path1[256];
    if (kvq_init(&k, c.n_layers, c.n_kv_heads, c.head_dim, percents, 1, bits, 1, err, sizeof err) || !mkdtemp(dir)) return 1;
    k.model_checksum = kvq_model_checksum(&m);
    k.sequences = 1, k.length = 1;
    for (int l = 0; l < c.n_layers; l++)
        for (int w = 0; w < KVQ_N_MAX; w++) k.stream_max[l * KVQ_N_MAX + w] = maximum(l, (KvqStream)w);
    for (size_t i = 0; i < k.n_codebooks; i++) k.codebooks[i] = (float)(i % 4) / 2 - 0.75f;
    snprintf(path, sizeof path, "%s/m.kvq", dir);
    CHECK(kvq_save(&k, path, err, sizeof err) == 0, "save: %s", err);
    CHECK(kvq_view_set(path, &m, 1, err, sizeof err) == 0, "view: %s", err);

    float x[HEADS * HD], got[HEADS * HD], want[HD], other[HD];
    uint64_t rng = 99;
    for (int i = 0; i < HEADS * HD; i++) x[i] = (float)(2.0 * check_uniform(&rng) - 1.0) * (i % 7 ? 0.3f : 1.1f);
    static const struct { const char *spec; KVRole role; KvqStream which; } cases[] = {
        {"nvfp4:scale2=calib", KV_ROLE_KEY, KVQ_MAX_KEY},
        {"nvfp4:scale2=calib,prerope", KV_ROLE_KEY, KVQ_MAX_KEY_PREROPE},
        {"nvfp4:scale2=calib", KV_ROLE_VALUE, KVQ_MAX_VALUE}};
    for (int l = 0; l < c.n_layers; l++)
        for (int ci = 0; ci < 3; ci++) {
            CHECK(stream_read(cases[ci].spec, cases[ci].role, l, x, got, err, sizeof err) == 0, "%s: %s", cases[ci].spec, err);
            const float amax = maximum(l, cases[ci].which);
            int same_as_other = 1;
            for (int h = 0; h < HEADS; h++) {
                reference(x + h * HD, amax / (448.0f * 6.0f), want);
                reference(x + h * HD, maximum(l, (KvqStream)((cases[ci].which + 1) % KVQ_N_MAX)) / (448.0f * 6.0f), other);
                CHECK(memcmp(got + h * HD, want, sizeof want) == 0, "layer %d %s (%s) head %d: not s2 = %g / 2688", l,
                      cases[ci].spec, cases[ci].role == KV_ROLE_KEY ? "keys" : "values", h, (double)amax);
                same_as_other &= memcmp(got + h * HD, other, sizeof other) == 0;
            }
            CHECK(!same_as_other, "layer %d %s: another stream's maximum gives the same numbers", l, cases[ci].spec);
        }

    // Far beyond the calibrated range: every number clamps to ±amax (block scale 448, element 6).
    float big[HEADS * HD];
    for (int i = 0; i < HEADS * HD; i++) big[i] = (i % 2 ? 1.0f : -1.0f) * (25.0f + (float)i);
    CHECK(stream_read("nvfp4:scale2=calib", KV_ROLE_VALUE, 1, big, got, err, sizeof err) == 0, "%s", err);
    const float amax = maximum(1, KVQ_MAX_VALUE);
    for (int i = 0; i < HEADS * HD; i++)
        CHECK(isfinite(got[i]) && fabsf(fabsf(got[i]) - amax) <= 1e-6f * amax && (got[i] > 0) == (big[i] > 0),
              "number %d = %g beyond the range read back as %g, want %s%g", i, (double)big[i], (double)got[i],
              big[i] > 0 ? "" : "-", (double)amax);

    // A rotation has no calibrated maximum; refused in one line.
    CHECK(stream_read("nvfp4:scale2=calib,rot=hadamard", KV_ROLE_KEY, 0, x, got, err, sizeof err) == -1 &&
              strstr(err, "unrotated") && !strchr(err, '\n'),
          "rotation: %s", err);
    // A version-1 file: the tables but no maxima.
    k.version = 1; // saved as version 1: no maxima written
    snprintf(path1, sizeof path1, "%s/v1.kvq", dir);
    CHECK(kvq_save(&k, path1, err, sizeof err) == 0 && kvq_view_set(path1, &m, 1, err, sizeof err) == 0, "v1: %s", err);
    CHECK(stream_read("nvfp4:scale2=calib", KV_ROLE_KEY, 0, x, got, err, sizeof err) == -1 &&
              strstr(err, "version 1") && strstr(err, "rerun micro calibrate") && !strchr(err, '\n'),
          "version 1: %s", err);
    // No calibration at all.
    kvq_view_set(NULL, &m, 0, err, sizeof err);
    CHECK(stream_read("nvfp4:scale2=calib", KV_ROLE_VALUE, 0, x, got, err, sizeof err) == -1 &&
              strstr(err, "nvfp4:scale2=calib needs a calibration") && strstr(err, "micro calibrate"),
          "no calibration: %s", err);
    // The other second-level scales never look for one.
    CHECK(stream_read("nvfp4:scale2=token", KV_ROLE_KEY, 0, x, got, err, sizeof err) == 0, "token: %s", err);
    unlink(path), unlink(path1), rmdir(dir);
    kvq_free(&k);
    model_free(&m);
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures != 0;
}
