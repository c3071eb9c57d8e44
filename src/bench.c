// micro bench: decode speed side by side in one run (this machine is noisy: compare ratios, not runs).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "commands.h"
#include "forward.h"
#include "model_file.h"

static const char *bench_usage =
    "usage: micro bench [options]\n"
    "  Decode tokens/s over 256, 1024 and 2048 positions on 1 and 2 threads, with the memory\n"
    "  roofline of the same run (bytes touched per token / streaming read bandwidth measured here);\n"
    "  then attention time per decode step at 2048 positions for the chosen cache against fp32.\n"
    "options:\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --cache SPEC        cache codec to compare with fp32 (default fp32); --k/--v for one stream\n"
    "  --repeat N          best of N runs per figure (default 3)\n"
    "  --threads LIST      thread counts, comma separated (default 1,2)\n"
    "  --positions LIST    sequence lengths (default 256,1024,2048)\n"
    "  -h, --help          this help\n";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Streaming read bandwidth in bytes/s over a buffer of `bytes`, read again and again until 256 MiB
// have passed (best of 5). A buffer far larger than the caches gives DRAM's bandwidth; one the size
// of what a decode step touches gives the bandwidth of the cache level the decoder really reads from.
static double read_bandwidth(size_t bytes) {
    size_t n = bytes / sizeof(float) / 64 * 64;
    if (n < 64) n = 64;
    float *buf = malloc(n * sizeof(float));
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    size_t passes = ((size_t)256 << 20) / (n * sizeof(float)) + 1;
    double best = 0;
    volatile float sink = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (size_t p = 0; p < passes; p++) {
            float part[16] = {0};
            for (size_t i = 0; i < n; i += 16)
#pragma omp simd
                for (int l = 0; l < 16; l++) part[l] += buf[i + l];
            sink = sink + part[0] + part[15];
        }
        double bw = (double)(passes * n * sizeof(float)) / (now() - t0);
        if (bw > best) best = bw;
    }
    (void)sink;
    free(buf);
    return best;
}

