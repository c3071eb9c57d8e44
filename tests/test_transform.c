// The stream transforms (kvtransform.h) against independent truths: the Sylvester Hadamard's
// H·Hᵀ = n·I in integers; the rotations orthogonal; a rotation under the exact fp32 codec reads
// back, scores and mixes as the plain stream does (to rounding); sink tokens read back at fp16
// exactly, and the tokens after them exactly as without a sink; outlier entries read back at fp16
// exactly, the rest of their head within the codec's step of the range without them; the bytes
// match the formula; bad options get one line.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec_dispatch.h"
#include "kvcache.h"
#include "kvtransform.h"
#include "quant.h"

enum { HEADS = 3, HD = 32, N = HEADS * HD, T = 40 };

static float fp16_of(float x) { return quant_fp16_to_fp32(quant_fp32_to_fp16(x)); }

static int open_stream(KVStream *s, const char *spec, KVRole role, int capacity) {
    char err[256];
    if (!kvstream_init(s, SPEC(spec), role, HEADS, HD, capacity, err, sizeof err)) return 0;
    CHECK(0, "%s: %s", spec, err);
    return -1;
}

static void fill(float *x, int n, uint64_t *rng) {
    for (int i = 0; i < n; i++) x[i] = (float)(check_uniform(rng) * 2.0 - 1.0);
}

static void check_hadamard(void) {
    for (int n = 1; n <= 64; n *= 2) {
        signed char h[64 * 64];
        transform_sylvester(n, h);
        int off = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                int dot = 0;
                for (int k = 0; k < n; k++) dot += h[i * n + k] * h[j * n + k];
                off += dot != (i == j ? n : 0);
            }
        CHECK(!off, "Sylvester H of order %d: H·Hᵀ differs from %d·I in %d entries", n, n, off);
    }
    // The float matrices: orthogonal to float rounding; the random one fixed by its seed alone.
    for (int kind = 1; kind <= 2; kind++) {
        const float *m = transform_rotation(kind, 7, HD);
        CHECK(m != NULL, "rotation %d", kind);
        if (!m) continue;
        double worst = 0.0;
        for (int i = 0; i < HD; i++)
            for (int j = 0; j < HD; j++) {
                double dot = 0.0;
                for (int k = 0; k < HD; k++) dot += (double)m[i * HD + k] * m[j * HD + k];
                worst = fmax(worst, fabs(dot - (i == j)));
            }
        CHECK(worst < 1e-6, "rotation %d: M·Mᵀ off identity by %g", kind, worst);
        // transform_rotate adds column by column: each y_i the plain sum in order of j, to the bit,
        // in every kernel set this CPU runs (codec_projection).
        float x[HD], y[HD];
        for (int i = 0; i < HD; i++) x[i] = (float)sin(1.7 * i + kind);
        for (int isa = ISA_PORTABLE; isa <= ISA_AVX512; isa++) {
            if (!codec_isa_available((Isa)isa)) continue;
            codec_force_isa(isa);
            int differ = 0;
            for (int back = 0; back <= 1; back++) {
                transform_rotate(m, HD, x, y, back);
                for (int i = 0; i < HD; i++) {
                    float acc = 0.0f;
                    for (int j = 0; j < HD; j++) acc += (back ? m[j * HD + i] : m[i * HD + j]) * x[j];
                    differ += memcmp(&acc, &y[i], sizeof acc) != 0;
                }
            }
            CHECK(!differ, "rotation %d, %s kernels: %d numbers of M x and Mᵀ x differ from the sums in order", kind,
                  cpu_isa_name((Isa)isa), differ);
        }
        codec_force_isa(-1);
    }
    CHECK(transform_rotation(2, 7, HD) == transform_rotation(2, 7, HD), "one shared copy per rotation");
    const float *a = transform_rotation(2, 7, HD), *b = transform_rotation(2, 8, HD);
    CHECK(a && b && memcmp(a, b, sizeof(float) * HD * HD) != 0, "two seeds, one matrix");
}

