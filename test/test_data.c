// test_data.c: token shards, the token stream, the sampler and the built-in dataset.
//
// Everything is written into a fresh temporary directory (mkdtemp) that is removed at the end.
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/shard.h"
#include "test/test.h"

static char g_dir[256];
static char g_err[1024];

static const char* tpath(const char* name) {
  static char buf[8][512];
  static int k = 0;
  k = (k + 1) % 8;  // a few live results at once, so two paths can appear in one call
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

// A deterministic token sequence that covers the whole uint16 range.
static uint16_t tok_at(int64_t i) { return (uint16_t)((i * 40503 + 17) & 0xffff); }

// Writes a shard by hand with any header, so that broken files can be made.
static void write_raw(const char* path, int32_t magic, int32_t version, int32_t count,
                      const uint16_t* toks, size_t ntoks) {
  int32_t header[SHARD_HEADER_INTS] = {0};
  header[0] = magic, header[1] = version, header[2] = count;
  FILE* f = fopen(path, "wb");
  if (!f) {
    printf("cannot create %s\n", path);
    exit(1);
  }
  fwrite(header, 4, SHARD_HEADER_INTS, f);
  if (ntoks) fwrite(toks, 2, ntoks, f);
  fclose(f);
}

static int rm_entry(const char* p, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static int count_tmp_files(void) {
  DIR* d = opendir(g_dir);
  int n = 0;
  struct dirent* e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) n++;
  if (d) closedir(d);
  return n;
}

// ---- round trip across files -------------------------------------------------------------

static void test_round_trip(void) {
  // Files of 300, 0, 1 and 450 tokens: an empty file and a 1-token file sit on boundaries.
  const int sizes[4] = {300, 0, 1, 450};
  const char* names[4] = {"rt_000.bin", "rt_001.bin", "rt_002.bin", "rt_003.bin"};
  int64_t total = 0;
  int wrote_ok = 1;
  // Written in reverse order, so the stream order must come from sorting the names.
  for (int i = 3; i >= 0; i--) {
    int64_t off = 0;
    for (int k = 0; k < i; k++) off += sizes[k];
    uint16_t* t = malloc((size_t)(sizes[i] + 1) * sizeof(uint16_t));
    for (int k = 0; k < sizes[i]; k++) t[k] = tok_at(off + k);
    if (shard_write(tpath(names[i]), t, (size_t)sizes[i], g_err, sizeof g_err) != 0) wrote_ok = 0;
    free(t);
  }
  for (int i = 0; i < 4; i++) total += sizes[i];
  EXPECT("shard_write succeeds", wrote_ok, "%s", g_err);
  EXPECT("shard_write leaves no temporary file", count_tmp_files() == 0, "%d found", count_tmp_files());

  TokenStream ts;
  int rc = token_stream_open(&ts, tpath("rt_*.bin"), 0, g_err, sizeof g_err);
  EXPECT("open a 4-file stream", rc == 0, "%s", g_err);
  if (rc != 0) return;
  EXPECT("stream has 4 files and all tokens", ts.nfiles == 4 && ts.total == total,
         "nfiles %d total %lld", ts.nfiles, (long long)ts.total);
  int layout_ok = 1;
  for (int i = 0, off = 0; i < 4; off += sizes[i], i++)
    layout_ok &= ts.ntokens[i] == sizes[i] && ts.start[i] == off && strstr(ts.paths[i], names[i]) != NULL;
  EXPECT("files sorted by name with their counts and offsets", layout_ok, "layout mismatch");

  int32_t* out = malloc((size_t)total * sizeof(int32_t));
  int whole = token_stream_read(&ts, 0, total, out, g_err, sizeof g_err) == 0;
  for (int64_t i = 0; whole && i < total; i++) whole &= out[i] == tok_at(i);
  EXPECT("read the whole stream", whole, "%s", g_err);

  // Every start (step 3) and many lengths, so reads begin, end and cross at each boundary.
  int bad = 0;
  for (int64_t pos = 0; pos <= total; pos += 3) {
    for (int64_t n = 0; n <= 40 && pos + n <= total; n += (n < 4 ? 1 : 9)) {
      memset(out, 0xff, (size_t)total * sizeof(int32_t));
      if (token_stream_read(&ts, pos, n, out, g_err, sizeof g_err) != 0) { bad++; continue; }
      for (int64_t i = 0; i < n; i++) bad += out[i] != tok_at(pos + i);
    }
  }
  // The exact boundary crossings 299|300|301.
  for (int64_t pos = 296; pos <= 301; pos++) {
    if (token_stream_read(&ts, pos, 6, out, g_err, sizeof g_err) != 0) { bad++; continue; }
    for (int64_t i = 0; i < 6; i++) bad += out[i] != tok_at(pos + i);
  }
  EXPECT("reads crossing file boundaries", bad == 0, "%d mismatches", bad);
  EXPECT("read past the end is refused",
         token_stream_read(&ts, total - 2, 3, out, g_err, sizeof g_err) != 0 && strstr(g_err, "outside"),
         "err '%s'", g_err);
  free(out);
  token_stream_close(&ts);

  // Token ids are checked against vocab only when vocab > 0, and 65536 admits any uint16.
  rc = token_stream_open(&ts, tpath("rt_*.bin"), 65536, g_err, sizeof g_err);
  EXPECT("vocab 65536 admits every uint16 token", rc == 0, "%s", g_err);
  if (rc == 0) token_stream_close(&ts);
}

// A shard rewritten after it was opened (and checked) is caught on its next open: the file must
// still be the one that was checked (device, inode, size, modification time). Should a rewrite
// keep all of those (its time set back), ids are still checked against the vocabulary on every
// read, naming the file and the byte offset.
static void test_rewritten_shard(void) {
  uint16_t t[64];
  for (int i = 0; i < 64; i++) t[i] = (uint16_t)(i * 7 % 100);
  TokenStream ts;
  int rc = shard_write(tpath("live_000.bin"), t, 64, g_err, sizeof g_err) ||
           token_stream_open(&ts, tpath("live_*.bin"), 100, g_err, sizeof g_err);
  EXPECT("open a shard of ids below 100 with vocab 100", rc == 0, "%s", g_err);
  if (rc) return;
  struct stat before;
  stat(tpath("live_000.bin"), &before);
  FILE* f = fopen(tpath("live_000.bin"), "r+b");
  unsigned char big[2] = {0xff, 0xff};
  int wrote = f && fseek(f, 1024 + 2 * 9, SEEK_SET) == 0 && fwrite(big, 1, 2, f) == 2;
  if (f) fclose(f);
  int32_t out[64];
  int refused = token_stream_read(&ts, 0, 9, out, g_err, sizeof g_err) != 0;
  EXPECT("a shard written to after open is refused on its next read, naming it",
         wrote && refused && strstr(g_err, "live_000.bin changed while the run reads it: it was written to"), "err '%s'", g_err);
  struct timespec times[2] = {before.st_atim, before.st_mtim};  // the same file again, as far as its identity says
  int reset = utimensat(AT_FDCWD, tpath("live_000.bin"), times, 0) == 0;
  EXPECT("reads before the rewritten token succeed when its identity is unchanged",
         reset && token_stream_read(&ts, 0, 9, out, g_err, sizeof g_err) == 0, "%s", g_err);
  refused = token_stream_read(&ts, 4, 16, out, g_err, sizeof g_err) != 0;
  EXPECT("an id rewritten after open is refused on read, with file and byte offset",
         wrote && refused && strstr(g_err, "live_000.bin: token 9 (byte offset 1042) has id 65535 >= vocab 100"),
         "err '%s'", g_err);
  token_stream_close(&ts);
  // Replaced by another file of the same size and time: a new inode.
  rc = shard_write(tpath("swap_000.bin"), t, 64, g_err, sizeof g_err) ||
       token_stream_open(&ts, tpath("swap_*.bin"), 100, g_err, sizeof g_err);
  stat(tpath("swap_000.bin"), &before);
  rc = rc || shard_write(tpath("swap_000.bin"), t, 64, g_err, sizeof g_err);
  struct timespec same[2] = {before.st_atim, before.st_mtim};
  utimensat(AT_FDCWD, tpath("swap_000.bin"), same, 0);
  refused = !rc && token_stream_read(&ts, 0, 9, out, g_err, sizeof g_err) != 0;
  EXPECT("a shard replaced by another file (renamed over it) is refused on its next read",
         refused && strstr(g_err, "swap_000.bin changed while the run reads it: it was replaced"), "err '%s'", g_err);
  if (!rc) token_stream_close(&ts);
}

// ---- sampler -------------------------------------------------------------------------------

// Checks one micro-batch against the tokens computed directly from the formula.
static int batch_matches(int64_t g, int64_t nw, int B, int T, const int32_t* in, const int32_t* tg) {
  int64_t bt = (int64_t)B * T, w = ((g % nw) + nw) % nw, pos = w * bt;
  for (int64_t i = 0; i < bt; i++)
    if (in[i] != tok_at(pos + i) || tg[i] != tok_at(pos + 1 + i)) return 0;
  return 1;
}

static void test_sampler(void) {
  TokenStream ts;
  if (token_stream_open(&ts, tpath("rt_*.bin"), 0, g_err, sizeof g_err) != 0) {
    EXPECT("sampler: open stream", 0, "%s", g_err);
    return;
  }
  const int shapes[4][2] = {{2, 5}, {1, 1}, {3, 16}, {1, 750}};  // total is 751 tokens
  for (int s = 0; s < 4; s++) {
    int B = shapes[s][0], T = shapes[s][1];
    int64_t bt = (int64_t)B * T, nw = sampler_windows(&ts, B, T);
    char name[96];
    snprintf(name, sizeof name, "sampler B=%d T=%d: n_windows = (total-1)/(B*T)", B, T);
    EXPECT(name, nw == (ts.total - 1) / bt && nw >= 1, "got %lld", (long long)nw);
    int32_t* in = malloc((size_t)bt * sizeof(int32_t));
    int32_t* tg = malloc((size_t)bt * sizeof(int32_t));
    int bad = 0;
    // Three laps of the stream: windows, the last window, and the wrap back to window 0.
    for (int64_t g = 0; g < 3 * nw + 2; g++) {
      if (sampler_micro_batch(&ts, g, B, T, in, tg, g_err, sizeof g_err) != 0) { bad++; continue; }
      bad += !batch_matches(g, nw, B, T, in, tg);
    }
    snprintf(name, sizeof name, "sampler B=%d T=%d: windows and wrap-around", B, T);
    EXPECT(name, bad == 0, "%d bad micro-batches (%s)", bad, g_err);
    free(in), free(tg);
  }
  token_stream_close(&ts);

  // A stream of exactly B*T+1 tokens has one window.
  uint16_t t[11];
  for (int i = 0; i < 11; i++) t[i] = tok_at(i);
  shard_write(tpath("one_window.bin"), t, 11, g_err, sizeof g_err);
  if (token_stream_open(&ts, tpath("one_window.bin"), 0, g_err, sizeof g_err) == 0) {
    int32_t in[10], tg[10];
    int ok = sampler_windows(&ts, 2, 5) == 1 &&
             sampler_micro_batch(&ts, 7, 2, 5, in, tg, g_err, sizeof g_err) == 0 &&
             batch_matches(0, 1, 2, 5, in, tg);
    EXPECT("stream of exactly B*T+1 tokens has one window", ok, "%s", g_err);
    token_stream_close(&ts);
  }
}

// Micro-batch j of step s, read by rank j mod W at micro-step j div W, must be the batch a
// single rank reads at micro-step j with W*A accumulation steps.
static void test_ranks_equal_accumulation(void) {
  TokenStream ts;
  if (token_stream_open(&ts, tpath("rt_*.bin"), 0, g_err, sizeof g_err) != 0) {
    EXPECT("ranks: open stream", 0, "%s", g_err);
    return;
  }
  const int B = 2, T = 8, steps = 6;  // 46 windows: 6 steps of up to 12 micro-batches wrap
  const int64_t bt = B * T, nw = sampler_windows(&ts, B, T);
  for (int W = 1; W <= 4; W++) {
    for (int A = 1; A <= 3; A++) {
      int M = W * A, bad = 0;
      int32_t* multi = malloc((size_t)steps * M * bt * sizeof(int32_t));  // [s][j][bt]
      int32_t* tg = malloc((size_t)bt * sizeof(int32_t));
      int32_t* in = malloc((size_t)bt * sizeof(int32_t));
      // W ranks, each running A micro-steps per optimizer step.
      for (int r = 0; r < W; r++)
        for (int s = 0; s < steps; s++)
          for (int a = 0; a < A; a++) {
            int j = a * W + r;  // so that rank = j mod W, micro-step = j div W
            int64_t g = (int64_t)s * M + j;
            int32_t* dst = multi + ((int64_t)s * M + j) * bt;
            if (sampler_micro_batch(&ts, g, B, T, dst, tg, g_err, sizeof g_err) != 0) bad++;
            else bad += !batch_matches(g, nw, B, T, dst, tg);
          }
      // One rank with W*A micro-steps.
      for (int s = 0; s < steps; s++)
        for (int j = 0; j < M; j++) {
          int64_t g = (int64_t)s * M + j;
          if (sampler_micro_batch(&ts, g, B, T, in, tg, g_err, sizeof g_err) != 0) { bad++; continue; }
          bad += memcmp(in, multi + g * bt, (size_t)bt * sizeof(int32_t)) != 0;
        }
      char name[96];
      snprintf(name, sizeof name, "W=%d ranks x A=%d accumulation = 1 rank x %d micro-steps", W, A, M);
      EXPECT(name, bad == 0, "%d mismatches", bad);
      free(multi), free(tg), free(in);
    }
  }
  token_stream_close(&ts);
}

// ---- refusals ------------------------------------------------------------------------------

// Opens pattern expecting failure; every keyword must appear in the message.
static void expect_refused(const char* name, const char* pattern, int vocab, const char* k1,
                           const char* k2, const char* k3, const char* k4) {
  TokenStream ts;
  g_err[0] = 0;
  int rc = token_stream_open(&ts, pattern, vocab, g_err, sizeof g_err);
  if (rc == 0) token_stream_close(&ts);
  const char* keys[4] = {k1, k2, k3, k4};
  const char* missing = NULL;
  for (int i = 0; i < 4; i++)
    if (keys[i] && !strstr(g_err, keys[i])) missing = keys[i];
  EXPECT(name, rc != 0 && !missing, "rc %d, '%s' missing from message: %s", rc, missing ? missing : "", g_err);
  if (rc != 0) printf("     message: %s\n", g_err);
}

static void test_refusals(void) {
  uint16_t t[100];
  for (int i = 0; i < 100; i++) t[i] = (uint16_t)(i % 200);

  write_raw(tpath("bad_magic.bin"), 12345, 1, 100, t, 100);
  expect_refused("refuse wrong magic", tpath("bad_magic.bin"), 256, "bad_magic.bin", "magic", "12345", "20240520");

  write_raw(tpath("bad_version.bin"), SHARD_MAGIC, 7, 100, t, 100);
  expect_refused("refuse wrong version", tpath("bad_version.bin"), 256, "bad_version.bin", "version 7", "expected 1", NULL);

  // 100 tokens promised, 50 present: expected 1024+200 = 1224 bytes, actual 1124.
  write_raw(tpath("bad_trunc.bin"), SHARD_MAGIC, 1, 100, t, 50);
  expect_refused("refuse truncated shard", tpath("bad_trunc.bin"), 256, "bad_trunc.bin", "truncated", "1224", "1124");

  FILE* f = fopen(tpath("bad_header.bin"), "wb");
  fwrite("short", 1, 5, f);
  fclose(f);
  expect_refused("refuse file shorter than the header", tpath("bad_header.bin"), 256, "bad_header.bin",
                 "truncated", NULL, NULL);

  // 50 tokens promised, 100 present.
  write_raw(tpath("bad_over.bin"), SHARD_MAGIC, 1, 50, t, 100);
  expect_refused("refuse oversized shard (count does not match size)", tpath("bad_over.bin"), 256,
                 "bad_over.bin", "does not match", "oversized", NULL);

  uint16_t v[100];
  memcpy(v, t, sizeof v);
  v[17] = 300;
  write_raw(tpath("bad_vocab.bin"), SHARD_MAGIC, 1, 100, v, 100);
  expect_refused("refuse token id >= vocab", tpath("bad_vocab.bin"), 256, "bad_vocab.bin", "token 17",
                 "300 >= vocab 256", "--model V");
  TokenStream ts;
  int rc = token_stream_open(&ts, tpath("bad_vocab.bin"), 0, g_err, sizeof g_err);
  EXPECT("vocab <= 0 skips the token id check", rc == 0, "%s", g_err);
  if (rc == 0) token_stream_close(&ts);

  expect_refused("refuse a glob with no match", tpath("nothing_*.bin"), 256, "nothing_*.bin",
                 "no file matched", NULL, NULL);

  // A bad file after a good one in the same glob is still found.
  shard_write(tpath("mix_000.bin"), t, 100, g_err, sizeof g_err);
  write_raw(tpath("mix_001.bin"), SHARD_MAGIC, 1, 100, v, 100);
  expect_refused("refuse a bad second file of a glob", tpath("mix_*.bin"), 256, "mix_001.bin", "vocab", NULL, NULL);

  // 10 tokens cannot fill a window of B*T+1 = 11.
  shard_write(tpath("short_stream.bin"), t, 10, g_err, sizeof g_err);
  rc = token_stream_open(&ts, tpath("short_stream.bin"), 256, g_err, sizeof g_err);
  if (rc == 0) {
    int32_t in[10], tg[10];
    int64_t nw = sampler_windows(&ts, 2, 5);
    int src = sampler_micro_batch(&ts, 0, 2, 5, in, tg, g_err, sizeof g_err);
    EXPECT("refuse a stream shorter than one window", nw == 0 && src != 0 &&
           strstr(g_err, "shorter than one window") && strstr(g_err, "11 tokens"),
           "nw %lld rc %d: %s", (long long)nw, src, g_err);
    printf("     message: %s\n", g_err);
    token_stream_close(&ts);
  } else {
    EXPECT("refuse a stream shorter than one window", 0, "open failed: %s", g_err);
  }

  // A write that cannot happen reports it and leaves nothing behind.
  rc = shard_write(tpath("no_such_dir/x.bin"), t, 10, g_err, sizeof g_err);
  EXPECT("shard_write into a missing directory fails with a message", rc != 0 && strstr(g_err, "x.bin"),
         "rc %d: %s", rc, g_err);
  EXPECT("no temporary files left after all writes", count_tmp_files() == 0, "%d found", count_tmp_files());
}

// ---- Llama 3's 32-bit shards ----------------------------------------------------------------

// A deterministic uint32 sequence over Llama 3's vocabulary (128256 ids, most above 65535).
static uint32_t tok32_at(int64_t i) { return (uint32_t)((i * 92821 + 65531) % 128256); }

static void write_raw32(const char* path, int32_t magic, int32_t version, int32_t count, const uint32_t* toks,
                        size_t ntoks) {
  int32_t header[SHARD_HEADER_INTS] = {0};
  header[0] = magic, header[1] = version, header[2] = count;
  FILE* f = fopen(path, "wb");
  if (!f) {
    printf("cannot create %s\n", path);
    exit(1);
  }
  fwrite(header, 4, SHARD_HEADER_INTS, f);
  if (ntoks) fwrite(toks, 4, ntoks, f);
  fclose(f);
}

// The reader's checks on the uint32 format: a round trip across files (reads crossing every
// boundary, ids past 65535), the sampler, the vocabulary check on open and on every read, the
// header's magic and version, sizes computed with 4-byte tokens, ids past INT32_MAX, and one
// format per stream.
static void test_shards32(void) {
  const int sizes[3] = {200, 0, 333};
  const char* names[3] = {"l3_000.bin", "l3_001.bin", "l3_002.bin"};
  int64_t total = 0;
  int wrote_ok = 1;
  for (int i = 0; i < 3; i++) {
    uint32_t* t = malloc((size_t)(sizes[i] + 1) * sizeof(uint32_t));
    for (int k = 0; k < sizes[i]; k++) t[k] = tok32_at(total + k);
    wrote_ok &= shard_write32(tpath(names[i]), t, (size_t)sizes[i], g_err, sizeof g_err) == 0;
    total += sizes[i];
    free(t);
  }
  EXPECT("shard_write32 succeeds and leaves no temporary file", wrote_ok && count_tmp_files() == 0, "%s", g_err);
  FILE* f = fopen(tpath("l3_000.bin"), "rb");
  int32_t head[3] = {0};
  unsigned char first[4] = {0};
  int read_ok = f && fread(head, 4, 3, f) == 3 && fseek(f, 1024, SEEK_SET) == 0 && fread(first, 1, 4, f) == 4;
  if (f) fclose(f);
  uint32_t t0 = tok32_at(0);
  EXPECT("shard_write32 writes llm.c's Llama 3 header (20240801, 7, count) and little-endian uint32 tokens",
         read_ok && head[0] == 20240801 && head[1] == 7 && head[2] == 200 && first[0] == (t0 & 0xff) &&
             first[3] == (t0 >> 24),
         "header %d %d %d", head[0], head[1], head[2]);

  TokenStream ts;
  int rc = token_stream_open(&ts, tpath("l3_*.bin"), 128256, g_err, sizeof g_err);
  EXPECT("open a 3-file uint32 stream with vocab 128256", rc == 0 && ts.total == total && ts.token_bytes == 4, "%s",
         g_err);
  if (rc != 0) return;
  int32_t* out = malloc((size_t)total * sizeof(int32_t));
  int bad = 0, above = 0;
  for (int64_t pos = 0; pos <= total; pos += 7)
    for (int64_t n = 0; n <= 30 && pos + n <= total; n += (n < 3 ? 1 : 9)) {
      if (token_stream_read(&ts, pos, n, out, g_err, sizeof g_err) != 0) { bad++; continue; }
      for (int64_t i = 0; i < n; i++) bad += out[i] != (int32_t)tok32_at(pos + i), above += out[i] > 65535;
    }
  for (int64_t pos = 195; pos <= 201; pos++) {
    if (token_stream_read(&ts, pos, 6, out, g_err, sizeof g_err) != 0) { bad++; continue; }
    for (int64_t i = 0; i < 6; i++) bad += out[i] != (int32_t)tok32_at(pos + i);
  }
  EXPECT("uint32 reads crossing file boundaries, ids past 65535", bad == 0 && above > 100, "%d mismatches, %d ids above 65535",
         bad, above);
  int32_t in[12], tg[12];
  int64_t nw = sampler_windows(&ts, 3, 4);
  int sampled = nw == (total - 1) / 12;
  for (int64_t g = 0; sampled && g < 2 * nw + 1; g++) {
    sampled &= sampler_micro_batch(&ts, g, 3, 4, in, tg, g_err, sizeof g_err) == 0;
    for (int i = 0; sampled && i < 12; i++)
      sampled &= in[i] == (int32_t)tok32_at((g % nw) * 12 + i) && tg[i] == (int32_t)tok32_at((g % nw) * 12 + i + 1);
  }
  EXPECT("sampler over a uint32 stream: windows and wrap-around", sampled, "%s", g_err);
  // A token rewritten after open (id 200000), its time set back so that the file's identity
  // holds: the vocabulary check on read catches it, at byte offset 1024 + 4 * 9.
  struct stat before;
  stat(tpath("l3_000.bin"), &before);
  f = fopen(tpath("l3_000.bin"), "r+b");
  uint32_t big = 200000;
  int wrote = f && fseek(f, 1024 + 4 * 9, SEEK_SET) == 0 && fwrite(&big, 4, 1, f) == 1;
  if (f) fclose(f);
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  wrote = wrote && utimensat(AT_FDCWD, tpath("l3_000.bin"), times, 0) == 0;
  rc = token_stream_read(&ts, 4, 16, out, g_err, sizeof g_err);
  EXPECT("a uint32 id rewritten after open is refused on read, with file and byte offset",
         wrote && rc != 0 && strstr(g_err, "l3_000.bin: token 9 (byte offset 1060) has id 200000 >= vocab 128256"),
         "err '%s'", g_err);
  token_stream_close(&ts);
  free(out);

  uint32_t v[50];
  for (int i = 0; i < 50; i++) v[i] = tok32_at(i);
  write_raw32(tpath("l3v_000.bin"), 20240801, 7, 50, v, 50);
  expect_refused("refuse a uint32 id >= vocab, naming the token", tpath("l3v_000.bin"), 100000, "l3v_000.bin",
                 "token 2 ", "122917 >= vocab 100000", "--model V");
  v[3] = 0x80000005u;
  write_raw32(tpath("l3h_000.bin"), 20240801, 7, 50, v, 50);
  expect_refused("refuse a uint32 id past INT32_MAX even unchecked (vocab 0)", tpath("l3h_000.bin"), 0, "token 3 ",
                 "2147483653", NULL, NULL);
  write_raw32(tpath("l3ver.bin"), 20240801, 1, 50, v, 50);
  expect_refused("refuse Llama 3's magic with GPT-2's version", tpath("l3ver.bin"), 0, "l3ver.bin", "version 1",
                 "expected 7", NULL);
  // 50 uint32 tokens promised, 40 present: 1024 + 200 = 1224 bytes expected, 1184 there; and
  // the same bytes read as a uint16 shard would be oversized.
  write_raw32(tpath("l3tr.bin"), 20240801, 7, 50, v, 40);
  expect_refused("refuse a truncated uint32 shard (4 bytes a token)", tpath("l3tr.bin"), 0, "l3tr.bin", "truncated",
                 "1224", "1184");
  write_raw32(tpath("l3as16.bin"), SHARD_MAGIC, SHARD_VERSION, 50, v, 50);
  expect_refused("refuse uint32 tokens under GPT-2's header (oversized)", tpath("l3as16.bin"), 0, "l3as16.bin",
                 "oversized", NULL, NULL);
  uint16_t t16[20] = {0};
  shard_write(tpath("fmt_000.bin"), t16, 20, g_err, sizeof g_err);
  write_raw32(tpath("fmt_001.bin"), 20240801, 7, 20, v + 10, 20);
  expect_refused("refuse a stream mixing GPT-2's and Llama 3's shards", tpath("fmt_*.bin"), 0, "fmt_001.bin",
                 "GPT-2's uint16", "Llama 3's uint32", "one format");
}

// ---- the built-in addition dataset ---------------------------------------------------------

static int cmp_i64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return (x > y) - (x < y);
}

