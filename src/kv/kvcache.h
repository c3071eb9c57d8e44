// The pluggable KV cache's streams: a key stream and a value stream per layer, each with its own
// codec, and the registry and spec strings that make them. A codec keeps only its encoded form;
// attention reads it back through scores() and mix(). The paged pool (kvpool.h) builds a
// sequence's streams from blocks, each block a stream of `block` tokens.
#ifndef MICRO_KVCACHE_H
#define MICRO_KVCACHE_H

#include <stddef.h>

#include "max_width.h" // a stream's head_dim is at most MICRO_MAX_WIDTH

#define SPEC_MAX_OPTIONS 8
#define SPEC_TEXT 32
#define SPEC_NORMALISED 128

// A parsed spec string `name[:key=value,...]`; a key may come without a value (`fp8:e4m3`).
typedef struct {
    char key[SPEC_TEXT];
    char value[SPEC_TEXT]; // "" when the option had no '='
    int has_value;
    int used; // set by the codec that consumed it; leftovers are reported as unknown
} SpecOption;

typedef struct {
    char name[SPEC_TEXT];
    int n_options;
    SpecOption options[SPEC_MAX_OPTIONS + 8]; // then what the stream adds: role, context, block, layer, a family's default transforms
} CodecSpec;

// A stream's tokens as attention reads them: spread over blocks of `block` tokens (a pool's
// sequence, kvpool.h), states[i] holding tokens [i·block, (i+1)·block); a stream that is not paged
// is one block. Kernels walk the blocks themselves, so that what they do once per query (tables,
// checks) is done once, and their sums run on across blocks as over one stream.
typedef struct {
    const void *const *states;
    int block;
    int head_dim;
    // The stream attention will most likely read next (the next row's of the same layer and role,
    // in a batched step), or NULL: the kernels that ask for the next head's bytes as they read their
    // own ask, at the last head, for that stream's first head (its tokens [0, next_n)).
    const void *const *next;
    int next_n;
} CodecBlocks;

// The most blocks a stream may be cut into (kvpool_init refuses more): a kernel that needs a table
// of them keeps it on the stack, since it has no way to report a failed allocation.
#define KV_MAX_BLOCKS 4096

// CodecOps.by_read's answers.
#define CODEC_SCORES_BY_READ 1
#define CODEC_MIX_BY_READ 2

