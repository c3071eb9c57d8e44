// micro eval: loss in nats per token on each text, with the chosen cache, against the fp32 cache.
#include "eval.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "calloc_lines.h"
#include "finite.h"
#include "forward.h"
#include "sort_doubles.h"
#include "text.h"

// Rows a span's scoring takes side by side: each row's max, sum and KL run in order over the
// vocabulary, one chain each, and the rows' chains overlap (one row's waited on each add).
enum { SIDE = 8 };

// log softmax of n <= SIDE rows of logits (V apart) into out (rows V apart), in double so long sums
// do not drift. The exponentials a row at a time (exp_fixed in the kernel set's vectors: the same bits
// everywhere), each row's max and sum in order of i.
static void log_softmax_rows(const float *logits, int n, size_t V, double *out) {
    float max[SIDE];
    double sum[SIDE] = {0};
    for (int k = 0; k < n; k++) max[k] = logits[(size_t)k * V];
    for (size_t i = 1; i < V; i++)
        for (int k = 0; k < n; k++) {
            const float x = logits[(size_t)k * V + i];
            max[k] = x > max[k] ? x : max[k];
        }
    const ForwardKernels *fk = forward_kernels();
    for (int k = 0; k < n; k++) fk->exp_shifted(out + (size_t)k * V, logits + (size_t)k * V, max[k], (int)V);
    for (size_t i = 0; i < V; i++)
        for (int k = 0; k < n; k++) sum[k] += out[(size_t)k * V + i];
    for (int k = 0; k < n; k++) {
        const float *l = logits + (size_t)k * V;
        const double log_sum = log(sum[k]);
        for (size_t i = 0; i < V; i++) out[(size_t)k * V + i] = (double)l[i] - max[k] - log_sum;
    }
}

// KL(reference || this) of each of n rows, from the reference's log-probabilities rounded to floats
// (ref, rows V apart: a stored trace's, or the fp32 run's beside this one), each row's sum in order of v.
// Its weights, the reference's probabilities, are made here into pref (n rows of V) from those floats,
// the same doubles for every scheme: a trace keeps 4 bytes a step and token, not 12.
static void kl_rows(const float *ref, int n, size_t V, const double *lp, double *pref, double *step) {
    for (int k = 0; k < n; k++) step[k] = 0;
    for (int k = 0; k < n; k++) forward_kernels()->exp_shifted(pref + (size_t)k * V, ref + (size_t)k * V, 0.0f, (int)V);
    for (size_t v = 0; v < V; v++)
        for (int k = 0; k < n; k++)
            step[k] += pref[(size_t)k * V + v] * ((double)ref[(size_t)k * V + v] - (double)(float)lp[(size_t)k * V + v]);
}

int eval_default_window(const ModelConfig *c, int n_specs) {
    const KVLayout l = kv_layout_of(c);
    const double numbers = (double)c->n_layers * ((double)l.n_heads[0] * l.head_dim[0] + (double)l.n_heads[1] * l.head_dim[1]);
    const double per_token = (n_specs + 1.0) * 2.0 * numbers * sizeof(float);
    const double cap = (double)EVAL_WINDOW_BUDGET / per_token;
    return cap >= c->max_seq_len ? c->max_seq_len : cap < 2 ? 2 : (int)cap;
}

int eval_windows_steps(const int32_t *tokens, int n) {
    int steps = 0;
    for (int i = 1; i < n; i++) steps += tokens[i] != tokens[0];
    return steps;
}

static int trace_alloc(EvalTrace *t, const Model *m, int n_tokens, int log_probs) {
    t->steps = n_tokens - 1;
    t->n_layers = m->config.n_layers;
    t->n_heads = m->config.n_heads;
    t->vocab = m->config.vocab_size;
    t->top_position = calloc((size_t)t->steps * t->n_layers * t->n_heads, sizeof(int));
    // Megabytes for a plate's text, each page written once: asked for in 2 MiB pages (calloc_lines.h)
    // rather than faulted in 4 KiB at a time.
    t->log_probs = log_probs ? calloc_lines((size_t)t->steps * t->vocab, sizeof(float)) : NULL;
    t->nll = calloc((size_t)t->steps, sizeof(double));
    if (!t->top_position || (log_probs && !t->log_probs) || !t->nll) {
        eval_trace_free(t);
        return -1;
    }
    return 0;
}

int eval_trace_alloc(EvalTrace *t, const Model *m, int n_tokens) { return trace_alloc(t, m, n_tokens, 1); }
int eval_trace_alloc_nll(EvalTrace *t, const Model *m, int n_tokens) { return trace_alloc(t, m, n_tokens, 0); }

