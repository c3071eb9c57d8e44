// micro eval: loss in nats per token on each text, with the chosen cache, against the fp32 cache.
#include "eval.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "cli.h"
#include "cmd_options.h"
#include "commands.h"
#include "finite.h"
#include "forward.h"
#include "model_file.h"
#include "text.h"

// log softmax(logits) into out, in double so long sums do not drift.
static void log_softmax(const float *logits, int vocab, double *out) {
    float max = logits[0];
    for (int i = 1; i < vocab; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - max);
    double log_sum = log(sum);
    for (int i = 0; i < vocab; i++) out[i] = (double)logits[i] - max - log_sum;
}

int eval_trace_alloc(EvalTrace *t, const Model *m, int n_tokens) {
    t->steps = n_tokens - 1;
    t->n_layers = m->config.n_layers;
    t->n_heads = m->config.n_heads;
    t->vocab = m->config.vocab_size;
    t->top_position = calloc((size_t)t->steps * t->n_layers * t->n_heads, sizeof(int));
    t->log_probs = calloc((size_t)t->steps * t->vocab, sizeof(float));
    t->nll = calloc((size_t)t->steps, sizeof(double));
    if (!t->top_position || !t->log_probs || !t->nll) {
        eval_trace_free(t);
        return -1;
    }
    return 0;
}

void eval_trace_free(EvalTrace *t) {
    free(t->top_position);
    free(t->log_probs);
    free(t->nll);
    memset(t, 0, sizeof *t);
}

