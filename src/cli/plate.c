// micro plate: the plate's loss table reproduced on our micro, every other scheme beside it, what the
// widths mean for a real server, and a bar chart. The main job, and the README's first command.
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_eval.h"
#include "bootstrap.h"
#include "capacity.h"
#include "clock.h"
#include "cli.h"
#include "cmd_options.h"
#include "commands.h"
#include "eval.h"
#include "figure.h"
#include "figure_csv.h"
#include "held_decode.h"
#include "kvpool.h"
#include "model_file.h"
#include "msgtext.h"
#include "peak.h"
#include "plate_capacity.h"
#include "plate_arch.h"
#include "plate_page.h"
#include "safe_file.h"
#include "serve.h"
#include "text.h"
#include "threadpool.h"

typedef struct {
    const char *panel; // "loss" (the plate's scheme) or "beyond"
    const char *label;
    const char *k_spec, *v_spec;
    double published; // the plate's published increase, NAN where it has none
} PlateScheme;

// The plate's scheme at each width (16 bits is bf16, as a server stores it), then the schemes people use or cite.
static const PlateScheme schemes[] = {
    {"loss", "int 16 (bf16)", "bf16", "bf16", NAN},
    {"loss", "int 8", "int:bits=8", "int:bits=8", 0.0008},
    {"loss", "int 4", "int:bits=4", "int:bits=4", 0.044},
    {"loss", "int 3", "int:bits=3", "int:bits=3", 0.238},
    {"loss", "int 2", "int:bits=2", "int:bits=2", 0.96},
    {"beyond", "fp16", "fp16", "fp16", NAN},
    {"beyond", "bf16", "bf16", "bf16", NAN},
    {"beyond", "fp8 e4m3", "fp8:e4m3", "fp8:e4m3", NAN},
    {"beyond", "fp8 e5m2", "fp8:e5m2", "fp8:e5m2", NAN},
    {"beyond", "fp8 e4m3 + token scale", "fp8:e4m3,scale=token", "fp8:e4m3,scale=token", NAN},
    {"beyond", "kivi 4", "kivi:bits=4", "kivi:bits=4", NAN},
    {"beyond", "kivi 3", "kivi:bits=3", "kivi:bits=3", NAN},
    {"beyond", "kivi 2", "kivi:bits=2", "kivi:bits=2", NAN},
    {"beyond", "q8_0", "q8_0", "q8_0", NAN},
    {"beyond", "q4_0", "q4_0", "q4_0", NAN},
    {"beyond", "iq4_nl", "iq4_nl", "iq4_nl", NAN},
    {"beyond", "K int 8 / V int 4", "int:bits=8", "int:bits=4", NAN},
    {"beyond", "K int 4 / V int 2", "int:bits=4", "int:bits=2", NAN},
    {"beyond", "K int 2 / V int 4", "int:bits=2", "int:bits=4", NAN},
    // The careful ideas, each one option on the plate's scheme (kvtransform.h).
    {"beyond", "int 4 + hadamard", "int:bits=4,rot=hadamard", "int:bits=4,rot=hadamard", NAN},
    {"beyond", "int 3 + hadamard", "int:bits=3,rot=hadamard", "int:bits=3,rot=hadamard", NAN},
    {"beyond", "int 2 + hadamard", "int:bits=2,rot=hadamard", "int:bits=2,rot=hadamard", NAN},
    {"beyond", "int 4 + sink 1", "int:bits=4,sink=1", "int:bits=4,sink=1", NAN},
    {"beyond", "int 3 + sink 1", "int:bits=3,sink=1", "int:bits=3,sink=1", NAN},
    {"beyond", "int 2 + sink 1", "int:bits=2,sink=1", "int:bits=2,sink=1", NAN},
    {"beyond", "int 4 + 1% outliers", "int:bits=4,outliers=1", "int:bits=4,outliers=1", NAN},
    {"beyond", "int 3 + 1% outliers", "int:bits=3,outliers=1", "int:bits=3,outliers=1", NAN},
    {"beyond", "int 2 + 1% outliers", "int:bits=2,outliers=1", "int:bits=2,outliers=1", NAN},
    // The schemes the plate cites for low widths (codec_nuq.c; kvquant reads models/micro.kvq).
    {"beyond", "kvquant 4 1%", "kvquant:bits=4", "kvquant:bits=4", NAN},
    {"beyond", "kvquant 3 1%", "kvquant:bits=3", "kvquant:bits=3", NAN},
    {"beyond", "kvquant 2 1%", "kvquant:bits=2", "kvquant:bits=2", NAN},
    {"beyond", "kvquant 4", "kvquant:bits=4,outliers=0", "kvquant:bits=4,outliers=0", NAN},
    {"beyond", "kvquant 3", "kvquant:bits=3,outliers=0", "kvquant:bits=3,outliers=0", NAN},
    {"beyond", "kvquant 2", "kvquant:bits=2,outliers=0", "kvquant:bits=2,outliers=0", NAN},
    {"beyond", "quarot 4", "quarot:bits=4", "quarot:bits=4", NAN},
    {"beyond", "quarot 3", "quarot:bits=3", "quarot:bits=3", NAN},
    {"beyond", "quarot 2", "quarot:bits=2", "quarot:bits=2", NAN},
    // The 2025 formats (src/codecs/formats.h): microscaling blocks, NVFP4, TurboQuant, QJL.
    {"beyond", "MXFP4 (e2m1)", "mx:elem=e2m1", "mx:elem=e2m1", NAN},
    {"beyond", "MXFP6 (e2m3)", "mx:elem=e2m3", "mx:elem=e2m3", NAN},
    {"beyond", "MXFP8 (e4m3)", "mx:elem=e4m3", "mx:elem=e4m3", NAN},
    {"beyond", "NVFP4 (token scale2)", "nvfp4", "nvfp4", NAN},
    {"beyond", "NVFP4 (calib scale2)", "nvfp4:scale2=calib", "nvfp4:scale2=calib", NAN},
    {"beyond", "NVFP4 4over6", "nvfp4:4over6", "nvfp4:4over6", NAN},
    {"beyond", "turboquant mse 4", "turboquant:bits=4", "turboquant:bits=4", NAN},
    {"beyond", "turboquant mse 3", "turboquant:bits=3", "turboquant:bits=3", NAN},
    {"beyond", "turboquant mse 2", "turboquant:bits=2", "turboquant:bits=2", NAN},
    {"beyond", "turboquant prod 4", "turboquant:bits=4,mode=prod", "turboquant:bits=4,mode=prod", NAN},
    {"beyond", "turboquant prod 3", "turboquant:bits=3,mode=prod", "turboquant:bits=3,mode=prod", NAN},
    {"beyond", "K qjl m=32 / V fp16", "qjl", "fp16", NAN},
    // vLLM's TurboQuant cache types: keys mse (with nc but for k8v4), values uniform. k8v4's keys are
    // TurboQuant's 8-bit codebook (docs/cache-specs.md); vLLM itself stores them as plain FP8
    // E4M3, the row after it.
    {"beyond", "turboquant k8v4", "turboquant:preset=k8v4", "turboquant:preset=k8v4", NAN},
    {"beyond", "K fp8 e4m3 / V uniform 4", "fp8:e4m3", "turboquant:preset=k8v4", NAN},
    {"beyond", "turboquant 4bit_nc", "turboquant:preset=4bit_nc", "turboquant:preset=4bit_nc", NAN},
    {"beyond", "turboquant k3v4_nc", "turboquant:preset=k3v4_nc", "turboquant:preset=k3v4_nc", NAN},
    {"beyond", "turboquant 3bit_nc", "turboquant:preset=3bit_nc", "turboquant:preset=3bit_nc", NAN},
};
#define N_SCHEMES (int)(sizeof schemes / sizeof schemes[0])

int plate_loss_runs(void) { return 1 + N_SCHEMES; }
#define N_TEXTS 2

// The plate keys its texts by role, English then Chinese, not by file name: its CSV's and JSON's
// rows and its figures find them so whatever --en and --zh are called.
static void name_by_role(Text *texts) {
    for (int t = 0; t < N_TEXTS; t++) snprintf(texts[t].name, sizeof texts[t].name, "%s", t ? "zh" : "en");
}

// The plate's capacity figures: Llama 3 8B at these widths, scales ignored, then with each
// scheme's real metadata at head_dim 128.
static const int capacity_bits[] = {16, 8, 4, 3, 2};
const char *const plate_capacity_schemes[PLATE_CAPACITY_SCHEMES] = {"int:bits=8", "int:bits=4", "int:bits=2", "kivi:bits=2",
                                                                    "q4_0"};
