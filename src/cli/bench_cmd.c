// micro bench: decode speed side by side in one run (this machine is noisy: compare ratios, not runs).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "clock.h"
#include "kvpool.h"
#include "cmd_options.h"
#include "commands.h"
#include "forward.h"
#include "bench_eval.h"
#include "bench_floor.h"
#include "membw.h"
#include "model_file.h"
#include "serve.h"

static const char *bench_usage =
    "usage: micro bench [options]\n"
    "  Decode tokens/s over 256, 1024 and 2048 positions on 1 and 2 threads, with the memory\n"
    "  roofline of the same run (bytes touched per token / streaming read bandwidth measured here,\n"
    "  each step against a buffer of its own size);\n"
    "  then attention time per decode step at the longest of the positions for the chosen cache\n"
    "  against fp32.\n"
    "options:\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --calib FILE        kvquant's calibration (default beside the model: models/micro.kvq)\n"
    "  --cache SPEC        cache codec to compare with fp32 (default fp32); --k/--v for one stream\n"
    "  --repeat N          best of N runs per figure (default 3)\n"
    "  --threads LIST      thread counts, comma separated, 1..256 (default 1,2); a count above the\n"
    "                      online cores runs on as many threads as there are cores\n"
    "  --positions LIST    sequence lengths, 2..context, at most 64 (default 256,1024,2048, cut to the\n"
    "                      model's context)\n"
    "  --batch N           instead: N conversations decoded together from one paged pool, at positions\n"
    "                      spread from the context down to half of it, for fp16 and the chosen cache side\n"
    "                      by side (tokens/s, cache bytes per step, roofline, the speed ratio against the\n"
    "                      bytes ratio), then each step's floor: its other work plus attention no faster\n"
    "                      than its kernels on a cache in L2 nor than reading the cache at the streaming\n"
    "                      bandwidth, what paging costs those kernels (against a cache in one block),\n"
    "                      the pool read alone (every block read whole, nothing computed)\n"
    "                      against the streaming bandwidth, and what fp16 at 80% of its roofline with the\n"
    "                      cache 0.8 x its bytes ratio faster would ask of the cache; --threads takes the\n"
    "                      first count\n"
    "  --block N           with --batch: the pool's block in tokens, a multiple of 16 or the whole\n"
    "                      context (default 16)\n"
    "  --steps N           with --batch: decode steps timed (default 8)\n"
    "  --eval              instead: scoring one window (the longest of the positions) with the fast\n"
    "                      evaluator against the decode loop, fp32 and the chosen cache, side by side\n"
    "                      (seconds, speed-up, both losses, tokens/s); --threads takes the first count.\n"
    "                      On a model with a vocabulary of its own, also `micro eval`'s peak memory on\n"
    "                      the plates repeated to 1,500 tokens, against its fp32 weights + 1 GB\n"
    "  --no-decode         with --eval: the fast evaluator alone (a large model's decode loop takes\n"
    "                      minutes)\n"
    "  -h, --help          this help\n";


// Seconds to decode positions 0..n-1 from an empty cache (best of `repeat`) into *seconds; also the
// cache bytes at the end. -1 with one line in err when the decoder cannot be made.
static int time_decode(const Model *m, const char *k_spec, const char *v_spec, int n, int threads, int repeat,
                       size_t *cache_bytes, double *seconds, char *err, size_t errlen) {
    Decoder d;
    if (decoder_init(&d, m, cli_spec(k_spec), cli_spec(v_spec), n, threads, err, errlen)) return -1;
    double best = INFINITY;
    uint64_t rng = 88172645463325252ull;
    for (int r = 0; r < repeat; r++) {
        if (decoder_reset(&d, err, errlen)) {
            decoder_free(&d);
            return -1;
        }
        double t0 = seconds_now();
        for (int pos = 0; pos < n; pos++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            decoder_forward(&d, (int)(rng % 256), pos);
        }
        double t = seconds_now() - t0;
        if (t < best) best = t;
    }
    *cache_bytes = decoder_cache_bytes(&d);
    decoder_free(&d);
    *seconds = best;
    return 0;
}