// How the fast evaluator may decode a stream once per token into its mirror (span_mirror.h) and
// still give its kernels' bits: the kernels' sums must be of one of these forms, with x̃_j and
// factor_j made from token j alone, each sum in order from 0.
//   keys    score_j = factor_j · Σ_d q̃_d · x̃_j,d, q̃ made from the query alone: float's unscaled
//           keys (x̃ = x̂), TurboQuant's mse keys (q̃ = R·q, x̃ the centroids, the norm the
//           factor), QJL's keys (q̃ = S·q, x̃ the signs as ±1, √(π/2)/m·‖k‖ the factor);
//           with an offset (has_offset), score_j = factor_j · Σ_d q̃_d · x̃_j,d + offset_j · Σ_d q̃_d:
//           the per-token tables of codec_nuq (x̃ the levels, the range r the factor, the midpoint
//           z the offset);
//   values  out = post(Σ_j (p_j · factor_j) · x̃_j): TurboQuant's mse values (post the inverse
//           rotation) and its presets' uniform values (x̂, read back); with an offset, the sum
//           Σ_j p_j · offset_j (in order of j) is added to every number before post (codec_nuq).
// Either may have a second sum beside the first (has_second: TurboQuant's prod, its QJL residual),
// over x̃2_j of head_dim numbers, with one number aux_j a token:
//   keys    score_j = factor_j · (Σ_d q̃_d · x̃_j,d + aux_j · Σ_i q̃2_i · x̃2_j,i), q̃2 = query2(q);
//   values  acc2 = Σ_j w2_j · x̃2_j in order of j, with w2 = weights2(w, aux) made from the first
//           sum's weights w_j = p_j · factor_j, and post takes acc2 beside acc.
// Values may have a correction row x̃c_j a token (corrections: codec_nuq's exact entries, x̃c the
// value less the codes' reconstruction at each, 0 elsewhere), added right after the token's own
// row with its weight p_j as it came: Σ_j ((p_j · factor_j) · x̃_j + p_j · x̃c_j), token after token.
// (Adding p_j · 0 leaves a sum as it was: a sum from +0 is never −0.)
// The stream transforms (kvtransform.h) pass a codec's forms on where they rotate, keep sink tokens
// and put outlier entries right (values: not with outlier entries): q̃ and post rotate too, and a
// sequence's first tokens, the sink tokens, and the keys' outlier entries are put right after the
// sums as the transform's own kernels put them right (fix_scores, post).
//
// A codec whose tokens change form once after their append (KIVI: `settles`) is mirrored in both
// forms: read gives a token's form at the time, so the mirror reads each token as it is appended and
// again once it has settled, and a row reads the tokens its step saw settled (CodecOps.settled of its
// position) in their settled form and the rest in their first. Its sums are of the first forms above
// without factor, offset, second sum or corrections, and settled_key_sum and open_key_sum say their
// order over channels; values are summed by parity (split_mix), or the settled ones in pairs of
// tokens (pair_groups: a 2-bit token group's lookup adds two tokens' products at once).
#define MIRROR_MAX_FIRST 64
// The order of a key's sum over channels (MirrorOps.settled_key_sum, open_key_sum): in order of d;
// in pairs, (q_0·x_0 + q_1·x_1) + (q_2·x_2 + q_3·x_3) + ...; the even and the odd channels apart,
// each in order, then added.
typedef enum { MIRROR_KEYS_IN_ORDER, MIRROR_KEYS_IN_PAIRS, MIRROR_KEYS_EVEN_ODD } MirrorKeySum;
typedef struct MirrorOps {
    // x̃ of one head at one token (head_dim numbers), its factor and its offset (each left alone
    // where the form has none).
    void (*read)(const void *state, int head, int token, float *x, float *factor, float *offset);
    // Keys: q̃ of a query (head_dim numbers); NULL: q itself.
    void (*query)(const void *state, const float *q, float *out);
    // Values: out from the sums acc (head_dim numbers each) of tokens [0, n) of a sequence's
    // blocks b, with the weights p of its first `first` tokens (of all n with all_weights) as they
    // were before any factor; NULL: out = acc.
    void (*post)(const CodecBlocks *b, int head, const float *p, const float *acc, const float *acc2, float *out,
                 int n);
    // Keys: what the sums do not give of the scores of [0, n) (a transform's sink tokens, scored
    // again; its outlier entries, put right), done after them from the query as it came (q, not
    // q̃); NULL: none.
    void (*fix_scores)(const CodecBlocks *b, int head, const float *q, float *out, int n);
    int first; // values: the tokens whose weights post reads, at most MIRROR_MAX_FIRST
    int all_weights; // values: post reads every token's weight (a transform's outlier entries)
    // Values: token's correction row x̃c (corrections).
    int corrections;
    void (*read_correction)(const void *state, int head, int token, float *xc);
    // The second sum: x̃2 and aux of one head at one token; keys' q̃2; values' w2.
    int has_second;
    void (*read2)(const void *state, int head, int token, float *x2, float *aux);
    void (*query2)(const void *state, const float *q, float *out);
    void (*weights2)(const void *state, const float *w, const float *aux, float *w2, int n);
    int has_factor;
    int has_offset; // only with has_factor
    // Keys: the codec's kernel finishes a score as 0 + factor · sum (llama.cpp's blocks add each
    // block's to the sum so far), which makes a −0 +0; the mirror does the same.
    int plus_zero;
    // Values: the codec's mix sums even and odd tokens apart, each in order, and adds the two at the
    // end (out = even + odd, as the float codec's two chains do); the mirror's mix does the same.
    int split_mix;
    // Tokens settle (above): keys' sums over channels for settled tokens and for open ones; values'
    // settled tokens in pairs, pair u = (2u, 2u + 1) to the even chain when u is even, else the odd.
    int settles;
    MirrorKeySum settled_key_sum, open_key_sum;
    int pair_groups;
} MirrorOps;

