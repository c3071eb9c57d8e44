// Calibration on a small random model with synthetic token sequences (the corpus may be absent):
// the trainer's hook gives pre-RoPE keys and their gradients, the output is bit-identical across
// thread counts and loads as a valid file for its model, and the outlier rules do what
// docs/kvq-format.md says.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate.h"
#include "value_outliers.h"
#include "codebook.h"
#include "wkmeans.h"
#include "check.h"
#include "kvq_file.h"
#include "model_file.h"
#include "random_model.h"
#include "gpt.h"

#define SEQ 3
#define LEN 40

typedef struct {
    int layer;
    float *dk; // [LEN, KD] the hook's pre-RoPE key gradient of `layer`
} Capture;

static void capture(void *ctx, const TrainNet *n, int l) {
    Capture *c = ctx;
    if (l == c->layer) memcpy(c->dk, n->a.dk, sizeof(float) * (size_t)n->T * n->c.n_kv_heads * n->c.head_dim);
}

// Pre-RoPE keys equal Wk·xn, and the hook's key gradient is the pre-RoPE one: summed against the
// attention norm's output it must give the trainer's gradient of Wk (a post-RoPE gradient would not).
static void check_hook(Model *m, const int *in, const int *tg) {
    TrainNet n;
    char err[256];
    if (train_net_init(&n, m, 1, LEN, 1, err, sizeof err)) exit(1);
    int D = n.c.dim, KD = n.c.n_kv_heads * n.c.head_dim, l = 1;
    Capture cap = {l, malloc(sizeof(float) * LEN * (size_t)KD)};
    float *k = malloc(sizeof(float) * LEN * (size_t)KD);
    n.layer_grad_hook = capture;
    n.hook_ctx = &cap;
    train_net_forward(&n, in, tg);
    train_net_zero_grad(&n);
    train_net_backward(&n);
    train_net_keys_pre_rope(&n, l, k);
    const float *xn = n.a.attn_xn + (size_t)l * LEN * D, *wk = m->w.wk + (size_t)l * KD * D,
                *gwk = n.g.wk + (size_t)l * KD * D;
    double worst_k = 0, worst_g = 0, scale = 0;
    for (int o = 0; o < KD; o++) {
        for (int t = 0; t < LEN; t++) {
            double s = 0;
            for (int i = 0; i < D; i++) s += (double)wk[(size_t)o * D + i] * xn[(size_t)t * D + i];
            worst_k = fmax(worst_k, fabs(s - k[(size_t)t * KD + o]));
        }
        for (int i = 0; i < D; i++) {
            double s = 0;
            for (int t = 0; t < LEN; t++) s += (double)cap.dk[(size_t)t * KD + o] * xn[(size_t)t * D + i];
            worst_g = fmax(worst_g, fabs(s - gwk[(size_t)o * D + i]));
            scale = fmax(scale, fabs(s));
        }
    }
    CHECK(worst_k < 1e-5, "pre-RoPE keys differ from Wk·xn by %g", worst_k);
    CHECK(scale > 0 && worst_g < 1e-4 * scale, "hook's dk does not give dWk: off by %g of %g", worst_g, scale);
    free(cap.dk), free(k);
    train_net_free(&n);
}

