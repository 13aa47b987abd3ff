// tokenizer.c: the decode table of tokenizer.h.
#include "data/tokenizer.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infra/files.h"

#define TOKENIZER_MAGIC 20240328u

int tokenizer_load(const char* path, Tokenizer* t, char* err, size_t errlen) {
  memset(t, 0, sizeof *t);
  int fd = file_open_regular(path, err, errlen);
  FILE* f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    if (fd >= 0) close(fd), snprintf(err, errlen, "cannot open tokenizer %s", path);
    return -1;
  }
  uint32_t h[256];
  if (fread(h, sizeof(uint32_t), 256, f) != 256 || h[0] != TOKENIZER_MAGIC || (h[1] != 1 && h[1] != 2) ||
      h[2] < 1 || h[2] > (1u << 20)) {
    fclose(f);
    return snprintf(err, errlen, "%s is not a tokenizer file (magic %u, versions 1 and 2, 1 to %u tokens)", path,
                    TOKENIZER_MAGIC, 1u << 20), -1;
  }
  t->vocab = (int)h[2];
  // Version 1 (GPT-2's only) has no end-of-text field: GPT-2's is 50256.
  uint32_t eot = h[1] == 2 ? h[3] : 50256;
  if (eot >= h[2]) {
    fclose(f);
    return snprintf(err, errlen, "%s: its end-of-text id %u is not one of its %u tokens", path, eot, h[2]), -1;
  }
  t->eot = (int)eot;
  t->piece = calloc((size_t)t->vocab, sizeof(char*));
  for (int i = 0; t->piece && i < t->vocab; i++) {
    unsigned char len;
    if (fread(&len, 1, 1, f) != 1 || !(t->piece[i] = malloc(len + 1u)) || fread(t->piece[i], 1, len, f) != len) {
      fclose(f);
      tokenizer_free(t);
      return snprintf(err, errlen, "%s: truncated at token %d", path, i), -1;
    }
    t->piece[i][len] = 0;
  }
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (!t->piece) return snprintf(err, errlen, "out of memory reading %s", path), -1;
  if (extra) {
    tokenizer_free(t);
    return snprintf(err, errlen, "%s: bytes after its %d tokens (a header that does not describe this file)", path, t->vocab), -1;
  }
  return 0;
}

void tokenizer_dir_of(const char* shard_glob, char* dir, size_t len) {
  const char* slash = shard_glob ? strrchr(shard_glob, '/') : NULL;
  if (slash == shard_glob) snprintf(dir, len, "/");
  else if (slash) snprintf(dir, len, "%.*s", (int)(slash - shard_glob), shard_glob);
  else snprintf(dir, len, ".");
}

int tokenizer_beside(const char* shard_glob, Tokenizer* t) {
  char dir[4100], path[4200];
  tokenizer_dir_of(shard_glob, dir, sizeof dir);
  snprintf(path, sizeof path, "%s/tokenizer.bin", dir);
  char err[512];
  return tokenizer_load(path, t, err, sizeof err);
}

void tokenizer_print(const Tokenizer* t, int id, FILE* f) {
  if (!t || !t->piece || id < 0 || id >= t->vocab) {
    fprintf(f, "<%d>", id);
    return;
  }
  const unsigned char* p = (const unsigned char*)t->piece[id];
  // A lone control byte is left out; bytes of UTF-8 sequences split over tokens are written
  // as they come, so the terminal joins them.
  if (p[0] && !p[1] && p[0] < 0x80 && !(isprint(p[0]) || isspace(p[0]))) return;
  fputs(t->piece[id], f);
}

void tokenizer_free(Tokenizer* t) {
  for (int i = 0; t->piece && i < t->vocab; i++) free(t->piece[i]);
  free(t->piece);
  t->piece = NULL;
}
