// load.c: --init-from: pretrained weights into the sharded layout.
//
// Every rank checks the whole tensor table against the model (cheap: names and shapes), so a
// file that does not fit is refused, with every missing, extra or misshapen tensor named, on
// all ranks before any weight is read. Then each rank reads, for each unit, only the bytes of
// the elements its shard holds ([shard_rank * S, (shard_rank + 1) * S) of the flat layout,
// fsdp/layout.c): no rank ever holds more than its shards, as with the sharded initialization
// of fsdp/init.c this replaces. A transposed tensor (GPT-2's Conv1D) is read column run by
// column run, each run a contiguous byte range of the file.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infra/dist.h"
#include "infra/files.h"
#include "weights/tensor_file.h"
#include "weights/weights.h"

static float bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
  if (exp == 31) bits = sign | 0x7f800000u | (man << 13);  // inf, nan
  else if (exp) bits = sign | ((exp + 112) << 23) | (man << 13);
  else if (!man) bits = sign;
  else {  // subnormal: normalize
    int e = -1;
    do man <<= 1, e++;
    while (!(man & 1024));
    bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 1023) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

typedef struct {
  int* fd;             // one per file of the table
  const TensorFile* tf;
  const char* opt;     // the option or argument that named the file, for messages
  unsigned char* buf;  // raw bytes of one read
  size_t cap;          // in elements
} Reader;

