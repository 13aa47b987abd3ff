// span_corrupt.h: T5 span corruption (Raffel et al. 2020, sections 3.1.4 and 3.3), built on the
// fly from token shards.
//
// One example takes R consecutive raw tokens of the stream, marks about noise_density of them
// as noise in spans of mean length mean_span, and produces
//   encoder input : the non-noise tokens, each noise span replaced by one sentinel, then eos,
//                   padded with pad_id to enc_len;
//   target        : for each noise span its sentinel then its tokens, then eos, padded with -1
//                   to dec_len (the loss ignores targets < 0);
//   decoder input : pad_id (the decoder start token, as in T5), then the target shifted right
//                   by one, with every -1 mapped to pad_id.
// Sentinels count down from sentinel_top: the first span gets sentinel_top, the next
// sentinel_top-1, ... (standard T5: vocab 32128, <extra_id_0> = 32099).
//
// As in T5, the example starts with a non-noise span and alternates non-noise, noise, ...,
// ending with a noise span. Counts (T5's random_spans_noise_mask, with Python/TF rounding,
// i.e. half to even):
//   num_noise = round(R * density), clamped to [1, R-1]
//   num_spans = round(num_noise / mean_span), clamped to [1, min(num_noise, R - num_noise)]
// so the encoder input has R - num_noise + num_spans + 1 tokens and the target
// num_noise + num_spans + 1. R is chosen like T5's random_spans_helper: the largest R whose
// encoder input fits enc_len (512 -> R = 568, 85 noise tokens in 28 spans, targets 114).
//
// Batches: micro-batch g (the global micro-batch number, as the GPT sampler: independent of
// the world size) holds B examples; example i reads window (g*B+i) mod n_windows of R tokens
// (consecutive, non-overlapping windows of the stream) and is corrupted with a seed mixed from
// (seed, g*B+i). Randomness is a counter-based splitmix64 of the seed; no global state.
#ifndef FSDP_DATA_SPAN_CORRUPT_H
#define FSDP_DATA_SPAN_CORRUPT_H
#include <stddef.h>
#include <stdint.h>

#include "data/shard.h"

typedef struct {
  int enc_len, dec_len;       // encoder input / decoder lengths (defaults 512 / 114)
  double noise_density;       // fraction of raw tokens that are noise (0.15)
  double mean_span;           // mean noise span length (3.0)
  int vocab;                  // vocabulary size (ids in [0, vocab))
  int sentinel_top;           // first sentinel id; later spans count down
  int pad_id, eos_id;         // 0, 1
} SpanConfig;

// Fills c with the defaults (512/114, 0.15, 3.0, pad 0, eos 1) and the given lengths and
// vocab, picks sentinel_top = vocab - 1 (32099 when vocab == 32128, the standard T5 padded
// vocabulary), validates the lengths (span_raw_length) and refuses a vocabulary whose
// sentinels (one per noise span) would reach the data tokens (ids <= max_data_token) or
// pad/eos; the message says how large V must be. Returns 0, or -1 with a message in err.
int span_config_init(SpanConfig* c, int enc_len, int dec_len, int vocab, int max_data_token, char* err,
                     size_t errlen);

// Noise tokens and noise spans of an example of raw_len tokens (raw_len >= 2).
void span_counts(const SpanConfig* c, int raw_len, int* num_noise, int* num_spans);

// The raw length R read per example (largest R whose encoder input fits enc_len) and the
// target length it gives (<= dec_len). Refuses enc_len too small, dec_len too small for the
// targets R needs, density outside (0,1) and mean span < 1, naming the option to change
// (--enc-len, --dec-len, --noise-density, --mean-span). Returns 0 or -1 with err.
int span_raw_length(const SpanConfig* c, int* raw_len, int* target_len, char* err, size_t errlen);

// Corrupts raw[raw_len] into enc_in[enc_len], dec_in[dec_len], dec_target[dec_len].
// Deterministic in (raw, raw_len, seed). Fails when the result does not fit enc_len/dec_len or
// a raw token lies in the sentinel range. Returns 0 or -1 with err.
int span_corrupt_example(const SpanConfig* c, const int32_t* raw, int raw_len, uint64_t seed, int32_t* enc_in,
                         int32_t* dec_in, int32_t* dec_target, char* err, size_t errlen);

// Number of whole windows of raw_len tokens in the stream.
int64_t span_windows(const TokenStream* ts, int raw_len);

// Fills enc_in[B*enc_len], dec_in[B*dec_len], dec_target[B*dec_len] with global micro-batch
// g (g >= 0). Fails when the stream is shorter than one window. Returns 0 or -1 with err.
int span_micro_batch(const TokenStream* ts, const SpanConfig* c, uint64_t seed, int64_t g, int B,
                     int32_t* enc_in, int32_t* dec_in, int32_t* dec_target, char* err, size_t errlen);
#endif
