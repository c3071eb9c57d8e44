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
// query rows so the causal block logic is exercised (T = 8: blocks of 3, 3, 2). Latent attention's
// reference is written in the absorbed form (each head's query taken through W_uk into the latent's
// space, the mix of latents taken through W_uv), the trainer's in the explicit one (every head's key
// and value made from the latent): the two agreeing checks the one against the other too.
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

// RoPE on the first `dims` numbers of each head, heads `stride` apart: pair i is (2i, 2i+1), or
// (i, i + dims/2) with halves (GPT-NeoX's order); its angle pos·θ^(−2i/dims), divided by factors[i]
// when given (Llama 3's rope_freqs).
static void ref_rope(double *v, int n_heads, int stride, int dims, int pos, double theta, int halves,
                     const double *factors) {
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < dims / 2; i++) {
            double ang = pos * pow(theta, -2.0 * i / dims) / (factors ? factors[i] : 1.0);
            int i0 = halves ? i : 2 * i, i1 = halves ? i + dims / 2 : 2 * i + 1;
            double a = v[h * stride + i0], b = v[h * stride + i1];
            v[h * stride + i0] = a * cos(ang) - b * sin(ang);
            v[h * stride + i1] = a * sin(ang) + b * cos(ang);
        }
}

// Latent attention of position t over 0..t, absorbed: score_j = (W_uk,hᵀ q_nope,h · c_j + q_rope,h ·
// kr_j) / sqrt(head_dim + rope_dim), out_h = W_uv,h Σ_j p_j c_j.
static void ref_latent_attention(const ModelConfig *c, const double *q, const double *lat, const double *kr,
                                 const double *w_uk, const double *w_uv, int t, double *att) {
    const int nh = c->n_heads, hd = c->head_dim, LAT = c->latent_dim, DR = c->rope_dim, QK = hd + DR;
    double *qt = malloc(sizeof(double) * LAT), *s = malloc(sizeof(double) * (t + 1)), *mix = malloc(sizeof(double) * LAT);
    for (int h = 0; h < nh; h++) {
        const double *qh = q + (size_t)t * nh * QK + h * QK;
        for (int a = 0; a < LAT; a++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += w_uk[(size_t)(h * hd + i) * LAT + a] * qh[i];
            qt[a] = d;
        }
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
            double d = 0;
            for (int a = 0; a < LAT; a++) d += qt[a] * lat[(size_t)j * LAT + a];
            for (int i = 0; i < DR; i++) d += qh[hd + i] * kr[(size_t)j * DR + i];
            s[j] = d / sqrt((double)QK);
            if (s[j] > m) m = s[j];
        }
        for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - m));
        for (int a = 0; a < LAT; a++) {
            double o = 0;
            for (int j = 0; j <= t; j++) o += s[j] / sum * lat[(size_t)j * LAT + a];
            mix[a] = o;
        }
        ref_matvec(att + h * hd, w_uv + (size_t)h * hd * LAT, mix, hd, LAT);
    }
    free(qt), free(s), free(mix);
}