// The stream maxima are those of what each stream's codec is given, over every sequence: the
// forward's post-RoPE keys, the keys turned back before RoPE, the values, layer by layer.
static void check_maxima(Model *m, const int *in, const int *tg, const Kvq *k) {
    TrainNet n;
    char err[256];
    if (train_net_init(&n, m, 1, LEN, 1, err, sizeof err)) exit(1);
    const int L = n.c.n_layers, KD = n.c.n_kv_heads * n.c.head_dim;
    float *pre = malloc(sizeof(float) * LEN * (size_t)KD), want[64][KVQ_N_MAX] = {{0}};
    for (int s = 0; s < SEQ; s++) {
        train_net_forward(&n, in + s * LEN, tg + s * LEN);
        for (int l = 0; l < L; l++) {
            train_net_keys_pre_rope(&n, l, pre);
            const size_t off = (size_t)l * LEN * KD;
            for (int i = 0; i < LEN * KD; i++) {
                want[l][KVQ_MAX_KEY] = fmaxf(want[l][KVQ_MAX_KEY], fabsf(n.a.k[off + i]));
                want[l][KVQ_MAX_KEY_PREROPE] = fmaxf(want[l][KVQ_MAX_KEY_PREROPE], fabsf(pre[i]));
                want[l][KVQ_MAX_VALUE] = fmaxf(want[l][KVQ_MAX_VALUE], fabsf(n.a.v[off + i]));
            }
        }
    }
    for (int l = 0; l < L; l++)
        for (int w = 0; w < KVQ_N_MAX; w++)
            CHECK(want[l][w] > 0 && *kvq_stream_max(k, l, (KvqStream)w) == want[l][w], "layer %d stream %d maximum %g, want %g",
                  l, w, (double)*kvq_stream_max(k, l, (KvqStream)w), (double)want[l][w]);
    // RoPE turns pairs: the keys' largest magnitude moves, but not beyond √2 of the other's.
    for (int l = 0; l < L; l++)
        CHECK(want[l][KVQ_MAX_KEY] != want[l][KVQ_MAX_KEY_PREROPE] &&
                  want[l][KVQ_MAX_KEY] <= sqrtf(2.0f) * want[l][KVQ_MAX_KEY_PREROPE] * 1.0001f,
              "layer %d: keys %g before RoPE %g", l, (double)want[l][KVQ_MAX_KEY], (double)want[l][KVQ_MAX_KEY_PREROPE]);
    free(pre);
    train_net_free(&n);
}