// The plate's right panel measured on micro: its scheme at 16 (bf16, as a server stores it), 8, 4, 3
// and 2 bits, KIVI-2 and q4_0, each in a pool that holds SERVE_FP16 fp16 conversations of the
// model's context exactly. Blocks of 32 tokens: KIVI-2 quantises keys in groups of 32, which must
// lie whole in a block.
typedef struct {
    const char *label, *spec;
    double nominal_bits; // the width the arithmetic without metadata assumes
} ServeScheme;
static const ServeScheme serve_schemes[] = {
    {"fp16", "fp16", 16},           {"int 16 (bf16)", "bf16", 16}, {"int 8", "int:bits=8", 8},
    {"int 4", "int:bits=4", 4},     {"int 3", "int:bits=3", 3},    {"int 2", "int:bits=2", 2},
    {"kivi 2", "kivi:bits=2", 2},   {"q4_0", "q4_0", 4},
};
#define N_SERVE (int)(sizeof serve_schemes / sizeof serve_schemes[0])
#define SERVE_BLOCK 32
#define SERVE_STEPS 4
// Panel (d)'s conversations by default: the model's context, at most this many tokens. Its memory and
// time grow with the length (the recording, every scheme's pool), so a file that declares a context
// of a million does not size the run; --serve-length asks for more.
#define SERVE_LENGTH_DEFAULT 2048
#define SERVE_ROUNDS 5

typedef struct {
    int held;
    double plain, meta;   // conversations the arithmetic predicts without and with metadata
    double bits;          // bits per cached number of a whole conversation, metadata included
    double tokens_per_s;  // aggregate decode, every held conversation at the end of the context
    double bytes_per_token; // cache bytes one conversation's step reads
} ServeRow;

#define N_CAP_BITS (int)(sizeof capacity_bits / sizeof capacity_bits[0])

// Panel (c) per attention: the same model as published (grouped-query: 8 key/value heads for its 32
// query heads), with full multi-head attention (a key and value head per query head), and with a
// latent cache at DeepSeek-V2's ratio (d_c = 4 · head_dim, d_r = head_dim / 2): numbers cached per
// token and layer.
#define CAP_Q_HEADS 32 // Llama 3 8B's query heads
typedef struct {
    const char *arch, *label;
} CapArch;
static const CapArch cap_archs[] = {
    {"GQA", "grouped-query, as published"}, {"MHA", "multi-head"}, {"MLA", "latent, DeepSeek-V2's ratio"}};
#define N_CAP_ARCHS (int)(sizeof cap_archs / sizeof cap_archs[0])
static double cap_arch_numbers(const CapacityModel *m, int a) {
    return a == 0 ? 2.0 * m->kv_heads * m->head_dim
                  : a == 1 ? 2.0 * CAP_Q_HEADS * m->head_dim : 4.0 * m->head_dim + m->head_dim / 2.0;
}
#define N_CAP_SCHEMES PLATE_CAPACITY_SCHEMES
#define SKIP_REASON 300

typedef struct {
    const Model *model;
    Text texts[N_TEXTS];
    EvalTrace traces[N_TEXTS];      // the fp32 runs, every scheme is compared against
    EvalResult reference[N_TEXTS];  // fp32
    EvalResult results[N_SCHEMES][N_TEXTS];
    // Why a scheme or a panel (d) scheme is not run on this model ("" when it is): the model's shape
    // cannot hold it (a 16-number RoPE key and q4_0's blocks of 32) or it needs what the model lacks
    // (kvquant's calibration). Found before any work; each panel notes its skipped rows.
    char skipped[N_SCHEMES][SKIP_REASON];
    char serve_skipped[N_SERVE][SKIP_REASON];
    ServeRow serve[N_SERVE];
    ArchPanel arch; // panel (g)
    double loss_seconds; // wall time of the loss runs (the fp32 references and every scheme)
    double run_seconds[1 + N_SCHEMES][N_TEXTS]; // each run's own time on its thread: [0] fp32, [1 + s] scheme s
    double serve_budget; // bytes
    int serve_context; // tokens per conversation
    int serve_fp16;    // the pool holds this many fp16 conversations
    int threads;
    int decode; // token by token instead of the fast evaluator's spans
    int long_run; // panel (a) only, on long texts (plate --long)
    int own_model; // a model with a tokenizer of its own (a user's GGUF): panels (a), (b), (e), (f) only;
                   // (c) is Llama 3 8B's, (d) and (g) are measured on micro's byte models
    atomic_int failed;
    char err[4700];
    pthread_mutex_t err_lock;
} PlateRun;

// Keeps the first failure: its message, naming the text, and eval_tokens' status (which decides
// the exit status: a loss that overflowed is 1, a bad input 2).
static void fail_run(PlateRun *r, const char *text, const char *err, int code) {
    pthread_mutex_lock(&r->err_lock);
    if (!atomic_exchange(&r->failed, code)) snprintf(r->err, sizeof r->err, "%s: %s", text, err);
    pthread_mutex_unlock(&r->err_lock);
}

// Every scheme a panel will run, checked against the model before any work: the loss panels' specs
// on the model's two cache slots (kv_layout_check_specs), panel (d)'s as the pool it fills (blocks
// of SERVE_BLOCK tokens, conversations of serve_context). What the model cannot take is skipped, its
// reason kept for the panel's note.
static void find_skipped(PlateRun *r, const ModelConfig *c, int serve) {
    for (int s = 0; s < N_SCHEMES; s++)
        if (!kv_layout_check_specs(c, schemes[s].k_spec, schemes[s].v_spec, r->skipped[s], SKIP_REASON))
            r->skipped[s][0] = 0;
    for (int i = 0; i < N_SERVE && serve; i++) {
        KVPool pool;
        if (!kvpool_init_model(&pool, c, SERVE_BLOCK, r->serve_context, SIZE_MAX / 2, cli_spec(serve_schemes[i].spec),
                               cli_spec(serve_schemes[i].spec), r->serve_skipped[i], SKIP_REASON)) {
            kvpool_free(&pool);
            r->serve_skipped[i][0] = 0;
        }
    }
}

// A panel's rows the model could not take, one line each.
static void print_skipped(const char *label, const char *why) {
    printf("  not run on this model: %s (%s)\n", label, why);
}

// Phase 1: the fp32 reference of each text. Phase 2: every scheme on every text. Each task has its
// own single-threaded decoder and writes only its own result, so the order tasks finish in changes
// nothing.
static void reference_task(void *arg, int j, int thread) {
    (void)thread;
    PlateRun *r = arg;
    char err[512];
    const double t0 = seconds_now();
    int rc = atomic_load(&r->failed) ? 0
                                     : eval_tokens(r->model, r->texts[j].tokens, r->texts[j].n_tokens, &codec_spec_fp32, &codec_spec_fp32, 1,
                                                   r->decode, &r->traces[j], NULL, &r->reference[j], err, sizeof err);
    if (rc) fail_run(r, r->texts[j].path, err, rc);
    r->run_seconds[0][j] = seconds_now() - t0;
}

static void scheme_task(void *arg, int j, int thread) {
    (void)thread;
    PlateRun *r = arg;
    const PlateScheme *s = &schemes[j / N_TEXTS];
    int t = j % N_TEXTS;
    if (r->skipped[j / N_TEXTS][0]) return;
    char err[512];
    const double t0 = seconds_now();
    int rc = atomic_load(&r->failed) ? 0
                                     : eval_tokens(r->model, r->texts[t].tokens, r->texts[t].n_tokens, cli_spec(s->k_spec),
                                                   cli_spec(s->v_spec), 1, r->decode, NULL, &r->traces[t], &r->results[j / N_TEXTS][t], err,
                                                   sizeof err);
    if (rc) fail_run(r, r->texts[t].path, err, rc);
    r->run_seconds[1 + j / N_TEXTS][t] = seconds_now() - t0;
}