// Seconds of attention alone (scores, softmax, mix over every layer and head) for one step over a
// cache of n positions, best of `repeat` rounds of many steps.
static int time_attention(const Model *m, const char *k_spec, const char *v_spec, int n, int repeat, double *seconds,
                          char *err, size_t errlen) {
    Decoder d;
    if (decoder_init(&d, m, cli_spec(k_spec), cli_spec(v_spec), n, 1, err, errlen)) return -1;
    uint64_t rng = 88172645463325252ull;
    for (int pos = 0; pos < n; pos++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        decoder_forward(&d, (int)(rng % 256), pos);
    }
    const ModelConfig *p = &m->config;
    int hd = p->head_dim, group = p->n_heads / p->n_kv_heads;
    float *q = d.q, *out = d.xb2; // the last step's queries, a fair sample
    const size_t ctx = (size_t)d.fwd.context;
    double best = INFINITY;
    int steps = 50;
    for (int r = 0; r < repeat; r++) {
        double t0 = seconds_now();
        for (int s = 0; s < steps; s++)
            for (int l = 0; l < p->n_layers; l++)
                for (int h = 0; h < p->n_heads; h++)
                    attention_head(&d.seq.k[l], &d.seq.v[l], NULL, NULL, h / group, q + h * hd, p->rope_halves, d.rope_cos, d.rope_sin,
                                   d.att + (size_t)h * ctx, out + h * hd, n);
        double t = (seconds_now() - t0) / steps;
        if (t < best) best = t;
    }
    decoder_free(&d);
    *seconds = best;
    return 0;
}

int bench_parse(int argc, char **argv, BenchOptions *o, char *err, size_t errlen) {
    static const int default_positions[] = {256, 1024, 2048};
    const char *cache = "fp32";
    memset(o, 0, sizeof *o);
    o->repeat = 3;
    o->threads[0] = 1, o->threads[1] = 2, o->n_threads = 2;
    memcpy(o->positions, default_positions, sizeof default_positions);
    o->n_positions = 3;
    o->block = 16, o->steps = 8;
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--calib")) bad = opts_path(&p, &o->calib_path);
        else if (opts_is(&p, "--cache")) bad = opts_string(&p, &cache);
        else if (opts_is(&p, "--k")) bad = opts_string(&p, &o->k_spec);
        else if (opts_is(&p, "--v")) bad = opts_string(&p, &o->v_spec);
        else if (opts_is(&p, "--repeat")) bad = opts_int(&p, 1, 100, &o->repeat);
        else if (opts_is(&p, "--threads")) bad = opts_int_list(&p, 1, 256, o->threads, BENCH_MAX_LIST, &o->n_threads);
        else if (opts_is(&p, "--batch")) bad = opts_int(&p, 1, 4096, &o->batch);
        else if (opts_is(&p, "--block")) bad = opts_int(&p, 1, 1 << 20, &o->block), o->block_given = 1;
        else if (opts_is(&p, "--steps")) bad = opts_int(&p, 1, 1000, &o->steps), o->steps_given = 1;
        else if (opts_is(&p, "--eval")) bad = opts_flag(&p), o->eval = 1;
        else if (opts_is(&p, "--no-decode")) bad = opts_flag(&p), o->no_decode = 1;
        else if (opts_is(&p, "--positions")) {
            // The model's context bounds them too; that is checked once the model is loaded.
            bad = opts_int_list(&p, 2, 1 << 20, o->positions, BENCH_MAX_LIST, &o->n_positions);
            o->positions_given = 1;
        } else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (o->eval && o->batch) return opts_fail(&p, "choose one of --batch and --eval");
    if (!o->batch && (o->block_given || o->steps_given)) return opts_fail(&p, "--block and --steps go with --batch");
    if (o->no_decode && !o->eval) return opts_fail(&p, "--no-decode goes with --eval");
    if (!o->k_spec) o->k_spec = cache;
    if (!o->v_spec) o->v_spec = cache;
    return cmd_check_specs(o->k_spec, o->v_spec, err, errlen) ? OPTS_ERROR : OPTS_RUN;
}

// Fits the positions to the model's context: given ones must fit; the defaults are cut to it.
static int fit_positions(BenchOptions *o, int context, char *err, size_t errlen) {
    int n = 0;
    for (int a = 0; a < o->n_positions; a++) {
        if (o->positions[a] <= context) o->positions[n++] = o->positions[a];
        else if (o->positions_given) {
            snprintf(err, errlen, "--positions: %d is beyond the model's context of %d", o->positions[a], context);
            return -1;
        }
    }
    if (n == 0) {
        if (context < 2) {
            snprintf(err, errlen, "the model's context of %d leaves nothing to time", context);
            return -1;
        }
        o->positions[n++] = context;
    }
    o->n_positions = n;
    return 0;
}

