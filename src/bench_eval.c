// micro bench --eval: the fast evaluator against the decode loop, side by side in one run.
//
// One window of the model's context (the plates' bytes, repeated) is scored through fp32 and the
// chosen cache, each way in turn (spans, then token by token, alternating so that the machine's
// noise falls on both), best of --repeat. It prints the seconds, the speed-up and how far the two
// losses are apart: the fast path must agree with decoding within 1e-5 nats per token.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_eval.h"
#include "cli.h"
#include "eval.h"
#include "text.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The window: BOS, then the two plates' bytes over and over (no BOS inside) up to n tokens.
static uint8_t *plate_window(int n, char *err, size_t errlen) {
    Text en, zh;
    char path_en[4096], path_zh[4096];
    if (text_load(&en, cli_default_path(NULL, "data/plates/en.txt", path_en, sizeof path_en), INT32_MAX, err, errlen))
        return NULL;
    if (text_load(&zh, cli_default_path(NULL, "data/plates/zh.txt", path_zh, sizeof path_zh), INT32_MAX, err, errlen)) {
        text_free(&en);
        return NULL;
    }
    uint8_t *w = malloc((size_t)n);
    const int len_en = en.n_tokens - 1, len = len_en + zh.n_tokens - 1;
    if (w) {
        w[0] = MICRO_BOS;
        for (int t = 1; t < n; t++) {
            const int i = (t - 1) % len;
            w[t] = i < len_en ? en.tokens[1 + i] : zh.tokens[1 + i - len_en];
        }
    } else
        snprintf(err, errlen, "out of memory");
    text_free(&en);
    text_free(&zh);
    return w;
}

int bench_eval(const Model *m, const char *k_spec, const char *v_spec, int n, int threads, int repeat, char *err,
               size_t errlen) {
    uint8_t *window = plate_window(n, err, errlen);
    if (!window) return -1;
    printf("micro bench --eval: one window of %d tokens (the plates' bytes, repeated), %d thread%s, best of %d\n", n,
           threads, threads == 1 ? "" : "s", repeat);
    printf("fast: %d positions at a time through the weights, each attending through its codec's kernels (or a\n"
           "copy decoded once per token, for codecs read back whole); decode: token by token, as a server\n"
           "decodes (micro eval --decode). Both give the same bits.\n\n", EVAL_SPAN);
    printf("%-44s %10s %10s %9s %12s %12s %10s\n", "cache (K / V)", "decode s", "fast s", "speed-up", "loss decode",
           "loss fast", "|diff|");
    const char *specs[2][2] = {{"fp32", "fp32"}, {k_spec, v_spec}};
    const int n_specs = strcmp(k_spec, "fp32") == 0 && strcmp(v_spec, "fp32") == 0 ? 1 : 2;
    int rc = 0;
    for (int s = 0; s < n_specs && !rc; s++) {
        double best[2] = {INFINITY, INFINITY}, loss[2] = {0, 0};
        for (int r = 0; r < repeat && !rc; r++)
            for (int decode = 0; decode < 2 && !rc; decode++) {
                EvalResult res;
                const double t0 = now();
                rc = eval_tokens(m, window, n, specs[s][0], specs[s][1], threads, decode, NULL, NULL, &res, err, errlen);
                const double t = now() - t0;
                best[decode] = t < best[decode] ? t : best[decode];
                loss[decode] = res.loss;
            }
        if (rc) break;
        char label[256];
        snprintf(label, sizeof label, "%s / %s", specs[s][0], specs[s][1]);
        printf("%-44s %10.3f %10.3f %8.2fx %12.6f %12.6f %10.2e\n", label, best[1], best[0], best[1] / best[0], loss[1],
               loss[0], fabs(loss[1] - loss[0]));
    }
    free(window);
    return rc;
}
