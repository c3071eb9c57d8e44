// The token windows a calibration runs on, for a model with a vocabulary of its own or a text the
// user names (micro's byte models on the corpus keep the trainer's sampler, batch_sample): a stream
// of ids, and n_seq windows of len positions cut from it at offsets drawn from --seed.
#ifndef MICRO_CALIB_WINDOWS_H
#define MICRO_CALIB_WINDOWS_H

#include <stddef.h>
#include <stdint.h>

struct Tokenizer;

// The corpus's training split (documents each after a 0x01 byte, as data.h reads them) under a
// model's tokenizer: each document's ids, led by bos when bos >= 0, one after another into *ids
// (malloc'ed, *n of them). 0, or -1 with one line in err (a document the tokenizer refuses).
int calib_corpus_ids(const struct Tokenizer *tok, int32_t bos, const unsigned char *train, size_t len, int32_t **ids,
                     size_t *n, char *err, size_t errlen);

// The ids a window needs from the stream: len with a BOS first (the BOS is its first input, the
// stream's len tokens its targets), len + 1 without.
size_t calib_window_need(int len, int32_t bos);

// n_seq windows of len positions from ids[n]: each at an offset s uniform in [0, n − need] (splitmix64
// seeded with seed, one draw a window, in order), inputs [bos, ids[s], …, ids[s+len−2]] and targets
// ids[s..s+len) when bos >= 0, else inputs ids[s..s+len) and targets ids[s+1..s+len+1). The caller
// has checked n >= calib_window_need(len, bos).
void calib_windows(const int32_t *ids, size_t n, int32_t bos, int n_seq, int len, uint64_t seed, int *inputs,
                   int *targets);

#endif
