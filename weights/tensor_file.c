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
// A sharded Hugging Face model (save_pretrained past its max_shard_size): model.safetensors.index.json
// with a weight_map from each tensor's name to its shard, model-0000X-of-0000N.safetensors beside
// it; one table over all the shards, each entry with its file.
#include "weights/tensor_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infra/dist.h"
#include "infra/files.h"
#include "infra/json.h"

#define LLMC_MAGIC 20240326
#define MAX_HEADER_BYTES (100 << 20)  // the safetensors format's own limit on its header
#define MAX_DIM ((int64_t)1 << 24)    // the largest model dimension (layers/config.c) an llm.c header may give

int weight_dtype_size(WeightDType t) { return t == WT_F32 ? 4 : 2; }

// a * b + c into *out, or 0 when it does not fit an int64 (sizes read from files are checked
// before they are multiplied).
static int mul_add(int64_t a, int64_t b, int64_t c, int64_t* out) {
  int64_t p;
  return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(p, c, out);
}

// Opens a tensor file (a regular file only) and fills tf->path and tf->size; the descriptor,
// or -1 with the reason.
static int open_tensor_file(const char* path, TensorFile* tf, WeightsFormat format, char* err, size_t errlen) {
  memset(tf, 0, sizeof *tf);
  snprintf(tf->path, sizeof tf->path, "%s", path);
  tf->format = format;
  int fd = file_open_regular(path, err, errlen);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) != 0) {
    set_error(err, errlen, "cannot read %s: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  if (fd >= 0) tf->size = (int64_t)st.st_size;
  return fd;
}

static int by_name(const void* a, const void* b) { return strcmp(((const FileTensor*)a)->name, ((const FileTensor*)b)->name); }

void tensor_file_close(TensorFile* tf) {
  free(tf->tensors);
  tf->tensors = NULL;
  tf->ntensors = 0;
  for (int i = 0; i < tf->nfiles; i++) free(tf->files[i]);
  free(tf->files);
  tf->files = NULL;
  tf->nfiles = 0;
}

// A table read from one file: its tensors are in tf->path.
static void single_file(TensorFile* tf) {
  tf->nfiles = 1;
  tf->files = xmalloc(sizeof *tf->files, "tensor file list");
  tf->files[0] = xmalloc(strlen(tf->path) + 1, "tensor file name");
  strcpy(tf->files[0], tf->path);
}

FileTensor* tensor_file_find(TensorFile* tf, const char* name) {
  FileTensor key;
  snprintf(key.name, sizeof key.name, "%s", name);
  if (strlen(name) >= sizeof key.name) return NULL;
  return bsearch(&key, tf->tensors, (size_t)tf->ntensors, sizeof *tf->tensors, by_name);
}

// ---- llm.c ---------------------------------------------------------------------------

// The tensors of an llm.c checkpoint as llm.c stacks them; per-layer ones get one table entry
// per layer ("qkvw.3"). rows and cols in units of the header's numbers.
typedef struct {
  const char* name;
  int per_layer;
  int64_t rows, cols;
} LlmcKind;

static void llmc_kinds(int64_t T, int64_t C, int64_t Vp, LlmcKind k[16]) {
  const LlmcKind kinds[16] = {
      {"wte", 0, Vp, C},        {"wpe", 0, T, C},        {"ln1w", 1, C, 1},     {"ln1b", 1, C, 1},
      {"qkvw", 1, 3 * C, C},    {"qkvb", 1, 3 * C, 1},   {"attprojw", 1, C, C}, {"attprojb", 1, C, 1},
      {"ln2w", 1, C, 1},        {"ln2b", 1, C, 1},       {"fcw", 1, 4 * C, C},  {"fcb", 1, 4 * C, 1},
      {"fcprojw", 1, C, 4 * C}, {"fcprojb", 1, C, 1},    {"lnfw", 0, C, 1},     {"lnfb", 0, C, 1},
  };
  memcpy(k, kinds, sizeof kinds);
}

int tensor_file_open_llmc(const char* path, TensorFile* tf, char* err, size_t errlen) {
  int fd = open_tensor_file(path, tf, FMT_LLMC, err, errlen);
  if (fd < 0) return -1;
  int32_t h[256];
  int bad = tf->size < (int64_t)sizeof h || file_pread_all(fd, h, sizeof h, 0);
  close(fd);
  if (bad) return set_error(err, errlen, "%s: shorter than the 1024-byte header of an llm.c checkpoint", path);
  if (h[0] != LLMC_MAGIC)
    return set_error(err, errlen, "%s: bad magic %d (an llm.c GPT-2 checkpoint starts with %d)", path, h[0], LLMC_MAGIC);
  if (h[1] != 3 && h[1] != 5)
    return set_error(err, errlen, "%s: llm.c checkpoint version %d; versions 3 (fp32) and 5 (bf16) are read", path, h[1]);
  int64_t T = h[2], V = h[3], L = h[4], H = h[5], C = h[6], Vp = h[7];
  if (T < 1 || V < 1 || L < 1 || H < 1 || C < 1 || Vp < V || C % H || T > MAX_DIM || Vp > MAX_DIM || L > MODEL_MAX_BLOCKS ||
      C > MAX_DIM)
    return set_error(err, errlen, "%s: implausible llm.c header (maxT %lld, V %lld, L %lld, H %lld, C %lld, Vp %lld; each in "
                     "[1, %lld], L at most %d, V <= Vp, H dividing C)", path, (long long)T, (long long)V, (long long)L,
                     (long long)H, (long long)C, (long long)Vp, (long long)MAX_DIM, MODEL_MAX_BLOCKS);
  WeightDType dt = h[1] == 3 ? WT_F32 : WT_BF16;
  int es = weight_dtype_size(dt);
  LlmcKind kinds[16];
  llmc_kinds(T, C, Vp, kinds);
  // Where each tensor ends, in checked arithmetic, before any table is made: the first one
  // past the end of the file names the truncation.
  int64_t at = sizeof h;
  for (int k = 0; k < 16; k++) {
    int64_t bytes = 0, copies = kinds[k].per_layer ? L : 1, end;
    if (!mul_add(kinds[k].rows, kinds[k].cols * es, 0, &bytes) || !mul_add(bytes, copies, at, &end) || end > tf->size) {
      // The first copy that does not fit.
      int64_t l = bytes > 0 && tf->size > at ? (tf->size - at) / bytes : 0;
      char name[64];
      if (kinds[k].per_layer) snprintf(name, sizeof name, "%s.%lld", kinds[k].name, (long long)l);
      else snprintf(name, sizeof name, "%s", kinds[k].name);
      return set_error(err, errlen, "%s: tensor %s ends beyond the file's %lld bytes (truncated, or a header that does not "
                       "describe this file: L %lld, C %lld, Vp %lld)", path, name, (long long)tf->size, (long long)L,
                       (long long)C, (long long)Vp);
    }
    at = end;
  }
  if (at != tf->size)
    return set_error(err, errlen, "%s: %lld bytes after the last tensor (lnfb); the header (L %lld, C %lld, Vp %lld) does not "
                     "describe this file", path, (long long)(tf->size - at), (long long)L, (long long)C, (long long)Vp);
  // Every size fits now; wte's entry covers its V real rows (the padding rows up to Vp are skipped).
  tf->ntensors = (int)(4 + 12 * L);
  tf->tensors = xcalloc((size_t)tf->ntensors, sizeof *tf->tensors, "the tensor table of an llm.c checkpoint");
  at = sizeof h;
  int n = 0;
  for (int k = 0; k < 16; k++)
    for (int64_t l = 0; l < (kinds[k].per_layer ? L : 1); l++) {
      FileTensor* t = &tf->tensors[n++];
      if (kinds[k].per_layer) snprintf(t->name, sizeof t->name, "%s.%lld", kinds[k].name, (long long)l);
      else snprintf(t->name, sizeof t->name, "%s", kinds[k].name);
      t->dtype = dt;
      t->ndim = kinds[k].cols == 1 ? 1 : 2;
      t->shape[0] = k == 0 ? V : kinds[k].rows;
      t->shape[1] = kinds[k].cols;
      t->start = at;
      t->bytes = t->shape[0] * kinds[k].cols * es;
      at += kinds[k].rows * kinds[k].cols * es;
    }
  qsort(tf->tensors, (size_t)tf->ntensors, sizeof *tf->tensors, by_name);
  single_file(tf);
  return 0;
}

// ---- safetensors ----------------------------------------------------------------------

// One tensor's entry {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} into t, its
// offsets checked against the data's `data_bytes`. Nothing else may be in an entry.
static int read_entry(const JsonDoc* d, int32_t e, const char* path, int64_t data_start, int64_t data_bytes,
                      FileTensor* t, char* err, size_t errlen) {
  const char* name = t->name;
  if (json_type(d, e) != JSON_OBJECT)
    return set_error(err, errlen, "%s: tensor %s: its entry is not an object with dtype, shape and data_offsets", path, name);
  for (int32_t m = d->nodes[e].child; m >= 0; m = d->nodes[m].next)
    if (strcmp(json_key(d, m), "dtype") && strcmp(json_key(d, m), "shape") && strcmp(json_key(d, m), "data_offsets"))
      return set_error(err, errlen, "%s: tensor %s: unknown field \"%.60s\" (an entry has dtype, shape and data_offsets)", path,
                       name, json_key(d, m));
  int32_t dt = json_get(d, e, "dtype"), shape = json_get(d, e, "shape"), off = json_get(d, e, "data_offsets");
  if (dt < 0 || shape < 0 || off < 0)
    return set_error(err, errlen, "%s: tensor %s: malformed entry (needs dtype, shape, data_offsets)", path, name);
  char dtype[16], what[160];
  snprintf(what, sizeof what, "%s.dtype", name);
  if (json_string(d, dt, what, dtype, sizeof dtype, err, errlen)) return -1;
  if (!strcmp(dtype, "F32")) t->dtype = WT_F32;
  else if (!strcmp(dtype, "BF16")) t->dtype = WT_BF16;
  else if (!strcmp(dtype, "F16")) t->dtype = WT_F16;
  else return set_error(err, errlen, "%s: tensor %s has dtype %s; F32, BF16 and F16 are read", path, name, dtype);
  if (json_type(d, shape) != JSON_ARRAY || d->nodes[shape].count > 4)
    return set_error(err, errlen, "%s: tensor %s: its shape is not a list of at most 4 sizes", path, name);
  int64_t numel = 1, es = weight_dtype_size(t->dtype), bytes;
  t->ndim = 0;
  for (int32_t v = d->nodes[shape].child; v >= 0; v = d->nodes[v].next) {
    long long x;
    snprintf(what, sizeof what, "%s.shape[%d]", name, t->ndim);
    if (json_int(d, v, what, 0, INT64_MAX, &x, err, errlen)) return -1;
    t->shape[t->ndim++] = x;
    if (!mul_add(numel, x, 0, &numel))
      return set_error(err, errlen, "%s: tensor %s: its shape has more elements than any file can hold", path, name);
  }
  long long o[2];
  if (json_type(d, off) != JSON_ARRAY || d->nodes[off].count != 2)
    return set_error(err, errlen, "%s: tensor %s: data_offsets is not [begin, end]", path, name);
  int32_t b = d->nodes[off].child;
  snprintf(what, sizeof what, "%s.data_offsets", name);
  if (json_int(d, b, what, 0, INT64_MAX, &o[0], err, errlen) ||
      json_int(d, d->nodes[b].next, what, 0, INT64_MAX, &o[1], err, errlen))
    return -1;
  if (!mul_add(numel, es, 0, &bytes) || o[1] < o[0] || o[1] - o[0] != bytes)
    return set_error(err, errlen, "%s: tensor %s: data_offsets [%lld, %lld] do not hold its shape's %lld elements of %s (the "
                     "header lies about offsets)", path, name, o[0], o[1], (long long)numel, dtype);
  if (o[1] > data_bytes)
    return set_error(err, errlen, "%s: tensor %s ends at data byte %lld but the file holds %lld data bytes (truncated)", path,
                     name, o[1], (long long)data_bytes);
  t->start = data_start + o[0];
  t->bytes = bytes;
  return 0;
}

// By start, and an empty tensor before a full one at the same start (a deterministic order).
static int by_start(const void* a, const void* b) {
  const FileTensor *x = *(FileTensor* const*)a, *y = *(FileTensor* const*)b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

// The tensors must tile the data exactly: no overlaps, no holes, nothing after the last.
static int check_tiling(const TensorFile* tf, int64_t data_start, char* err, size_t errlen) {
  FileTensor** order = xmalloc((size_t)(tf->ntensors + 1) * sizeof *order, "tensor order");
  for (int i = 0; i < tf->ntensors; i++) order[i] = &tf->tensors[i];
  qsort(order, (size_t)tf->ntensors, sizeof *order, by_start);
  int64_t at = data_start;
  int rc = 0;
  for (int i = 0; i < tf->ntensors && !rc; i++) {
    if (order[i]->start < at)
      rc = set_error(err, errlen, "%s: tensor %s overlaps tensor %s (the header lies about offsets)", tf->path, order[i]->name,
                     order[i - 1]->name);
    else if (order[i]->start > at)
      rc = set_error(err, errlen, "%s: %lld bytes before tensor %s belong to no tensor (the header lies about offsets)",
                     tf->path, (long long)(order[i]->start - at), order[i]->name);
    at = order[i]->start + order[i]->bytes;
  }
  if (!rc && at != tf->size)
    rc = set_error(err, errlen, "%s: %lld bytes after the last tensor belong to no tensor", tf->path, (long long)(tf->size - at));
  free(order);
  return rc;
}

// The JSON header of the safetensors file open at fd (size bytes) into *d; where its data starts.
static int read_header(int fd, const char* path, int64_t size, JsonDoc* d, int64_t* data_start, char* err,
                       size_t errlen) {
  uint64_t hlen = 0;
  if (size < 8 || file_pread_all(fd, &hlen, 8, 0))
    return set_error(err, errlen, "%s: cannot read the 8-byte header length of a safetensors file", path);
  if (hlen < 2 || hlen > MAX_HEADER_BYTES || (int64_t)(8 + hlen) > size)
    return set_error(err, errlen, "%s: header length %llu does not fit the file (%lld bytes): not a safetensors file, or "
                     "truncated", path, (unsigned long long)hlen, (long long)size);
  *data_start = 8 + (int64_t)hlen;
  char* text = xmalloc(hlen, "safetensors header");
  if (file_pread_all(fd, text, hlen, 8)) {
    free(text);
    return set_error(err, errlen, "%s: cannot read its %llu-byte header", path, (unsigned long long)hlen);
  }
  char what[4200];
  snprintf(what, sizeof what, "%s (its safetensors header)", path);
  int rc = json_parse(text, hlen, what, d, err, errlen);
  free(text);
  return rc ? -1 : 0;
}

int safetensors_read_header(const char* path, JsonDoc* d, char* err, size_t errlen) {
  TensorFile tf;
  int fd = open_tensor_file(path, &tf, FMT_HF_GPT2, err, errlen);
  if (fd < 0) return -1;
  int64_t data_start = 0;
  int rc = read_header(fd, path, tf.size, d, &data_start, err, errlen);
  close(fd);
  return rc;
}

int tensor_file_open_safetensors(const char* path, WeightsFormat format, TensorFile* tf, char* err, size_t errlen) {
  int fd = open_tensor_file(path, tf, format, err, errlen);
  if (fd < 0) return -1;
  JsonDoc d;
  int64_t data_start = 0;
  int rc = read_header(fd, path, tf->size, &d, &data_start, err, errlen);
  close(fd);
  if (rc) return -1;
  int64_t data_bytes = tf->size - data_start;
  if (json_type(&d, 0) != JSON_OBJECT) {
    json_free(&d);
    return set_error(err, errlen, "%s: the header is not a JSON object (wrong magic: not a safetensors file)", path);
  }
  tf->tensors = xcalloc((size_t)d.nodes[0].count + 1, sizeof *tf->tensors, "the tensor table of a safetensors file");
  for (int32_t m = d.nodes[0].child; m >= 0 && !rc; m = d.nodes[m].next) {
    const char* name = json_key(&d, m);
    if (!strcmp(name, "__metadata__")) {  // a map of strings to strings
      int ok = json_type(&d, m) == JSON_OBJECT;
      for (int32_t v = ok ? d.nodes[m].child : -1; v >= 0; v = d.nodes[v].next) ok &= json_type(&d, v) == JSON_STRING;
      if (!ok) rc = set_error(err, errlen, "%s: __metadata__ is not an object of strings", path);
      continue;
    }
    if (strlen(name) >= TENSOR_NAME_LEN) {
      rc = set_error(err, errlen, "%s: the tensor name '%.60s...' is longer than %d bytes", path, name, TENSOR_NAME_LEN - 1);
      break;
    }
    FileTensor* t = &tf->tensors[tf->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    rc = read_entry(&d, m, path, data_start, data_bytes, t, err, errlen);
  }
  json_free(&d);
  if (!rc) rc = check_tiling(tf, data_start, err, errlen);
  if (rc) {
    tensor_file_close(tf);
    return rc;
  }
  qsort(tf->tensors, (size_t)tf->ntensors, sizeof *tf->tensors, by_name);
  if (format == FMT_HF_GPT2 && tensor_file_find(tf, "transformer.wte.weight"))
    snprintf(tf->prefix, sizeof tf->prefix, "transformer.");
  single_file(tf);
  return 0;
}

// ---- sharded safetensors ----------------------------------------------------------------

#define INDEX_MAX_BYTES ((size_t)64 << 20)
#define MAX_SHARDS 65536

// Whether name is a plain file name of a shard: no directory, not hidden, ending .safetensors.
static int shard_name_ok(const char* name) {
  size_t n = strlen(name), ext = strlen(".safetensors");
  return n > ext && n < 256 && !strchr(name, '/') && name[0] != '.' && !strcmp(name + n - ext, ".safetensors");
}

// The shard index (in tf->files) of a name, added when new; -1 when there are too many.
static int shard_of(TensorFile* tf, const char* dir, const char* name) {
  char path[4600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  for (int i = 0; i < tf->nfiles; i++)
    if (!strcmp(tf->files[i], path)) return i;
  if (tf->nfiles == MAX_SHARDS) return -1;
  if (tf->nfiles % 64 == 0) tf->files = realloc(tf->files, (size_t)(tf->nfiles + 64) * sizeof *tf->files);
  if (!tf->files) fatal("out of memory reading %s", tf->path);
  tf->files[tf->nfiles] = xmalloc(strlen(path) + 1, "shard name");
  strcpy(tf->files[tf->nfiles], path);
  return tf->nfiles++;
}

static int open_sharded(const char* index, WeightsFormat format, TensorFile* tf, char* err, size_t errlen) {
  memset(tf, 0, sizeof *tf);
  snprintf(tf->path, sizeof tf->path, "%s", index);
  tf->format = format;
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", index);
  char* slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  JsonDoc d;
  if (json_read_object(index, INDEX_MAX_BYTES, &d, err, errlen)) return -1;
  int32_t map = json_get(&d, 0, "weight_map");
  int rc = 0;
  if (map < 0 || json_type(&d, map) != JSON_OBJECT || d.nodes[map].count == 0)
    rc = set_error(err, errlen, "%s has no \"weight_map\" object naming the shard of each tensor", index);
  // The shards the weight map names, in order of first appearance, each a plain file name.
  int* shard = xcalloc((size_t)(rc ? 1 : d.nodes[map].count), sizeof *shard, "weight map");
  int k = 0;
  for (int32_t m = rc ? -1 : d.nodes[map].child; m >= 0 && !rc; m = d.nodes[m].next, k++) {
    char name[256];
    if (json_string(&d, m, json_key(&d, m), name, sizeof name, err, errlen)) rc = -1;
    else if (!shard_name_ok(name))
      rc = set_error(err, errlen, "%s: tensor %.60s is in \"%.60s\", not a file name of a shard beside the index "
                     "(NAME.safetensors)", index, json_key(&d, m), name);
    else if ((shard[k] = shard_of(tf, dir, name)) < 0)
      rc = set_error(err, errlen, "%s names more than %d shards", index, MAX_SHARDS);
  }
  // Every shard's table, checked as a file of its own, into one table.
  for (int f = 0; f < tf->nfiles && !rc; f++) {
    TensorFile one;
    char why[4096];
    if (tensor_file_open_safetensors(tf->files[f], format, &one, why, sizeof why)) {
      rc = set_error(err, errlen, "%s names the shard %s: %s", index, tf->files[f], why);
      break;
    }
    tf->tensors = realloc(tf->tensors, (size_t)(tf->ntensors + one.ntensors + 1) * sizeof *tf->tensors);
    if (!tf->tensors) fatal("out of memory reading %s", index);
    for (int i = 0; i < one.ntensors; i++) one.tensors[i].file = f, tf->tensors[tf->ntensors++] = one.tensors[i];
    tensor_file_close(&one);
  }
  if (!rc) {
    qsort(tf->tensors, (size_t)tf->ntensors, sizeof *tf->tensors, by_name);
    for (int i = 1; i < tf->ntensors && !rc; i++)
      if (!strcmp(tf->tensors[i].name, tf->tensors[i - 1].name))
        rc = set_error(err, errlen, "%s: tensor %s is in two shards, %s and %s", index, tf->tensors[i].name,
                       tf->files[tf->tensors[i - 1].file], tf->files[tf->tensors[i].file]);
  }
  // The index and the shards agree: each tensor it names is in the shard it names, and each
  // tensor of a shard is named.
  k = 0;
  for (int32_t m = rc ? -1 : d.nodes[map].child; m >= 0 && !rc; m = d.nodes[m].next, k++) {
    FileTensor* t = tensor_file_find(tf, json_key(&d, m));
    if (!t || t->file != shard[k])
      rc = set_error(err, errlen, "%s: tensor %.100s is not in %s, the shard the index names%s%s", index, json_key(&d, m),
                     tf->files[shard[k]], t ? " (it is in " : "", t ? tf->files[t->file] : "");
    if (t && !rc) t->used = 1;
  }
  for (int i = 0; i < tf->ntensors && !rc; i++)
    if (!tf->tensors[i].used)
      rc = set_error(err, errlen, "%s: %s holds tensor %s, which the index does not name", index, tf->files[tf->tensors[i].file],
                     tf->tensors[i].name);
  for (int i = 0; i < tf->ntensors; i++) tf->tensors[i].used = 0;
  free(shard);
  json_free(&d);
  if (rc) {
    tensor_file_close(tf);
    return -1;
  }
  if (format == FMT_HF_GPT2 && tensor_file_find(tf, "transformer.wte.weight"))
    snprintf(tf->prefix, sizeof tf->prefix, "transformer.");
  return 0;
}

int tensor_file_open_hf(const char* path, WeightsFormat format, TensorFile* tf, char* err, size_t errlen) {
  size_t n = strlen(path), k = strlen(SAFETENSORS_INDEX);
  if (n >= k && !strcmp(path + n - k, SAFETENSORS_INDEX)) return open_sharded(path, format, tf, err, errlen);
  return tensor_file_open_safetensors(path, format, tf, err, errlen);
}

// ---- where the tensors are -------------------------------------------------------------

int weights_read_config(const char* tensors_path, char* cpath, size_t cpathlen, JsonDoc* doc, char* err, size_t errlen) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", tensors_path);
  char* slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  snprintf(cpath, cpathlen, "%s/config.json", dir);
  return json_read_object(cpath, CONFIG_MAX_BYTES, doc, err, errlen);
}

int weights_locate(const char* path, WeightsFormat* format, char* tensors_path, size_t tensors_len, char* err,
                   size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0) return set_error(err, errlen, "--init-from %s: %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    snprintf(tensors_path, tensors_len, "%s/model.safetensors", path);
    if (stat(tensors_path, &st) != 0) {
      snprintf(tensors_path, tensors_len, "%s/" SAFETENSORS_INDEX, path);  // a sharded model
      if (stat(tensors_path, &st) != 0)
        return set_error(err, errlen, "%s has no model.safetensors and no " SAFETENSORS_INDEX " (a Hugging Face directory "
                         "needs config.json and its tensors; pass an llm.c .bin as a file)", path);
    }
  } else {
    int fd = file_open_regular(path, err, errlen);
    if (fd < 0) return -1;
    int32_t magic = 0;
    int got = file_pread_all(fd, &magic, 4, 0) == 0;
    close(fd);
    snprintf(tensors_path, tensors_len, "%s", path);
    if (got && magic == LLMC_MAGIC) {
      *format = FMT_LLMC;
      return 0;
    }
  }
  char cpath[4300], why[4400], type[64];
  JsonDoc d;
  if (weights_read_config(tensors_path, cpath, sizeof cpath, &d, why, sizeof why))
    return set_error(err, errlen, "--init-from %s: not an llm.c checkpoint (magic %d), and config.json beside it cannot say "
                     "which model the safetensors hold: %s", path, LLMC_MAGIC, why);
  int rc = json_member_string(&d, 0, "model_type", type, sizeof type, err, errlen);
  json_free(&d);
  if (rc) return -1;
  if (!strcmp(type, "gpt2")) *format = FMT_HF_GPT2;
  else if (!strcmp(type, "t5")) *format = FMT_HF_T5;
  else if (!strcmp(type, "llama")) *format = FMT_HF_LLAMA;
  else
    return set_error(err, errlen, "%s: model_type \"%s\" is not \"gpt2\", \"t5\" or \"llama\" (the models fsdp.c has)", cpath,
                     type);
  return 0;
}
