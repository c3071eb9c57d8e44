// Panel (g) of micro plate: architecture × cache (plate_arch.h).
#include "plate_arch.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "clock.h"
#include "cli.h"
#include "kvpool.h"
#include "model_file.h"
#include "msgtext.h"
#include "threadpool.h"

static const struct {
    const char *label, *file, *what;
} archs[ARCH_MAX] = {
    {"MHA", "micro.bin", "multi-head attention"},
    {"GQA", "micro-gqa.bin", "grouped-query attention"},
    {"MLA", "micro-mla.bin", "latent attention"},
};

// The plate's scheme at 16 (bf16, as a server stores it), 8, 4, 3 and 2 bits, KIVI-2, q4_0 and FP8;
// fp32 first: each architecture's reference.
static const struct {
    const char *label, *spec;
} arch_schemes[] = {
    {"fp32", "fp32"},   {"int 16 (bf16)", "bf16"}, {"int 8", "int:bits=8"}, {"int 4", "int:bits=4"},
    {"int 3", "int:bits=3"}, {"int 2", "int:bits=2"}, {"KIVI-2", "kivi:bits=2"}, {"q4_0", "q4_0"},
    {"FP8 e4m3", "fp8:e4m3"},
};
#define N_ARCH_SCHEMES (int)(sizeof arch_schemes / sizeof arch_schemes[0])

const char *arch_label(int arch) { return archs[arch].label; }

// Which of archs[] a model's attention is: latent, grouped-query (fewer key/value heads) or multi-head.
static int attention_of(const ModelConfig *c) { return c->latent_dim > 0 ? 2 : c->n_kv_heads < c->n_heads ? 1 : 0; }

static const char *row_v_spec(const ArchRow *r) { return r->rope_fp16 ? "fp16" : arch_schemes[r->scheme].spec; }

// The row's label: "GQA int 4", "MLA int 4, RoPE key fp16".
static void row_label(const ArchRow *r, char *out, size_t n) {
    snprintf(out, n, "%s %s%s", archs[r->arch].label, arch_schemes[r->scheme].label,
             r->rope_fp16 ? ", RoPE key fp16" : "");
}

typedef struct {
    ArchPanel *p;
    pthread_mutex_t lock;
} Job;

static void fail(Job *j, const char *what, const char *err, int rc) {
    pthread_mutex_lock(&j->lock);
    if (!j->p->failed) {
        j->p->failed = rc;
        snprintf(j->p->err, sizeof j->p->err, "panel (g), %s: %s", what, err);
    }
    pthread_mutex_unlock(&j->lock);
}

// Phase 1: each architecture's fp32 cache on each text, recorded.
static void fp32_task(void *arg, int i, int thread) {
    (void)thread;
    Job *j = arg;
    ArchPanel *p = j->p;
    const int a = i / ARCH_TEXTS, t = i % ARCH_TEXTS;
    if (!p->present[a] || p->failed) return;
    char err[600];
    const int rc = eval_tokens(&p->models[a], p->texts[t].tokens, p->texts[t].n_tokens, cli_spec("fp32"),
                               cli_spec("fp32"), 1, p->decode, &p->fp32[a][t], NULL, &p->rows[p->fp32_row[a]].res[t],
                               err, sizeof err);
    if (rc) fail(j, p->path[a], err, rc);
}

// A row's increase over micro's fp32 cache on text t, from the per-token losses of both runs, `nll`
// and micro's (the same tokens, so the bootstrap pairs them). -1 when out of memory.
static int versus_micro(ArchPanel *p, ArchRow *r, int t, const double *nll) {
    const int n = p->windowed ? p->steps[t] : p->texts[t].n_tokens - 1; // predicted tokens
    const double *micro = p->windowed ? p->nll[0][t] : p->fp32[0][t].nll;
    double *diff = malloc(sizeof(double) * (size_t)n), sum = 0;
    if (!diff) return -1;
    for (int k = 0; k < n; k++) sum += diff[k] = nll[k] - micro[k];
    r->micro[t] = sum / n;
    const int rc = bootstrap_mean_ci(diff, n, BOOTSTRAP_BLOCK, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, &r->micro_lo[t],
                                     &r->micro_hi[t]);
    free(diff);
    return rc;
}

