// `micro export --gguf` read back by a GGUF reader written here from the specification (ggml's
// docs/gguf.md), not from the writer: header, every key/value pair, tensor infos, offsets and
// alignment, and tensors bit-identical to the model's, located through micro's documented payload
// order: a grouped-query model as llama, a latent-attention one as deepseek2 (its two re-laid-out
// tensors rebuilt here by loops of the test's own). Also: write errors (/dev/full) and refused paths.
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "export_gguf.h"
#include "model_file.h"

// ---- a bounds-checked little-endian reader ----
typedef struct {
    const unsigned char *b;
    size_t n, pos;
    int bad; // set by any read past the end; every later read returns zeros
} Reader;

static const unsigned char *take(Reader *r, size_t k) {
    if (r->bad || k > r->n - r->pos) {
        r->bad = 1;
        return NULL;
    }
    const unsigned char *p = r->b + r->pos;
    r->pos += k;
    return p;
}
static uint64_t get_le(Reader *r, int bytes) {
    const unsigned char *p = take(r, (size_t)bytes);
    uint64_t v = 0;
    for (int i = bytes - 1; p && i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint32_t get_u32(Reader *r) { return (uint32_t)get_le(r, 4); }
static uint64_t get_u64(Reader *r) { return get_le(r, 8); }
static float get_f32(Reader *r) {
    uint32_t u = get_u32(r);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// A GGUF string copied into out (NUL-terminated); strings longer than out mark the reader bad.
static void get_str(Reader *r, char *out, size_t cap) {
    uint64_t len = get_u64(r);
    const unsigned char *p = NULL;
    if (len < cap) p = take(r, (size_t)len);
    else r->bad = 1;
    if (p) memcpy(out, p, (size_t)len);
    out[p ? len : 0] = '\0';
}

// ---- the key/value pairs, kept as raw positions for typed lookups ----
enum { T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 };
static const int scalar_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

typedef struct {
    char key[128];
    uint32_t type, elem_type; // elem_type and count for arrays
    uint64_t count;
    size_t value; // offset of the value (after the type, and after elem_type/count for arrays)
} Kv;

static void skip_value(Reader *r, uint32_t type) {
    if (type == T_STRING) {
        uint64_t len = get_u64(r);
        if (len > r->n) r->bad = 1;
        else take(r, (size_t)len);
    } else if (type < 13 && scalar_size[type]) {
        take(r, (size_t)scalar_size[type]);
    } else {
        r->bad = 1; // nested arrays and unknown types: GGUF allows the former, we never write them
    }
}

static const Kv *find(const Kv *kv, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(kv[i].key, key)) return &kv[i];
    return NULL;
}

static const unsigned char *file;
static size_t file_n;

static void check_u32(const Kv *kv, int n, const char *key, uint32_t want) {
    const Kv *k = find(kv, n, key);
    CHECK(k && k->type == T_U32, "%s: missing or not u32", key);
    if (!k || k->type != T_U32) return;
    Reader r = {file, file_n, k->value, 0};
    uint32_t v = get_u32(&r);
    CHECK(v == want, "%s = %u, want %u", key, v, want);
}
static void check_f32(const Kv *kv, int n, const char *key, float want) {
    const Kv *k = find(kv, n, key);
    CHECK(k && k->type == T_F32, "%s: missing or not f32", key);
    if (!k || k->type != T_F32) return;
    Reader r = {file, file_n, k->value, 0};
    float v = get_f32(&r);
    CHECK(memcmp(&v, &want, 4) == 0, "%s = %g, want %g", key, v, want);
}
static void check_bool(const Kv *kv, int n, const char *key, int want) {
    const Kv *k = find(kv, n, key);
    CHECK(k && k->type == T_BOOL, "%s: missing or not bool", key);
    if (!k || k->type != T_BOOL) return;
    CHECK(file[k->value] == (want ? 1 : 0), "%s = %d, want %d", key, file[k->value], want);
}
static void check_str(const Kv *kv, int n, const char *key, const char *want) {
    const Kv *k = find(kv, n, key);
    CHECK(k && k->type == T_STRING, "%s: missing or not a string", key);
    if (!k || k->type != T_STRING) return;
    Reader r = {file, file_n, k->value, 0};
    char s[256];
    get_str(&r, s, sizeof s);
    CHECK(!r.bad && !strcmp(s, want), "%s = '%s', want '%s'", key, s, want);
}

// ---- the expected tensors, from micro's payload order (docs/model-format.md) ----
typedef struct {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[3];
    const float *data;
} Expect;

static uint64_t expect_count(const Expect *e) { return e->ne[0] * e->ne[1] * e->ne[2]; }

// Tensors are found in the payload, block by block in micro's order (docs/model-format.md); under
// latent attention two of them are written in llama.cpp's layout instead, which this test builds in
// `made` (caller frees) from the payload by its own loops: attn_kv_a_mqa = W_dkv's rows then W_kr's,
// attn_k_b[h][r][i] = W_uk[h*head_dim + i][r].
static int expected_tensors(const Model *m, Expect *e, float **made) {
    const ModelConfig *c = &m->config;
    uint64_t d = (uint64_t)c->dim, L = (uint64_t)c->n_layers, nh = (uint64_t)c->n_heads, hd = (uint64_t)c->head_dim;
    uint64_t lat = (uint64_t)c->latent_dim, rope = (uint64_t)c->rope_dim;
    uint64_t q = nh * (hd + rope), o = nh * hd, kv = lat ? 0 : (uint64_t)c->n_kv_heads * hd; // wk, wv empty under MLA
    uint64_t h = (uint64_t)c->hidden_dim, V = (uint64_t)c->vocab_size;
    const float *p = m->params;
    // Payload blocks in order: name (NULL: not written as it is), ggml ne (ne[1] 1 for a vector),
    // per layer or not. wk/wv are empty under latent attention, w_dkv..w_uv otherwise.
    struct {
        const char *name;
        uint64_t ne[3];
        int per_layer;
        const float **where; // where the block starts, for the tensors built from it
    } blocks[] = {{"token_embd", {d, V, 1}, 0, NULL},
                  {"attn_norm", {d, 1, 1}, 1, NULL},
                  {"attn_q", {d, q, 1}, 1, NULL},
                  {"attn_k", {d, kv, 1}, 1, NULL},
                  {"attn_v", {d, kv, 1}, 1, NULL},
                  {NULL, {d, lat, 1}, 1, NULL}, // w_dkv
                  {"attn_kv_a_norm", {lat, 1, 1}, 1, NULL},
                  {NULL, {d, rope, 1}, 1, NULL}, // w_kr
                  {NULL, {lat, hd, nh}, 1, NULL}, // w_uk
                  {"attn_v_b", {lat, hd, nh}, 1, NULL},
                  {"attn_output", {o, d, 1}, 1, NULL},
                  {"ffn_norm", {d, 1, 1}, 1, NULL},
                  {"ffn_gate", {d, h, 1}, 1, NULL},
                  {"ffn_down", {h, d, 1}, 1, NULL},
                  {"ffn_up", {d, h, 1}, 1, NULL},
                  {"output_norm", {d, 1, 1}, 0, NULL}};
    const float *dkv = NULL, *kr = NULL, *uk = NULL;
    blocks[5].where = &dkv, blocks[7].where = &kr, blocks[8].where = &uk;
    int n = 0;
    for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
        uint64_t count = blocks[b].ne[0] * blocks[b].ne[1] * blocks[b].ne[2];
        if (blocks[b].where) *blocks[b].where = p;
        for (uint64_t l = 0; l < (blocks[b].per_layer ? L : 1); l++, p += count) {
            if (!blocks[b].name || count == 0) continue;
            Expect *x = &e[n++];
            if (blocks[b].per_layer) snprintf(x->name, sizeof x->name, "blk.%llu.%s.weight", (unsigned long long)l, blocks[b].name);
            else snprintf(x->name, sizeof x->name, "%s.weight", blocks[b].name);
            x->n_dims = blocks[b].ne[2] > 1 ? 3 : blocks[b].ne[1] > 1 ? 2 : 1;
            memcpy(x->ne, blocks[b].ne, sizeof x->ne);
            x->data = p;
        }
    }
    CHECK((size_t)(p - m->params) == m->n_params, "the payload order covers %zu of %zu parameters",
          (size_t)(p - m->params), m->n_params);
    *made = NULL;
    if (lat == 0) return n;
    // Latent attention: per layer attn_kv_a_mqa {dim, latent + rope} and attn_k_b {head_dim, latent, heads}.
    uint64_t kva = (lat + rope) * d, kb = nh * hd * lat;
    float *buf = malloc((size_t)(L * (kva + kb)) * sizeof *buf);
    CHECK(buf != NULL, "out of memory");
    if (!buf) return n;
    *made = buf;
    for (uint64_t l = 0; l < L; l++) {
        float *a = buf + l * (kva + kb), *k = a + kva;
        for (uint64_t r = 0; r < lat + rope; r++)
            for (uint64_t i = 0; i < d; i++) a[r * d + i] = r < lat ? dkv[(l * lat + r) * d + i] : kr[(l * rope + r - lat) * d + i];
        for (uint64_t hh = 0; hh < nh; hh++)
            for (uint64_t r = 0; r < lat; r++)
                for (uint64_t i = 0; i < hd; i++) k[(hh * lat + r) * hd + i] = uk[((l * nh + hh) * hd + i) * lat + r];
        Expect *x = &e[n++];
        snprintf(x->name, sizeof x->name, "blk.%llu.attn_kv_a_mqa.weight", (unsigned long long)l);
        x->n_dims = 2, x->ne[0] = d, x->ne[1] = lat + rope, x->ne[2] = 1, x->data = a;
        x = &e[n++];
        snprintf(x->name, sizeof x->name, "blk.%llu.attn_k_b.weight", (unsigned long long)l);
        x->n_dims = 3, x->ne[0] = hd, x->ne[1] = lat, x->ne[2] = nh, x->data = k;
    }
    return n;
}

static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = len > 0 ? malloc((size_t)len) : NULL;
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = b ? (size_t)len : 0;
    return b;
}

