// micro serve-bench: what a narrower cache buys, measured. A seeded workload of conversations runs
// through one paged pool of a fixed byte budget with continuous batching, once per cache scheme,
// side by side in one run: conversations held at once, preemptions, tokens/s, step times, pool
// use, cache bytes read per step and the memory roofline.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "clock.h"
#include "cmd_options.h"
#include "commands.h"
#include "membw.h"
#include "model_file.h"
#include "msgtext.h"
#include "safe_file.h"
#include "serve.h"
#include "text.h"
#include "tokenizer.h"

static const char *serve_bench_usage =
    "usage: micro serve-bench [options]\n"
    "  Runs a seeded workload of conversations through one paged KV-cache pool of a fixed byte\n"
    "  budget (blocks of --block tokens per layer and stream, vLLM's PagedAttention), decoding every\n"
    "  running conversation one token per step (continuous batching: a conversation is admitted when\n"
    "  the pool has blocks for its prompt; when one cannot grow, the newest running one is preempted\n"
    "  and recomputed later). Replies are greedy. Once per cache scheme, side by side.\n"
    "options:\n"
    "  --model FILE          model file (default models/micro.bin)\n"
    "  --calib FILE          kvquant's calibration (default beside the model: models/micro.kvq)\n"
    "  --cache SPEC          a scheme for both streams; repeat to compare (default: fp16 and int:bits=4)\n"
    "  --k SPEC, --v SPEC    a scheme with different streams; the i-th --k pairs with the i-th --v\n"
    "  --pool-mb X           the pool's budget in MB (10^6 bytes), at most the machine's memory;\n"
    "                        default: what --pool-fp16 fp16 conversations of --length tokens hold\n"
    "                        (with multi-head attention: every model of a shape gets the same bytes),\n"
    "                        and the blocks one step takes before the last ones settle\n"
    "  --pool-fp16 N         the default budget in fp16 conversations (default 16)\n"
    "  --block N             tokens per block, a multiple of 16 or the whole context (default 16, vLLM's)\n"
    "  --workload KIND       fixed: every conversation --length tokens, half prompt, half reply (default);\n"
    "                        chat: prompt and reply uniform on 1..321 and 1..675 tokens (means 161 and\n"
    "                        338, KIVI's ShareGPT setting), cut to --length\n"
    "  --length N            tokens per conversation (fixed) or at most (chat), 2..context (default 2048)\n"
    "  --conversations N     conversations in the workload (default 32)\n"
    "  --max-batch N         conversations running at once, at most (default 256)\n"
    "  --threads N           threads per step (default 1)\n"
    "  --seed N              the workload's seed (default 1)\n"
    "  --long-from N         positions from which a full batch's step counts as long context (default 1024)\n"
    "  --csv, --json         machine-readable output (one row / object per scheme)\n"
    "  -h, --help            this help\n";

