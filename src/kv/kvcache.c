// Streams, the codec registry and spec-string parsing.
#include "kvcache.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_dispatch.h"
#include "codecs.h"
#include "cpu.h"
#include "kvtransform.h"
#include "msgtext.h"
#include "utf8.h"

// The registry is codecs.h's CODEC_KERNEL_FAMILIES, in both builds: adding a codec family is one
// source file in codecs/ (its CodecFamily with its examples), one line there and one build line in
// meson.build's codec_kernel_sources (docs/adding-a-codec.md).
#define CODEC_PORTABLE_ENTRY(name) &name,
static const CodecFamily *const registry_portable[] = {CODEC_KERNEL_FAMILIES(CODEC_PORTABLE_ENTRY)};
#undef CODEC_PORTABLE_ENTRY
#ifdef MICRO_KERNELS_AVX2
#define CODEC_AVX2_ENTRY(name) &name##_avx2,
static const CodecFamily *const registry_avx2[] = {CODEC_KERNEL_FAMILIES(CODEC_AVX2_ENTRY)};
#undef CODEC_AVX2_ENTRY
#endif
#ifdef MICRO_KERNELS_AVX512
#define CODEC_AVX512_ENTRY(name) &name##_avx512,
static const CodecFamily *const registry_avx512[] = {CODEC_KERNEL_FAMILIES(CODEC_AVX512_ENTRY)};
#undef CODEC_AVX512_ENTRY
#endif

// Each set's registry, NULL where its build was not compiled in.
static const CodecFamily *const *registry_of(Isa isa) {
    switch (isa) {
#ifdef MICRO_KERNELS_AVX2
    case ISA_AVX2: return registry_avx2;
#endif
#ifdef MICRO_KERNELS_AVX512
    case ISA_AVX512: return registry_avx512;
#endif
    case ISA_PORTABLE: return registry_portable;
    default: return NULL;
    }
}

static int forced = -1; // -1: the set in use

int codec_isa_available(Isa isa) { return isa <= cpu_isa_supported() && registry_of(isa) != NULL; }

void codec_force_isa(int isa) { forced = isa >= 0 && codec_isa_available((Isa)isa) ? isa : -1; }

Isa codec_isa_active(void) {
    int isa = forced >= 0 ? forced : (int)cpu_isa();
    while (isa > ISA_PORTABLE && !codec_isa_available((Isa)isa)) isa--;
    return (Isa)isa;
}

const CodecFamily *const *codec_families(int *count) {
    *count = (int)(sizeof registry_portable / sizeof registry_portable[0]);
    return registry_of(codec_isa_active());
}

CodecProjectFn codec_projection(void) {
    switch (codec_isa_active()) {
#ifdef MICRO_KERNELS_AVX2
    case ISA_AVX2: return codec_project_avx2;
#endif
#ifdef MICRO_KERNELS_AVX512
    case ISA_AVX512: return codec_project_avx512;
#endif
    default: return codec_project;
    }
}

const CodecSpec codec_spec_fp32 = {.name = "fp32"};

// The spec as it appears in messages: escaped and shortened (msgtext.h).
#define SHOWN(text) msg_text(text, shown, sizeof shown)

static int copy_token(char *dst, const char *src, size_t n, const char *what, const char *text,
                      char *err, size_t errlen) {
    char shown[MSG_TEXT];
    if (n == 0) {
        snprintf(err, errlen, "cache spec '%s': empty %s", SHOWN(text), what);
        return -1;
    }
    if (n >= SPEC_TEXT) {
        snprintf(err, errlen, "cache spec '%s': %s longer than %d characters", SHOWN(text), what, SPEC_TEXT - 1);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)src[i];
        const int colon_ok = ch == ':' && strcmp(what, "option value") == 0; // rot=random:SEED
        if (!(isalnum(ch) || ch == '_' || ch == '.' || ch == '-' || ch == '+' || colon_ok)) {
            // The whole character (a multibyte one too), or its byte escaped when it is not UTF-8.
            char one[5] = {0}, piece[16];
            int len = utf8_char_len((const uint8_t *)src + i, strlen(src + i));
            memcpy(one, src + i, len ? (size_t)len : 1);
            snprintf(err, errlen, "cache spec '%s': unexpected character '%s' in %s", SHOWN(text),
                     msg_text(one, piece, sizeof piece), what);
            return -1;
        }
        dst[i] = (char)tolower(ch);
    }
    dst[n] = '\0';
    return 0;
}

