// checkpoint_format.c: meta.json, the completion marker and the chunk checksums (see
// checkpoint_format.h). Every reader here validates: a field that is missing, not a whole
// number, out of range or inconsistent is refused with the file, the field and the reason.
#include "fsdp/checkpoint_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsdp/dist.h"

const char* const CKPT_ARRAY_NAMES[CKPT_ARRAYS] = {"params.bin", "adam_m.bin", "adam_v.bin"};

__attribute__((format(printf, 3, 4))) static int fail(char* err, size_t errlen, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

// ---- checksums ------------------------------------------------------------------------------

static uint64_t mix64(uint64_t z) {  // splitmix64's finalizer: a bijection of 64 bits
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void ckpt_sums_init(CkptSums* s, int64_t elements) {
  s->elements = elements;
  s->nchunks = (elements + CKPT_CHUNK - 1) / CKPT_CHUNK;
  for (int k = 0; k < CKPT_ARRAYS; k++)
    s->sum[k] = xcalloc(s->nchunks ? s->nchunks : 1, sizeof(uint64_t), "checkpoint checksums");
}

void ckpt_sums_free(CkptSums* s) {
  for (int k = 0; k < CKPT_ARRAYS; k++) free(s->sum[k]);
  memset(s, 0, sizeof *s);
}

void ckpt_sums_add(CkptSums* s, int k, int64_t global, const float* values, int64_t n) {
  int64_t i = 0;
  while (i < n) {  // one chunk at a time
    int64_t e0 = global + i, c = e0 / CKPT_CHUNK, end = (c + 1) * CKPT_CHUNK - global;
    if (end > n) end = n;
    uint64_t acc = 0;  // unsigned: wraps mod 2^64, so the order of the additions never matters
#pragma omp parallel for reduction(+ : acc) schedule(static)
    for (int64_t j = i; j < end; j++) {
      uint32_t bits;
      memcpy(&bits, &values[j], 4);
      acc += mix64(((uint64_t)(global + j) << 32) ^ bits);
    }
    s->sum[k][c] += acc;
    i = end;
  }
}

void ckpt_sums_combine(CkptSums* s, Comm* world) {
  // Summed as 32-bit halves in int64 words: no signed overflow for any number of ranks below
  // 2^31, and (sum of highs) << 32 + (sum of lows) is the sum mod 2^64.
  int64_t n = s->nchunks * CKPT_ARRAYS;
  int64_t* halves = xmalloc((size_t)(2 * n > 0 ? 2 * n : 1) * sizeof(int64_t), "checkpoint checksums");
  for (int k = 0; k < CKPT_ARRAYS; k++)
    for (int64_t c = 0; c < s->nchunks; c++) {
      halves[2 * (k * s->nchunks + c)] = (int64_t)(s->sum[k][c] & 0xffffffffu);
      halves[2 * (k * s->nchunks + c) + 1] = (int64_t)(s->sum[k][c] >> 32);
    }
  comm_all_reduce(world, halves, (size_t)(2 * n), DT_I64);
  for (int k = 0; k < CKPT_ARRAYS; k++)
    for (int64_t c = 0; c < s->nchunks; c++)
      s->sum[k][c] = (uint64_t)halves[2 * (k * s->nchunks + c)] + ((uint64_t)halves[2 * (k * s->nchunks + c) + 1] << 32);
  free(halves);
}

// ---- small files ----------------------------------------------------------------------------

int ckpt_read_text(const char* path, char* buf, size_t cap) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  int bad = ferror(f) || n == cap - 1;  // too long for any file we write
  fclose(f);
  buf[n] = 0;
  if (bad) {
    errno = EFBIG;
    return -1;
  }
  return 0;
}

// Writes text to path through path.tmp, fsynced, then renamed: a reader sees all or nothing.
static int write_file_atomic(const char* path, const char* text, char* err, size_t errlen) {
  char tmp[4400];
  snprintf(tmp, sizeof tmp, "%s.part", path);
  int fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) return fail(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
  size_t len = strlen(text), done = 0;
  while (done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w <= 0) {
      int e = w < 0 ? errno : ENOSPC;
      close(fd);
      unlink(tmp);
      return fail(err, errlen, "writing %s failed: %s", tmp, strerror(e));
    }
    done += (size_t)w;
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    int e = errno;
    unlink(tmp);
    return fail(err, errlen, "writing %s failed: %s", tmp, strerror(e));
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return fail(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(e));
  }
  return 0;
}