// Seconds to decode positions 0..n-1 from an empty cache (best of `repeat`); also the cache bytes at the end.
static double time_decode(const Model *m, const char *k_spec, const char *v_spec, int n, int threads, int repeat,
                          size_t *cache_bytes) {
    char err[512];
    Decoder d;
    if (decoder_init(&d, m, k_spec, v_spec, n, threads, err, sizeof err)) cli_die("%s", err);
    double best = INFINITY;
    uint64_t rng = 88172645463325252ull;
    for (int r = 0; r < repeat; r++) {
        if (decoder_reset(&d, err, sizeof err)) cli_die("%s", err);
        double t0 = now();
        for (int pos = 0; pos < n; pos++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            decoder_forward(&d, (int)(rng % 256), pos);
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    *cache_bytes = kvcache_bytes(&d.cache);
    decoder_free(&d);
    return best;
}

// Seconds of attention alone (scores, softmax, mix over every layer and head) for one step over a
// cache of n positions, best of `repeat` rounds of many steps.
static double time_attention(const Model *m, const char *k_spec, const char *v_spec, int n, int repeat) {
    char err[512];
    Decoder d;
    if (decoder_init(&d, m, k_spec, v_spec, n, 1, err, sizeof err)) cli_die("%s", err);
    uint64_t rng = 88172645463325252ull;
    for (int pos = 0; pos < n; pos++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        decoder_forward(&d, (int)(rng % 256), pos);
    }
    const ModelConfig *p = &m->config;
    int hd = p->head_dim, group = p->n_heads / p->n_kv_heads;
    float *q = d.q, *out = d.xb2; // the last step's queries, a fair sample
    double best = INFINITY;
    int steps = 50;
    for (int r = 0; r < repeat; r++) {
        double t0 = now();
        for (int s = 0; s < steps; s++)
            for (int l = 0; l < p->n_layers; l++)
                for (int h = 0; h < p->n_heads; h++)
                    attention_head(&d.cache.k[l], &d.cache.v[l], h / group, q + h * hd, d.att + (size_t)h * n,
                                   out + h * hd, n);
        double t = (now() - t0) / steps;
        if (t < best) best = t;
    }
    decoder_free(&d);
    return best;
}

static int parse_list(const char *s, int *out, int max, int lo, int hi) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < lo || v > hi) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL, *cache = "fp32", *k_spec = NULL, *v_spec = NULL, *tlist = "1,2",
               *plist = "256,1024,2048";
    int repeat = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(bench_usage, stdout);
            return 0;
        }
        if (!cli_value(argc, argv, &i, "--model", &model_path) && !cli_value(argc, argv, &i, "--cache", &cache) &&
            !cli_value(argc, argv, &i, "--k", &k_spec) && !cli_value(argc, argv, &i, "--v", &v_spec) &&
            !cli_value(argc, argv, &i, "--threads", &tlist) && !cli_value(argc, argv, &i, "--positions", &plist) &&
            !cli_int(argc, argv, &i, "--repeat", 1, 100, &repeat))
            cli_unknown(bench_usage, argv[i]);
    }
    if (!k_spec) k_spec = cache;
    if (!v_spec) v_spec = cache;
    char err[512], path[4096];
    Model m;
    if (model_load(&m, cli_default_path(model_path, "models/micro.bin", path, sizeof path), err, sizeof err))
        return cli_error("%s", err);
    int threads[8], positions[8];
    int nt = parse_list(tlist, threads, 8, 1, 256), np = parse_list(plist, positions, 8, 2, m.config.max_seq_len);
    if (nt <= 0) return cli_error("--threads: expected a comma-separated list of 1..256");
    if (np <= 0) return cli_error("--positions: expected a comma-separated list of 2..%d", m.config.max_seq_len);

    double weight_bytes = (double)m.n_params * sizeof(float);
    double dram_bw = read_bandwidth((size_t)512 << 20);
    printf("micro bench: %zu parameters (%.1f MB fp32), cache %s / %s, best of %d\n", m.n_params, weight_bytes / 1e6,
           k_spec, v_spec, repeat);
    printf("streaming read bandwidth measured here: %.1f GB/s from DRAM (512 MiB buffer)\n", dram_bw / 1e9);
    printf("roofline = bytes touched per token / bandwidth, as a share of the time taken: against DRAM, and against\n"
           "a buffer the size of what one step touches (the cache level the weights and KV cache really come from)\n\n");
    printf("%9s %7s %12s %12s %12s %14s %14s %9s\n", "positions", "threads", "tokens/s", "us/token", "MB/token",
           "roofline DRAM", "roofline same", "speedup");
    for (int a = 0; a < np; a++) {
        double base = 0, same_bw = 0;
        for (int b = 0; b < nt; b++) {
            size_t cache_bytes;
            double t = time_decode(&m, k_spec, v_spec, positions[a], threads[b], repeat, &cache_bytes);
            double tps = positions[a] / t;
            // Each step reads every weight once and, on average, half the final cache.
            double touched = weight_bytes + 0.5 * (double)cache_bytes;
            if (b == 0) same_bw = read_bandwidth((size_t)touched);
            double per_token = t / positions[a];
            if (b == 0) base = tps;
            printf("%9d %7d %12.0f %12.1f %12.2f %13.1f%% %13.1f%% %8.2fx\n", positions[a], threads[b], tps,
                   1e6 * per_token, touched / 1e6, 100.0 * touched / dram_bw / per_token,
                   100.0 * touched / same_bw / per_token, tps / base);
        }
    }
    int n = m.config.max_seq_len < 2048 ? m.config.max_seq_len : 2048;
    double t_ref = time_attention(&m, "fp32", "fp32", n, repeat);
    double t_spec = time_attention(&m, k_spec, v_spec, n, repeat);
    printf("\nattention per decode step at %d positions (1 thread):\n", n);
    printf("  %-40s %9.1f us\n", "fp32 / fp32", 1e6 * t_ref);
    char label[256];
    snprintf(label, sizeof label, "%s / %s", k_spec, v_spec);
    printf("  %-40s %9.1f us   ratio %.2fx of fp32\n", label, 1e6 * t_spec, t_spec / t_ref);
    size_t bytes_ref, bytes_spec;
    double whole_ref = time_decode(&m, "fp32", "fp32", n, 1, repeat, &bytes_ref);
    double whole_spec = time_decode(&m, k_spec, v_spec, n, 1, repeat, &bytes_spec);
    printf("whole decode of %d positions (1 thread): fp32 %.0f tokens/s, %s %.0f tokens/s, ratio %.2fx time of fp32\n", n,
           n / whole_ref, label, n / whole_spec, whole_spec / whole_ref);
    model_free(&m);
    return 0;
}