// The measured panel. The keys and values of one conversation (the plates' bytes, the model's whole
// context) are recorded once with an fp32 cache; each scheme's pool then holds as many conversations
// as its budget allows, the first encoding that recording through its own blocks and the others
// holding its copies (serve_held_decode), and SERVE_STEPS batched decode steps at the end of the
// context are timed. Sequential: it is a timing (filling the pools is not timed).
static int run_serve_panel(PlateRun *r, const Model *m, const uint8_t *text, size_t text_len, int threads,
                           int fill_threads, char *err, size_t errlen) {
    const ModelConfig *c = &m->config;
    const int n = r->serve_context;
    int *tokens = malloc(sizeof(int) * (size_t)n);
    if (!tokens) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    tokens[0] = MICRO_BOS;
    for (int t = 1; t < n; t++) {
        const uint8_t b = text[(size_t)(t - 1) % text_len];
        tokens[t] = b == MICRO_BOS ? ' ' : b;
    }
    KVRecording rec;
    int rc = kv_record(m, tokens, n, fill_threads, &rec, err, errlen); // the same numbers on any threads
    free(tokens);
    if (rc) return -1;
    KVPool fp16; // the budget: serve_fp16 fp16 conversations with multi-head attention, whatever the model's
    const KVLayout mha = kv_layout_multi_head(c);
    if (kvpool_init_layout(&fp16, c->n_layers, &mha, SERVE_BLOCK, n, SIZE_MAX / 2, cli_spec("fp16"), cli_spec("fp16"),
                           err, errlen)) {
        kv_recording_free(&rec);
        return -1;
    }
    r->serve_budget = (double)kvpool_budget_for(&fp16, r->serve_fp16, n);
    kvpool_free(&fp16);
    const KVLayout own = kv_layout_of(c);
    const double numbers = (double)n * c->n_layers *
                           ((double)own.n_heads[0] * own.head_dim[0] + (double)own.n_heads[1] * own.head_dim[1]);
    // SERVE_ROUNDS rounds over every scheme, the best of each kept: a slow spell of this shared machine
    // then falls on one round of several schemes, not on one scheme's only run (fp16 and bf16, the
    // same bytes and nearly the same kernels, came out 0.7x and 1.45x of each other in single runs).
    // Five, since a round's pools are filled by copies (a second for all eight schemes, where encoding
    // every conversation took about four).
    for (int round = 0; round < SERVE_ROUNDS * N_SERVE && !rc; round++) {
        const int i = round % N_SERVE;
        ServeRow *row = &r->serve[i];
        if (r->serve_skipped[i][0]) continue;
        KVPool pool;
        if ((rc = kvpool_init_model(&pool, c, SERVE_BLOCK, n, (size_t)r->serve_budget,
                              cli_spec(serve_schemes[i].spec), cli_spec(serve_schemes[i].spec), err, errlen)))
            break;
        row->bits = 8.0 * (double)kvpool_sequence_bytes(&pool, n) / numbers;
        row->plain = r->serve_fp16 * 16.0 / serve_schemes[i].nominal_bits;
        row->meta = r->serve_fp16 * 16.0 / row->bits;
        HeldDecode hd;
        rc = serve_held_decode(m, &pool, &rec, r->serve_fp16 * 16, n, n, SERVE_STEPS, threads, fill_threads, 0, &hd,
                               err, errlen);
        kvpool_free(&pool);
        if (rc) break;
        row->held = hd.held;
        row->tokens_per_s = hd.tokens_per_s > row->tokens_per_s ? hd.tokens_per_s : row->tokens_per_s;
        row->bytes_per_token = hd.cache_bytes_per_step / hd.held;
    }
    kv_recording_free(&rec);
    return rc;
}

static double delta_of(const PlateRun *r, int s, int t) { return r->results[s][t].loss - r->reference[t].loss; }

// ---------------------------------------------------------------------------------------------
// Terminal rendering

// An increase with its noise: "+0.0252 ±0.0061", the half-width of its 95% interval, and "~" when the
// interval holds 0 (no effect shown at this text's length).
static void print_increase(const EvalResult *e, double delta) {
    const int holds_zero = e->delta_lo <= 0.0 && e->delta_hi >= 0.0;
    printf(" %+9.4f ±%-7.4f%s", delta, 0.5 * (e->delta_hi - e->delta_lo), holds_zero ? "~" : " ");
}

static void print_legend(void) {
    printf("±: half the 95%% interval of the increase (paired bootstrap over the per-token differences from fp32,\n"
           "blocks of %d tokens, %d resamples); ~: the interval holds 0, no effect shown at this length\n",
           BOOTSTRAP_BLOCK, BOOTSTRAP_RESAMPLES);
}

static void print_scheme_table(const PlateRun *r, const char *panel, int with_published) {
    // (%19s: "±" is two bytes)
    printf("%-24s %6s | %8s %19s %6s %8s | %8s %19s %6s %8s", "cache (K / V)", "bits", "loss", "increase  ±95%",
           "top1", "KL", "loss", "increase  ±95%", "top1", "KL");
    printf(with_published ? " | %9s\n" : "\n", "plate");
    printf("%-24s %6s | %8.4f %18s %6s %8s | %8.4f %18s %6s %8s%s\n", "fp32 (reference)", "32.00", r->reference[0].loss,
           "", "", "", r->reference[1].loss, "", "", "", with_published ? " |" : "");
    for (int s = 0; s < N_SCHEMES; s++) {
        if (strcmp(schemes[s].panel, panel) != 0 || r->skipped[s][0]) continue;
        // Bits per element differ slightly between texts only for KIVI (its residual); show English's.
        printf("%-24s %6.2f", schemes[s].label, r->results[s][0].bits_per_element);
        for (int t = 0; t < N_TEXTS; t++) {
            const EvalResult *e = &r->results[s][t];
            printf(" | %8.4f", e->loss);
            print_increase(e, delta_of(r, s, t));
            printf("%6.3f %8.2e", e->top1_agree, e->kl);
        }
        if (with_published) {
            if (isnan(schemes[s].published))
                printf(" | %9s", "");
            else
                printf(" | %+9.4f", schemes[s].published);
        }
        printf("\n");
    }
    for (int s = 0; s < N_SCHEMES; s++)
        if (strcmp(schemes[s].panel, panel) == 0 && r->skipped[s][0]) print_skipped(schemes[s].label, r->skipped[s]);
}

static void print_serve_panel(const PlateRun *r) {
    const ServeRow *ref = &r->serve[0];
    printf("\n(d) what it buys, measured on micro: one paged pool of %.1f MB (%d fp16 conversations of %d tokens),\n"
           "blocks of %d tokens; conversations held at once, against the arithmetic without and with metadata;\n"
           "aggregate decode with every held conversation at the end of its context (%d steps, the best of %d\n"
           "rounds over the schemes, %d thread%s)\n",
           r->serve_budget / 1e6, r->serve_fp16, r->serve_context, SERVE_BLOCK, SERVE_STEPS, SERVE_ROUNDS, r->threads,
           r->threads == 1 ? "" : "s");
    printf("%-16s %6s %6s %9s %8s | %10s %10s | %12s %10s\n", "cache", "bits", "held", "16/b", "16/bits", "tokens/s",
           "x fp16", "KB/token/step", "x fewer");
    for (int i = 0; i < N_SERVE; i++) {
        const ServeRow *row = &r->serve[i];
        if (r->serve_skipped[i][0]) continue;
        printf("%-16s %6.2f %6d %9.1f %8.1f | %10.0f %9.2fx | %12.1f %9.2fx\n", serve_schemes[i].label, row->bits,
               row->held, row->plain, row->meta, row->tokens_per_s, row->tokens_per_s / ref->tokens_per_s,
               row->bytes_per_token / 1e3, ref->bytes_per_token / row->bytes_per_token);
    }
    for (int i = 0; i < N_SERVE; i++)
        if (r->serve_skipped[i][0]) print_skipped(serve_schemes[i].label, r->serve_skipped[i]);
    printf("x fp16: tokens/s gained; x fewer: cache bytes a conversation's decode step reads, saved (both against fp16)\n");
    // The targets (docs/performance.md): fewer bytes never decode slower within a family, fp16 within
    // 10% of bf16, and the plate's scheme at 8, 4 and 2 bits in that order.
    for (int i = 0; i <= 5; i++)
        if (r->serve_skipped[i][0]) return; // a target's rows not run: no verdict on this model
    const ServeRow *bf16 = &r->serve[1], *i8 = &r->serve[2], *i4 = &r->serve[3], *i2 = &r->serve[5];
    const double fp16_bf16 = ref->tokens_per_s / bf16->tokens_per_s;
    const int ordered = i4->tokens_per_s >= i8->tokens_per_s && i2->tokens_per_s >= i4->tokens_per_s;
    printf("targets: fp16 within 10%% of bf16: %.2fx (%s); int 8, 4, 2 each no slower than the wider: %.0f, %.0f, %.0f "
           "tokens/s (%s)\n",
           fp16_bf16, fp16_bf16 >= 0.9 && fp16_bf16 <= 1.1 ? "met" : "not met", i8->tokens_per_s, i4->tokens_per_s,
           i2->tokens_per_s, ordered ? "met" : "not met");
}