// The text after "key": in our own JSON, or NULL.
static const char* json_value(const char* text, const char* key) {
  char pat[96];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char* p = strstr(text, pat);
  if (!p) return NULL;
  p += strlen(pat);
  while (*p == ' ') p++;
  return p;
}

int ckpt_json_int(const char* text, const char* file, const char* key, long long lo, long long hi,
                  long long* out, char* err, size_t errlen) {
  const char* v = json_value(text, key);
  if (!v) return fail(err, errlen, "%s has no \"%s\" field", file, key);
  const char* p = v;
  if (*p == '-') p++;
  int digits = 0;
  while (p[digits] >= '0' && p[digits] <= '9') digits++;
  const char* end = p + digits;
  char shown[32];
  snprintf(shown, sizeof shown, "%.*s", (int)strcspn(v, ",}\n"), v);
  if (!digits || (*end != ',' && *end != '}' && *end != '\n' && *end != ' '))
    return fail(err, errlen, "%s: \"%s\" is %s, not a whole number", file, key, shown);
  if (digits > 18) return fail(err, errlen, "%s: \"%s\" is %s, out of range [%lld, %lld]", file, key, shown, lo, hi);
  long long x = strtoll(v, NULL, 10);
  if (x < lo || x > hi) return fail(err, errlen, "%s: \"%s\" is %lld, out of range [%lld, %lld]", file, key, x, lo, hi);
  *out = x;
  return 0;
}

// A quoted string field into out; -1 when missing, unterminated or too long.
static int json_string(const char* text, const char* file, const char* key, char* out, size_t cap, char* err, size_t errlen) {
  const char* v = json_value(text, key);
  if (!v || *v != '"') return fail(err, errlen, "%s has no \"%s\" string", file, key);
  const char* close = strchr(v + 1, '"');
  if (!close || (size_t)(close - v - 1) >= cap) return fail(err, errlen, "%s: \"%s\" is unterminated or too long", file, key);
  memcpy(out, v + 1, (size_t)(close - v - 1));
  out[close - v - 1] = 0;
  return 0;
}

// ---- meta.json ------------------------------------------------------------------------------

int ckpt_write_meta(const FSDP* fs, const char* dir, const char* model, int step, uint64_t seed,
                    const LossScaler* scaler, int64_t elements, char* err, size_t errlen) {
  size_t cap = 4096, len = 0;
  for (int u = 0; u < fs->nunits; u++) cap += 64 + (size_t)fs->units[u].nparams * (FSDP_NAME_LEN + 32);
  char* text = xmalloc(cap, "checkpoint meta.json");
  len += (size_t)snprintf(text + len, cap - len,
                          "{\"format\": \"%s\", \"model\": \"%s\", \"step\": %d, \"seed\": %llu, "
                          "\"elements\": %lld, \"saved_by_world_size\": %d,",
                          CKPT_FORMAT, model, step, (unsigned long long)seed, (long long)elements, fs->world_size);
  // A dynamic scale is whole (a power of two from 1 to 2^24), so it is written as an integer.
  if (scaler && scaler->dynamic)
    len += (size_t)snprintf(text + len, cap - len, "\n \"loss_scale\": %lld, \"loss_scale_good\": %d,",
                            (long long)scaler->scale, scaler->good);
  len += (size_t)snprintf(text + len, cap - len, "\n \"units\": [");
  for (int u = 0; u < fs->nunits; u++) {
    const Unit* U = &fs->units[u];
    len += (size_t)snprintf(text + len, cap - len, "%s\n  {\"name\": \"%s\", \"params\": [", u ? "," : "", U->name);
    for (int i = 0; i < U->nparams; i++)
      len += (size_t)snprintf(text + len, cap - len, "%s[\"%s\", %lld]", i ? ", " : "", U->params[i].name,
                              (long long)U->params[i].live);
    len += (size_t)snprintf(text + len, cap - len, "]}");
  }
  snprintf(text + len, cap - len, "\n]}\n");
  char path[4300];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  int rc = write_file_atomic(path, text, err, errlen);
  free(text);
  return rc;
}

