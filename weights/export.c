// export.c: --export DIR: a Hugging Face directory (config.json + model.safetensors) written
// from the sharded parameters, for transformers' GPT2LMHeadModel, T5ForConditionalGeneration or
// LlamaForCausalLM, with the tokenizer beside the training data when there is one
// (tokenizer.json and tokenizer_config.json, which transformers' tokenizers load, and
// tokenizer.bin, generate_cpu's decode table; scripts/prepare_text.py writes them).
//
// The file's layout is known before any weight is: the header lists every tensor with its
// offsets (fp32, in our parameter order), so rank 0 writes the header and sizes the file,
// then every rank writes the elements of its own shards at their offsets (pwrite): no rank
// gathers the model. A transposed tensor (GPT-2's Conv1D) is written in column runs, each a
// contiguous range of the file.
//
// The directory is written as DIR.tmp, config.json last: --init-from needs it, so a DIR.tmp
// cut short (a full disk, a killed run) is never taken for a model. Only then is a previous
// DIR moved to DIR.old, DIR.tmp renamed to DIR and DIR.old removed. What the export did not
// create is never touched: a DIR.tmp or DIR.old already there is refused at start-up, and DIR
// is replaced only when it is a previous export of fsdp.c, recognized by its contents (exactly
// config.json and model.safetensors, and the tokenizer files an export may add) and by the
// writer its safetensors header records (__metadata__ {"writer": "fsdp.c"}).
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "infra/dist.h"
#include "infra/files.h"
#include "infra/json.h"
#include "weights/tensor_file.h"
#include "weights/weights.h"

typedef struct {
  Piece piece;
  int64_t start;  // byte offset in the file
} OutTensor;

#define EXPORT_WRITER "fsdp.c"  // __metadata__.writer of our exports: how an earlier export is recognized

static WeightsFormat export_format(const ModelConfig* cfg) {
  return cfg->kind == MODEL_T5 ? FMT_HF_T5 : cfg->kind == MODEL_LLAMA ? FMT_HF_LLAMA : FMT_HF_GPT2;
}
// save_pretrained of GPT2LMHeadModel names the body "transformer."; from_pretrained takes both.
static const char* export_prefix(const ModelConfig* cfg) { return cfg->kind == MODEL_GPT ? "transformer." : ""; }

