// shard.c: llm.c token shards (read, validate, write) and the distributed batch sampler.
//
// Byte order: llm.c shards are little-endian (numpy on x86). Header ints and tokens are
// decoded from explicit little-endian bytes, so the reader is right on any host.
#include "data/shard.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "infra/files.h"

#define HEADER_BYTES ((int64_t)SHARD_HEADER_INTS * 4)
#define IO_CHUNK 16384  // tokens per fread/fwrite (32 KiB stack buffers)

static int32_t le_i32(const unsigned char* p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}
static uint16_t le_u16(const unsigned char* p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le_u32(const unsigned char* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
// Token k of a buffer of `bytes`-wide little-endian tokens, as int64 (the callers refuse a
// uint32 id past INT32_MAX, which no int32 token buffer holds).
static int64_t token_at(const unsigned char* buf, size_t k, int bytes) {
  return bytes == 2 ? (int64_t)le_u16(buf + 2 * k) : (int64_t)le_u32(buf + 4 * k);
}
static void put_le_i32(unsigned char* p, int32_t v) {
  uint32_t u = (uint32_t)v;
  p[0] = u & 0xff, p[1] = (u >> 8) & 0xff, p[2] = (u >> 16) & 0xff, p[3] = u >> 24;
}

// ---- writing ---------------------------------------------------------------------------

// Either format: tokens are tokens16 (GPT-2's) or tokens32 (Llama 3's), the other NULL.
static int write_shard(const char* path, const uint16_t* tokens16, const uint32_t* tokens32, size_t ntokens, char* err,
                       size_t errlen) {
  // The header stores the count as int32, so a larger shard cannot be described.
  if (ntokens > (size_t)INT32_MAX) {
    snprintf(err, errlen, "%s: %zu tokens do not fit in one shard (at most %d)", path, ntokens, INT32_MAX);
    return -1;
  }
  // Write under a temporary name and rename, so a reader (or a crash) never sees half a file.
  size_t tlen = strlen(path) + 32;
  char* tmp = malloc(tlen);
  if (!tmp) {
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  FILE* f = fopen(tmp, "wb");
  if (!f) {
    snprintf(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
    free(tmp);
    return -1;
  }
  unsigned char header[SHARD_HEADER_INTS * 4];
  memset(header, 0, sizeof header);
  int bytes = tokens16 ? 2 : 4;
  put_le_i32(header + 0, tokens16 ? SHARD_MAGIC : SHARD32_MAGIC);
  put_le_i32(header + 4, tokens16 ? SHARD_VERSION : SHARD32_VERSION);
  put_le_i32(header + 8, (int32_t)ntokens);
  int ok = fwrite(header, 1, sizeof header, f) == sizeof header;
  unsigned char buf[IO_CHUNK * 4];
  for (size_t i = 0; ok && i < ntokens; i += IO_CHUNK) {
    size_t n = ntokens - i < IO_CHUNK ? ntokens - i : IO_CHUNK;
    for (size_t k = 0; k < n; k++) {
      uint32_t t = tokens16 ? tokens16[i + k] : tokens32[i + k];
      for (int b = 0; b < bytes; b++) buf[bytes * k + b] = (t >> (8 * b)) & 0xff;
    }
    ok = fwrite(buf, (size_t)bytes, n, f) == n;
  }
  int saved = errno;
  // fclose flushes: a full disk can first show up here.
  if (fclose(f) != 0 && ok) ok = 0, saved = errno;
  if (ok && rename(tmp, path) != 0) ok = 0, saved = errno;
  if (!ok) {
    snprintf(err, errlen, "%s: write failed: %s", path, strerror(saved));
    unlink(tmp);  // leave no temporary file behind
  }
  free(tmp);
  return ok ? 0 : -1;
}

int shard_write(const char* path, const uint16_t* tokens, size_t ntokens, char* err, size_t errlen) {
  return write_shard(path, tokens, NULL, ntokens, err, errlen);
}

int shard_write32(const char* path, const uint32_t* tokens, size_t ntokens, char* err, size_t errlen) {
  return write_shard(path, NULL, tokens, ntokens, err, errlen);
}

// ---- reading and validation ------------------------------------------------------------

void token_stream_close(TokenStream* ts) {
  if (!ts) return;
  for (int i = 0; i < ts->nfiles; i++) free(ts->paths ? ts->paths[i] : NULL);
  free(ts->paths);
  free(ts->ids);
  free(ts->ntokens);
  free(ts->start);
  memset(ts, 0, sizeof *ts);
}

// fopen(path, "rb") of a regular file only: a FIFO or a device is refused, not waited on.
static FILE* open_shard(const char* path, char* err, size_t errlen) {
  int fd = file_open_regular(path, err, errlen);
  FILE* f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (fd >= 0 && !f) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    close(fd);
  }
  return f;
}

// Validates one shard; on success stores its token count in *count, its token width in *bytes
// (2 or 4) and its identity in *id.
static int check_shard(const char* path, int vocab, int64_t* count, int* bytes, FileId* id, char* err, size_t errlen) {
  FILE* f = open_shard(path, err, errlen);
  if (!f) return -1;
  int rc = -1;
  int64_t size = -1;
  if (file_identity(fileno(f), id) != 0) {
    snprintf(err, errlen, "%s: cannot read it: %s", path, strerror(errno));
    goto done;
  }
  if (fseeko(f, 0, SEEK_END) == 0) size = (int64_t)ftello(f);
  if (size < 0 || fseeko(f, 0, SEEK_SET) != 0) {
    snprintf(err, errlen, "%s: cannot determine the file size: %s", path, strerror(errno));
    goto done;
  }
  if (size < HEADER_BYTES) {
    snprintf(err, errlen,
             "%s: truncated: the file has %lld bytes, shorter than the %lld-byte shard header "
             "(expected at least %lld bytes)",
             path, (long long)size, (long long)HEADER_BYTES, (long long)HEADER_BYTES);
    goto done;
  }
  unsigned char header[SHARD_HEADER_INTS * 4];
  if (fread(header, 1, sizeof header, f) != sizeof header) {
    snprintf(err, errlen, "%s: cannot read the header", path);
    goto done;
  }
  int32_t magic = le_i32(header), version = le_i32(header + 4), n = le_i32(header + 8);
  if (magic != SHARD_MAGIC && magic != SHARD32_MAGIC) {
    snprintf(err, errlen,
             "%s: bad magic %d (expected %d, GPT-2's uint16 tokens, or %d, Llama 3's uint32 tokens); the file "
             "may not be an llm.c token shard", path, magic, SHARD_MAGIC, SHARD32_MAGIC);
    goto done;
  }
  int w = magic == SHARD_MAGIC ? 2 : 4, want_version = magic == SHARD_MAGIC ? SHARD_VERSION : SHARD32_VERSION;
  if (version != want_version) {
    snprintf(err, errlen, "%s: unsupported version %d (expected %d for magic %d)", path, version, want_version, magic);
    goto done;
  }
  if (n < 0) {
    snprintf(err, errlen, "%s: negative token count %d in the header", path, n);
    goto done;
  }
  int64_t expected = HEADER_BYTES + w * (int64_t)n;
  if (size < expected) {
    snprintf(err, errlen,
             "%s: truncated: the header says %d tokens, so the file should be %lld bytes, "
             "but it has %lld bytes",
             path, n, (long long)expected, (long long)size);
    goto done;
  }
  if (size > expected) {
    snprintf(err, errlen,
             "%s: oversized: the token count %d in the header does not match the file size "
             "(expected %lld bytes, the file has %lld bytes)",
             path, n, (long long)expected, (long long)size);
    goto done;
  }
  if (vocab > 0 || w == 4) {
    // Scan every token now: an id >= vocab would index past the embedding table later (and a
    // uint32 id past INT32_MAX fits no model's).
    unsigned char buf[IO_CHUNK * 4];
    for (int64_t i = 0; i < n; i += IO_CHUNK) {
      size_t m = (size_t)(n - i < IO_CHUNK ? n - i : IO_CHUNK);
      if (fread(buf, (size_t)w, m, f) != m) {
        snprintf(err, errlen, "%s: read failed at token %lld", path, (long long)i);
        goto done;
      }
      for (size_t k = 0; k < m; k++) {
        int64_t id = token_at(buf, k, w);
        if (id > INT32_MAX || (vocab > 0 && id >= vocab)) {
          snprintf(err, errlen,
                   "%s: token %lld has id %lld >= vocab %d; use a larger --model V "
                   "(the model's vocabulary must cover the tokenizer's)",
                   path, (long long)(i + (int64_t)k), (long long)id, vocab > 0 ? vocab : INT32_MAX);
          goto done;
        }
      }
    }
  }
  *count = n;
  *bytes = w;
  rc = 0;
done:
  fclose(f);
  return rc;
}

int token_stream_open(TokenStream* ts, const char* glob_pattern, int vocab, char* err, size_t errlen) {
  memset(ts, 0, sizeof *ts);
  glob_t g;
  // glob(3) sorts its matches by default, which gives the stream its file order.
  int grc = glob(glob_pattern, 0, NULL, &g);
  if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
    snprintf(err, errlen, "no file matched the pattern '%s' (check the path, and quote the "
             "pattern so the shell does not expand it)", glob_pattern);
    if (grc == 0) globfree(&g);
    return -1;
  }
  if (grc != 0) {
    snprintf(err, errlen, "cannot expand the pattern '%s' (glob error %d)", glob_pattern, grc);
    return -1;
  }
  int nf = (int)g.gl_pathc;
  ts->paths = calloc((size_t)nf, sizeof(char*));
  ts->ntokens = calloc((size_t)nf, sizeof(int64_t));
  ts->start = calloc((size_t)nf, sizeof(int64_t));
  ts->ids = calloc((size_t)nf, sizeof(FileId));
  if (!ts->paths || !ts->ntokens || !ts->start || !ts->ids) {
    snprintf(err, errlen, "out of memory opening '%s'", glob_pattern);
    globfree(&g);
    token_stream_close(ts);
    return -1;
  }
  for (int i = 0; i < nf; i++) {
    int64_t n = 0;
    int bytes = 0;
    ts->paths[i] = strdup(g.gl_pathv[i]);
    ts->nfiles = i + 1;  // so that close frees what was allocated so far
    if (!ts->paths[i]) {
      snprintf(err, errlen, "out of memory opening '%s'", glob_pattern);
      globfree(&g);
      token_stream_close(ts);
      return -1;
    }
    if (check_shard(ts->paths[i], vocab, &n, &bytes, &ts->ids[i], err, errlen) != 0) {
      globfree(&g);
      token_stream_close(ts);
      return -1;
    }
    if (i > 0 && bytes != ts->token_bytes) {
      snprintf(err, errlen, "%s holds %s shards, but %s holds %s: one stream is one tokenizer's shards, all of one "
               "format; give the others their own --data", glob_pattern,
               ts->token_bytes == 2 ? "GPT-2's uint16" : "Llama 3's uint32", ts->paths[i],
               bytes == 2 ? "GPT-2's uint16 tokens" : "Llama 3's uint32 tokens");
      globfree(&g);
      token_stream_close(ts);
      return -1;
    }
    ts->token_bytes = bytes;
    ts->ntokens[i] = n;
    ts->start[i] = ts->total;
    ts->total += n;
  }
  globfree(&g);
  ts->vocab = vocab;
  return 0;
}

int token_stream_read(const TokenStream* ts, int64_t pos, int64_t n, int32_t* out, char* err, size_t errlen) {
  if (pos < 0 || n < 0 || pos > ts->total || n > ts->total - pos) {
    snprintf(err, errlen, "read of tokens [%lld, %lld) is outside the stream of %lld tokens",
             (long long)pos, (long long)(pos + n), (long long)ts->total);
    return -1;
  }
  if (n == 0) return 0;
  // The last file whose start is <= pos holds pos (binary search; empty files are skipped
  // because the next file has the same start).
  int lo = 0, hi = ts->nfiles - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (ts->start[mid] <= pos) lo = mid; else hi = mid - 1;
  }
  unsigned char buf[IO_CHUNK * 4];
  const int w = ts->token_bytes;
  int64_t done = 0;
  // Files are reopened per read: a micro-batch read is rare next to the compute, and this
  // keeps the struct const and free of descriptor limits with many shards.
  for (int fi = lo; done < n && fi < ts->nfiles; fi++) {
    int64_t off = pos + done - ts->start[fi];  // token offset inside this file
    int64_t m = ts->ntokens[fi] - off;
    if (m <= 0) continue;
    if (m > n - done) m = n - done;
    FILE* f = open_shard(ts->paths[fi], err, errlen);
    if (!f) return -1;
    if (ts->ids && file_unchanged(fileno(f), &ts->ids[fi], ts->paths[fi], err, errlen)) {
      fclose(f);
      return -1;
    }
    if (fseeko(f, (off_t)(HEADER_BYTES + w * off), SEEK_SET) != 0) {
      snprintf(err, errlen, "%s: seek to token %lld failed: %s", ts->paths[fi], (long long)off, strerror(errno));
      fclose(f);
      return -1;
    }
    while (m > 0) {
      size_t c = (size_t)(m < IO_CHUNK ? m : IO_CHUNK);
      if (fread(buf, (size_t)w, c, f) != c) {
        snprintf(err, errlen, "%s: short read at token %lld (was the file changed after it was opened?)",
                 ts->paths[fi], (long long)off);
        fclose(f);
        return -1;
      }
      for (size_t k = 0; k < c; k++) {
        int64_t id = token_at(buf, k, w);
        // Checked again on every read: a shard rewritten during a run must not feed ids past
        // the embedding table (the check on open cannot see later changes).
        if (id > INT32_MAX || (ts->vocab > 0 && id >= ts->vocab)) {
          snprintf(err, errlen,
                   "%s: token %lld (byte offset %lld) has id %lld >= vocab %d; the file changed after it was "
                   "opened and checked: restore it and resume from the last checkpoint",
                   ts->paths[fi], (long long)(off + (int64_t)k), (long long)(HEADER_BYTES + w * (off + (int64_t)k)),
                   (long long)id, ts->vocab > 0 ? ts->vocab : INT32_MAX);
          fclose(f);
          return -1;
        }
        out[done + (int64_t)k] = (int32_t)id;
      }
      done += (int64_t)c, off += (int64_t)c, m -= (int64_t)c;
    }
    fclose(f);
  }
  return 0;
}

void token_stream_identity(const TokenStream* ts, char* out, size_t cap) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int i = 0; i < ts->nfiles; i++) {
    uint64_t parts[2] = {(uint64_t)ts->ids[i].size, ts->ids[i].digest};
    const unsigned char* b = (const unsigned char*)parts;
    for (size_t k = 0; k < sizeof parts; k++) h = (h ^ b[k]) * 0x100000001b3ULL;
  }
  snprintf(out, cap, "%d shards, %lld tokens, digest %016llx", ts->nfiles, (long long)ts->total, (unsigned long long)h);
}