int ckpt_read_meta(const FSDP* fs, const char* dir, const char* model, CkptMeta* m, char* err, size_t errlen) {
  char path[4300];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  static char text[1 << 20];
  if (ckpt_read_text(path, text, sizeof text) != 0)
    return fail(err, errlen, "%s is not readable (%s); is %s a checkpoint written by --save?", path, strerror(errno), dir);
  char format[64];
  if (json_string(text, path, "format", format, sizeof format, err, errlen)) return -1;
  if (strcmp(format, CKPT_FORMAT))
    return fail(err, errlen, "%s: format \"%s\" is not \"%s\"%s", path, format, CKPT_FORMAT,
                strcmp(format, "fsdp.c checkpoint 1") ? "" : " (an older checkpoint without checksums: it cannot be verified)");
  long long step, seed, elements, world;
  if (json_string(text, path, "model", m->model, sizeof m->model, err, errlen) ||
      ckpt_json_int(text, path, "step", 0, CKPT_MAX_STEP, &step, err, errlen) ||
      ckpt_json_int(text, path, "seed", 0, 0x7fffffffffffffffLL, &seed, err, errlen) ||
      ckpt_json_int(text, path, "elements", 0, 0x7fffffffffffffffLL, &elements, err, errlen) ||
      ckpt_json_int(text, path, "saved_by_world_size", 1, 1 << 24, &world, err, errlen))
    return -1;
  m->step = (int)step, m->seed = (uint64_t)seed, m->elements = elements, m->saved_by_world_size = (int)world;
  // The scaler's state is there only when the saving run scaled dynamically.
  memset(&m->scaler, 0, sizeof m->scaler);
  if (strstr(text, "\"loss_scale\"")) {
    long long scale, good;
    if (ckpt_json_int(text, path, "loss_scale", (long long)LOSS_SCALE_MIN, (long long)LOSS_SCALE_MAX, &scale, err, errlen) ||
        ckpt_json_int(text, path, "loss_scale_good", 0, 1 << 30, &good, err, errlen))
      return -1;
    if (scale & (scale - 1))
      return fail(err, errlen, "%s: \"loss_scale\" is %lld, not a power of two (a dynamic scale only halves and doubles)",
                  path, scale);
    m->scaler = (LossScaler){.scale = (double)scale, .dynamic = 1, .good = (int)good};
  }
  if (strcmp(m->model, model))
    return fail(err, errlen, "%s holds model '%s' but this run is --model %s; resume with the same model", dir, m->model, model);
  // Every parameter's name and size must match this run's table, in order.
  const char* q = strstr(text, "\"units\"");
  int64_t total = 0;
  for (int u = 0; u < fs->nunits; u++)
    for (int i = 0; i < fs->units[u].nparams; i++) {
      const ParamInfo* p = &fs->units[u].params[i];
      total += p->live;
      char name[FSDP_NAME_LEN + 8];
      snprintf(name, sizeof name, "[\"%s\", ", p->name);
      q = q ? strstr(q, name) : NULL;
      long long live = q ? atoll(q + strlen(name)) : -1;
      if (live != p->live)
        return fail(err, errlen, "%s does not match this model's parameter table at %s.%s (size %lld, checkpoint %lld)",
                    path, fs->units[u].name, p->name, (long long)p->live, live);
    }
  if (elements != total)
    return fail(err, errlen, "%s: \"elements\" is %lld, this model has %lld", path, elements, (long long)total);
  return 0;
}

// ---- the completion marker ------------------------------------------------------------------