// Under fp32, a rotation changes nothing but rounding: read-back, scores (a key stream) and mixes
// (a value stream: the roles attention reads them in).
static void check_rotation_exactness(const char *rot_spec) {
    KVStream plain[2], rot[2];
    for (int r = 0; r < 2; r++)
        if (open_stream(&plain[r], "fp32", (KVRole)r, T) || open_stream(&rot[r], rot_spec, (KVRole)r, T)) return;
    uint64_t rng = 11;
    float x[N], y[HD], z[HD], q[HD], p[T], sa[T], sb[T];
    double worst = 0.0;
    for (int t = 0; t < T; t++) {
        fill(x, N, &rng);
        for (int r = 0; r < 2; r++) kvstream_append(&plain[r], x), kvstream_append(&rot[r], x);
    }
    for (int h = 0; h < HEADS; h++) {
        for (int t = 0; t < T; t++)
            for (int r = 0; r < 2; r++) {
                plain[r].ops->read(plain[r].state, h, t, y);
                rot[r].ops->read(rot[r].state, h, t, z);
                for (int d = 0; d < HD; d++) worst = fmax(worst, fabs(y[d] - z[d]));
            }
        fill(q, HD, &rng);
        kvstream_scores(&plain[0], h, q, sa, T);
        kvstream_scores(&rot[0], h, q, sb, T);
        for (int j = 0; j < T; j++) worst = fmax(worst, fabs(sa[j] - sb[j]));
        for (int j = 0; j < T; j++) p[j] = (float)check_uniform(&rng);
        kvstream_mix(&plain[1], h, p, y, T);
        kvstream_mix(&rot[1], h, p, z, T);
        for (int d = 0; d < HD; d++) worst = fmax(worst, fabs(y[d] - z[d]));
    }
    CHECK(worst < 2e-5, "%s: differs from plain fp32 by %g", rot_spec, worst);
    for (int r = 0; r < 2; r++) {
        CHECK(rot[r].ops->bytes(rot[r].state) == plain[r].ops->bytes(plain[r].state), "%s: a rotation adds bytes",
              rot_spec);
        kvstream_free(&plain[r]);
        kvstream_free(&rot[r]);
    }
}

static void check_sink(void) {
    const int sink = 5;
    KVStream plain, sunk;
    if (open_stream(&plain, "int:bits=3", KV_ROLE_VALUE, T) || open_stream(&sunk, "int:bits=3,sink=5", KV_ROLE_VALUE, T))
        return;
    uint64_t rng = 5;
    float x[T][N], y[HD], z[HD], p[T], q[HD], sa[T], sb[T];
    for (int t = 0; t < T; t++) {
        fill(x[t], N, &rng);
        kvstream_append(&plain, x[t]);
        kvstream_append(&sunk, x[t]);
    }
    int exact = 0, same = 0;
    for (int h = 0; h < HEADS; h++)
        for (int t = 0; t < T; t++) {
            sunk.ops->read(sunk.state, h, t, z);
            plain.ops->read(plain.state, h, t, y);
            for (int d = 0; d < HD; d++) {
                if (t < sink) exact += z[d] == fp16_of(x[t][h * HD + d]);
                else same += z[d] == y[d];
            }
        }
    CHECK(exact == HEADS * sink * HD, "sink: %d of %d sink numbers read back at fp16", exact, HEADS * sink * HD);
    CHECK(same == HEADS * (T - sink) * HD, "sink: %d of %d later numbers as without a sink", same, HEADS * (T - sink) * HD);
    // Scores: sink tokens against their exact copy, the rest the codec's own bits.
    fill(q, HD, &rng);
    kvstream_scores(&plain, 1, q, sa, T);
    kvstream_scores(&sunk, 1, q, sb, T);
    CHECK(check_same_bits(sa + sink, sb + sink, T - sink), "sink: later scores are not the codec's");
    for (int j = 0; j < sink; j++) {
        float acc = 0.0f;
        for (int d = 0; d < HD; d++) acc += q[d] * fp16_of(x[j][HD + d]);
        CHECK(sb[j] == acc, "sink: score %d %g, want %g", j, sb[j], acc);
    }
    // Mix: the exact sink vectors weighted in, to rounding.
    for (int j = 0; j < T; j++) p[j] = (float)check_uniform(&rng);
    kvstream_mix(&sunk, 2, p, z, T);
    for (int d = 0; d < HD; d++) {
        double want = 0.0;
        for (int j = 0; j < T; j++) {
            sunk.ops->read(sunk.state, 2, j, y);
            want += (double)p[j] * y[d];
        }
        CHECK(fabs(z[d] - want) < 1e-5, "sink: mix[%d] %g, want %g", d, z[d], want);
    }
    const size_t extra = sunk.ops->bytes(sunk.state) - plain.ops->bytes(plain.state);
    CHECK(extra == (size_t)sink * N * 2, "sink: %zu bytes beyond the codec's, want %d", extra, sink * N * 2);
    kvstream_free(&plain);
    kvstream_free(&sunk);
}