int spec_parse(const char *text, CodecSpec *spec, char *err, size_t errlen) {
    char shown[MSG_TEXT];
    memset(spec, 0, sizeof *spec);
    const char *colon = strchr(text, ':');
    size_t name_len = colon ? (size_t)(colon - text) : strlen(text);
    if (copy_token(spec->name, text, name_len, "codec name", text, err, errlen)) return -1;
    if (!colon) return 0;
    const char *p = colon + 1;
    if (*p == '\0') {
        snprintf(err, errlen, "cache spec '%s': nothing after ':'", SHOWN(text));
        return -1;
    }
    for (;;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if (spec->n_options == SPEC_MAX_OPTIONS) {
            snprintf(err, errlen, "cache spec '%s': more than %d options", SHOWN(text), SPEC_MAX_OPTIONS);
            return -1;
        }
        SpecOption *o = &spec->options[spec->n_options];
        const char *eq = memchr(p, '=', (size_t)(end - p));
        size_t key_len = eq ? (size_t)(eq - p) : (size_t)(end - p);
        if (copy_token(o->key, p, key_len, "option name", text, err, errlen)) return -1;
        if (eq) {
            o->has_value = 1;
            if (copy_token(o->value, eq + 1, (size_t)(end - eq - 1), "option value", text, err, errlen))
                return -1;
        }
        for (int i = 0; i < spec->n_options; i++) {
            if (strcmp(spec->options[i].key, o->key) == 0) {
                snprintf(err, errlen, "cache spec '%s': option '%s' given twice", SHOWN(text), o->key);
                return -1;
            }
        }
        spec->n_options++;
        if (*end == '\0') break;
        p = end + 1;
    }
    return 0;
}

static SpecOption *find_option(CodecSpec *spec, const char *key) {
    for (int i = 0; i < spec->n_options; i++)
        if (strcmp(spec->options[i].key, key) == 0) return &spec->options[i];
    return NULL;
}

