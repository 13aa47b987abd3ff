// tensor_file.c: the tables of tensors in llm.c checkpoints and safetensors files.
//
// A table says where each tensor's bytes are; weights/load.c then reads only the ranges a
// rank's shards need. Every claim a header makes is checked against the file before anything
// is read: a header that lies about its offsets, or a file cut short, is refused here.
//
// safetensors (huggingface/safetensors, "format"): 8 bytes little-endian header length N, N
// bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data; offsets are relative to the data's start, and the tensors tile it exactly.
// llm.c (train_gpt2.py write_model): 256 int32 header (magic 20240326, version 3 = fp32 or 5 =
// bf16, maxT, V, L, H, C, Vp), then wte [Vp, C], wpe [maxT, C], the per-layer tensors stacked
// over layers (ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw,
// fcprojb), then lnfw, lnfb.
#include "weights/tensor_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsdp/dist.h"

#define LLMC_MAGIC 20240326
#define MAX_HEADER_BYTES (100 << 20)

__attribute__((format(printf, 3, 4))) static int fail(char* err, size_t errlen, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

int weight_dtype_size(WeightDType t) { return t == WT_F32 ? 4 : 2; }

static int64_t file_size(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static int read_exact(const char* path, void* buf, size_t n, off_t at) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t got = pread(fd, buf, n, at);
  close(fd);
  return got == (ssize_t)n ? 0 : -1;
}

static FileTensor* add_tensor(TensorFile* tf, const char* name) {
  tf->tensors = realloc(tf->tensors, (size_t)(tf->ntensors + 1) * sizeof(FileTensor));
  if (!tf->tensors) fatal("out of memory for the tensor table of %s", tf->path);
  FileTensor* t = &tf->tensors[tf->ntensors++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  return t;
}

void tensor_file_close(TensorFile* tf) {
  free(tf->tensors);
  tf->tensors = NULL;
  tf->ntensors = 0;
}

FileTensor* tensor_file_find(TensorFile* tf, const char* name) {
  for (int i = 0; i < tf->ntensors; i++)
    if (!strcmp(tf->tensors[i].name, name)) return &tf->tensors[i];
  return NULL;
}

// ---- llm.c ---------------------------------------------------------------------------

int tensor_file_open_llmc(const char* path, TensorFile* tf, char* err, size_t errlen) {
  memset(tf, 0, sizeof *tf);
  snprintf(tf->path, sizeof tf->path, "%s", path);
  tf->format = FMT_LLMC;
  tf->size = file_size(path);
  int32_t h[256];
  if (tf->size < (int64_t)sizeof h || read_exact(path, h, sizeof h, 0))
    return fail(err, errlen, "%s: shorter than the 1024-byte header of an llm.c checkpoint", path);
  if (h[0] != LLMC_MAGIC)
    return fail(err, errlen, "%s: bad magic %d (an llm.c GPT-2 checkpoint starts with %d)", path, h[0], LLMC_MAGIC);
  if (h[1] != 3 && h[1] != 5)
    return fail(err, errlen, "%s: llm.c checkpoint version %d; versions 3 (fp32) and 5 (bf16) are read", path, h[1]);
  int64_t T = h[2], V = h[3], L = h[4], H = h[5], C = h[6], Vp = h[7];
  if (T < 1 || V < 1 || L < 1 || H < 1 || C < 1 || Vp < V || C % H)
    return fail(err, errlen, "%s: implausible llm.c header (maxT %lld, V %lld, L %lld, H %lld, C %lld, Vp %lld)", path,
                (long long)T, (long long)V, (long long)L, (long long)H, (long long)C, (long long)Vp);
  WeightDType dt = h[1] == 3 ? WT_F32 : WT_BF16;
  int es = weight_dtype_size(dt);
  int64_t at = sizeof h;
  // Tensors as llm.c stacks them; per-layer ones get one table entry per layer ("qkvw.3").
  // wte's entry covers its V real rows; the padding rows up to Vp are skipped.
  struct { const char* name; int64_t rows, cols; int per_layer; } kinds[] = {
      {"wte", Vp, C, 0},          {"wpe", T, C, 0},        {"ln1w", C, 1, 1},  {"ln1b", C, 1, 1},
      {"qkvw", 3 * C, C, 1},      {"qkvb", 3 * C, 1, 1},   {"attprojw", C, C, 1}, {"attprojb", C, 1, 1},
      {"ln2w", C, 1, 1},          {"ln2b", C, 1, 1},       {"fcw", 4 * C, C, 1}, {"fcb", 4 * C, 1, 1},
      {"fcprojw", C, 4 * C, 1},   {"fcprojb", C, 1, 1},    {"lnfw", C, 1, 0},  {"lnfb", C, 1, 0},
  };
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    for (int64_t l = 0; l < (kinds[k].per_layer ? L : 1); l++) {
      char name[64];
      if (kinds[k].per_layer) snprintf(name, sizeof name, "%s.%lld", kinds[k].name, (long long)l);
      else snprintf(name, sizeof name, "%s", kinds[k].name);
      FileTensor* t = add_tensor(tf, name);
      t->dtype = dt;
      int64_t rows = k == 0 ? V : kinds[k].rows;
      t->ndim = kinds[k].cols == 1 ? 1 : 2;
      t->shape[0] = rows;
      t->shape[1] = kinds[k].cols;
      t->start = at;
      t->bytes = rows * kinds[k].cols * es;
      at += kinds[k].rows * kinds[k].cols * es;
      if (t->start + t->bytes > tf->size) {
        tensor_file_close(tf);
        return fail(err, errlen, "%s: tensor %s ends at byte %lld but the file has %lld bytes (truncated)", path, name,
                    (long long)(t->start + t->bytes), (long long)tf->size);
      }
    }
  }
  if (at != tf->size) {
    tensor_file_close(tf);
    return fail(err, errlen, "%s: %lld bytes after the last tensor (lnfb); the header (L %lld, C %lld, Vp %lld) does not "
                "describe this file", path, (long long)(tf->size - at), (long long)L, (long long)C, (long long)Vp);
  }
  return 0;
}

// ---- safetensors: a JSON reader for the header (objects, arrays, strings, integers) -------

typedef struct {
  const char *s, *end;
} Json;

static void ws(Json* j) {
  while (j->s < j->end && (*j->s == ' ' || *j->s == '\n' || *j->s == '\r' || *j->s == '\t')) j->s++;
}
static int expect(Json* j, char c) {
  ws(j);
  if (j->s < j->end && *j->s == c) {
    j->s++;
    return 0;
  }
  return -1;
}
static int parse_string(Json* j, char* out, size_t cap) {
  if (expect(j, '"')) return -1;
  size_t n = 0;
  while (j->s < j->end && *j->s != '"') {
    char c = *j->s++;
    if (c == '\\') {
      if (j->s >= j->end) return -1;
      c = *j->s++;
      if (c == 'u') {  // names are ASCII in practice; keep the escape's digits out of the way
        if (j->end - j->s < 4) return -1;
        j->s += 4;
        c = '?';
      } else if (c == 'n') c = '\n';
      else if (c == 't') c = '\t';
    }
    if (n + 1 >= cap) return -1;
    out[n++] = c;
  }
  if (j->s >= j->end) return -1;
  j->s++;
  out[n] = 0;
  return 0;
}
static int parse_int(Json* j, int64_t* v) {
  ws(j);
  char* e;
  errno = 0;
  long long x = strtoll(j->s, &e, 10);
  if (e == j->s || e > j->end || errno) return -1;
  j->s = e;
  *v = x;
  return 0;
}
static int skip_value(Json* j, int depth) {
  ws(j);
  if (j->s >= j->end || depth > 32) return -1;
  char c = *j->s;
  if (c == '"') {
    char tmp[4096];
    return parse_string(j, tmp, sizeof tmp);
  }
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    j->s++;
    ws(j);
    if (j->s < j->end && *j->s == close) return j->s++, 0;
    for (;;) {
      if (c == '{') {
        char key[4096];
        if (parse_string(j, key, sizeof key) || expect(j, ':')) return -1;
      }
      if (skip_value(j, depth + 1)) return -1;
      ws(j);
      if (j->s < j->end && *j->s == ',') j->s++;
      else return expect(j, close);
    }
  }
  while (j->s < j->end && *j->s != ',' && *j->s != '}' && *j->s != ']') j->s++;  // number, true, null
  return 0;
}
static int parse_int_array(Json* j, int64_t* v, int cap, int* n) {
  if (expect(j, '[')) return -1;
  *n = 0;
  ws(j);
  if (j->s < j->end && *j->s == ']') return j->s++, 0;
  for (;;) {
    int64_t x;
    if (*n >= cap || parse_int(j, &x)) return -1;
    v[(*n)++] = x;
    ws(j);
    if (j->s < j->end && *j->s == ',') j->s++;
    else return expect(j, ']');
  }
}