void eval_trace_free(EvalTrace *t) {
    free(t->top_position);
    free(t->log_probs);
    free(t->nll);
    memset(t, 0, sizeof *t);
}

// The 99th percentile (nearest rank: the ceil(0.99·n)-th smallest) and the maximum of x[0..n), n ≥ 1.
static int tail_of(const double *x, int n, double *p99, double *max) {
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s) return -1;
    memcpy(s, x, sizeof(double) * (size_t)n);
    sort_doubles(s, (size_t)n);
    *p99 = s[((long)n * 99 + 99) / 100 - 1];
    *max = s[n - 1];
    free(s);
    return 0;
}

// One cache's run through a text: its decoder and what it scored, step by scored step.
typedef struct {
    Decoder d;
    int ready;         // d was made
    double total, kl;  // sums over the scored steps, in order
    long agree;
    double *nll;       // [scored] each scored step's NLL
    double *kl_step;   // [scored] each scored step's KL(reference || this); compared runs only
} Run;

// What eval_run compares against: the fp32 run beside the others, in lockstep (live: run 0 is
// it, and only its current span's log-probabilities are held), or a stored trace (every step's).
typedef struct {
    int live;
    const EvalTrace *stored;
} Reference;

static void runs_free(Run *runs, int n_runs) {
    for (int r = 0; r < n_runs; r++) {
        if (runs[r].ready) decoder_free(&runs[r].d);
        free(runs[r].nll);
        free(runs[r].kl_step);
    }
    memset(runs, 0, sizeof *runs * (size_t)n_runs);
}