// The loss runs' wall time beside the arithmetic's floor on the cores they ran on (bench --eval's),
// the target being within 3x of it; and beside the floor at the rate of a multiply and an add apart,
// the arithmetic every kernel set shares.
static void print_loss_time(const PlateRun *r, int threads) {
    const ModelConfig *c = &r->model->config;
    const int tokens[N_TEXTS] = {r->texts[0].n_tokens, r->texts[1].n_tokens};
    const long online = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
    const int cores = threads < online ? threads : (int)online;
    const char *form, *apart_form;
    int runs = 1; // fp32 and the schemes run on this model
    for (int s = 0; s < N_SCHEMES; s++) runs += !r->skipped[s][0];
    const double work = eval_text_multiply_adds(c, tokens, N_TEXTS, runs);
    const double peak = peak_multiply_adds(&form); // measured once, for these lines and each text's floor below
    const double floor = work / (peak * cores);
    const double floor_apart = work / (peak_multiply_then_add(&apart_form) * cores);
    const double ratio = r->loss_seconds / floor;
    printf("\nthe loss runs (%d caches on both texts, %.0f G multiply-adds; kernels: %s): %.2f s on %d thread%s,\n"
           "%.1fx the arithmetic's floor on %d core%s (%.2f s at this machine's peak, %s,\n"
           "measured now; target: within 3x): %s. At the rate of a multiply, then an add (every kernel set's\n"
           "arithmetic: %s): %.2f s, %.1fx\n",
           runs, work * 1e-9, cli_kernels(), r->loss_seconds, threads, threads == 1 ? "" : "s", ratio,
           cores, cores == 1 ? "" : "s", floor, form, ratio <= 3 ? "met" : "not met", apart_form, floor_apart,
           r->loss_seconds / floor_apart);
    // Where the time went: each run on its thread against its own floor on one core. The fp32
    // references read through the evaluator's float mirror, the fastest path a cache has, and run
    // first on each thread; schemes above the fastest spend it in their codec's work (encoding each
    // token, kernels of its own, or the mirror's second sums and correction rows).
    double one_floor[N_TEXTS], ref = 0, all = 0, total_floor = 0;
    for (int t = 0; t < N_TEXTS; t++) {
        one_floor[t] = eval_text_multiply_adds(c, &tokens[t], 1, 1) / peak;
        ref += r->run_seconds[0][t];
        total_floor += one_floor[t];
    }
    int worst[5] = {-1, -1, -1, -1, -1}, best = 1;
    double worst_s[5] = {0}, best_s = INFINITY;
    for (int s = 1; s <= N_SCHEMES; s++) {
        if (r->skipped[s - 1][0]) continue;
        double sec = 0;
        for (int t = 0; t < N_TEXTS; t++) sec += r->run_seconds[s][t];
        all += sec;
        if (sec < best_s) best = s, best_s = sec;
        for (int w = 0; w < 5; w++)
            if (worst[w] < 0 || sec > worst_s[w]) {
                memmove(&worst[w + 1], &worst[w], sizeof worst[0] * (size_t)(4 - w));
                memmove(&worst_s[w + 1], &worst_s[w], sizeof worst_s[0] * (size_t)(4 - w));
                worst[w] = s, worst_s[w] = sec;
                break;
            }
    }
    printf("each run on its own thread against its floor on one core: the fastest scheme, %s, %.1fx; the\n"
           "fp32 references %.1fx (the first runs on each thread); the schemes %.1fx on\n"
           "average; the slowest (their codecs' work: encoding, own kernels, the mirror's extra sums):\n ",
           schemes[best - 1].label, best_s / total_floor, ref / total_floor, all / (total_floor * (runs - 1)));
    for (int w = 0; w < 5 && worst[w] > 0; w++)
        printf("%s %s %.1fx", w ? "," : "", schemes[worst[w] - 1].label, worst_s[w] / total_floor);
    printf("\n");
}

// Bars on a log scale from 1e-4 nats (below: a dot) to the largest increase, so that +0.001 and +1
// are both visible.
static void print_bars(const PlateRun *r) {
    double top = 1e-3;
    for (int s = 0; s < N_SCHEMES; s++)
        for (int t = 0; t < N_TEXTS && !r->skipped[s][0]; t++) top = fmax(top, delta_of(r, s, t));
    const double floor_delta = 1e-4;
    const int width = 40;
    printf("increase over the fp32 cache, nats/token (log scale: the left edge is %.0e, the full bar %.2f)\n", floor_delta,
           top);
    for (int s = 0; s < N_SCHEMES; s++) {
        for (int t = 0; t < N_TEXTS && !r->skipped[s][0]; t++) {
            double d = delta_of(r, s, t);
            int n = d <= floor_delta ? 0 : (int)lround(width * log(d / floor_delta) / log(top / floor_delta));
            printf("%-24s %s |", t == 0 ? schemes[s].label : "", t == 0 ? "en" : "zh");
            for (int i = 0; i < n; i++) fputs(t == 0 ? "#" : "=", stdout);
            if (n == 0) fputs(".", stdout);
            printf(" %+.4f\n", d);
        }
    }
}

// (f) The schemes no other beats with fewer or equal bits, per text: by real bits ascending (then
// increase), each whose increase is below every one before it. Drawn in out/frontier.png.
static void print_frontier(const PlateRun *r) {
    printf("\n(f) the frontier: the schemes of (a) and (b) that no other beats at fewer or equal bits\n");
    for (int t = 0; t < N_TEXTS; t++) {
        int order[N_SCHEMES], n = 0;
        for (int s = 0; s < N_SCHEMES; s++)
            if (!r->skipped[s][0]) order[n++] = s;
        for (int i = 1; i < n; i++) // insertion sort: a few dozen schemes
            for (int j = i; j > 0; j--) {
                const double ba = r->results[order[j - 1]][t].bits_per_element, bb = r->results[order[j]][t].bits_per_element;
                if (ba < bb || (ba == bb && delta_of(r, order[j - 1], t) <= delta_of(r, order[j], t))) break;
                const int x = order[j];
                order[j] = order[j - 1], order[j - 1] = x;
            }
        printf("%s:", r->texts[t].name);
        double best = INFINITY;
        for (int i = 0; i < n; i++) {
            const int s = order[i];
            const double d = delta_of(r, s, t);
            if (d >= best) continue;
            best = d;
            printf("%s %s %.2f bits %+.4f", best == d && i ? " |" : "", schemes[s].label, r->results[s][t].bits_per_element, d);
        }
        printf("\n");
    }
}

// ---------------------------------------------------------------------------------------------
// Machine-readable output: one table, a row per (panel, label, text); capacity rows fill their columns.

static const char *csv_header =
    "panel,label,text,k_cache,v_cache,tokens,loss,delta,bits_per_element,cache_bytes,top1_agree,kl,published_delta,"
    "model,conversations,bytes_per_token,predicted_plain,predicted_metadata,tokens_per_s,cache_bytes_per_token_step,"
    "pool_bytes,delta_lo,delta_hi,arch,numbers_per_token,delta_micro,delta_micro_lo,delta_micro_hi,kl_p99,kl_max\n";

static void csv_number(FILE *out, double v, const char *fmt) {
    fputc(',', out);
    if (!isnan(v)) fprintf(out, fmt, v);
}

static void print_csv(FILE *out, const PlateRun *r, const CapacityModel *cap, const double *scheme_bits) {
    fputs(csv_header, out);
    for (int t = 0; t < N_TEXTS; t++) {
        const EvalResult *e = &r->reference[t];
        fprintf(out, "reference,fp32,%s,fp32,fp32,%d,%.6f,0.000000,%.4f,%zu,1.000000,0,,,,,,,,,,0.000000,0.000000,,,,,,0,0\n",
                r->texts[t].name, e->tokens,
                e->loss, e->bits_per_element, e->cache_bytes);
    }
    for (int s = 0; s < N_SCHEMES; s++) {
        if ((r->long_run && strcmp(schemes[s].panel, "loss") != 0) || r->skipped[s][0]) continue;
        for (int t = 0; t < N_TEXTS; t++) {
            const EvalResult *e = &r->results[s][t];
            fprintf(out, "%s,", schemes[s].panel);
            csv_field_to(out, schemes[s].label);
            fprintf(out, ",%s,", r->texts[t].name);
            csv_field_to(out, e->k_spec);
            fputc(',', out);
            csv_field_to(out, e->v_spec);
            fprintf(out, ",%d,%.6f,%.6f,%.4f,%zu,%.6f,%.6g", e->tokens, e->loss, delta_of(r, s, t), e->bits_per_element,
                    e->cache_bytes, e->top1_agree, e->kl);
            csv_number(out, schemes[s].published, "%.4f");
            fprintf(out, ",,,,,,,,,%.6f,%.6f,,,,,,%.6g,%.6g\n", e->delta_lo, e->delta_hi, e->kl_p99, e->kl_max);
        }
    }
    arch_panel_csv(out, &r->arch);
    const int others = !r->long_run && !r->own_model; // panels (c) and (d)
    for (int i = 0; i < N_CAP_BITS + N_CAP_SCHEMES && others; i++) {
        double bits = i < N_CAP_BITS ? capacity_bits[i] : scheme_bits[i - N_CAP_BITS];
        CapacityRow row = capacity_row(cap, bits);
        fprintf(out, "capacity,");
        if (i < N_CAP_BITS)
            fprintf(out, "%d-bit", capacity_bits[i]);
        else
            csv_field_to(out, plate_capacity_schemes[i - N_CAP_BITS]);
        fprintf(out, ",,,,,,,%.4f,,,,,%s,%ld,%.1f,,,,,,,,,,,,,,\n", bits, cap->name, row.conversations, row.bytes_per_token);
    }
    for (int a = 0; a < N_CAP_ARCHS && others; a++)
        for (int i = 0; i < N_CAP_BITS; i++) {
            const double numbers = cap_arch_numbers(cap, a);
            const CapacityRow row = capacity_row_numbers(cap, numbers, capacity_bits[i]);
            fprintf(out, "capacity_arch,%s %d-bit,,,,,,,%d,,,,,%s,%ld,%.1f,,,,,,,,%s,%.0f,,,,,\n", cap_archs[a].arch,
                    capacity_bits[i], capacity_bits[i], cap->name, row.conversations, row.bytes_per_token,
                    cap_archs[a].arch, numbers);
        }
    // The measured panel: conversations = held, bytes_per_token = cache bytes one held conversation's
    // decode step reads (the same as cache_bytes_per_token_step, kept for the capacity rows' meaning).
    for (int i = 0; i < N_SERVE && others; i++) {
        const ServeRow *row = &r->serve[i];
        if (r->serve_skipped[i][0]) continue;
        fprintf(out, "serve,%s,,", serve_schemes[i].label);
        csv_field_to(out, serve_schemes[i].spec);
        fputc(',', out);
        csv_field_to(out, serve_schemes[i].spec);
        fprintf(out, ",%d,,,%.4f,,,,,micro,%d,%.1f,%.2f,%.2f,%.1f,%.1f,%.0f,,,,,,,,,\n", r->serve_context, row->bits, row->held,
                row->bytes_per_token, row->plain, row->meta, row->tokens_per_s, row->bytes_per_token, r->serve_budget);
    }
}

