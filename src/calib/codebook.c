#include "codebook.h"

#include <math.h>
#include <stdlib.h>

#include "wkmeans.h"

int normhist_init(NormHist *h) {
    double *all = calloc(4 * (size_t)CODEBOOK_BINS, sizeof(double));
    *h = (NormHist){0};
    if (!all) return -1;
    h->w = all, h->wx = all + CODEBOOK_BINS, h->n = all + 2 * CODEBOOK_BINS, h->sx = all + 3 * CODEBOOK_BINS;
    return 0;
}

void normhist_free(NormHist *h) {
    free(h->w);
    *h = (NormHist){0};
}

void normhist_add(NormHist *h, double xn, double weight) {
    if (xn < -1) xn = -1;
    if (xn > 1) xn = 1;
    int b = (int)((xn + 1) * 0.5 * CODEBOOK_BINS);
    if (b >= CODEBOOK_BINS) b = CODEBOOK_BINS - 1;
    h->w[b] += weight;
    h->wx[b] += weight * xn;
    h->n[b] += 1;
    h->sx[b] += xn;
    h->count += 1;
    h->sum += xn;
    h->sumsq += xn * xn;
}

static float clamp1(double v) { return v < -1 ? -1.0f : v > 1 ? 1.0f : (float)v; }

static int nearest(const float *c, int k, double x) {
    int best = 0;
    for (int j = 1; j < k; j++)
        if (fabs(x - c[j]) < fabs(x - c[best])) best = j;
    return best;
}

// Q-Norm: with each number sent to its nearest plain signpost, the dequantised numbers' mean and
// deviation (μq, σq) drift from the data's (μ, σ); the affine map c → μ + (c − μq)·σ/σq undoes it
// (KVQuant does this once, for the plain codebook's assignment, as here). A constant dequantised
// stream (σq = 0) is only shifted. Clamped to [−1, 1], which keeps the signposts ascending.
static void qnorm_fit(const NormHist *h, const float *plain, int k, float *q) {
    if (!(h->count > 0)) {
        for (int j = 0; j < k; j++) q[j] = plain[j];
        return;
    }
    double mu = h->sum / h->count, var = h->sumsq / h->count - mu * mu;
    double s1 = 0, s2 = 0;
    for (int b = 0; b < CODEBOOK_BINS; b++) {
        if (!(h->n[b] > 0)) continue;
        double c = plain[nearest(plain, k, h->sx[b] / h->n[b])];
        s1 += h->n[b] * c;
        s2 += h->n[b] * c * c;
    }
    double muq = s1 / h->count, varq = s2 / h->count - muq * muq;
    double scale = varq > 0 && var > 0 ? sqrt(var / varq) : 1.0;
    for (int j = 0; j < k; j++) q[j] = clamp1(mu + (plain[j] - muq) * scale);
}

int codebook_fit(const NormHist *h, int bits, float *plain, float *qnorm) {
    int k = 1 << bits;
    double *x = malloc(sizeof(double) * CODEBOOK_BINS), *w = malloc(sizeof(double) * CODEBOOK_BINS);
    double *c = malloc(sizeof(double) * (size_t)k);
    if (!x || !w || !c) {
        free(x), free(w), free(c);
        return -1;
    }
    size_t n = 0;
    for (int b = 0; b < CODEBOOK_BINS; b++) // ascending by construction: bins are in order
        if (h->w[b] > 0) {
            x[n] = h->wx[b] / h->w[b];
            w[n++] = h->w[b];
        }
    int it = wkmeans(x, w, n, k, c);
    if (it >= 0) {
        for (int j = 0; j < k; j++) plain[j] = clamp1(c[j]);
        qnorm_fit(h, plain, k, qnorm);
    }
    free(x), free(w), free(c);
    return it < 0 ? -1 : 0;
}
