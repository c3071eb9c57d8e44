// How eval scores a text, against the evaluator run the plain way (eval_tokens with a stored fp32
// trace, every step's distributions held):
// 1. the lockstep reference (eval_windows: the fp32 run beside the schemes, a span at a time) gives
//    the stored trace's loss, KL, top-1 agreement, interval and KL tail to the bit;
// 2. KL's tail: 0 everywhere for fp32 itself; p99 ≤ max, mean ≤ max; and p99 by its nearest-rank rule
//    from the per-step KL that a window of one step each makes (the KL of one step is its mean);
// 3. --score second-half (eval_second_half) against its definition, recomputed from eval_tokens'
//    per-step NLLs: each chunk's first token made BOS (kept, for a model without BOS), the mean NLL of
//    steps N/2 .. N − 2 of every whole chunk, the rest of the text left out.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "eval.h"
#include "random_model.h"
#include "sort_doubles.h"
#include "spec_text.h"

enum { T = 5 * EVAL_SPAN + 45, VOCAB = 256, CHUNK = 40 };

static int same(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void check_lockstep(const Model *m, const int32_t *text) {
    char err[256];
    const char *names[] = {"int:bits=2", "q4_0", "kivi:bits=2"};
    for (int s = 0; s < 3; s++) {
        EvalTrace ref;
        EvalResult r_ref, stored, live_ref, live;
        CHECK(eval_trace_alloc(&ref, m, T) == 0, "out of memory");
        CHECK(eval_tokens(m, text, T, SPEC("fp32"), SPEC("fp32"), 1, 0, &ref, NULL, &r_ref, err, sizeof err) == 0, "%s", err);
        CHECK(eval_tokens(m, text, T, SPEC(names[s]), SPEC(names[s]), 1, 0, NULL, &ref, &stored, err, sizeof err) == 0,
              "%s", err);
        const CodecSpec *k = SPEC(names[s]);
        CHECK(eval_windows(m, text, T, T, &k, &k, 1, 2, 0, &live_ref, &live, NULL, err, sizeof err) == 0, "%s", err);
        CHECK(same(live_ref.loss, r_ref.loss), "%s: fp32's loss %.9f lockstep, %.9f stored", names[s], live_ref.loss, r_ref.loss);
        CHECK(same(live.loss, stored.loss) && same(live.kl, stored.kl) && same(live.top1_agree, stored.top1_agree) &&
                  same(live.delta_lo, stored.delta_lo) && same(live.delta_hi, stored.delta_hi) &&
                  same(live.kl_p99, stored.kl_p99) && same(live.kl_max, stored.kl_max),
              "%s: lockstep loss %.9f kl %.9g p99 %.9g max %.9g top1 %.6f, stored %.9f %.9g %.9g %.9g %.6f", names[s],
              live.loss, live.kl, live.kl_p99, live.kl_max, live.top1_agree, stored.loss, stored.kl, stored.kl_p99,
              stored.kl_max, stored.top1_agree);
        CHECK(live.kl > 0 && live.kl <= live.kl_max && live.kl_p99 <= live.kl_max, "%s: kl %g, p99 %g, max %g", names[s],
              live.kl, live.kl_p99, live.kl_max);
        CHECK(r_ref.kl == 0 && r_ref.kl_p99 == 0 && r_ref.kl_max == 0, "fp32 against nothing has a KL tail");
        eval_trace_free(&ref);
    }
    // fp32 against its own reference: every step's KL exactly 0, so its tail too.
    const CodecSpec *f = SPEC("fp32");
    EvalResult a, b;
    CHECK(eval_windows(m, text, T, T, &f, &f, 1, 1, 0, &a, &b, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(b.kl == 0 && b.kl_p99 == 0 && b.kl_max == 0 && b.loss == a.loss, "fp32 beside fp32: kl %g, p99 %g, max %g",
          b.kl, b.kl_p99, b.kl_max);
}

// Under a vocabulary without BOS, windows of 2 tokens predict one step each from the token before:
// every window's KL is one step's, so the text's p99 and max follow from them by the nearest-rank rule.
static void check_tail(Model *m, const int32_t *text) {
    enum { N = 301 };
    char err[256];
    const CodecSpec *k = SPEC("int:bits=2");
    const int bos = m->bos;
    m->bos = -1;
    double kl[N - 1];
    for (int t = 0; t + 1 < N; t++) { // step t alone: text[t] predicting text[t + 1]
        EvalResult r0, r1;
        CHECK(eval_windows(m, text + t, 2, 2, &k, &k, 1, 1, 0, &r0, &r1, NULL, err, sizeof err) == 0, "%s", err);
        kl[t] = r1.kl;
    }
    EvalResult r0, r1;
    CHECK(eval_windows(m, text, N, 2, &k, &k, 1, 1, 0, &r0, &r1, NULL, err, sizeof err) == 0, "%s", err);
    m->bos = bos;
    sort_doubles(kl, N - 1);
    const int rank = ((N - 1) * 99 + 99) / 100; // ceil(0.99 · 300) = 297: not the floor rule's 298th, nor the second largest
    CHECK(kl[0] < kl[N - 2], "the steps' KL does not vary");
    CHECK(same(r1.kl_p99, kl[rank - 1]) && same(r1.kl_max, kl[N - 2]), "windows of 2: p99 %.9g max %.9g, steps say %.9g %.9g",
          r1.kl_p99, r1.kl_max, kl[rank - 1], kl[N - 2]);
}

// eval_second_half against its definition on text[0..n), for the model's BOS (or none).
static void check_second_half(const Model *m, const int32_t *text, int n) {
    char err[256];
    const CodecSpec *k = SPEC("q4_0");
    EvalResult ref, out;
    CHECK(eval_second_half(m, text, n, CHUNK, &k, &k, 1, 1, 0, &ref, &out, err, sizeof err) == 0, "%s", err);
    double sum_ref = 0, sum = 0;
    int scored = 0, chunks = 0;
    for (int start = 0; start + CHUNK <= n; start += CHUNK, chunks++) {
        int32_t chunk[CHUNK];
        memcpy(chunk, text + start, sizeof chunk);
        if (m->bos >= 0) chunk[0] = m->bos;
        EvalTrace a, b;
        EvalResult ra, rb;
        CHECK(eval_trace_alloc_nll(&a, m, CHUNK) == 0 && eval_trace_alloc_nll(&b, m, CHUNK) == 0, "out of memory");
        CHECK(eval_tokens(m, chunk, CHUNK, SPEC("fp32"), SPEC("fp32"), 1, 0, &a, NULL, &ra, err, sizeof err) == 0 &&
                  eval_tokens(m, chunk, CHUNK, k, k, 1, 0, &b, NULL, &rb, err, sizeof err) == 0,
              "%s", err);
        for (int t = CHUNK / 2; t <= CHUNK - 2; t++) sum_ref += a.nll[t], sum += b.nll[t], scored++;
        eval_trace_free(&a);
        eval_trace_free(&b);
    }
    CHECK(chunks == n / CHUNK && scored == chunks * (CHUNK - 1 - CHUNK / 2), "%d chunks", chunks);
    CHECK(fabs(ref.loss - sum_ref / scored) <= 1e-12 && fabs(out.loss - sum / scored) <= 1e-12,
          "bos %d: second half %.12f and %.12f, by definition %.12f and %.12f", m->bos, ref.loss, out.loss,
          sum_ref / scored, sum / scored);
    CHECK(ref.tokens == chunks * CHUNK, "%d tokens run, not %d", ref.tokens, chunks * CHUNK);
    // Shorter than one chunk: refused in one line.
    CHECK(eval_second_half(m, text, CHUNK - 1, CHUNK, &k, &k, 1, 1, 0, &ref, &out, err, sizeof err) == -1 &&
              strstr(err, "fewer than one chunk"),
          "a text shorter than a chunk: %s", err);
}

int main(void) {
    ModelConfig c = small_config();
    Model m;
    random_model(&m, &c, 41);
    int32_t text[T];
    uint64_t rng = 5;
    text[0] = MICRO_BOS;
    for (int t = 1; t < T; t++) text[t] = (int32_t)(2 + check_next(&rng) % (VOCAB - 2));
    check_lockstep(&m, text);
    check_tail(&m, text);
    check_second_half(&m, text, T);
    m.bos = -1; // a vocabulary without BOS (Qwen's): each chunk as the text has it
    check_second_half(&m, text, T);
    model_free(&m);
    if (failures) fprintf(stderr, "%d failures\n", failures);
    else printf("eval scoring: lockstep = stored to the bit; KL's tail; second-half by its definition\n");
    return failures != 0;
}