// Parses path as GGUF and checks it against m in full.
static void check_file(const char *path, const Model *m) {
    const ModelConfig *c = &m->config;
    file = read_file(path, &file_n);
    CHECK(file != NULL, "%s: cannot read back", path);
    if (!file) return;
    Reader r = {file, file_n, 0, 0};
    const unsigned char *magic = take(&r, 4);
    CHECK(magic && !memcmp(magic, "GGUF", 4), "bad magic");
    CHECK(get_u32(&r) == 3, "version is not 3");
    uint64_t n_tensors = get_u64(&r), n_kv = get_u64(&r);

    // Key/value pairs: each key once, each value parseable.
    Kv *kv = calloc(n_kv < 1000 ? n_kv : 1, sizeof *kv);
    CHECK(n_kv > 0 && n_kv < 1000 && kv, "n_kv = %llu", (unsigned long long)n_kv);
    if (!kv || n_kv >= 1000) goto out;
    for (uint64_t i = 0; i < n_kv && !r.bad; i++) {
        get_str(&r, kv[i].key, sizeof kv[i].key);
        kv[i].type = get_u32(&r);
        if (kv[i].type == T_ARRAY) {
            kv[i].elem_type = get_u32(&r);
            kv[i].count = get_u64(&r);
            kv[i].value = r.pos;
            for (uint64_t j = 0; j < kv[i].count && !r.bad; j++) skip_value(&r, kv[i].elem_type);
        } else {
            kv[i].value = r.pos;
            skip_value(&r, kv[i].type);
        }
        for (uint64_t j = 0; j < i; j++) CHECK(strcmp(kv[j].key, kv[i].key), "key %s twice", kv[i].key);
    }
    CHECK(!r.bad, "key/value section truncated or malformed");
    if (r.bad) goto out;
    int nk = (int)n_kv;
    const int mla = c->latent_dim > 0;
    const char *arch = mla ? "deepseek2" : "llama";
    char key[128];
#define ARCH_KEY(k) (snprintf(key, sizeof key, "%s.%s", arch, k), key)
    check_str(kv, nk, "general.architecture", arch);
    check_str(kv, nk, "general.name", "micro");
    check_u32(kv, nk, "general.alignment", 32);
    check_u32(kv, nk, "general.file_type", 0);
    check_u32(kv, nk, ARCH_KEY("context_length"), (uint32_t)c->max_seq_len);
    check_u32(kv, nk, ARCH_KEY("embedding_length"), (uint32_t)c->dim);
    check_u32(kv, nk, ARCH_KEY("block_count"), (uint32_t)c->n_layers);
    check_u32(kv, nk, ARCH_KEY("feed_forward_length"), (uint32_t)c->hidden_dim);
    check_u32(kv, nk, ARCH_KEY("attention.head_count"), (uint32_t)c->n_heads);
    check_u32(kv, nk, ARCH_KEY("vocab_size"), 256);
    check_f32(kv, nk, ARCH_KEY("rope.freq_base"), c->rope_theta);
    check_f32(kv, nk, ARCH_KEY("attention.layer_norm_rms_epsilon"), c->norm_eps);
    const int n_arch_keys = mla ? 21 : 12; // the keys above and below under arch's prefix
    if (!mla) {
        check_u32(kv, nk, ARCH_KEY("attention.head_count_kv"), (uint32_t)c->n_kv_heads);
        check_u32(kv, nk, ARCH_KEY("attention.key_length"), (uint32_t)c->head_dim);
        check_u32(kv, nk, ARCH_KEY("attention.value_length"), (uint32_t)c->head_dim);
        check_u32(kv, nk, ARCH_KEY("rope.dimension_count"), (uint32_t)c->head_dim);
    } else {
        // DeepSeek-V2 as llama.cpp runs it absorbed: one cached row per token (the latent, then the
        // RoPE key), multi-query; the per-head sizes in the _mla keys; dense, no query compression.
        check_u32(kv, nk, ARCH_KEY("attention.head_count_kv"), 1);
        check_u32(kv, nk, ARCH_KEY("attention.key_length"), (uint32_t)(c->latent_dim + c->rope_dim));
        check_u32(kv, nk, ARCH_KEY("attention.value_length"), (uint32_t)c->latent_dim);
        check_u32(kv, nk, ARCH_KEY("attention.key_length_mla"), (uint32_t)(c->head_dim + c->rope_dim));
        check_u32(kv, nk, ARCH_KEY("attention.value_length_mla"), (uint32_t)c->head_dim);
        check_u32(kv, nk, ARCH_KEY("attention.q_lora_rank"), 0);
        check_u32(kv, nk, ARCH_KEY("attention.kv_lora_rank"), (uint32_t)c->latent_dim);
        check_u32(kv, nk, ARCH_KEY("rope.dimension_count"), (uint32_t)c->rope_dim);
        check_u32(kv, nk, ARCH_KEY("leading_dense_block_count"), (uint32_t)c->n_layers);
        check_u32(kv, nk, ARCH_KEY("expert_count"), 0);
        check_u32(kv, nk, ARCH_KEY("expert_used_count"), 0);
        check_u32(kv, nk, ARCH_KEY("expert_shared_count"), 0);
        check_u32(kv, nk, ARCH_KEY("expert_feed_forward_length"), (uint32_t)c->hidden_dim);
    }
#undef ARCH_KEY
    // No key of the other architecture, and no arch key this test does not know.
    int n_prefixed = 0;
    size_t alen = strlen(arch);
    for (int i = 0; i < nk; i++) {
        if (!strncmp(kv[i].key, arch, alen) && kv[i].key[alen] == '.') n_prefixed++;
        CHECK(strncmp(kv[i].key, mla ? "llama." : "deepseek2.", mla ? 6 : 10), "key %s in a %s file", kv[i].key, arch);
    }
    CHECK(n_prefixed == n_arch_keys, "%d %s.* keys, want %d", n_prefixed, arch, n_arch_keys);
    check_str(kv, nk, "tokenizer.ggml.model", "llama");
    check_u32(kv, nk, "tokenizer.ggml.bos_token_id", 1);
    check_u32(kv, nk, "tokenizer.ggml.eos_token_id", 1);
    check_bool(kv, nk, "tokenizer.ggml.add_bos_token", 1);
    check_bool(kv, nk, "tokenizer.ggml.add_eos_token", 0);
    check_bool(kv, nk, "tokenizer.ggml.add_space_prefix", 0);
    const Kv *tok = find(kv, nk, "tokenizer.ggml.tokens"), *sc = find(kv, nk, "tokenizer.ggml.scores"),
             *ty = find(kv, nk, "tokenizer.ggml.token_type");
    CHECK(tok && tok->type == T_ARRAY && tok->elem_type == T_STRING && tok->count == 256, "tokenizer.ggml.tokens");
    CHECK(sc && sc->type == T_ARRAY && sc->elem_type == T_F32 && sc->count == 256, "tokenizer.ggml.scores");
    CHECK(ty && ty->type == T_ARRAY && ty->elem_type == T_I32 && ty->count == 256, "tokenizer.ggml.token_type");
    if (tok && sc && ty && tok->count == 256 && sc->count == 256 && ty->count == 256) {
        Reader a = {file, file_n, tok->value, 0}, s = {file, file_n, sc->value, 0}, t = {file, file_n, ty->value, 0};
        for (int b = 0; b < 256; b++) {
            char name[32], want[8];
            get_str(&a, name, sizeof name);
            snprintf(want, sizeof want, "<0x%02X>", b);
            CHECK(!strcmp(name, want), "token %d is '%s', want '%s'", b, name, want);
            CHECK(get_f32(&s) == 0.0f, "score of token %d", b);
            CHECK(get_u32(&t) == 6, "token %d is not of type BYTE (6)", b);
        }
    }

    // Tensor infos: every expected name exactly once (GGUF readers find tensors by name, so the
    // order is free), F32, the expected shape, offsets aligned and not overlapping.
    Expect *e = calloc(2 + 11 * (size_t)c->n_layers, sizeof *e);
    float *made = NULL;
    if (!e) goto out;
    int ne = expected_tensors(m, e, &made);
    CHECK(n_tensors == (uint64_t)ne, "%llu tensors, want %d (no output.weight: the classifier is tied)",
          (unsigned long long)n_tensors, ne);
    uint64_t *offsets = calloc((size_t)ne, sizeof *offsets);
    int *seen = calloc((size_t)ne, sizeof *seen);
    for (uint64_t i = 0; i < n_tensors && offsets && seen && !r.bad; i++) {
        char name[128];
        get_str(&r, name, sizeof name);
        int x = -1;
        for (int j = 0; j < ne; j++)
            if (!strcmp(name, e[j].name)) x = j;
        CHECK(x >= 0, "unexpected tensor '%s'", name);
        uint32_t dims = get_u32(&r);
        uint64_t shape[4] = {1, 1, 1, 1};
        CHECK(dims >= 1 && dims <= 3, "%s: %u dimensions", name, dims);
        for (uint32_t k = 0; k < dims && k < 4; k++) shape[k] = get_u64(&r);
        uint32_t type = get_u32(&r);
        uint64_t offset = get_u64(&r);
        if (x < 0) continue;
        CHECK(!seen[x]++, "tensor '%s' twice", name);
        CHECK(dims == e[x].n_dims, "%s: %u dimensions, want %u", name, dims, e[x].n_dims);
        CHECK(shape[0] == e[x].ne[0] && shape[1] == e[x].ne[1] && shape[2] == e[x].ne[2],
              "%s: shape %llux%llux%llu, want %llux%llux%llu", name, (unsigned long long)shape[0],
              (unsigned long long)shape[1], (unsigned long long)shape[2], (unsigned long long)e[x].ne[0],
              (unsigned long long)e[x].ne[1], (unsigned long long)e[x].ne[2]);
        CHECK(type == 0, "%s: type %u, not F32", name, type);
        CHECK(offset % 32 == 0, "%s: offset %llu not aligned to 32", name, (unsigned long long)offset);
        offsets[x] = offset;
    }
    CHECK(!r.bad, "tensor info section truncated");
    for (int j = 0; seen && j < ne; j++) CHECK(seen[j], "tensor '%s' missing", e[j].name);
    size_t data = (r.pos + 31) / 32 * 32;
    for (size_t i = r.pos; i < data && i < file_n; i++) CHECK(file[i] == 0, "padding byte %zu is not zero", i);
    if (offsets && seen && !r.bad && ne > 0) {
        uint64_t end = 0;
        for (int i = 0; i < ne; i++) {
            uint64_t bytes = expect_count(&e[i]) * 4;
            if (offsets[i] + bytes > end) end = offsets[i] + bytes;
            for (int j = 0; j < ne; j++) // no two tensors share a byte
                CHECK(i == j || offsets[j] >= offsets[i] + bytes || offsets[i] >= offsets[j] + expect_count(&e[j]) * 4,
                      "%s and %s overlap", e[i].name, e[j].name);
            CHECK(data + offsets[i] + bytes <= file_n && !memcmp(file + data + offsets[i], e[i].data, (size_t)bytes),
                  "%s: data differ from the model's", e[i].name);
        }
        // Tightly packed: the data section is the tensors, each padded to the alignment, nothing else.
        uint64_t packed = 0;
        for (int i = 0; i < ne; i++) packed += (expect_count(&e[i]) * 4 + 31) / 32 * 32;
        CHECK((end + 31) / 32 * 32 == packed, "data section %llu bytes, tensors need %llu", (unsigned long long)end,
              (unsigned long long)packed);
        CHECK(file_n == data + packed, "file is %zu bytes, want %llu", file_n, (unsigned long long)(data + packed));
    }
    free(seen);
    free(offsets);
    free(made);
    free(e);
out:
    free(kv);
    free((void *)file);
    file = NULL;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int main(void) {
    char dir[] = "/tmp/micro-test-gguf-XXXXXX", path[512], err[512];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    // A small model whose every dimension differs (q vs kv widths, hidden, vocab), with distinct
    // weights, so that any swapped tensor, shape or offset shows.
    ModelConfig c = model_config_micro();
    c.dim = 16, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 4, c.hidden_dim = 24, c.max_seq_len = 64;
    c.rope_theta = 500.0f, c.norm_eps = 1e-6f;
    Model m;
    CHECK(model_config_validate(&c, err, sizeof err) == 0, "tiny config: %s", err);
    if (model_alloc(&m, &c)) return 1;
    for (size_t i = 0; i < m.n_params; i++) m.params[i] = (float)sin((double)i + 0.5) * (float)(1 + i % 7);
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    CHECK(gguf_save(&m, path, err, sizeof err) == 0, "save tiny: %s", err);
    check_file(path, &m);
    remove(path);

    // The same under latent attention (deepseek2): latent, RoPE key and head sizes all different.
    ModelConfig cm = c;
    cm.n_kv_heads = 1, cm.latent_dim = 6, cm.rope_dim = 2;
    Model mla;
    CHECK(model_config_validate(&cm, err, sizeof err) == 0, "tiny latent config: %s", err);
    if (model_alloc(&mla, &cm)) return 1;
    for (size_t i = 0; i < mla.n_params; i++) mla.params[i] = (float)cos((double)i * 0.7 + 0.1) * (float)(1 + i % 5);
    snprintf(path, sizeof path, "%s/tiny-mla.gguf", dir);
    CHECK(gguf_save(&mla, path, err, sizeof err) == 0, "save tiny latent: %s", err);
    check_file(path, &mla);
    remove(path);
    model_free(&mla);

    // The shipped models: micro's own hyperparameters (context 2048, ...), and its grouped-query and
    // latent-attention siblings when they are there.
    const char *root = getenv("MICRO_SOURCE_ROOT");
    const char *shipped_names[] = {"micro", "micro-gqa", "micro-mla"};
    for (size_t s = 0; s < sizeof shipped_names / sizeof shipped_names[0]; s++) {
        char shipped[4096];
        snprintf(shipped, sizeof shipped, "%s/models/%s.bin", root ? root : ".", shipped_names[s]);
        Model sm;
        if (model_load(&sm, shipped, err, sizeof err) == 0) {
            snprintf(path, sizeof path, "%s/%s.gguf", dir, shipped_names[s]);
            CHECK(gguf_save(&sm, path, err, sizeof err) == 0, "save %s: %s", shipped_names[s], err);
            check_file(path, &sm);
            remove(path);
            model_free(&sm);
        } else {
            printf("note: %s (that shipped model's file not checked)\n", err);
        }
    }

    // A full disk: the writer reports the error (at the latest when the stream is flushed).
    FILE *full = fopen("/dev/full", "wb");
    if (full) {
        int rc = gguf_write_model(full, &m, err, sizeof err);
        if (rc == 0) rc = fflush(full) == 0 ? 0 : -1;
        CHECK(rc != 0, "writing to /dev/full succeeded");
        fclose(full);
    }
    // Paths that must be refused (status 2) and a write that fails (status 1, nothing left behind).
    CHECK(gguf_save(&m, "", err, sizeof err) == 2, "empty path accepted");
    CHECK(gguf_save(&m, dir, err, sizeof err) == 2 && strstr(err, "is a directory"), "directory accepted: %s", err);
    // A FIFO stands for device nodes: a test must never risk replacing the real /dev/null.
    snprintf(path, sizeof path, "%s/fifo", dir);
    if (mkfifo(path, 0600) == 0) {
        CHECK(gguf_save(&m, path, err, sizeof err) == 2, "FIFO accepted");
        struct stat st;
        CHECK(stat(path, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
        remove(path);
    }
    snprintf(path, sizeof path, "%s/missing/x.gguf", dir);
    // refused before any work, as every output path is (safe_check_output)
    CHECK(gguf_save(&m, path, err, sizeof err) == 2 && strstr(err, "does not exist") && !strchr(err, '\n'),
          "write into a missing folder: %s", err);
    // An existing regular file is replaced whole.
    snprintf(path, sizeof path, "%s/old.gguf", dir);
    FILE *old = fopen(path, "wb");
    if (old) {
        fputs("old contents", old);
        fclose(old);
    }
    CHECK(gguf_save(&m, path, err, sizeof err) == 0, "replace: %s", err);
    check_file(path, &m);
    remove(path);
    CHECK(rmdir(dir) == 0, "%s not empty after the test (a temporary file left behind?): %s", dir, strerror(errno));
    CHECK(!file_exists(dir), "%s still exists", dir);

    model_free(&m);
    if (failures) printf("%d failures\n", failures);
    else printf("ok   GGUF export read back: header, metadata, tensor infos, alignment, data\n");
    return failures ? 1 : 0;
}
