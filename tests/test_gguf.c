// GGUF reading (src/model/gguf.c, gguf_model.c, ggml_types.c) against independent truths:
// - fp16 and bf16: all 65,536 codes against kv's own conversions (test_quant checks those against
//   the formats' defining formulas);
// - every weight type: random blocks decoded, against the block layouts written out here from
//   ggml's definitions in double precision (exact where ggml's arithmetic is one rounding);
// - micro's own export read back bit for bit, and a file with each weight type as the token
//   embedding read back as that type decodes it;
// - hostile files: every truncation, a foreign architecture, tokenizer and weight type, an unread
//   tensor, each refused in one line naming it;
// - qwen2, qwen3 and Llama 3's parts: each written by micro's exporter and read back bit for bit, and
//   NeoX RoPE against a closed form: a NeoX model's loss is the loss of the same model with each
//   head's q and k rows (and their biases and norm gains) permuted from (i, i + half) to (2i, 2i+1)
//   and adjacent-pair RoPE, since q·k is the same sum in either order (llama.cpp's check of every
//   part: scripts/gguf-check).
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "eval.h"
#include "kvcache.h"
#include "export_gguf.h"
#include "ggml_types.h"
#include "gguf.h"
#include "gguf_model.h"
#include "le_bytes.h"
#include "quant.h"
#include "random_model.h"

static double half(const uint8_t *p) { return quant_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8)); }

