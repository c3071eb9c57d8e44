// What micro reproduces of llama.cpp's own arithmetic on a quantised KV cache, computed here by hand:
//  - iq4_nl (the default) is llama.cpp's reference quantiser: every code is the codebook entry
//    nearest to x/d0 with d0 = extreme/−127, and the stored scale is fp16 of the weighted
//    least-squares refit Σ(x²·v)·x / Σ(x²·v)·v over those entries;
//  - qround=q8 scores a key against the query rounded to q8_0 (q8_1 for q4_1 / q5_1) blocks: the
//    score is the integer dot product of the codes times the two scales (plus m·s for q4_1 / q5_1);
//  - the option shows in the normalised spec and stores nothing.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "quant.h"

#include "check.h"

static uint64_t rng_state = 0x3c6ef372fe94f82bull;
static double urand(void) { return check_uniform(&rng_state); }

static const int iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static float fp16(float x) { return quant_fp16_to_fp32(quant_fp32_to_fp16(x)); }

static void must_init(KVStream *s, const char *spec, int head_dim, int capacity) {
    char err[256];
    if (kvstream_init(s, SPEC(spec), KV_ROLE_KEY, 1, head_dim, capacity, err, sizeof err)) {
        fprintf(stderr, "cannot create '%s': %s\n", spec, err);
        exit(1);
    }
}

// The entry nearest to v by brute force, the upper one on a tie (llama.cpp's best_index_int8).
static int nearest_entry(float v) {
    int best = 0;
    for (int i = 1; i < 16; i++)
        if (!(fabsf(v - (float)iq4nl[best]) < fabsf((float)iq4nl[i] - v))) best = i;
    return best;
}

static void test_iq4nl_reference(void) {
    enum { T = 200 };
    KVStream s;
    must_init(&s, "iq4_nl", 32, T);
    CHECK(strcmp(s.spec, "iq4_nl") == 0, "iq4_nl normalises to '%s'", s.spec);
    float x[32], y[32];
    int differs_from_search = 0;
    KVStream searched;
    must_init(&searched, "iq4_nl:search", 32, T);
    for (int t = 0; t < T; t++) {
        const double mag = pow(10.0, -3.0 + 4.0 * urand());
        for (int j = 0; j < 32; j++) x[j] = (float)(mag * (2 * urand() - 1) * (1 + 3 * (urand() < 0.1)));
        kvstream_append(&s, x);
        kvstream_append(&searched, x);
        float amax = 0, extreme = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), extreme = x[j];
        const float id = 1.0f / (extreme / -127.0f);
        int code[32];
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            code[j] = nearest_entry(id * x[j]);
            const float w = x[j] * x[j], v = (float)iq4nl[code[j]];
            sumqx += w * v * x[j];
            sumq2 += w * v * v;
        }
        const float d = fp16(sumqx / sumq2);
        s.ops->read(s.state, 0, t, y);
        for (int j = 0; j < 32; j++)
            CHECK(y[j] == d * (float)iq4nl[code[j]], "iq4_nl t=%d j=%d: %g decodes to %g, want %g·%d", t, j, x[j], y[j],
                  d, iq4nl[code[j]]);
        float z[32];
        searched.ops->read(searched.state, 0, t, z);
        differs_from_search |= memcmp(y, z, sizeof y) != 0;
    }
    CHECK(differs_from_search, "iq4_nl and iq4_nl:search agree on all %d blocks", T);
    kvstream_free(&s);
    kvstream_free(&searched);
}

// The score of one key block under qround=q8, by hand: the key's integer levels from read() (x̂/d
// for the stored d, or (x̂ − m)/d), the query's q8 codes, one integer dot product.
enum { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, N_FORMATS };
static const char *names[N_FORMATS] = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"};

