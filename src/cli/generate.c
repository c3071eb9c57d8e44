// micro generate: continue a prompt byte by byte through the chosen cache (the teaching demo).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_options.h"
#include "commands.h"
#include "finite.h"
#include "forward.h"
#include "generate.h"
#include "model_file.h"
#include "text.h"
#include "tokenizer.h"

static const char *generate_usage =
    "usage: micro generate --prompt TEXT [options]\n"
    "  Continues the prompt byte by byte, printing bytes as they come. Sampling never emits a byte\n"
    "  that would break UTF-8, so Chinese comes out as whole characters. Stops at n bytes, at the\n"
    "  end of the context, or when the model ends the document (BOS). A model with a vocabulary of\n"
    "  its own (a GGUF's) continues token by token instead, each token's bytes printed as it comes,\n"
    "  and stops at n tokens, the context's end or its end-of-generation token.\n"
    "options:\n"
    "  --prompt TEXT       the text to continue (UTF-8)\n"
    "  -n N                bytes (tokens, under a model's own vocabulary) to generate (default 256)\n"
    "  --temp T            sampling temperature; 0 = greedy (default 0)\n"
    "  --seed S            sampling seed (default 1)\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --calib FILE        kvquant's calibration (default beside the model: models/micro.kvq)\n"
    "  --cache SPEC        KV-cache codec for keys and values (default fp32)\n"
    "  --k SPEC, --v SPEC  codec for keys / values alone\n"
    "  --threads N         decode threads, 1..256 (default 1; at most the online cores are used)\n"
    "  -h, --help          this help\n";

