// fp16, bf16 and fp8 (e4m3 / e5m2, unscaled and scale=token) as cache codecs: representable
// numbers come back exactly, others within half a unit in the last place (computed here from each
// format's precision), saturation, zero vectors with a per-token scale, and bytes per number; and
// fp16's qround=f16 (llama.cpp's f16 arithmetic), against the plain fp16 stream given the query and
// the weights rounded by hand.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "quant.h"

#include "check.h"

static uint64_t rng_state = 0xda942042e4dd58b5ull;
static double urand(void) { return check_uniform(&rng_state); }

static void must_init_role(KVStream *s, const char *spec, KVRole role, int n_heads, int head_dim, int capacity) {
    char err[256];
    if (kvstream_init(s, SPEC(spec), role, n_heads, head_dim, capacity, err, sizeof err)) {
        fprintf(stderr, "cannot create '%s': %s\n", spec, err);
        exit(1);
    }
}

static void must_init(KVStream *s, const char *spec, int n_heads, int head_dim, int capacity) {
    must_init_role(s, spec, KV_ROLE_VALUE, n_heads, head_dim, capacity);
}

// A format by its precision: `mbits` fraction bits, smallest normal 2^emin, largest finite `max`.
typedef struct {
    const char *spec;
    int mbits, emin;
    double max;
    int bytes_per_number;
    int scaled;
} Format;

static const Format formats[] = {
    {"fp16", 10, -14, 65504.0, 2, 0},
    {"bf16", 7, -126, 3.3895313892515355e38, 2, 0},
    {"fp8:e4m3", 3, -6, 448.0, 1, 0},
    {"fp8:e5m2", 2, -14, 57344.0, 1, 0},
    {"fp8:e4m3,scale=token", 3, -6, 448.0, 1, 1},
    {"fp8:e5m2,scale=token", 2, -14, 57344.0, 1, 1},
    // one float codec: fp16 takes scale=token too (bf16 does as well, but its range is fp32's, so
    // this test's numbers beyond the range would be infinities already)
    {"fp16:scale=token", 10, -14, 65504.0, 2, 1},
};

// Half a unit in the last place at |x| (absolute, in the subnormal range too).
static double half_ulp(const Format *f, double x) {
    int e;
    frexp(fabs(x), &e); // |x| in [2^(e-1), 2^e)
    const int exp = e - 1 < f->emin ? f->emin : e - 1;
    return ldexp(1.0, exp - f->mbits - 1);
}

// A random number the format holds exactly: an (mbits+1)-bit integer times a power of two.
static float representable(const Format *f, int lo_exp, int hi_exp) {
    const int m = (int)(urand() * (1 << (f->mbits + 1)));
    const int e = lo_exp + (int)(urand() * (hi_exp - lo_exp + 1));
    return (float)(ldexp(m, e - f->mbits) * (urand() < 0.5 ? -1 : 1));
}

