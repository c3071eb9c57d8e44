// The transforms' rotations (kvtransform.c) at each kernel set's width: formats.h's projections,
// compiled with the codec families (codecs.h), the registry handing out the set in use
// (codec_projection). Every output is one sum in order of j, so every set gives the same bits.
#include "codecs.h"
#include "formats.h"

void CODEC_FAMILY(codec_project)(const float *m, int n, const float *x, float *y, int back) {
    // M x down Mᵀ's rows, stored after M; Mᵀ x down M's.
    if (back)
        tq_project_back(m, n, n, x, y);
    else
        tq_project(m, n, n, x, y);
}
