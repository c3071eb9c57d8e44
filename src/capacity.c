// micro capacity: the plate's arithmetic. Conversations = floor((GPU · util − weights) / (bytes per
// token · context)), where bytes per token = 2 (K and V) · layers · KV heads · head_dim · bits / 8.
#include "capacity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "kvcache.h"

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
    CapacityRow r;
    r.bits_per_element = bits;
    r.bytes_per_token = 2.0 * m->layers * m->kv_heads * m->head_dim * bits / 8.0;
    r.bytes_per_conversation = r.bytes_per_token * m->context;
    r.conversations = (long)floor((m->gpu_gb * m->util - m->weights_gb) * 1e9 / r.bytes_per_conversation);
    return r;
}

int capacity_scheme_bits(const CapacityModel *m, const char *spec, double *bits, char *err, size_t errlen) {
    KVStream k, v;
    if (kvstream_init(&k, spec, KV_ROLE_KEY, m->kv_heads, m->head_dim, m->context, err, errlen)) return -1;
    if (kvstream_init(&v, spec, KV_ROLE_VALUE, m->kv_heads, m->head_dim, m->context, err, errlen)) {
        kvstream_free(&k);
        return -1;
    }
    size_t n = (size_t)m->kv_heads * m->head_dim;
    float *vec = malloc(n * sizeof(float));
    if (!vec) return -1;
    for (int t = 0; t < m->context; t++) {
        for (size_t i = 0; i < n; i++) vec[i] = (float)((t * 31 + (int)i * 17) % 101 - 50) / 25.0f;
        kvstream_append(&k, vec);
        kvstream_append(&v, vec);
        if (k.ops->end_step) k.ops->end_step(k.state);
        if (v.ops->end_step) v.ops->end_step(v.state);
    }
    *bits = 0.5 * (kvstream_bits_per_element(&k) + kvstream_bits_per_element(&v));
    free(vec);
    kvstream_free(&k);
    kvstream_free(&v);
    return 0;
}

static const char *capacity_usage =
    "usage: micro capacity [options]\n"
    "  Conversations that fit beside a model on a GPU at each KV-cache width:\n"
    "  floor((GPU GB x util - weights GB) / (2 x layers x KV heads x head_dim x bits/8 x context)).\n"
    "  Defaults are the plate's: Llama 3 8B (32 layers, 8 KV heads, head_dim 128), 16.1 GB of BF16\n"
    "  weights, an 80 GB GPU at 90% use, 8192-token conversations, scales ignored (GB = 1e9 bytes).\n"
    "options:\n"
    "  --preset NAME     llama3-8b (default), llama3-70b (2 x 80 GB), mistral-7b, micro\n"
    "  --bits LIST       cache widths, comma separated (default 16,8,4,3,2)\n"
    "  --scheme SPEC     count this cache scheme's real storage (scales, minimums, residuals)\n"
    "                    instead of bare widths; repeatable\n"
    "  --gpu-gb X  --util X  --weights-gb X  --context N  --layers N  --kv-heads N  --head-dim N\n"
    "  --csv             model,bits,bytes_per_token,conversations,gb_per_conversation,step_read_bytes\n"
    "  -h, --help        this help\n";

int cmd_capacity(int argc, char **argv) {
    CapacityModel m = presets[0];
    const char *bits_list = "16,8,4,3,2", *schemes[16];
    int n_schemes = 0, csv = 0;
    // The preset first, so that explicit flags override it wherever they stand.
    for (int i = 1; i < argc; i++) {
        const char *name;
        if (cli_value(argc, argv, &i, "--preset", &name)) {
            const CapacityModel *p = capacity_preset(name);
            if (!p) return cli_error("unknown preset '%s' (llama3-8b, llama3-70b, mistral-7b, micro)", name);
            m = *p;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *ignored, *spec;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(capacity_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--csv")) {
            csv = 1;
        } else if (cli_value(argc, argv, &i, "--scheme", &spec)) {
            if (n_schemes == 16) return cli_error("at most 16 schemes");
            schemes[n_schemes++] = spec;
        } else if (!cli_value(argc, argv, &i, "--preset", &ignored) && !cli_value(argc, argv, &i, "--bits", &bits_list) &&
                   !cli_double(argc, argv, &i, "--gpu-gb", -1e9, 1e9, &m.gpu_gb) &&
                   !cli_double(argc, argv, &i, "--util", -1e9, 1e9, &m.util) &&
                   !cli_double(argc, argv, &i, "--weights-gb", -1e9, 1e9, &m.weights_gb) &&
                   !cli_int(argc, argv, &i, "--context", -1000000000, 1000000000, &m.context) &&
                   !cli_int(argc, argv, &i, "--layers", 1, 100000, &m.layers) &&
                   !cli_int(argc, argv, &i, "--kv-heads", 1, 100000, &m.kv_heads) &&
                   !cli_int(argc, argv, &i, "--head-dim", 1, 100000, &m.head_dim)) {
            cli_unknown(capacity_usage, a);
        }
    }
    char err[512];
    if (capacity_check(&m, err, sizeof err)) return cli_error("%s", err);

    // Rows: each bare width, then each scheme at its measured bits per element.
    double bits[32];
    char labels[32][SPEC_NORMALISED];
    int n = 0;
    if (n_schemes == 0) {
        const char *s = bits_list;
        while (*s) {
            char *end;
            double b = strtod(s, &end);
            if (end == s || !(b > 0 && b <= 64) || (*end && *end != ',') || n == 32)
                return cli_error("--bits: expected a comma-separated list of widths in (0, 64]");
            snprintf(labels[n], sizeof labels[n], "%g-bit", b);
            bits[n++] = b;
            s = *end ? end + 1 : end;
        }
    }
    for (int i = 0; i < n_schemes && n < 32; i++) {
        if (capacity_scheme_bits(&m, schemes[i], &bits[n], err, sizeof err)) return cli_error("%s", err);
        snprintf(labels[n++], sizeof labels[0], "%s", schemes[i]);
    }
    if (csv) {
        printf("model,cache,bits,bytes_per_token,conversations,gb_per_conversation,step_read_bytes\n");
    } else {
        printf("%s: %d layers x %d KV heads x head_dim %d, %.4g GB weights, %.4g GB GPU at %.0f%% use, %d-token "
               "conversations\n\n",
               m.name ? m.name : "custom", m.layers, m.kv_heads, m.head_dim, m.weights_gb, m.gpu_gb, 100 * m.util,
               m.context);
        printf("%-34s %8s %14s %12s %14s %18s\n", "cache", "bits", "bytes/token", "GB/conv", "conversations",
               "read/step (MB)");
    }
    for (int i = 0; i < n; i++) {
        CapacityRow r = capacity_row(&m, bits[i]);
        // A decode step at the end of a conversation reads its whole cache once.
        if (csv)
        {
            printf("%s,", m.name ? m.name : "custom");
            csv_field(labels[i]);
            printf(",%.4f,%.1f,%ld,%.6f,%.0f\n", r.bits_per_element, r.bytes_per_token, r.conversations,
                   r.bytes_per_conversation / 1e9, r.bytes_per_conversation);
        } else
            printf("%-34s %8.3f %14.0f %12.4f %14ld %18.1f\n", labels[i], r.bits_per_element, r.bytes_per_token,
                   r.bytes_per_conversation / 1e9, r.conversations, r.bytes_per_conversation / 1e6);
    }
    return 0;
}