// One tensor's entry: {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}.
static int parse_entry(Json* j, FileTensor* t, int64_t off[2], char* dtype, size_t dlen) {
  int have = 0, n;
  if (expect(j, '{')) return -1;
  for (;;) {
    char key[64];
    if (parse_string(j, key, sizeof key) || expect(j, ':')) return -1;
    if (!strcmp(key, "dtype")) {
      if (parse_string(j, dtype, dlen)) return -1;
      have |= 1;
    } else if (!strcmp(key, "shape")) {
      if (parse_int_array(j, t->shape, 4, &t->ndim)) return -1;
      have |= 2;
    } else if (!strcmp(key, "data_offsets")) {
      if (parse_int_array(j, off, 2, &n) || n != 2) return -1;
      have |= 4;
    } else if (skip_value(j, 1)) {
      return -1;
    }
    ws(j);
    if (j->s < j->end && *j->s == ',') j->s++;
    else break;
  }
  return expect(j, '}') || have != 7 ? -1 : 0;
}

static int by_start(const void* a, const void* b) {
  const FileTensor *x = *(FileTensor* const*)a, *y = *(FileTensor* const*)b;
  return x->start < y->start ? -1 : x->start > y->start;
}

int tensor_file_open_safetensors(const char* path, WeightsFormat format, TensorFile* tf, char* err, size_t errlen) {
  memset(tf, 0, sizeof *tf);
  snprintf(tf->path, sizeof tf->path, "%s", path);
  tf->format = format;
  tf->size = file_size(path);
  uint64_t hlen = 0;
  if (tf->size < 8 || read_exact(path, &hlen, 8, 0))
    return fail(err, errlen, "%s: cannot read the 8-byte header length of a safetensors file", path);
  if (hlen < 2 || hlen > MAX_HEADER_BYTES || (int64_t)(8 + hlen) > tf->size)
    return fail(err, errlen, "%s: header length %llu does not fit the file (%lld bytes): not a safetensors file, or "
                "truncated", path, (unsigned long long)hlen, (long long)tf->size);
  char* text = xmalloc(hlen + 1, "safetensors header");
  text[hlen] = 0;  // the number reader stops here at the latest
  if (read_exact(path, text, hlen, 8)) {
    free(text);
    return fail(err, errlen, "%s: cannot read its %llu-byte header", path, (unsigned long long)hlen);
  }
  int64_t data_start = 8 + (int64_t)hlen, data_bytes = tf->size - data_start;
  Json j = {text, text + hlen};
  int rc = 0;
  char name[TENSOR_NAME_LEN + 64];
  if (expect(&j, '{')) {
    rc = fail(err, errlen, "%s: the header is not a JSON object (wrong magic: not a safetensors file)", path);
    goto done;
  }
  ws(&j);
  if (j.s < j.end && *j.s == '}') j.s++;
  else
    for (;;) {
      if (parse_string(&j, name, sizeof name) || strlen(name) >= TENSOR_NAME_LEN || expect(&j, ':')) {
        rc = fail(err, errlen, "%s: malformed header near byte %lld", path, (long long)(j.s - text + 8));
        goto done;
      }
      if (!strcmp(name, "__metadata__")) {
        if (skip_value(&j, 0)) {
          rc = fail(err, errlen, "%s: malformed __metadata__ in the header", path);
          goto done;
        }
      } else {
        FileTensor* t = add_tensor(tf, name);
        int64_t off[2];
        char dtype[16];
        if (parse_entry(&j, t, off, dtype, sizeof dtype)) {
          rc = fail(err, errlen, "%s: tensor %s: malformed entry (needs dtype, shape, data_offsets)", path, name);
          goto done;
        }
        if (!strcmp(dtype, "F32")) t->dtype = WT_F32;
        else if (!strcmp(dtype, "BF16")) t->dtype = WT_BF16;
        else if (!strcmp(dtype, "F16")) t->dtype = WT_F16;
        else {
          rc = fail(err, errlen, "%s: tensor %s has dtype %s; F32, BF16 and F16 are read", path, name, dtype);
          goto done;
        }
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
          if (t->shape[d] < 0 || t->shape[d] > ((int64_t)1 << 40)) numel = -1;
          else if (numel >= 0) numel *= t->shape[d];
        }
        if (numel < 0 || off[0] < 0 || off[1] < off[0] || off[1] - off[0] != numel * weight_dtype_size(t->dtype)) {
          rc = fail(err, errlen, "%s: tensor %s: data_offsets [%lld, %lld] do not hold its shape's %lld elements of %s "
                    "(the header lies about offsets)", path, name, (long long)off[0], (long long)off[1],
                    (long long)numel, dtype);
          goto done;
        }
        if (off[1] > data_bytes) {
          rc = fail(err, errlen, "%s: tensor %s ends at data byte %lld but the file holds %lld data bytes (truncated)",
                    path, name, (long long)off[1], (long long)data_bytes);
          goto done;
        }
        t->start = data_start + off[0];
        t->bytes = off[1] - off[0];
      }
      ws(&j);
      if (j.s < j.end && *j.s == ',') j.s++;
      else if (expect(&j, '}')) {
        rc = fail(err, errlen, "%s: malformed header near byte %lld", path, (long long)(j.s - text + 8));
        goto done;
      } else break;
    }
  {
    // The tensors must tile the data exactly: no overlaps, no holes, nothing after the last.
    FileTensor** order = xmalloc((size_t)(tf->ntensors + 1) * sizeof *order, "tensor order");
    for (int i = 0; i < tf->ntensors; i++) order[i] = &tf->tensors[i];
    qsort(order, tf->ntensors, sizeof *order, by_start);
    int64_t at = data_start;
    for (int i = 0; i < tf->ntensors && !rc; i++) {
      if (order[i]->start < at)
        rc = fail(err, errlen, "%s: tensor %s overlaps tensor %s (the header lies about offsets)", path, order[i]->name,
                  order[i - 1]->name);
      else if (order[i]->start > at)
        rc = fail(err, errlen, "%s: %lld bytes before tensor %s belong to no tensor (the header lies about offsets)", path,
                  (long long)(order[i]->start - at), order[i]->name);
      at = order[i]->start + order[i]->bytes;
    }
    if (!rc && at != tf->size)
      rc = fail(err, errlen, "%s: %lld bytes after the last tensor belong to no tensor", path, (long long)(tf->size - at));
    free(order);
  }
