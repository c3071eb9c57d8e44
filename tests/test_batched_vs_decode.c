// The trainer's batched forward (src/train/gpt.c) and the token-by-token Decoder with an fp32 cache
// (src/forward.c) compute the same model: on the same tokens their mean losses must agree to within
// BOUND nats/token. Two random models of micro's real shape (the trainer's initialisation, and the
// same with matrices x8 and randomised gains, so attention is sharp and every position matters),
// a batch of two ~400-token texts (English, Chinese) starting with BOS, so attention spans several
// of the trainer's causal blocks and the batch rows must not mix.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec_text.h"
#include "forward.h"
#include "model.h"
#include "adamw.h"
#include "gpt.h"
#include "rng.h"

#define BOUND 1e-4

static const char *texts[2] = {
    "When a language model writes an answer, it produces one token at a time, and each new token must attend to "
    "every token that came before it. Recomputing the keys and values for the whole prefix at every step would "
    "waste most of the work, so serving systems keep them in memory instead. This store is called the key-value "
    "cache. For each layer and each attention head, it holds one key vector and one value vector per token.",
    "语言模型在生成回答时，每次只产生一个词元，而每个新词元都必须关注它之前的所有词元。如果每一步都为整个前缀重新计算键和值，"
    "大部分工作都会被浪费，因此推理系统会把它们保存在内存中。这个存储被称为键值缓存。对于每一层和每个注意力头，它为每个已经见过的"
    "词元保存一个键向量和一个值向量。",
};

// Mean next-token loss of tokens[0..n] through the decoder, in double from its fp32 logits.
static double decode_loss(Decoder *d, const int *tokens, int n, int V) {
    char err[256];
    if (decoder_reset(d, err, sizeof err)) {
        fprintf(stderr, "decoder_reset: %s\n", err);
        exit(1);
    }
    double total = 0;
    for (int t = 0; t < n; t++) {
        const float *lg = decoder_forward(d, tokens[t], t);
        double m = -INFINITY, s = 0;
        for (int i = 0; i < V; i++) m = lg[i] > m ? lg[i] : m;
        for (int i = 0; i < V; i++) s += exp(lg[i] - m);
        total += log(s) + m - lg[tokens[t + 1]];
    }
    return total / n;
}

static int run(const char *label, Model *m, int T, int *tok) {
    char err[256];
    int B = 2, V = m->config.vocab_size;
    int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = tok[b * (T + 1) + t];
            tg[b * T + t] = tok[b * (T + 1) + t + 1];
        }
    TrainNet net;
    if (train_net_init(&net, m, B, T, 2, err, sizeof err)) {
        fprintf(stderr, "train_net_init: %s\n", err);
        return 1;
    }
    train_net_forward(&net, in, tg);
    Decoder d; // one thread: thread counts are test_decode's business
    if (decoder_init(&d, m, SPEC("fp32"), SPEC("fp32"), T, 1, err, sizeof err)) {
        fprintf(stderr, "decoder_init: %s\n", err);
        return 1;
    }
    int fail = 0;
    for (int b = 0; b < B; b++) {
        double batched = 0;
        for (int t = 0; t < T; t++) batched += net.a.losses[b * T + t];
        batched /= T;
        double dec = decode_loss(&d, tok + b * (T + 1), T, V);
        double diff = fabs(batched - dec);
        int bad = !(diff <= BOUND);
        printf("%s, text %d (%d tokens): batched %.6f  decoder %.6f  |diff| %.2e (bound %.0e)%s\n", label, b, T,
               batched, dec, diff, BOUND, bad ? "  FAIL" : "");
        fail |= bad;
    }
    decoder_free(&d);
    train_net_free(&net);
    free(in), free(tg);
    return fail;
}

int main(void) {
    ModelConfig c = model_config_micro();
    // Both texts cut to the same number of tokens: BOS + the first T bytes.
    int T = (int)strlen(texts[0]);
    if ((int)strlen(texts[1]) < T) T = (int)strlen(texts[1]);
    int *tok = malloc(sizeof(int) * 2 * (T + 1));
    for (int b = 0; b < 2; b++) {
        tok[b * (T + 1)] = MICRO_BOS;
        for (int t = 0; t < T; t++) tok[b * (T + 1) + 1 + t] = (unsigned char)texts[b][t];
    }
    Model m;
    if (model_alloc(&m, &c)) return 1;
    train_init_weights(&m, 7);
    int fail = run("trainer init", &m, T, tok);

    TensorInfo info[MODEL_N_TENSORS];
    model_tensor_infos(&c, info);
    Rng r;
    rng_seed(&r, 99);
    float *p = m.params;
    for (int t = 0; t < MODEL_N_TENSORS; t++) {
        for (size_t i = 0; i < info[t].count; i++)
            p[i] = info[t].is_matrix ? p[i] * 8.0f : (float)(1.0 + 0.3 * rng_normal(&r));
        p += info[t].count;
    }
    fail |= run("sharpened (x8)", &m, T, tok);
    model_free(&m);
    free(tok);
    printf(fail ? "FAIL\n" : "ok\n");
    return fail;
}