// One run of `steps` batched decode steps, conversations ending from hi down to lo, in a pool of the
// schemes' blocks sized to hold `batch` of them at hi (and a block per stream of slack); kept in
// *best when it is the first run or faster; the run's own tokens/s in *run (if not NULL). With
// read_repeat > 0 the pool is also read alone after the steps (pool_read.h), and best keeps the
// fastest such read of all the runs. -1 with one line in err, also when the pool held fewer.
static int held_run(const Model *m, const KVRecording *rec, const char *k_spec, const char *v_spec,
                    const BenchOptions *o, int lo, int hi, int first, int read_repeat, HeldDecode *best, double *run,
                    char *err, size_t errlen) {
    const ModelConfig *c = &m->config;
    KVPool sizing;
    if (kvpool_init_model(&sizing, c, o->block, c->max_seq_len, SIZE_MAX / 2,
                    cli_spec(k_spec), cli_spec(v_spec), err, errlen))
        return -1;
    const size_t budget = kvpool_budget_for(&sizing, o->batch, hi) + (size_t)o->batch * kvpool_block_set_bytes(&sizing);
    kvpool_free(&sizing);
    KVPool pool;
    if (kvpool_init_model(&pool, c, o->block, c->max_seq_len, budget, cli_spec(k_spec),
                    cli_spec(v_spec), err, errlen))
        return -1;
    HeldDecode hd;
    int rc = serve_held_decode(m, &pool, rec, o->batch, lo, hi, o->steps, o->threads[0], o->threads[0], read_repeat,
                               &hd, err, errlen);
    kvpool_free(&pool);
    if (!rc && hd.held < o->batch) {
        snprintf(err, errlen, "the pool held %d of %d conversations", hd.held, o->batch);
        rc = -1;
    }
    if (rc) return -1;
    if (run) *run = hd.tokens_per_s;
    const double read = first ? 0 : best->read_seconds, read_bytes = first ? 0 : best->read_bytes;
    if (first || hd.tokens_per_s > best->tokens_per_s) *best = hd;
    if (read > 0 && (best->read_seconds <= 0 || read < best->read_seconds))
        best->read_seconds = read, best->read_bytes = read_bytes;
    return 0;
}

// The best of `repeat` runs of each scheme, the schemes taking turns (fp16, the cache, fp16, ...):
// on a shared machine a slow spell then slows both, not one, and the ratio between them holds.
// The streaming bandwidth (DRAM: a 512 MiB buffer) is read before the runs (best of two rounds) and
// again after each turn (one round), the best kept: as many rounds as one reading of five took when
// the runs are three, spread over the run. The noise beside the best figures: the lowest of those
// readings, and in turn_ratio the lowest and highest ratio of a turn (the cache's run over the fp16
// run just before it).
static int held_best_pair(const Model *m, const KVRecording *rec, const char *const specs[2][2],
                          const BenchOptions *o, int lo, int hi, HeldDecode best[2], BandwidthReadings *bw,
                          double turn_ratio[2], char *err, size_t errlen) {
    BandwidthProbe *probe = bandwidth_probe_open((size_t)512 << 20, o->threads[0]);
    bandwidth_probe_note(probe, 2, bw);
    int rc = 0;
    for (int r = 0; r < o->repeat && !rc; r++) {
        double run[2] = {0, 0};
        for (int s = 0; s < 2 && !rc; s++)
            rc = held_run(m, rec, specs[s][0], specs[s][1], o, lo, hi, r == 0, 2, &best[s], &run[s], err, errlen);
        if (!rc) {
            const double ratio = run[1] / run[0];
            if (r == 0 || ratio < turn_ratio[0]) turn_ratio[0] = ratio;
            if (r == 0 || ratio > turn_ratio[1]) turn_ratio[1] = ratio;
        }
        bandwidth_probe_note(probe, 1, bw);
    }
    bandwidth_probe_close(probe);
    if (!rc && !(bw->best > 0)) {
        snprintf(err, errlen, "could not measure the streaming bandwidth (512 MiB, %d threads)", o->threads[0]);
        rc = -1;
    }
    return rc;
}

// The part of a step before attention at its floor: the other work (weights, norms, classifier), or
// reading the weights at the streaming bandwidth if that is longer.
static double other_or_weights(double other, double weight_bytes, double bw) {
    return other > weight_bytes / bw ? other : weight_bytes / bw;
}

// The pool read alone (pool_read.h) of each scheme's fastest run, against the streaming reading.
static void print_pool_reads(const HeldDecode held[2], const char *const specs[2][2], double bw) {
    printf("\nthe pool read alone: every block of the held conversations read whole, layer by layer and conversation\n"
           "by conversation as attention reaches them, with nothing computed (the fastest of two reads after each\n"
           "run); where the streaming reading reads one buffer in order, a pool's blocks lie anywhere in memory\n\n");
    printf("%-40s %10s %10s %10s %9s\n", "cache (K / V)", "read ms", "MB", "GB/s", "of stream");
    for (int s = 0; s < 2; s++) {
        char label[2 * SPEC_NORMALISED + 4];
        snprintf(label, sizeof label, "%s / %s", specs[s][0], specs[s][1]);
        const HeldDecode *h = &held[s];
        if (h->read_seconds > 0)
            printf("%-40s %10.2f %10.2f %10.1f %8.1f%%\n", label, 1e3 * h->read_seconds, h->read_bytes / 1e6,
                   h->read_bytes / h->read_seconds / 1e9, 100.0 * h->read_bytes / h->read_seconds / bw);
        else
            printf("%-40s %10s %10s %10s %9s   (a codec whose blocks are several allocations)\n", label, "-", "-", "-",
                   "-");
    }
}