int spec_int(CodecSpec *spec, const char *key, int fallback, int lo, int hi, int *out, char *err,
             size_t errlen) {
    SpecOption *o = find_option(spec, key);
    if (!o) {
        *out = fallback;
        return 0;
    }
    o->used = 1;
    char *end = NULL;
    errno = 0;
    long v = o->has_value ? strtol(o->value, &end, 10) : 0;
    if (!o->has_value || *end != '\0' || end == o->value) {
        snprintf(err, errlen, "%s: option '%s' needs an integer value", spec->name, key);
        return -1;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        snprintf(err, errlen, "%s: %s=%s is out of range (%d..%d)", spec->name, key, o->value, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

const char *spec_string(CodecSpec *spec, const char *key) {
    SpecOption *o = find_option(spec, key);
    if (!o) return NULL;
    o->used = 1;
    return o->value;
}

int spec_choice(CodecSpec *spec, const char *key, const char *const *choices, int *out, char *err, size_t errlen) {
    const char *v = spec_string(spec, key);
    *out = 0;
    int n = 0;
    for (; choices[n]; n++)
        if (v && strcmp(v, choices[n]) == 0) *out = n;
    if (!v || strcmp(v, choices[*out]) == 0) return 0;
    char list[160] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i == 0 ? "" : i + 1 < n ? ", " : " or ",
                 choices[i]);
    snprintf(err, errlen, "%s: %s must be %s (got '%s')", spec->name, key, list, v);
    return -1;
}

int spec_is_value(CodecSpec *spec) {
    const char *role = spec_string(spec, "role");
    return role && strcmp(role, "v") == 0;
}

int spec_flag(CodecSpec *spec, const char *key) {
    SpecOption *o = find_option(spec, key);
    if (!o) return 0;
    o->used = 1;
    return 1;
}

// Options the cache sets for the codec, never the user: `role` (k or v) always, `context` (the
// model's longest stream) when a spec is checked against a model, so that a codec can refuse
// parameters that could never take effect (kivi's residual), and `block` when the stream is one
// block of a pool's sequence.
static SpecOption *inject_option(CodecSpec *spec, const char *key, const char *value) {
    SpecOption *o = &spec->options[spec->n_options++];
    snprintf(o->key, sizeof o->key, "%s", key);
    snprintf(o->value, sizeof o->value, "%s", value);
    o->has_value = 1;
    return o;
}

// Adds each "key[=value]" of a comma-separated list the spec does not have. -1 when there is no room.
static int add_default_transforms(CodecSpec *spec, const char *defaults) {
    for (const char *p = defaults; p && *p;) {
        const char *end = strchr(p, ','), *stop = end ? end : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        char key[SPEC_TEXT], value[SPEC_TEXT] = "";
        snprintf(key, sizeof key, "%.*s", (int)((eq ? eq : stop) - p), p);
        if (eq) snprintf(value, sizeof value, "%.*s", (int)(stop - eq - 1), eq + 1);
        if (!find_option(spec, key)) {
            if (spec->n_options >= (int)(sizeof spec->options / sizeof spec->options[0])) return -1;
            SpecOption *o = inject_option(spec, key, value);
            o->has_value = eq != NULL;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

// The registered family of that name, or NULL with one line in err.
static const CodecFamily *find_family(const char *name, char *err, size_t errlen) {
    int count;
    const CodecFamily *const *families = codec_families(&count);
    for (int i = 0; i < count; i++)
        if (strcmp(families[i]->name, name) == 0) return families[i];
    snprintf(err, errlen, "unknown cache codec '%s' (see micro --help for the list)", name);
    return NULL;
}

static int stream_init(KVStream *s, const CodecSpec *given, KVRole role, int n_heads, int head_dim, int capacity,
                       int context, const KVStreamPlace *place, char *err, size_t errlen) {
    const int block = place ? place->block : 0, first = place ? place->first : 0, layer = place ? place->layer : -1;
    memset(s, 0, sizeof *s);
    CodecSpec spec = *given; // the codec marks the options it reads
    for (int i = 0; i < spec.n_options; i++) spec.options[i].used = 0;
    static const char *const own[4] = {"role", "context", "block", "layer"};
    static const char *const set_by[4] = {" (--k / --v)", " (the model's context)", " (the pool's --block)",
                                          " (each layer's stream)"};
    for (int i = 0; i < 4; i++) {
        if (find_option(&spec, own[i])) {
            snprintf(err, errlen, "%s: '%s' is set by the cache%s, not by the spec", spec.name, own[i], set_by[i]);
            return -1;
        }
    }
    // options[] has four slots beyond SPEC_MAX_OPTIONS for what the stream adds (role, context,
    // block, layer), so a spec may use all of them.
    SpecOption *role_option = inject_option(&spec, "role", role == KV_ROLE_KEY ? "k" : "v");
    SpecOption *context_option = NULL;
    if (context > 0) {
        char text[16];
        snprintf(text, sizeof text, "%d", context);
        context_option = inject_option(&spec, "context", text);
    }
    SpecOption *block_option = NULL;
    if (block > 0) {
        char text[16];
        snprintf(text, sizeof text, "%d", block);
        block_option = inject_option(&spec, "block", text);
    }
    SpecOption *layer_option = NULL;
    if (layer >= 0) {
        char text[16];
        snprintf(text, sizeof text, "%d", layer);
        layer_option = inject_option(&spec, "layer", text);
    }
    const CodecFamily *family = find_family(spec.name, err, errlen);
    if (!family) return -1;
    // Every codec, transform and mirror works on one head's vector in scratch of MICRO_MAX_WIDTH
    // numbers: a wider stream is refused here, whatever its family checks itself.
    if (n_heads < 1 || head_dim < 1 || head_dim > MICRO_MAX_WIDTH || capacity < 1) {
        snprintf(err, errlen, "%s: a stream of %d heads of %d numbers for %d tokens: micro takes 1 to %d numbers a head "
                 "and at least one head and token", spec.name, n_heads, head_dim, capacity, MICRO_MAX_WIDTH);
        return -1;
    }
    // A family's default transforms, where the spec does not give the option (`sink=0` turns one off).
    if (add_default_transforms(&spec, role == KV_ROLE_KEY ? family->key_transforms : family->value_transforms)) {
        snprintf(err, errlen, "%s: too many options with the family's default transforms", spec.name);
        return -1;
    }
    // The transforms' options are the stream's, not the codec's: read (and marked) first.
    TransformOptions transforms;
    if (transform_options(&spec, role, n_heads, head_dim, family->owned_options, &transforms, err, errlen)) return -1;
    void *state = family->create(&spec, n_heads, head_dim, capacity, s->spec, sizeof s->spec, err, errlen);
    if (!state) return -1;
    role_option->used = 1; // codecs that treat keys and values alike ignore it
    if (context_option) context_option->used = 1;
    if (block_option) block_option->used = 1;
    if (layer_option) layer_option->used = 1;
    for (int i = 0; i < spec.n_options; i++) {
        if (!spec.options[i].used) {
            snprintf(err, errlen, "%s: unknown option '%s'", spec.name, spec.options[i].key);
            family->ops->destroy(state);
            return -1;
        }
    }
    s->ops = family->ops;
    s->state = state;
    s->n_heads = n_heads;
    s->head_dim = head_dim;
    s->capacity = capacity;
    const char *defaults = role == KV_ROLE_KEY ? family->key_transforms : family->value_transforms;
    transform_normalise(&transforms, defaults, s->spec, sizeof s->spec);
    if (!transform_any(&transforms)) return 0;
    return transform_wrap(s, &transforms, first, err, errlen);
}

void kvstream_free(KVStream *s) {
    if (s->ops) s->ops->destroy(s->state);
    memset(s, 0, sizeof *s);
}

int kvstream_init(KVStream *s, const CodecSpec *spec, KVRole role, int n_heads, int head_dim, int capacity,
                  char *err, size_t errlen) {
    return stream_init(s, spec, role, n_heads, head_dim, capacity, 0, NULL, err, errlen);
}

int kvstream_init_at(KVStream *s, const CodecSpec *spec, KVRole role, int n_heads, int head_dim, int capacity,
                     const KVStreamPlace *place, char *err, size_t errlen) {
    return stream_init(s, spec, role, n_heads, head_dim, capacity, 0, place, err, errlen);
}

int kvstream_check_spec_shape(const char *spec_text, KVRole role, const KVShape *shape, char *err, size_t errlen) {
    const KVShape micro = {.n_heads = 6, .head_dim = 32, .context = 2048};
    if (!shape) shape = &micro;
    if (shape->n_heads < 1 || shape->head_dim < 1 || shape->context < 1) {
        snprintf(err, errlen, "cache shape %d heads x %d, context %d is not a shape", shape->n_heads,
                 shape->head_dim, shape->context);
        return -1;
    }
    // One token of capacity: the codecs check their options and the shape without allocating a
    // whole context; the context itself comes as an option.
    KVStream s;
    CodecSpec spec;
    if (spec_parse(spec_text, &spec, err, errlen) ||
        stream_init(&s, &spec, role, shape->n_heads, shape->head_dim, 1, shape->context, NULL, err, errlen))
        return -1;
    kvstream_free(&s);
    return 0;
}

int kvstream_check_spec(const char *spec_text, KVRole role, char *err, size_t errlen) {
    return kvstream_check_spec_shape(spec_text, role, NULL, err, errlen);
}

void kvstream_append(KVStream *s, const float *vec) {
    s->ops->append(s->state, vec);
    s->length++;
}

void kvstream_scores(const KVStream *s, int head, const float *q, float *out, int n) {
    const void *states[1] = {s->state};
    const CodecBlocks b = {states, s->capacity, s->head_dim, NULL, 0};
    s->ops->scores(&b, head, q, out, n);
}

void kvstream_mix(const KVStream *s, int head, const float *p, float *out, int n) {
    const void *states[1] = {s->state};
    const CodecBlocks b = {states, s->capacity, s->head_dim, NULL, 0};
    s->ops->mix(&b, head, p, out, n);
}

void kvstream_end_step(KVStream *s) {
    if (s->ops->settle) s->ops->settle(s->state, s->ops->settled(s->state, s->length));
}

double kvstream_bits_per_element(const KVStream *s) {
    if (s->length == 0) return 0.0;
    return 8.0 * (double)s->ops->bytes(s->state) / ((double)s->length * s->n_heads * s->head_dim);
}

int kvstream_check_spec_syntax(const char *spec_text, char *err, size_t errlen) {
    CodecSpec spec;
    if (spec_parse(spec_text, &spec, err, errlen)) return -1;
    return find_family(spec.name, err, errlen) ? 0 : -1;
}