int ckpt_write_marker(const char* dir, int step, const CkptSums* s, char* err, size_t errlen) {
  size_t cap = 512 + (size_t)s->nchunks * CKPT_ARRAYS * 24, len = 0;
  char* text = xmalloc(cap, "checkpoint marker");
  len += (size_t)snprintf(text + len, cap - len, "{\"format\": \"%s\", \"step\": %d, \"elements\": %lld, \"chunk_elements\": %lld",
                          CKPT_FORMAT, step, (long long)s->elements, (long long)CKPT_CHUNK);
  for (int k = 0; k < CKPT_ARRAYS; k++) {
    len += (size_t)snprintf(text + len, cap - len, ",\n \"%s\": [", CKPT_ARRAY_NAMES[k]);
    for (int64_t c = 0; c < s->nchunks; c++)
      len += (size_t)snprintf(text + len, cap - len, "%s\"%016llx\"", c ? ", " : "", (unsigned long long)s->sum[k][c]);
    len += (size_t)snprintf(text + len, cap - len, "]");
  }
  snprintf(text + len, cap - len, "}\n");
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", dir, CKPT_MARKER);
  int rc = write_file_atomic(path, text, err, errlen);
  free(text);
  return rc;
}

int ckpt_read_marker(const char* dir, int* step, int64_t elements, CkptSums* sums, char* err, size_t errlen) {
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", dir, CKPT_MARKER);
  size_t cap = 4096 + (size_t)((elements + CKPT_CHUNK - 1) / CKPT_CHUNK) * CKPT_ARRAYS * 24;
  if (!sums) cap = 1 << 20;
  char* text = xmalloc(cap, "checkpoint marker");
  int rc = -1;
  long long st, el, chunk;
  char format[64];
  if (ckpt_read_text(path, text, cap) != 0) {
    fail(err, errlen, "%s has no completion marker %s (%s): the save that wrote it did not finish", dir, CKPT_MARKER,
         strerror(errno));
    goto done;
  }
  if (json_string(text, path, "format", format, sizeof format, err, errlen)) goto done;
  if (strcmp(format, CKPT_FORMAT)) {
    fail(err, errlen, "%s: format \"%s\" is not \"%s\"", path, format, CKPT_FORMAT);
    goto done;
  }
  if (ckpt_json_int(text, path, "step", 0, CKPT_MAX_STEP, &st, err, errlen)) goto done;
  *step = (int)st;
  if (!sums) {
    rc = 0;
    goto done;
  }
  if (ckpt_json_int(text, path, "elements", 0, 0x7fffffffffffffffLL, &el, err, errlen) ||
      ckpt_json_int(text, path, "chunk_elements", 1, 0x7fffffffffffffffLL, &chunk, err, errlen))
    goto done;
  if (el != elements || chunk != CKPT_CHUNK) {
    fail(err, errlen, "%s describes %lld elements in chunks of %lld; meta.json and this version need %lld in chunks of %lld",
         path, el, chunk, (long long)elements, (long long)CKPT_CHUNK);
    goto done;
  }
  ckpt_sums_init(sums, elements);
  for (int k = 0; k < CKPT_ARRAYS; k++) {
    const char* p = json_value(text, CKPT_ARRAY_NAMES[k]);
    if (!p || *p != '[') {
      fail(err, errlen, "%s has no checksum list for %s", path, CKPT_ARRAY_NAMES[k]);
      goto done;
    }
    p++;
    for (int64_t c = 0; c < sums->nchunks; c++) {
      unsigned long long x;
      int used = 0;
      while (*p == ' ' || *p == ',') p++;
      if (sscanf(p, "\"%16llx\"%n", &x, &used) != 1 || used != 18) {
        fail(err, errlen, "%s: the checksum list of %s is malformed or shorter than its %lld chunks", path,
             CKPT_ARRAY_NAMES[k], (long long)sums->nchunks);
        goto done;
      }
      sums->sum[k][c] = x;
      p += used;
    }
    while (*p == ' ') p++;
    if (*p != ']') {
      fail(err, errlen, "%s: the checksum list of %s is longer than its %lld chunks", path, CKPT_ARRAY_NAMES[k],
           (long long)sums->nchunks);
      goto done;
    }
  }
  rc = 0;
done:
  free(text);
  return rc;
}
