// The training data: data/corpus/{en,zh}.{train,val}.txt, raw UTF-8 bytes where every document
// starts with BOS (0x01). Training windows are drawn at random from en.train + zh.train (one
// buffer, so each language is sampled in proportion to its size); validation uses fixed windows.
#ifndef MICRO_TRAIN_DATA_H
#define MICRO_TRAIN_DATA_H

#include <stddef.h>

#include "rng.h"

enum { LANG_EN = 0, LANG_ZH = 1 };

typedef struct {
    unsigned char *train;  // en.train followed by zh.train
    size_t train_len;
    size_t en_train_len;
    unsigned char *val[2]; // en.val, zh.val
    size_t val_len[2];
    size_t file_len[4];    // en.train, en.val, zh.train, zh.val
    char sha256[65];       // of the four files concatenated in that order
} Corpus;

// Reads the four files of dir. One line in err on failure.
int corpus_load(Corpus *c, const char *dir, char *err, size_t errlen);
void corpus_free(Corpus *c);

// B random windows of T+1 bytes: inputs are bytes [0, T), targets bytes [1, T+1). Half of the
// windows (by a coin from rng) start at the beginning of the document that contains the drawn
// offset, so the model sees BOS at position 0 as the evaluation does. Needs len >= T+1.
void batch_sample(const unsigned char *data, size_t len, Rng *rng, int B, int T, int *inputs, int *targets);

// Fixed validation windows: n offsets spread evenly over data, each moved back to the start of its
// document. Returns how many windows fit (0 when len < T+1).
int val_windows(const unsigned char *data, size_t len, int n, int T, size_t *starts);
// Fills inputs/targets for one window starting at start.
void window_tokens(const unsigned char *data, size_t start, int T, int *inputs, int *targets);

#endif
