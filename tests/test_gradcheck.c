// Gradient check of the trainer's backward pass (src/train/gpt.c).
//
// An independent, naive double-precision forward of the same model (written here, sharing no code
// with the trainer) gives the loss as a function of the parameters; its central differences
// (h = 1e-5 in double: truncation ~h², rounding ~1e-16/h, both far below fp32) are the reference.
// The trainer's fp32 analytic gradient must match them on a sample of elements of EVERY tensor:
//
//   rel = |analytic - numeric| / max(|analytic|, |numeric|, 1e-3 * G)  <=  REL_BOUND = 1e-3
//
// where G is the largest |numeric| gradient sampled in that tensor (elements whose gradient is ~0
// are judged on that tensor's absolute scale). fp32 backward errors are ~1e-6..1e-5 relative; a
// wrong term in any layer's backward gives O(1). Also checked: the fp32 batched loss equals the
// double reference loss to 1e-5 (the forward is right), and attention is split into blocks of 3
// query rows so the causal block logic is exercised (T = 8: blocks of 3, 3, 2).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "adamw.h"
#include "gpt.h"
#include "rng.h"

#define REL_BOUND 1e-3
#define LOSS_BOUND 1e-5
#define SAMPLES 24
#define H 1e-5

typedef struct {
    ModelConfig c;
    int B, T;
    const int *in, *tg;
} Ref;

static void ref_rmsnorm(double *y, const double *x, const double *g, int D, double eps) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / D + eps);
    for (int i = 0; i < D; i++) y[i] = x[i] * r * g[i];
}

// y[o] = Σ_i W[o, i] x[i]
static void ref_matvec(double *y, const double *W, const double *x, int out, int in) {
    for (int o = 0; o < out; o++) {
        double s = 0;
        for (int i = 0; i < in; i++) s += W[(size_t)o * in + i] * x[i];
        y[o] = s;
    }
}

static void ref_rope(double *v, int n_heads, int hd, int pos, double theta) {
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < hd / 2; i++) {
            double ang = pos * pow(theta, -2.0 * i / hd);
            double a = v[h * hd + 2 * i], b = v[h * hd + 2 * i + 1];
            v[h * hd + 2 * i] = a * cos(ang) - b * sin(ang);
            v[h * hd + 2 * i + 1] = a * sin(ang) + b * cos(ang);
        }
}

// Mean cross-entropy of the whole batch, in double, straight from the definition.
static double ref_loss(const Ref *r, const double *p) {
    const ModelConfig *c = &r->c;
    int D = c->dim, L = c->n_layers, nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim, F = c->hidden_dim;
    int V = c->vocab_size, T = r->T, QD = nh * hd, KD = nkv * hd;
    const double *emb = p;
    const double *an = emb + (size_t)V * D;
    const double *wq = an + (size_t)L * D;
    const double *wk = wq + (size_t)L * QD * D;
    const double *wv = wk + (size_t)L * KD * D;
    const double *wo = wv + (size_t)L * KD * D;
    const double *fnorm = wo + (size_t)L * D * QD;
    const double *w1 = fnorm + (size_t)L * D;
    const double *w2 = w1 + (size_t)L * F * D;
    const double *w3 = w2 + (size_t)L * D * F;
    const double *final_norm = w3 + (size_t)L * F * D;
    double *x = malloc(sizeof(double) * T * D), *xn = malloc(sizeof(double) * D);
    double *q = malloc(sizeof(double) * T * QD), *k = malloc(sizeof(double) * T * KD);
    double *v = malloc(sizeof(double) * T * KD), *att = malloc(sizeof(double) * QD), *tmp = malloc(sizeof(double) * D);
    double *h1 = malloc(sizeof(double) * F), *h3 = malloc(sizeof(double) * F), *s = malloc(sizeof(double) * T);
    double *logits = malloc(sizeof(double) * V);
    double total = 0;
    for (int b = 0; b < r->B; b++) {
        for (int t = 0; t < T; t++) memcpy(x + t * D, emb + (size_t)r->in[b * T + t] * D, sizeof(double) * D);
        for (int l = 0; l < L; l++) {
            for (int t = 0; t < T; t++) {
                ref_rmsnorm(xn, x + t * D, an + l * D, D, c->norm_eps);
                ref_matvec(q + t * QD, wq + (size_t)l * QD * D, xn, QD, D);
                ref_matvec(k + t * KD, wk + (size_t)l * KD * D, xn, KD, D);
                ref_matvec(v + t * KD, wv + (size_t)l * KD * D, xn, KD, D);
                ref_rope(q + t * QD, nh, hd, t, c->rope_theta);
                ref_rope(k + t * KD, nkv, hd, t, c->rope_theta);
            }
            for (int t = 0; t < T; t++) {
                for (int h = 0; h < nh; h++) {
                    int g = h / (nh / nkv);
                    double m = -INFINITY, sum = 0;
                    for (int j = 0; j <= t; j++) {
                        double d = 0;
                        for (int i = 0; i < hd; i++) d += q[t * QD + h * hd + i] * k[j * KD + g * hd + i];
                        s[j] = d / sqrt((double)hd);
                        if (s[j] > m) m = s[j];
                    }
                    for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - m));
                    for (int i = 0; i < hd; i++) {
                        double o = 0;
                        for (int j = 0; j <= t; j++) o += s[j] / sum * v[j * KD + g * hd + i];
                        att[h * hd + i] = o;
                    }
                }
                ref_matvec(tmp, wo + (size_t)l * D * QD, att, D, QD);
                for (int i = 0; i < D; i++) x[t * D + i] += tmp[i];
                // the next positions' attention reads q/k/v computed before this add: fine, they are stored
            }
            for (int t = 0; t < T; t++) {
                ref_rmsnorm(xn, x + t * D, fnorm + l * D, D, c->norm_eps);
                ref_matvec(h1, w1 + (size_t)l * F * D, xn, F, D);
                ref_matvec(h3, w3 + (size_t)l * F * D, xn, F, D);
                for (int i = 0; i < F; i++) h1[i] = h1[i] / (1.0 + exp(-h1[i])) * h3[i];
                ref_matvec(tmp, w2 + (size_t)l * D * F, h1, D, F);
                for (int i = 0; i < D; i++) x[t * D + i] += tmp[i];
            }
        }
        for (int t = 0; t < T; t++) {
            ref_rmsnorm(xn, x + t * D, final_norm, D, c->norm_eps);
            ref_matvec(logits, emb, xn, V, D);
            double m = -INFINITY, sum = 0;
            for (int i = 0; i < V; i++) m = logits[i] > m ? logits[i] : m;
            for (int i = 0; i < V; i++) sum += exp(logits[i] - m);
            total += log(sum) + m - logits[r->tg[b * T + t]];
        }
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(tmp), free(h1), free(h3), free(s), free(logits);
    return total / (r->B * T);
}