// Phase 2: a row on one text, against its own fp32 run (inside eval: the interval) and micro's.
static void row_task(void *arg, int i, int thread) {
    (void)thread;
    Job *j = arg;
    ArchPanel *p = j->p;
    ArchRow *r = &p->rows[i / ARCH_TEXTS];
    const int t = i % ARCH_TEXTS, a = r->arch, n = p->texts[t].n_tokens;
    if (p->failed || r->scheme == 0) return; // the fp32 rows are phase 1's
    char err[600];
    EvalTrace trace;
    if (eval_trace_alloc(&trace, &p->models[a], n)) {
        fail(j, p->path[a], "out of memory", -1);
        return;
    }
    const int rc = eval_tokens(&p->models[a], p->texts[t].tokens, n, cli_spec(arch_schemes[r->scheme].spec),
                               cli_spec(row_v_spec(r)), 1, p->decode, &trace, &p->fp32[a][t], &r->res[t], err, sizeof err);
    if (rc)
        fail(j, p->path[a], err, rc);
    else if (versus_micro(p, r, t, trace.nll))
        fail(j, p->path[a], "out of memory", -1);
    r->own[t] = r->res[t].loss - p->rows[p->fp32_row[a]].res[t].loss;
    eval_trace_free(&trace);
}

// The long texts: one architecture on one text, its fp32 cache and every row of it through
// eval_windows together (each window's fp32 run serves them all), the NLLs kept for versus_micro.
static void windowed_task(void *arg, int i, int thread) {
    (void)thread;
    Job *j = arg;
    ArchPanel *p = j->p;
    const int a = i / ARCH_TEXTS, t = i % ARCH_TEXTS;
    if (!p->present[a] || p->failed) return;
    const CodecSpec *k[ARCH_MAX_ROWS], *v[ARCH_MAX_ROWS];
    EvalResult out[ARCH_MAX_ROWS];
    int index[ARCH_MAX_ROWS], n = 0;
    for (int r = 0; r < p->n_rows; r++)
        if (p->rows[r].arch == a && p->rows[r].scheme != 0) {
            index[n] = r, k[n] = cli_spec(arch_schemes[p->rows[r].scheme].spec);
            v[n++] = cli_spec(row_v_spec(&p->rows[r]));
        }
    char err[600];
    EvalResult *fp32 = &p->rows[p->fp32_row[a]].res[t];
    const int rc = eval_windows(&p->models[a], p->texts[t].tokens, p->texts[t].n_tokens,
                                p->models[a].config.max_seq_len, k, v, n, 1, p->decode, fp32, out, p->nll[a][t], err,
                                sizeof err);
    if (rc) {
        fail(j, p->path[a], err, rc);
        return;
    }
    fp32->top1_agree = 1.0, fp32->kl = 0.0, fp32->delta_lo = fp32->delta_hi = 0.0;
    for (int s = 0; s < n; s++) {
        ArchRow *r = &p->rows[index[s]];
        r->res[t] = out[s];
        r->own[t] = out[s].loss - fp32->loss;
    }
}

// Each row's bytes of cache per token: exact bytes over tokens held. On the long texts eval_windows
// gives the first window's bytes beside every window's tokens, so its bits per number are used.
static double bytes_per_token(const ArchPanel *p, const ArchRow *r, int t) {
    if (!p->windowed) return (double)r->res[t].cache_bytes / r->res[t].tokens;
    return r->res[t].bits_per_element * p->numbers[r->arch] * p->models[r->arch].config.n_layers / 8.0;
}

// Whether the 16-number RoPE key of a latent model takes this spec (q4_0 and MX need 32).
static int rope_takes(const Model *m, const char *spec) {
    char err[256];
    return kv_layout_check_spec(&m->config, KV_ROLE_VALUE, spec, err, sizeof err) == 0;
}