// What reading a cache through a block table costs the kernels, their bytes in cache: vLLM's own
// measure of its paged kernels (Kwon et al. 2023, section 7.1: 20-26% slower than FasterTransformer's
// contiguous ones). Here the reference is the same kernels on a cache that is one block.
static void print_paging_cost(const double per_ht[2], const double per_ht_one[2], const char *const specs[2][2],
                              int block) {
    printf("\npaging's cost on the kernels: with each conversation's cache in one block, they take %.2f (%s) and\n"
           "%.2f (%s) ns per head and token in cache, so blocks of %d tokens cost them %+.0f%% and %+.0f%% (vLLM\n"
           "measured its paged kernels 20-26%% slower than FasterTransformer's contiguous ones)\n",
           1e9 * per_ht_one[0], specs[0][0], 1e9 * per_ht_one[1], specs[1][0], block,
           100.0 * (per_ht[0] / per_ht_one[0] - 1), 100.0 * (per_ht[1] / per_ht_one[1] - 1));
}

// The first target alone, against how fast this machine reads a pool rather than one buffer. Not a
// bound: the step may overlap some of its reading with its products, and a plain read may not be the
// fastest way through the blocks; the ratio says how close the step comes to it.
static void print_fp16_alone(const HeldDecode *fp16, double bw, double other) {
    if (fp16->read_seconds <= 0) return;
    const double c16 = fp16->cache_bytes_per_step, w = fp16->weight_bytes;
    const double fp16_free = other_or_weights(other, w, bw) + fp16->read_seconds;
    const double measured = fp16->seconds / fp16->steps;
    printf("\nfp16 alone: its other work and the read of its pool alone (above) add up to %.2f ms, %.1f%% of its\n"
           "roofline; its measured step, %.2f ms, is %.0f%% of that\n",
           1e3 * fp16_free, 100.0 * (c16 + w) / bw / fp16_free, 1e3 * measured, 100.0 * measured / fp16_free);
}

// The batched decode's two speed targets at once (docs/performance.md), as a closed form of the run's figures. fp16 at 80% of its
// roofline is a step of R16 / 0.8 (R: the step's cache and weight bytes over the bandwidth); the
// cache 0.8 × its bytes ratio faster than that is a step of (R16 / 0.8) · C / (0.8 · C16), which is
// a roofline share of at least 0.64 (more with the weights in R). Against it: the cache's step if
// its kernels cost nothing, the other work (or reading the weights) and then reading the cache at
// the streaming bandwidth.
static void print_both_targets(const HeldDecode held[2], double bw, double other) {
    const double c16 = held[0].cache_bytes_per_step, c = held[1].cache_bytes_per_step, w = held[1].weight_bytes;
    const double fp16_step = (c16 + w) / bw / 0.8, step = fp16_step * c / (0.8 * c16);
    const double free_kernels = other_or_weights(other, w, bw) + c / bw;
    printf("\nboth targets at once: fp16 at 80%% of its roofline is a step of %.2f ms; 0.8 x the bytes ratio faster\n"
           "than that is %.2f ms for this cache, %.1f%% of its roofline. Its other work and the reading of its cache\n"
           "at the streaming bandwidth take %.2f ms (%.1f%%) with kernels that cost nothing: ",
           1e3 * fp16_step, 1e3 * step, 100.0 * (c + w) / bw / step, 1e3 * free_kernels,
           100.0 * (c + w) / bw / free_kernels);
    if (free_kernels > step)
        printf("with this step's other work\nthe two targets cannot both be met\n");
    else
        printf("both can be met only if attention\nadds at most %.2f ms to that reading\n", 1e3 * (step - free_kernels));
}