static void test_format(const Format *f, int head_dim) {
    enum { H = 3, T = 40 };
    KVStream s;
    must_init(&s, f->spec, H, head_dim, T);
    float *x = malloc(sizeof(float) * (size_t)T * H * head_dim);
    float y[128];
    for (int t = 0; t < T; t++) {
        float *v = x + (size_t)t * H * head_dim;
        for (int i = 0; i < H * head_dim; i++) {
            if (t % 4 == 0) { // representable without scaling (a scale may still apply: see below)
                v[i] = representable(f, f->emin, f->mbits + 3 < 8 ? 6 : 8);
            } else {
                const double mag = pow(10.0, f->scaled ? -4.0 + 8.0 * urand() : -3.0 + 5.0 * urand());
                v[i] = (float)(mag * (2.0 * urand() - 1.0));
            }
        }
        if (t == 1) memset(v, 0, sizeof(float) * (size_t)H * head_dim); // all zero
        if (t == 2) for (int i = 0; i < H * head_dim; i++) v[i] = (float)(f->max * 4 * (i % 2 ? 1 : -1)); // beyond the range
        kvstream_append(&s, v);
    }
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            const float *v = x + ((size_t)t * H + h) * head_dim;
            s.ops->read(s.state, h, t, y);
            double amax = 0;
            for (int d = 0; d < head_dim; d++) amax = fmax(amax, fabs(v[d]));
            for (int d = 0; d < head_dim; d++) {
                if (t == 1) {
                    CHECK(y[d] == 0.0f, "%s: zero decodes to %g", f->spec, y[d]);
                    continue;
                }
                if (!f->scaled && t == 2) {
                    // Beyond the range: fp8 saturates to ±max; fp16 and bf16 are IEEE and give ±inf.
                    const double want = f->bytes_per_number == 1 ? f->max : INFINITY;
                    CHECK(fabs(y[d]) == want && (y[d] > 0) == (v[d] > 0), "%s: %g decodes to %g", f->spec, v[d], y[d]);
                    continue;
                }
                CHECK(isfinite(y[d]), "%s t=%d: %g decodes to %g", f->spec, t, v[d], y[d]);
                if (!f->scaled) {
                    if (t % 4 == 0) {
                        CHECK(y[d] == v[d], "%s: representable %a decodes to %a", f->spec, v[d], y[d]);
                        continue;
                    }
                    const double bound = half_ulp(f, v[d]) * (1 + 1e-9);
                    CHECK(fabs(y[d] - v[d]) <= bound, "%s: %a decodes to %a (bound %g)", f->spec, v[d], y[d], bound);
                } else {
                    // x is divided by s' = fp16(s), s = amax / max, cast, and multiplied back: half an ulp of
                    // x (relative), or of the subnormal step times s'; the largest numbers may saturate by
                    // how much s' falls short of s (2^-11 relative, or 2^-25 absolute when s' is subnormal).
                    const double sc = amax / f->max;
                    const double ds = fmax(0x1p-11, 0x1p-25 / sc);
                    const double bound = ldexp(1.0, -f->mbits - 1) * fabs(v[d]) + amax * ds * 1.01 +
                                         sc * (1 + ds) * ldexp(1.0, f->emin - f->mbits - 1) * 1.01 + amax * 1e-6;
                    CHECK(fabs(y[d] - v[d]) <= bound, "%s t=%d: %g decodes to %g (bound %g)", f->spec, t, v[d], y[d], bound);
                }
            }
        }
    }
    const size_t want = (size_t)T * H * ((size_t)head_dim * f->bytes_per_number + (f->scaled ? 2 : 0));
    CHECK(s.ops->bytes(s.state) == want, "%s: %zu bytes, want %zu", f->spec, s.ops->bytes(s.state), want);
    free(x);
    kvstream_free(&s);
}

// With scale=token a vector whose largest number is exactly the format's max and whose numbers are
// representable is stored with scale 1 and comes back exactly.
static void test_scaled_exact(void) {
    for (int i = 4; i < 6; i++) {
        const Format *f = &formats[i];
        KVStream s;
        must_init(&s, f->spec, 1, 32, 10);
        float v[32], y[32];
        for (int t = 0; t < 10; t++) {
            for (int d = 0; d < 32; d++) v[d] = representable(f, f->emin, 5);
            v[7] = (float)(t % 2 ? f->max : -f->max);
            kvstream_append(&s, v);
            s.ops->read(s.state, 0, t, y);
            for (int d = 0; d < 32; d++) CHECK(y[d] == v[d], "%s: %a decodes to %a", f->spec, v[d], y[d]);
        }
        kvstream_free(&s);
    }
}

static float round_f16(float x) {
    return (float)quant_fp16_to_fp32(quant_fp32_to_fp16(x));
}