static void test_qround(int f, int head_dim) {
    enum { T = 40 };
    char spec[64];
    snprintf(spec, sizeof spec, "%s:qround=q8", names[f]);
    KVStream s, plain;
    must_init(&s, spec, head_dim, T);
    must_init(&plain, names[f], head_dim, T);
    CHECK(strcmp(s.spec, spec) == 0, "%s normalises to '%s'", spec, s.spec);
    const int with_min = f == Q4_1 || f == Q5_1;
    float k[T][128], q[128], score[T], plain_score[T];
    for (int t = 0; t < T; t++) {
        for (int d = 0; d < head_dim; d++) k[t][d] = (float)(2 * urand() - 1) * (t % 4 ? 1.0f : 0.01f);
        kvstream_append(&s, k[t]);
        kvstream_append(&plain, k[t]);
    }
    for (int d = 0; d < head_dim; d++) q[d] = (float)((2 * urand() - 1) * 3);
    q[3] = 0.5f * (float)(2 * urand() - 1); // small numbers round too
    kvstream_scores(&s, 0, q, score, T);
    kvstream_scores(&plain, 0, q, plain_score, T);
    CHECK(s.ops->bytes(s.state) == plain.ops->bytes(plain.state), "%s stores more than %s", spec, names[f]);
    int differs = 0;
    for (int t = 0; t < T; t++) {
        float y[128], want = 0;
        s.ops->read(s.state, 0, t, y);
        for (int b = 0; b < head_dim / 32; b++) {
            const float *xb = k[t] + 32 * b, *yb = y + 32 * b, *qb = q + 32 * b;
            // the key's scale and minimum, as the quantiser stores them
            float amax = 0, extreme = 0, mn = INFINITY, mx = -INFINITY;
            for (int j = 0; j < 32; j++) {
                if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), extreme = xb[j];
                mn = fminf(mn, xb[j]), mx = fmaxf(mx, xb[j]);
            }
            float dk, mk = 0;
            switch (f) {
            case Q8_0: dk = fp16(amax / 127); break;
            case Q4_0: dk = fp16(extreme / -8); break;
            case Q5_0: dk = fp16(extreme / -16); break;
            case Q4_1: dk = fp16((mx - mn) / 15), mk = fp16(mn); break;
            case Q5_1: dk = fp16((mx - mn) / 31), mk = fp16(mn); break;
            default: { // the decoded entries tell d: the largest |x̂| over its entry
                int jm = 0;
                for (int j = 1; j < 32; j++)
                    if (fabsf(yb[j]) > fabsf(yb[jm])) jm = j;
                dk = 0;
                for (int e = 0; e < 16 && dk == 0; e++) {
                    const float c = yb[jm] / (float)iq4nl[e];
                    int all = 1;
                    for (int j = 0; j < 32 && all; j++) {
                        const float r = yb[j] / c;
                        all = fabsf(r - roundf(r)) < 1e-3f;
                    }
                    if (all && fp16(c) == c) dk = c;
                }
            }
            }
            // the query block in q8: d = absmax/127, codes roundf(x/d)
            float qmax = 0;
            for (int j = 0; j < 32; j++) qmax = fmaxf(qmax, fabsf(qb[j]));
            const float dq = qmax / 127, idq = dq != 0 ? 1 / dq : 0;
            long dot = 0, qsum = 0;
            for (int j = 0; j < 32; j++) {
                const long qc = lroundf(qb[j] * idq);
                const long level = lroundf((yb[j] - mk) / dk);
                CHECK(fabsf(level * dk + mk - yb[j]) <= 1e-6f * fabsf(yb[j]), "%s t=%d: x̂=%g is not a level", spec, t, yb[j]);
                dot += level * qc;
                qsum += qc;
            }
            const float dd = dk * fp16(dq);
            if (with_min)
                want += dd * (float)dot + mk * fp16((float)qsum * dq);
            else if (f == Q4_0)
                want += (float)dot * dk * fp16(dq);
            else
                want += dd * (float)dot;
        }
        CHECK(score[t] == want, "%s hd=%d t=%d: score %.9g, by hand %.9g", spec, head_dim, t, score[t], want);
        differs |= score[t] != plain_score[t];
    }
    CHECK(differs, "%s: rounding the query changed no score", spec);
    kvstream_free(&s);
    kvstream_free(&plain);
}

static void test_bad_options(void) {
    const char *bad[] = {"q4_0:qround=q4", "q4_0:qround", "q8_0:search", "iq4_nl:search=1", "iq4_nl:qround=q8_1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        KVStream s;
        char err[256] = "";
        const int rc = kvstream_init(&s, SPEC(bad[i]), KV_ROLE_KEY, 1, 32, 4, err, sizeof err);
        CHECK(rc != 0 && strlen(err) > 10, "'%s' was accepted", bad[i]);
        if (rc == 0) kvstream_free(&s);
    }
    KVStream s;
    must_init(&s, "iq4_nl:qround=q8,search", 32, 4);
    CHECK(strcmp(s.spec, "iq4_nl:search,qround=q8") == 0, "iq4_nl:qround=q8,search normalises to '%s'", s.spec);
    kvstream_free(&s);
}

int main(void) {
    test_iq4nl_reference();
    for (int f = 0; f < N_FORMATS; f++) {
        test_qround(f, 32);
        test_qround(f, 64);
    }
    test_bad_options();
    if (failures) {
        fprintf(stderr, "test_codec_llama: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_codec_llama: ok\n");
    return 0;
}