// Batched decode at long context, fp16 against the chosen cache in one run: each scheme's pool holds
// the same `batch` conversations (sized for them in that scheme), their caches the model's own keys
// and values (one recorded conversation, encoded into every conversation's blocks), ending from the
// context down to half of it; `steps` decode steps are timed, best of `repeat`. Then each step's
// floor (bench_floor.c): the same step if no read of the cache waited on DRAM.
static int bench_batch(const Model *m, const BenchOptions *o, char *err, size_t errlen) {
    const ModelConfig *c = &m->config;
    const int n = c->max_seq_len, threads = o->threads[0], few = o->steps + 16;
    if (kvpool_check_block(o->block, n, err, errlen)) return -1;
    if (o->block > n || n / 2 < o->steps + 1 || few > n) {
        snprintf(err, errlen, "--block %d / --steps %d do not fit the model's context of %d", o->block, o->steps, n);
        return -1;
    }
    int *tokens = malloc(sizeof(int) * (size_t)n);
    if (!tokens) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    uint64_t rng = 88172645463325252ull;
    tokens[0] = MICRO_BOS;
    for (int t = 1; t < n; t++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        tokens[t] = 32 + (int)(rng % 95); // printable bytes: the recording is the model's response to them
    }
    KVRecording rec;
    int rc = kv_record(m, tokens, n, threads, &rec, err, errlen);
    free(tokens);
    if (rc) return -1;
    const char *const specs[2][2] = {{"fp16", "fp16"}, {o->k_spec, o->v_spec}};
    HeldDecode held[2];
    BandwidthReadings readings = {0};
    double turn_ratio[2] = {0, 0};
    printf("micro bench --batch: %d conversations ending at positions %d..%d, blocks of %d tokens, %d steps, best of "
           "%d, %d thread%s; kernels: %s\n",
           o->batch, n / 2, n, o->block, o->steps, o->repeat, threads, threads == 1 ? "" : "s", cli_kernels());
    fflush(stdout); // the runs take a while
    rc = held_best_pair(m, &rec, specs, o, n / 2, n, held, &readings, turn_ratio, err, errlen);
    const double bw = readings.best;
    if (!rc) {
        printf("streaming read bandwidth measured here: %.2f GB/s (%d thread%s, the best of %d readings taken around the\n"
               "runs, the lowest %.2f); roofline = (cache + weights read per step) / bandwidth, as a share of the step's\n"
               "time\n\n",
               bw / 1e9, threads, threads == 1 ? "" : "s", readings.count, readings.low / 1e9);
        printf("%-40s %10s %10s %10s %9s | %9s %9s\n", "cache (K / V)", "tokens/s", "step ms", "MB/step", "roofline",
               "x fp16", "bytes /");
    }
    for (int s = 0; s < 2 && !rc; s++) {
        const HeldDecode *h = &held[s];
        const double step = h->seconds / h->steps, bytes = h->cache_bytes_per_step;
        char label[2 * SPEC_NORMALISED + 4];
        snprintf(label, sizeof label, "%s / %s", specs[s][0], specs[s][1]);
        printf("%-40s %10.0f %10.2f %10.2f %8.1f%% | %8.2fx %8.2fx\n", label, h->tokens_per_s, 1e3 * step, bytes / 1e6,
               100.0 * (bytes + h->weight_bytes) / bw / step, h->tokens_per_s / held[0].tokens_per_s,
               held[0].cache_bytes_per_step / bytes);
    }
    if (!rc)
        printf("\nx fp16: tokens/s against fp16's (best against best; turn by turn, each run of the cache against the\n"
               "fp16 run just before it: %.2fx to %.2fx over %d turns); bytes /: fp16's cache bytes per step over this\n"
               "cache's (the speed-up that reading fewer bytes alone would give)\n",
               turn_ratio[0], turn_ratio[1], o->repeat);
    // The floor: attention's cost per head and token with its blocks in cache, and the rest of the
    // step from the same conversations at `few` positions, less their attention at that cost.
    // per_ht_one: the same with each conversation's cache in one block, paging's reference, measured
    // right after its paged pair (a slow spell on this shared machine then slows both).
    double per_ht[2] = {0, 0}, per_ht_one[2] = {0, 0};
    HeldDecode short_run;
    for (int s = 0; s < 2 && !rc; s++) {
        const CodecSpec *k = cli_spec(specs[s][0]), *v = cli_spec(specs[s][1]);
        rc = attention_in_cache(m, &rec, k, v, o->block, o->repeat, &per_ht[s], err, errlen);
        if (!rc && o->block < n) rc = attention_in_cache(m, &rec, k, v, n, o->repeat, &per_ht_one[s], err, errlen);
    }
    for (int r = 0; r < o->repeat && !rc; r++)
        rc = held_run(m, &rec, "fp16", "fp16", o, few, few, r == 0, 0, &short_run, NULL, err, errlen);
    if (!rc) {
        const double heads = (double)c->n_layers * c->n_heads;
        double other = short_run.seconds / short_run.steps - short_run.attended_per_step * heads * per_ht[0] / threads;
        other = other > 0 ? other : 0;
        printf("\nthe floor: the step's other work (weights, norms, classifier: %.2f ms, timed with the same conversations\n"
               "at %d positions; or reading the weights, if longer), then attention, no faster than its kernels with\n"
               "every block in cache (scores, softmax, mix per head and token, one conversation of up to 1,024 tokens\n"
               "a layer at a time, shared by %d thread%s) nor than reading the cache at the streaming bandwidth. The\n"
               "two parts run one after the other: attention needs the layer's products, the next products its output.\n\n",
               1e3 * other, few, threads, threads == 1 ? "" : "s");
        printf("%-40s %10s %10s %10s %9s | %9s %9s\n", "cache (K / V)", "ns/head.t", "kernels ms", "read ms", "at best",
               "x fp16", "target");
        const double fp16_step = held[0].seconds / held[0].steps;
        double at_best_x = 0; // the most this cache can gain on fp16 with these kernels
        for (int s = 0; s < 2; s++) {
            const HeldDecode *h = &held[s];
            const double kernels = h->attended_per_step * heads * per_ht[s] / threads;
            // Neither part is faster than reading its bytes: the weights, then the cache.
            const double first = other_or_weights(other, h->weight_bytes, bw);
            const double read = h->cache_bytes_per_step / bw, best = first + (kernels > read ? kernels : read);
            char label[2 * SPEC_NORMALISED + 4];
            snprintf(label, sizeof label, "%s / %s", specs[s][0], specs[s][1]);
            char target[16] = "-"; // fp16's own target is the roofline share
            if (s > 0) snprintf(target, sizeof target, "%.2fx", 0.8 * held[0].cache_bytes_per_step / h->cache_bytes_per_step);
            printf("%-40s %10.2f %10.2f %10.2f %8.1f%% | %8.2fx %9s\n", label, 1e9 * per_ht[s], 1e3 * kernels,
                   1e3 * read, 100.0 * (h->cache_bytes_per_step + h->weight_bytes) / bw / best, fp16_step / best, target);
            if (s == 1) at_best_x = fp16_step / best;
        }
        printf("\nat best: the roofline share of a step of the other work and the larger of kernels and read; x fp16:\n"
               "fp16's measured step over that step (the most this cache can gain with these kernels on fp16 as it\n"
               "runs now); target: 0.8 x the bytes ratio\n");
        if (o->block < n) print_paging_cost(per_ht, per_ht_one, specs, o->block);
        print_pool_reads(held, specs, bw);
        print_fp16_alone(&held[0], bw, other);
        if (held[1].cache_bytes_per_step < held[0].cache_bytes_per_step) print_both_targets(held, bw, other);
        const double x = held[1].tokens_per_s / held[0].tokens_per_s;
        printf("\ntarget (docs/performance.md, for the plate's 4-bit scheme at 32 conversations): %s / %s at >= 2x fp16's\n"
               "tokens/s: %.2fx (%s); the floor above puts this cache at best at %.2fx fp16's measured step\n",
               specs[1][0], specs[1][1], x, x >= 2 ? "met" : "not met", at_best_x);
    }
    kv_recording_free(&rec);
    return rc;
}