// Runs tokens[0..n) through n_runs decoders side by side, span by span (one token a step with
// `decode`), and scores steps first .. n − 2 of each (step t predicts token t + 1). A run compared
// against ref gets its KL and top-1 agreement from ref's rows of the same steps: with a live
// reference, from run 0's span just computed, so a text's next-token distributions are never all
// held (at Qwen's 152k tokens, a 1,500-token text's take 0.9 GB as floats). Fills runs[r].nll and
// kl_step; run 0's steps go into record when given (every step: first is then 0). The caller frees
// runs (runs_free), also on failure.
static int eval_run(const Model *m, const int32_t *tokens, int n, int first, const CodecSpec *const *k_specs,
                    const CodecSpec *const *v_specs, int n_runs, Reference ref, EvalTrace *record, int n_threads,
                    int decode, Run *runs, char *err, size_t errlen) {
    memset(runs, 0, sizeof *runs * (size_t)n_runs);
    const int vocab = m->config.vocab_size, heads = m->config.n_layers * m->config.n_heads;
    const int scored = n - 1 - first;
    if (n < 2 || scored < 1) {
        snprintf(err, errlen, "need at least one token after BOS to score");
        return -1;
    }
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= vocab) {
            snprintf(err, errlen, "token %d at position %d is outside the model's vocabulary of %d", tokens[t], t, vocab);
            return -1;
        }
    if (ref.stored && ref.stored->steps != n - 1) {
        snprintf(err, errlen, "the reference trace has %d steps, the text %d", ref.stored->steps, n - 1);
        return -1;
    }
    const int span = decode ? 1 : n < EVAL_SPAN ? n : EVAL_SPAN; // a short text's buffers sized by it
    const int compared = ref.live || ref.stored;
    for (int r = 0; r < n_runs; r++) {
        if (decode ? decoder_init(&runs[r].d, m, k_specs[r], v_specs[r], n, n_threads, err, errlen)
                   : decoder_init_spans(&runs[r].d, m, k_specs[r], v_specs[r], n, span, n_threads, err, errlen))
            return -1;
        runs[r].ready = 1;
        runs[r].nll = malloc(sizeof(double) * (size_t)scored);
        runs[r].kl_step = compared ? calloc((size_t)scored, sizeof(double)) : NULL;
        if (!runs[r].nll || (compared && !runs[r].kl_step)) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    const size_t V = (size_t)vocab;
    int *ids = malloc(sizeof(int) * (size_t)n);
    double *lp = malloc(sizeof(double) * SIDE * V); // SIDE rows' log-probabilities
    double *pref = compared ? malloc(sizeof(double) * SIDE * V) : NULL; // the reference's probabilities
    float *span_lp = ref.live ? malloc(sizeof(float) * (size_t)span * V) : NULL; // the live reference's span
    int rc = 0;
    if (!ids || !lp || (compared && !pref) || (ref.live && !span_lp)) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    for (int t = 0; t < n && !rc; t++) ids[t] = tokens[t];
    double steps[SIDE];
    // Every token runs, the last too: its key and value are cached, so the cache's size is that of n.
    for (int t0 = 0; t0 < n && !rc; t0 += span) {
        const int rows = n - t0 < span ? n - t0 : span;
        const int in_span = t0 + rows < n ? rows : n - 1 - t0; // the last token predicts nothing
        for (int r = 0; r < n_runs && !rc; r++) {
            Run *run = &runs[r];
            const int is_ref = ref.live && r == 0;
            const float *logits = span == 1 ? decoder_forward(&run->d, ids[t0], t0)
                                            : decoder_forward_span(&run->d, ids + t0, t0, rows);
            if (!logits) { // not for positions below the decoder's capacity, which these are
                snprintf(err, errlen, "%s", run->d.fwd.err);
                rc = -1;
                break;
            }
            for (int i0 = 0; i0 < in_span; i0 += SIDE) {
                const int side = in_span - i0 < SIDE ? in_span - i0 : SIDE;
                log_softmax_rows(logits + (size_t)i0 * V, side, V, lp);
                // KL(reference || this); when the two runs are the same the terms cancel exactly, so
                // the fp32 cache gets exactly 0.
                if (is_ref)
                    for (size_t j = 0; j < (size_t)side * V; j++) span_lp[(size_t)i0 * V + j] = (float)lp[j];
                else if (compared)
                    kl_rows(ref.stored ? ref.stored->log_probs + (size_t)(t0 + i0) * V : span_lp + (size_t)i0 * V, side,
                            V, lp, pref, steps);
                for (int k = 0; k < side; k++) {
                    const int i = i0 + k, t = t0 + i, s = t - first;
                    const int *top_position = run->d.fwd.top_position + (size_t)i * heads;
                    const double nll = -lp[(size_t)k * V + (size_t)tokens[t + 1]];
                    if (record && r == 0) {
                        record->nll[t] = nll;
                        memcpy(record->top_position + (size_t)t * heads, top_position, sizeof(int) * (size_t)heads);
                        if (record->log_probs)
                            for (size_t v = 0; v < V; v++)
                                record->log_probs[(size_t)t * V + v] = (float)lp[(size_t)k * V + v];
                    }
                    if (s < 0) continue;
                    run->nll[s] = nll;
                    run->total += nll;
                    if (!compared || is_ref) continue;
                    const int *top = ref.stored ? ref.stored->top_position + (size_t)t * heads
                                                : runs[0].d.fwd.top_position + (size_t)i * heads;
                    for (int h = 0; h < heads; h++) run->agree += top[h] == top_position[h];
                    run->kl_step[s] = steps[k];
                    run->kl += steps[k];
                }
            }
        }
    }
    free(ids);
    free(lp);
    free(pref);
    free(span_lp);
    return rc;
}

// A run's results over its scored steps: the means, KL's tail and the interval of the increase over
// ref_nll (NULL: the reference itself, or no reference).
static int run_result(const Run *run, int n, int scored, int heads, const double *ref_nll, EvalResult *out, char *err,
                      size_t errlen) {
    memset(out, 0, sizeof *out);
    out->tokens = n;
    out->loss = run->total / scored;
    out->top1_agree = ref_nll ? (double)run->agree / ((double)scored * heads) : 1.0;
    out->kl = ref_nll ? run->kl / scored : 0.0;
    if (!isfinite(out->loss) || !isfinite(out->kl)) {
        snprintf(err, errlen, "the loss is " NONFINITE_REASON);
        return EVAL_NOT_FINITE;
    }
    out->cache_bytes = decoder_cache_bytes(&run->d);
    out->bits_per_element = decoder_bits_per_element(&run->d);
    snprintf(out->k_spec, sizeof out->k_spec, "%s", decoder_spec(&run->d, KV_ROLE_KEY));
    snprintf(out->v_spec, sizeof out->v_spec, "%s", decoder_spec(&run->d, KV_ROLE_VALUE));
    if (!ref_nll) return 0;
    double *diff = malloc(sizeof(double) * (size_t)scored);
    int rc = !diff || tail_of(run->kl_step, scored, &out->kl_p99, &out->kl_max);
    for (int s = 0; !rc && s < scored; s++) diff[s] = run->nll[s] - ref_nll[s];
    if (!rc) rc = bootstrap_mean_ci(diff, scored, BOOTSTRAP_BLOCK, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, &out->delta_lo,
                                    &out->delta_hi);
    free(diff);
    if (rc) snprintf(err, errlen, "out of memory");
    return rc ? -1 : 0;
}

