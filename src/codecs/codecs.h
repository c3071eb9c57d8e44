// Every codec family the registry in kvcache.c knows: one source file each in this folder.
#ifndef MICRO_CODECS_H
#define MICRO_CODECS_H

#include "../kvcache.h"

extern const CodecFamily codec_fp32;
extern const CodecFamily codec_fp16;
extern const CodecFamily codec_bf16;
extern const CodecFamily codec_fp8;
extern const CodecFamily codec_int;
extern const CodecFamily codec_kivi;
extern const CodecFamily codec_q8_0;
extern const CodecFamily codec_q4_0;
extern const CodecFamily codec_q4_1;
extern const CodecFamily codec_q5_0;
extern const CodecFamily codec_q5_1;
extern const CodecFamily codec_iq4_nl;

#endif
