// test_span.c: T5 span corruption (data/span_corrupt.c).
//
// Lengths, sentinel order, exact merge recovery (encoder input + targets give back the raw
// tokens), noise statistics, the decoder input, determinism, refusals, and micro-batches read
// from a small shard written into a fresh temporary directory (mkdtemp, removed at the end).
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/shard.h"
#include "data/span_corrupt.h"
#include "test/test.h"

static char g_dir[256];
static char g_err[1024];

static int rm_entry(const char* p, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

// A small deterministic generator for raw tokens (independent of the library's RNG).
static uint64_t lcg_state = 88172645463325252ull;
static uint32_t lcg(void) {
  lcg_state ^= lcg_state << 13, lcg_state ^= lcg_state >> 7, lcg_state ^= lcg_state << 17;
  return (uint32_t)(lcg_state >> 16);
}

static int is_sentinel(const SpanConfig* c, int nspans, int32_t t) {
  return t <= c->sentinel_top && t > c->sentinel_top - nspans;
}

// Rebuilds the raw tokens from the encoder input and the targets the way a user would: read
// the encoder input up to eos; replace each sentinel by the target tokens that follow the same
// sentinel in the targets, up to the next sentinel or the targets' eos. Needs raw tokens other
// than pad/eos (so eos marks the ends). Returns the number of tokens written, -1 if malformed.
static int merge(const SpanConfig* c, int nspans, const int32_t* enc, const int32_t* tgt, int32_t* out, int cap) {
  int n = 0;
  for (int i = 0; i < c->enc_len; i++) {
    int32_t t = enc[i];
    if (t == c->eos_id) return n;
    if (!is_sentinel(c, nspans, t)) {
      if (n >= cap) return -1;
      out[n++] = t;
      continue;
    }
    int j = 0;
    while (j < c->dec_len && tgt[j] != t) j++;
    if (j == c->dec_len) return -1;
    for (j++; j < c->dec_len && tgt[j] != c->eos_id && !is_sentinel(c, nspans, tgt[j]); j++) {
      if (n >= cap || tgt[j] < 0) return -1;
      out[n++] = tgt[j];
    }
  }
  return -1;  // no eos
}

typedef struct {
  const char* name;
  int enc_len, dec_len, vocab, max_data;
  double density, mean;  // 0: the defaults
  int seeds;
} Case;

// Checks the structure of one corrupted example; returns a description of the first problem
// or NULL. nnoise/nspans: the counts the example must have.
static const char* check_example(const SpanConfig* c, const int32_t* raw, int R, int nnoise, int nspans,
                                 const int32_t* enc, const int32_t* din, const int32_t* tgt, int mergeable) {
  int el = R - nnoise + nspans + 1, tl = nnoise + nspans + 1;
  if (el > c->enc_len) return "encoder input longer than enc_len";
  if (tl > c->dec_len) return "targets longer than dec_len";
  if (enc[el - 1] != c->eos_id) return "eos not at the end of the encoder input";
  for (int i = el; i < c->enc_len; i++)
    if (enc[i] != c->pad_id) return "encoder input not padded with pad after eos";
  if (tgt[tl - 1] != c->eos_id) return "eos not at the end of the targets";
  for (int i = tl; i < c->dec_len; i++)
    if (tgt[i] != -1) return "targets not padded with -1";
  // Sentinels: nspans of them in each, counting down from sentinel_top in both.
  int ke = 0, kt = 0;
  for (int i = 0; i < el - 1; i++)
    if (is_sentinel(c, nspans, enc[i])) {
      if (enc[i] != c->sentinel_top - ke) return "encoder sentinels out of order";
      ke++;
    }
  for (int i = 0; i < tl - 1; i++)
    if (is_sentinel(c, nspans, tgt[i])) {
      if (tgt[i] != c->sentinel_top - kt) return "target sentinels out of order";
      kt++;
    }
  if (ke != nspans) return "number of sentinels in the encoder input != number of spans";
  if (kt != nspans) return "number of sentinels in the targets != number of spans";
  if (!is_sentinel(c, nspans, tgt[0])) return "targets do not start with a sentinel";
  if (is_sentinel(c, nspans, enc[0])) return "encoder input starts with a noise span (T5 starts with non-noise)";
  if (!is_sentinel(c, nspans, enc[el - 2])) return "the last span is not a noise span";
  // No two sentinels adjacent (each span >= 1 token) in either sequence.
  for (int i = 0; i + 1 < el - 1; i++)
    if (is_sentinel(c, nspans, enc[i]) && is_sentinel(c, nspans, enc[i + 1])) return "empty non-noise span";
  for (int i = 0; i + 1 < tl; i++)
    if (is_sentinel(c, nspans, tgt[i]) && (is_sentinel(c, nspans, tgt[i + 1]) || i + 1 == tl - 1))
      return "empty noise span";
  // Decoder input: pad, then the targets shifted right, -1 mapped to pad.
  if (din[0] != c->pad_id) return "decoder input does not start with pad";
  for (int j = 1; j < c->dec_len; j++) {
    int32_t want = tgt[j - 1] < 0 ? c->pad_id : tgt[j - 1];
    if (din[j] != want) return "decoder input is not the targets shifted right";
  }
  // Positional merge (works even when raw tokens equal pad/eos).
  {
    int pos = 0, t = 0;
    for (int i = 0; i < el - 1; i++) {
      if (!is_sentinel(c, nspans, enc[i])) {
        if (pos >= R || raw[pos++] != enc[i]) return "non-noise tokens differ from the raw tokens";
        continue;
      }
      if (tgt[t] != enc[i]) return "sentinel order differs between encoder input and targets";
      for (t++; t < tl - 1 && !is_sentinel(c, nspans, tgt[t]); t++)
        if (pos >= R || raw[pos++] != tgt[t]) return "noise tokens differ from the raw tokens";
    }
    if (pos != R || t != tl - 1) return "positional merge does not cover the raw tokens";
  }
  if (mergeable) {
    int32_t out[4096];
    int n = merge(c, nspans, enc, tgt, out, 4096);
    if (n != R || memcmp(out, raw, (size_t)R * sizeof(int32_t)) != 0) return "merge does not give the raw tokens";
  }
  return NULL;
}

static void test_case(const Case* k) {
  char name[256];
  SpanConfig c;
  int rc = span_config_init(&c, k->enc_len, k->dec_len, k->vocab, k->max_data, g_err, sizeof g_err);
  snprintf(name, sizeof name, "%s: span_config_init accepts", k->name);
  EXPECT(name, rc == 0, "%s", g_err);
  if (rc) return;
  if (k->density > 0) c.noise_density = k->density;
  if (k->mean > 0) c.mean_span = k->mean;
  int R = 0, TL = 0, nn = 0, ns = 0;
  rc = span_raw_length(&c, &R, &TL, g_err, sizeof g_err);
  snprintf(name, sizeof name, "%s: span_raw_length accepts", k->name);
  EXPECT(name, rc == 0, "%s", g_err);
  if (rc) return;
  span_counts(&c, R, &nn, &ns);
  int el = R - nn + ns + 1;
  printf("     %s: R=%d noise=%d spans=%d encoder=%d targets=%d (enc_len %d, dec_len %d)\n", k->name, R, nn, ns, el,
         TL, c.enc_len, c.dec_len);
  // R is the largest raw length whose encoder input fits (T5's random_spans_helper); the input
  // then fills enc_len exactly, except where one more raw token adds 2 encoder tokens (a new
  // span that also gains a non-noise token, e.g. density 0.5, mean 1): then it is one short.
  int n1, s1;
  span_counts(&c, R + 1, &n1, &s1);
  int el1 = R + 1 - n1 + s1 + 1;
  snprintf(name, sizeof name, "%s: R is the largest raw length whose encoder input fits, targets fit dec_len",
           k->name);
  EXPECT(name, el <= c.enc_len && el1 > c.enc_len && (el == c.enc_len || el1 == el + 2) && TL <= c.dec_len &&
                   TL == nn + ns + 1,
         "encoder %d (R+1: %d) targets %d", el, el1, TL);

  int32_t* raw = malloc((size_t)R * sizeof(int32_t));
  int32_t* enc = malloc((size_t)c.enc_len * sizeof(int32_t));
  int32_t* din = malloc((size_t)c.dec_len * sizeof(int32_t));
  int32_t* tgt = malloc((size_t)c.dec_len * sizeof(int32_t));
  const char* problem = NULL;
  int bad_seed = -1, failures = 0;
  double noise_tok = 0, spans = 0, raw_tok = 0;
  // Uniform compositions of N into S parts: P(a given part has length 1) = (S-1)/(N-1).
  int first_noise_one = 0, last_noise_one = 0, first_keep_one = 0;
  double first_noise_len = 0, last_keep_len = 0;
  for (int sd = 0; sd < k->seeds; sd++) {
    // Half the seeds use data tokens that avoid pad/eos (merge by value), half the full range.
    int mergeable = sd % 2 == 0;
    for (int i = 0; i < R; i++) {
      int lo = mergeable ? 2 : 0;
      raw[i] = lo + (int32_t)(lcg() % (uint32_t)(k->max_data + 1 - lo));
    }
    uint64_t seed = (uint64_t)sd * 7919u + 12345u;
    if (span_corrupt_example(&c, raw, R, seed, enc, din, tgt, g_err, sizeof g_err) != 0) {
      problem = g_err, bad_seed = sd, failures++;
      continue;
    }
    const char* p = check_example(&c, raw, R, nn, ns, enc, din, tgt, mergeable);
    if (p) {
      if (!problem) problem = p, bad_seed = sd;
      failures++;
      continue;
    }
    // Statistics measured from the outputs.
    int s = 0, noise = 0, cur = 0, first = -1;
    for (int i = 0; i < TL - 1; i++) {
      if (is_sentinel(&c, ns, tgt[i])) {
        if (s > 0 && first < 0) first = cur;
        s++, cur = 0;
      } else {
        noise++, cur++;
      }
    }
    if (first < 0) first = cur;
    noise_tok += noise, spans += s, raw_tok += R;
    first_noise_one += first == 1, last_noise_one += cur == 1;
    first_noise_len += first;
    int keep0 = 0;
    while (!is_sentinel(&c, ns, enc[keep0])) keep0++;
    first_keep_one += keep0 == 1;
    int lastk = 0;
    for (int i = el - 3; i >= 0 && !is_sentinel(&c, ns, enc[i]); i--) lastk++;
    last_keep_len += lastk;
  }
  snprintf(name, sizeof name,
           "%s: %d seeds: lengths, eos, padding, sentinel count and order, decoder input, exact merge", k->name,
           k->seeds);
  EXPECT(name, failures == 0, "%d failures, first (seed %d): %s", failures, bad_seed, problem ? problem : "");
  if (failures == 0 && k->seeds > 0) {
    double dens = noise_tok / raw_tok, msl = noise_tok / spans;
    double want_dens = c.noise_density, want_msl = c.mean_span;
    snprintf(name, sizeof name, "%s: noise fraction %.4f ~ %.2f, mean span length %.3f ~ %.1f", k->name, dens,
             want_dens, msl, want_msl);
    // Rounding the counts of short examples moves these a little (tiny: 5/34 noise, 2.5 per span).
    double tol_d = 0.5 / R + 1e-9, tol_m = want_msl * 0.5 / ns + 0.5 / ns + 1e-9;
    EXPECT(name, fabs(dens - want_dens) <= tol_d && fabs(msl - want_msl) <= tol_m, "tolerances %.4f %.3f", tol_d,
           tol_m);
    if (ns >= 2 && nn > ns && R - nn > ns) {
      double n1 = (double)k->seeds;
      double pn = (double)(ns - 1) / (nn - 1), pk = (double)(ns - 1) / (R - nn - 1);
      double tn = 4.5 * sqrt(pn * (1 - pn) / n1) + 1e-9, tk = 4.5 * sqrt(pk * (1 - pk) / n1) + 1e-9;
      double f1 = first_noise_one / n1, l1 = last_noise_one / n1, k1 = first_keep_one / n1;
      snprintf(name, sizeof name,
               "%s: random segmentation is uniform: P(span len 1) first %.3f last %.3f ~ %.3f, "
               "P(first non-noise len 1) %.3f ~ %.3f",
               k->name, f1, l1, pn, k1, pk);
      EXPECT(name, fabs(f1 - pn) < tn && fabs(l1 - pn) < tn && fabs(k1 - pk) < tk, "tolerances %.3f %.3f", tn, tk);
      double mf = first_noise_len / n1, ml = last_keep_len / n1;
      double en = (double)nn / ns, ek = (double)(R - nn) / ns;
      snprintf(name, sizeof name, "%s: mean first noise span %.2f ~ %.2f, mean last non-noise span %.2f ~ %.2f",
               k->name, mf, en, ml, ek);
      EXPECT(name, fabs(mf - en) < 0.1 * en + 0.15 && fabs(ml - ek) < 0.1 * ek + 0.3, "off");
    }
  }
  free(raw), free(enc), free(din), free(tgt);
}

static void test_cases(void) {
  const Case cases[] = {
      {"T5 512/114 V=32128", 512, 114, 32128, 32000, 0, 0, 2000},
      {"tiny 32/12 V=100", 32, 12, 100, 97, 0, 0, 4000},
      {"64/40 V=300 density 0.3 mean 2", 64, 40, 300, 200, 0.3, 2.0, 2000},
      {"128/128 V=1000 density 0.5 mean 1", 128, 128, 1000, 800, 0.5, 1.0, 1000},
      {"256/80 V=5000 density 0.15 mean 8", 256, 80, 5000, 4000, 0.15, 8.0, 1000},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i]);
}