// Mean cross-entropy of the whole batch, in double, straight from the definition.
static double ref_loss(const Ref *r, const double *p) {
    const ModelConfig *c = &r->c;
    int D = c->dim, L = c->n_layers, nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim, F = c->hidden_dim;
    const int mla = c->latent_dim > 0, LAT = c->latent_dim, DR = c->rope_dim;
    int V = c->vocab_size, T = r->T, QD = nh * (hd + DR), OD = nh * hd, KD = mla ? 0 : nkv * hd;
    const double *emb = p;
    const double *an = emb + (size_t)V * D;
    const double *wq = an + (size_t)L * D;
    const double *wk = wq + (size_t)L * QD * D;
    const double *wv = wk + (size_t)L * KD * D;
    const double *w_dkv = wv + (size_t)L * KD * D;
    const double *kv_norm = w_dkv + (size_t)L * LAT * D;
    const double *w_kr = kv_norm + (size_t)L * LAT;
    const double *w_uk = w_kr + (size_t)L * DR * D;
    const double *w_uv = w_uk + (size_t)L * OD * LAT;
    const double *wo = w_uv + (size_t)L * OD * LAT;
    const double *fnorm = wo + (size_t)L * D * OD;
    const double *w1 = fnorm + (size_t)L * D;
    const double *w2 = w1 + (size_t)L * F * D;
    const double *w3 = w2 + (size_t)L * D * F;
    const double *final_norm = w3 + (size_t)L * F * D;
    // A GGUF architecture's parts, each present only under its flag (model.h's payload order).
    const double *bq = final_norm + D, *bk = bq + (c->qkv_bias ? (size_t)L * OD : 0);
    const double *bv = bk + (c->qkv_bias ? (size_t)L * KD : 0);
    const double *q_norm = bv + (c->qkv_bias ? (size_t)L * KD : 0), *k_norm = q_norm + (c->qk_norm ? L * hd : 0);
    const double *output = k_norm + (c->qk_norm ? L * hd : 0);
    const double *rope_freqs = output + (c->separate_output ? (size_t)V * D : 0);
    const double *classifier = c->separate_output ? output : emb, *factors = c->rope_factors ? rope_freqs : NULL;
    double *x = malloc(sizeof(double) * T * D), *xn = malloc(sizeof(double) * D);
    double *q = malloc(sizeof(double) * T * QD), *k = malloc(sizeof(double) * (T * KD + 1));
    double *v = malloc(sizeof(double) * (T * KD + 1)), *att = malloc(sizeof(double) * OD), *tmp = malloc(sizeof(double) * D);
    double *lat = malloc(sizeof(double) * (T * LAT + 1)), *kr = malloc(sizeof(double) * (T * DR + 1));
    double *h1 = malloc(sizeof(double) * F), *h3 = malloc(sizeof(double) * F), *s = malloc(sizeof(double) * T);
    double *logits = malloc(sizeof(double) * V);
    double total = 0;
    for (int b = 0; b < r->B; b++) {
        for (int t = 0; t < T; t++) memcpy(x + t * D, emb + (size_t)r->in[b * T + t] * D, sizeof(double) * D);
        for (int l = 0; l < L; l++) {
            for (int t = 0; t < T; t++) {
                ref_rmsnorm(xn, x + t * D, an + l * D, D, c->norm_eps);
                ref_matvec(q + t * QD, wq + (size_t)l * QD * D, xn, QD, D);
                if (mla) {
                    double *pre = malloc(sizeof(double) * LAT);
                    ref_matvec(pre, w_dkv + (size_t)l * LAT * D, xn, LAT, D);
                    ref_rmsnorm(lat + t * LAT, pre, kv_norm + (size_t)l * LAT, LAT, c->norm_eps);
                    ref_matvec(kr + t * DR, w_kr + (size_t)l * DR * D, xn, DR, D);
                    ref_rope(q + t * QD + hd, nh, hd + DR, DR, t, c->rope_theta, 0, NULL);
                    ref_rope(kr + t * DR, 1, DR, DR, t, c->rope_theta, 0, NULL);
                    free(pre);
                    continue;
                }
                ref_matvec(k + t * KD, wk + (size_t)l * KD * D, xn, KD, D);
                ref_matvec(v + t * KD, wv + (size_t)l * KD * D, xn, KD, D);
                for (int i = 0; i < QD && c->qkv_bias; i++) q[t * QD + i] += bq[(size_t)l * QD + i];
                for (int i = 0; i < KD && c->qkv_bias; i++)
                    k[t * KD + i] += bk[(size_t)l * KD + i], v[t * KD + i] += bv[(size_t)l * KD + i];
                for (int h = 0; h < nh && c->qk_norm; h++) { // each head RMS-normalised, one gain a layer
                    double *x = q + t * QD + h * hd;
                    ref_rmsnorm(x, x, q_norm + (size_t)l * hd, hd, c->norm_eps);
                }
                for (int h = 0; h < nkv && c->qk_norm; h++) {
                    double *x = k + t * KD + h * hd;
                    ref_rmsnorm(x, x, k_norm + (size_t)l * hd, hd, c->norm_eps);
                }
                ref_rope(q + t * QD, nh, hd, hd, t, c->rope_theta, c->rope_halves, factors);
                ref_rope(k + t * KD, nkv, hd, hd, t, c->rope_theta, c->rope_halves, factors);
            }
            for (int t = 0; t < T; t++) {
                if (mla)
                    ref_latent_attention(c, q, lat, kr, w_uk + (size_t)l * OD * LAT, w_uv + (size_t)l * OD * LAT, t,
                                         att);
                for (int h = 0; h < nh && !mla; h++) {
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
                ref_matvec(tmp, wo + (size_t)l * D * OD, att, D, OD);
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
            ref_matvec(logits, classifier, xn, V, D);
            double m = -INFINITY, sum = 0;
            for (int i = 0; i < V; i++) m = logits[i] > m ? logits[i] : m;
            for (int i = 0; i < V; i++) sum += exp(logits[i] - m);
            total += log(sum) + m - logits[r->tg[b * T + t]];
        }
    }
    free(x), free(xn), free(q), free(k), free(v), free(att), free(tmp), free(h1), free(h3), free(s), free(logits);
    free(lat), free(kr);
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
    // Llama 3's factors are above 0, rising from the fast pairs to the slow (a factor is not trained)
    for (int i = 0; c.rope_factors && i < c.head_dim / 2; i++) m.w.rope_freqs[i] = 1.0f + 0.75f * (float)i;
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
        if (cnt == 0) continue; // a tensor this attention does not have
        if (!strcmp(info[t].name, "rope_freqs")) { // given, never trained: its gradient stays 0
            int moved = 0;
            for (size_t i = 0; i < cnt; i++) moved |= net.grads[off + i] != 0.0f;
            printf("  %-16s not trained: gradient %s\n", info[t].name, moved ? "not 0  FAIL" : "0");
            fail |= moved;
            off += cnt;
            continue;
        }
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
    ModelConfig a = c; // latent attention: 2 heads of 8 from a latent of 6, a RoPE key of 4
    a.n_kv_heads = 1;
    a.latent_dim = 6;
    a.rope_dim = 4;
    fail |= check("MLA: 2 heads of 8, latent 6, RoPE key 4, B 2, T 8", a, 2, 8, 3);
    // What a GGUF's architectures add (model.h), each checked on its own, then all at once.
    ModelConfig q2 = g; // qwen2: q, k and v biases; GPT-NeoX's RoPE pairs
    q2.qkv_bias = 1, q2.rope_halves = 1;
    fail |= check("qwen2: biases, NeoX RoPE, 4 query heads of 4 over 2, B 2, T 8", q2, 2, 8, 3);
    ModelConfig q3 = c; // qwen3: per-head q/k norms; heads wider than the residual's share (2 x 12 > 16)
    q3.qk_norm = 1, q3.rope_halves = 1, q3.head_dim = 12, q3.n_kv_heads = 1;
    fail |= check("qwen3: q/k norms, NeoX RoPE, 2 heads of 12 over 1 beside a residual of 16, B 2, T 8", q3, 2, 8, 3);
    ModelConfig l3 = c; // Llama 3: rope_freqs; TinyLlama: a classifier of its own
    l3.rope_factors = 1, l3.separate_output = 1;
    fail |= check("llama: rope_freqs, a classifier of its own, B 2, T 8", l3, 2, 8, 3);
    ModelConfig all = q3; // every part together
    all.qkv_bias = 1, all.rope_factors = 1, all.separate_output = 1, all.n_heads = 4, all.n_kv_heads = 2;
    fail |= check("every part: biases, q/k norms, NeoX, rope_freqs, own classifier, 4 heads of 12 over 2", all, 2, 8,
                  3);
    printf(fail ? "FAIL\n" : "ok\n");
    return fail;
}