// The streaming rate of one thread through a buffer of about `bytes`: sizes within 1/32 of a power
// of two of each other are one buffer (the rate does not tell them apart), measured once a command:
// a decode's eighths at short position counts, and a small model's every step, fall on few sizes.
// 0 when a buffer could not be made.
typedef struct {
    size_t bytes;
    double rate;
} RateAtSize;
static double rate_at_size(double bytes) {
    static RateAtSize known[64];
    static int n_known;
    size_t b = bytes < 64 ? 64 : (size_t)bytes, step = 1;
    while (step * 64 <= b) step *= 2; // 1/32 of b's power of two
    b = b / step * step; // down: a smaller buffer reads no slower, so the roofline is not flattered
    for (int i = 0; i < n_known; i++)
        if (known[i].bytes == b) return known[i].rate;
    const double rate = read_bandwidth(b, 1);
    if (rate > 0 && n_known < 64) known[n_known++] = (RateAtSize){b, rate};
    return rate;
}

// The same-size roofline of a decode of positions 0..n-1: step p reads the weights and the cache of
// positions 0..p, from a buffer of that size, at the rate measured for a buffer of that size. The rate
// falls where the bytes outgrow the caches, which a long decode's steps do part of the way through;
// one buffer of the mean step's size held every step to the rate below that edge. The steps are
// taken in ROOFLINE_SEGMENTS equal runs, each at its middle step's size (into bytes[] and rate[]).
// Seconds, or -1 when a buffer could not be made.
enum { ROOFLINE_SEGMENTS = 8 }; // an eighth: the output says so
static double step_roofline_seconds(double weight_bytes, double cache_bytes, int n, double *bytes, double *rate) {
    double seconds = 0;
    for (int s = 0; s < ROOFLINE_SEGMENTS; s++) {
        bytes[s] = weight_bytes + cache_bytes * (s + 0.5) / ROOFLINE_SEGMENTS;
        rate[s] = rate_at_size(bytes[s]);
        if (!(rate[s] > 0)) return -1;
        seconds += (double)n / ROOFLINE_SEGMENTS * bytes[s] / rate[s];
    }
    return seconds;
}