// The paper's shapes: 568 raw tokens -> 512 encoder tokens and 114 targets.
static void test_t5_lengths(void) {
  SpanConfig c;
  int rc = span_config_init(&c, 512, 114, 32128, 32000, g_err, sizeof g_err);
  int R = 0, TL = 0, nn = 0, ns = 0;
  if (rc == 0) rc = span_raw_length(&c, &R, &TL, g_err, sizeof g_err);
  span_counts(&c, R, &nn, &ns);
  EXPECT("T5 lengths: enc 512 -> raw 568, 85 noise tokens in 28 spans, targets 114, sentinel_top 32099",
         rc == 0 && R == 568 && TL == 114 && nn == 85 && ns == 28 && c.sentinel_top == 32099 && c.pad_id == 0 &&
             c.eos_id == 1 && c.noise_density == 0.15 && c.mean_span == 3.0,
         "rc %d R %d targets %d noise %d spans %d top %d: %s", rc, R, TL, nn, ns, c.sentinel_top, g_err);
  rc = span_config_init(&c, 32, 12, 100, 97, g_err, sizeof g_err);
  if (rc == 0) rc = span_raw_length(&c, &R, &TL, g_err, sizeof g_err);
  EXPECT("tiny lengths: enc 32 -> raw 34, targets 8, sentinel_top 99", rc == 0 && R == 34 && TL == 8 && c.sentinel_top == 99,
         "rc %d R %d targets %d top %d", rc, R, TL, c.sentinel_top);

  // Raw lengths other than R: the example still comes out right (counts from raw_len).
  int32_t raw[568], enc[512], din[114], tgt[114];
  span_config_init(&c, 512, 114, 32128, 32000, g_err, sizeof g_err);
  int bad = 0;
  double noise = 0, spans = 0, total = 0;
  for (int len = 100; len <= 568; len++) {
    for (int i = 0; i < len; i++) raw[i] = 2 + (int32_t)(lcg() % 30000);
    span_counts(&c, len, &nn, &ns);
    if (span_corrupt_example(&c, raw, len, (uint64_t)len, enc, din, tgt, g_err, sizeof g_err) != 0 ||
        check_example(&c, raw, len, nn, ns, enc, din, tgt, 1) != NULL)
      bad++;
    noise += nn, spans += ns, total += len;
  }
  EXPECT("raw lengths 100..568: every example well formed and mergeable", bad == 0, "%d bad", bad);
  EXPECT("raw lengths 100..568: noise fraction ~ 0.15 and mean span ~ 3 on average",
         fabs(noise / total - 0.15) < 0.003 && fabs(noise / spans - 3.0) < 0.05, "density %.4f span %.3f",
         noise / total, noise / spans);
  EXPECT("an example longer than the lengths allow is refused",
         span_corrupt_example(&c, raw, 568, 1, enc, din, tgt, g_err, sizeof g_err) == 0 &&
             span_corrupt_example(&c, (int32_t[600]){0}, 600, 1, enc, din, tgt, g_err, sizeof g_err) != 0 &&
             strstr(g_err, "--enc-len"),
         "%s", g_err);
  raw[10] = 32090;  // inside the 28 sentinels 32072..32099
  EXPECT("a raw token inside the sentinel range is refused",
         span_corrupt_example(&c, raw, 568, 1, enc, din, tgt, g_err, sizeof g_err) != 0 && strstr(g_err, "sentinel"),
         "%s", g_err);
}