done:
  free(text);
  if (rc) tensor_file_close(tf);
  return rc;
}

// ---- where the tensors are -------------------------------------------------------------

static int read_small_file(const char* path, char* buf, size_t cap) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = 0;
  return 0;
}

int weights_locate(const char* path, WeightsFormat* format, char* tensors_path, size_t tensors_len, char* err,
                   size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0) return fail(err, errlen, "--init-from %s: %s", path, strerror(errno));
  char dir[4096];
  if (S_ISDIR(st.st_mode)) {
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(tensors_path, tensors_len, "%s/model.safetensors", path);
    if (stat(tensors_path, &st) != 0) {
      char index[4200];
      snprintf(index, sizeof index, "%s/model.safetensors.index.json", path);
      if (stat(index, &st) == 0)
        return fail(err, errlen, "%s holds a sharded safetensors model (model.safetensors.index.json); only a single "
                    "model.safetensors is read", path);
      return fail(err, errlen, "%s has no model.safetensors (a Hugging Face directory needs config.json and "
                  "model.safetensors; pass an llm.c .bin as a file)", path);
    }
  } else {
    int32_t magic = 0;
    if (read_exact(path, &magic, 4, 0) == 0 && magic == LLMC_MAGIC) {
      *format = FMT_LLMC;
      snprintf(tensors_path, tensors_len, "%s", path);
      return 0;
    }
    snprintf(tensors_path, tensors_len, "%s", path);
    snprintf(dir, sizeof dir, "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
  }
  char cfg_path[4200], text[1 << 16];
  snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
  if (read_small_file(cfg_path, text, sizeof text))
    return fail(err, errlen, "--init-from %s: not an llm.c checkpoint (magic %d) and no %s beside it to say which model "
                "the safetensors hold", path, LLMC_MAGIC, cfg_path);
  const char* mt = strstr(text, "\"model_type\"");
  if (mt && strstr(mt, "\"gpt2\"") && strstr(mt, "\"gpt2\"") - mt < 40) *format = FMT_HF_GPT2;
  else if (mt && strstr(mt, "\"t5\"") && strstr(mt, "\"t5\"") - mt < 40) *format = FMT_HF_T5;
  else return fail(err, errlen, "%s: model_type is not \"gpt2\" or \"t5\" (the models fsdp.c has)", cfg_path);
  return 0;
}
