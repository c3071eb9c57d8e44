// The decoder: thread count never changes a bit of the logits; the cache holds exactly what was
// appended; a hand-written single-layer reference (naive loops, recomputing every key) agrees.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spec_text.h"
#include "forward.h"
#include "random_model.h"

static int failures = 0;

// Latent attention's keys, values and queries of layer l at position t, in the explicit form (every
// head's key [W_uk,h c; k^R] and value W_uv,h c written out; the decoder computes the absorbed form):
// K and Q [H][head_dim + rope_dim], V [H][head_dim] at row t.
static void reference_latent_kqv(const Model *m, int l, int t, const double *h, double *K, double *V, double *Q) {
    const ModelConfig *c = &m->config;
    const int D = c->dim, H = c->n_heads, hd = c->head_dim, lat = c->latent_dim, dr = c->rope_dim, qk = hd + dr;
    double *cpre = calloc((size_t)lat, sizeof(double)), *kr = calloc((size_t)dr, sizeof(double));
    const float *wq = m->w.wq + (size_t)l * H * qk * D, *w_dkv = m->w.w_dkv + (size_t)l * lat * D;
    const float *w_kr = m->w.w_kr + (size_t)l * dr * D, *w_uk = m->w.w_uk + (size_t)l * H * hd * lat;
    const float *w_uv = m->w.w_uv + (size_t)l * H * hd * lat, *gain = m->w.kv_norm + (size_t)l * lat;
    for (int r = 0; r < H * qk; r++) {
        double a = 0;
        for (int i = 0; i < D; i++) a += wq[r * D + i] * h[i];
        Q[(size_t)t * H * qk + r] = a;
    }
    double ss = 0;
    for (int r = 0; r < lat; r++) {
        double a = 0;
        for (int i = 0; i < D; i++) a += w_dkv[r * D + i] * h[i];
        cpre[r] = a, ss += a * a;
    }
    const double inv = 1.0 / sqrt(ss / lat + c->norm_eps);
    for (int r = 0; r < lat; r++) cpre[r] *= inv * gain[r];
    for (int r = 0; r < dr; r++) {
        double a = 0;
        for (int i = 0; i < D; i++) a += w_kr[r * D + i] * h[i];
        kr[r] = a;
    }
    for (int i = 0; i < dr / 2; i++) { // RoPE on the key's and every query's last rope_dim numbers
        const double ang = t * pow(c->rope_theta, -2.0 * i / dr), cs = cos(ang), sn = sin(ang);
        double a = kr[2 * i], b = kr[2 * i + 1];
        kr[2 * i] = a * cs - b * sn, kr[2 * i + 1] = a * sn + b * cs;
        for (int hh = 0; hh < H; hh++) {
            double *q = Q + (size_t)t * H * qk + hh * qk + hd;
            a = q[2 * i], b = q[2 * i + 1];
            q[2 * i] = a * cs - b * sn, q[2 * i + 1] = a * sn + b * cs;
        }
    }
    for (int hh = 0; hh < H; hh++) {
        for (int d = 0; d < hd; d++) {
            double a = 0, b = 0;
            for (int i = 0; i < lat; i++)
                a += w_uk[(size_t)(hh * hd + d) * lat + i] * cpre[i], b += w_uv[(size_t)(hh * hd + d) * lat + i] * cpre[i];
            K[(size_t)t * H * qk + hh * qk + d] = a, V[(size_t)t * H * hd + hh * hd + d] = b;
        }
        for (int d = 0; d < dr; d++) K[(size_t)t * H * qk + hh * qk + hd + d] = kr[d];
    }
    free(cpre), free(kr);
}