int arch_panel_run(ArchPanel *p, const char *model_path, const Text *texts, int threads, int decode, int windowed) {
    memset(p, 0, sizeof *p);
    p->texts = texts;
    p->decode = decode;
    p->windowed = windowed;
    for (int t = 0; t < ARCH_TEXTS && windowed; t++) p->steps[t] = eval_windows_steps(texts[t].tokens, texts[t].n_tokens);
    const double t0 = seconds_now();
    char given[4096];
    const char *micro = cli_default_path(model_path, "models/micro.bin", given, sizeof given);
    const char *slash = strrchr(micro, '/');
    const int dir_len = slash ? (int)(slash - micro) : 0;
    const char *base = slash ? slash + 1 : micro;
    for (int a = 0; a < ARCH_MAX; a++) {
        snprintf(p->path[a], sizeof p->path[a], "%.*s%s%s", dir_len, micro, slash ? "/" : "", archs[a].file);
        const int sibling_given = a == 0 && (!strcmp(base, archs[1].file) || !strcmp(base, archs[2].file)) &&
                                  access(p->path[a], F_OK) == 0;
        if (a == 0 && !sibling_given) snprintf(p->path[a], sizeof p->path[a], "%s", micro);
        if (a > 0 && access(p->path[a], F_OK) != 0) continue; // not shipped beside micro
        char err[600];
        if (model_load(&p->models[a], p->path[a], err, sizeof err)) {
            snprintf(p->err, sizeof p->err, "panel (g): %s", err);
            arch_panel_free(p);
            return 2;
        }
        const int kind = p->models[a].tokenizer ? -1 : attention_of(&p->models[a].config);
        if (kind != a) { // the label must be what the file holds, and the texts its bytes
            char shown[MSG_TEXT];
            msg_text(p->path[a], shown, sizeof shown);
            model_free(&p->models[a]);
            memset(&p->models[a], 0, sizeof p->models[a]);
            if (a > 0) continue; // left out, as a missing file
            snprintf(p->left_out, sizeof p->left_out, "%s has %s; the panel sets its siblings beside micro's %s",
                     shown, kind < 0 ? "a vocabulary of its own" : archs[kind].what, archs[0].what);
            arch_panel_free(p);
            return 0;
        }
        p->present[a] = 1;
        const KVLayout l = kv_layout_of(&p->models[a].config);
        p->numbers[a] = l.n_heads[0] * l.head_dim[0] + l.n_heads[1] * l.head_dim[1];
        for (int t = 0; t < ARCH_TEXTS && !windowed; t++)
            if (texts[t].n_tokens > p->models[a].config.max_seq_len ||
                eval_trace_alloc(&p->fp32[a][t], &p->models[a], texts[t].n_tokens)) {
                snprintf(p->err, sizeof p->err, "panel (g): %s: the texts do not fit it, or out of memory", p->path[a]);
                arch_panel_free(p);
                return 2;
            }
        const int latent = p->models[a].config.latent_dim > 0;
        p->fp32_row[a] = p->n_rows;
        p->rows[p->n_rows++] = (ArchRow){.arch = a, .scheme = 0};
        for (int s = 1; s < N_ARCH_SCHEMES; s++)
            for (int fp16 = 0; fp16 <= latent; fp16++) {
                if (latent && !fp16 && !rope_takes(&p->models[a], arch_schemes[s].spec)) continue;
                p->rows[p->n_rows++] = (ArchRow){.arch = a, .scheme = s, .rope_fp16 = fp16};
            }
        int rows = 0;
        for (int r = 0; r < p->n_rows; r++) rows += p->rows[r].arch == a;
        for (int t = 0; t < ARCH_TEXTS && windowed; t++)
            if (!(p->nll[a][t] = malloc(sizeof(double) * (size_t)rows * (size_t)texts[t].n_tokens))) {
                snprintf(p->err, sizeof p->err, "panel (g): out of memory");
                arch_panel_free(p);
                return 2;
            }
    }
    ThreadPool *pool = pool_create(threads);
    if (!pool) {
        snprintf(p->err, sizeof p->err, "cannot start %d threads", threads);
        arch_panel_free(p);
        return 2;
    }
    Job j = {p, PTHREAD_MUTEX_INITIALIZER};
    if (windowed) { // every run at once; then each row against micro's fp32 (row 0 of micro's NLLs)
        pool_run_tasks(pool, ARCH_MAX * ARCH_TEXTS, windowed_task, &j);
        for (int a = 0; a < ARCH_MAX && !p->failed; a++)
            for (int t = 0, k = 0; t < ARCH_TEXTS && p->present[a]; t++, k = 0)
                for (int r = 0; r < p->n_rows; r++) // the arch's rows in order: fp32 first (NLL row 0)
                    if (p->rows[r].arch == a &&
                        versus_micro(p, &p->rows[r], t, p->nll[a][t] + (size_t)k++ * texts[t].n_tokens))
                        fail(&j, p->path[a], "out of memory", -1);
    } else {
        pool_run_tasks(pool, ARCH_MAX * ARCH_TEXTS, fp32_task, &j);
        for (int a = 0; a < ARCH_MAX && !p->failed; a++) // each fp32 cache against micro's
            for (int t = 0; t < ARCH_TEXTS && p->present[a]; t++)
                if (versus_micro(p, &p->rows[p->fp32_row[a]], t, p->fp32[a][t].nll))
                    fail(&j, p->path[a], "out of memory", -1);
        if (!p->failed) pool_run_tasks(pool, p->n_rows * ARCH_TEXTS, row_task, &j);
    }
    pool_destroy(pool);
    p->seconds = seconds_now() - t0;
    return p->failed ? (p->failed == EVAL_NOT_FINITE ? 1 : 2) : 0;
}