int serve_bench_parse(int argc, char **argv, ServeBenchOptions *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->pool_fp16 = 16, o->block = 16, o->conversations = 32, o->max_batch = 256, o->threads = 1;
    o->length = 2048, o->long_from = 1024, o->seed = 1, o->workload = WORKLOAD_FIXED;
    int n_k = 0, n_v = 0, n_cache = 0;
    const char *k_specs[SERVE_MAX_SCHEMES], *v_specs[SERVE_MAX_SCHEMES];
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad = 0;
        const char *value;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--calib")) bad = opts_path(&p, &o->calib_path);
        else if (opts_is(&p, "--cache") || opts_is(&p, "--k") || opts_is(&p, "--v")) {
            const int which = opts_is(&p, "--cache") ? 0 : opts_is(&p, "--k") ? 1 : 2;
            if ((bad = opts_value(&p, &value))) break;
            if (n_cache + (n_k > n_v ? n_k : n_v) >= SERVE_MAX_SCHEMES)
                return opts_fail(&p, "at most %d schemes in one run", SERVE_MAX_SCHEMES);
            if (which == 0) {
                o->k_specs[o->n_schemes] = o->v_specs[o->n_schemes] = value;
                o->n_schemes++, n_cache++;
            } else if (which == 1) {
                k_specs[n_k++] = value;
            } else {
                v_specs[n_v++] = value;
            }
        } else if (opts_is(&p, "--pool-mb")) bad = opts_double(&p, 1e-6, 1e7, &o->pool_mb);
        else if (opts_is(&p, "--pool-fp16")) bad = opts_int(&p, 1, 100000, &o->pool_fp16);
        else if (opts_is(&p, "--block")) bad = opts_int(&p, 1, 1 << 20, &o->block);
        else if (opts_is(&p, "--length")) bad = opts_int(&p, 2, 1 << 20, &o->length);
        else if (opts_is(&p, "--conversations")) bad = opts_int(&p, 1, 100000, &o->conversations);
        else if (opts_is(&p, "--max-batch")) bad = opts_int(&p, 1, 4096, &o->max_batch);
        else if (opts_is(&p, "--threads")) bad = opts_int(&p, 1, 256, &o->threads);
        else if (opts_is(&p, "--seed")) bad = opts_u64(&p, &o->seed);
        else if (opts_is(&p, "--long-from")) bad = opts_int(&p, 0, 1 << 20, &o->long_from);
        else if (opts_is(&p, "--workload")) {
            if ((bad = opts_string(&p, &value))) break;
            if (!strcmp(value, "fixed")) o->workload = WORKLOAD_FIXED;
            else if (!strcmp(value, "chat")) o->workload = WORKLOAD_CHAT;
            else {
                char shown[MSG_TEXT];
                return opts_fail(&p, "--workload: '%s' is not fixed or chat", msg_text(value, shown, sizeof shown));
            }
        } else if (opts_is(&p, "--csv")) bad = opts_flag(&p), o->csv = 1;
        else if (opts_is(&p, "--json")) bad = opts_flag(&p), o->json = 1;
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (n_k != n_v) {
        snprintf(err, errlen, "%d --k but %d --v: each --k needs its --v (or use --cache)", n_k, n_v);
        return OPTS_ERROR;
    }
    for (int i = 0; i < n_k; i++) {
        o->k_specs[o->n_schemes] = k_specs[i], o->v_specs[o->n_schemes] = v_specs[i];
        o->n_schemes++;
    }
    if (o->n_schemes == 0) {
        o->k_specs[0] = o->v_specs[0] = "fp16";
        o->k_specs[1] = o->v_specs[1] = "int:bits=4";
        o->n_schemes = 2;
    }
    if (o->csv && o->json) {
        snprintf(err, errlen, "--csv and --json: choose one");
        return OPTS_ERROR;
    }
    for (int i = 0; i < o->n_schemes; i++)
        if (cmd_check_specs(o->k_specs[i], o->v_specs[i], err, errlen)) return OPTS_ERROR;
    return OPTS_RUN;
}

// The prompts' text: both plates, one after the other (whole files, bytes as they are): regular
// files only (a FIFO would block forever), at most a text's limit each (text.h).
static int read_text(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen) {
    char shown[MSG_TEXT];
    long long size;
    FILE *f = safe_open_read(path, &size, err, errlen);
    if (!f) return -1;
    if (size > TEXT_MAX_BYTES) {
        fclose(f);
        snprintf(err, errlen, "%s: %lld bytes, more than the %d MiB a text may hold", msg_text(path, shown, sizeof shown),
                 size, TEXT_MAX_BYTES >> 20);
        return -1;
    }
    uint8_t *grown = realloc(*buf, *len + (size_t)size + 1);
    if (!grown) {
        fclose(f);
        snprintf(err, errlen, "out of memory reading %s", msg_text(path, shown, sizeof shown));
        return -1;
    }
    *buf = grown;
    const size_t got = fread(grown + *len, 1, (size_t)size, f);
    const int failed = ferror(f);
    fclose(f);
    if (failed) {
        snprintf(err, errlen, "cannot read %s", msg_text(path, shown, sizeof shown));
        return -1;
    }
    *len += got;
    return 0;
}

typedef struct {
    const char *label;
    double last;
} Progress;

// One line on a terminal, rewritten at most four times a second.
static void show_progress(void *ctx, long step, int running, long done, long total, long preemptions) {
    Progress *p = ctx;
    const double t = seconds_now();
    if (t - p->last < 0.25 && done < total) return;
    p->last = t;
    fprintf(stderr, "\r%-36s step %6ld  %4d running  %7ld / %ld tokens  %ld preempted ", p->label, step, running,
            done, total, preemptions);
    if (done >= total) fprintf(stderr, "\r%*s\r", 110, "");
    fflush(stderr);
}

typedef struct {
    char k[SPEC_NORMALISED], v[SPEC_NORMALISED];
    size_t block_bytes_k, block_bytes_v; // one settled block of one layer
    ServeStats st;
    double tokens_per_s, roofline, long_tokens_per_s, long_roofline;
} SchemeResult;

