// span_corrupt.c: T5 span corruption on the fly (see span_corrupt.h).
#include "data/span_corrupt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ull
#define MAX_RAW_LEN (1 << 26)  // guard for densities so close to 1 that R would explode

// ---- randomness: counter-based splitmix64 ---------------------------------------------------

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Draw i of a stream is mix64(key + i*GOLDEN): a pure function of (key, i).
typedef struct {
  uint64_t key, ctr;
} Rng;

static Rng rng_make(uint64_t seed, uint64_t stream) {
  Rng r = {mix64(mix64(seed + GOLDEN) ^ (stream * 0xD6E8FEB86659FD93ull + 0x632BE59BD9B4E019ull)), 0};
  return r;
}
static uint64_t rng_next(Rng* r) { return mix64(r->key + (++r->ctr) * GOLDEN); }
// Uniform in [0, n), n >= 1 (modulo bias < n / 2^64, immaterial here).
static uint64_t rng_below(Rng* r, uint64_t n) { return rng_next(r) % n; }

// ---- random segmentation ----------------------------------------------------------------------
// T5's _random_segmentation splits num_items into num_segments segments (each >= 1) by
// shuffling num_segments-1 "first in segment" marks over the num_items-1 gaps: a uniform random
// choice of num_segments-1 cut gaps. The same distribution, drawn lazily by selection sampling
// (Knuth's algorithm S): the next gap is a cut with probability cuts_left / gaps_left.

typedef struct {
  int64_t items_left, cuts_left;
  Rng rng;
} Segmenter;

static Segmenter seg_make(int64_t num_items, int64_t num_segments, Rng rng) {
  Segmenter s = {num_items, num_segments - 1, rng};
  return s;
}

static int64_t seg_next(Segmenter* s) {
  int64_t len = 1;
  s->items_left--;
  while (s->items_left > 0) {
    // The gap after the item just taken: items_left gaps remain, this one included.
    if (s->cuts_left > 0 && (int64_t)rng_below(&s->rng, (uint64_t)s->items_left) < s->cuts_left) {
      s->cuts_left--;
      return len;
    }
    len++;
    s->items_left--;
  }
  return len;
}

// ---- counts and lengths -----------------------------------------------------------------------

// Round half to even, as Python's round and tf.round (which T5 uses), independent of the
// floating-point rounding mode.
static int64_t round_half_even(double x) {
  double f = floor(x), d = x - f;
  int64_t i = (int64_t)f;
  if (d > 0.5) return i + 1;
  if (d < 0.5) return i;
  return (i % 2 == 0) ? i : i + 1;
}

void span_counts(const SpanConfig* c, int raw_len, int* num_noise, int* num_spans) {
  int64_t n = round_half_even((double)raw_len * c->noise_density);
  if (n < 1) n = 1;
  if (n > raw_len - 1) n = raw_len - 1;
  int64_t s = round_half_even((double)n / c->mean_span);
  if (s < 1) s = 1;
  // Every noise and every non-noise segment has >= 1 token.
  if (s > n) s = n;
  if (s > raw_len - n) s = raw_len - n;
  *num_noise = (int)n;
  *num_spans = (int)s;
}

static int64_t enc_tokens(const SpanConfig* c, int raw_len) {
  int n, s;
  span_counts(c, raw_len, &n, &s);
  return (int64_t)raw_len - n + s + 1;
}

static int check_rates(const SpanConfig* c, char* err, size_t errlen) {
  if (!(c->noise_density > 0.0 && c->noise_density < 1.0)) {
    snprintf(err, errlen, "span corruption: noise density %g must lie strictly between 0 and 1 (--noise-density)",
             c->noise_density);
    return -1;
  }
  if (!(c->mean_span >= 1.0) || !isfinite(c->mean_span)) {
    snprintf(err, errlen, "span corruption: mean noise span length %g must be >= 1 (--mean-span)", c->mean_span);
    return -1;
  }
  return 0;
}