// ---- sampler ---------------------------------------------------------------------------

int64_t sampler_windows(const TokenStream* ts, int B, int T) {
  if (B <= 0 || T <= 0) return 0;
  int64_t bt = (int64_t)B * T;
  // Windows start at multiples of B*T and need B*T+1 tokens (the last target).
  if (ts->total < bt + 1) return 0;
  return (ts->total - 1) / bt;
}

int sampler_micro_batch(const TokenStream* ts, int64_t g, int B, int T, int32_t* inputs,
                        int32_t* targets, char* err, size_t errlen) {
  int64_t nw = sampler_windows(ts, B, T);
  if (nw == 0) {
    if (B <= 0 || T <= 0) {
      snprintf(err, errlen, "invalid micro-batch shape B=%d T=%d", B, T);
    } else {
      snprintf(err, errlen,
               "the data stream has %lld tokens, shorter than one window: B*T+1 = %lld tokens "
               "are needed (B=%d, T=%d); use more data or a smaller --batch/--seq",
               (long long)ts->total, (long long)B * T + 1, B, T);
    }
    return -1;
  }
  int64_t bt = (int64_t)B * T;
  int64_t w = g % nw;
  if (w < 0) w += nw;  // keep negative g well defined too
  int64_t pos = w * bt;
  if (token_stream_read(ts, pos, bt, inputs, err, errlen) != 0) return -1;
  // targets[i] = token pos+1+i: reuse the inputs and read only the one extra token.
  memcpy(targets, inputs + 1, (size_t)(bt - 1) * sizeof(int32_t));
  return token_stream_read(ts, pos + bt, 1, targets + bt - 1, err, errlen);
}