// Naive reference of the whole forward pass for the last position, recomputing all keys and values
// from scratch with the textbook formulas (no cache, no codec).
static void reference_logits(const Model *m, const int *tokens, int n, float *logits) {
    const ModelConfig *c = &m->config;
    const int mla = c->latent_dim > 0, qk = c->head_dim + c->rope_dim; // qk: numbers per query and key
    int D = c->dim, H = c->n_heads, hd = c->head_dim, F = c->hidden_dim, kvH = mla ? H : c->n_kv_heads;
    double *x = calloc((size_t)n * D, sizeof(double)), *h = calloc((size_t)D, sizeof(double));
    double *K = calloc((size_t)n * kvH * qk, sizeof(double)), *V = calloc((size_t)n * kvH * hd, sizeof(double));
    double *Q = calloc((size_t)n * H * qk, sizeof(double)), *o = calloc((size_t)H * hd, sizeof(double));
    double *g = calloc((size_t)F, sizeof(double)), *att = calloc((size_t)n, sizeof(double));
    for (int t = 0; t < n; t++)
        for (int i = 0; i < D; i++) x[t * D + i] = m->w.token_embedding[tokens[t] * D + i];
    for (int l = 0; l < c->n_layers; l++) {
        const float *wq = m->w.wq + (size_t)l * H * hd * D, *wk = m->w.wk + (size_t)l * kvH * hd * D;
        const float *wv = m->w.wv + (size_t)l * kvH * hd * D, *wo = m->w.wo + (size_t)l * D * H * hd;
        for (int t = 0; t < n; t++) {
            double ss = 0;
            for (int i = 0; i < D; i++) ss += x[t * D + i] * x[t * D + i];
            double inv = 1.0 / sqrt(ss / D + c->norm_eps);
            for (int i = 0; i < D; i++) h[i] = x[t * D + i] * inv * m->w.attn_norm[l * D + i];
            if (mla) {
                reference_latent_kqv(m, l, t, h, K, V, Q);
                continue;
            }
            for (int r = 0; r < H * hd; r++) {
                double a = 0;
                for (int i = 0; i < D; i++) a += wq[r * D + i] * h[i];
                Q[t * H * hd + r] = a;
            }
            for (int r = 0; r < kvH * hd; r++) {
                double a = 0, b = 0;
                for (int i = 0; i < D; i++) a += wk[r * D + i] * h[i], b += wv[r * D + i] * h[i];
                K[t * kvH * hd + r] = a, V[t * kvH * hd + r] = b;
            }
            for (int r = 0; r < H * hd; r += 2) {
                int i = (r % hd) / 2;
                double ang = t * pow(c->rope_theta, -2.0 * i / hd), cs = cos(ang), sn = sin(ang);
                double a = Q[t * H * hd + r], b = Q[t * H * hd + r + 1];
                Q[t * H * hd + r] = a * cs - b * sn, Q[t * H * hd + r + 1] = a * sn + b * cs;
                if (r < kvH * hd) {
                    a = K[t * kvH * hd + r], b = K[t * kvH * hd + r + 1];
                    K[t * kvH * hd + r] = a * cs - b * sn, K[t * kvH * hd + r + 1] = a * sn + b * cs;
                }
            }
        }
        for (int t = 0; t < n; t++) {
            for (int hh = 0; hh < H; hh++) {
                int kh = hh / (H / kvH);
                double max = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int d = 0; d < qk; d++) s += Q[t * H * qk + hh * qk + d] * K[j * kvH * qk + kh * qk + d];
                    att[j] = s / sqrt((double)qk);
                    if (att[j] > max) max = att[j];
                }
                for (int j = 0; j <= t; j++) sum += att[j] = exp(att[j] - max);
                for (int d = 0; d < hd; d++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += att[j] / sum * V[j * kvH * hd + kh * hd + d];
                    o[hh * hd + d] = a;
                }
            }
            for (int r = 0; r < D; r++) {
                double a = 0;
                for (int i = 0; i < H * hd; i++) a += wo[r * H * hd + i] * o[i];
                x[t * D + r] += a;
            }
            double ss = 0;
            for (int i = 0; i < D; i++) ss += x[t * D + i] * x[t * D + i];
            double inv = 1.0 / sqrt(ss / D + c->norm_eps);
            for (int i = 0; i < D; i++) h[i] = x[t * D + i] * inv * m->w.ffn_norm[l * D + i];
            const float *w1 = m->w.w1 + (size_t)l * F * D, *w3 = m->w.w3 + (size_t)l * F * D, *w2 = m->w.w2 + (size_t)l * D * F;
            for (int r = 0; r < F; r++) {
                double a = 0, b = 0;
                for (int i = 0; i < D; i++) a += w1[r * D + i] * h[i], b += w3[r * D + i] * h[i];
                g[r] = a / (1 + exp(-a)) * b;
            }
            for (int r = 0; r < D; r++) {
                double a = 0;
                for (int i = 0; i < F; i++) a += w2[r * F + i] * g[i];
                x[t * D + r] += a;
            }
        }
    }
    double ss = 0;
    int t = n - 1;
    for (int i = 0; i < D; i++) ss += x[t * D + i] * x[t * D + i];
    double inv = 1.0 / sqrt(ss / D + c->norm_eps);
    for (int i = 0; i < D; i++) h[i] = x[t * D + i] * inv * m->w.final_norm[i];
    for (int v = 0; v < c->vocab_size; v++) {
        double a = 0;
        for (int i = 0; i < D; i++) a += m->w.token_embedding[v * D + i] * h[i];
        logits[v] = (float)a;
    }
    free(x), free(h), free(K), free(V), free(Q), free(o), free(g), free(att);
}