static void print_json(FILE *out, const PlateRun *r, const CapacityModel *cap, const double *scheme_bits) {
    fprintf(out, "{\n  \"reference\": [");
    for (int t = 0; t < N_TEXTS; t++)
        fprintf(out, "%s{\"text\": \"%s\", \"tokens\": %d, \"loss\": %.6f, \"cache_bytes\": %zu}", t ? ", " : "",
                r->texts[t].name, r->reference[t].tokens, r->reference[t].loss, r->reference[t].cache_bytes);
    fprintf(out, "],\n  \"schemes\": [\n");
    for (int s = 0; s < N_SCHEMES; s++) {
        fprintf(out, "    {\"panel\": \"%s\", \"label\": ", schemes[s].panel);
        json_string_to(out, schemes[s].label);
        if (r->skipped[s][0]) { // not run on this model: why, in place of its figures
            fprintf(out, ", \"skipped\": ");
            json_string_to(out, r->skipped[s]);
            fprintf(out, "}%s\n", s + 1 < N_SCHEMES ? "," : "");
            continue;
        }
        fprintf(out, ", \"k_cache\": ");
        json_string_to(out, r->results[s][0].k_spec);
        fprintf(out, ", \"v_cache\": ");
        json_string_to(out, r->results[s][0].v_spec);
        if (isnan(schemes[s].published))
            fprintf(out, ", \"published_delta\": null");
        else
            fprintf(out, ", \"published_delta\": %.4f", schemes[s].published);
        fprintf(out, ", \"texts\": {");
        for (int t = 0; t < N_TEXTS; t++) {
            const EvalResult *e = &r->results[s][t];
            fprintf(out, "%s\"%s\": {\"tokens\": %d, \"loss\": %.6f, \"delta\": %.6f, \"delta_lo\": %.6f, "
                    "\"delta_hi\": %.6f, \"bits_per_element\": %.4f, \"cache_bytes\": %zu, \"top1_agree\": %.6f, "
                    "\"kl\": %.6g, \"kl_p99\": %.6g, \"kl_max\": %.6g}",
                    t ? ", " : "", r->texts[t].name, e->tokens, e->loss, delta_of(r, s, t), e->delta_lo, e->delta_hi,
                    e->bits_per_element, e->cache_bytes, e->top1_agree, e->kl, e->kl_p99, e->kl_max);
        }
        fprintf(out, "}}%s\n", s + 1 < N_SCHEMES ? "," : "");
    }
    if (r->own_model) { // panels (c), (d) and (g) are not this model's
        fprintf(out, "  ]\n}\n");
        return;
    }
    fprintf(out, "  ],\n  \"capacity\": {\"model\": \"%s\", \"gpu_gb\": %g, \"util\": %g, \"weights_gb\": %g, \"context\": %d, "
            "\"rows\": [\n",
            cap->name, cap->gpu_gb, cap->util, cap->weights_gb, cap->context);
    for (int i = 0; i < N_CAP_BITS + N_CAP_SCHEMES; i++) {
        double bits = i < N_CAP_BITS ? capacity_bits[i] : scheme_bits[i - N_CAP_BITS];
        CapacityRow row = capacity_row(cap, bits);
        fprintf(out, "    {\"cache\": ");
        if (i < N_CAP_BITS) {
            char label[32];
            snprintf(label, sizeof label, "%d-bit", capacity_bits[i]);
            json_string_to(out, label);
        } else {
            json_string_to(out, plate_capacity_schemes[i - N_CAP_BITS]);
        }
        fprintf(out, ", \"bits_per_element\": %.4f, \"bytes_per_token\": %.1f, \"conversations\": %ld}%s\n", bits,
                row.bytes_per_token, row.conversations, i + 1 < N_CAP_BITS + N_CAP_SCHEMES ? "," : "");
    }
    fprintf(out, "  ]},\n  \"serve\": {\"pool_bytes\": %.0f, \"fp16_conversations\": %d, \"context\": %d, \"block\": %d, "
            "\"steps\": %d, \"threads\": %d, \"rows\": [\n",
            r->serve_budget, r->serve_fp16, r->serve_context, SERVE_BLOCK, SERVE_STEPS, r->threads);
    for (int i = 0; i < N_SERVE; i++) {
        const ServeRow *row = &r->serve[i];
        fprintf(out, "    {\"cache\": ");
        json_string_to(out, serve_schemes[i].label);
        fprintf(out, ", \"spec\": ");
        json_string_to(out, serve_schemes[i].spec);
        if (r->serve_skipped[i][0]) {
            fprintf(out, ", \"skipped\": ");
            json_string_to(out, r->serve_skipped[i]);
            fprintf(out, "}%s\n", i + 1 < N_SERVE ? "," : "");
            continue;
        }
        fprintf(out, ", \"bits_per_element\": %.4f, \"held\": %d, \"predicted_plain\": %.2f, \"predicted_metadata\": %.2f, "
                "\"tokens_per_s\": %.1f, \"cache_bytes_per_token_step\": %.1f}%s\n",
                row->bits, row->held, row->plain, row->meta, row->tokens_per_s, row->bytes_per_token,
                i + 1 < N_SERVE ? "," : "");
    }
    fprintf(out, "  ]},\n  \"arch\": ");
    arch_panel_json(out, &r->arch);
    fprintf(out, "\n}\n");
}

// ---------------------------------------------------------------------------------------------

// Panels (a) and (b) with the legend; `name`, when given, is the model's in (a)'s title.
static void print_loss_panels(const PlateRun *r, const char *name) {
    printf("(a) the plate's scheme%s%s: symmetric round-to-nearest, one fp16 scale per head per token\n",
           name ? " on " : "", name ? name : "");
    printf("%31s | %-43s | %-43s |\n", "", "English", "Chinese");
    print_scheme_table(r, "loss", 1);
    printf("\n(b) beyond the plate, same texts (bits = storage per cached number, metadata included)\n");
    printf("%31s | %-43s | %-43s\n", "", "English", "Chinese");
    print_scheme_table(r, "beyond", 0);
    print_legend();
}

// The panels of a model the user brings: its name in the title, its texts in its own tokens.
static void print_own_model(const PlateRun *r, const Model *m, const char *model_path, int threads) {
    const char *slash = strrchr(model_path, '/');
    const ModelConfig *c = &m->config;
    printf("micro plate on %s: %zu parameters (%d layers, %d query and %d key/value heads of %d, vocabulary %d);\n"
           "English %ld characters = %d tokens, Chinese %ld characters = %d tokens, in its own tokenizer%s\n\n",
           slash ? slash + 1 : model_path, m->n_params, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
           c->vocab_size, r->texts[0].chars, r->texts[0].n_tokens, r->texts[1].chars, r->texts[1].n_tokens,
           m->bos >= 0 ? " (BOS first)" : " (no BOS: each text from its first token)");
    print_loss_panels(r, slash ? slash + 1 : model_path);
    printf("\n(c), (d) and (g) are micro's: Llama 3 8B's arithmetic (micro capacity --model FILE gives this model's),\n"
           "and pools and siblings measured on micro's byte models (micro serve-bench --model FILE serves this one).\n");
    printf("\n(e) ");
    print_bars(r);
    print_frontier(r);
    print_loss_time(r, threads);
}