static int check(const char *label, ModelConfig c, int B, int T, int att_block) {
    Model m;
    if (model_alloc(&m, &c)) {
        fprintf(stderr, "model_alloc failed\n");
        return 1;
    }
    // Larger-than-training weights so every path is far from linear and gradients are not tiny.
    TensorInfo info[MODEL_N_TENSORS];
    model_tensor_infos(&c, info);
    Rng rng;
    rng_seed(&rng, 42);
    float *p = m.params;
    for (int t = 0; t < MODEL_N_TENSORS; t++) {
        for (size_t i = 0; i < info[t].count; i++) {
            double z = rng_normal(&rng);
            p[i] = (float)(info[t].is_matrix ? (t == 0 ? 1.0 : 0.35) * z : 1.0 + 0.3 * z);
        }
        p += info[t].count;
    }
    int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    for (int i = 0; i < B * T; i++) {
        in[i] = i % T == 0 ? MICRO_BOS : (int)rng_below(&rng, 256);
        tg[i] = (int)rng_below(&rng, 256);
    }
    char err[256];
    TrainNet net;
    if (train_net_init(&net, &m, B, T, 2, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    net.att_block = att_block;
    float loss = train_net_forward(&net, in, tg);
    train_net_zero_grad(&net);
    train_net_backward(&net);

    size_t n = m.n_params;
    double *pd = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) pd[i] = m.params[i];
    Ref r = {c, B, T, in, tg};
    double ref = ref_loss(&r, pd);
    int fail = 0;
    printf("%s: fp32 batched loss %.7f, double reference %.7f (|diff| %.2e, bound %.0e)\n", label, (double)loss, ref,
           fabs(loss - ref), LOSS_BOUND);
    if (!(fabs(loss - ref) <= LOSS_BOUND)) fail = 1;

    size_t off = 0;
    for (int t = 0; t < MODEL_N_TENSORS; t++) {
        size_t cnt = info[t].count;
        int ns = cnt < SAMPLES ? (int)cnt : SAMPLES;
        size_t idx[SAMPLES];
        double num[SAMPLES], ana[SAMPLES], gmax = 0;
        for (int s = 0; s < ns; s++) {
            idx[s] = cnt <= SAMPLES ? (size_t)s : (size_t)rng_below(&rng, cnt);
            size_t i = off + idx[s];
            double keep = pd[i];
            pd[i] = keep + H;
            double lp = ref_loss(&r, pd);
            pd[i] = keep - H;
            double lm = ref_loss(&r, pd);
            pd[i] = keep;
            num[s] = (lp - lm) / (2 * H);
            ana[s] = net.grads[i];
            if (fabs(num[s]) > gmax) gmax = fabs(num[s]);
        }
        double worst = 0;
        size_t worst_i = 0;
        for (int s = 0; s < ns; s++) {
            double den = fmax(fmax(fabs(ana[s]), fabs(num[s])), 1e-3 * gmax);
            double rel = den > 0 ? fabs(ana[s] - num[s]) / den : 0;
            if (rel > worst) worst = rel, worst_i = (size_t)s;
        }
        int bad = !(worst <= REL_BOUND) || gmax == 0;
        printf("  %-16s %2d samples  max|grad| %.3e  max rel err %.2e%s", info[t].name, ns, gmax, worst,
               bad ? "  FAIL" : "");
        if (bad) printf(" (element %zu: analytic %.6e numeric %.6e)", idx[worst_i], ana[worst_i], num[worst_i]);
        printf("\n");
        fail |= bad;
        off += cnt;
    }
    train_net_free(&net);
    model_free(&m);
    free(pd), free(in), free(tg);
    return fail;
}

int main(void) {
    ModelConfig c = model_config_micro();
    c.dim = 16;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 2;
    c.head_dim = 8;
    c.hidden_dim = 24;
    c.max_seq_len = 16;
    printf("relative error bound %.0e (see the header); loss bound %.0e\n", REL_BOUND, LOSS_BOUND);
    int fail = check("dim 16, 2 layers, 2 heads of 8, hidden 24, B 2, T 8", c, 2, 8, 3);
    ModelConfig g = c; // grouped-query attention: 4 query heads of 4 sharing 2 key/value heads
    g.n_heads = 4;
    g.head_dim = 4;
    fail |= check("GQA: 4 query heads of 4, 2 KV heads, B 2, T 8", g, 2, 8, 3);
    printf(fail ? "FAIL\n" : "ok\n");
    return fail;
}
