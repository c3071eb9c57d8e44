// Held-out loss through the decode loop: the evaluator.
#ifndef MICRO_EVAL_H
#define MICRO_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"
#include "model.h"

// What the fp32-cache run saw at every step, for comparing a quantised cache against it.
typedef struct {
    int steps, n_layers, n_heads, vocab;
    int *top_position; // [steps, n_layers, n_heads] most-attended position
    float *log_probs;  // [steps, vocab] next-token log-probabilities; NULL: a trace of the NLLs alone
    double *nll;       // [steps] the NLL of each next token (the paired bootstrap's reference)
} EvalTrace;

typedef struct {
    int tokens;              // tokens run through the decoder (BOS included)
    double loss;             // mean NLL, nats per predicted token
    double bits_per_element; // cache storage bits per cached number, metadata included, at the end
    size_t cache_bytes;      // exact bytes the cache holds at the end
    double top1_agree;       // share of (layer, head, step) whose most-attended position matches the reference
    double kl;               // mean KL(reference || this) of the next-token distributions, nats
    double kl_p99, kl_max;   // its 99th percentile (nearest rank) and maximum over the scored steps; 0 without a reference
    double delta_lo, delta_hi; // 95% interval of the increase over the reference (bootstrap.h); 0 without one
    char k_spec[96], v_spec[96]; // the specs as normalised
} EvalResult;

// eval_tokens' status when the loss (or KL) came out NaN or infinite: a runtime failure (exit 1),
// where its other errors (-1) are about the input.
#define EVAL_NOT_FINITE (-2)

// The fast evaluator's span: positions pushed through the forward together (forward.h).
#define EVAL_SPAN 64

// Runs tokens[0..n) from BOS through a decoder with the given cache and scores every next token:
// in spans of EVAL_SPAN positions (the fast evaluator), or with `decode` token by token, as a
// server decodes. The two give the same bits (tests/test_eval_fast.c).
// With `record`, fills it (eval_trace_alloc first); with `reference`, compares every step against it
// (top1_agree, kl; both left at 1 and 0 without one).
int eval_tokens(const Model *m, const int32_t *tokens, int n, const CodecSpec *k_spec, const CodecSpec *v_spec,
                int n_threads, int decode, EvalTrace *record, const EvalTrace *reference, EvalResult *out, char *err,
                size_t errlen);
// A text of any length (tokens[0] is BOS; each further BOS starts a document, as the corpus's files):
// each document in consecutive windows of `window` tokens, each run from its own BOS through fp32
// (into *ref) and each of the n_specs schemes (into out[s]); every byte is predicted once, the means
// and the interval are over all of them. One window: exactly eval_tokens' results. The schemes run
// beside the fp32 run span by span, so only a span's next-token distributions are held at a time. A model whose
// vocabulary has no BOS (m->bos < 0): one document, each window from the token before it. With `nll`
// (n_specs + 1 rows of n), each predicted byte's NLL in text order: row 0 fp32's, row 1 + s scheme
// s's (eval_windows_steps of them per row), for pairing runs on the same bytes.
int eval_windows(const Model *m, const int32_t *tokens, int n, int window, const CodecSpec *const *k_specs,
                 const CodecSpec *const *v_specs, int n_specs, int threads, int decode, EvalResult *ref, EvalResult *out,
                 double *nll, char *err, size_t errlen);
// llama-perplexity's scoring: the text (tokens[0] its BOS when the model has one) cut into chunks of
// `chunk` tokens, the rest left out; each chunk run from the start with its first token made BOS (when
// the model has one), and its second half's predictions scored: steps chunk/2 .. chunk − 2, each
// predicting the next token. The fp32 reference and each scheme side by side, as eval_windows.
int eval_second_half(const Model *m, const int32_t *tokens, int n, int chunk, const CodecSpec *const *k_specs,
                     const CodecSpec *const *v_specs, int n_specs, int threads, int decode, EvalResult *ref,
                     EvalResult *out, char *err, size_t errlen);
// The memory rule of a window's default: the model's context, cut so that the runs side by side
// (fp32 and n_specs schemes) hold at most EVAL_WINDOW_BUDGET bytes of caches, each counted as twice
// an fp32 cache (its codes, at most fp32's, and the fast evaluator's decoded copy). Qwen2.5-0.5B's
// 32,768 tokens hold 0.8 GB of fp32 cache a run; at one scheme its windows are 10,922 tokens.
#define EVAL_WINDOW_BUDGET ((size_t)1 << 30)
int eval_default_window(const ModelConfig *c, int n_specs);
// How many bytes eval_windows predicts in tokens[0..n) of micro's bytes: every token that is not a BOS.
int eval_windows_steps(const int32_t *tokens, int n);
int eval_trace_alloc(EvalTrace *t, const Model *m, int n_tokens);
// A trace of the steps' NLLs alone (and the most-attended positions): a scheme's run's, paired with
// the reference's in the bootstrap, without its vocabulary's worth of numbers a step.
int eval_trace_alloc_nll(EvalTrace *t, const Model *m, int n_tokens);
void eval_trace_free(EvalTrace *t);



#endif
