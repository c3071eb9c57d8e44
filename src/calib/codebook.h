// A KVQuant codebook from calibration numbers: the numbers, normalised to [−1, 1] as the codec will
// normalise them, are gathered into a fine histogram (each bin keeps its Fisher weight, weighted sum,
// count and sum), then weighted k-means over the bins gives the 2^bits signposts, and Q-Norm's
// variant is those signposts shifted and scaled to keep the numbers' mean and standard deviation.
#ifndef MICRO_CALIB_CODEBOOK_H
#define MICRO_CALIB_CODEBOOK_H

// Bins over [−1, 1]: 1.2e-4 wide, far below the gap between 16 signposts, so treating a bin as one
// point (at its weighted mean) moves no signpost by more than a bin; and the memory stays fixed
// however many numbers calibration sees.
#define CODEBOOK_BINS 16384

typedef struct {
    double *w, *wx;           // [BINS] Fisher weight, Σ weight·x
    double *n, *sx;           // [BINS] count, Σ x (Q-Norm's assignment of a bin uses its plain mean)
    double count, sum, sumsq; // every number, unweighted (Q-Norm's target mean and deviation)
} NormHist;

int normhist_init(NormHist *h); // -1 when out of memory
void normhist_free(NormHist *h);
// One normalised number (clamped to [−1, 1]) with its Fisher weight (the squared gradient).
void normhist_add(NormHist *h, double xn, double weight);

// The 2^bits plain signposts (weighted k-means) and the Q-Norm ones, ascending within [−1, 1].
// -1 when out of memory.
int codebook_fit(const NormHist *h, int bits, float *plain, float *qnorm);

#endif