// The target (docs/performance.md): decode on 1 thread at >= 70% of the roofline against a buffer of
// the step's size, at every position count. Where it is missed, the attention time measured above is
// the reason to read: the roofline counts the cache only as bytes read, the kernels also compute.
static void print_decode_target(const int *positions, const double *share, const double *mean_share, int np, int n,
                                double attention, double whole) {
    int asked = 0, met = 0;
    printf("target: decode on 1 thread at >= 70%% of the same-size roofline:");
    for (int a = 0; a < np; a++) {
        if (share[a] < 0) continue;
        asked++, met += share[a] >= 0.7;
        printf(" %d positions %.1f%%%s", positions[a], 100 * share[a], a + 1 < np ? "," : "");
    }
    if (!asked) {
        printf(" (no 1-thread run: --threads without 1)\n");
        return;
    }
    printf(" (%s)\n", met == asked ? "met" : met ? "met at some" : "not met");
    printf("against one buffer of the mean step's size instead (every step held to its rate):");
    for (int a = 0; a < np; a++)
        if (mean_share[a] >= 0) printf(" %.1f%%", 100 * mean_share[a]);
    printf("\n");
    if (met < asked)
        printf("at %d positions a step's attention alone takes %.1f us (fp32, above) of the %.1f us a token takes on\n"
               "average over the whole decode: the roofline counts the cache's bytes, not the scores and sums over them\n",
               n, 1e6 * attention, 1e6 * whole / n);
}

