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

// KL(reference || this) of each of n rows (steps t0 .. t0 + n − 1), from the reference's stored
// log-probabilities, each row's sum in order of v. Its weights, the reference's probabilities, are
// made here into pref (n rows of V) from the stored floats, the same doubles for every scheme: the
// trace keeps 4 bytes a step and token, not 12 (at Qwen's 152k tokens a plate's 1,500 steps take
// 0.9 GB, not 2.7).
static void kl_rows(const EvalTrace *reference, int t0, int n, size_t V, const double *lp, double *pref, double *step) {
    for (int k = 0; k < n; k++) step[k] = 0;
    const float *ref = reference->log_probs + (size_t)t0 * V;
    for (int k = 0; k < n; k++) forward_kernels()->exp_shifted(pref + (size_t)k * V, ref + (size_t)k * V, 0.0f, (int)V);
    for (size_t v = 0; v < V; v++)
        for (int k = 0; k < n; k++)
            step[k] += pref[(size_t)k * V + v] * ((double)ref[(size_t)k * V + v] - (double)(float)lp[(size_t)k * V + v]);
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

int eval_tokens(const Model *m, const int32_t *tokens, int n, const CodecSpec *k_spec, const CodecSpec *v_spec,
                int n_threads, int decode, EvalTrace *record, const EvalTrace *reference, EvalResult *out, char *err,
                size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n < 2) {
        snprintf(err, errlen, "need at least one token after BOS to score");
        return -1;
    }
    const int vocab = m->config.vocab_size, heads = m->config.n_layers * m->config.n_heads;
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= vocab) {
            snprintf(err, errlen, "token %d at position %d is outside the model's vocabulary of %d", tokens[t], t, vocab);
            return -1;
        }
    if (reference && reference->steps != n - 1) {
        snprintf(err, errlen, "the reference trace has %d steps, the text %d", reference->steps, n - 1);
        return -1;
    }
    Decoder d;
    const int span = decode ? 1 : n < EVAL_SPAN ? n : EVAL_SPAN; // a short text's buffers sized by it
    if (decode ? decoder_init(&d, m, k_spec, v_spec, n, n_threads, err, errlen)
               : decoder_init_spans(&d, m, k_spec, v_spec, n, span, n_threads, err, errlen))
        return -1;
    double *diff = reference ? malloc(sizeof(double) * (size_t)(n - 1)) : NULL;
    int *ids = malloc(sizeof(int) * (size_t)n);
    double *lp = malloc(sizeof(double) * SIDE * (size_t)vocab); // SIDE rows' log-probabilities
    double *pref = reference ? malloc(sizeof(double) * SIDE * (size_t)vocab) : NULL; // the reference's probabilities
    if ((reference && (!diff || !pref)) || !ids || !lp) {
        decoder_free(&d);
        free(diff);
        free(ids);
        free(lp);
        free(pref);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int t = 0; t < n; t++) ids[t] = tokens[t];
    double total = 0, kl = 0, steps[SIDE];
    const size_t V = (size_t)vocab;
    long agree = 0;
    // Every token runs, the last too: its key and value are cached, so the cache's size is that of n.
    for (int t0 = 0; t0 < n; t0 += span) {
        const int rows = n - t0 < span ? n - t0 : span;
        const float *logits = span == 1 ? decoder_forward(&d, ids[t0], t0) : decoder_forward_span(&d, ids + t0, t0, rows);
        if (!logits) { // not for positions below the decoder's capacity, which these are
            snprintf(err, errlen, "%s", d.fwd.err);
            decoder_free(&d);
            free(diff);
            free(ids);
            free(lp);
            free(pref);
            return -1;
        }
        const int scored = t0 + rows < n ? rows : n - 1 - t0; // the last token predicts nothing
        for (int i0 = 0; i0 < scored; i0 += SIDE) {
            const int side = scored - i0 < SIDE ? scored - i0 : SIDE;
            log_softmax_rows(logits + (size_t)i0 * V, side, V, lp);
            // KL(reference || this), from the reference's stored log-probabilities; when the two
            // runs are the same the terms cancel exactly, so the fp32 cache gets exactly 0.
            if (reference) kl_rows(reference, t0 + i0, side, V, lp, pref, steps);
            for (int k = 0; k < side; k++) {
                const int i = i0 + k, t = t0 + i;
                const int *top_position = d.fwd.top_position + (size_t)i * heads;
                const double *lpk = lp + (size_t)k * V;
                total -= lpk[tokens[t + 1]];
                if (record) record->nll[t] = -lpk[tokens[t + 1]];
                if (reference) diff[t] = -lpk[tokens[t + 1]] - reference->nll[t];
                if (record) memcpy(record->top_position + (size_t)t * heads, top_position, sizeof(int) * (size_t)heads);
                if (record && record->log_probs) {
                    float *lt = record->log_probs + (size_t)t * vocab;
                    for (size_t v = 0; v < V; v++) lt[v] = (float)lpk[v];
                }
                if (reference) {
                    const int *top = reference->top_position + (size_t)t * heads;
                    for (int h = 0; h < heads; h++) agree += top[h] == top_position[h];
                    kl += steps[k];
                }
            }
        }
    }
    free(ids);
    free(lp);
    free(pref);
    out->tokens = n;
    out->loss = total / (n - 1);
    out->top1_agree = reference ? (double)agree / ((double)(n - 1) * heads) : 1.0;
    out->kl = reference ? kl / (n - 1) : 0.0;
    if (!isfinite(out->loss) || !isfinite(out->kl)) {
        snprintf(err, errlen, "the loss is " NONFINITE_REASON);
        decoder_free(&d);
        free(diff);
        return EVAL_NOT_FINITE;
    }
    if (reference && bootstrap_mean_ci(diff, n - 1, BOOTSTRAP_BLOCK, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED,
                                       &out->delta_lo, &out->delta_hi)) {
        snprintf(err, errlen, "out of memory");
        decoder_free(&d);
        free(diff);
        return -1;
    }
    free(diff);
    out->cache_bytes = decoder_cache_bytes(&d);
    out->bits_per_element = decoder_bits_per_element(&d);
    snprintf(out->k_spec, sizeof out->k_spec, "%s", decoder_spec(&d, KV_ROLE_KEY));
    snprintf(out->v_spec, sizeof out->v_spec, "%s", decoder_spec(&d, KV_ROLE_VALUE));
    decoder_free(&d);
    return 0;
}

