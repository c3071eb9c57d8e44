// The checkpoint loader on arbitrary bytes. checkpoint_load reads a file (its header first, the
// payload only once the header's length is the file's), so each input is written to one temporary
// file and loaded from there: as it is, then again with its closing checksum recomputed, so that
// mutations reach the checks of the values behind it. A load either fails with one line and
// nothing allocated, or gives a checkpoint whose every count and value is within its limits.
#include <fcntl.h>
#include <math.h>
#include <unistd.h>

#include "checkpoint.h"
#include "fuzz.h"

static char path[64];

static void remove_file(void) { unlink(path); }

static void write_file(const uint8_t *data, size_t size) {
    if (!path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/micro-fuzz-ckpt-XXXXXX", tmp && strlen(tmp) < 32 ? tmp : "/tmp");
        int fd = mkstemp(path);
        FUZZ_REQUIRE(fd >= 0);
        close(fd);
        atexit(remove_file);
    }
    FILE *f = fopen(path, "wb");
    FUZZ_REQUIRE(f && fwrite(data, 1, size, f) == size && fclose(f) == 0);
}

static void load(const uint8_t *data, size_t size) {
    write_file(data, size);
    Checkpoint c;
    char err[512];
    if (checkpoint_load(path, &c, err, sizeof err)) {
        fuzz_check_message(err, sizeof err);
        FUZZ_REQUIRE(!c.params && !c.m && !c.v && !c.train_loss && !c.val);
        return;
    }
    // The run's model is a valid one, and the counts agree with it and with the file's length.
    ModelConfig cfg = {(int)c.id.dim, (int)c.id.n_layers, (int)c.id.n_heads, (int)c.id.n_kv_heads, (int)c.id.head_dim,
                       (int)c.id.hidden_dim, (int)c.id.vocab_size, (int)c.id.max_seq_len, (float)c.id.rope_theta,
                       (float)c.id.norm_eps, (int)c.id.latent_dim, (int)c.id.rope_dim, 0, 0, 0, 0, 0};
    FUZZ_REQUIRE(model_config_validate_own(&cfg, err, sizeof err) == 0);
    const size_t n = model_param_count(&cfg);
    FUZZ_REQUIRE(c.pr.n_params == (int64_t)n);
    FUZZ_REQUIRE(c.id.steps >= 1 && c.id.steps <= CKPT_MAX_STEPS && c.pr.step >= 0 && c.pr.step <= c.id.steps);
    FUZZ_REQUIRE(c.pr.n_val >= 0 && c.pr.n_val <= c.pr.step + 1);
    const size_t ident = data[8] == 1 ? offsetof(RunIdent, latent_dim) : sizeof(RunIdent);
    FUZZ_REQUIRE(size == 12 + ident + sizeof(RunProgress) + 12 * n + 4 * (size_t)c.id.steps +
                             sizeof(ValRecord) * (size_t)c.pr.n_val + 8);
    for (size_t i = 0; i < n; i++) FUZZ_REQUIRE(isfinite(c.params[i]) && isfinite(c.m[i]) && isfinite(c.v[i]) && c.v[i] >= 0);
    for (int64_t i = 0; i < c.id.steps; i++) FUZZ_REQUIRE(isfinite(c.train_loss[i]));
    for (int64_t i = 0; i < c.pr.n_val; i++) {
        FUZZ_REQUIRE(isfinite(c.val[i].en) && isfinite(c.val[i].zh));
        FUZZ_REQUIRE(c.val[i].step <= c.pr.step && (i == 0 ? c.val[i].step >= 0 : c.val[i].step > c.val[i - 1].step));
    }
    FUZZ_REQUIRE(memchr(c.pr.blas_core, 0, sizeof c.pr.blas_core) && memchr(c.id.corpus_sha256, 0, sizeof c.id.corpus_sha256));
    checkpoint_free_arrays(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load(data, size);
    if (size < 16) return 0;
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    uint64_t sum = checkpoint_checksum(copy, size - 8);
    memcpy(copy + size - 8, &sum, 8);
    load(copy, size);
    free(copy);
    return 0;
}