// Operations on one stream's encoded state. Every call is for one stream (keys or values of one
// layer); scores/mix/read for different heads may run concurrently and must not write state.
typedef struct {
    // One token's vectors, all heads: vec[n_heads * head_dim] (keys after RoPE).
    void (*append)(void *state, const float *vec);
    // For codecs whose tokens change form after they are appended (KIVI quantises its full-precision
    // window as it slides; NULL for every other family): how many of a sequence's first `length`
    // tokens have their final form once the step that appended token length−1 has been attended.
    // The sequence's own length is passed because a stream may be one block of a longer sequence.
    int (*settled)(const void *state, int length);
    // Gives tokens [0, n) of this stream (its own numbering) their final form; n never decreases.
    void (*settle)(void *state, int n);
    // out[j] = q · k̂_j for cached tokens j in [0, n) of one head (not yet scaled by 1/√head_dim).
    void (*scores)(const CodecBlocks *b, int head, const float *q, float *out, int n);
    // out[d] = Σ_j p[j] · v̂_j[d] over j in [0, n) of one head; out is overwritten.
    void (*mix)(const CodecBlocks *b, int head, const float *p, float *out, int n);
    // Every head of one row at once (NULL: attention calls scores and mix head by head): each head's
    // numbers are scores' and mix's own bits, but the blocks are read in token order with all their
    // heads, so that a pool's bytes come from memory as one stream rather than a head's 1 KB of
    // each block per pass. Head h's query is q + h·head_dim and its scores go to out + h·stride;
    // its weights are p + h·stride and its mix goes to out + h·head_dim.
    void (*scores_heads)(const CodecBlocks *b, const float *q, float *out, size_t stride, int n);
    void (*mix_heads)(const CodecBlocks *b, const float *p, size_t stride, float *out, int n);
    // The decoded vector of one head at one token (tests and inspection).
    void (*read)(const void *state, int head, int token, float *out);
    // 1 when scores and mix are codec_scores_by_read / codec_mix_by_read of read() for every shape
    // (codec_core.h): the fast evaluator may then decode each token once (span_mirror.h).
    int reads_back;
    // For a family with kernels of its own (NULL, or returning NULL: not mirrored): how the fast
    // evaluator may decode this stream once per token as a key stream, and as a value stream.
    const struct MirrorOps *(*key_mirror)(const void *state);
    const struct MirrorOps *(*value_mirror)(const void *state);
    // For latent attention's fast evaluator (latent_mirror.h; NULL: neither): which of scores() and
    // mix() are, on this stream, codec_scores_by_read / codec_mix_by_read of read() for every n
    // (CODEC_SCORES_BY_READ, CODEC_MIX_BY_READ); of a family that settles, read() gives a token's
    // form at the time (the mirror reads it again once it is final). A reads_back family is both
    // without saying so.
    int (*by_read)(const void *state);
    // Exact bytes held for the tokens appended so far: codes, scales, minimums and residuals.
    size_t (*bytes)(const void *state);
    // For a family whose state is one allocation (codec_core.h: a pool block's struct, codes and
    // metadata together): its bytes from the state on, what reading the whole block touches (micro
    // bench --batch's read of a pool alone, pool_read.h). NULL where a state is several allocations.
    size_t (*extent)(const void *state);
    // dst, an empty state made by the same create() (the same spec, shape and capacity), made to hold
    // exactly what src holds: afterwards every append, settle, read and kernel gives on dst the bits
    // it gives on src (a paged pool's copy of a sequence, kvseq_copy). NULL: the family cannot.
    void (*copy)(void *dst, const void *src);
    void (*destroy)(void *state);
} CodecOps;

// A codec family: parses its options and creates the state for a stream of at most `capacity`
// tokens. Writes its normalised spec (all options explicit) to `normalised`. Returns NULL with one
// line in err on a bad option value.
typedef struct {
    const char *name;
    const char *help; // one line for `--help`
    const CodecOps *ops;
    void *(*create)(CodecSpec *spec, int n_heads, int head_dim, int capacity,
                    char *normalised, size_t normalised_len, char *err, size_t errlen);
    // Options that would be the stream transforms' (kvtransform.h) but that this family reads itself,
    // comma separated (kvquant's calibrated `outliers`); NULL for none.
    const char *owned_options;
    // Transform options a stream of this family has unless its spec says otherwise ("prerope,sink=1").
    const char *key_transforms, *value_transforms;
    // The specs the tests and fuzzers cover this family with (spec_catalog.h), NULL-terminated:
    // "SPEC" for keys and values, or "K|V". calibrated_examples need a calibration of the model
    // (kvq_view.h); either may be NULL.
    const char *const *examples, *const *calibrated_examples;
} CodecFamily;

typedef struct {
    const CodecOps *ops;
    void *state;
    int n_heads, head_dim, capacity;
    int length; // tokens appended
    int prerope; // keys are appended before RoPE (kvtransform.h); attention applies it as it reads
    char spec[SPEC_NORMALISED];
} KVStream;