// xorshift64*: small, seedable, the same everywhere.
static double next_uniform(unsigned long long *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

// Picks the next byte among those allowed by UTF-8: greedy at temp 0, else a softmax sample. BOS
// (the end of the document) only between characters, so that the text never ends inside one.
static int pick(const float *logits, int vocab, const Utf8State *u, double temp, unsigned long long *rng) {
    int best = -1;
    for (int b = 0; b < vocab; b++)
        if (((b == MICRO_BOS && !u->owed) || utf8_byte_allowed(u, (uint8_t)b)) && (best < 0 || logits[b] > logits[best]))
            best = b;
    if (temp <= 0) return best;
    double total = 0, p[256];
    for (int b = 0; b < vocab; b++) {
        int ok = (b == MICRO_BOS && !u->owed) || utf8_byte_allowed(u, (uint8_t)b);
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

int generate_parse(int argc, char **argv, GenerateOptions *o, char *err, size_t errlen) {
    const char *cache = "fp32";
    memset(o, 0, sizeof *o);
    o->n = 256, o->threads = 1, o->seed = 1;
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--prompt")) bad = opts_string(&p, &o->prompt);
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--calib")) bad = opts_path(&p, &o->calib_path);
        else if (opts_is(&p, "--cache")) bad = opts_string(&p, &cache);
        else if (opts_is(&p, "--k")) bad = opts_string(&p, &o->k_spec);
        else if (opts_is(&p, "--v")) bad = opts_string(&p, &o->v_spec);
        else if (opts_is(&p, "-n")) bad = opts_int(&p, 0, 1 << 20, &o->n);
        else if (opts_is(&p, "--threads")) bad = opts_int(&p, 1, 256, &o->threads);
        else if (opts_is(&p, "--temp")) bad = opts_double(&p, 0, 100, &o->temp);
        else if (opts_is(&p, "--seed")) bad = opts_u64(&p, &o->seed);
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (!o->prompt) return opts_fail(&p, "generate needs --prompt TEXT (see micro generate --help)");
    size_t plen = strlen(o->prompt);
    long bad = utf8_first_invalid((const uint8_t *)o->prompt, plen);
    if (bad >= 0) return opts_fail(&p, "the prompt is not valid UTF-8 (byte offset %ld)", bad);
    if (memchr(o->prompt, MICRO_BOS, plen)) return opts_fail(&p, "the prompt contains byte 0x01 (BOS)");
    if (!o->k_spec) o->k_spec = cache;
    if (!o->v_spec) o->v_spec = cache;
    return cmd_check_specs(o->k_spec, o->v_spec, err, errlen) ? OPTS_ERROR : OPTS_RUN;
}

int generate_continue(Decoder *d, const uint8_t *prompt, size_t plen, int n, double temp, unsigned long long *rng,
                      FILE *echo, uint8_t *out, size_t *n_out, int *bad_pos) {
    const int vocab = d->fwd.model->config.vocab_size, ctx = d->fwd.context;
    size_t written = 0;
    const float *logits = decoder_forward(d, MICRO_BOS, 0);
    int pos = 1;
    for (size_t i = 0; i < plen && pos < ctx; i++) logits = decoder_forward(d, prompt[i], pos++);
    Utf8State u = {0, 0x80, 0xBF};
    // Logits that overflowed would pick bytes by NaN comparisons: stop instead (checked = finite).
    // A budget that ends inside a character finishes it, greedily, so the output stays valid UTF-8
    // (pick offers no BOS inside a character).
    int checked = 1;
    for (int i = 0; (i < n || u.owed) && pos < ctx && (checked = all_finite(logits, (size_t)vocab)); i++) {
        int b = pick(logits, vocab, &u, i < n ? temp : 0, rng);
        if (b == MICRO_BOS) break;
        utf8_push(&u, (uint8_t)b);
        if (out) out[written] = (uint8_t)b;
        written++;
        if (echo) putc(b, echo), fflush(echo);
        logits = decoder_forward(d, b, pos++);
    }
    if (n_out) *n_out = written;
    if (!checked && bad_pos) *bad_pos = pos - 1;
    return checked ? 0 : -1;
}

// Under a model's own tokenizer: the prompt's ids (BOS first when the vocabulary adds one), then up
// to n tokens, greedy at temp 0 or sampled from the softmax at temp, each token's bytes to stdout
// as it comes; stops at the vocabulary's end of generation or the decoder's context. 0, or -1 with
// the position of logits that were not finite.
static int generate_tokens(Decoder *d, const Model *m, const int32_t *ids, int n_ids, int n, double temp,
                           unsigned long long *rng, int *bad_pos) {
    const int vocab = m->config.vocab_size, ctx = d->fwd.context;
    const float *logits = NULL;
    int pos = 0;
    for (; pos < n_ids && pos < ctx; pos++) logits = decoder_forward(d, ids[pos], pos);
    double *p = temp > 0 ? malloc(sizeof(double) * (size_t)vocab) : NULL;
    if (temp > 0 && !p) return -2;
    int rc = 0;
    for (int i = 0; i < n && pos < ctx; i++) {
        if (!all_finite(logits, (size_t)vocab)) {
            *bad_pos = pos - 1, rc = -1;
            break;
        }
        int best = 0;
        for (int t = 1; t < vocab; t++)
            if (logits[t] > logits[best]) best = t;
        int next = best;
        if (temp > 0) {
            double total = 0;
            for (int t = 0; t < vocab; t++) total += p[t] = exp(((double)logits[t] - logits[best]) / temp);
            double r = next_uniform(rng) * total;
            for (int t = 0; t < vocab && r >= 0; t++)
                if ((r -= p[t]) < 0 && p[t] > 0) next = t;
        }
        if (next == m->eos) break;
        uint8_t bytes[256];
        const int nb = tokenizer_token_bytes(m->tokenizer, next, bytes, sizeof bytes);
        if (nb > 0) fwrite(bytes, 1, (size_t)nb, stdout), fflush(stdout);
        logits = decoder_forward(d, next, pos++);
    }
    free(p);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    GenerateOptions o;
    char err[512];
    int done = cli_after_parse(generate_parse(argc, argv, &o, err, sizeof err), err, generate_usage);
    if (done >= 0) return done;
    const char *prompt = o.prompt, *model_path = o.model_path;
    const int n = o.n, threads = o.threads;
    const double temp = o.temp;
    const unsigned long long seed = o.seed;
    size_t plen = strlen(prompt);
    Model m;
    if (cli_load_any_model(&m, model_path, o.calib_path, err, sizeof err))
        return cli_error("%s", err);
    int ctx = m.config.max_seq_len;
    if (m.tokenizer) { // a vocabulary of its own: the prompt's ids, then tokens
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (m.bos >= 0 && (ids = malloc(sizeof *ids))) ids[n_ids++] = m.bos;
        int status = m.bos >= 0 && !ids ? cli_error("out of memory") : 0;
        if (!status && tokenizer_encode(m.tokenizer, (const uint8_t *)prompt, plen, &ids, &n_ids, err, sizeof err))
            status = cli_error("the prompt: %s", err);
        if (!status && (n_ids == 0 || (long)n_ids >= ctx))
            status = cli_error("the prompt has %zu tokens; the model's context holds %d", n_ids, ctx);
        Decoder d = {0};
        const long reach = (long)n_ids + n;
        if (!status && decoder_init(&d, &m, cli_spec(o.k_spec), cli_spec(o.v_spec), reach < ctx ? (int)reach : ctx,
                                    threads, err, sizeof err))
            status = cli_error("%s", err);
        if (!status) {
            unsigned long long rng = seed ? seed : 0x9E3779B97F4A7C15ull;
            fwrite(prompt, 1, plen, stdout);
            int bad_pos = 0;
            const int rc = generate_tokens(&d, &m, ids, (int)n_ids, n, temp, &rng, &bad_pos);
            putchar('\n');
            if (rc == -2) status = cli_error("out of memory");
            else if (rc) fprintf(stderr, "micro: the logits at position %d are " NONFINITE_REASON "\n", bad_pos), status = 1;
            decoder_free(&d);
        }
        free(ids);
        model_free(&m);
        return status;
    }
    if ((long)plen + 1 >= ctx) {
        model_free(&m);
        return cli_error("the prompt has %zu bytes; the context holds %d tokens with BOS", plen, ctx);
    }
    // The cache and the forward's buffers for the positions this run can reach (BOS, the prompt, n
    // bytes and the up to three that finish a character), not the context the file declares.
    const long reach = (long)plen + n + 4;
    Decoder d;
    if (decoder_init(&d, &m, cli_spec(o.k_spec), cli_spec(o.v_spec), reach < ctx ? (int)reach : ctx, threads, err,
                     sizeof err)) {
        model_free(&m);
        return cli_error("%s", err);
    }
    unsigned long long rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    fwrite(prompt, 1, plen, stdout);
    int bad_pos = 0;
    const int bad = generate_continue(&d, (const uint8_t *)prompt, plen, n, temp, &rng, stdout, NULL, NULL, &bad_pos);
    putchar('\n');
    decoder_free(&d);
    model_free(&m);
    if (bad) {
        fprintf(stderr, "micro: the logits at position %d are " NONFINITE_REASON "\n", bad_pos);
        return 1;
    }
    return 0;
}