// Parses problems "a+b=rev(sum)\n" of width D; returns the number parsed, -1 on a bad one.
// keys[i] = a*10^D+b.
static int64_t parse_problems(const int32_t* t, int64_t n, int D, int64_t* keys, int64_t maxp, char* why) {
  int len = 3 * D + 4;
  int64_t base = 1, np = 0;
  for (int i = 0; i < D; i++) base *= 10;
  for (int64_t p = 0; p + len <= n && np < maxp; p += len, np++) {
    const int32_t* s = t + p;
    int64_t a = 0, b = 0, c = 0, m = 1;
    for (int i = 0; i < len; i++) {
      int want_digit = !(i == D || i == 2 * D + 1 || i == len - 1);
      int ok = want_digit ? (s[i] >= '0' && s[i] <= '9')
                          : s[i] == (i == D ? '+' : i == 2 * D + 1 ? '=' : '\n');
      if (!ok) {
        sprintf(why, "problem %lld: bad byte %d at column %d", (long long)np, s[i], i);
        return -1;
      }
    }
    for (int i = 0; i < D; i++) a = a * 10 + (s[i] - '0'), b = b * 10 + (s[D + 1 + i] - '0');
    for (int i = 0; i < D + 1; i++, m *= 10) c += (s[2 * D + 2 + i] - '0') * m;  // reversed
    if (c != a + b) {
      sprintf(why, "problem %lld: %lld+%lld answered %lld", (long long)np, (long long)a, (long long)b, (long long)c);
      return -1;
    }
    keys[np] = a * base + b;
  }
  return np;
}

