// export.c: --export DIR: a Hugging Face directory (config.json + model.safetensors) written
// from the sharded parameters.
//
// The file's layout is known before any weight is: the header lists every tensor with its
// offsets (fp32, in our parameter order), so rank 0 writes the header and sizes the file,
// then every rank writes the elements of its own shards at their offsets (pwrite): no rank
// gathers the model. A transposed tensor (GPT-2's Conv1D) is written in column runs, each a
// contiguous range of the file. The directory is written as DIR.tmp and renamed once every
// rank is done, so DIR is never a partial export.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsdp/dist.h"
#include "weights/tensor_file.h"
#include "weights/weights.h"

typedef struct {
  Piece piece;
  int64_t start;  // byte offset in the file
} OutTensor;

static WeightsFormat export_format(const ModelConfig* cfg) { return cfg->kind == MODEL_T5 ? FMT_HF_T5 : FMT_HF_GPT2; }
// save_pretrained of GPT2LMHeadModel names the body "transformer."; from_pretrained takes both.
static const char* export_prefix(const ModelConfig* cfg) { return cfg->kind == MODEL_T5 ? "" : "transformer."; }

// The tensors in file order and the header; returns the header's length (a multiple of 8).
static int64_t layout(FSDP* fs, const ModelConfig* cfg, OutTensor** out, int* n, char** header) {
  int cap = 16, count = 0;
  OutTensor* t = xmalloc(cap * sizeof *t, "export table");
  size_t hcap = 1 << 16, h = 0;
  char* text = xmalloc(hcap, "export header");
  h += snprintf(text, hcap, "{\"__metadata__\":{\"format\":\"pt\"}");
  int64_t at = 0;
  for (int u = 0; u < fs->nunits; u++)
    for (int i = 0; i < fs->units[u].nparams; i++) {
      ParamMap map;
      if (weights_map_param(export_format(cfg), cfg, export_prefix(cfg), fs->units[u].params[i].home_unit, &fs->units[u].params[i], &map))
        fatal("--export: no tensor name for %s.%s", fs->units[u].name, fs->units[u].params[i].name);
      for (int k = 0; k < map.npieces; k++) {
        if (count == cap) t = realloc(t, (cap *= 2) * sizeof *t);
        if (!t) fatal("--export: out of memory");
        t[count].piece = map.piece[k];
        t[count].start = at;
        int ndim;
        int64_t shape[2], bytes = map.piece[k].rows * map.piece[k].cols * 4;
        piece_shape(&map.piece[k], &ndim, shape);
        if (hcap - h < 512) text = realloc(text, hcap *= 2);
        if (!text) fatal("--export: out of memory");
        h += snprintf(text + h, hcap - h, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld", map.piece[k].name, (long long)shape[0]);
        if (ndim == 2) h += snprintf(text + h, hcap - h, ",%lld", (long long)shape[1]);
        h += snprintf(text + h, hcap - h, "],\"data_offsets\":[%lld,%lld]}", (long long)at, (long long)(at + bytes));
        at += bytes;
        count++;
      }
    }
  if (hcap - h < 16) text = realloc(text, hcap += 16);
  text[h++] = '}';
  while (h % 8) text[h++] = ' ';  // the data starts 8-byte aligned
  for (int k = 0; k < count; k++) t[k].start += 8 + (int64_t)h;
  *out = t;
  *n = count;
  *header = text;
  return (int64_t)h;
}

static void write_config(const ModelConfig* c, const char* path) {
  FILE* f = fopen(path, "w");
  if (!f) fatal("--export: cannot write %s: %s", path, strerror(errno));
  if (c->kind == MODEL_GPT) {
    int eos = c->V > 50256 ? 50256 : c->V - 1;  // GPT-2's <|endoftext|>, or the last id of a small vocabulary
    fprintf(f, "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
               "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n  \"n_layer\": %d,\n"
               "  \"n_head\": %d,\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
               "  \"layer_norm_epsilon\": 1e-05,\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
               "  \"tie_word_embeddings\": true,\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n"
               "  \"torch_dtype\": \"float32\"\n}\n", c->V, c->T, c->T, c->C, c->L, c->H, eos, eos);
  } else {
    fprintf(f, "{\n  \"architectures\": [\"T5ForConditionalGeneration\"],\n  \"model_type\": \"t5\",\n"
               "  \"vocab_size\": %d,\n  \"d_model\": %d,\n  \"d_kv\": %d,\n  \"d_ff\": %d,\n  \"num_layers\": %d,\n"
               "  \"num_decoder_layers\": %d,\n  \"num_heads\": %d,\n  \"relative_attention_num_buckets\": 32,\n"
               "  \"relative_attention_max_distance\": 128,\n  \"feed_forward_proj\": \"%s\",\n"
               "  \"tie_word_embeddings\": %s,\n  \"layer_norm_epsilon\": 1e-06,\n  \"dropout_rate\": 0.0,\n"
               "  \"is_encoder_decoder\": true,\n  \"decoder_start_token_id\": 0,\n  \"pad_token_id\": 0,\n"
               "  \"eos_token_id\": 1,\n  \"torch_dtype\": \"float32\"\n}\n", c->V, c->C, c->D, c->F, c->L, c->Ld, c->H,
            c->gated ? "gated-gelu" : "relu", c->tied ? "true" : "false");
  }
  if (fclose(f)) fatal("--export: writing %s failed", path);
}

static void pwrite_all(int fd, const void* buf, size_t bytes, off_t at, const char* path) {
  if (pwrite(fd, buf, bytes, at) != (ssize_t)bytes) fatal("--export: writing %s failed: %s", path, strerror(errno));
}

// Writes piece-local elements [x0, x1) of piece pc, taken from src[x - x0].
static void write_piece(int fd, const char* path, const OutTensor* t, int64_t x0, int64_t x1, const float* src,
                        float* column) {
  const Piece* pc = &t->piece;
  if (!pc->transposed) {
    pwrite_all(fd, src, (size_t)(x1 - x0) * 4, (off_t)(t->start + x0 * 4), path);
    return;
  }
  int64_t cols = pc->cols, rows = pc->rows, i0 = x0 / cols, i1 = (x1 - 1) / cols;
  for (int64_t j = 0; j < cols; j++) {
    int64_t lo = i0 + (i0 * cols + j < x0), hi = i1 - (i1 * cols + j >= x1);
    if (lo > hi) continue;
    for (int64_t i = lo; i <= hi; i++) column[i - lo] = src[i * cols + j - x0];
    pwrite_all(fd, column, (size_t)(hi - lo + 1) * 4, (off_t)(t->start + (j * rows + lo) * 4), path);
  }
}

// Removes an export directory: our two files, then the directory (which fails, and is
// reported, if it holds anything else: nothing but our own files is deleted).
static int remove_export_dir(const char* dir) {
  struct stat st;
  if (stat(dir, &st) != 0) return 0;
  char path[4400];
  snprintf(path, sizeof path, "%s/config.json", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  unlink(path);
  return rmdir(dir);
}

void weights_export(FSDP* fs, const ModelConfig* cfg, const char* dir) {
  char tmp[4200], old[4200], file[4400];
  snprintf(tmp, sizeof tmp, "%s.tmp", dir);
  snprintf(old, sizeof old, "%s.old", dir);
  snprintf(file, sizeof file, "%s/model.safetensors", tmp);
  OutTensor* out;
  int n;
  char* header;
  int64_t hlen = layout(fs, cfg, &out, &n, &header);
  int64_t total = out[n - 1].start + out[n - 1].piece.rows * out[n - 1].piece.cols * 4;
  int ok = 1;
  if (fs->world_rank == 0) {
    if (remove_export_dir(tmp) != 0 || mkdir(tmp, 0755) != 0) ok = 0;
    int fd = ok ? open(file, O_CREAT | O_TRUNC | O_WRONLY, 0644) : -1;
    uint64_t len = (uint64_t)hlen;
    if (fd < 0 || ftruncate(fd, (off_t)total) != 0 || pwrite(fd, &len, 8, 0) != 8 ||
        pwrite(fd, header, (size_t)hlen, 8) != (ssize_t)hlen)
      ok = 0;
    if (fd >= 0 && close(fd) != 0) ok = 0;
    if (ok) {
      char cpath[4400];
      snprintf(cpath, sizeof cpath, "%s/config.json", tmp);
      write_config(cfg, cpath);
    }
  }
  if (!comm_all_true(fs->world, ok)) fatal("--export: cannot create %s (%s)", file, strerror(errno));
  if (comm_rank(fs->replica_group) == 0) {  // one replica of every shard writes it
    int fd = open(file, O_WRONLY);
    if (fd < 0) fatal("--export: cannot open %s: %s", file, strerror(errno));
    int64_t largest = 0, widest = 1;
    for (int u = 0; u < fs->nunits; u++) {
      if (fs->units[u].shard > largest) largest = fs->units[u].shard;
      for (int i = 0; i < fs->units[u].nparams; i++)
        if (fs->units[u].params[i].shape[0] > widest) widest = fs->units[u].params[i].shape[0];
    }
    float* host = xmalloc((size_t)largest * sizeof(float), "export staging");
    float* column = xmalloc((size_t)widest * sizeof(float), "export column");
    int k = 0;  // the file's tensors come in parameter order
    for (int u = 0; u < fs->nunits; u++) {
      Unit* U = &fs->units[u];
      int64_t lo = (int64_t)fs->shard_rank * U->shard, hi = lo + U->shard;
      device_copy_to_host(host, U->master, (size_t)U->shard * sizeof(float));
      for (int i = 0; i < U->nparams; i++) {
        const ParamInfo* p = &U->params[i];
        int64_t a = p->offset > lo ? p->offset : lo, b = p->offset + p->live < hi ? p->offset + p->live : hi;
        ParamMap map;
        weights_map_param(export_format(cfg), cfg, export_prefix(cfg), u, p, &map);
        for (int j = 0; j < map.npieces; j++, k++) {
          const Piece* pc = &map.piece[j];
          int64_t first = pc->row0 * pc->cols, last = first + pc->rows * pc->cols;
          int64_t x0 = (a - p->offset) > first ? (a - p->offset) : first;
          int64_t x1 = (b - p->offset) < last ? (b - p->offset) : last;
          if (a < b && x0 < x1)
            write_piece(fd, file, &out[k], x0 - first, x1 - first, host + (p->offset + x0 - lo), column);
        }
      }
    }
    if (fsync(fd) != 0 || close(fd) != 0) fatal("--export: finishing %s failed: %s", file, strerror(errno));
    free(host);
    free(column);
  }
  comm_barrier(fs->world);
  if (fs->world_rank == 0) {
    // Replace an older export of that name only now that the new one is complete.
    struct stat st;
    int rc = remove_export_dir(old);
    if (rc == 0 && stat(dir, &st) == 0) rc = rename(dir, old);
    if (rc != 0 || rename(tmp, dir) != 0) fatal("--export: cannot rename %s to %s: %s", tmp, dir, strerror(errno));
    if (remove_export_dir(old) != 0) fprintf(stderr, "warning: could not remove %s\n", old);
  }
  comm_barrier(fs->world);
  free(out);
  free(header);
}
