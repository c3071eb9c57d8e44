// micro generate: continue a prompt byte by byte through the chosen cache (the teaching demo).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "finite.h"
#include "forward.h"
#include "model_file.h"
#include "text.h"

static const char *generate_usage =
    "usage: micro generate --prompt TEXT [options]\n"
    "  Continues the prompt byte by byte, printing bytes as they come. Sampling never emits a byte\n"
    "  that would break UTF-8, so Chinese comes out as whole characters. Stops at n bytes, at the\n"
    "  end of the context, or when the model ends the document (BOS).\n"
    "options:\n"
    "  --prompt TEXT       the text to continue (UTF-8)\n"
    "  -n N                bytes to generate (default 256)\n"
    "  --temp T            sampling temperature; 0 = greedy (default 0)\n"
    "  --seed S            sampling seed (default 1)\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --cache SPEC        KV-cache codec for keys and values (default fp32)\n"
    "  --k SPEC, --v SPEC  codec for keys / values alone\n"
    "  --threads N         decode threads (default 1)\n"
    "  -h, --help          this help\n";

// xorshift64*: small, seedable, the same everywhere.
static double next_uniform(unsigned long long *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

// Picks the next byte among those allowed by UTF-8: greedy at temp 0, else a softmax sample.
static int pick(const float *logits, int vocab, const Utf8State *u, double temp, unsigned long long *rng) {
    int best = -1;
    for (int b = 0; b < vocab; b++)
        if ((b == MICRO_BOS || utf8_byte_allowed(u, (uint8_t)b)) && (best < 0 || logits[b] > logits[best])) best = b;
    if (temp <= 0) return best;
    double total = 0, p[256];
    for (int b = 0; b < vocab; b++) {
        int ok = b == MICRO_BOS || utf8_byte_allowed(u, (uint8_t)b);
        p[b] = ok ? exp(((double)logits[b] - logits[best]) / temp) : 0.0;
        total += p[b];
    }
    double r = next_uniform(rng) * total;
    for (int b = 0; b < vocab; b++) {
        r -= p[b];
        if (r < 0 && p[b] > 0) return b;
    }
    return best;
}

int cmd_generate(int argc, char **argv) {
    const char *prompt = NULL, *model_path = NULL, *cache = "fp32", *k_spec = NULL, *v_spec = NULL;
    int n = 256, threads = 1;
    double temp = 0;
    unsigned long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(generate_usage, stdout);
            return 0;
        }
        if (!cli_value(argc, argv, &i, "--prompt", &prompt) && !cli_value(argc, argv, &i, "--model", &model_path) &&
            !cli_value(argc, argv, &i, "--cache", &cache) && !cli_value(argc, argv, &i, "--k", &k_spec) &&
            !cli_value(argc, argv, &i, "--v", &v_spec) && !cli_int(argc, argv, &i, "-n", 0, 1 << 20, &n) &&
            !cli_int(argc, argv, &i, "--threads", 1, 256, &threads) &&
            !cli_double(argc, argv, &i, "--temp", 0, 100, &temp) && !cli_u64(argc, argv, &i, "--seed", &seed))
            cli_unknown(generate_usage, a);
    }
    if (!prompt) return cli_error("generate needs --prompt TEXT (see micro generate --help)");
    size_t plen = strlen(prompt);
    long bad = utf8_first_invalid((const uint8_t *)prompt, plen);
    if (bad >= 0) return cli_error("the prompt is not valid UTF-8 (byte offset %ld)", bad);
    if (memchr(prompt, MICRO_BOS, plen)) return cli_error("the prompt contains byte 0x01 (BOS)");

    char err[512], path[4096];
    Model m;
    if (model_load(&m, cli_default_path(model_path, "models/micro.bin", path, sizeof path), err, sizeof err))
        return cli_error("%s", err);
    int ctx = m.config.max_seq_len;
    if ((long)plen + 1 >= ctx) {
        model_free(&m);
        return cli_error("the prompt has %zu bytes; the context holds %d tokens with BOS", plen, ctx);
    }
    Decoder d;
    if (decoder_init(&d, &m, k_spec ? k_spec : cache, v_spec ? v_spec : cache, ctx, threads, err, sizeof err)) {
        model_free(&m);
        return cli_error("%s", err);
    }
    unsigned long long rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    const int vocab = m.config.vocab_size;
    fwrite(prompt, 1, plen, stdout);
    const float *logits = decoder_forward(&d, MICRO_BOS, 0);
    int pos = 1;
    for (size_t i = 0; i < plen; i++) logits = decoder_forward(&d, (uint8_t)prompt[i], pos++);
    Utf8State u = {0, 0x80, 0xBF};
    // Logits that overflowed would pick bytes by NaN comparisons: stop instead (checked = finite).
    int checked = 1;
    for (int i = 0; i < n && pos < ctx && (checked = all_finite(logits, (size_t)vocab)); i++) {
        int b = pick(logits, vocab, &u, temp, &rng);
        if (b == MICRO_BOS) break;
        utf8_push(&u, (uint8_t)b);
        putchar(b);
        fflush(stdout);
        logits = decoder_forward(&d, b, pos++);
    }
    // A budget that ends inside a character finishes it, so the output stays valid UTF-8.
    while (checked && u.owed && pos < ctx && (checked = all_finite(logits, (size_t)vocab))) {
        int b = pick(logits, vocab, &u, 0, &rng);
        if (b == MICRO_BOS || !utf8_byte_allowed(&u, (uint8_t)b)) break;
        utf8_push(&u, (uint8_t)b);
        putchar(b);
        logits = decoder_forward(&d, b, pos++);
    }
    putchar('\n');
    decoder_free(&d);
    model_free(&m);
    if (!checked) {
        fprintf(stderr, "micro: the logits at position %d are " NONFINITE_REASON "\n", pos - 1);
        return 1;
    }
    return 0;
}