// qround=f16 gives, bit for bit, the plain fp16 stream's scores of the query rounded to fp16 and its
// mix of the weights rounded to fp16 (the rounding is all it adds), for keys and values, at micro's
// head_dim, latent attention's (a key stream mixed) and one past the mix kernel's 64; and it does
// round: some score and some mix differ from the unrounded ones.
static void test_qround_f16(void) {
    enum { T = 45, H = 2 };
    const int dims[] = {32, 64, 80};
    for (int role = 0; role < 2; role++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
            const int hd = dims[di];
            const KVRole r = role ? KV_ROLE_VALUE : KV_ROLE_KEY;
            KVStream s, plain;
            must_init_role(&s, "fp16:qround=f16", r, H, hd, T);
            must_init_role(&plain, "fp16", r, H, hd, T);
            CHECK(strcmp(s.spec, "fp16:qround=f16") == 0, "fp16:qround=f16 normalises to '%s'", s.spec);
            float v[H * 80], q[80], qr[80], p[T], pr[T], a[T], b[T], ma[80], mb[80], direct[80];
            for (int t = 0; t < T; t++) {
                for (int i = 0; i < H * hd; i++) v[i] = (float)(2 * urand() - 1);
                kvstream_append(&s, v);
                kvstream_append(&plain, v);
            }
            double sum = 0;
            for (int t = 0; t < T; t++) sum += p[t] = (float)urand();
            for (int t = 0; t < T; t++) pr[t] = round_f16(p[t] = (float)(p[t] / sum));
            for (int d = 0; d < hd; d++) qr[d] = round_f16(q[d] = (float)(3 * (2 * urand() - 1)));
            for (int h = 0; h < H; h++) {
                kvstream_scores(&s, h, q, a, T);
                kvstream_scores(&plain, h, qr, b, T);
                int scores_differ = 0, mix_differs = 0;
                for (int t = 0; t < T; t++)
                    CHECK(a[t] == b[t], "qround=f16 %s hd=%d head %d t=%d: score %a, plain fp16 of the rounded query %a",
                          role ? "values" : "keys", hd, h, t, a[t], b[t]);
                kvstream_scores(&plain, h, q, b, T);
                for (int t = 0; t < T; t++) scores_differ |= a[t] != b[t];
                kvstream_mix(&s, h, p, ma, T);
                kvstream_mix(&plain, h, pr, mb, T);
                kvstream_mix(&plain, h, p, direct, T);
                for (int d = 0; d < hd; d++) {
                    CHECK(ma[d] == mb[d], "qround=f16 %s hd=%d head %d d=%d: mix %a, plain fp16 of the rounded weights %a",
                          role ? "values" : "keys", hd, h, d, ma[d], mb[d]);
                    mix_differs |= ma[d] != direct[d];
                }
                CHECK(scores_differ && mix_differs, "qround=f16 %s hd=%d head %d: rounding changed no score (%d) or no mix (%d)",
                      role ? "values" : "keys", hd, h, scores_differ, mix_differs);
            }
            kvstream_free(&s);
            kvstream_free(&plain);
        }
    KVStream s;
    must_init(&s, "fp16:qround=f16,scale=token", 1, 32, 4);
    CHECK(strcmp(s.spec, "fp16:scale=token,qround=f16") == 0, "fp16:qround=f16,scale=token normalises to '%s'", s.spec);
    kvstream_free(&s);
    const char *bad[] = {"fp16:qround=q8", "bf16:qround=f16", "fp8:e4m3,qround=f16", "fp32:qround=f16", "fp16:qround"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        const int rc = kvstream_init(&s, SPEC(bad[i]), KV_ROLE_KEY, 1, 32, 4, err, sizeof err);
        CHECK(rc != 0 && strlen(err) > 10, "'%s' was accepted", bad[i]);
        if (rc == 0) kvstream_free(&s);
    }
}

int main(void) {
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        test_format(&formats[i], 32);
        test_format(&formats[i], 6);
    }
    test_scaled_exact();
    test_qround_f16();
    if (failures) {
        fprintf(stderr, "test_codec_floats: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_codec_floats: ok\n");
    return 0;
}
