// make_addition.c: generates the built-in dataset, synthetic addition problems as byte tokens.
//
//   build/make_addition OUTDIR [--digits D] [--seed S] [--train-tokens N] [--val-tokens N]
//                              [--val-problems N]
//
// One problem is fixed width so that a small model learns it fast: operands zero-padded to
// D digits, the sum reversed (least significant digit first, the order a carry propagates)
// and zero-padded to D+1 digits, then a newline. D=3: 123+45=168 is "123+045=8610\n".
// A token is the ASCII byte value (vocab 256).
//
// The held-out split is a fixed function of the problem, independent of the seed: (a,b) is
// a validation problem iff splitmix64(a*10^D + b) mod 10 == 0. The seed only changes which
// problems are drawn.
//
// Files written (each atomically, temporary name then rename):
//   train_000.bin     training problems drawn uniformly, concatenated (~1.5M tokens)
//   val_000.bin       validation problems drawn uniformly (~100k tokens)
//   val_problems.txt  the first (up to) 1000 distinct problems of val_000.bin, one per line
//                     as "<prompt>\t<expected>", e.g. "123+045=\t8610"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "data/shard.h"

#define MAX_DIGITS 6
#define MAX_ATTEMPTS 1000000  // draws without finding a problem of the wanted split

// splitmix64 finalizer: a good fixed mixing function, used both as the split hash and as the
// PRNG step (state advanced by the golden-ratio increment).
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static uint64_t rng_next(uint64_t* s) { return mix64(*s += 0x9e3779b97f4a7c15ULL); }

static int64_t pow10i(int d) {
  int64_t p = 1;
  while (d-- > 0) p *= 10;
  return p;
}

static int is_val(int64_t a, int64_t b, int64_t base) {
  return mix64((uint64_t)(a * base + b) + 0x9e3779b97f4a7c15ULL) % 10 == 0;
}

// Writes the text of problem (a,b) into s (3D+4 bytes, no terminator); returns its length.
// The prompt is the first 2D+2 bytes, the expected answer the next D+1.
static int format_problem(char* s, int D, int64_t a, int64_t b) {
  char tmp[32];
  snprintf(tmp, sizeof tmp, "%0*lld+%0*lld=", D, (long long)a, D, (long long)b);
  memcpy(s, tmp, (size_t)(2 * D + 2));
  int64_t c = a + b;
  for (int i = 0; i < D + 1; i++, c /= 10) s[2 * D + 2 + i] = (char)('0' + c % 10);
  s[3 * D + 3] = '\n';
  return 3 * D + 4;
}

// Draws a problem uniformly from one split by rejection (modulo bias is ~1e-13, ignored).
static int draw(uint64_t* rng, int64_t base, int want_val, int64_t* a, int64_t* b) {
  for (int i = 0; i < MAX_ATTEMPTS; i++) {
    *a = (int64_t)(rng_next(rng) % (uint64_t)base);
    *b = (int64_t)(rng_next(rng) % (uint64_t)base);
    if (is_val(*a, *b, base) == want_val) return 0;
  }
  return -1;
}

// Fills a token buffer with at least `want` tokens of problems from one split.
static uint16_t* gen_split(uint64_t* rng, int D, int want_val, int64_t want, size_t* ntok,
                           int64_t** keys, size_t* nkeys) {
  int64_t base = pow10i(D);
  int len = 3 * D + 4;
  size_t np = (size_t)((want + len - 1) / len);
  if (np == 0) np = 1;
  uint16_t* t = malloc(np * (size_t)len * sizeof(uint16_t));
  if (keys) *keys = malloc(np * sizeof(int64_t));
  if (!t || (keys && !*keys)) {
    fprintf(stderr, "make_addition: out of memory\n");
    exit(1);
  }
  char s[64];
  for (size_t p = 0; p < np; p++) {
    int64_t a, b;
    if (draw(rng, base, want_val, &a, &b) != 0) {
      fprintf(stderr, "make_addition: no %s problems with --digits %d\n", want_val ? "validation" : "training", D);
      exit(1);
    }
    format_problem(s, D, a, b);
    for (int i = 0; i < len; i++) t[p * (size_t)len + (size_t)i] = (unsigned char)s[i];
    if (keys) (*keys)[p] = a * base + b;
  }
  *ntok = np * (size_t)len;
  if (nkeys) *nkeys = np;
  return t;
}