// A text of any length (tokens[0] is BOS; a 0x01 further on starts another document, as in the
// corpus's files): each document in consecutive windows of `window` tokens, each its BOS and the
// next window − 1 bytes, run from BOS with the fp32 cache once and then with each scheme. Every byte
// is predicted once; the loss, top-1 agreement and KL are means over all of them and the interval
// comes from all their differences. The cache's bytes are those of the first window. A text that
// fits one window gives exactly eval_tokens' results. Under a vocabulary without BOS (m->bos < 0:
// Qwen's) the text is one document and a window starts from the token before its first predicted
// one, so that every token but the text's first is still predicted once.
int eval_windows(const Model *m, const int32_t *tokens, int n, int window, const CodecSpec *const *k_specs,
                 const CodecSpec *const *v_specs, int n_specs, int threads, int decode, EvalResult *ref, EvalResult *out,
                 double *nll, char *err, size_t errlen) {
    const int per = window - 1;
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)window);
    double *diff = malloc(sizeof(double) * (size_t)n * (size_t)n_specs);
    double *sums = calloc((size_t)n_specs * 3 + 1, sizeof(double)); // [spec][nll, agree, kl], then fp32's nll
    if (!buf || !diff || !sums) {
        free(buf), free(diff), free(sums);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int steps = 0, windows = 0, rc = 0, tokens_run = 0;
    const int has_bos = m->bos >= 0;
    for (int doc = 0; doc < n && !rc;) { // tokens[doc] is a document's BOS, or the text's first token
        int end = doc + 1;
        while (has_bos && end < n && tokens[end] != tokens[0]) end++;
        if (!has_bos) end = n;
        for (int start = doc + 1; start < end && !rc; start += per) {
            const int len = end - start < per ? end - start : per, wn = len + 1;
            buf[0] = has_bos ? tokens[0] : tokens[start - 1];
            memcpy(buf + 1, tokens + start, sizeof(int32_t) * (size_t)len);
            EvalTrace tr = {0}, ts = {0};
            EvalResult r_ref, r;
            if (eval_trace_alloc(&tr, m, wn) || eval_trace_alloc_nll(&ts, m, wn)) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
            }
            if (!rc) rc = eval_tokens(m, buf, wn, &codec_spec_fp32, &codec_spec_fp32, threads, decode, &tr, NULL, &r_ref, err, errlen);
            if (!rc) sums[3 * n_specs] += r_ref.loss * (wn - 1);
            for (int t = 0; !rc && nll && t < wn - 1; t++) nll[steps + t] = tr.nll[t];
            if (!rc && windows == 0) *ref = r_ref;
            for (int s = 0; s < n_specs && !rc; s++) {
                rc = eval_tokens(m, buf, wn, k_specs[s], v_specs[s], threads, decode, &ts, &tr, &r, err, errlen);
                if (rc) break;
                for (int t = 0; t < wn - 1; t++) diff[(size_t)s * n + steps + t] = ts.nll[t] - tr.nll[t];
                for (int t = 0; nll && t < wn - 1; t++) nll[(size_t)(s + 1) * n + steps + t] = ts.nll[t];
                if (windows == 0) out[s] = r; // the cache's bytes and specs: the first window's
                sums[3 * s] += r.loss * (wn - 1), sums[3 * s + 1] += r.top1_agree * (wn - 1);
                sums[3 * s + 2] += r.kl * (wn - 1);
            }
            if (!rc) steps += wn - 1, tokens_run += wn, windows++;
            eval_trace_free(&tr);
            eval_trace_free(&ts);
        }
        doc = end;
    }
    if (!rc && windows == 0) {
        snprintf(err, errlen, has_bos ? "need at least one byte after BOS to score" : "need at least two tokens to score");
        rc = -1;
    }
    if (!rc && windows > 1) {
        ref->tokens = tokens_run; // each window starts from its own BOS (or the token before it)
        ref->loss = sums[3 * n_specs] / steps;
        for (int s = 0; s < n_specs && !rc; s++) {
            out[s].tokens = tokens_run;
            out[s].loss = sums[3 * s] / steps, out[s].top1_agree = sums[3 * s + 1] / steps;
            out[s].kl = sums[3 * s + 2] / steps;
            if (bootstrap_mean_ci(diff + (size_t)s * n, steps, BOOTSTRAP_BLOCK, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED,
                                  &out[s].delta_lo, &out[s].delta_hi)) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
            }
        }
    }
    free(buf);
    free(diff);
    free(sums);
    return rc;
}
