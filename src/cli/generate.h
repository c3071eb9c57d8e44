// Continuing a prompt byte by byte through a decoder: micro generate, and the page's "watch it
// break" (plate_page.c).
#ifndef MICRO_GENERATE_H
#define MICRO_GENERATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "forward.h"

// Feeds BOS and the prompt to a fresh decoder, then picks up to n bytes (greedy at temp 0, else
// sampled with *rng), never a byte that would break UTF-8, and finishes a character the budget cut;
// stops early at BOS or the end of the context. Each byte goes to echo (when not NULL) as it comes
// and to out (when not NULL; room for n + 3 bytes), their count to *n_out. 0, or -1 when the logits
// at *bad_pos were not finite (generation stopped there).
int generate_continue(Decoder *d, const uint8_t *prompt, size_t plen, int n, double temp, unsigned long long *rng,
                      FILE *echo, uint8_t *out, size_t *n_out, int *bad_pos);

#endif