static int mkdir_p(const char* dir) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char* p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return (mkdir(buf, 0777) != 0 && errno != EEXIST) ? -1 : 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: make_addition OUTDIR [--digits D (1..%d, default 3)] [--seed S] "
          "[--train-tokens N (default 1500000)] [--val-tokens N (default 100000)] "
          "[--val-problems N (default 1000)]\n", MAX_DIGITS);
  exit(2);
}

int main(int argc, char** argv) {
  const char* outdir = NULL;
  int D = 3;
  uint64_t seed = 1337;
  long long train_tokens = 1500000, val_tokens = 100000, val_problems = 1000;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (a[0] == '-' && a[1] == '-') {
      if (i + 1 >= argc) usage();
      char* end;
      errno = 0;
      long long v = strtoll(argv[++i], &end, 10);
      if (*end || errno || v < 0) usage();
      if (!strcmp(a, "--digits")) D = (int)v;
      else if (!strcmp(a, "--seed")) seed = (uint64_t)v;
      else if (!strcmp(a, "--train-tokens")) train_tokens = v;
      else if (!strcmp(a, "--val-tokens")) val_tokens = v;
      else if (!strcmp(a, "--val-problems")) val_problems = v;
      else usage();
    } else if (!outdir) {
      outdir = a;
    } else {
      usage();
    }
  }
  if (!outdir || D < 1 || D > MAX_DIGITS || train_tokens < 1 || val_tokens < 1) usage();
  if (mkdir_p(outdir) != 0) {
    fprintf(stderr, "make_addition: cannot create %s: %s\n", outdir, strerror(errno));
    return 1;
  }

  // Train and validation draw from separate PRNG streams, so changing --train-tokens does
  // not change the validation set.
  uint64_t rng_train = mix64(seed * 2 + 1), rng_val = mix64(seed * 2 + 2);
  char path[4200], err[512];
  size_t ntrain, nval, nkeys;
  int64_t* keys;
  uint16_t* train = gen_split(&rng_train, D, 0, train_tokens, &ntrain, NULL, NULL);
  uint16_t* val = gen_split(&rng_val, D, 1, val_tokens, &nval, &keys, &nkeys);

  snprintf(path, sizeof path, "%s/train_000.bin", outdir);
  if (shard_write(path, train, ntrain, err, sizeof err) != 0) {
    fprintf(stderr, "make_addition: %s\n", err);
    return 1;
  }
  printf("wrote %s: %zu tokens\n", path, ntrain);
  snprintf(path, sizeof path, "%s/val_000.bin", outdir);
  if (shard_write(path, val, nval, err, sizeof err) != 0) {
    fprintf(stderr, "make_addition: %s\n", err);
    return 1;
  }
  printf("wrote %s: %zu tokens\n", path, nval);

  // The first distinct validation problems, in val_000.bin order. An open-addressing set
  // of keys (a*10^D+b, +1 so that 0 marks an empty slot) removes repeats.
  size_t cap = 1;
  while (cap < 2 * (size_t)val_problems + 2) cap <<= 1;
  int64_t* set = calloc(cap, sizeof(int64_t));
  char tmp[4300];
  snprintf(path, sizeof path, "%s/val_problems.txt", outdir);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE* f = fopen(tmp, "w");
  if (!set || !f) {
    fprintf(stderr, "make_addition: cannot create %s: %s\n", tmp, strerror(errno));
    return 1;
  }
  int64_t base = pow10i(D);
  long long written = 0;
  for (size_t p = 0; p < nkeys && written < val_problems; p++) {
    size_t h = (size_t)(mix64((uint64_t)keys[p]) & (cap - 1));
    while (set[h] && set[h] != keys[p] + 1) h = (h + 1) & (cap - 1);
    if (set[h]) continue;  // already listed
    set[h] = keys[p] + 1;
    char s[64];
    format_problem(s, D, keys[p] / base, keys[p] % base);
    fprintf(f, "%.*s\t%.*s\n", 2 * D + 2, s, D + 1, s + 2 * D + 2);
    written++;
  }
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    fprintf(stderr, "make_addition: writing %s failed: %s\n", path, strerror(errno));
    unlink(tmp);
    return 1;
  }
  printf("wrote %s: %lld problems\n", path, written);
  free(set), free(keys), free(train), free(val);
  return 0;
}