int span_raw_length(const SpanConfig* c, int* raw_len, int* target_len, char* err, size_t errlen) {
  if (check_rates(c, err, errlen) != 0) return -1;
  // The smallest example: 2 raw tokens, 1 noise -> a non-noise token, a sentinel and eos.
  int64_t min_enc = enc_tokens(c, 2);
  if (c->enc_len < min_enc) {
    snprintf(err, errlen,
             "span corruption: --enc-len %d is too small: the encoder input needs at least %lld tokens "
             "(a non-noise token, a sentinel and eos); use --enc-len >= %lld",
             c->enc_len, (long long)min_enc, (long long)min_enc);
    return -1;
  }
  if (c->dec_len < 1) {
    snprintf(err, errlen, "span corruption: --dec-len %d must be positive", c->dec_len);
    return -1;
  }
  // T5's random_spans_helper: grow R while the encoder input of R+1 raw tokens still fits.
  int64_t r = 2;
  while (enc_tokens(c, (int)(r + 1)) <= c->enc_len) {
    if (++r >= MAX_RAW_LEN) {
      snprintf(err, errlen,
               "span corruption: noise density %g is too close to 1: more than %d raw tokens per example "
               "(--noise-density)",
               c->noise_density, MAX_RAW_LEN);
      return -1;
    }
  }
  int n, s;
  span_counts(c, (int)r, &n, &s);
  int tl = n + s + 1;
  if (tl > c->dec_len) {
    snprintf(err, errlen,
             "span corruption: --dec-len %d is too small: with --enc-len %d (noise density %g, mean span %g) "
             "an example reads %lld raw tokens and its targets need %d tokens (%d noise tokens, %d sentinels, "
             "eos); use --dec-len >= %d or a smaller --enc-len",
             c->dec_len, c->enc_len, c->noise_density, c->mean_span, (long long)r, tl, n, s, tl);
    return -1;
  }
  *raw_len = (int)r;
  *target_len = tl;
  return 0;
}

// ---- configuration ----------------------------------------------------------------------------

static int top_for_vocab(int vocab) { return vocab - 1 - (vocab == 32128 ? 28 : 0); }

int span_config_init(SpanConfig* c, int enc_len, int dec_len, int vocab, int max_data_token, char* err,
                     size_t errlen) {
  c->enc_len = enc_len;
  c->dec_len = dec_len;
  c->noise_density = 0.15;
  c->mean_span = 3.0;
  c->vocab = vocab;
  c->sentinel_top = top_for_vocab(vocab);
  c->pad_id = 0;
  c->eos_id = 1;
  int r, tl;
  if (span_raw_length(c, &r, &tl, err, errlen) != 0) return -1;
  int n, s;
  span_counts(c, r, &n, &s);
  // Sentinels take ids sentinel_top-s+1 .. sentinel_top; all of them must lie above the data
  // tokens, pad and eos.
  int floor_id = max_data_token;
  if (c->pad_id > floor_id) floor_id = c->pad_id;
  if (c->eos_id > floor_id) floor_id = c->eos_id;
  if ((int64_t)c->sentinel_top - s + 1 <= floor_id) {
    int64_t need = (int64_t)floor_id + s + 1;
    while ((int64_t)top_for_vocab((int)need) - s + 1 <= floor_id) need++;
    snprintf(err, errlen,
             "span corruption: vocabulary V=%d has no room for the %d sentinels an example needs "
             "(ids %d..%d would reach the data tokens/pad/eos, which go up to id %d): V must be at least %lld "
             "(or use a smaller --enc-len)",
             vocab, s, c->sentinel_top - s + 1, c->sentinel_top, floor_id, (long long)need);
    return -1;
  }
  return 0;
}

// ---- one example ------------------------------------------------------------------------------