static const char *plate_usage =
    "usage: micro plate [options]\n"
    "  The plate, reproduced on micro: (a) the plate's scheme (symmetric round-to-nearest, one fp16\n"
    "  scale per head per token) at 16, 8, 4, 3 and 2 bits, with the plate's published increases;\n"
    "  (b) FP8, KIVI, llama.cpp's blocks and mixed K/V widths on the same texts; (c) what each width\n"
    "  means for Llama 3 8B on an 80 GB GPU; (d) the same measured on micro: conversations one paged\n"
    "  pool holds per width and the decode tokens/s they reach; (e) a bar chart of the increases. Each\n"
    "  run takes the text from BOS through the cache (the fast evaluator: the decode loop's numbers,\n"
    "  64 positions at a time); increases are over the fp32 cache. top1 is the\n"
    "  share of (layer, head, position) that attend most to the same position as with fp32; KL is the\n"
    "  mean KL(fp32 || scheme) of the next-token distributions.\n"
    "options:\n"
    "  --model FILE      model file (default models/micro.bin); a GGUF in a vocabulary of its own (the\n"
    "                    model you bring: docs/models.md) gets panels (a), (b), (e) and (f), its texts\n"
    "                    in its own tokens ((c) is Llama 3 8B's arithmetic; (d) and (g) measure micro)\n"
    "  --calib FILE      kvquant's calibration (default beside the model: models/micro.kvq)\n"
    "  --en FILE[:N]     English text (default data/plates/en.txt:1500)\n"
    "  --zh FILE[:N]     Chinese text (default data/plates/zh.txt:500)\n"
    "  --threads N       runs at once (default 2); results do not depend on it\n"
    "  --decode          decode token by token (as a server does) instead of the fast evaluator\n"
    "  --long            instead: panels (a) and (g) on the corpus's validation split\n"
    "                    (data/corpus/en.val.txt, zh.val.txt; scripts/corpus builds them), each\n"
    "                    document in windows of the context from BOS; writes DIR/plate-long.csv\n"
    "                    (panel (a) a few minutes; panel (g) longer, docs/attention.md says how long)\n"
    "  --corpus DIR      the corpus folder for --long (default data/corpus)\n"
    "  --csv | --json    machine-readable output instead of the panels\n"
    "  --out DIR         also write DIR/plate.csv and DIR/plate.json, and draw DIR/plate.svg and\n"
    "                    DIR/plate.png (and serve, frontier) when gnuplot is present (default out)\n"
    "  --html            also write DIR/plate.html: the run as one page (no network, opens from\n"
    "                    disk): both panels, continuations at each width, the attention picture\n"
    "  --no-files        write nothing\n"
    "  --serve-fp16 N    panel (d)'s pool holds N fp16 conversations (default 16)\n"
    "  --serve-length N  panel (d)'s conversations, tokens: 6..context (default the model's context,\n"
    "                    at most 2048)\n"
    "  -h, --help        this help\n";

// What the printers need, for safe_write's callbacks.
typedef struct {
    const PlateRun *r;
    const CapacityModel *cap;
    const double *scheme_bits;
} PlateOutput;

static int write_csv(FILE *f, void *ctx, char *why, size_t whylen) {
    (void)why, (void)whylen;
    const PlateOutput *o = ctx;
    print_csv(f, o->r, o->cap, o->scheme_bits);
    return 0;
}

static int write_json(FILE *f, void *ctx, char *why, size_t whylen) {
    (void)why, (void)whylen;
    const PlateOutput *o = ctx;
    print_json(f, o->r, o->cap, o->scheme_bits);
    return 0;
}

static const char *const out_files[] = {"plate.csv", "plate.json", "plate.html"};

// --out DIR, checked before any work: not empty (it would name /plate.csv), a folder if it exists
// (else its parent must exist, to make it in), and no file it will hold may be a device or FIFO.
static int check_out_dir(const char *dir, int figures, char *err, size_t errlen) {
    if (!*dir) {
        snprintf(err, errlen, "--out: an empty folder name");
        return -1;
    }
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            char shown[MSG_TEXT];
            snprintf(err, errlen, "--out %s: not a folder", msg_text(dir, shown, sizeof shown));
            return -1;
        }
        char path[4200];
        for (size_t i = 0; i < sizeof out_files / sizeof *out_files; i++) {
            if (snprintf(path, sizeof path, "%s/%s", dir, out_files[i]) >= (int)sizeof path) {
                snprintf(err, errlen, "--out: the folder name is too long");
                return -1;
            }
            if (safe_check_output(path, err, errlen)) return -1;
        }
        return figures ? figure_check_csv_outputs(dir, 1, err, errlen) : 0;
    }
    // Not there yet: it is made beside its parent, which must be a folder we can write in.
    char probe[4200];
    if (snprintf(probe, sizeof probe, "%s/plate.csv", dir) >= (int)sizeof probe) {
        snprintf(err, errlen, "--out: the folder name is too long");
        return -1;
    }
    if (safe_check_output(dir, err, errlen)) return -1;
    return 0;
}

// Writes DIR/plate.csv and DIR/plate.json, each whole or not at all. 0, or -1 with err set.
// The output folder, made when missing. 0, or -1 with one line in err.
static int make_out_dir(const char *dir, char *err, size_t errlen) {
    if (mkdir(dir, 0777) == 0 || errno == EEXIST) return 0;
    snprintf(err, errlen, "cannot make the folder %s: %s", dir, strerror(errno));
    return -1;
}

static int write_outputs(const char *dir, const PlateRun *r, const CapacityModel *cap, const double *scheme_bits,
                         char *csv_path, size_t n, char *err, size_t errlen) {
    if (make_out_dir(dir, err, errlen)) return -1;
    PlateOutput o = {r, cap, scheme_bits};
    char path[4200];
    snprintf(path, sizeof path, "%s/plate.json", dir);
    snprintf(csv_path, n, "%s/plate.csv", dir);
    if (safe_write(csv_path, write_csv, &o, err, errlen)) return -1;
    return safe_write(path, write_json, &o, err, errlen);
}

// Draws DIR/plate, serve and frontier (.svg and .png) from the CSV just written (figure_csv.h).
// One line says what happened: 0, or 1 when a figure could not be written.
static int draw_figure(const char *csv_path, const char *out_dir) {
    char err[600], drawn[800];
    fflush(stdout);
    const int rc = figure_from_csv(csv_path, out_dir, NULL, drawn, sizeof drawn, err, sizeof err);
    if (rc == FIGURE_FAILED) {
        fprintf(stderr, "micro: %s\n", err);
        return 1;
    }
    printf("figure: %s\n", rc == FIGURE_DRAWN ? drawn : err);
    return 0;
}

// micro plate --html: DIR/plate.html from this run (plate_page.h), after its figures. An exit status.
static int write_page(const PlateRun *r, const Model *m, const CapacityModel *cap, const double *scheme_bits,
                      const char *model_path, const char *out_dir, int quiet) {
    char err[600], path[4096];
    char *json = NULL;
    size_t json_len = 0;
    FILE *f = open_memstream(&json, &json_len);
    if (!f) return cli_error("out of memory");
    print_json(f, r, cap, scheme_bits);
    if (fclose(f) != 0) {
        free(json);
        return cli_error("out of memory");
    }
    PageWidth widths[N_SCHEMES];
    int n = 0;
    for (int s = 0; s < N_SCHEMES; s++)
        if (strcmp(schemes[s].panel, "loss") == 0 && !r->skipped[s][0])
            widths[n].label = schemes[s].label, widths[n++].spec = schemes[s].k_spec;
    const double t0 = seconds_now();
    const PlatePage page = {m, cli_default_path(model_path, "models/micro.bin", path, sizeof path), cli_kernels(), r->texts,
                            widths, n, json, json_len, out_dir};
    size_t bytes = 0;
    const int rc = plate_page_write(&page, &bytes, err, sizeof err);
    free(json);
    if (rc) {
        fprintf(stderr, "micro: %s\n", err);
        return 1;
    }
    if (!quiet) printf("page: %s/plate.html (%.0f KB, %.1f s)\n", out_dir, bytes / 1024.0, seconds_now() - t0);
    return 0;
}

