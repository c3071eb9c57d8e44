// micro tokenize: a text's token ids as the model's own tokenizer gives them (docs/models.md).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_options.h"
#include "commands.h"
#include "gguf_tokenizer.h"
#include "model_file.h"
#include "msgtext.h"
#include "text.h"

static const char *tokenize_usage =
    "usage: micro tokenize --text FILE[:CHARS] [--model FILE] [--csv]\n"
    "  The text's token ids, one a line, as the model reads them: micro's byte vocabulary (micro's own\n"
    "  files, and GGUFs of 256 byte tokens) gives BOS and then the bytes; a GGUF's byte-level BPE\n"
    "  (tokenizer.ggml.model gpt2; pre-tokenizers gpt2, llama-bpe, qwen2, smollm) or SentencePiece\n"
    "  (llama: Llama 2, TinyLlama) its ids, BOS first where the file's add_bos_token says so (for\n"
    "  SentencePiece when it is absent too). Text is data: no special token is read in it.\n"
    "options:\n"
    "  --text FILE[:CHARS] the text (UTF-8), its first CHARS characters\n"
    "  --model FILE        model file (default models/micro.bin)\n"
    "  --csv               id,bytes: each token's bytes, \\xNN for those that are not printable ASCII\n"
    "  -h, --help          this help\n";

int tokenize_parse(int argc, char **argv, TokenizeOptions *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    Opts p;
    opts_init(&p, argc, argv, err, errlen);
    while (opts_next(&p)) {
        int bad;
        if (opts_is_help(&p)) return OPTS_HELP;
        else if (opts_is(&p, "--text")) bad = opts_string(&p, &o->text) || cmd_check_text_arg("--text", o->text, err, errlen);
        else if (opts_is(&p, "--model")) bad = opts_path(&p, &o->model_path);
        else if (opts_is(&p, "--csv")) bad = opts_flag(&p), o->csv = 1;
        else return opts_unknown(&p);
        if (bad) return OPTS_ERROR;
    }
    if (!o->text) return opts_fail(&p, "tokenize needs --text FILE[:CHARS] (see micro tokenize --help)");
    return OPTS_RUN;
}

// One line: the id, and with --csv its bytes escaped.
static void print_token(int32_t id, const uint8_t *bytes, int n, int csv) {
    printf("%d", id);
    if (csv) {
        putchar(',');
        for (int i = 0; i < n; i++) {
            if (bytes[i] >= 0x21 && bytes[i] < 0x7f && bytes[i] != '\\' && bytes[i] != ',' && bytes[i] != '"')
                putchar(bytes[i]);
            else
                printf("\\x%02X", bytes[i]);
        }
    }
    putchar('\n');
}

int cmd_tokenize(int argc, char **argv) {
    TokenizeOptions o;
    char err[512], path[4096];
    int done = cli_after_parse(tokenize_parse(argc, argv, &o, err, sizeof err), err, tokenize_usage);
    if (done >= 0) return done;
    const char *model_path = cli_default_path(o.model_path, "models/micro.bin", path, sizeof path);
    Text text;
    if (text_load(&text, o.text, INT32_MAX, err, sizeof err)) return cli_error("%s", err);
    // Only the tokenizer is read: a GGUF's metadata (its weights are not decoded), or nothing for
    // micro's own files, whose vocabulary is the bytes.
    const uint8_t *map = NULL;
    size_t size = 0;
    Gguf g = {0};
    GgufTokenizer tok = {0};
    FILE *f = fopen(model_path, "rb");
    char magic[4] = {0};
    const int is_gguf = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (f) fclose(f);
    int status = 0;
    char shown[MSG_TEXT];
    if (is_gguf) {
        if (gguf_map(model_path, &map, &size, err, sizeof err) ||
            gguf_parse(&g, map, size, msg_text(model_path, shown, sizeof shown), err, sizeof err))
            status = cli_error("%s", err);
        else if (gguf_tokenizer(&g, &tok, err, sizeof err)) // BPE or SentencePiece, or micro's bytes (tok.tok NULL)
            status = cli_error("%s: %s", shown, err);
    } else {
        Model m; // micro's own file: checked as every command checks it
        if (model_load(&m, model_path, err, sizeof err)) status = cli_error("%s", err);
        else model_free(&m);
    }
    if (!status && tok.tok) { // the ids eval reads (text_tokenize: BOS as the file says)
        if (text_tokenize(&text, tok.tok, tok.bos, INT32_MAX, err, sizeof err)) {
            status = cli_error("%s", err);
        } else {
            uint8_t bytes[1024];
            for (int i = 0; i < text.n_tokens; i++) {
                const int bos = i == 0 && tok.bos >= 0;
                const int nb = bos ? 0 : tokenizer_token_bytes(tok.tok, text.tokens[i], bytes, sizeof bytes);
                print_token(text.tokens[i], bytes, nb > 0 ? nb : 0, o.csv && !bos);
            }
        }
    } else if (!status) { // micro's byte vocabulary: BOS, then the bytes
        for (int i = 0; i < text.n_tokens; i++) print_token(text.tokens[i], text.bytes + i, i ? 1 : 0, o.csv && i);
    }
    gguf_tokenizer_free(&tok);
    gguf_free(&g);
    if (map) gguf_unmap(map, size);
    text_free(&text);
    return status;
}
