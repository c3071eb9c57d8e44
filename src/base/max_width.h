// The one limit on a vector's width: a head's key, value or query (head_dim), latent attention's
// latent (latent_dim) and its RoPE key (rope_dim). A token's path through the cache works on one such
// vector at a time in scratch on the stack (no allocation per token in the hot loops), so the width
// is bounded where it enters: the model loader, the trainer's options and every cache stream refuse
// a wider one before any buffer is sized by it.
#ifndef MICRO_MAX_WIDTH_H
#define MICRO_MAX_WIDTH_H

#define MICRO_MAX_WIDTH 1024

#endif
