// KVQuant's calibration of one model: runs the trainer's forward and backward over token sequences,
// takes each layer's pre-RoPE keys and values with the squared gradients of the loss at them (their
// Fisher information), and fills a Kvq: per-channel key ranges and outlier thresholds, the
// codebooks for every width, stream, outlier percent and variant, and each layer's largest key
// (after and before RoPE) and value magnitudes (nvfp4:scale2=calib). The rules are in docs/kvq-format.md.
#ifndef MICRO_CALIB_CALIBRATE_H
#define MICRO_CALIB_CALIBRATE_H

#include <stddef.h>
#include <stdint.h>

#include "kvq_file.h"
#include "model.h"

// Key numbers (layers x tokens x channels) a calibration may hold: 4 GiB of keys and weights.
#define CALIB_MAX_KEY_NUMBERS ((size_t)1 << 29)

typedef struct {
    const uint32_t *percents; // outlier percents in hundredths (0: none), ascending
    int n_percents;
    const uint32_t *bits; // codebook widths, ascending
    int n_bits;
    int threads; // the trainer's threads; the result does not depend on them
} CalibSettings;

typedef struct {
    double mean_loss;            // nats per token over the sequences
    double key_outliers[KVQ_MAX_PERCENTS];   // fraction of key numbers outside their channel's thresholds
    double value_outliers[KVQ_MAX_PERCENTS]; // fraction of value numbers set apart per vector
} CalibSummary;

// n_seq sequences of len tokens: inputs[n_seq·len] and targets[n_seq·len] (bytes). Fills out (which
// it initialises; the caller sets the corpus hash and seed and frees it); summary may be NULL.
// -1 with one line in err on failure (out of memory, too many key numbers, a sequence longer than the
// context).
int calibrate_model(Model *m, const int *inputs, const int *targets, int n_seq, int len, const CalibSettings *s,
                    Kvq *out, CalibSummary *summary, char *err, size_t errlen);

// The outlier rules, exposed for the tests. Key thresholds: of the n numbers of one channel sorted
// ascending, s[m] and s[n−1−m] with m = round(n·P/200) for P percent (at most (n−1)/2).
void calib_key_thresholds(float *sorted, size_t n, uint32_t percent_hundredths, float *lo, float *hi);
#endif