int eval_tokens(const Model *m, const uint8_t *tokens, int n, const char *k_spec, const char *v_spec,
                int n_threads, int decode, EvalTrace *record, const EvalTrace *reference, EvalResult *out, char *err,
                size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n < 2) {
        snprintf(err, errlen, "need at least one token after BOS to score");
        return -1;
    }
    const int vocab = m->config.vocab_size, heads = m->config.n_layers * m->config.n_heads;
    if (reference && reference->steps != n - 1) {
        snprintf(err, errlen, "the reference trace has %d steps, the text %d", reference->steps, n - 1);
        return -1;
    }
    Decoder d;
    const int span = decode ? 1 : EVAL_SPAN;
    if (decode ? decoder_init(&d, m, k_spec, v_spec, n, n_threads, err, errlen)
               : decoder_init_spans(&d, m, k_spec, v_spec, n, span, n_threads, err, errlen))
        return -1;
    double *diff = reference ? malloc(sizeof(double) * (size_t)(n - 1)) : NULL;
    int *ids = malloc(sizeof(int) * (size_t)n);
    if ((reference && !diff) || !ids) {
        decoder_free(&d);
        free(diff);
        free(ids);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int t = 0; t < n; t++) ids[t] = tokens[t];
    double total = 0, kl = 0, lp[256];
    long agree = 0;
    // Every token runs, the last too: its key and value are cached, so the cache's size is that of n.
    for (int t0 = 0; t0 < n; t0 += span) {
        const int rows = n - t0 < span ? n - t0 : span;
        const float *logits = span == 1 ? decoder_forward(&d, ids[t0], t0) : decoder_forward_span(&d, ids + t0, t0, rows);
        for (int i = 0; i < rows && t0 + i + 1 < n; i++) {
            const int t = t0 + i;
            const int *top_position = d.fwd.top_position + (size_t)i * heads;
            log_softmax(logits + (size_t)i * vocab, vocab, lp);
            total -= lp[tokens[t + 1]];
            if (record) record->nll[t] = -lp[tokens[t + 1]];
            if (reference) diff[t] = -lp[tokens[t + 1]] - reference->nll[t];
            if (record) {
                memcpy(record->top_position + (size_t)t * heads, top_position, sizeof(int) * (size_t)heads);
                for (int v = 0; v < vocab; v++) record->log_probs[(size_t)t * vocab + v] = (float)lp[v];
            }
            if (reference) {
                const int *top = reference->top_position + (size_t)t * heads;
                for (int h = 0; h < heads; h++) agree += top[h] == top_position[h];
                // KL(reference || this), from the reference's stored log-probabilities; when the two
                // runs are the same the terms cancel exactly, so the fp32 cache gets exactly 0.
                const float *ref = reference->log_probs + (size_t)t * vocab;
                double step = 0;
                for (int v = 0; v < vocab; v++) step += exp((double)ref[v]) * ((double)ref[v] - (double)(float)lp[v]);
                kl += step;
            }
        }
    }
    free(ids);
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
// fits one window gives exactly eval_tokens' results.
int eval_windows(const Model *m, const uint8_t *tokens, int n, int window, const char *const *k_specs,
                 const char *const *v_specs, int n_specs, int threads, int decode, EvalResult *ref, EvalResult *out,
                 char *err, size_t errlen) {
    const int per = window - 1;
    uint8_t *buf = malloc((size_t)window);
    double *diff = malloc(sizeof(double) * (size_t)n * (size_t)n_specs);
    double *sums = calloc((size_t)n_specs * 3 + 1, sizeof(double)); // [spec][nll, agree, kl], then fp32's nll
    if (!buf || !diff || !sums) {
        free(buf), free(diff), free(sums);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int steps = 0, windows = 0, rc = 0, tokens_run = 0;
    for (int doc = 0; doc < n && !rc;) { // tokens[doc] is a document's BOS
        int end = doc + 1;
        while (end < n && tokens[end] != tokens[0]) end++;
        for (int start = doc + 1; start < end && !rc; start += per) {
            const int len = end - start < per ? end - start : per, wn = len + 1;
            buf[0] = tokens[0];
            memcpy(buf + 1, tokens + start, (size_t)len);
            EvalTrace tr = {0}, ts = {0};
            EvalResult r_ref, r;
            if (eval_trace_alloc(&tr, m, wn) || eval_trace_alloc(&ts, m, wn)) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
            }
            if (!rc) rc = eval_tokens(m, buf, wn, "fp32", "fp32", threads, decode, &tr, NULL, &r_ref, err, errlen);
            if (!rc) sums[3 * n_specs] += r_ref.loss * (wn - 1);
            if (!rc && windows == 0) *ref = r_ref;
            for (int s = 0; s < n_specs && !rc; s++) {
                rc = eval_tokens(m, buf, wn, k_specs[s], v_specs[s], threads, decode, &ts, &tr, &r, err, errlen);
                if (rc) break;
                for (int t = 0; t < wn - 1; t++) diff[(size_t)s * n + steps + t] = ts.nll[t] - tr.nll[t];
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
        snprintf(err, errlen, "need at least one byte after BOS to score");
        rc = -1;
    }
    if (!rc && windows > 1) {
        ref->tokens = tokens_run; // each window starts from its own BOS
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

static const char *eval_usage =
    "usage: micro eval [options]\n"
    "  Mean negative log-likelihood (nats per predicted token) of each text, run from BOS through the\n"
    "  chosen KV cache, and its increase (delta) over the fp32 cache. Positions go through the weights\n"
    "  64 at a time, each token's key and value encoded into the cache as decoding would, each position\n"
    "  attending to what the cache held at its step (equal to decoding up to float rounding).\n"
    "options:\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --calib FILE        kvquant's calibration (default beside the model: models/micro.kvq)\n"
    "  --text FILE[:CHARS] a text to score, cut after CHARS UTF-8 characters; repeatable\n"
    "                      (default data/plates/en.txt:1500 and data/plates/zh.txt:500)\n"
    "  --cache SPEC        codec for keys and values (default fp32); see `micro --help` for specs\n"
    "  --k SPEC, --v SPEC  codec for keys / values alone (override --cache)\n"
    "  --window N          a text longer than N tokens (BOS included) is cut into consecutive windows\n"
    "                      of N - 1 bytes, each decoded from BOS; every byte is predicted once and the\n"
    "                      loss is the mean over all of them (default and at most the model's context).\n"
    "                      A file in the corpus's form (documents each after a 0x01 byte, as\n"
    "                      data/corpus/en.val.txt) is windowed document by document\n"
    "  --decode            decode token by token instead (as a server does; slower)\n"
    "  --threads N         decode threads, 1..256 (default 1; at most the online cores are used);\n"
    "                      results do not depend on it\n"
    "  --csv               print CSV: text,k_cache,v_cache,tokens,loss,delta,bits_per_element,cache_bytes,\n"
    "                      top1_agree,kl,delta_lo,delta_hi (top1_agree: share of (layer, head, position)\n"
    "                      whose most-attended position matches the fp32 cache's; kl: mean KL(fp32 || this)\n"
    "                      of next-token distributions, nats; delta_lo/hi: the increase's 95% interval, a\n"
    "                      paired bootstrap over blocks of 64 tokens, 2000 resamples, seeded)\n"
    "  -h, --help          this help\n";

int eval_parse(int argc, char **argv, EvalOptions *o, char *err, size_t errlen) {
    const char *cache = "fp32";
    memset(o, 0, sizeof *o);
    o->threads = 1;
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--csv")) bad = opts_flag(&p), o->csv = 1;
        else if (opts_is(&p, "--text")) bad = cmd_text_option(&p, o->texts, &o->n_texts, EVAL_MAX_TEXTS);
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--calib")) bad = opts_path(&p, &o->calib_path);
        else if (opts_is(&p, "--cache")) bad = opts_string(&p, &cache);
        else if (opts_is(&p, "--k")) bad = opts_string(&p, &o->k_spec);
        else if (opts_is(&p, "--v")) bad = opts_string(&p, &o->v_spec);
        else if (opts_is(&p, "--threads")) bad = opts_int(&p, 1, 256, &o->threads);
        else if (opts_is(&p, "--window")) bad = opts_int(&p, 2, 1 << 20, &o->window);
        else if (opts_is(&p, "--decode")) bad = opts_flag(&p), o->decode = 1;
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (!o->k_spec) o->k_spec = cache;
    if (!o->v_spec) o->v_spec = cache;
    return cmd_check_specs(o->k_spec, o->v_spec, err, errlen) ? OPTS_ERROR : OPTS_RUN;
}

int cmd_eval(int argc, char **argv) {
    EvalOptions o;
    char err[512], path[4096];
    int done = cli_after_parse(eval_parse(argc, argv, &o, err, sizeof err), err, eval_usage);
    if (done >= 0) return done;
    const char *model_path = o.model_path, *k_spec = o.k_spec, *v_spec = o.v_spec, **texts = o.texts;
    int n_texts = o.n_texts, threads = o.threads, csv = o.csv;
    char default_en[4200], default_zh[4200];
    if (n_texts == 0) {
        snprintf(default_en, sizeof default_en, "%s:1500", cli_default_path(NULL, "data/plates/en.txt", path, sizeof path));
        snprintf(default_zh, sizeof default_zh, "%s:500", cli_default_path(NULL, "data/plates/zh.txt", path, sizeof path));
        texts[n_texts++] = default_en;
        texts[n_texts++] = default_zh;
    }
    Text *loaded = calloc((size_t)n_texts, sizeof *loaded);
    if (!loaded) return cli_error("out of memory");
    int status = 0;
    for (int i = 0; i < n_texts && !status; i++)
        if (text_load(&loaded[i], texts[i], INT_MAX, err, sizeof err)) status = cli_error("%s", err);
    Model m = {0};
    if (!status && cli_load_model(&m, model_path, o.calib_path, err, sizeof err))
        status = cli_error("%s", err);
    if (!status && cmd_check_specs_for_model(&m, k_spec, v_spec, err, sizeof err)) status = cli_error("%s", err);
    int window = o.window ? o.window : m.config.max_seq_len;
    if (!status && window > m.config.max_seq_len)
        status = cli_error("--window %d is longer than the model's context of %d tokens", window, m.config.max_seq_len);
    if (!status && csv)
        printf("text,k_cache,v_cache,tokens,loss,delta,bits_per_element,cache_bytes,top1_agree,kl,delta_lo,delta_hi\n");
    if (!status && !csv)
        printf("%-6s %-34s %-34s %6s %8s %9s %-19s %6s %9s %6s %9s\n", "text", "k_cache", "v_cache", "tokens", "loss",
               "delta", "95% interval", "bits", "bytes", "top1", "kl");
    for (int i = 0; i < n_texts && !status; i++) {
        EvalResult ref = {0}, r = {0};
        int failed = eval_windows(&m, loaded[i].tokens, loaded[i].n_tokens, window, &k_spec, &v_spec, 1, threads,
                                  o.decode, &ref, &r, err, sizeof err);
        if (failed) {
            cli_error("%s: %s", loaded[i].path, err);
            status = failed == EVAL_NOT_FINITE ? 1 : 2; // overflow is the run's failure, not the user's input
            break;
        }
        double delta = r.loss - ref.loss;
        if (csv) {
            csv_field(loaded[i].name);
            putchar(',');
            csv_field(r.k_spec);
            putchar(',');
            csv_field(r.v_spec);
            printf(",%d,%.6f,%.6f,%.4f,%zu,%.6f,%.6g,%.6f,%.6f\n", r.tokens, r.loss, delta, r.bits_per_element,
                   r.cache_bytes, r.top1_agree, r.kl, r.delta_lo, r.delta_hi);
        } else {
            char interval[40];
            snprintf(interval, sizeof interval, "[%+.4f, %+.4f]", r.delta_lo, r.delta_hi);
            printf("%-6s %-34s %-34s %6d %8.4f %+9.4f %-19s %6.2f %9zu %6.4f %9.2e\n", loaded[i].name, r.k_spec,
                   r.v_spec, r.tokens, r.loss, delta, interval, r.bits_per_element, r.cache_bytes, r.top1_agree, r.kl);
        }
    }
    for (int i = 0; i < n_texts; i++) text_free(&loaded[i]);
    free(loaded);
    model_free(&m);
    return status;
}