static void print_csv(const SchemeResult *r, int n, const ServeBenchOptions *o, double budget, double bw) {
    printf("k_cache,v_cache,conversations_max,conversations_mean,preemptions,tokens_per_s,step_ms_p50,step_ms_p99,"
           "pool_utilisation,cache_bytes_per_step,roofline,long_steps,long_tokens_per_s,long_roofline,tokens,"
           "recomputed_tokens,steps,seconds,pool_waste_blocks,block_bytes_k,block_bytes_v,pool_bytes,block,"
           "conversations,workload,threads,bandwidth_bytes_per_s\n");
    for (int i = 0; i < n; i++) {
        const ServeStats *s = &r[i].st;
        csv_field(r[i].k);
        putchar(',');
        csv_field(r[i].v);
        printf(",%d,%.3f,%ld,%.1f,%.3f,%.3f,%.4f,%.0f,%.4f,%ld,%.1f,%.4f,%ld,%ld,%ld,%.3f,%.3f,%zu,%zu,%.0f,%d,%d,%s,%d,%.0f\n",
               s->conversations_max, s->conversations_mean, s->preemptions, r[i].tokens_per_s, s->step_ms_p50,
               s->step_ms_p99, s->pool_utilisation, s->cache_bytes_per_step, r[i].roofline, s->long_steps,
               r[i].long_tokens_per_s, r[i].long_roofline, s->tokens, s->recomputed, s->steps, s->seconds,
               s->pool_waste_blocks, r[i].block_bytes_k, r[i].block_bytes_v, budget, o->block, o->conversations,
               o->workload == WORKLOAD_CHAT ? "chat" : "fixed", o->threads, bw);
    }
}

static void print_json(const SchemeResult *r, int n, const ServeBenchOptions *o, double budget, double bw) {
    printf("{\"workload\": \"%s\", \"conversations\": %d, \"length\": %d, \"seed\": %llu, \"block\": %d, "
           "\"pool_bytes\": %.0f, \"max_batch\": %d, \"threads\": %d, \"bandwidth_bytes_per_s\": %.0f, "
           "\"schemes\": [",
           o->workload == WORKLOAD_CHAT ? "chat" : "fixed", o->conversations, o->length, o->seed, o->block, budget,
           o->max_batch, o->threads, bw);
    for (int i = 0; i < n; i++) {
        const ServeStats *s = &r[i].st;
        printf("%s\n  {\"k_cache\": ", i ? "," : "");
        json_string_to(stdout, r[i].k);
        printf(", \"v_cache\": ");
        json_string_to(stdout, r[i].v);
        printf(", \"conversations_max\": %d, \"conversations_mean\": %.3f, \"preemptions\": %ld, "
               "\"tokens_per_s\": %.1f, \"step_ms_p50\": %.3f, \"step_ms_p99\": %.3f, \"pool_utilisation\": %.4f, "
               "\"cache_bytes_per_step\": %.0f, \"roofline\": %.4f, \"long_steps\": %ld, \"long_tokens_per_s\": %.1f, "
               "\"long_roofline\": %.4f, \"tokens\": %ld, \"recomputed_tokens\": %ld, \"steps\": %ld, "
               "\"seconds\": %.3f, \"pool_waste_blocks\": %.3f, \"block_bytes_k\": %zu, \"block_bytes_v\": %zu}",
               s->conversations_max, s->conversations_mean, s->preemptions, r[i].tokens_per_s, s->step_ms_p50,
               s->step_ms_p99, s->pool_utilisation, s->cache_bytes_per_step, r[i].roofline, s->long_steps,
               r[i].long_tokens_per_s, r[i].long_roofline, s->tokens, s->recomputed, s->steps, s->seconds,
               s->pool_waste_blocks, r[i].block_bytes_k, r[i].block_bytes_v);
    }
    printf("\n]}\n");
}

