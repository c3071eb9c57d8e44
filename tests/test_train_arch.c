// The trainer's forward (src/train/gpt.c) against the inference forward (src/engine/forward.c's
// decoder, fp32 cache) on small random models with each part a GGUF architecture adds (model.h):
// none (micro's), qwen2's biases and NeoX RoPE over grouped heads, qwen3's q/k norms with heads wider
// than the residual's share, Llama 3's rope_freqs and a classifier of its own, and all of them. The
// two share no code but the RoPE table: every next-token probability must agree to PROB_BOUND and
// every token's loss to LOSS_BOUND. Then the calibration's mode (TRAIN_GRADS_INPUTS: no parameter
// gradients, the classifier a block of rows at a time) against the full backward: the same losses,
// and the same key and value gradients at every layer (bit for bit at micro's vocabulary, where the
// blocks are the full backward's rows; to GRAD_BOUND at a vocabulary of 60,000, where they are not);
// and neither changes a weight of the model.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "gpt.h"
#include "model.h"
#include "random_model.h"
#include "spec_text.h"

#define PROB_BOUND 5e-5
#define LOSS_BOUND 1e-4
#define GRAD_BOUND 1e-4 // relative to the layer's largest gradient
#define T 150           // positions: two attention blocks of the trainer (128 + 22)

typedef struct {
    int layers;
    float *dk, *dv; // [L][T·KD], [L][T·KD]: each layer's gradients as the hook sees them
    size_t kd;
} Grads;

static void keep_grads(void *ctx, const TrainNet *n, int l) {
    Grads *g = ctx;
    memcpy(g->dk + (size_t)l * T * g->kd, n->a.dk, sizeof(float) * T * g->kd);
    memcpy(g->dv + (size_t)l * T * g->kd, n->a.dv, sizeof(float) * T * g->kd);
}

static void tokens(int *in, int *tg, int V, unsigned seed) {
    srand(seed);
    for (int t = 0; t < T; t++) in[t] = t == 0 ? MICRO_BOS : rand() % V;
    for (int t = 0; t < T; t++) tg[t] = t + 1 < T ? in[t + 1] : rand() % V;
}

// Matrices ×4 (random_model's ±0.1 leave attention nearly uniform, where a wrong RoPE pairing or
// norm would hardly show); gains and factors as they were.
static void sharpen(Model *m) {
    TensorInfo info[MODEL_N_TENSORS];
    model_tensor_infos(&m->config, info);
    float *p = m->params;
    for (int t = 0; t < MODEL_N_TENSORS; t++) {
        for (size_t i = 0; info[t].is_matrix && i < info[t].count; i++) p[i] *= 4.0f;
        p += info[t].count;
    }
}

