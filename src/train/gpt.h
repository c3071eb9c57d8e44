// The trainer's batched model: forward and backward over (B, T) token windows, in the manner of
// llm.c's train_gpt2.c. Every matrix product is an OpenBLAS sgemm; every activation and gradient
// buffer is named in TrainActs and allocated once in train_net_init (nothing is allocated per
// step). Work is split into fixed-size tasks (row chunks, weight-row chunks, (batch, kv head)
// pairs) whose results do not depend on the thread count, so a run is bit-reproducible.
#ifndef MICRO_TRAIN_GPT_H
#define MICRO_TRAIN_GPT_H

#include <stddef.h>

#include "model.h"
#include "threadpool.h"

// Query rows per attention block: a block reads keys only up to its last row (causal), so the
// work is about T²/2 + T·block/2 per head, and the scratch is [block, T] per thread.
#define TRAIN_ATT_BLOCK 128
// Tokens per optimiser step (batch x seq) the trainer accepts; `micro train` checks it when parsing.
#define TRAIN_MAX_STEP_TOKENS (1 << 24)

// Activations of one forward pass (N = B*T tokens, D = dim, F = hidden_dim, V = vocab, L = n_layers;
// the attention widths of gpt.c's AttDims: QD queries, KD keys, VD values, OD the heads' outputs,
// LAT the latent, DR the RoPE key), and the backward's scratch. Multi-head and grouped-query:
// QD = OD = n_heads*head_dim, KD = VD = n_kv_heads*head_dim. Latent attention (trained in the
// explicit form, every head's key and value made from the latent): QD = KD = n_heads*(head_dim +
// rope_dim), VD = OD = n_heads*head_dim.
typedef struct {
    float *x;          // [2L+1, N, D] residual stream: x[2l] enters layer l's attention, x[2l+1] its FFN, x[2L] the final norm
    float *attn_rstd;  // [L, N] 1/sqrt(mean(x²)+eps) of the attention norm
    float *attn_xn;    // [L, N, D] normalised input of the attention (x * rstd * gain)
    float *q;          // [L, N, QD] queries after RoPE
    float *k;          // [L, N, KD] keys after RoPE
    float *v;          // [L, N, VD] values
    float *q_pre;      // [L, N, QD] qk_norm: the queries before their per-head norm (biases added)
    float *k_pre;      // [L, N, KD] the keys before theirs
    float *q_rstd;     // [L, N, n_heads] each head's 1/rms
    float *k_rstd;     // [L, N, n_kv_heads]
    float *kv_pre;     // [L, N, LAT] latent attention: W_dkv h, the latent before its norm
    float *kv_rstd;    // [L, N] its norm's 1/sqrt(mean(x²)+eps)
    float *ckv;        // [L, N, LAT] the latent c (what the cache holds)
    float *att_lse;    // [L, B, n_heads, T] log-sum-exp of each row's scaled scores (backward recomputes the weights)
    float *att_out;    // [L, N, OD] attention output before Wo
    float *ffn_rstd;   // [L, N]
    float *ffn_xn;     // [L, N, D]
    float *h1;         // [L, N, F] W1 h
    float *h3;         // [L, N, F] W3 h
    float *hg;         // [L, N, F] silu(W1 h) * W3 h, the input of W2
    float *final_rstd; // [N]
    float *final_xn;   // [N, D]
    float *probs;      // [N, V] softmax of the logits; the backward turns it into dloss/dlogits (NULL
                       // keeping the activations' gradients only: TRAIN_GRADS_INPUTS)
    float *logit_block; // TRAIN_GRADS_INPUTS: [n_threads, head_rows, V], each thread's block of the classifier
    float *losses;     // [N] per-token negative log-likelihood (nats)
    // backward scratch, reused by every layer
    float *dx;         // [N, D] gradient at the residual stream (running)
    float *dx2;        // [N, D] gradient at the residual between a layer's two sublayers
    float *dxn;        // [N, D] gradient at a norm's output
    float *datt;       // [N, OD] gradient at the attention output
    float *dq;         // [N, QD]
    float *dk;         // [N, KD]
    float *dv;         // [N, VD]
    float *dq_pre;     // [N, QD] qk_norm: the gradients before the per-head norms (dq and dk: after them)
    float *dk_pre;     // [N, KD]
    float *dknope;     // [N, OD] latent attention: the keys' gradient without their RoPE parts
    float *dkr;        // [N, DR] the shared RoPE key's gradient (summed over the heads)
    float *dckv;       // [N, LAT] the latent's gradient
    float *dckv_pre;   // [N, LAT] and before its norm
    float *dhg;        // [N, F]
    float *dh1;        // [N, F]
    float *dh3;        // [N, F]
    float *att_scratch; // [n_threads, 2, ATT_BLOCK, T] scores/weights and their gradient, per thread
    float *rope_cos;   // [T, rotated/2]: rotated = head_dim, or rope_dim under latent attention
    float *rope_sin;   // [T, rotated/2]
} TrainActs;