static void print_table(const SchemeResult *r, int n, const ServeBenchOptions *o, double budget,
                        const BandwidthReadings *bw) {
    printf("%-34s %5s %6s %6s %10s %8s %8s %6s %6s %9s %8s | %10s %8s\n", "cache (K / V)", "held", "mean", "preempt",
           "tokens/s", "step p50", "p99 ms", "pool", "waste", "MB/step", "roofline", "long tok/s", "roofline");
    for (int i = 0; i < n; i++) {
        const ServeStats *s = &r[i].st;
        char label[2 * SPEC_NORMALISED + 4];
        if (!strcmp(r[i].k, r[i].v)) snprintf(label, sizeof label, "%s", r[i].k);
        else snprintf(label, sizeof label, "%s / %s", r[i].k, r[i].v);
        char long_tps[32] = "-", long_roof[32] = "-";
        if (s->long_steps > 0) {
            snprintf(long_tps, sizeof long_tps, "%.0f", r[i].long_tokens_per_s);
            snprintf(long_roof, sizeof long_roof, "%.1f%%", 100.0 * r[i].long_roofline);
        }
        printf("%-34s %5d %6.1f %6ld %10.0f %8.2f %8.2f %5.1f%% %6.2f %9.2f %7.1f%% | %10s %8s\n", label,
               s->conversations_max, s->conversations_mean, s->preemptions, r[i].tokens_per_s, s->step_ms_p50,
               s->step_ms_p99, 100.0 * s->pool_utilisation, s->pool_waste_blocks, s->cache_bytes_per_step / 1e6,
               100.0 * r[i].roofline, long_tps, long_roof);
    }
    printf("\nheld: conversations running at once (most, mean over steps); pool: share of its %.1f MB holding\n"
           "tokens (mean over steps); waste: bytes charged but not holding tokens, in blocks per running stream\n"
           "(most over steps); MB/step: cache bytes attention read per step (mean); roofline: (cache + %.1f MB of\n"
           "weights per step) / %.1f GB/s streaming bandwidth measured here (the best of %d readings, the lowest\n"
           "%.1f), as a share of the time taken; long: steps with %d conversations running, all past %d positions.\n",
           budget / 1e6, r[0].st.weight_bytes / 1e6, bw->best / 1e9, bw->count, bw->low / 1e9,
           o->max_batch < o->conversations ? o->max_batch : o->conversations, o->long_from);
}

