#include "calib_windows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "rng.h"
#include "tokenizer.h"

int calib_corpus_ids(const struct Tokenizer *tok, int32_t bos, const unsigned char *train, size_t len, int32_t **ids,
                     size_t *n, char *err, size_t errlen) {
    *ids = NULL, *n = 0;
    size_t at = 0;
    while (at < len) {
        if (train[at] == MICRO_BOS) at++; // the byte corpus's separator: the model's BOS stands for it
        const unsigned char *end = memchr(train + at, MICRO_BOS, len - at);
        const size_t doc = end ? (size_t)(end - (train + at)) : len - at;
        if (bos >= 0) { // the document's BOS, then its ids (tokenizer_encode appends them)
            int32_t *grown = realloc(*ids, sizeof(int32_t) * (*n + 1));
            if (!grown) goto oom;
            *ids = grown;
            (*ids)[(*n)++] = bos;
        }
        char why[256];
        if (doc > 0 && tokenizer_encode(tok, train + at, doc, ids, n, why, sizeof why)) {
            snprintf(err, errlen, "the corpus's training split, at byte %zu: %s", at, why);
            free(*ids);
            *ids = NULL, *n = 0;
            return -1;
        }
        at += doc;
    }
    return 0;
oom:
    free(*ids);
    *ids = NULL, *n = 0;
    snprintf(err, errlen, "out of memory tokenising the corpus");
    return -1;
}

size_t calib_window_need(int len, int32_t bos) { return (size_t)len + (bos >= 0 ? 0 : 1); }

void calib_windows(const int32_t *ids, size_t n, int32_t bos, int n_seq, int len, uint64_t seed, int *inputs,
                   int *targets) {
    const size_t need = calib_window_need(len, bos);
    Rng rng;
    rng_seed(&rng, seed);
    for (int w = 0; w < n_seq; w++) {
        const size_t s = (size_t)rng_below(&rng, (uint64_t)(n - need) + 1);
        int *in = inputs + (size_t)w * len, *tg = targets + (size_t)w * len;
        for (int t = 0; t < len; t++) {
            if (bos >= 0) {
                in[t] = t == 0 ? bos : ids[s + (size_t)t - 1];
                tg[t] = ids[s + (size_t)t];
            } else {
                in[t] = ids[s + (size_t)t];
                tg[t] = ids[s + (size_t)t + 1];
            }
        }
    }
}