static int32_t* read_all(const char* pattern, int64_t* n) {
  TokenStream ts;
  if (token_stream_open(&ts, pattern, 256, g_err, sizeof g_err) != 0) return NULL;
  int32_t* t = malloc((size_t)(ts.total ? ts.total : 1) * sizeof(int32_t));
  *n = ts.total;
  if (token_stream_read(&ts, 0, ts.total, t, g_err, sizeof g_err) != 0) free(t), t = NULL;
  token_stream_close(&ts);
  return t;
}

static void test_make_addition(void) {
  const char* bin = "build/make_addition";
  if (access(bin, X_OK) != 0) {
    printf("note: %s not built, skipping the addition dataset tests (make %s)\n", bin, bin);
    return;
  }
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s > %s", bin, tpath("add"), tpath("add.log"));
  EXPECT("make_addition runs", system(cmd) == 0, "%s failed", cmd);
  int64_t ntrain = 0, nval = 0;
  int32_t* train = read_all(tpath("add/train_*.bin"), &ntrain);
  EXPECT("make_addition train shard is valid (vocab 256)", train != NULL, "%s", g_err);
  int32_t* val = read_all(tpath("add/val_*.bin"), &nval);
  EXPECT("make_addition val shard is valid (vocab 256)", val != NULL, "%s", g_err);
  if (!train || !val) return;
  EXPECT("make_addition sizes ~1.5M train, ~100k val tokens",
         ntrain >= 1500000 && ntrain < 1500100 && nval >= 100000 && nval < 100100,
         "%lld, %lld", (long long)ntrain, (long long)nval);

  const int D = 3, len = 3 * D + 4;  // the default
  char why[256] = "";
  int64_t* tk = malloc((size_t)(ntrain / len + 1) * sizeof(int64_t));
  int64_t* vk = malloc((size_t)(nval / len + 1) * sizeof(int64_t));
  int64_t ntp = parse_problems(train, ntrain, D, tk, 5000, why);
  EXPECT("train problems: format and correct answers (first 5000)", ntp == 5000, "%s", why);
  int64_t nvp = parse_problems(val, nval, D, vk, INT64_MAX, why);
  EXPECT("val problems: whole shard is well-formed problems with correct answers",
         nvp > 0 && nvp * len == nval, "%s", why);
  if (ntp > 0 && nvp > 0) {
    qsort(vk, (size_t)nvp, sizeof(int64_t), cmp_i64);
    int leaked = 0;
    for (int64_t i = 0; i < ntp; i++) leaked += bsearch(&tk[i], vk, (size_t)nvp, sizeof(int64_t), cmp_i64) != NULL;
    EXPECT("no val problem among the first 5000 train problems", leaked == 0, "%d leaked", leaked);
  }

  // val_problems.txt: "<prompt>\t<expected>", correct, distinct, all from the val split.
  FILE* f = fopen(tpath("add/val_problems.txt"), "r");
  char line[128];
  int nl = 0, badl = 0;
  int64_t* seen = malloc(1000 * sizeof(int64_t));
  while (f && fgets(line, sizeof line, f)) {
    int a, b;
    char ans[16], tail;
    // Exactly "ddd+ddd=\tdddd\n".
    int ok = strlen(line) == (size_t)(2 * D + 2 + 1 + D + 1 + 1) && line[D] == '+' && line[2 * D + 1] == '=' &&
             line[2 * D + 2] == '\t' && sscanf(line, "%d+%d=\t%15s%c", &a, &b, ans, &tail) == 4 && tail == '\n';
    int64_t key = (int64_t)a * 1000 + b;
    if (ok) {
      int32_t s[32];
      for (int i = 0; i < 2 * D + 2; i++) s[i] = (unsigned char)line[i];
      for (int i = 0; i < D + 1; i++) s[2 * D + 2 + i] = (unsigned char)ans[i];
      s[len - 1] = '\n';
      int64_t k2;
      ok = parse_problems(s, len, D, &k2, 1, why) == 1 && k2 == key &&
           bsearch(&key, vk, (size_t)nvp, sizeof(int64_t), cmp_i64) != NULL;
      for (int i = 0; ok && i < nl && i < 1000; i++) ok = seen[i] != key;
    }
    if (nl < 1000) seen[nl] = key;
    badl += !ok;
    nl++;
  }
  if (f) fclose(f);
  EXPECT("val_problems.txt: 1000 distinct, correct val problems as prompt<TAB>expected",
         f && nl == 1000 && badl == 0, "%d lines, %d bad", nl, badl);

  // Deterministic: a second run writes the same bytes.
  snprintf(cmd, sizeof cmd, "%s %s > /dev/null && cmp -s %s %s && cmp -s %s %s && cmp -s %s %s", bin,
           tpath("add2"), tpath("add/train_000.bin"), tpath("add2/train_000.bin"), tpath("add/val_000.bin"),
           tpath("add2/val_000.bin"), tpath("add/val_problems.txt"), tpath("add2/val_problems.txt"));
  EXPECT("make_addition is deterministic", system(cmd) == 0, "outputs differ");
  free(seen), free(tk), free(vk), free(train), free(val);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "%s", "/tmp/fsdp_test_data_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  TEST_RUN(test_round_trip());
  TEST_RUN(test_rewritten_shard());
  TEST_RUN(test_sampler());
  TEST_RUN(test_ranks_equal_accumulation());
  TEST_RUN(test_refusals());
  TEST_RUN(test_shards32());
  TEST_RUN(test_make_addition());
  nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return test_summary();
}