static void check_outliers(void) {
    // 96 numbers a token at 4%: round(96·4/200) = 2 at each end.
    KVStream plain, sparse;
    if (open_stream(&plain, "int:bits=4", KV_ROLE_KEY, T) || open_stream(&sparse, "int:bits=4,outliers=4", KV_ROLE_KEY, T))
        return;
    uint64_t rng = 9;
    int exact = 0, within = 0, counted = 0;
    for (int t = 0; t < T; t++) {
        float x[N], y[HD];
        fill(x, N, &rng);
        x[(t * 7) % N] = 40.0f + t; // planted: far outside the rest
        x[(t * 13 + 5) % N] = -30.0f - t;
        kvstream_append(&plain, x);
        kvstream_append(&sparse, x);
        // The two smallest and two largest entries: order statistics found independently.
        int order[N];
        for (int i = 0; i < N; i++) order[i] = i;
        for (int i = 0; i < N; i++)
            for (int j = i + 1; j < N; j++)
                if (x[order[j]] < x[order[i]] || (x[order[j]] == x[order[i]] && order[j] < order[i])) {
                    int s = order[i];
                    order[i] = order[j], order[j] = s;
                }
        int is_outlier[N] = {0};
        is_outlier[order[0]] = is_outlier[order[1]] = is_outlier[order[N - 1]] = is_outlier[order[N - 2]] = 1;
        for (int h = 0; h < HEADS; h++) {
            sparse.ops->read(sparse.state, h, t, y);
            float amax = 0.0f; // the head's range without its outliers: the codec's step
            for (int d = 0; d < HD; d++)
                if (!is_outlier[h * HD + d]) amax = fmaxf(amax, fabsf(x[h * HD + d]));
            for (int d = 0; d < HD; d++) {
                const int i = h * HD + d;
                if (is_outlier[i]) {
                    exact += y[d] == fp16_of(x[i]);
                    counted++;
                } else {
                    within += fabsf(y[d] - x[i]) <= amax / 7.0f * 0.5f * 1.01f + 1e-6f;
                }
            }
        }
    }
    CHECK(counted == 4 * T && exact == counted, "outliers: %d of %d read back at fp16 (want %d)", exact, counted, 4 * T);
    CHECK(within == T * (N - 4), "outliers: %d of %d others within half a step of the range without outliers", within,
          T * (N - 4));
    const size_t extra = sparse.ops->bytes(sparse.state) - plain.ops->bytes(plain.state);
    CHECK(extra == (size_t)T * 4 * (2 + 1), "outliers: %zu bytes beyond the codec's, want %d", extra, T * 4 * 3);
    kvstream_free(&plain);
    kvstream_free(&sparse);
}

static void check_errors(void) {
    static const struct {
        const char *spec;
        KVRole role;
        int head_dim;
        const char *message;
    } bad[] = {
        {"int:bits=4,rot=hadamard", KV_ROLE_KEY, 24, "power of two"},
        {"int:bits=4,rot=random:x", KV_ROLE_KEY, 32, "rot=random:SEED"},
        {"int:bits=4,rot=spin", KV_ROLE_KEY, 32, "rot=hadamard, rot=random:SEED"},
        {"int:bits=4,prerope", KV_ROLE_VALUE, 32, "keys"},
        {"int:bits=4,sink=65", KV_ROLE_KEY, 32, "out of range"},
        {"int:bits=4,outliers=0.5", KV_ROLE_KEY, 32, "keeps no entry"},
        {"int:bits=4,outliers=30", KV_ROLE_KEY, 32, "percent"},
        {"int:bits=4,outliers=", KV_ROLE_KEY, 32, "empty option value"},
        {"int:bits=4,outliers=1e", KV_ROLE_KEY, 32, "percent"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        KVStream s;
        CodecSpec parsed; // a spec's form is the parser's to refuse, its values the stream's
        int rc = spec_parse(bad[i].spec, &parsed, err, sizeof err);
        if (!rc) rc = kvstream_init(&s, &parsed, bad[i].role, 2, bad[i].head_dim, 4, err, sizeof err);
        CHECK(rc != 0 && strstr(err, bad[i].message), "%s: rc %d, '%s' (want '%s')", bad[i].spec, rc, err,
              bad[i].message);
        if (!rc) kvstream_free(&s);
    }
    // The normalised spec names every transform and reads back as itself.
    KVStream s;
    if (!open_stream(&s, "q4_0:outliers=2,sink=2,rot=random:3", KV_ROLE_KEY, 4)) {
        CHECK(strcmp(s.spec, "q4_0:rot=random:3,sink=2,outliers=2") == 0, "normalised '%s'", s.spec);
        KVStream again;
        if (!open_stream(&again, s.spec, KV_ROLE_KEY, 4)) {
            CHECK(strcmp(again.spec, s.spec) == 0, "normalised twice: '%s'", again.spec);
            kvstream_free(&again);
        }
        kvstream_free(&s);
    }
    // A family's default transform turned off stays off when its normalised spec is read again.
    if (!open_stream(&s, "quarot:rot=none,bits=2", KV_ROLE_VALUE, 4)) {
        CHECK(strcmp(s.spec, "quarot:bits=2,rot=none") == 0, "quarot without rotation: '%s'", s.spec);
        KVStream again;
        if (!open_stream(&again, s.spec, KV_ROLE_VALUE, 4)) {
            CHECK(strcmp(again.spec, s.spec) == 0, "quarot without rotation, twice: '%s'", again.spec);
            kvstream_free(&again);
        }
        kvstream_free(&s);
    }
    if (!open_stream(&s, "fp16:prerope", KV_ROLE_KEY, 4)) {
        CHECK(s.prerope && strcmp(s.spec, "fp16:prerope") == 0, "prerope: flag %d, '%s'", s.prerope, s.spec);
        kvstream_free(&s);
    }
}

int main(void) {
    check_hadamard();
    check_rotation_exactness("fp32:rot=hadamard");
    check_rotation_exactness("fp32:rot=random:12345");
    check_sink();
    check_outliers();
    check_errors();
    if (failures) fprintf(stderr, "test_transform: %d failures\n", failures);
    return failures != 0;
}
