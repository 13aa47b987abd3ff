// source.c: where a trained model comes from, for the tools that run one (generate.c,
// export_weights.c) and --init-from: an fsdp.c checkpoint (fsdp/checkpoint.c) or pretrained
// weights (load.c).
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "data/tokenizer.h"
#include "fsdp/checkpoint.h"
#include "fsdp/checkpoint_format.h"
#include "infra/dist.h"
#include "infra/json.h"
#include "weights/weights.h"

// A checkpoint is a directory with meta.json (or a --keep-checkpoints directory of them, whose
// newest complete one counts); its "model" field is the model spec it was trained with. 1: src
// is a checkpoint (model filled), 0: it is not one, -1: its meta.json cannot be read (the reason
// in err).
static int checkpoint_model(const char* src, char* model, size_t cap, char* err, size_t errlen) {
  char path[4500], newest[4400];
  snprintf(path, sizeof path, "%s/meta.json", src);
  struct stat st;
  if (stat(path, &st) != 0) {
    if (checkpoint_newest(src, 0, newest, sizeof newest, NULL, 0) != 1) return 0;
    snprintf(path, sizeof path, "%s/meta.json", newest);
  }
  JsonDoc d;
  if (json_read_object(path, (size_t)64 << 20, &d, err, errlen)) return -1;
  int rc = json_member_string(&d, 0, "model", model, cap, err, errlen) ? -1 : 1;
  json_free(&d);
  return rc;
}

int model_source_config(const char* src, ModelConfig* cfg, char* err, size_t errlen) {
  char model[256];
  int ck = checkpoint_model(src, model, sizeof model, err, errlen);
  if (ck < 0) return -1;
  if (ck) return model_config_parse(model, cfg, err, errlen);
  return weights_model_config(src, cfg, err, errlen);
}

int model_source_tokenizer_dir(const char* src, char* dir, size_t len) {
  char path[4500], newest[4400], err[4096];
  struct stat st;
  const char* names[2] = {"tokenizer.json", "tokenizer.bin"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", src, names[i]);
    if (stat(path, &st) == 0) return snprintf(dir, len, "%s", src), 0;
  }
  snprintf(newest, sizeof newest, "%s", src);
  snprintf(path, sizeof path, "%s/meta.json", src);
  if (stat(path, &st) != 0 && checkpoint_newest(src, 0, newest, sizeof newest, NULL, 0) != 1) return -1;
  CkptSettings s;
  if (ckpt_read_settings(newest, &s, err, sizeof err)) return -1;
  int rc = -1;
  for (int i = 0; i < s.n; i++)
    if (!strcmp(s.name[i], "data")) tokenizer_dir_of(s.value[i], dir, len), rc = 0;
  ckpt_settings_free(&s);
  return rc;
}

void model_source_load(FSDP* fs, const ModelConfig* cfg, const char* src) {
  char model[256], err[4096];
  char used[4300];
  int ck = checkpoint_model(src, model, sizeof model, err, sizeof err);
  if (ck < 0) fatal("%s", err);
  if (!ck) {
    weights_load(fs, cfg, src);
    return;
  }
  checkpoint_load(fs, src, cfg->name, used, sizeof used, NULL);
  for (int u = 0; u < fs->nunits; u++)  // the weights alone, as from any other source: AdamW starts afresh
    fill_zero_f32(fs->kctx, fs->units[u].m, fs->units[u].shard), fill_zero_f32(fs->kctx, fs->units[u].v, fs->units[u].shard);
}