static void test_determinism(void) {
  SpanConfig c;
  span_config_init(&c, 512, 114, 32128, 32000, g_err, sizeof g_err);
  int32_t raw[568], e1[512], d1[114], t1[114], e2[512], d2[114], t2[114];
  for (int i = 0; i < 568; i++) raw[i] = 2 + (int32_t)(lcg() % 30000);
  span_corrupt_example(&c, raw, 568, 42, e1, d1, t1, g_err, sizeof g_err);
  // Scribble on the outputs first: everything must be written.
  memset(e2, 0x5a, sizeof e2), memset(d2, 0x5a, sizeof d2), memset(t2, 0x5a, sizeof t2);
  span_corrupt_example(&c, raw, 568, 42, e2, d2, t2, g_err, sizeof g_err);
  EXPECT("same seed -> same bytes", !memcmp(e1, e2, sizeof e1) && !memcmp(d1, d2, sizeof d1) && !memcmp(t1, t2, sizeof t1),
         "differ");
  int same = 0;
  for (uint64_t s = 43; s < 143; s++) {
    span_corrupt_example(&c, raw, 568, s, e2, d2, t2, g_err, sizeof g_err);
    same += !memcmp(e1, e2, sizeof e1);
  }
  EXPECT("different seeds -> different masks", same == 0, "%d of 100 equal", same);
}