int main(void) {
    char err[512];
    ModelConfig c = model_config_micro();
    Model m;
    random_model(&m, &c, 7);
    enum { N = 300 };
    int tokens[N];
    for (int i = 0; i < N; i++) tokens[i] = i == 0 ? MICRO_BOS : (i * 37 + 11) % 256;

    // 1. Bit-identical logits on 1, 2 and 3 threads at every position; never more threads than
    // cores (spinning workers on a shared core make the test crawl), so 1, 2, 2 on two cores.
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int third = cores >= 3 ? 3 : 2;
    Decoder d1, d2, d3;
    if (decoder_init(&d1, &m, SPEC("fp32"), SPEC("fp32"), N, 1, err, sizeof err) ||
        decoder_init(&d2, &m, SPEC("fp32"), SPEC("fp32"), N, 2, err, sizeof err) ||
        decoder_init(&d3, &m, SPEC("fp32"), SPEC("fp32"), N, third, err, sizeof err)) {
        printf("FAIL init: %s\n", err);
        return 1;
    }
    int differ = 0;
    for (int t = 0; t < N; t++) {
        float *a = decoder_forward(&d1, tokens[t], t), *b = decoder_forward(&d2, tokens[t], t),
              *e = decoder_forward(&d3, tokens[t], t);
        if (memcmp(a, b, 256 * sizeof(float)) || memcmp(a, e, 256 * sizeof(float))) differ++;
    }
    printf("%s thread counts 1/2/%d: %d of %d positions differ\n", differ ? "FAIL" : "ok  ", third, differ, N);
    failures += differ != 0;
    if (decoder_cache_bytes(&d1) != (size_t)N * 4 * 2 * 192 * 4) {
        printf("FAIL fp32 cache holds %zu bytes, expected %d\n", decoder_cache_bytes(&d1), N * 4 * 2 * 192 * 4);
        failures++;
    }

    // 2. Against the naive double-precision reference at a few lengths.
    int lengths[] = {1, 2, 17, 64};
    float ref[256];
    for (int li = 0; li < 4; li++) {
        int n = lengths[li];
        if (decoder_reset(&d1, err, sizeof err)) return 1;
        float *logits = NULL;
        for (int t = 0; t < n; t++) logits = decoder_forward(&d1, tokens[t], t);
        reference_logits(&m, tokens, n, ref);
        double worst = 0;
        for (int v = 0; v < 256; v++) worst = fmax(worst, fabs((double)logits[v] - ref[v]));
        int bad = !(worst < 1e-4);
        printf("%s length %d: max |logit - reference| = %.2e (bound 1e-4)\n", bad ? "FAIL" : "ok  ", n, worst);
        failures += bad;
    }

    // 3. A bad spec is refused with a message, not a crash.
    Decoder bad;
    if (decoder_init(&bad, &m, SPEC("nonsense"), SPEC("fp32"), 8, 1, err, sizeof err) == 0 || !strstr(err, "nonsense")) {
        printf("FAIL unknown codec accepted or unnamed: %s\n", err);
        failures++;
    }
    decoder_free(&d1), decoder_free(&d2), decoder_free(&d3);
    model_free(&m);

    // 4. Latent attention (micro's shape, a latent of 64 and a RoPE key of 16): the decoder's absorbed
    // attention against the explicit reference, and the same bits on 1 and 2 threads.
    ModelConfig lc = model_config_micro();
    lc.n_kv_heads = 1, lc.latent_dim = 64, lc.rope_dim = 16;
    Model lm;
    random_model(&lm, &lc, 11);
    Decoder l1, l2;
    if (decoder_init(&l1, &lm, SPEC("fp32"), SPEC("fp32"), 64, 1, err, sizeof err) ||
        decoder_init(&l2, &lm, SPEC("fp32"), SPEC("fp32"), 64, 2, err, sizeof err)) {
        printf("FAIL latent init: %s\n", err);
        return 1;
    }
    int ldiffer = 0;
    double lworst = 0;
    for (int t = 0; t < 64; t++) {
        float *a = decoder_forward(&l1, tokens[t], t), *b = decoder_forward(&l2, tokens[t], t);
        ldiffer += memcmp(a, b, 256 * sizeof(float)) != 0;
        if (t == 0 || t == 1 || t == 16 || t == 63) {
            reference_logits(&lm, tokens, t + 1, ref);
            for (int v = 0; v < 256; v++) lworst = fmax(lworst, fabs((double)a[v] - ref[v]));
        }
    }
    printf("%s latent attention: threads 1/2 differ at %d of 64 positions; max |logit - explicit reference| = "
           "%.2e (bound 1e-4)\n", ldiffer || !(lworst < 1e-4) ? "FAIL" : "ok  ", ldiffer, lworst);
    failures += ldiffer != 0 || !(lworst < 1e-4);
    if (decoder_cache_bytes(&l1) != (size_t)64 * 4 * (64 + 16) * 4) {
        printf("FAIL the latent fp32 cache holds %zu bytes, expected %d\n", decoder_cache_bytes(&l1), 64 * 4 * 80 * 4);
        failures++;
    }
    decoder_free(&l1), decoder_free(&l2);
    model_free(&lm);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