// Safe to call again: everything freed is left empty.
void arch_panel_free(ArchPanel *p) {
    for (int a = 0; a < ARCH_MAX; a++) {
        for (int t = 0; t < ARCH_TEXTS; t++) {
            eval_trace_free(&p->fp32[a][t]);
            memset(&p->fp32[a][t], 0, sizeof p->fp32[a][t]);
            free(p->nll[a][t]);
            p->nll[a][t] = NULL;
        }
        if (p->models[a].params) model_free(&p->models[a]);
    }
}

// The rows on text t no other beats: by bytes per token ascending, each whose increase over micro's
// fp32 cache is below every one before it. Their indices to out; returns how many.
static int frontier(const ArchPanel *p, int t, int *out) {
    int order[ARCH_MAX_ROWS], n = p->n_rows;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) // insertion sort: a few dozen rows, ties kept in the panel's order
        for (int k = i; k > 0; k--) {
            const ArchRow *a = &p->rows[order[k - 1]], *b = &p->rows[order[k]];
            const double ba = bytes_per_token(p, a, t), bb = bytes_per_token(p, b, t);
            if (ba < bb || (ba == bb && a->micro[t] <= b->micro[t])) break;
            const int keep = order[k];
            order[k] = order[k - 1], order[k - 1] = keep;
        }
    int m = 0;
    double best = INFINITY;
    for (int i = 0; i < n; i++)
        if (p->rows[order[i]].micro[t] < best) best = p->rows[order[i]].micro[t], out[m++] = order[i];
    return m;
}

void arch_panel_print(const ArchPanel *p) {
    if (p->left_out[0]) {
        printf("\n(g) architecture x cache: left out: %s\n", p->left_out);
        return;
    }
    printf("\n(g) architecture x cache: micro's multi-head attention beside grouped-query and latent attention,\n"
           "trained in the same budget; numbers cached per token and layer:");
    for (int a = 0; a < ARCH_MAX; a++)
        if (p->present[a]) printf("%s %s %d", a ? "," : "", archs[a].label, p->numbers[a]);
    printf("\n");
    for (int a = 1; a < ARCH_MAX; a++)
        if (!p->present[a]) printf("(%s: %s not found beside micro or not %s, left out)\n", archs[a].label, p->path[a],
                                   archs[a].what);
    for (int t = 0; t < ARCH_TEXTS; t++) {
        printf("%-32s %11s %8s  %-29s %-29s\n", t ? "Chinese" : "English", "bytes/token", "loss", "over its fp32 [95%]",
               "over micro's fp32 [95%]");
        for (int i = 0; i < p->n_rows; i++) {
            const ArchRow *r = &p->rows[i];
            const EvalResult *e = &r->res[t];
            char label[96], own[64], micro[64];
            row_label(r, label, sizeof label);
            if (r->scheme == 0)
                snprintf(own, sizeof own, "%+.4f", 0.0);
            else
                snprintf(own, sizeof own, "%+.4f [%+.4f, %+.4f]", r->own[t], e->delta_lo, e->delta_hi);
            if (r->arch == 0 && r->scheme == 0)
                snprintf(micro, sizeof micro, "%+.4f", 0.0);
            else
                snprintf(micro, sizeof micro, "%+.4f [%+.4f, %+.4f]", r->micro[t], r->micro_lo[t], r->micro_hi[t]);
            printf("%-32s %11.1f %8.4f  %-29s %-29s\n", label, bytes_per_token(p, r, t), e->loss, own, micro);
        }
        int members[ARCH_MAX_ROWS];
        const int m = frontier(p, t, members);
        printf("frontier (fewest bytes for the increase over micro's fp32):");
        for (int i = 0; i < m; i++) {
            char label[96];
            row_label(&p->rows[members[i]], label, sizeof label);
            printf("%s %s %.0f B %+.4f", i ? " |" : "", label, bytes_per_token(p, &p->rows[members[i]], t),
                   p->rows[members[i]].micro[t]);
        }
        printf("\n%s", t + 1 < ARCH_TEXTS ? "\n" : "");
    }
    printf("(%d runs in %.1f s)\n", p->n_rows * ARCH_TEXTS, p->seconds);
}

