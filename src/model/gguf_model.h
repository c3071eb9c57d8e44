// A model read from a GGUF file (the model the user brings): validated key by key and tensor by
// tensor, its weights decoded to fp32. model_load reads a GGUF through this when the file starts
// with GGUF's magic.
#ifndef MICRO_GGUF_MODEL_H
#define MICRO_GGUF_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

// 0, or -1 with one line in err naming the file (label) and what is refused; m is left empty then.
int gguf_model_from_bytes(Model *m, const uint8_t *data, size_t size, const char *label, char *err, size_t errlen);
int gguf_model_load(Model *m, const char *path, char *err, size_t errlen);
// A GGUF model's configuration and parameter count, its keys and vocabulary checked as gguf_model_load
// checks them, its tensors neither read nor checked (capacity --model: a shape in moments, not the
// seconds of decoding gigabytes of weights).
int gguf_model_shape(ModelConfig *c, size_t *n_params, const char *path, char *err, size_t errlen);

#endif
