// micro capacity: the plate's arithmetic. Conversations = floor((GPU · util − weights) / (bytes per
// token · context)), where bytes per token = 2 (K and V) · layers · KV heads · head_dim · bits / 8.
#include "capacity.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "msgtext.h"

// Shapes from the models' published configurations; weights are BF16 (2 bytes per parameter)
// except micro's, which are our fp32 file. 70B does not fit one 80 GB GPU, so its preset has two.
static const CapacityModel presets[] = {
    {"llama3-8b", 32, 8, 128, 16.1, 80, 0.9, 8192},
    {"llama3-70b", 80, 8, 128, 141.1, 160, 0.9, 8192},
    {"mistral-7b", 32, 8, 128, 14.5, 80, 0.9, 8192},
    {"micro", 4, 6, 32, 0.00728, 80, 0.9, 2048},
};

const CapacityModel *capacity_preset(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

int capacity_check(const CapacityModel *m, char *err, unsigned long errlen) {
    if (!(m->util > 0 && m->util <= 1)) {
        snprintf(err, errlen, "utilisation %g must be in (0, 1]", m->util);
        return -1;
    }
    if (m->context <= 0) {
        snprintf(err, errlen, "context %d must be positive", m->context);
        return -1;
    }
    if (m->layers <= 0 || m->kv_heads <= 0 || m->head_dim <= 0) {
        snprintf(err, errlen, "layers, KV heads and head_dim must be positive");
        return -1;
    }
    if (!(m->gpu_gb > 0) || !(m->weights_gb >= 0)) {
        snprintf(err, errlen, "GPU memory must be positive and weights non-negative");
        return -1;
    }
    if (m->weights_gb >= m->gpu_gb * m->util) {
        snprintf(err, errlen, "weights of %g GB leave no room in %g GB at %g%% use", m->weights_gb, m->gpu_gb,
                 100 * m->util);
        return -1;
    }
    return 0;
}

CapacityRow capacity_row(const CapacityModel *m, double bits) {
    return capacity_row_numbers(m, 2.0 * m->kv_heads * m->head_dim, bits);
}

CapacityRow capacity_row_numbers(const CapacityModel *m, double numbers_per_layer, double bits) {
    CapacityRow r;
    r.bits_per_element = bits;
    r.bytes_per_token = m->layers * numbers_per_layer * bits / 8.0;
    r.bytes_per_conversation = r.bytes_per_token * m->context;
    // A count beyond a long's range cannot be converted (undefined behaviour): it saturates.
    double c = floor((m->gpu_gb * m->util - m->weights_gb) * 1e9 / r.bytes_per_conversation);
    r.conversations = c < (double)LONG_MAX ? (long)c : LONG_MAX;
    return r;
}

int capacity_scheme_check(const CapacityModel *m, char *err, size_t errlen) {
    double numbers = (double)m->kv_heads * m->head_dim * (m->context > 0 ? m->context : 0);
    if (numbers > CAPACITY_MAX_MEASURED) {
        snprintf(err, errlen,
                 "--scheme runs one whole conversation through the codec: %d KV heads x head_dim %d x %d tokens is "
                 "%.3g numbers per stream, beyond the %.3g this measures; give a smaller shape or --context",
                 m->kv_heads, m->head_dim, m->context, numbers, (double)CAPACITY_MAX_MEASURED);
        return -1;
    }
    return 0;
}

int capacity_scheme_bits(const CapacityModel *m, const CodecSpec *spec, double *bits, char *err, size_t errlen) {
    KVStream k, v;
    if (capacity_scheme_check(m, err, errlen)) return -1;
    if (kvstream_init(&k, spec, KV_ROLE_KEY, m->kv_heads, m->head_dim, m->context, err, errlen)) return -1;
    if (kvstream_init(&v, spec, KV_ROLE_VALUE, m->kv_heads, m->head_dim, m->context, err, errlen)) {
        kvstream_free(&k);
        return -1;
    }
    size_t n = (size_t)m->kv_heads * m->head_dim;
    float *vec = malloc(n * sizeof(float));
    if (!vec) {
        snprintf(err, errlen, "out of memory measuring %s", spec->name);
        kvstream_free(&k);
        kvstream_free(&v);
        return -1;
    }
    for (int t = 0; t < m->context; t++) {
        for (size_t i = 0; i < n; i++) vec[i] = (float)((t * 31 + (int)i * 17) % 101 - 50) / 25.0f;
        kvstream_append(&k, vec);
        kvstream_append(&v, vec);
        kvstream_end_step(&k);
        kvstream_end_step(&v);
    }
    *bits = 0.5 * (kvstream_bits_per_element(&k) + kvstream_bits_per_element(&v));
    free(vec);
    kvstream_free(&k);
    kvstream_free(&v);
    return 0;
}