int cmd_serve_bench(int argc, char **argv) {
    ServeBenchOptions o;
    char err[512], path[4096];
    int done = cli_after_parse(serve_bench_parse(argc, argv, &o, err, sizeof err), err, serve_bench_usage);
    if (done >= 0) return done;
    Model m;
    if (cli_load_any_model(&m, o.model_path, o.calib_path, err, sizeof err))
        return cli_error("%s", err);
    const ModelConfig *c = &m.config;
    int status = 2;
    uint8_t *text = NULL;
    size_t text_len = 0;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    Workload w = {0};
    BandwidthProbe *probe = NULL;
    SchemeResult *results = calloc((size_t)o.n_schemes, sizeof *results);
    KVPool *pools = calloc((size_t)o.n_schemes, sizeof *pools);
    int n_pools = 0; // initialised
    if (!results || !pools) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    for (int i = 0; i < o.n_schemes; i++)
        if (cmd_check_specs_for_model(&m, o.k_specs[i], o.v_specs[i], err, sizeof err)) goto fail;
    if (o.length > c->max_seq_len) {
        snprintf(err, sizeof err, "--length: a conversation of %d tokens is longer than the model's context (%d)",
                 o.length, c->max_seq_len);
        goto fail;
    }
    if (o.block > c->max_seq_len) {
        snprintf(err, sizeof err, "--block: %d tokens is longer than the model's context (%d)", o.block, c->max_seq_len);
        goto fail;
    }
    if (read_text(cli_default_path(NULL, "data/plates/en.txt", path, sizeof path), &text, &text_len, err, sizeof err) ||
        read_text(cli_default_path(NULL, "data/plates/zh.txt", path, sizeof path), &text, &text_len, err, sizeof err))
        goto fail;
    if (text_len == 0) {
        snprintf(err, sizeof err, "the plates are empty: no text for the prompts");
        goto fail;
    }
    // A vocabulary of its own: the plates' ids are the prompts (the bytes between the plates are data).
    if (m.tokenizer && (tokenizer_encode(m.tokenizer, text, text_len, &ids, &n_ids, err, sizeof err) || n_ids == 0)) {
        if (n_ids == 0) snprintf(err, sizeof err, "the plates give no tokens for the prompts");
        goto fail;
    }
    if (workload_make(&w, (WorkloadKind)o.workload, o.conversations, o.length, o.seed, m.tokenizer ? NULL : text,
                      m.tokenizer ? n_ids : text_len)) {
        snprintf(err, sizeof err, "out of memory making the workload");
        goto fail;
    }
    w.ids = ids, w.n_ids = n_ids, w.bos = m.bos;
    double budget = o.pool_mb * 1e6;
    if (budget == 0) { // what pool_fp16 fp16 conversations of `length` tokens hold, with multi-head attention
        KVPool fp16;
        const KVLayout mha = kv_layout_multi_head(c);
        if (kvpool_init_layout(&fp16, c->n_layers, &mha, o.block, o.length, SIZE_MAX / 2, cli_spec("fp16"),
                               cli_spec("fp16"), err, sizeof err))
            goto fail;
        // and the block set a step takes before the previous one's tokens settle, so that one
        // conversation fits a pool of one
        budget = (double)(kvpool_budget_for(&fp16, o.pool_fp16, o.length) + kvpool_block_set_bytes(&fp16));
        kvpool_free(&fp16);
    }
    // A pool is allocated as it fills: one larger than the machine's memory would fail part way.
    const double memory = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (memory > 0 && budget > memory) {
        snprintf(err, sizeof err, "a pool of %.0f MB is more than this machine's memory (%.0f MB): give a smaller --pool-mb",
                 budget / 1e6, memory / 1e6);
        goto fail;
    }
    // Every scheme's pool before anything is measured or printed: bad input gets its one line at once.
    // A pool's sequences are the workload's conversations, at most --length tokens (not the context).
    for (; n_pools < o.n_schemes; n_pools++) {
        if (kvpool_init_model(&pools[n_pools], c, o.block, o.length,
                        (size_t)budget, cli_spec(o.k_specs[n_pools]), cli_spec(o.v_specs[n_pools]), err, sizeof err))
            goto fail;
        if (serve_fits(&pools[n_pools], &w, err, sizeof err)) {
            n_pools++; // to be freed
            goto fail;
        }
    }
    // The streaming bandwidth (DRAM: a 512 MiB buffer): best of two rounds, then a round after each
    // scheme, the best kept.
    probe = bandwidth_probe_open((size_t)512 << 20, o.threads);
    BandwidthReadings readings = {0};
    bandwidth_probe_note(probe, 2, &readings);
    if (!o.csv && !o.json) {
        printf("micro serve-bench: %d conversations, %s, seed %llu; pool %.2f MB in blocks of %d tokens; at most %d "
               "running; %d thread%s; kernels: %s\n",
               o.conversations,
               o.workload == WORKLOAD_CHAT ? "chat (prompt 1..321, reply 1..675 tokens)" : "fixed (half prompt, half reply)",
               o.seed, budget / 1e6, o.block, o.max_batch, o.threads, o.threads == 1 ? "" : "s", cli_kernels());
        if (o.workload == WORKLOAD_FIXED) printf("every conversation %d tokens\n", o.length);
        printf("streaming read bandwidth: read before and after each scheme (%d thread%s, 512 MiB), the best kept\n\n",
               o.threads, o.threads == 1 ? "" : "s");
        fflush(stdout);
    }
    const int terminal = isatty(2);
    for (int i = 0; i < o.n_schemes; i++) {
        SchemeResult *r = &results[i];
        KVPool *pool = &pools[i];
        snprintf(r->k, sizeof r->k, "%s", pool->cost[KV_ROLE_KEY].spec);
        snprintf(r->v, sizeof r->v, "%s", pool->cost[KV_ROLE_VALUE].spec);
        r->block_bytes_k = pool->cost[KV_ROLE_KEY].settled_bytes;
        r->block_bytes_v = pool->cost[KV_ROLE_VALUE].settled_bytes;
        Progress progress = {r->k, 0};
        ServeConfig cfg = {.max_batch = o.max_batch, .n_threads = o.threads, .long_from = o.long_from,
                           .progress = terminal ? show_progress : NULL, .progress_ctx = &progress};
        if (serve_run(&m, pool, &w, &cfg, &r->st, NULL, err, sizeof err)) goto fail;
        bandwidth_probe_note(probe, 1, &readings);
    }
    const double bw = readings.best;
    for (int i = 0; i < o.n_schemes; i++) {
        SchemeResult *r = &results[i];
        const ServeStats *s = &r->st;
        r->tokens_per_s = s->seconds > 0 ? (double)s->tokens / s->seconds : 0;
        r->roofline = s->seconds > 0 && bw > 0
                          ? (s->cache_bytes_per_step + s->weight_bytes) * (double)s->steps / bw / s->seconds
                          : 0;
        r->long_tokens_per_s = s->long_seconds > 0 ? s->long_tokens / s->long_seconds : 0;
        r->long_roofline = s->long_seconds > 0 && bw > 0 ? s->long_bytes / bw / s->long_seconds : 0;
    }
    if (o.csv) print_csv(results, o.n_schemes, &o, budget, bw);
    else if (o.json) print_json(results, o.n_schemes, &o, budget, bw);
    else print_table(results, o.n_schemes, &o, budget, &readings);
    status = 0;
fail:
    if (status) status = cli_error("%s", err);
    bandwidth_probe_close(probe);
    for (int i = 0; i < n_pools; i++) kvpool_free(&pools[i]);
    free(pools);
    free(results);
    free(text);
    free(ids);
    workload_free(&w);
    model_free(&m);
    return status;
}