// The registry (kvcache.c): one line per codec family.
const CodecFamily *const *codec_families(int *count);
// y = M x, or Mᵀ x (back), for an n × n matrix M stored with its transpose after it, in the kernel
// set the registry hands out (the transforms' rotations; every set gives the same bits).
typedef void (*CodecProjectFn)(const float *m, int n, const float *x, float *y, int back);
CodecProjectFn codec_projection(void);

// The reference cache's spec, parsed: fp32.
extern const CodecSpec codec_spec_fp32;
// A spec string parsed: where a spec enters (a command's option, a test's list) it is parsed once,
// and every layer below takes the CodecSpec, never the text.
int spec_parse(const char *text, CodecSpec *spec, char *err, size_t errlen);
// Option look-ups for codecs: mark the option used; -1 with a message on a bad value.
int spec_int(CodecSpec *spec, const char *key, int fallback, int lo, int hi, int *out, char *err, size_t errlen);
// Returns the option's value ("" when given without '='), or NULL when absent.
const char *spec_string(CodecSpec *spec, const char *key);
// The index of the option's value in `choices` (NULL-terminated; 0, the default, when the option is
// absent); -1 with "family: key must be a, b or c (got 'x')" when it is none of them.
int spec_choice(CodecSpec *spec, const char *key, const char *const *choices, int *out, char *err, size_t errlen);
// 1 for a value stream: the option `role` (set by the cache, never the user) is v.
int spec_is_value(CodecSpec *spec);
// 1 when `key` is present (as a bare flag or with a value), marking it used.
int spec_flag(CodecSpec *spec, const char *key);

// Whether a stream holds keys or values: schemes such as KIVI quantise the two differently. The
// stream passes it to its codec as the option `role=k` or `role=v` (a spec string cannot set it).
typedef enum { KV_ROLE_KEY, KV_ROLE_VALUE } KVRole;

// A stream of the parsed spec (spec_parse; a stream marks its options on a copy).
int kvstream_init(KVStream *s, const CodecSpec *spec, KVRole role, int n_heads, int head_dim, int capacity,
                  char *err, size_t errlen);
// Where a stream sits, for codecs and transforms that depend on it. block > 0: the stream is one
// block of `block` tokens of a longer sequence (kvpool.c), holding its tokens [first, first + block):
// the codec is told (option `block`) so that it can refuse parameters that do not align with
// blocks (kivi's groups); the transforms are told `first` (sink tokens). layer >= 0: the model layer
// (option `layer`), for codecs calibrated per layer.
typedef struct {
    int block, first, layer;
} KVStreamPlace;
int kvstream_init_at(KVStream *s, const CodecSpec *spec, KVRole role, int n_heads, int head_dim, int capacity,
                     const KVStreamPlace *place, char *err, size_t errlen);
void kvstream_free(KVStream *s);
// The shape of the streams a spec is meant for: heads, head_dim, and the model's context (the
// longest stream any run can have).
typedef struct {
    int n_heads, head_dim, context;
} KVShape;
// Checks a spec string for streams of `shape` (NULL: micro's, 6 heads of 32, context 2048) without
// building a cache: bad options, a head_dim the codec cannot take, and parameters that could never
// take effect within the context (kivi's residual) get one line in err and -1.
int kvstream_check_spec_shape(const char *spec_text, KVRole role, const KVShape *shape, char *err, size_t errlen);
// The same for micro's shape, for checks made before any model is loaded.
// Only the spec's form and its family's name: what can be checked before the model (and so the
// shape the spec must fit) is known. The rest is kvstream_check_spec_shape's, after loading.
int kvstream_check_spec_syntax(const char *spec_text, char *err, size_t errlen);
int kvstream_check_spec(const char *spec_text, KVRole role, char *err, size_t errlen);
void kvstream_append(KVStream *s, const float *vec);
// Attention's reads of a whole (unpaged) stream: the ops on it as one block.
void kvstream_scores(const KVStream *s, int head, const float *q, float *out, int n);
void kvstream_mix(const KVStream *s, int head, const float *p, float *out, int n);
// After attention of the current step has read the stream: tokens take their final form as the
// codec's rule says for a stream that is a whole sequence (KIVI flushes its residual here).
void kvstream_end_step(KVStream *s);
// Bits per cached number including metadata, at the current length (0 when empty).
double kvstream_bits_per_element(const KVStream *s);


#endif
