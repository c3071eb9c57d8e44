// What a calibrated codec reads of the calibration artefact (models/micro.kvq, written by `micro
// calibrate`): kvquant (src/codecs/codec_nuq.c) one layer and stream's level table and, for keys, the
// per-channel ranges; nvfp4:scale2=calib (codec_nvfp4.c) one layer and stream's largest magnitude. The artefact is loaded once, on first use, from the path the command set
// (beside the model by default, or --calib FILE).
#ifndef MICRO_KVQ_VIEW_H
#define MICRO_KVQ_VIEW_H

#include <stddef.h>

#include "kvq_file.h"
#include "model.h"

typedef struct {
    const float *levels;     // [2^bits] sorted, in [-1, 1]
    const float *key_ranges; // keys: [n_heads * head_dim][2] per-channel {lo, hi} for the outlier setting
} KvqView;

// The calibration file to use (NULL: none) and the model it must belong to (borrowed until the
// next call). Set by a command after it loads the model; drops a calibration loaded before. With
// `load_now`, loads it at once: -1 with one line in err when it cannot be used (an explicit --calib).
int kvq_view_set(const char *path, const Model *model, int load_now, char *err, size_t errlen);
// 0 with *v filled; -1 with one line in err: no calibration found (naming `micro calibrate` and
// --calib), a bad file, or one that does not hold this shape, layer, width or outlier setting.
int kvq_view(int layer, int is_key, int bits, double outliers, int qnorm, int n_heads, int head_dim, KvqView *v,
             char *err, size_t errlen);
// The largest magnitude of one layer's stream (KvqStream: keys after or before RoPE, values). 0 with
// *amax set; -1 with one line in err naming `who` (the spec asking): no calibration, a bad file, a
// version-1 file (which holds no maxima) or another shape.
int kvq_view_stream_max(const char *who, int layer, KvqStream which, int n_heads, int head_dim, float *amax,
                        char *err, size_t errlen);

#endif