// plate --long: one text's windows through fp32 and every scheme of panel (a) (eval_windows).
static void long_task(void *arg, int t, int thread) {
    (void)thread;
    PlateRun *r = arg;
    char err[600];
    const CodecSpec *k[N_SCHEMES], *v[N_SCHEMES];
    int index[N_SCHEMES], n = 0;
    for (int s = 0; s < N_SCHEMES; s++)
        if (strcmp(schemes[s].panel, "loss") == 0 && !r->skipped[s][0])
            index[n] = s, k[n] = cli_spec(schemes[s].k_spec), v[n++] = cli_spec(schemes[s].v_spec);
    EvalResult out[N_SCHEMES];
    const int rc = eval_windows(r->model, r->texts[t].tokens, r->texts[t].n_tokens, r->model->config.max_seq_len, k, v,
                                n, 1, r->decode, &r->reference[t], out, NULL, err, sizeof err);
    if (rc) {
        fail_run(r, r->texts[t].path, err, rc);
        return;
    }
    for (int i = 0; i < n; i++) r->results[index[i]][t] = out[i];
}

// micro plate --long: panel (a) again on the corpus's validation split (held out from training, about
// 280 kB a language), each document in windows of the model's context, each from its own BOS.
static int plate_long(const PlateOptions *o, PlateRun *r) {
    char err[600], path[4096], arg[4200];
    const char *dir = cli_default_path(o->corpus, "data/corpus", path, sizeof path);
    static const char *const names[N_TEXTS] = {"en.val.txt", "zh.val.txt"};
    if (o->files && check_out_dir(o->out_dir, 0, err, sizeof err)) return cli_error("%s", err);
    for (int t = 0; t < N_TEXTS; t++) {
        snprintf(arg, sizeof arg, "%s/%s", dir, names[t]);
        if (access(arg, F_OK) != 0)
            return cli_error("%s: not found; the long texts are the corpus's validation split: build it with "
                             "scripts/corpus (or run scripts/run --long)", arg);
        if (text_load(&r->texts[t], arg, INT32_MAX, err, sizeof err)) return cli_error("%s", err);
    }
    name_by_role(r->texts);
    Model m = {0};
    if (cli_load_model(&m, o->model_path, o->calib_path, err, sizeof err)) return cli_error("%s", err);
    find_skipped(r, &m.config, 0);
    ThreadPool *pool = pool_create(o->threads);
    if (!pool) {
        model_free(&m);
        return cli_error("cannot start %d threads", o->threads);
    }
    r->model = &m;
    r->decode = o->decode;
    r->long_run = 1;
    pool_run_tasks(pool, N_TEXTS, long_task, r);
    pool_destroy(pool);
    int status = 0;
    if (atomic_load(&r->failed)) {
        cli_error("%s", r->err);
        status = atomic_load(&r->failed) == EVAL_NOT_FINITE ? 1 : 2;
    }
    if (!status && (status = arch_panel_run(&r->arch, o->model_path, r->texts, o->threads, o->decode, 1)) != 0)
        cli_error("%s", r->arch.err);
    char csv_path[4200];
    snprintf(csv_path, sizeof csv_path, "%s/plate-long.csv", o->out_dir);
    PlateOutput out = {r, NULL, NULL}; // the long run's CSV: panel (a) only (print_csv, long_run)
    if (!status && o->files &&
        (make_out_dir(o->out_dir, err, sizeof err) || safe_write(csv_path, write_csv, &out, err, sizeof err))) {
        fprintf(stderr, "micro: %s\n", err);
        status = 1;
    }
    if (!status && o->csv) print_csv(stdout, r, NULL, NULL);
    if (!status && !o->csv) {
        printf("micro plate --long: %s; the corpus's validation split (held out from training), each document in\n"
               "windows of %d tokens, each from BOS: English %s = %d tokens, Chinese %s = %d tokens\n\n",
               cli_default_path(o->model_path, "models/micro.bin", path, sizeof path), m.config.max_seq_len,
               r->texts[0].path, r->texts[0].n_tokens, r->texts[1].path, r->texts[1].n_tokens);
        printf("(a) the plate's scheme on the long held-out texts\n");
        printf("%31s | %-43s | %-43s |\n", "", "English", "Chinese");
        print_scheme_table(r, "loss", 1);
        print_legend();
        arch_panel_print(&r->arch);
        if (o->files) printf("\nwritten: %s\n", csv_path);
    }
    arch_panel_free(&r->arch);
    model_free(&m);
    return status;
}

int plate_parse(int argc, char **argv, PlateOptions *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->out_dir = "out", o->threads = 2, o->files = 1, o->serve_fp16 = 16;
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--csv")) bad = opts_flag(&p), o->csv = 1;
        else if (opts_is(&p, "--json")) bad = opts_flag(&p), o->json = 1;
        else if (opts_is(&p, "--no-files")) bad = opts_flag(&p), o->files = 0;
        else if (opts_is(&p, "--html")) bad = opts_flag(&p), o->html = 1;
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--calib")) bad = opts_path(&p, &o->calib_path);
        else if (opts_is(&p, "--en")) bad = opts_string(&p, &o->en) || cmd_check_text_arg("--en", o->en, err, errlen);
        else if (opts_is(&p, "--zh")) bad = opts_string(&p, &o->zh) || cmd_check_text_arg("--zh", o->zh, err, errlen);
        else if (opts_is(&p, "--out")) bad = opts_string(&p, &o->out_dir);
        else if (opts_is(&p, "--threads")) bad = opts_int(&p, 1, 8, &o->threads);
        else if (opts_is(&p, "--decode")) bad = opts_flag(&p), o->decode = 1;
        else if (opts_is(&p, "--long")) bad = opts_flag(&p), o->long_run = 1;
        else if (opts_is(&p, "--corpus")) bad = opts_path(&p, &o->corpus);
        else if (opts_is(&p, "--serve-fp16")) bad = opts_int(&p, 1, 1024, &o->serve_fp16);
        else if (opts_is(&p, "--serve-length")) bad = opts_int(&p, SERVE_STEPS + 2, 1 << 20, &o->serve_length);
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (o->csv && o->json) return opts_fail(&p, "choose one of --csv and --json");
    if (o->long_run && o->json) return opts_fail(&p, "--long prints its panel or --csv, not --json");
    if (o->html && !o->files) return opts_fail(&p, "--html writes DIR/plate.html: drop --no-files");
    if (o->html && o->long_run) return opts_fail(&p, "--html draws the plate's page; --long has none");
    return OPTS_RUN;
}

// No file the plate writes into --out may be one it reads (a text, the model, the calibration),
// however the paths spell it.
static int check_inputs_kept(const PlateOptions *o, char *err, size_t errlen) {
    static const char *const written[] = {"plate.csv", "plate.json", "plate.html", "plate.svg", "plate.png", "serve.svg",
                                          "serve.png", "frontier.svg", "frontier.png", "arch.svg", "arch.png"};
    enum { N_WRITTEN = sizeof written / sizeof written[0] };
    char paths[N_WRITTEN][4200], en[4096] = "", zh[4096] = "";
    CliFile outputs[N_WRITTEN];
    for (int i = 0; i < N_WRITTEN; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/%s", o->out_dir, written[i]);
        outputs[i] = (CliFile){"--out", paths[i]};
    }
    long chars;
    char why[256];
    if (o->en) text_split_arg(o->en, en, sizeof en, &chars, why, sizeof why);
    if (o->zh) text_split_arg(o->zh, zh, sizeof zh, &chars, why, sizeof why);
    const CliFile inputs[] = {{"--en", o->en ? en : NULL}, {"--zh", o->zh ? zh : NULL}, {"--model", o->model_path},
                              {"--calib", o->calib_path}};
    return cli_check_distinct(outputs, N_WRITTEN, inputs, 4, err, errlen);
}