static int cmp_for_test(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void check_rules(void) {
    float sorted[200];
    for (int i = 0; i < 200; i++) sorted[i] = (float)i;
    float lo, hi;
    calib_key_thresholds(sorted, 200, 0, &lo, &hi);
    CHECK(lo == 0 && hi == 199, "P = 0 is min/max");
    calib_key_thresholds(sorted, 200, 100, &lo, &hi); // round(200 · 1/200) = 1 on each side
    CHECK(lo == 1 && hi == 198, "P = 1%%: %g %g", (double)lo, (double)hi);
    calib_key_thresholds(sorted, 3, 4900, &lo, &hi);
    CHECK(lo == 1 && hi == 1, "at most (n-1)/2 on each side");
    float v[32], scratch[32];
    unsigned char out[32];
    for (int i = 0; i < 32; i++) v[i] = (float)(i % 5) * 0.1f;
    v[7] = -3.0f, v[20] = 2.0f;
    CHECK(calib_value_outliers(v, 32, 0, out, scratch) == 0, "P = 0: no value outliers");
    CHECK(calib_value_outliers(v, 32, 100, out, scratch) == 1 && out[7] && !out[20], "P = 1%%: one, the farthest");
    CHECK(calib_value_outliers(v, 32, 700, out, scratch) == 3 && out[7] && out[20], "P = 7%%: ceil(2.24) = 3");
    // The median found by counting (heads of up to 64 numbers) against one from qsort, on vectors
    // full of ties, zeros of both signs and a NaN now and then (which takes the qsort path).
    uint64_t rng = 5;
    int differ = 0;
    for (int trial = 0; trial < 2000; trial++) {
        const int n = 1 + (int)(check_next(&rng) % 70);
        float w[70], sorted[70], tmp[70];
        unsigned char got[70], want[70];
        for (int i = 0; i < n; i++) {
            const int r = (int)(check_next(&rng) % 9);
            w[i] = r == 0 ? -0.0f : r == 1 ? 0.0f : (float)((int)(check_next(&rng) % 7) - 3) * 0.5f;
        }
        if (trial % 50 == 0) w[check_next(&rng) % (uint64_t)n] = NAN;
        const uint32_t pct = (uint32_t)(check_next(&rng) % 3000);
        const int m = calib_value_outliers(w, n, pct, got, tmp);
        memcpy(sorted, w, sizeof(float) * (size_t)n);
        qsort(sorted, (size_t)n, sizeof(float), cmp_for_test);
        const double median = 0.5 * ((double)sorted[(n - 1) / 2] + (double)sorted[n / 2]);
        memset(want, 0, sizeof want);
        for (int k = 0; k < m; k++) {
            int best = -1;
            for (int i = 0; i < n; i++)
                if (!want[i] && (best < 0 || fabs(w[i] - median) > fabs(w[best] - median))) best = i;
            want[best] = 1;
        }
        differ += memcmp(got, want, (size_t)n) != 0;
    }
    CHECK(!differ, "value outliers: %d of 2000 vectors flag other numbers than with qsort's median", differ);
}

// A codebook from a histogram: the plain signposts are weighted k-means of the bins; Q-Norm's, with
// each number kept at its plain signpost's index, have exactly the numbers' mean and deviation.
static void check_codebook(void) {
    NormHist h;
    if (normhist_init(&h)) exit(1);
    uint64_t rng = 99;
    double sum = 0, sumsq = 0;
    int n = 20000;
    for (int i = 0; i < n; i++) {
        // a skewed bulk in [−0.6, 0.3], weights growing with |x| as a Fisher weight might
        double u = check_uniform(&rng), x = -0.6 + 0.9 * u * u;
        sum += x, sumsq += x * x;
        normhist_add(&h, x, 0.1 + fabs(x));
    }
    float plain[4], q[4];
    CHECK(codebook_fit(&h, 2, plain, q) == 0, "codebook_fit");
    static double bx[CODEBOOK_BINS], bw[CODEBOOK_BINS];
    double c[4];
    size_t m = 0;
    for (int b = 0; b < CODEBOOK_BINS; b++)
        if (h.w[b] > 0) bx[m] = h.wx[b] / h.w[b], bw[m++] = h.w[b];
    wkmeans(bx, bw, m, 4, c);
    for (int j = 0; j < 4; j++) CHECK(plain[j] == (float)c[j], "plain signpost %d: %g, k-means %g", j, (double)plain[j], c[j]);
    double s1 = 0, s2 = 0, cnt = 0;
    for (int b = 0; b < CODEBOOK_BINS; b++) {
        if (!(h.n[b] > 0)) continue;
        double x = h.sx[b] / h.n[b];
        int best = 0;
        for (int j = 1; j < 4; j++)
            if (fabs(x - plain[j]) < fabs(x - plain[best])) best = j;
        s1 += h.n[b] * q[best], s2 += h.n[b] * q[best] * q[best], cnt += h.n[b];
    }
    double mu = sum / n, sd = sqrt(sumsq / n - mu * mu), muq = s1 / cnt, sdq = sqrt(s2 / cnt - muq * muq);
    CHECK(fabs(muq - mu) < 1e-6 && fabs(sdq - sd) < 1e-6, "Q-Norm: mean %g sd %g, data %g %g", muq, sdq, mu, sd);
    for (int j = 1; j < 4; j++) CHECK(q[j] > q[j - 1] && plain[j] > plain[j - 1], "signposts ascending");
    normhist_free(&h);
}

int main(void) {
    check_rules();
    check_codebook();
    ModelConfig c = small_config();
    Model m;
    random_model(&m, &c, 7);
    int in[SEQ * LEN], tg[SEQ * LEN];
    uint64_t rng = 12345;
    for (int i = 0; i < SEQ * LEN; i++) in[i] = (int)(check_next(&rng) % 256), tg[i] = (int)(check_next(&rng) % 256);
    in[0] = 1;
    check_hook(&m, in, tg);
    static const uint32_t percents[] = {0, 100, 500}, bits[] = {1, 2, 3, 4};
    Kvq k[2];
    CalibSummary sum;
    char err[256];
    for (int t = 0; t < 2; t++) {
        CalibSettings s = {percents, 3, bits, 4, t + 1};
        CHECK(calibrate_model(&m, in, tg, SEQ, LEN, &s, &k[t], &sum, err, sizeof err) == 0, "calibrate: %s", err);
    }
    CHECK(k[0].n_ranges == k[1].n_ranges && !memcmp(k[0].ranges, k[1].ranges, k[0].n_ranges * 4) &&
              !memcmp(k[0].codebooks, k[1].codebooks, k[0].n_codebooks * 4),
          "1 and 2 threads differ");
    CHECK(k[0].n_stream_max == (size_t)c.n_layers * KVQ_N_MAX &&
              !memcmp(k[0].stream_max, k[1].stream_max, k[0].n_stream_max * 4),
          "1 and 2 threads: the stream maxima differ");
    check_maxima(&m, in, tg, &k[0]);
    CHECK(sum.mean_loss > 5 && sum.mean_loss < 6, "random model's loss %g, expected near ln 256", sum.mean_loss);
    CHECK(sum.key_outliers[0] == 0 && sum.key_outliers[1] > 0 && sum.key_outliers[2] > sum.key_outliers[1],
          "key outlier fractions %g %g %g", sum.key_outliers[0], sum.key_outliers[1], sum.key_outliers[2]);
    CHECK(fabs(sum.value_outliers[1] - 1.0 / 32) < 1e-12 && fabs(sum.value_outliers[2] - 2.0 / 32) < 1e-12,
          "value outlier fractions %g %g", sum.value_outliers[1], sum.value_outliers[2]);
    // Thresholds nest: more outliers, a narrower range.
    int C = c.n_kv_heads * c.head_dim;
    for (int l = 0; l < c.n_layers; l++)
        for (int ch = 0; ch < C; ch++) {
            const float *r0 = kvq_key_range(&k[0], l, 0, ch), *r1 = kvq_key_range(&k[0], l, 1, ch);
            CHECK(r0[0] <= r1[0] && r1[0] <= r1[1] && r1[1] <= r0[1], "layer %d channel %d thresholds", l, ch);
        }
    // 1 bit: two signposts on either side of the middle; Q-Norm's differ from the plain ones.
    const float *b1 = kvq_codebook(&k[0], 0, KVQ_VALUE, 0, 0, KVQ_PLAIN);
    CHECK(b1[0] < 0 && b1[1] > 0, "1-bit value signposts %g %g", (double)b1[0], (double)b1[1]);
    const float *p2 = kvq_codebook(&k[0], 0, KVQ_KEY, 1, 1, KVQ_PLAIN), *q2 = kvq_codebook(&k[0], 0, KVQ_KEY, 1, 1, KVQ_QNORM);
    CHECK(memcmp(p2, q2, 16) != 0, "Q-Norm changed nothing");
    // What calibrate writes, the loader accepts, for its model.
    k[0].seed = 1;
    char dir[] = "/tmp/micro-test-calib-XXXXXX", path[256];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/c.kvq", dir);
    Kvq back;
    CHECK(kvq_save(&k[0], path, err, sizeof err) == 0 && kvq_load(&back, path, &m, err, sizeof err) == 0, "%s", err);
    kvq_free(&back);
    unlink(path);
    rmdir(dir);
    CalibSettings s = {percents, 3, bits, 4, 1};
    CHECK(calibrate_model(&m, in, tg, 1, c.max_seq_len + 1, &s, &back, NULL, err, sizeof err) == -1 && back.ranges == NULL,
          "a sequence beyond the context was accepted");
    kvq_free(&k[0]), kvq_free(&k[1]);
    model_free(&m);
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures != 0;
}