// Every next-token distribution of the trainer against the decoder's.
static int against_decoder(const char *label, Model *m, const int *in, const int *tg) {
    const int V = m->config.vocab_size;
    char err[256];
    TrainNet net;
    Decoder d;
    if (train_net_init(&net, m, 1, T, 2, err, sizeof err) ||
        decoder_init(&d, m, SPEC("fp32"), SPEC("fp32"), T, 1, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", label, err);
        return 1;
    }
    train_net_forward(&net, in, NULL); // no targets: the probabilities stay in a.probs
    double worst_p = 0, worst_loss = 0;
    for (int t = 0; t < T; t++) {
        const float *lg = decoder_forward(&d, in[t], t);
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
        for (int i = 0; i < V; i++) s += exp(lg[i] - mx);
        const float *p = net.a.probs + (size_t)t * V;
        for (int i = 0; i < V; i++) worst_p = fmax(worst_p, fabs(exp(lg[i] - mx) / s - p[i]));
        double dec = log(s) + mx - lg[tg[t]], trn = -log((double)p[tg[t]]);
        worst_loss = fmax(worst_loss, fabs(dec - trn));
    }
    int bad = !(worst_p <= PROB_BOUND) || !(worst_loss <= LOSS_BOUND);
    printf("%s: trainer against decoder over %d positions: max |p diff| %.2e (bound %.0e), max |loss diff| %.2e "
           "(bound %.0e)%s\n",
           label, T, worst_p, PROB_BOUND, worst_loss, LOSS_BOUND, bad ? "  FAIL" : "");
    decoder_free(&d);
    train_net_free(&net);
    return bad;
}

// One forward and backward in a mode; the losses and the hook's gradients into g.
static float run_mode(Model *m, TrainGrads mode, const int *in, const int *tg, Grads *g, float *losses) {
    char err[256];
    TrainNet net;
    if (train_net_init_grads(&net, m, 1, T, 2, mode, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    net.layer_grad_hook = keep_grads;
    net.hook_ctx = g;
    float loss = train_net_forward(&net, in, tg);
    memcpy(losses, net.a.losses, sizeof(float) * T);
    train_net_zero_grad(&net);
    train_net_backward(&net);
    train_net_free(&net);
    return loss;
}

// The calibration's mode against the full backward; exact: bit for bit.
static int modes_agree(const char *label, Model *m, const int *in, const int *tg, int exact) {
    const ModelConfig *c = &m->config;
    const size_t kd = (size_t)c->n_kv_heads * c->head_dim, per = (size_t)c->n_layers * T * kd;
    Grads full = {c->n_layers, malloc(sizeof(float) * per), malloc(sizeof(float) * per), kd};
    Grads part = {c->n_layers, malloc(sizeof(float) * per), malloc(sizeof(float) * per), kd};
    float *lf = malloc(sizeof(float) * T), *lp = malloc(sizeof(float) * T);
    float *before = malloc(sizeof(float) * m->n_params);
    memcpy(before, m->params, sizeof(float) * m->n_params);
    float a = run_mode(m, TRAIN_GRADS_PARAMS, in, tg, &full, lf);
    float b = run_mode(m, TRAIN_GRADS_INPUTS, in, tg, &part, lp);
    int fail = memcmp(before, m->params, sizeof(float) * m->n_params) != 0;
    if (fail) printf("%s: a forward and backward changed the model's weights  FAIL\n", label);
    double worst_loss = 0, worst = 0;
    for (int t = 0; t < T; t++) worst_loss = fmax(worst_loss, fabs((double)lf[t] - lp[t]));
    for (int l = 0; l < c->n_layers; l++) {
        double scale = 0, diff = 0;
        for (size_t i = (size_t)l * T * kd; i < (size_t)(l + 1) * T * kd; i++) {
            scale = fmax(scale, fmax(fabs(full.dk[i]), fabs(full.dv[i])));
            diff = fmax(diff, fmax(fabs((double)full.dk[i] - part.dk[i]), fabs((double)full.dv[i] - part.dv[i])));
        }
        worst = fmax(worst, scale > 0 ? diff / scale : diff);
    }
    const int same = a == b && memcmp(lf, lp, sizeof(float) * T) == 0 &&
                     memcmp(full.dk, part.dk, sizeof(float) * per) == 0 &&
                     memcmp(full.dv, part.dv, sizeof(float) * per) == 0;
    int bad = exact ? !same : !(worst_loss <= 1e-5 && worst <= GRAD_BOUND);
    printf("%s: activations-only backward against the full one: %s (max |loss diff| %.2e, key/value gradients max "
           "rel diff %.2e)%s\n",
           label, same ? "bit for bit" : "not bit for bit", worst_loss, worst, bad ? "  FAIL" : "");
    free(full.dk), free(full.dv), free(part.dk), free(part.dv), free(lf), free(lp), free(before);
    return fail | bad;
}

int main(void) {
    ModelConfig base = small_config(); // dim 64, 2 layers, 2 heads of 32
    base.max_seq_len = 256;
    struct {
        const char *label;
        int bias, norm, halves, factors, own, heads, kv, hd;
    } cases[] = {
        {"micro's parts", 0, 0, 0, 0, 0, 2, 2, 32},
        {"qwen2: biases, NeoX RoPE, 4 heads of 16 over 2", 1, 0, 1, 0, 0, 4, 2, 16},
        {"qwen3: q/k norms, NeoX RoPE, 2 heads of 64 over 1", 0, 1, 1, 0, 0, 2, 1, 64},
        {"llama: rope_freqs, a classifier of its own", 0, 0, 0, 1, 1, 2, 1, 32},
        {"every part, 4 heads of 48 over 2", 1, 1, 1, 1, 1, 4, 2, 48},
    };
    int fail = 0, in[T], tg[T];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ModelConfig c = base;
        c.qkv_bias = cases[k].bias, c.qk_norm = cases[k].norm, c.rope_halves = cases[k].halves;
        c.rope_factors = cases[k].factors, c.separate_output = cases[k].own;
        c.n_heads = cases[k].heads, c.n_kv_heads = cases[k].kv, c.head_dim = cases[k].hd;
        Model m;
        random_model(&m, &c, 11 + (unsigned)k);
        sharpen(&m);
        // gains near 1 where model.h's parts have them; factors above 0, rising as Llama 3's
        for (int i = 0; c.qk_norm && i < c.n_layers * c.head_dim; i++) m.w.q_norm[i] += 1.0f, m.w.k_norm[i] += 1.0f;
        for (int i = 0; c.rope_factors && i < c.head_dim / 2; i++) m.w.rope_freqs[i] = 1.0f + 0.5f * (float)i;
        tokens(in, tg, c.vocab_size, 5 + (unsigned)k);
        fail |= against_decoder(cases[k].label, &m, in, tg);
        fail |= modes_agree(cases[k].label, &m, in, tg, 1);
        model_free(&m);
    }
    // A vocabulary whose block of 256 rows would pass 16 MiB: the calibration's mode takes fewer rows.
    ModelConfig big = base;
    big.vocab_size = 60000, big.qkv_bias = 1, big.rope_halves = 1, big.separate_output = 1;
    Model m;
    random_model(&m, &big, 3);
    tokens(in, tg, big.vocab_size, 4);
    sharpen(&m);
    fail |= modes_agree("vocabulary 60,000 (blocks of 69 rows)", &m, in, tg, 0);
    model_free(&m);
    printf(fail ? "FAIL\n" : "ok\n");
    return fail;
}