static void test_refusals(void) {
  SpanConfig c;
  int R, TL, rc;
  rc = span_config_init(&c, 512, 113, 32128, 32000, g_err, sizeof g_err);
  EXPECT("dec_len 113 for enc_len 512 is refused, naming --dec-len and 114",
         rc != 0 && strstr(g_err, "--dec-len") && strstr(g_err, "114"), "rc %d: %s", rc, g_err);
  printf("     message: %s\n", g_err);
  rc = span_config_init(&c, 32, 7, 100, 97, g_err, sizeof g_err);
  EXPECT("dec_len 7 for enc_len 32 is refused (targets need 8)", rc != 0 && strstr(g_err, "--dec-len") && strstr(g_err, ">= 8"),
         "rc %d: %s", rc, g_err);
  rc = span_config_init(&c, 1, 12, 100, 50, g_err, sizeof g_err);
  EXPECT("enc_len 1 is refused, naming --enc-len", rc != 0 && strstr(g_err, "--enc-len"), "rc %d: %s", rc, g_err);
  printf("     message: %s\n", g_err);
  rc = span_config_init(&c, 2, 12, 100, 50, g_err, sizeof g_err);
  EXPECT("enc_len 2 is refused (non-noise token + sentinel + eos = 3)", rc != 0 && strstr(g_err, "--enc-len"), "rc %d: %s",
         rc, g_err);
  rc = span_config_init(&c, 3, 12, 100, 50, g_err, sizeof g_err);
  EXPECT("enc_len 3 is the smallest accepted", rc == 0 && span_raw_length(&c, &R, &TL, g_err, sizeof g_err) == 0 && R == 2,
         "rc %d: %s", rc, g_err);
  rc = span_config_init(&c, 0, 12, 100, 50, g_err, sizeof g_err);
  EXPECT("enc_len 0 is refused", rc != 0 && strstr(g_err, "--enc-len"), "rc %d: %s", rc, g_err);
  rc = span_config_init(&c, 32, 0, 100, 50, g_err, sizeof g_err);
  EXPECT("dec_len 0 is refused", rc != 0 && strstr(g_err, "--dec-len"), "rc %d: %s", rc, g_err);

  span_config_init(&c, 512, 114, 32128, 32000, g_err, sizeof g_err);
  const double bad_density[] = {0.0, 1.0, -0.1, 1.5, NAN};
  int ok = 1;
  for (int i = 0; i < 5; i++) {
    c.noise_density = bad_density[i];
    ok &= span_raw_length(&c, &R, &TL, g_err, sizeof g_err) != 0 && strstr(g_err, "--noise-density") != NULL;
  }
  EXPECT("noise density 0, 1, -0.1, 1.5, NaN refused, naming --noise-density", ok, "%s", g_err);
  printf("     message: %s\n", g_err);
  c.noise_density = 0.15;
  c.mean_span = 0.5;
  EXPECT("mean span 0.5 refused, naming --mean-span", span_raw_length(&c, &R, &TL, g_err, sizeof g_err) != 0 &&
                                                        strstr(g_err, "--mean-span"),
         "%s", g_err);
  int32_t raw[568] = {0}, enc[512], din[114], tgt[114];
  c.mean_span = 3.0;
  c.noise_density = 1.0;
  EXPECT("span_corrupt_example refuses density 1 too",
         span_corrupt_example(&c, raw, 568, 1, enc, din, tgt, g_err, sizeof g_err) != 0 && strstr(g_err, "--noise-density"),
         "%s", g_err);

  // Vocabulary: sentinels (one per span) must stay above the data tokens, pad and eos.
  rc = span_config_init(&c, 32, 12, 100, 99, g_err, sizeof g_err);
  EXPECT("vocab 100 with data tokens up to 99 is refused: V must be at least 102",
         rc != 0 && strstr(g_err, "V=100") && strstr(g_err, "at least 102"), "rc %d: %s", rc, g_err);
  printf("     message: %s\n", g_err);
  rc = span_config_init(&c, 32, 12, 100, 98, g_err, sizeof g_err);
  EXPECT("vocab 100 with data tokens up to 98 is refused (2 sentinels: 98, 99)", rc != 0 && strstr(g_err, "at least 101"),
         "rc %d: %s", rc, g_err);
  rc = span_config_init(&c, 32, 12, 100, 97, g_err, sizeof g_err);
  EXPECT("vocab 100 with data tokens up to 97 is accepted", rc == 0, "%s", g_err);
  rc = span_config_init(&c, 32, 12, 102, 99, g_err, sizeof g_err);
  EXPECT("vocab 102 with data tokens up to 99 is accepted", rc == 0 && c.sentinel_top == 101, "%s", g_err);
  rc = span_config_init(&c, 512, 114, 32128, 32071, g_err, sizeof g_err);
  EXPECT("standard T5 vocab: data up to 32071, 28 sentinels 32072..32099 accepted", rc == 0, "%s", g_err);
  rc = span_config_init(&c, 512, 114, 32128, 32072, g_err, sizeof g_err);
  EXPECT("standard T5 vocab: data up to 32072 refused", rc != 0 && strstr(g_err, "V must be at least"), "%s", g_err);
  rc = span_config_init(&c, 32, 12, 4, 0, g_err, sizeof g_err);
  EXPECT("sentinels may not reach pad/eos: vocab 4 (sentinels 2..3) accepted, vocab 3 refused",
         rc == 0 && span_config_init(&c, 32, 12, 3, 0, g_err, sizeof g_err) != 0 && strstr(g_err, "at least 4"), "%s",
         g_err);
}