// Reads elements [first, first + n) of tensor t as fp32 into out.
static void read_elements(Reader* r, const FileTensor* t, int64_t first, int64_t n, float* out) {
  int es = weight_dtype_size(t->dtype);
  while (n > 0) {
    int64_t k = n < (int64_t)r->cap ? n : (int64_t)r->cap;
    size_t bytes = (size_t)k * es;
    off_t at = (off_t)(t->start + first * es);
    ssize_t got = pread(r->fd[t->file], r->buf, bytes, at);
    if (got != (ssize_t)bytes)
      fatal("%s %s: reading tensor %s (%zu bytes at %lld) failed: %s", r->opt, r->tf->files[t->file], t->name, bytes,
            (long long)at, got < 0 ? strerror(errno) : "short read (did the file change?)");
    for (int64_t i = 0; i < k; i++) {
      if (t->dtype == WT_F32) memcpy(&out[i], r->buf + 4 * i, 4);
      else {
        uint16_t h;
        memcpy(&h, r->buf + 2 * i, 2);
        out[i] = t->dtype == WT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      // Every weight from outside is checked once, here, as it is read: a NaN or inf would
      // otherwise train (or generate) without a word until the first step fails.
      if (!isfinite(out[i]))
        fatal("%s %s: tensor %s holds a non-finite value (%g) at element %lld; nothing was trained from it. The file is "
              "damaged or was saved from a diverged model: use another copy", r->opt, r->tf->path, t->name, out[i],
              (long long)(first + i));
    }
    first += k, n -= k, out += k;
  }
}

// Fills dst[x - x0] for the piece-local elements x in [x0, x1) of piece pc.
static void read_piece(Reader* r, const FileTensor* t, const Piece* pc, int64_t x0, int64_t x1, float* dst,
                       float* column) {
  if (!pc->transposed) {
    read_elements(r, t, x0, x1 - x0, dst);
    return;
  }
  // Our element (row i, col j) is the file's (j, i): for each file row j, the rows i the range
  // holds are one contiguous run.
  int64_t cols = pc->cols, rows = pc->rows, i0 = x0 / cols, i1 = (x1 - 1) / cols;
  for (int64_t j = 0; j < cols; j++) {
    int64_t lo = i0 + (i0 * cols + j < x0), hi = i1 - (i1 * cols + j >= x1);
    if (lo > hi) continue;
    read_elements(r, t, j * rows + lo, hi - lo + 1, column);
    for (int64_t i = lo; i <= hi; i++) dst[i * cols + j - x0] = column[i - lo];
  }
}

static void check_tensors(FSDP* fs, const ModelConfig* cfg, TensorFile* tf, const char* opt) {
  ProblemList* pl = xcalloc(1, sizeof *pl, "problem list");
  char want[64], have[64];
  for (int u = 0; u < fs->nunits; u++)
    for (int i = 0; i < fs->units[u].nparams; i++) {
      const ParamInfo* p = &fs->units[u].params[i];
      ParamMap map;
      if (weights_map_param(tf->format, cfg, tf->prefix, p->home_unit, p, &map))
        fatal("%s: no tensor maps to parameter %s.%s of model %s", opt, fs->units[u].name, p->name, cfg->name);
      for (int k = 0; k < map.npieces; k++) {
        const Piece* pc = &map.piece[k];
        int ndim;
        int64_t shape[2];
        piece_shape(pc, &ndim, shape);
        shape_text(want, sizeof want, ndim, shape);
        FileTensor* t = tensor_file_find(tf, pc->name);
        if (!t) {
          problem_add(pl, "missing tensor %s (shape %s, for %s.%s)", pc->name, want, fs->units[u].name, p->name);
          continue;
        }
        t->used = 1;
        if (t->ndim != ndim || t->shape[0] != shape[0] || (ndim == 2 && t->shape[1] != shape[1])) {
          shape_text(have, sizeof have, t->ndim, t->shape);
          problem_add(pl, "tensor %s has shape %s, model %s needs %s", pc->name, have, cfg->name, want);
        }
      }
    }
  for (int i = 0; i < tf->ntensors; i++) {
    const FileTensor* t = &tf->tensors[i];
    if (t->used || weights_ignorable(tf->format, cfg, t->name)) continue;
    shape_text(have, sizeof have, t->ndim, t->shape);
    problem_add(pl, "unexpected tensor %s (shape %s): model %s has no place for it", t->name, have, cfg->name);
  }
  if (pl->count)
    fatal("%s %s does not fit model %s (%d problem%s, nothing loaded):%s%s", opt, tf->path, cfg->name, pl->count,
          pl->count > 1 ? "s" : "", pl->text, pl->count > PROBLEMS_SHOWN ? "\n  ..." : "");
  free(pl);
}

void weights_load(FSDP* fs, const ModelConfig* cfg, const char* path, const char* opt) {
  char err[4096], tensors[4200];
  WeightsFormat format;
  TensorFile tf;
  if (weights_locate(path, &format, tensors, sizeof tensors, err, sizeof err)) fatal("%s", err);
  int rc = format == FMT_LLMC ? tensor_file_open_llmc(tensors, &tf, err, sizeof err)
                              : tensor_file_open_hf(tensors, format, &tf, err, sizeof err);
  if (rc) fatal("%s: %s; nothing loaded", opt, err);
  check_tensors(fs, cfg, &tf, opt);

  Reader r = {.tf = &tf, .opt = opt, .cap = 1 << 20};
  r.fd = xmalloc((size_t)tf.nfiles * sizeof *r.fd, "weights files");
  for (int f = 0; f < tf.nfiles; f++)
    if ((r.fd[f] = file_open_regular(tf.files[f], err, sizeof err)) < 0) fatal("%s: %s", opt, err);
  r.buf = xmalloc(r.cap * 4, "weights read buffer");
  int64_t largest = 0, widest = 1;
  for (int u = 0; u < fs->nunits; u++) {
    if (fs->units[u].shard > largest) largest = fs->units[u].shard;
    for (int i = 0; i < fs->units[u].nparams; i++)
      if (fs->units[u].params[i].shape[0] > widest) widest = fs->units[u].params[i].shape[0];
  }
  float* host = xmalloc((size_t)largest * sizeof(float), "weights staging");
  float* column = xmalloc((size_t)widest * sizeof(float), "weights column");
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    memset(host, 0, (size_t)U->shard * sizeof(float));  // alignment gaps and padding stay zero
    for (int i = 0; i < U->nparams; i++) {
      const ParamInfo* p = &U->params[i];
      ShardPart s;
      if (!fsdp_shard_part(fs, U, p, p->live, &s)) continue;
      ParamMap map;
      weights_map_param(format, cfg, tf.prefix, u, p, &map);
      for (int k = 0; k < map.npieces; k++) {
        const Piece* pc = &map.piece[k];
        int64_t first = pc->row0 * pc->cols, last = first + pc->rows * pc->cols;  // param elements
        int64_t x0 = s.first > first ? s.first : first, x1 = s.end < last ? s.end : last;
        if (x0 >= x1) continue;
        read_piece(&r, tensor_file_find(&tf, pc->name), pc, x0 - first, x1 - first, host + s.local + (x0 - s.first), column);
      }
    }
    device_copy_to_device(U->master, host, (size_t)U->shard * sizeof(float));
    fill_zero_f32(fs->kctx, U->m, U->shard);
    fill_zero_f32(fs->kctx, U->v, U->shard);
    fill_zero_f32(fs->kctx, U->grad, U->shard);
  }
  for (int f = 0; f < tf.nfiles; f++) close(r.fd[f]);
  free(r.fd);
  free(r.buf);
  free(host);
  free(column);
  tensor_file_close(&tf);
  fsdp_masters_changed(fs);
  device_event_record(fs->params_updated, STREAM_COMPUTE);
}
