// micro as a GGUF (version 3) model that llama.cpp loads and runs: a llama model (multi-head and
// grouped-query attention), or a deepseek2 model with every layer dense (latent attention). Format:
// docs/gguf.md.
#ifndef MICRO_EXPORT_GGUF_H
#define MICRO_EXPORT_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"

#define GGUF_ALIGNMENT 32 // bytes; written as general.alignment (GGUF's default, stated anyway)
#define GGUF_EOS_TOKEN MICRO_BOS // the document separator: llama.cpp stops where `micro generate` stops

// Writes m to f as GGUF v3: llama.* (or deepseek2.*) hyperparameters, a byte-level SPM vocabulary (<0x00>..<0xFF>,
// all of type BYTE) and every weight as an F32 tensor under llama.cpp's name (the tied classifier is
// not written: llama.cpp falls back to token_embd.weight). Returns 0, or -1 with one line in err.
// Only writes; flushing, syncing and renaming are the caller's.
int gguf_write_model(FILE *f, const Model *m, char *err, size_t errlen);

// A byte-level BPE vocabulary ("gpt2", docs/models.md) to write instead of micro's bytes, for the
// tests and tools that need a model with a vocabulary of its own (tests/make_gguf): the tokens as
// UTF-8 in GPT-2's byte stand-ins, their llama.cpp types (NULL: all normal), the merges ("a b", by
// rank), the pre-tokenizer's name, and BOS and EOS ids (-1: none; add_bos_token is bos >= 0). The
// tokens are at most the embedding's rows.
typedef struct {
    const char *const *tokens;
    const int32_t *types;
    int n_tokens;
    const char *const *merges;
    int n_merges;
    const char *pre;
    int32_t bos, eos;
} GgufBpeVocab;
int gguf_write_model_vocab(FILE *f, const Model *m, const GgufBpeVocab *vocab, char *err, size_t errlen);
int gguf_save_vocab(const Model *m, const GgufBpeVocab *vocab, const char *path, char *err, size_t errlen);

// Writes the GGUF file at path through safe_write (a temporary beside it, flushed, synced, renamed),
// so that a failure never leaves a half-written file under the real name. Returns 0; 2 for a path
// that cannot be an output (safe_check_output); 1 for a failed write. One line in err either way.
int gguf_save(const Model *m, const char *path, char *err, size_t errlen);

#endif