int eval_tokens(const Model *m, const int32_t *tokens, int n, const CodecSpec *k_spec, const CodecSpec *v_spec,
                int n_threads, int decode, EvalTrace *record, const EvalTrace *reference, EvalResult *out, char *err,
                size_t errlen) {
    memset(out, 0, sizeof *out);
    Run run;
    int rc = eval_run(m, tokens, n, 0, &k_spec, &v_spec, 1, (Reference){.stored = reference}, record, n_threads, decode,
                      &run, err, errlen);
    if (!rc)
        rc = run_result(&run, n, n - 1, m->config.n_layers * m->config.n_heads, reference ? reference->nll : NULL, out,
                        err, errlen);
    runs_free(&run, 1);
    return rc;
}

// The pieces of a text eval_pieces runs: windows (every token predicted once) or llama-perplexity's chunks.
typedef struct {
    int len;         // tokens per piece, its first included
    int second_half; // chunks of len tokens, each's first token BOS (when the model has one), the
                     // second half's predictions scored
} Pieces;

// The text's windows or chunks, each run from its own start through fp32 and each of the n_specs
// schemes side by side (eval_run, a live reference); the means, KL's tail and the intervals are over
// every scored step of every piece.
static int eval_pieces(const Model *m, const int32_t *tokens, int n, Pieces pc, const CodecSpec *const *k_specs,
                       const CodecSpec *const *v_specs, int n_specs, int threads, int decode, EvalResult *ref,
                       EvalResult *out, double *nll, char *err, size_t errlen) {
    const int n_runs = n_specs + 1, heads = m->config.n_layers * m->config.n_heads;
    const int per = pc.len - 1;
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)pc.len);
    const CodecSpec **k = malloc(sizeof *k * (size_t)n_runs), **v = malloc(sizeof *v * (size_t)n_runs);
    Run *runs = calloc((size_t)n_runs, sizeof *runs);
    // Every scored step's NLL (row 0 fp32's, then each scheme's) and KL, in text order.
    double *nlls = malloc(sizeof(double) * (size_t)n * (size_t)n_runs);
    double *kls = malloc(sizeof(double) * (size_t)n * (size_t)n_specs + 1);
    double *sums = calloc((size_t)n_specs * 3 + 1, sizeof(double)); // [spec][nll, agree, kl], then fp32's nll
    if (!buf || !k || !v || !runs || !nlls || !kls || !sums) {
        free(buf), free(k), free(v), free(runs), free(nlls), free(kls), free(sums);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    k[0] = v[0] = &codec_spec_fp32;
    for (int s = 0; s < n_specs; s++) k[1 + s] = k_specs[s], v[1 + s] = v_specs[s];
    int steps = 0, windows = 0, rc = 0, tokens_run = 0;
    const int has_bos = m->bos >= 0;
    EvalResult *res = malloc(sizeof *res * (size_t)n_runs);
    if (!res) rc = -1, snprintf(err, errlen, "out of memory");
    for (int doc = 0; doc < n && !rc;) { // tokens[doc] is a document's BOS, or the text's first token
        int end = doc + 1;
        while (has_bos && !pc.second_half && end < n && tokens[end] != tokens[0]) end++;
        if (!has_bos || pc.second_half) end = n;
        // A window: the document's BOS (or the token before its first predicted one) and the next
        // per tokens. A chunk: the next len tokens of the text, its first made BOS.
        for (int start = pc.second_half ? 0 : doc + 1; start < end && !rc; start += pc.second_half ? pc.len : per) {
            int wn, first = 0;
            if (pc.second_half) {
                if (end - start < pc.len) break; // llama-perplexity leaves the rest out
                wn = pc.len, first = pc.len / 2;
                memcpy(buf, tokens + start, sizeof(int32_t) * (size_t)wn);
                if (has_bos) buf[0] = m->bos;
            } else {
                const int len = end - start < per ? end - start : per;
                wn = len + 1;
                buf[0] = has_bos ? tokens[0] : tokens[start - 1];
                memcpy(buf + 1, tokens + start, sizeof(int32_t) * (size_t)len);
            }
            const int scored = wn - 1 - first;
            rc = eval_run(m, buf, wn, first, k, v, n_runs, (Reference){.live = 1}, NULL, threads, decode, runs, err,
                          errlen);
            for (int r = 0; r < n_runs && !rc; r++)
                rc = run_result(&runs[r], wn, scored, heads, r ? runs[0].nll : NULL, &res[r], err, errlen);
            if (!rc) {
                for (int r = 0; r < n_runs; r++) memcpy(nlls + (size_t)r * n + steps, runs[r].nll, sizeof(double) * (size_t)scored);
                for (int s = 0; s < n_specs; s++)
                    memcpy(kls + (size_t)s * n + steps, runs[1 + s].kl_step, sizeof(double) * (size_t)scored);
                if (windows == 0) { // the cache's bytes and specs: the first piece's
                    *ref = res[0];
                    for (int s = 0; s < n_specs; s++) out[s] = res[1 + s];
                }
                sums[3 * n_specs] += res[0].loss * scored;
                for (int s = 0; s < n_specs; s++) {
                    sums[3 * s] += res[1 + s].loss * scored, sums[3 * s + 1] += res[1 + s].top1_agree * scored;
                    sums[3 * s + 2] += res[1 + s].kl * scored;
                }
                steps += scored, tokens_run += wn, windows++;
            }
            runs_free(runs, n_runs);
        }
        doc = end;
    }
    if (!rc && windows == 0) {
        if (pc.second_half)
            snprintf(err, errlen, "the text has %d tokens, fewer than one chunk of %d (--score second-half:N takes a smaller N)",
                     n, pc.len);
        else
            snprintf(err, errlen, has_bos ? "need at least one byte after BOS to score" : "need at least two tokens to score");
        rc = -1;
    }
    for (int r = 0; nll && !rc && r < n_runs; r++) memcpy(nll + (size_t)r * n, nlls + (size_t)r * n, sizeof(double) * (size_t)steps);
    if (!rc && windows > 1) {
        ref->tokens = tokens_run; // each window starts from its own BOS (or the token before it)
        ref->loss = sums[3 * n_specs] / steps;
        for (int s = 0; s < n_specs && !rc; s++) {
            out[s].tokens = tokens_run;
            out[s].loss = sums[3 * s] / steps, out[s].top1_agree = sums[3 * s + 1] / steps;
            out[s].kl = sums[3 * s + 2] / steps;
            double *diff = nlls + (size_t)(1 + s) * n; // the scheme's NLLs, made its increases in place
            for (int t = 0; t < steps; t++) diff[t] -= nlls[t];
            if (tail_of(kls + (size_t)s * n, steps, &out[s].kl_p99, &out[s].kl_max) ||
                bootstrap_mean_ci(diff, steps, BOOTSTRAP_BLOCK, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, &out[s].delta_lo,
                                  &out[s].delta_hi)) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
            }
        }
    }
    free(res), free(buf), free(k), free(v), free(runs), free(nlls), free(kls), free(sums);
    return rc;
}