int span_corrupt_example(const SpanConfig* c, const int32_t* raw, int raw_len, uint64_t seed, int32_t* enc_in,
                         int32_t* dec_in, int32_t* dec_target, char* err, size_t errlen) {
  if (check_rates(c, err, errlen) != 0) return -1;
  if (raw_len < 2) {
    snprintf(err, errlen, "span corruption: an example needs at least 2 raw tokens, got %d", raw_len);
    return -1;
  }
  int n, s;
  span_counts(c, raw_len, &n, &s);
  int64_t el = (int64_t)raw_len - n + s + 1, tl = (int64_t)n + s + 1;
  if (el > c->enc_len || tl > c->dec_len) {
    snprintf(err, errlen,
             "span corruption: %d raw tokens give an encoder input of %lld tokens and targets of %lld tokens, "
             "more than --enc-len %d / --dec-len %d",
             raw_len, (long long)el, (long long)tl, c->enc_len, c->dec_len);
    return -1;
  }
  int lo = c->sentinel_top - s + 1;
  if (lo < 0 || c->sentinel_top >= c->vocab) {
    snprintf(err, errlen, "span corruption: sentinels %d..%d do not fit the vocabulary of %d ids", lo,
             c->sentinel_top, c->vocab);
    return -1;
  }
  for (int i = 0; i < raw_len; i++) {
    if (raw[i] >= lo && raw[i] <= c->sentinel_top) {
      snprintf(err, errlen,
               "span corruption: raw token %d (position %d) lies in the sentinel range %d..%d; use a larger "
               "vocabulary",
               (int)raw[i], i, lo, c->sentinel_top);
      return -1;
    }
  }

  // Independent streams for the two segmentations, as T5 uses two seeds.
  Segmenter noise = seg_make(n, s, rng_make(seed, 1));
  Segmenter keep = seg_make(raw_len - n, s, rng_make(seed, 2));
  int64_t pos = 0, e = 0, t = 0;
  for (int k = 0; k < s; k++) {
    int64_t lk = seg_next(&keep);
    memcpy(enc_in + e, raw + pos, (size_t)lk * sizeof(int32_t));
    e += lk, pos += lk;
    int32_t sentinel = c->sentinel_top - k;
    enc_in[e++] = sentinel;
    dec_target[t++] = sentinel;
    int64_t ln = seg_next(&noise);
    memcpy(dec_target + t, raw + pos, (size_t)ln * sizeof(int32_t));
    t += ln, pos += ln;
  }
  if (pos != raw_len || e != el - 1 || t != tl - 1) {  // cannot happen: the segments partition the counts
    snprintf(err, errlen, "span corruption: internal error (segments cover %lld of %d tokens)", (long long)pos,
             raw_len);
    return -1;
  }
  enc_in[e++] = c->eos_id;
  for (; e < c->enc_len; e++) enc_in[e] = c->pad_id;
  dec_target[t++] = c->eos_id;
  for (; t < c->dec_len; t++) dec_target[t] = -1;
  dec_in[0] = c->pad_id;
  for (int j = 1; j < c->dec_len; j++) dec_in[j] = dec_target[j - 1] < 0 ? c->pad_id : dec_target[j - 1];
  return 0;
}

// ---- micro-batches ----------------------------------------------------------------------------

int64_t span_windows(const TokenStream* ts, int raw_len) {
  if (raw_len <= 0) return 0;
  return ts->total / raw_len;
}

int span_micro_batch(const TokenStream* ts, const SpanConfig* c, uint64_t seed, int64_t g, int B,
                     int32_t* enc_in, int32_t* dec_in, int32_t* dec_target, char* err, size_t errlen) {
  if (B <= 0) {
    snprintf(err, errlen, "span corruption: invalid micro-batch size B=%d", B);
    return -1;
  }
  int r, tl;
  if (span_raw_length(c, &r, &tl, err, errlen) != 0) return -1;
  int64_t nw = span_windows(ts, r);
  if (nw == 0) {
    snprintf(err, errlen,
             "span corruption: the data stream has %lld tokens, shorter than one window of %d raw tokens "
             "(--enc-len %d); use more data or a smaller --enc-len",
             (long long)ts->total, r, c->enc_len);
    return -1;
  }
  int32_t* raw = malloc((size_t)r * sizeof(int32_t));
  if (!raw) {
    snprintf(err, errlen, "span corruption: out of memory (%d raw tokens)", r);
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < B && rc == 0; i++) {
    int64_t idx = g * B + i;  // global example number: independent of ranks
    int64_t w = idx % nw;
    if (w < 0) w += nw;
    rc = token_stream_read(ts, w * r, r, raw, err, errlen);
    if (rc == 0) {
      uint64_t ex_seed = mix64(seed ^ mix64((uint64_t)idx + GOLDEN));
      rc = span_corrupt_example(c, raw, r, ex_seed, enc_in + (size_t)i * c->enc_len, dec_in + (size_t)i * c->dec_len,
                                dec_target + (size_t)i * c->dec_len, err, errlen);
    }
  }
  free(raw);
  return rc;
}