// ---- micro-batches from a shard ------------------------------------------------------------------

static void test_micro_batch(void) {
  SpanConfig c;
  span_config_init(&c, 32, 12, 100, 97, g_err, sizeof g_err);
  int R, TL, nn, ns;
  span_raw_length(&c, &R, &TL, g_err, sizeof g_err);
  span_counts(&c, R, &nn, &ns);
  // Two shards (the stream crosses a file boundary mid-window): 7 windows of 34 + 5 spare.
  enum { N = 34 * 7 + 5, N0 = 100 };
  uint16_t toks[N];
  int32_t stream[N];
  for (int i = 0; i < N; i++) toks[i] = (uint16_t)(2 + (i * 37 + i / 7) % 96), stream[i] = toks[i];
  char p0[512], p1[512], pat[512];
  snprintf(p0, sizeof p0, "%s/span_000.bin", g_dir);
  snprintf(p1, sizeof p1, "%s/span_001.bin", g_dir);
  snprintf(pat, sizeof pat, "%s/span_*.bin", g_dir);
  int rc = shard_write(p0, toks, N0, g_err, sizeof g_err);
  if (rc == 0) rc = shard_write(p1, toks + N0, N - N0, g_err, sizeof g_err);
  TokenStream ts;
  if (rc == 0) rc = token_stream_open(&ts, pat, c.vocab, g_err, sizeof g_err);
  EXPECT("shards written and opened", rc == 0, "%s", g_err);
  if (rc) return;
  EXPECT("7 windows of 34 raw tokens", span_windows(&ts, R) == 7, "%lld", (long long)span_windows(&ts, R));

  enum { B = 3, G = 10 };  // 30 examples: wraps around the 7 windows
  static int32_t fe[G][B * 32], fd[G][B * 12], ft[G][B * 12];
  int fails = 0;
  for (int g = 0; g < G; g++) fails += span_micro_batch(&ts, &c, 777, g, B, fe[g], fd[g], ft[g], g_err, sizeof g_err) != 0;
  EXPECT("span_micro_batch succeeds for g = 0..9", fails == 0, "%s", g_err);

  // Every example: the corruption of window (g*B+i) mod 7 of the stream, well formed.
  int bad = 0;
  const char* why = NULL;
  for (int g = 0; g < G; g++)
    for (int i = 0; i < B; i++) {
      int64_t w = ((int64_t)g * B + i) % 7;
      const char* p = check_example(&c, stream + w * R, R, nn, ns, fe[g] + i * 32, fd[g] + i * 12, ft[g] + i * 12, 1);
      if (p) bad++, why = p;
    }
  EXPECT("each example merges back to window (g*B+i) mod n_windows of the stream", bad == 0, "%d bad: %s", bad,
         why ? why : "");

  // Same data whatever the order of the calls and the micro-batch size (example g*B+i).
  static int32_t e[B * 32], d[B * 12], t[B * 12];
  int diff = 0;
  for (int g = G - 1; g >= 0; g--) {
    span_micro_batch(&ts, &c, 777, g, B, e, d, t, g_err, sizeof g_err);
    diff += memcmp(e, fe[g], sizeof e) || memcmp(d, fd[g], sizeof d) || memcmp(t, ft[g], sizeof t);
  }
  EXPECT("micro-batches read in reverse order are identical", diff == 0, "%d differ", diff);
  diff = 0;
  for (int x = 0; x < G * B; x++) {
    int g = x / B, i = x % B;
    span_micro_batch(&ts, &c, 777, x, 1, e, d, t, g_err, sizeof g_err);
    diff += memcmp(e, fe[g] + i * 32, 32 * 4) || memcmp(d, fd[g] + i * 12, 12 * 4) || memcmp(t, ft[g] + i * 12, 12 * 4);
  }
  EXPECT("B=1 micro-batch g*B+i equals example i of micro-batch g", diff == 0, "%d differ", diff);
  // Ranks: W ranks with A micro-steps read micro-batch j = s*W*A + ... by its global number g,
  // so any W gives the same g -> same data; a rank reading g twice gets the same bytes.
  diff = 0;
  for (int W = 1; W <= 4; W++)
    for (int r = 0; r < W; r++)
      for (int g = r; g < G; g += W) {
        span_micro_batch(&ts, &c, 777, g, B, e, d, t, g_err, sizeof g_err);
        diff += memcmp(e, fe[g], sizeof e) != 0;
      }
  EXPECT("ranks reading their micro-batches (W = 1..4) see the same data", diff == 0, "%d differ", diff);

  // Different g -> different examples; a wrapped window (example 7 = window 0) gets a new mask.
  int same = 0;
  for (int g = 1; g < G; g++) same += !memcmp(fe[g], fe[0], sizeof fe[0]);
  EXPECT("different g give different micro-batches", same == 0, "%d equal to g=0", same);
  EXPECT("the same window in a later epoch is corrupted differently (example 0 vs 7)",
         memcmp(fe[0], fe[2] + 1 * 32, 32 * 4) != 0, "same mask");
  span_micro_batch(&ts, &c, 778, 0, B, e, d, t, g_err, sizeof g_err);
  EXPECT("a different seed gives a different micro-batch", memcmp(e, fe[0], sizeof e) != 0, "same");

  // A stream shorter than one window.
  SpanConfig big;
  span_config_init(&big, 512, 114, 32128, 32000, g_err, sizeof g_err);
  static int32_t be[512], bd[114], bt[114];
  rc = span_micro_batch(&ts, &big, 1, 0, 1, be, bd, bt, g_err, sizeof g_err);
  EXPECT("a stream shorter than one window is refused, naming the window and --enc-len",
         rc != 0 && strstr(g_err, "243 tokens") && strstr(g_err, "568") && strstr(g_err, "--enc-len"), "rc %d: %s", rc,
         g_err);
  printf("     message: %s\n", g_err);
  rc = span_micro_batch(&ts, &c, 1, 0, 0, e, d, t, g_err, sizeof g_err);
  EXPECT("B=0 is refused", rc != 0, "accepted");
  token_stream_close(&ts);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "%s", "/tmp/fsdp_test_span_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  TEST_RUN(test_t5_lengths());
  TEST_RUN(test_cases());
  TEST_RUN(test_determinism());
  TEST_RUN(test_refusals());
  TEST_RUN(test_micro_batch());
  nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return test_summary();
}