// The file's stem ("micro-gqa") names the model in the CSV's model column.
static void model_stem(const ArchPanel *p, int a, char *out, size_t n) {
    const char *base = strrchr(p->path[a], '/');
    base = base ? base + 1 : p->path[a];
    const size_t len = strcspn(base, ".");
    snprintf(out, n, "%.*s", (int)len, base);
}

void arch_panel_csv(FILE *out, const ArchPanel *p) {
    for (int i = 0; i < p->n_rows; i++) {
        const ArchRow *r = &p->rows[i];
        char label[96], stem[256];
        row_label(r, label, sizeof label);
        model_stem(p, r->arch, stem, sizeof stem);
        for (int t = 0; t < ARCH_TEXTS; t++) {
            const EvalResult *e = &r->res[t];
            fprintf(out, "arch,");
            csv_field_to(out, label);
            fprintf(out, ",%s,", p->texts[t].name);
            csv_field_to(out, e->k_spec);
            fputc(',', out);
            csv_field_to(out, e->v_spec);
            fprintf(out, ",%d,%.6f,%.6f,%.4f,%zu,%.6f,%.6g,,", e->tokens, e->loss, r->own[t], e->bits_per_element,
                    e->cache_bytes, e->top1_agree, e->kl);
            csv_field_to(out, stem);
            fprintf(out, ",,%.1f,,,,,,%.6f,%.6f,%s,%d,%.6f,%.6f,%.6f,%.6g,%.6g\n", bytes_per_token(p, r, t),
                    r->scheme ? e->delta_lo : 0.0, r->scheme ? e->delta_hi : 0.0, archs[r->arch].label,
                    p->numbers[r->arch], r->micro[t], r->micro_lo[t], r->micro_hi[t], e->kl_p99, e->kl_max);
        }
    }
}

void arch_panel_json(FILE *out, const ArchPanel *p) {
    fprintf(out, "{\"architectures\": [");
    for (int a = 0, first = 1; a < ARCH_MAX; a++) {
        if (!p->present[a]) continue;
        fprintf(out, "%s{\"arch\": \"%s\", \"model\": ", first ? "" : ", ", archs[a].label);
        json_string_to(out, p->path[a]);
        fprintf(out, ", \"numbers_per_token_layer\": %d}", p->numbers[a]);
        first = 0;
    }
    fprintf(out, "], \"rows\": [\n");
    for (int i = 0; i < p->n_rows; i++) {
        const ArchRow *r = &p->rows[i];
        char label[96];
        row_label(r, label, sizeof label);
        fprintf(out, "    {\"arch\": \"%s\", \"label\": ", archs[r->arch].label);
        json_string_to(out, label);
        fprintf(out, ", \"k_cache\": ");
        json_string_to(out, r->res[0].k_spec);
        fprintf(out, ", \"v_cache\": ");
        json_string_to(out, r->res[0].v_spec);
        fprintf(out, ", \"texts\": {");
        for (int t = 0; t < ARCH_TEXTS; t++) {
            const EvalResult *e = &r->res[t];
            fprintf(out, "%s\"%s\": {\"tokens\": %d, \"loss\": %.6f, \"bytes_per_token\": %.1f, \"delta\": %.6f, "
                    "\"delta_lo\": %.6f, \"delta_hi\": %.6f, \"delta_micro\": %.6f, \"delta_micro_lo\": %.6f, "
                    "\"delta_micro_hi\": %.6f}",
                    t ? ", " : "", p->texts[t].name, e->tokens, e->loss, bytes_per_token(p, r, t), r->own[t],
                    r->scheme ? e->delta_lo : 0.0, r->scheme ? e->delta_hi : 0.0, r->micro[t], r->micro_lo[t],
                    r->micro_hi[t]);
        }
        fprintf(out, "}}%s\n", i + 1 < p->n_rows ? "," : "");
    }
    fprintf(out, "  ]}");
}
