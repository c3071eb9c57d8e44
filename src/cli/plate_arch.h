// Panel (g) of micro plate: architecture × cache. micro (multi-head attention), micro-gqa
// (grouped-query) and micro-mla (latent attention), trained in the same budget, each through the
// plate's scheme at 16, 8, 4, 3 and 2 bits, KIVI-2, q4_0 and FP8: bytes of cache per token, the loss,
// its increase over the architecture's own fp32 cache and over micro's, each with its paired
// bootstrap interval on the same tokens. Under latent attention each scheme runs twice: the RoPE key
// in the latent's spec (where it can hold 16 numbers) and in fp16, as FlashMLA keeps it. On the
// long texts (plate --long) each document runs in windows of the model's context (eval_windows) and
// the intervals pair each predicted byte.
#ifndef MICRO_PLATE_ARCH_H
#define MICRO_PLATE_ARCH_H

#include <stdio.h>

#include "eval.h"
#include "model.h"
#include "text.h"

#define ARCH_MAX 3
#define ARCH_TEXTS 2
#define ARCH_MAX_ROWS 64

typedef struct {
    int arch, scheme;  // indices into the architectures and the schemes (plate_arch.c)
    int rope_fp16;     // latent attention: the RoPE key kept in fp16 (else in the latent's spec)
    EvalResult res[ARCH_TEXTS];
    double own[ARCH_TEXTS];                            // increase over its own fp32 cache
    double micro[ARCH_TEXTS], micro_lo[ARCH_TEXTS], micro_hi[ARCH_TEXTS]; // over micro's fp32 cache
} ArchRow;

typedef struct {
    int present[ARCH_MAX];      // the architecture's model was found beside micro's
    char path[ARCH_MAX][4200];  // its file
    int numbers[ARCH_MAX];      // numbers cached per token and layer
    Model models[ARCH_MAX];
    EvalTrace fp32[ARCH_MAX][ARCH_TEXTS];   // the plate's texts: each fp32 run, recorded
    double *nll[ARCH_MAX][ARCH_TEXTS];      // the long texts: [1 + the arch's rows][text tokens] (eval_windows)
    int steps[ARCH_TEXTS];                  // the long texts: bytes predicted
    int fp32_row[ARCH_MAX];     // the row of each architecture's fp32 cache
    ArchRow rows[ARCH_MAX_ROWS];
    int n_rows;
    const Text *texts;
    int decode;
    int windowed;   // the long texts: windows of the model's context
    double seconds; // the panel's wall time
    int failed;     // eval's status of the first failure (its message in err)
    char err[1200];
    char left_out[600]; // why the panel was not run (the first model is not multi-head), else ""
} ArchPanel;

// Runs the panel on the plate's two texts: micro is model_path (NULL: models/micro.bin), its
// siblings micro-gqa.bin and micro-mla.bin beside it; when model_path is one of those siblings,
// micro.bin beside it (the same panel whichever of the three is given). Each file must hold the
// attention its place names: a sibling that does not is left out, and a first model that is not
// multi-head leaves the panel out (left_out says why). An architecture whose file is missing is left
// out (present[] says which). 0, or eval's status with one line in p->err. `windowed`: texts of any
// length (the corpus's validation split), each document in windows of the model's context.
int arch_panel_run(ArchPanel *p, const char *model_path, const Text *texts, int threads, int decode, int windowed);
void arch_panel_free(ArchPanel *p);

void arch_panel_print(const ArchPanel *p);
// The panel's rows of plate.csv (panel "arch"), in the columns of plate.c's header.
void arch_panel_csv(FILE *out, const ArchPanel *p);
void arch_panel_json(FILE *out, const ArchPanel *p);
// The architectures' labels ("MHA", "GQA", "MLA").
const char *arch_label(int arch);

#endif