int cmd_plate(int argc, char **argv) {
    PlateOptions o;
    char err[512];
    int done = cli_after_parse(plate_parse(argc, argv, &o, err, sizeof err), err, plate_usage);
    if (done >= 0) return done;
    const char *model_path = o.model_path, *en = o.en, *zh = o.zh, *out_dir = o.out_dir;
    const int threads = o.threads, csv = o.csv, json = o.json, files = o.files;
    char out_err[600];
    if (files && (check_out_dir(out_dir, 1, out_err, sizeof out_err) || check_inputs_kept(&o, out_err, sizeof out_err)))
        return cli_error("%s", out_err);

    if (o.long_run) {
        PlateRun *lr = calloc(1, sizeof *lr);
        if (!lr) return cli_error("out of memory");
        pthread_mutex_init(&lr->err_lock, NULL);
        const int rc = plate_long(&o, lr);
        for (int t = 0; t < N_TEXTS; t++) text_free(&lr->texts[t]);
        pthread_mutex_destroy(&lr->err_lock);
        free(lr);
        return rc;
    }
    char path[4096], en_arg[4200], zh_arg[4200];
    if (!en)
        snprintf(en_arg, sizeof en_arg, "%s:%d", cli_default_path(NULL, "data/plates/en.txt", path, sizeof path),
                 PLATE_EN_CHARS);
    if (!zh)
        snprintf(zh_arg, sizeof zh_arg, "%s:%d", cli_default_path(NULL, "data/plates/zh.txt", path, sizeof path),
                 PLATE_ZH_CHARS);
    PlateRun *r = calloc(1, sizeof *r);
    if (!r) return cli_error("out of memory");
    pthread_mutex_init(&r->err_lock, NULL);
    Model m = {0};
    int status = 0;
    const char *text_args[N_TEXTS] = {en ? en : en_arg, zh ? zh : zh_arg};
    for (int t = 0; t < N_TEXTS && !status; t++)
        if (text_load(&r->texts[t], text_args[t], INT32_MAX, err, sizeof err)) status = cli_error("%s", err);
    name_by_role(r->texts);
    if (!status && cli_load_any_model(&m, model_path, o.calib_path, err, sizeof err))
        status = cli_error("%s", err);
    r->own_model = !status && m.tokenizer != NULL;
    if (r->own_model && o.html)
        status = cli_error("--html draws micro's page (its continuations are micro's bytes); on a model with a "
                           "vocabulary of its own, plate gives the panels, --csv and --json");
    if (r->own_model && !status && cli_tokenize_texts(&m, r->texts, N_TEXTS, err, sizeof err))
        status = cli_error("%s", err);
    if (!status) { // before any work
        r->serve_context = o.serve_length                                ? o.serve_length
                           : m.config.max_seq_len < SERVE_LENGTH_DEFAULT ? m.config.max_seq_len
                                                                         : SERVE_LENGTH_DEFAULT;
        if (r->serve_context > m.config.max_seq_len || r->serve_context <= SERVE_STEPS + 1)
            status = cli_error("--serve-length %d is outside %d..%d (the model's context)", r->serve_context,
                               SERVE_STEPS + 2, m.config.max_seq_len);
        else
            find_skipped(r, &m.config, !r->own_model);
    }
    for (int t = 0; t < N_TEXTS && !status; t++) {
        if (r->texts[t].n_tokens > m.config.max_seq_len) {
            text_context_error(r->texts[t].path, (size_t)r->texts[t].n_tokens, m.config.max_seq_len, err, sizeof err);
            status = cli_error("%s", err);
        } else if (r->texts[t].n_tokens < 2) {
            char shown[MSG_TEXT];
            status = cli_error("%s: nothing to score", msg_text(r->texts[t].path, shown, sizeof shown));
        } else if (eval_trace_alloc(&r->traces[t], &m, r->texts[t].n_tokens)) {
            status = cli_error("out of memory");
        }
    }
    const CapacityModel *cap = capacity_preset("llama3-8b");
    // Each of these schemes codes every head on its own, so one head's conversation stores the same
    // bits per number as the model's 8 (plate_capacity.h): an eighth of the work.
    CapacityModel one_head = *cap;
    one_head.kv_heads = 1;
    double scheme_bits[N_CAP_SCHEMES];
    for (int i = 0; i < N_CAP_SCHEMES && !status; i++)
        if (capacity_scheme_bits(&one_head, cli_spec(plate_capacity_schemes[i]), &scheme_bits[i], err, sizeof err))
            status = cli_error("%s", err);
    ThreadPool *pool = status ? NULL : pool_create(threads);
    if (!status && !pool) status = cli_error("cannot start %d threads", threads);
    if (!status) {
        r->model = &m;
        r->decode = o.decode;
        const double t0 = seconds_now();
        pool_run_tasks(pool, N_TEXTS, reference_task, r);
        if (!atomic_load(&r->failed)) pool_run_tasks(pool, N_SCHEMES * N_TEXTS, scheme_task, r);
        r->loss_seconds = seconds_now() - t0;
        if (atomic_load(&r->failed)) {
            cli_error("%s", r->err);
            status = atomic_load(&r->failed) == EVAL_NOT_FINITE ? 1 : 2;
        }
    }
    pool_destroy(pool);
    if (!status && !r->own_model && (status = arch_panel_run(&r->arch, model_path, r->texts, threads, o.decode, 0)) != 0)
        cli_error("%s", r->arch.err);
    if (!status && !r->own_model) { // the prompts' text: both plates' bytes, one after the other
        const size_t en_len = (size_t)r->texts[0].n_bytes - 1, zh_len = (size_t)r->texts[1].n_bytes - 1;
        uint8_t *text = malloc(en_len + zh_len);
        r->threads = 1;
        r->serve_fp16 = o.serve_fp16;
        if (!text) {
            status = cli_error("out of memory");
        } else {
            memcpy(text, r->texts[0].bytes + 1, en_len);
            memcpy(text + en_len, r->texts[1].bytes + 1, zh_len);
            // One thread: a timing, which a second thread spinning on a shared core would only blur.
            // The pools are filled on --threads.
            if (run_serve_panel(r, &m, text, en_len + zh_len, 1, threads, err, sizeof err))
                status = cli_error("%s", err);
            free(text);
        }
    }
    char csv_path[4200] = "";
    if (!status && files && write_outputs(out_dir, r, cap, scheme_bits, csv_path, sizeof csv_path, err, sizeof err)) {
        fprintf(stderr, "micro: %s\n", err);
        status = 1;
    }
    if (!status && csv) print_csv(stdout, r, cap, scheme_bits);
    if (!status && json) print_json(stdout, r, cap, scheme_bits);
    if (!status && !csv && !json && r->own_model) {
        print_own_model(r, &m, model_path, threads);
        if (files) // the figure's right half is panels (c) and (d), micro's
            printf("\nwritten: %s and %s/plate.json (no figure: its right half is micro's panels (c) and (d))\n",
                   csv_path, out_dir);
    } else if (!status && !csv && !json) {
        printf("micro plate: %s, %zu parameters; English %ld characters = %d tokens, Chinese %ld characters = %d "
               "tokens\n\n",
               cli_default_path(model_path, "models/micro.bin", path, sizeof path), m.n_params, r->texts[0].chars,
               r->texts[0].n_tokens, r->texts[1].chars, r->texts[1].n_tokens);
        print_loss_panels(r, NULL);
        printf("\n(c) what it buys: %s, %.1f GB weights, %.0f GB GPU at %.0f%% use, %d-token conversations\n",
               cap->name, cap->weights_gb, cap->gpu_gb, 100 * cap->util, cap->context);
        printf("%-24s %8s %14s %14s\n", "cache", "bits", "bytes/token", "conversations");
        for (int i = 0; i < N_CAP_BITS + N_CAP_SCHEMES; i++) {
            double bits = i < N_CAP_BITS ? capacity_bits[i] : scheme_bits[i - N_CAP_BITS];
            CapacityRow row = capacity_row(cap, bits);
            char label[64];
            if (i < N_CAP_BITS)
                snprintf(label, sizeof label, "%d-bit, scales ignored", capacity_bits[i]);
            else
                snprintf(label, sizeof label, "%s", plate_capacity_schemes[i - N_CAP_BITS]);
            printf("%-24s %8.3f %14.0f %14ld\n", label, bits, row.bytes_per_token, row.conversations);
        }
        printf("the same model with other attention: numbers cached per token and layer, conversations at each width\n");
        printf("%-44s %8s", "attention", "numbers");
        for (int i = 0; i < N_CAP_BITS; i++) printf(" %6d-bit", capacity_bits[i]);
        printf("\n");
        for (int a = 0; a < N_CAP_ARCHS; a++) {
            char label[96];
            const double numbers = cap_arch_numbers(cap, a);
            if (a == 0)
                snprintf(label, sizeof label, "%s (%d of %d heads)", cap_archs[a].label, cap->kv_heads, CAP_Q_HEADS);
            else if (a == 1)
                snprintf(label, sizeof label, "%s (%d key/value heads)", cap_archs[a].label, CAP_Q_HEADS);
            else
                snprintf(label, sizeof label, "%s (%d + %d)", cap_archs[a].label, 4 * cap->head_dim, cap->head_dim / 2);
            printf("%-44s %8.0f", label, numbers);
            for (int i = 0; i < N_CAP_BITS; i++)
                printf(" %10ld", capacity_row_numbers(cap, numbers, capacity_bits[i]).conversations);
            printf("\n");
        }
        print_serve_panel(r);
        printf("\n(e) ");
        print_bars(r);
        print_frontier(r);
        arch_panel_print(&r->arch);
        print_loss_time(r, threads);
        if (files) {
            printf("\nwritten: %s and %s/plate.json\n", csv_path, out_dir);
            status = draw_figure(csv_path, out_dir);
        }
    }
    if (!status && o.html) status = write_page(r, &m, cap, scheme_bits, model_path, out_dir, csv || json);
    for (int t = 0; t < N_TEXTS; t++) {
        text_free(&r->texts[t]);
        eval_trace_free(&r->traces[t]);
    }
    arch_panel_free(&r->arch);
    pthread_mutex_destroy(&r->err_lock);
    free(r);
    model_free(&m);
    return status;
}