typedef struct TrainNet TrainNet;

// What the backward computes: every parameter's gradient (training), or only the activations' (the
// gradients at each layer's keys and values that calibration reads through the hook): no gradient
// buffer, no weight products, and no [tokens, vocab] probabilities (the classifier's rows are taken a
// block at a time in the forward), so a model of a large vocabulary runs within its activations.
typedef enum { TRAIN_GRADS_PARAMS = 0, TRAIN_GRADS_INPUTS = 1 } TrainGrads;
// Called by train_net_backward once layer l's a.dk and a.dv hold the gradients of the mean loss with
// respect to that layer's pre-RoPE keys (RoPE's backward has rotated them back) and its values; the
// scratch is overwritten by the next layer, so a reader (calibration's Fisher weights) copies it here.
typedef void (*TrainLayerGradHook)(void *ctx, const TrainNet *n, int l);

struct TrainNet {
    ModelConfig c;
    int B, T;
    Model *model;       // borrowed: parameters in payload order
    TrainGrads grads_kind;
    int head_rows;      // rows of a classifier task: ROW_CHUNK, fewer under TRAIN_GRADS_INPUTS at a large vocabulary
    float *grads;       // [n_params] gradients, same layout as model->params (NULL: TRAIN_GRADS_INPUTS)
    ModelWeights g;     // pointers into grads
    TrainActs a;
    float *act_memory;  // the one buffer TrainActs points into
    size_t act_floats;
    const int *inputs;  // [B*T] of the last forward
    const int *targets; // [B*T] of the last forward (NULL: no loss)
    float mean_loss;
    ThreadPool *pool;
    int n_threads;
    int att_block;      // TRAIN_ATT_BLOCK; tests may lower it (1..TRAIN_ATT_BLOCK) to cover several blocks
    TrainLayerGradHook layer_grad_hook; // NULL (train_net_init's default): none
    void *hook_ctx;
};

// Sizes everything for B windows of T tokens (T <= model max_seq_len). One line in err on failure.
// Every ModelConfig part of a multi-head, grouped-query or latent model is trained as the inference
// forward (src/engine/forward.c) computes it: RoPE's two pairings and Llama 3's factors (not trained),
// q/k/v biases, per-head q/k norms, a classifier of its own, heads wider than the residual's share.
int train_net_init(TrainNet *n, Model *m, int B, int T, int n_threads, char *err, size_t errlen);
// The same, choosing what the backward computes (train_net_init: TRAIN_GRADS_PARAMS).
int train_net_init_grads(TrainNet *n, Model *m, int B, int T, int n_threads, TrainGrads grads, char *err,
                         size_t errlen);
void train_net_free(TrainNet *n);

// Forward pass over inputs[B*T]; with targets[B*T] (ids 0..V-1) returns the mean loss (nats per
// token) and fills a.losses. Without targets returns 0 and leaves the probabilities in a.probs
// (TRAIN_GRADS_PARAMS; TRAIN_GRADS_INPUTS needs targets).
// The arrays must stay valid until the backward.
float train_net_forward(TrainNet *n, const int *inputs, const int *targets);
void train_net_zero_grad(TrainNet *n);
// Accumulates d(mean loss)/d(params) of the last forward (which must have had targets) into grads;
// under TRAIN_GRADS_INPUTS, only the activations' gradients (each layer's for the hook).
void train_net_backward(TrainNet *n);
// Layer l's keys of the last forward before RoPE ([B*T, n_kv_heads*head_dim]): the stored rotated keys
// turned back by the inverse rotation (equal to Wk·h up to an ulp or so of rounding).
void train_net_keys_pre_rope(const TrainNet *n, int l, float *out);

#endif