// A text of any length (tokens[0] is BOS; a 0x01 further on starts another document, as in the
// corpus's files): each document in consecutive windows of `window` tokens, each its BOS and the
// next window − 1 bytes, run from BOS with the fp32 cache and each scheme side by side. Every byte
// is predicted once; the loss, top-1 agreement and KL are means over all of them and the interval
// comes from all their differences. The cache's bytes are those of the first window. A text that
// fits one window gives exactly eval_tokens' results. Under a vocabulary without BOS (m->bos < 0:
// Qwen's) the text is one document and a window starts from the token before its first predicted
// one, so that every token but the text's first is still predicted once.
int eval_windows(const Model *m, const int32_t *tokens, int n, int window, const CodecSpec *const *k_specs,
                 const CodecSpec *const *v_specs, int n_specs, int threads, int decode, EvalResult *ref, EvalResult *out,
                 double *nll, char *err, size_t errlen) {
    return eval_pieces(m, tokens, n, (Pieces){.len = window}, k_specs, v_specs, n_specs, threads, decode, ref, out, nll,
                       err, errlen);
}

int eval_second_half(const Model *m, const int32_t *tokens, int n, int chunk, const CodecSpec *const *k_specs,
                     const CodecSpec *const *v_specs, int n_specs, int threads, int decode, EvalResult *ref,
                     EvalResult *out, char *err, size_t errlen) {
    if (chunk < 4) {
        snprintf(err, errlen, "a chunk of %d tokens has no second half to score (at least 4)", chunk);
        return -1;
    }
    return eval_pieces(m, tokens, n, (Pieces){.len = chunk, .second_half = 1}, k_specs, v_specs, n_specs, threads,
                       decode, ref, out, NULL, err, errlen);
}