// The tensors in file order and the header; returns the header's length (a multiple of 8).
static int64_t layout(FSDP* fs, const ModelConfig* cfg, OutTensor** out, int* n, char** header) {
  int cap = 16, count = 0;
  OutTensor* t = xmalloc(cap * sizeof *t, "export table");
  size_t hcap = 1 << 16, h = 0;
  char* text = xmalloc(hcap, "export header");
  h += snprintf(text, hcap, "{\"__metadata__\":{\"format\":\"pt\",\"writer\":\"" EXPORT_WRITER "\"}");
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

// config.json (transformers' names) into path, fsynced; 0 or -1 with the reason.
static int write_config(const ModelConfig* c, const char* path, char* err, size_t errlen) {
  char text[3072];
  if (c->kind == MODEL_LLAMA) {
    // Llama 3's token ids for the vocabulary of 128256; a smaller one has no special tokens.
    char ids[96] = "", scaling[320] = "null";
    if (c->V == 128256) snprintf(ids, sizeof ids, "  \"bos_token_id\": 128000,\n  \"eos_token_id\": 128001,\n");
    if (c->rope.factor > 0)
      snprintf(scaling, sizeof scaling, "{\"rope_type\": \"llama3\", \"factor\": %.1f, \"low_freq_factor\": %.1f, "
               "\"high_freq_factor\": %.1f, \"original_max_position_embeddings\": %d}", c->rope.factor,
               c->rope.low_freq_factor, c->rope.high_freq_factor, c->rope.original_context);
    snprintf(text, sizeof text,
             "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
             "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
             "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
             "  \"hidden_act\": \"silu\",\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %.1e,\n"
             "  \"rope_theta\": %.1f,\n  \"rope_scaling\": %s,\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
             "  \"attention_dropout\": 0.0,\n  \"tie_word_embeddings\": %s,\n%s  \"torch_dtype\": \"float32\"\n}\n",
             c->V, c->C, c->F, c->L, c->H, c->KV, c->D, c->T, (double)c->norm_eps, (double)c->rope.theta, scaling,
             c->tied ? "true" : "false", ids);
  } else if (c->kind == MODEL_GPT) {
    int eos = c->V > 50256 ? 50256 : c->V - 1;  // GPT-2's <|endoftext|>, or the last id of a small vocabulary
    snprintf(text, sizeof text,
             "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
             "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n  \"n_layer\": %d,\n"
             "  \"n_head\": %d,\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
             "  \"layer_norm_epsilon\": 1e-05,\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
             "  \"tie_word_embeddings\": true,\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n"
             "  \"torch_dtype\": \"float32\"\n}\n", c->V, c->T, c->T, c->C, c->L, c->H, eos, eos);
  } else {
    snprintf(text, sizeof text,
             "{\n  \"architectures\": [\"T5ForConditionalGeneration\"],\n  \"model_type\": \"t5\",\n"
             "  \"vocab_size\": %d,\n  \"d_model\": %d,\n  \"d_kv\": %d,\n  \"d_ff\": %d,\n  \"num_layers\": %d,\n"
             "  \"num_decoder_layers\": %d,\n  \"num_heads\": %d,\n  \"relative_attention_num_buckets\": 32,\n"
             "  \"relative_attention_max_distance\": 128,\n  \"feed_forward_proj\": \"%s\",\n"
             "  \"tie_word_embeddings\": %s,\n  \"layer_norm_epsilon\": 1e-06,\n  \"dropout_rate\": 0.0,\n"
             "  \"is_encoder_decoder\": true,\n  \"decoder_start_token_id\": 0,\n  \"pad_token_id\": 0,\n"
             "  \"eos_token_id\": 1,\n  \"torch_dtype\": \"float32\"\n}\n", c->V, c->C, c->D, c->F, c->L, c->Ld, c->H,
             c->gated ? "gated-gelu" : "relu", c->tied ? "true" : "false");
  }
  int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return set_error(err, errlen, "cannot create %s: %s", path, strerror(errno));
  if (file_pwrite_all(fd, text, strlen(text), 0)) {
    int e = errno;
    close(fd);
    return set_error(err, errlen, "writing %s failed: %s", path, strerror(e));
  }
  if (fsync(fd) != 0 || close(fd) != 0) return set_error(err, errlen, "writing %s failed: %s", path, strerror(errno));
  return 0;
}

// pwrite of exactly `bytes` (a short write without an error is a full disk).
static int pwrite_all(int fd, const void* buf, size_t bytes, off_t at, const char* path, char* err, size_t errlen) {
  if (file_pwrite_all(fd, buf, bytes, at)) return set_error(err, errlen, "writing %s failed: %s", path, strerror(errno));
  return 0;
}

// Writes piece-local elements [x0, x1) of piece pc, taken from src[x - x0].
static int write_piece(int fd, const char* path, const OutTensor* t, int64_t x0, int64_t x1, const float* src,
                       float* column, char* err, size_t errlen) {
  const Piece* pc = &t->piece;
  if (!pc->transposed)
    return pwrite_all(fd, src, (size_t)(x1 - x0) * 4, (off_t)(t->start + x0 * 4), path, err, errlen);
  int64_t cols = pc->cols, rows = pc->rows, i0 = x0 / cols, i1 = (x1 - 1) / cols;
  for (int64_t j = 0; j < cols; j++) {
    int64_t lo = i0 + (i0 * cols + j < x0), hi = i1 - (i1 * cols + j >= x1);
    if (lo > hi) continue;
    for (int64_t i = lo; i <= hi; i++) column[i - lo] = src[i * cols + j - x0];
    if (pwrite_all(fd, column, (size_t)(hi - lo + 1) * 4, (off_t)(t->start + (j * rows + lo) * 4), path, err, errlen))
      return -1;
  }
  return 0;
}

// The files an export writes: the model's two, then the tokenizer's, which an export has when the
// training data had them.
static const char* const EXPORT_FILES[] = {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
                                           "tokenizer.bin"};
#define EXPORT_REQUIRED 2
#define EXPORT_NFILES 5

// Whether dir is a previous export of fsdp.c (a directory holding config.json and
// model.safetensors (and tokenizer files) and nothing else, regular files, whose safetensors
// header names fsdp.c as its writer) or an empty directory, which an export may replace: nothing
// of anyone's is in it. 0 when it is either, -1 with what it is instead.
static int previous_export(const char* opt, const char* dir, char* err, size_t errlen) {
  struct stat st;
  if (lstat(dir, &st) != 0) return set_error(err, errlen, "%s %s: %s", opt, dir, strerror(errno));
  if (S_ISLNK(st.st_mode))
    return set_error(err, errlen, "%s %s is a symbolic link; give the directory itself (an export replaces it)", opt, dir);
  if (!S_ISDIR(st.st_mode)) return set_error(err, errlen, "%s %s: a file of that name exists; choose another path", opt, dir);
  DIR* d = opendir(dir);
  if (!d) return set_error(err, errlen, "%s %s: cannot read it: %s", opt, dir, strerror(errno));
  struct dirent* e;
  int rc = 0, files = 0;
  while (!rc && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    int known = -1;
    for (int i = 0; i < EXPORT_NFILES; i++)
      if (!strcmp(e->d_name, EXPORT_FILES[i])) known = i;
    if (known < 0 || lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
      rc = set_error(err, errlen, "%s %s holds '%s', so it is not an earlier export; choose another path", opt, dir, e->d_name);
    files += known >= 0 && known < EXPORT_REQUIRED;
  }
  closedir(d);
  if (rc) return -1;
  if (files == 0) return 0;  // an empty directory, made ready for the export
  if (files != 2) return set_error(err, errlen, "%s %s exists and is not an earlier export (it lacks config.json or "
                                   "model.safetensors); choose another path", opt, dir);
  char path[4400], why[4400] = "", writer[64] = "";
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  JsonDoc doc;
  int parsed = safetensors_read_header(path, &doc, why, sizeof why) == 0;
  if (parsed) {
    int32_t meta = json_get(&doc, 0, "__metadata__"), w = json_get(&doc, meta, "writer");
    if (w >= 0 && json_type(&doc, w) == JSON_STRING) snprintf(writer, sizeof writer, "%s", json_str(&doc, w));
    json_free(&doc);
  }
  if (!parsed || strcmp(writer, EXPORT_WRITER))
    return set_error(err, errlen, "%s %s holds a model that fsdp.c did not export (its model.safetensors %s); an export "
                     "replaces only its own earlier exports: choose another path", opt, dir,
                     parsed ? "does not name fsdp.c as its writer" : "cannot be read");
  return 0;
}

int weights_export_check(const char* opt, const char* dir, char* err, size_t errlen) {
  const char* base = strrchr(dir, '/');
  base = base ? base + 1 : dir;
  if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
    return set_error(err, errlen, "%s '%s': name the directory to write (e.g. out/hf), not '', '/', '.' or '..'", opt, dir);
  if (path_fits(opt, dir, ".lock", err, errlen) || path_fits(opt, dir, ".tmp/model.safetensors", err, errlen)) return -1;
  char parent[4200];
  snprintf(parent, sizeof parent, "%.*s", (int)(base - dir), dir);
  if (!parent[0]) snprintf(parent, sizeof parent, ".");
  struct stat st;
  if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
    return set_error(err, errlen, "%s %s: the directory %s does not exist; create it first", opt, dir, parent);
  if (access(parent, W_OK | X_OK) != 0)
    return set_error(err, errlen, "%s %s: cannot create files in %s (%s)", opt, dir, parent, strerror(errno));
  const char* suffixes[2] = {".tmp", ".old"};
  for (int i = 0; i < 2; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s%s", dir, suffixes[i]);
    if (lstat(path, &st) == 0)
      return set_error(err, errlen, "%s %s: %s already exists; the export writes %s itself and never touches what it did "
                       "not create. If it is left from an interrupted export, remove it; else choose another path", opt, dir,
                       path, path);
  }
  if (lstat(dir, &st) != 0) return 0;  // a new name
  return previous_export(opt, dir, err, errlen);
}

// Removes what the export created in tmp (its files, then the directory); best effort, for a
// failed export.
static void remove_own(const char* tmp) { dir_remove_named(tmp, EXPORT_FILES, EXPORT_NFILES); }

// Copies tokenizer.json, tokenizer_config.json and tokenizer.bin from src_dir (where the training
// shards are) into tmp, each fsynced; tokenizer.bin first checked to be a decode table of at
// most V tokens.
// Returns how many were copied, or -1 with the reason (the export then goes on without them:
// the model is what must not be lost).
static int copy_tokenizer(const char* src_dir, const char* tmp, int V, char* err, size_t errlen) {
  static const char* const names[] = {"tokenizer.json", "tokenizer_config.json", "tokenizer.bin"};
  int copied = 0;
  for (int i = 0; i < 3; i++) {
    char from[4400], to[4400];
    snprintf(from, sizeof from, "%s/%s", src_dir, names[i]);
    snprintf(to, sizeof to, "%s/%s", tmp, names[i]);
    struct stat st;
    if (stat(from, &st) != 0) continue;
    if (i == 2) {
      Tokenizer t;
      if (tokenizer_load(from, &t, err, errlen)) return -1;
      int vocab = t.vocab;
      tokenizer_free(&t);
      if (vocab > V) return set_error(err, errlen, "%s has %d tokens, more than the model's %d: not its tokenizer", from, vocab, V);
    }
    char* text;
    size_t len;
    if (file_read_all(from, (size_t)256 << 20, &text, &len, err, errlen)) return -1;
    int fd = open(to, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    int bad = fd < 0 || file_pwrite_all(fd, text, len, 0) || fsync(fd) != 0;
    if (fd >= 0 && close(fd) != 0) bad = 1;
    free(text);
    if (bad) return set_error(err, errlen, "cannot write %s: %s", to, strerror(errno));
    copied++;
  }
  return copied;
}

// Rank 0, once every rank's part is on disk: config.json last (it is what makes the directory
// a model for --init-from), then the earlier export replaced, only now that the new one is
// complete and only when it is one of ours (checked at start-up too; a run may last days).
// 0, or -1 with the reason.
static int finish_export(const ModelConfig* cfg, const char* dir, const char* tmp, const char* old,
                         const char* tokenizer_dir, char* err, size_t errlen) {
  char cpath[4400], why[4400];
  if (tokenizer_dir && copy_tokenizer(tokenizer_dir, tmp, cfg->V, why, sizeof why) < 0)
    fprintf(stderr, "warning: --export %s: the tokenizer beside the training data is not exported: %s\n", dir, why);
  snprintf(cpath, sizeof cpath, "%s/config.json", tmp);
  if (write_config(cfg, cpath, err, errlen)) {
    remove_own(tmp);
    return -1;
  }
  dir_sync(tmp);  // makes the new entries durable
  struct stat st;
  int had = lstat(dir, &st) == 0;
  if (had && previous_export("--export", dir, why, sizeof why))
    return set_error(err, errlen, "%s; the new export is complete in %s", why, tmp);
  if (had && rename_noreplace(dir, old) != 0)
    return set_error(err, errlen, "cannot move the earlier export %s to %s: %s; the new export is complete in %s", dir, old,
                 strerror(errno), tmp);
  if (rename_noreplace(tmp, dir) != 0) return set_error(err, errlen, "cannot rename %s to %s: %s", tmp, dir, strerror(errno));
  if (had) {
    remove_own(old);
    if (lstat(old, &st) == 0) fprintf(stderr, "warning: could not remove %s\n", old);
  }
  return 0;
}

void weights_export(FSDP* fs, const ModelConfig* cfg, const char* dir, const char* tokenizer_dir) {
  char tmp[4200], old[4200], file[4400], err[8192] = "";
  snprintf(tmp, sizeof tmp, "%s.tmp", dir);
  snprintf(old, sizeof old, "%s.old", dir);
  snprintf(file, sizeof file, "%s/model.safetensors", tmp);
  OutTensor* out;
  int n;
  char* header;
  int64_t hlen = layout(fs, cfg, &out, &n, &header);
  int64_t total = out[n - 1].start + out[n - 1].piece.rows * out[n - 1].piece.cols * 4;
  int ok = 1, created = 0;
  if (fs->world_rank == 0) {
    // mkdir fails on anything already there: what the export did not create stays as it is.
    if (mkdir(tmp, 0755) != 0) {
      set_error(err, sizeof err, "cannot create %s: %s%s", tmp, strerror(errno),
                errno == EEXIST ? " (it appeared after start-up; it is left as it is)" : "");
      ok = 0;
    }
    created = ok;
    int fd = ok ? open(file, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644) : -1;
    uint64_t len = (uint64_t)hlen;
    if (ok && fd < 0) {
      set_error(err, sizeof err, "cannot create %s: %s", file, strerror(errno));
      ok = 0;
    }
    if (ok && ftruncate(fd, (off_t)total) != 0) {
      set_error(err, sizeof err, "cannot size %s to %lld bytes: %s", file, (long long)total, strerror(errno));
      ok = 0;
    }
    if (ok && (pwrite_all(fd, &len, 8, 0, file, err, sizeof err) ||
               pwrite_all(fd, header, (size_t)hlen, 8, file, err, sizeof err)))
      ok = 0;
    if (fd >= 0 && close(fd) != 0 && ok) {
      set_error(err, sizeof err, "writing %s failed: %s", file, strerror(errno));
      ok = 0;
    }
  }
  if (!comm_all_true(fs->world, ok)) {
    if (created) remove_own(tmp);
    fatal("--export %s: %s", dir, err[0] ? err : "rank 0 could not start the export (see its message)");
  }
  if (comm_rank(fs->replica_group) == 0) {  // one replica of every shard writes it
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      set_error(err, sizeof err, "cannot open %s: %s", file, strerror(errno));
      ok = 0;
    }
    int64_t largest = 0, widest = 1;
    for (int u = 0; u < fs->nunits; u++) {
      if (fs->units[u].shard > largest) largest = fs->units[u].shard;
      for (int i = 0; i < fs->units[u].nparams; i++)
        if (fs->units[u].params[i].shape[0] > widest) widest = fs->units[u].params[i].shape[0];
    }
    float* host = xmalloc((size_t)largest * sizeof(float), "export staging");
    float* column = xmalloc((size_t)widest * sizeof(float), "export column");
    int k = 0;  // the file's tensors come in parameter order
    for (int u = 0; u < fs->nunits && ok; u++) {
      Unit* U = &fs->units[u];
      device_copy_to_host(host, U->master, (size_t)U->shard * sizeof(float));
      for (int i = 0; i < U->nparams && ok; i++) {
        const ParamInfo* p = &U->params[i];
        ShardPart s;
        int held = fsdp_shard_part(fs, U, p, p->live, &s);
        ParamMap map;
        weights_map_param(export_format(cfg), cfg, export_prefix(cfg), u, p, &map);
        for (int j = 0; j < map.npieces && ok; j++, k++) {  // every piece counts: k is the file's tensor
          const Piece* pc = &map.piece[j];
          int64_t first = pc->row0 * pc->cols, last = first + pc->rows * pc->cols;
          int64_t x0 = s.first > first ? s.first : first, x1 = s.end < last ? s.end : last;
          if (held && x0 < x1 && write_piece(fd, file, &out[k], x0 - first, x1 - first, host + s.local + (x0 - s.first), column,
                                                 err, sizeof err))
            ok = 0;
        }
      }
    }
    if (fd >= 0 && (fsync(fd) != 0 || close(fd) != 0) && ok) {
      set_error(err, sizeof err, "finishing %s failed: %s", file, strerror(errno));
      ok = 0;
    }
    free(host);
    free(column);
  }
  if (!comm_all_true(fs->world, ok)) {
    if (fs->world_rank == 0) remove_own(tmp);
    fatal("--export %s: %s; nothing was replaced", dir, err[0] ? err : "another rank failed to write its part (see its message)");
  }
  if (fs->world_rank == 0) ok = finish_export(cfg, dir, tmp, old, tokenizer_dir, err, sizeof err) == 0;
  if (!comm_all_true(fs->world, ok)) fatal("--export %s: %s", dir, err[0] ? err : "rank 0 could not finish the export");
  free(out);
  free(header);
}
