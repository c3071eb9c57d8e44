// micro bench --eval's memory line: the peak resident memory of `micro eval` itself, run as a child
// process on a text of at least BENCH_MEMORY_TOKENS tokens, against the target of issue 51: the fp32
// weights and 1 GB. A child, so that the bench's own buffers do not count and the figure is what a
// user's `micro eval --model FILE` takes.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_eval.h"
#include "cli.h"
#include "subprocess.h"
#include "text.h"

#define BENCH_MEMORY_TOKENS 1500 // the text: at Qwen's 152k tokens, 0.9 GB of distributions
#define MEMORY_MARGIN 1e9        // bytes beside the fp32 weights

// A plate's bytes (after BOS) and how many tokens they make under the model (BOS left out).
static int plate_bytes(const Model *m, const char *rel, char **bytes, size_t *n, int *tokens, char *err,
                       size_t errlen) {
    char buf[4096];
    Text t;
    if (text_load(&t, cli_default_path(NULL, rel, buf, sizeof buf), INT32_MAX, err, errlen)) return -1;
    *n = (size_t)t.n_bytes - 1;
    *bytes = malloc(*n ? *n : 1);
    int rc = *bytes ? 0 : -1;
    if (rc) snprintf(err, errlen, "out of memory");
    else memcpy(*bytes, t.bytes + 1, *n);
    if (!rc && m->tokenizer) rc = text_tokenize(&t, m->tokenizer, -1, INT32_MAX, err, errlen);
    *tokens = m->tokenizer ? t.n_tokens : (int)*n;
    text_free(&t);
    if (rc) free(*bytes), *bytes = NULL;
    return rc;
}

// A scratch file in $TMPDIR (or /tmp) holding `reps` copies of en then zh; its path into path.
static int write_text(const char *en, size_t n_en, const char *zh, size_t n_zh, int reps, char *path, size_t pathlen,
                      char *err, size_t errlen) {
    const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, pathlen, "%s/micro-bench-memory-XXXXXX", dir);
    const int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd), unlink(path);
        snprintf(err, errlen, "cannot make a scratch file in %s", dir);
        return -1;
    }
    int ok = 1;
    for (int r = 0; r < reps && ok; r++)
        ok = fwrite(en, 1, n_en, f) == n_en && fputc('\n', f) != EOF && fwrite(zh, 1, n_zh, f) == n_zh &&
             fputc('\n', f) != EOF;
    if (fclose(f) != 0 || !ok) {
        unlink(path);
        snprintf(err, errlen, "cannot write a scratch file in %s", dir);
        return -1;
    }
    return 0;
}

// The tokens column of `micro eval --csv`'s first row, counted from the row's end (a spec may be
// quoted with commas inside; every column after the specs is a number): 0 when missing.
static int eval_tokens_column(const char *csv_path) {
    FILE *f = fopen(csv_path, "r");
    char head[1024], row[4096];
    int tokens = 0;
    if (f && fgets(head, sizeof head, f) && fgets(row, sizeof row, f)) {
        const char *at = strstr(head, ",tokens,");
        int after = 0; // the header's commas after "tokens": the row's field starts one more from the end
        for (const char *p = at ? at + 1 : ""; *p; p++) after += *p == ',';
        for (const char *p = row + strlen(row); at && p > row; p--)
            if (p[-1] == ',' && after-- == 0) {
                tokens = atoi(p);
                break;
            }
    }
    if (f) fclose(f);
    return tokens;
}

int bench_eval_memory(const Model *m, const char *model_path, const char *calib_path, const char *k_spec,
                      const char *v_spec, int threads, char *err, size_t errlen) {
    char *en = NULL, *zh = NULL, text[4200], out[4300], errs[4300], model[4096], threads_arg[16];
    size_t n_en, n_zh;
    int t_en, t_zh;
    if (plate_bytes(m, "data/plates/en.txt", &en, &n_en, &t_en, err, errlen) ||
        plate_bytes(m, "data/plates/zh.txt", &zh, &n_zh, &t_zh, err, errlen)) {
        free(en);
        return -1;
    }
    const int per = t_en + t_zh > 0 ? t_en + t_zh : 1, reps = (BENCH_MEMORY_TOKENS + per - 1) / per;
    int rc = write_text(en, n_en, zh, n_zh, reps, text, sizeof text, err, errlen);
    free(en);
    free(zh);
    if (rc) return -1;
    snprintf(out, sizeof out, "%s.csv", text);
    snprintf(errs, sizeof errs, "%s.err", text);
    // micro itself, through the link to the running image: it holds even when the file was replaced
    // since (a rebuild during a long run), where the path readlink gives would be gone.
    char exe[] = "/proc/self/exe";
    const char *model_file = cli_default_path(model_path, "models/micro.bin", model, sizeof model);
    snprintf(threads_arg, sizeof threads_arg, "%d", threads);
    char *argv[16] = {exe, "eval", "--model", (char *)model_file, "--text", text, "--k", (char *)k_spec, "--v", (char *)v_spec,
                      "--threads", threads_arg, "--csv"};
    int argc = 13;
    if (calib_path) argv[argc++] = "--calib", argv[argc++] = (char *)calib_path;
    argv[argc] = NULL;
    rc = spawn_wait(argv, out, errs, err, errlen);
    struct rusage ru;
    // The largest child waited for: the bench starts no other.
    const double peak = rc == 0 && getrusage(RUSAGE_CHILDREN, &ru) == 0 ? 1024.0 * (double)ru.ru_maxrss : 0;
    const int tokens = eval_tokens_column(out);
    if (rc > 0) { // its one line, after "micro: "
        char line[400] = "";
        FILE *f = fopen(errs, "r");
        if (f && fgets(line, sizeof line, f)) line[strcspn(line, "\n")] = 0;
        if (f) fclose(f);
        snprintf(err, errlen, "micro eval on the memory bench's text exited with %d: %s", rc,
                 strncmp(line, "micro: ", 7) ? line : line + 7);
    }
    unlink(text);
    unlink(out);
    unlink(errs);
    if (rc != 0) return -1;
    const double weights = 4.0 * (double)m->n_params, target = weights + MEMORY_MARGIN;
    printf("\nmemory: `micro eval --model FILE --k %s --v %s --threads %d` on %d tokens (the plates, repeated %d\n"
           "times; run as a child, measured now): peak resident %.0f MB. Target: at most the fp32 weights\n"
           "(%.0f MB) + 1 GB = %.0f MB: %s (%.0f MB beside the weights).\n",
           k_spec, v_spec, threads, tokens, reps, peak * 1e-6, weights * 1e-6, target * 1e-6,
           peak <= target ? "met" : "not met", (peak - weights) * 1e-6);
    return 0;
}