// The number at index i of a block, in double, from the layout's definition.
static double reference(uint32_t type, const uint8_t *b, int i) {
    switch (type) {
    case 8: return (double)(int8_t)b[2 + i] * half(b); // Q8_0: d, 32 int8
    case 2: { // Q4_0: d, 16 bytes; number j the low nibble of byte j, j + 16 its high nibble
        const int q = i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4;
        return (q - 8) * half(b);
    }
    case 3: { // Q4_1: d, m, 16 bytes
        const int q = i < 16 ? b[4 + i] & 15 : b[4 + i - 16] >> 4;
        return q * half(b) + half(b + 2);
    }
    case 6: case 7: { // Q5_0 (d, qh, qs) and Q5_1 (d, m, qh, qs): bit i of qh is number i's fifth
        const int off = type == 6 ? 2 : 4;
        const uint32_t qh = le_get_u32(b + off);
        const int lo = i < 16 ? b[off + 4 + i] & 15 : b[off + 4 + i - 16] >> 4;
        const int q = lo | (int)((qh >> i) & 1) << 4;
        return type == 6 ? (q - 16) * half(b) : q * half(b) + half(b + 2);
    }
    case 12: case 13: { // Q4_K, Q5_K: sub-block s = i / 32 of 8, its 6-bit scale and minimum
        const int s = i / 32, l = i % 32;
        const uint8_t *sc = b + 4;
        const int scale = s < 4 ? sc[s] & 63 : (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
        const int min = s < 4 ? sc[s + 4] & 63 : (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
        const uint8_t *qs = b + (type == 12 ? 16 : 48) + 32 * (s / 2);
        int q = s % 2 ? qs[l] >> 4 : qs[l] & 15;
        if (type == 13) q |= ((b[16 + l] >> s) & 1) << 4; // qh: bit s of byte l
        return half(b) * scale * q - half(b + 2) * min;
    }
    case 14: { // Q6_K: halves of 128; in each, runs r = 0..3 of 32 (low nibbles of ql[l], ql[l + 32],
               // then their high nibbles), two bits of qh[l] each, scale sc[8·half + 2r + l / 16]
        const int h = i / 128, r = (i % 128) / 32, l = i % 32;
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        const int lo = r % 2 ? ql[l + 32] : ql[l];
        const int q = ((r < 2 ? lo & 15 : lo >> 4) | ((qh[l] >> (2 * r)) & 3) << 4) - 32;
        return half(b + 208) * (int8_t)b[192 + 8 * h + 2 * r + l / 16] * q;
    }
    }
    return NAN;
}

// Random block bytes whose fp16 scales are finite numbers in (-1, 1).
static void random_block(const GgmlType *t, uint8_t *b, uint64_t *rng) {
    for (size_t i = 0; i < t->bytes; i++) b[i] = (uint8_t)check_next(rng);
    const int scales[] = {t->id == 14 ? 208 : 0, t->id == 3 || t->id == 7 || t->id == 12 || t->id == 13 ? 2 : -1};
    for (int s = 0; s < 2; s++)
        if (scales[s] >= 0) {
            const uint16_t h = quant_fp32_to_fp16((float)(check_uniform(rng) * 2 - 1));
            b[scales[s]] = (uint8_t)h, b[scales[s] + 1] = (uint8_t)(h >> 8);
        }
}

static void check_types(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = ggml_half_to_float((uint16_t)h), b = quant_fp16_to_fp32((uint16_t)h);
        CHECK(memcmp(&a, &b, 4) == 0, "fp16 0x%04x: %a, kv's %a", h, (double)a, (double)b);
        const float c = ggml_bf16_to_float((uint16_t)h);
        uint32_t bits;
        memcpy(&bits, &c, 4);
        CHECK(bits == h << 16, "bf16 0x%04x", h);
    }
    static const uint32_t quantised[] = {2, 3, 6, 7, 8, 12, 13, 14};
    uint64_t rng = 42;
    for (size_t k = 0; k < sizeof quantised / sizeof quantised[0]; k++) {
        const GgmlType *t = ggml_type_of(quantised[k]);
        CHECK(t != NULL, "type %u not read", quantised[k]);
        if (!t) continue;
        uint8_t block[256];
        float out[256];
        int worst_ulps = 0;
        for (int rep = 0; rep < 200; rep++) {
            random_block(t, block, &rng);
            t->decode(block, out, 1);
            for (int i = 0; i < t->block; i++) {
                const double want = reference(t->id, block, i);
                // One rounding (Q8_0, Q4_0, Q5_0) is exact; the others round each step in fp32.
                const int exact = t->id == 8 || t->id == 2 || t->id == 6;
                const double tol = exact ? 0 : 4e-7 * (fabs(want) + 2 * fabs(half(block + (t->id == 14 ? 208 : 0))) * 64);
                CHECK(fabs(out[i] - want) <= tol, "%s block %d number %d: %.9g, want %.9g", t->name, rep, i, (double)out[i], want);
                if (fabs(out[i] - want) > 0) worst_ulps = 1;
            }
        }
        printf("ok   %-5s 200 random blocks against the layout (%s)\n", t->name, worst_ulps ? "within fp32 rounding" : "exact");
    }
    CHECK(ggml_type_of(16) == NULL && strcmp(ggml_type_unread_name(16), "IQ2_XXS") == 0, "IQ2_XXS is not read, by name");
}

// A file's bytes, grown as they are written.
typedef struct {
    uint8_t *b;
    size_t n, cap;
} Buf;
static void put(Buf *w, const void *p, size_t n) {
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2;
        w->b = realloc(w->b, w->cap);
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

// micro's export of a random small model, as bytes.
static Buf exported(const Model *m) {
    Buf w = {0};
    char *bytes = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&bytes, &n);
    char err[256];
    CHECK(f && gguf_write_model(f, m, err, sizeof err) == 0, "export: %s", err);
    fclose(f);
    put(&w, bytes, n);
    free(bytes);
    return w;
}

// Replaces the first occurrence of a string value `from` by `to` of the same length.
static void patch(Buf *w, const char *from, const char *to) {
    const size_t n = strlen(from);
    for (size_t i = 0; i + n <= w->n; i++)
        if (memcmp(w->b + i, from, n) == 0) {
            memcpy(w->b + i, to, n);
            return;
        }
    CHECK(0, "no '%s' in the file", from);
}

static void expect_refused(const char *label, const Buf *w, const char *needle) {
    Model m;
    char err[512] = "";
    const int rc = gguf_model_from_bytes(&m, w->b, w->n, "t.gguf", err, sizeof err);
    CHECK(rc != 0 && strstr(err, needle) && !strchr(err, '\n') && m.params == NULL, "%s: rc %d, '%s' lacks '%s'", label, rc, err, needle);
    if (rc == 0) model_free(&m);
    else printf("ok   %-22s %s\n", label, err);
}

// The loss of micro's fp32 cache on a fixed run of bytes.
static double fp32_loss(const Model *m) {
    int32_t tokens[40];
    for (int i = 0; i < 40; i++) tokens[i] = i == 0 ? MICRO_BOS : 32 + (i * 37) % 90;
    EvalResult r;
    char err[256];
    CHECK(eval_tokens(m, tokens, 40, &codec_spec_fp32, &codec_spec_fp32, 1, 0, NULL, NULL, &r, err, sizeof err) == 0,
          "eval: %s", err);
    return r.loss;
}

// Rows [h·hd, (h+1)·hd) of each head of a [heads·hd, width] matrix (width 1: a vector) from NeoX's
// pair order to adjacent pairs: row i < half goes to 2i, row half + i to 2i + 1.
static void to_adjacent(float *x, int heads, int hd, size_t width) {
    float *tmp = malloc(sizeof(float) * (size_t)hd * width);
    for (int h = 0; h < heads; h++) {
        float *head = x + (size_t)h * hd * width;
        for (int i = 0; i < hd; i++) {
            const int to = i < hd / 2 ? 2 * i : 2 * (i - hd / 2) + 1;
            memcpy(tmp + (size_t)to * width, head + (size_t)i * width, sizeof(float) * width);
        }
        memcpy(head, tmp, sizeof(float) * (size_t)hd * width);
    }
    free(tmp);
}

static void check_archs(void) {
    static const char *names[] = {"llama (Llama 3's rope_freqs, a classifier of its own)", "qwen2", "qwen3"};
    for (int a = 0; a < 3; a++) {
        ModelConfig c = small_config();
        c.dim = 128, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 64, c.hidden_dim = 256;
        if (a == 0) c.separate_output = 1, c.rope_factors = 1;
        if (a == 1) c.rope_halves = 1, c.qkv_bias = 1;
        if (a == 2) c.rope_halves = 1, c.qk_norm = 1, c.head_dim = 128; // heads wider than dim / n_heads
        Model m;
        random_model(&m, &c, 11 + (unsigned)a);
        for (int i = 0; c.qk_norm && i < c.n_layers * c.head_dim; i++) m.w.q_norm[i] += 1.0f, m.w.k_norm[i] += 1.0f;
        for (int i = 0; c.rope_factors && i < c.head_dim / 2; i++) m.w.rope_freqs[i] = 1.0f + (float)i / 4.0f;
        Buf w = exported(&m);
        Model back;
        char err[512];
        CHECK(gguf_model_from_bytes(&back, w.b, w.n, "a.gguf", err, sizeof err) == 0, "%s read back: %s", names[a], err);
        CHECK(memcmp(&back.config, &m.config, sizeof c) == 0 && back.n_params == m.n_params &&
                  memcmp(back.params, m.params, m.n_params * sizeof(float)) == 0,
              "%s: not read back bit for bit", names[a]);
        const double loss = fp32_loss(&back);
        CHECK(isfinite(loss) && loss > 0.0, "%s: loss %g", names[a], loss);
        printf("ok   %s read back bit for bit (fp32 loss %.6f)\n", names[a], loss);
        model_free(&back);
        if (c.rope_halves) { // the closed form: the same model in adjacent pairs
            Model adj;
            random_model(&adj, &c, 11 + (unsigned)a);
            memcpy(adj.params, m.params, m.n_params * sizeof(float));
            adj.config.rope_halves = 0;
            const int hd = c.head_dim, H = c.n_heads, K = c.n_kv_heads;
            for (int l = 0; l < c.n_layers; l++) {
                const size_t q = (size_t)H * hd, k = (size_t)K * hd;
                to_adjacent(adj.w.wq + (size_t)l * q * c.dim, H, hd, (size_t)c.dim);
                to_adjacent(adj.w.wk + (size_t)l * k * c.dim, K, hd, (size_t)c.dim);
                if (c.qkv_bias) to_adjacent(adj.w.bq + (size_t)l * q, H, hd, 1), to_adjacent(adj.w.bk + (size_t)l * k, K, hd, 1);
                if (c.qk_norm) to_adjacent(adj.w.q_norm + (size_t)l * hd, 1, hd, 1), to_adjacent(adj.w.k_norm + (size_t)l * hd, 1, hd, 1);
            }
            const double want = fp32_loss(&adj);
            CHECK(fabs(want - loss) < 1e-5, "%s: NeoX RoPE %.7f, permuted adjacent pairs %.7f", names[a], loss, want);
            printf("ok   %s: NeoX RoPE %.7f = adjacent pairs of permuted rows %.7f\n", names[a], loss, want);
            model_free(&adj);
        }
        // A part the architecture lacks, or one missing, named.
        Buf v = {0};
        put(&v, w.b, w.n);
        if (a == 1) patch(&v, "blk.0.attn_k.bias", "blk.0.attn_k.bIas");
        if (a == 2) patch(&v, "blk.1.attn_q_norm.weight", "blk.1.attn_q_nxrm.weight");
        if (a == 0) patch(&v, "rope_freqs.weight", "rope_frexs.weight");
        expect_refused(a == 0 ? "an unread tensor" : "a part missing", &v,
                       a == 0 ? "tensor rope_frexs.weight: micro's llama has no such part" : a == 1 ? "no tensor blk.0.attn_k.bias" : "no tensor blk.1.attn_q_norm.weight");
        free(v.b);
        free(w.b);
        model_free(&m);
    }
}

int main(void) {
    check_types();
    check_archs();
    ModelConfig c = small_config();
    Model m;
    random_model(&m, &c, 7);
    Buf w = exported(&m);
    Model back;
    char err[512];
    CHECK(gguf_model_from_bytes(&back, w.b, w.n, "t.gguf", err, sizeof err) == 0, "micro's export read back: %s", err);
    CHECK(back.n_params == m.n_params && memcmp(&back.config, &m.config, sizeof c) == 0 &&
              memcmp(back.params, m.params, m.n_params * sizeof(float)) == 0,
          "micro's export read back: not bit for bit");
    model_free(&back);
    printf("ok   micro's export (%zu bytes) read back bit for bit\n", w.n);
    // Every truncation refused in one line (a stride through the data, every byte of the header).
    int refused = 0, n_cuts = 0;
    for (size_t cut = 0; cut < w.n; cut += cut < 4096 ? 1 : 97, n_cuts++) {
        Model t;
        err[0] = 0;
        if (gguf_model_from_bytes(&t, w.b, cut, "t.gguf", err, sizeof err) == 0) model_free(&t);
        else refused += err[0] && !strchr(err, '\n');
    }
    CHECK(refused == n_cuts, "%d of %d truncations refused in one line", refused, n_cuts);
    printf("ok   %d truncations each refused in one line\n", n_cuts);
    Buf v = {0};
    put(&v, w.b, w.n);
    patch(&v, "llama", "qwen9");
    expect_refused("foreign architecture", &v, "architecture 'qwen9'");
    v.n = 0, put(&v, w.b, w.n);
    patch(&v, "<0x41>", "<0x42>");
    expect_refused("a vocabulary of two tokens of one text", &v, "tokens 65 and 66 have the same text");
    v.n = 0, put(&v, w.b, w.n);
    patch(&v, "ffn_up", "ffn_uq");
    expect_refused("missing tensor", &v, "no tensor blk.0.ffn_up.weight");
    // A GGUF of our own writing: micro's export with token_embd.weight in each weight type (its
    // bytes random blocks): read back, the embedding is what the type decodes.
    static const uint32_t types[] = {1, 30, 2, 3, 6, 7, 8, 12, 13, 14};
    uint64_t rng = 9;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const GgmlType *t = ggml_type_of(types[k]);
        ModelConfig ck = c;
        ck.dim = t->block > 32 ? 256 : 64, ck.n_heads = 2, ck.n_kv_heads = 2, ck.head_dim = ck.dim / 2;
        Model mk;
        random_model(&mk, &ck, 3);
        Buf e = exported(&mk);
        // The exporter writes F32 (type 0) for every tensor: give token_embd.weight (the first
        // tensor info after the key/value pairs) the new type, and its data the new bytes, which
        // are smaller, in place.
        const size_t rows = 256, row_bytes = (size_t)ck.dim / (size_t)t->block * t->bytes;
        uint8_t *blocks = malloc(rows * row_bytes);
        for (size_t b = 0; b < rows * (size_t)ck.dim / (size_t)t->block; b++)
            if (t->block == 1) {
                const uint16_t h = types[k] == 1 ? quant_fp32_to_fp16((float)(check_uniform(&rng) - 0.5))
                                                 : quant_fp32_to_bf16((float)(check_uniform(&rng) - 0.5));
                memcpy(blocks + 2 * b, &h, 2);
            } else {
                random_block(t, blocks + b * t->bytes, &rng);
            }
        Gguf g;
        CHECK(gguf_parse(&g, e.b, e.n, "e.gguf", err, sizeof err) == 0, "%s", err);
        const GgufTensor *embd = gguf_tensor(&g, "token_embd.weight");
        uint8_t *info = (uint8_t *)embd->name.ptr + embd->name.len + 4 + 8 * 2; // its type field
        CHECK(le_get_u32(info) == 0, "token_embd.weight is not F32 in the export");
        le_put_u32(info, types[k]);
        memcpy((uint8_t *)embd->data, blocks, rows * row_bytes);
        gguf_free(&g);
        Model r;
        const int rc = gguf_model_from_bytes(&r, e.b, e.n, "e.gguf", err, sizeof err);
        CHECK(rc == 0, "%s embedding: %s", t->name, err);
        if (rc == 0) {
            float *want = malloc(rows * (size_t)ck.dim * sizeof(float));
            t->decode(blocks, want, rows * (size_t)ck.dim / (size_t)t->block);
            CHECK(memcmp(want, r.w.token_embedding, rows * (size_t)ck.dim * sizeof(float)) == 0 &&
                      memcmp(r.w.attn_norm, mk.w.attn_norm, (r.n_params - rows * (size_t)ck.dim) * sizeof(float)) == 0,
                  "%s embedding: not what the type decodes, or the other tensors moved", t->name);
            printf("ok   a %s token embedding read as it decodes, the other tensors bit for bit\n", t->name);
            free(want);
            model_free(&r);
        }
        free(blocks);
        free(e.b);
        model_free(&mk);
    }
    // A type micro does not read, named.
    v.n = 0, put(&v, w.b, w.n);
    Gguf g;
    CHECK(gguf_parse(&g, v.b, v.n, "t.gguf", err, sizeof err) == 0, "%s", err);
    const GgufTensor *embd = gguf_tensor(&g, "token_embd.weight");
    le_put_u32((uint8_t *)embd->name.ptr + embd->name.len + 4 + 16, 16);
    gguf_free(&g);
    expect_refused("IQ2_XXS weights", &v, "type IQ2_XXS, which micro does not read");
    free(v.b);
    free(w.b);
    model_free(&m);
    printf("%d failures\n", failures);
    return failures != 0;
}