int cmd_bench(int argc, char **argv) {
    BenchOptions o;
    char err[512];
    int done = cli_after_parse(bench_parse(argc, argv, &o, err, sizeof err), err, bench_usage);
    if (done >= 0) return done;
    const char *k_spec = o.k_spec, *v_spec = o.v_spec;
    const int repeat = o.repeat, nt = o.n_threads, *threads = o.threads;
    Model m;
    // --eval reads any vocabulary (the plates through the model's own tokenizer); the rest bytes.
    if (o.eval ? cli_load_any_model(&m, o.model_path, o.calib_path, err, sizeof err)
               : cli_load_model(&m, o.model_path, o.calib_path, err, sizeof err))
        return cli_error("%s", err);
    if (cmd_check_specs_for_model(&m, k_spec, v_spec, err, sizeof err) ||
        fit_positions(&o, m.config.max_seq_len, err, sizeof err)) {
        model_free(&m);
        return cli_error("%s", err);
    }
    const int np = o.n_positions, *positions = o.positions;
    if (o.eval) { // at the longest of the positions (the model's context by default)
        int n = 2;
        for (int a = 0; a < np; a++) n = positions[a] > n ? positions[a] : n;
        // The memory line is about large vocabularies: a model of micro's bytes holds a few MB.
        const int rc = bench_eval(&m, k_spec, v_spec, n, threads[0], repeat, !o.no_decode, err, sizeof err) ||
                       (m.tokenizer &&
                        bench_eval_memory(&m, o.model_path, o.calib_path, k_spec, v_spec, threads[0], err, sizeof err));
        model_free(&m);
        return rc ? cli_error("%s", err) : 0;
    }
    if (o.batch > 0) {
        const int rc = bench_batch(&m, &o, err, sizeof err);
        model_free(&m);
        return rc ? cli_error("%s", err) : 0;
    }

    double weight_bytes = (double)m.n_params * sizeof(float);
    double dram_bw = read_bandwidth((size_t)512 << 20, 1);
    printf("micro bench: %zu parameters (%.1f MB fp32), cache %s / %s, best of %d; kernels: %s\n", m.n_params,
           weight_bytes / 1e6, k_spec, v_spec, repeat, cli_kernels());
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    for (int b = 0; b < nt; b++)
        if (cores >= 1 && threads[b] > cores) {
            printf("this machine has %ld online cores: thread counts above it run on %ld threads\n", cores, cores);
            break;
        }
    printf("streaming read bandwidth measured here: %.1f GB/s from DRAM (512 MiB buffer)\n", dram_bw / 1e9);
    printf("roofline = bytes touched per token / bandwidth, as a share of the time taken: against DRAM, and against\n"
           "buffers the size of what each step touches (the weights and the cache so far), each read at the rate\n"
           "measured for its size (the cache level the step's bytes really come from)\n\n");
    printf("%9s %7s %12s %12s %12s %14s %14s %9s\n", "positions", "threads", "tokens/s", "us/token", "MB/token",
           "roofline DRAM", "roofline same", "speedup");
    double one_thread[64]; // the same-size roofline share on 1 thread, per position count (-1: not run)
    double one_mean[64];   // the same against one buffer of the mean step's size
    double seg_bytes[ROOFLINE_SEGMENTS], seg_rate[ROOFLINE_SEGMENTS]; // the longest decode's buffers
    int seg_positions = 0;
    for (int a = 0; a < np; a++) {
        double base = 0, roof = 0, mean_roof = 0;
        one_thread[a] = one_mean[a] = -1;
        for (int b = 0; b < nt; b++) {
            size_t cache_bytes;
            double t;
            if (time_decode(&m, k_spec, v_spec, positions[a], threads[b], repeat, &cache_bytes, &t, err, sizeof err))
                goto fail;
            double tps = positions[a] / t;
            // Each step reads every weight once and, on average, half the final cache.
            double touched = weight_bytes + 0.5 * (double)cache_bytes;
            if (b == 0) {
                double bytes[ROOFLINE_SEGMENTS], rate[ROOFLINE_SEGMENTS];
                roof = step_roofline_seconds(weight_bytes, (double)cache_bytes, positions[a], bytes, rate);
                mean_roof = positions[a] * touched / rate_at_size(touched);
                if (!(roof > 0) || !(mean_roof > 0)) {
                    snprintf(err, sizeof err, "could not map a buffer to measure the bandwidth");
                    goto fail;
                }
                if (positions[a] >= seg_positions) {
                    seg_positions = positions[a];
                    memcpy(seg_bytes, bytes, sizeof bytes), memcpy(seg_rate, rate, sizeof rate);
                }
            }
            double per_token = t / positions[a];
            if (b == 0) base = tps;
            if (threads[b] == 1) one_thread[a] = roof / t, one_mean[a] = mean_roof / t;
            printf("%9d %7d %12.0f %12.1f %12.2f %13.1f%% %13.1f%% %8.2fx\n", positions[a], threads[b], tps,
                   1e6 * per_token, touched / 1e6, 100.0 * touched / dram_bw / per_token, 100.0 * roof / t, tps / base);
        }
    }
    printf("\nthe same-size reads of the %d-position decode, an eighth of its steps each (MB at GB/s):", seg_positions);
    for (int s = 0; s < ROOFLINE_SEGMENTS; s++)
        printf(" %.2f at %.0f%s", seg_bytes[s] / 1e6, seg_rate[s] / 1e9, s + 1 < ROOFLINE_SEGMENTS ? "," : "\n");
    // The attention and whole-decode figures are taken at the longest of the positions asked for
    // (2048 by default): a fixed 2048 made `--positions 2,3` run for minutes on a sanitized build.
    int n = 0;
    for (int a = 0; a < np; a++) n = positions[a] > n ? positions[a] : n;
    double t_ref, t_spec;
    if (time_attention(&m, "fp32", "fp32", n, repeat, &t_ref, err, sizeof err) ||
        time_attention(&m, k_spec, v_spec, n, repeat, &t_spec, err, sizeof err))
        goto fail;
    printf("\nattention per decode step at %d positions (1 thread):\n", n);
    printf("  %-40s %9.1f us\n", "fp32 / fp32", 1e6 * t_ref);
    char label[256];
    snprintf(label, sizeof label, "%s / %s", k_spec, v_spec);
    printf("  %-40s %9.1f us   ratio %.2fx of fp32\n", label, 1e6 * t_spec, t_spec / t_ref);
    size_t bytes_ref, bytes_spec;
    double whole_ref, whole_spec;
    if (time_decode(&m, "fp32", "fp32", n, 1, repeat, &bytes_ref, &whole_ref, err, sizeof err) ||
        time_decode(&m, k_spec, v_spec, n, 1, repeat, &bytes_spec, &whole_spec, err, sizeof err))
        goto fail;
    printf("whole decode of %d positions (1 thread): fp32 %.0f tokens/s, %s %.0f tokens/s, ratio %.2fx time of fp32\n", n,
           n / whole_ref, label, n / whole_spec, whole_spec / whole_ref);
    print_decode_target(positions, one_thread, one_mean, np, n, t_ref, whole_ref);
    model_free(&m);
    return 0;
fail:
    model_free(&m);
    return cli_error("%s", err);
}
