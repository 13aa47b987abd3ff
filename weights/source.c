// source.c: where a trained model comes from, for the tools that run one (generate.c,
// export_weights.c): an fsdp.c checkpoint (fsdp/checkpoint.c) or pretrained weights (load.c).
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fsdp/checkpoint.h"
#include "infra/dist.h"
#include "infra/json.h"
#include "weights/weights.h"

// A checkpoint is a directory with meta.json; its "model" field is the model spec it was
// trained with. 1: src is a checkpoint (model filled), 0: it is not one, -1: its meta.json
// cannot be read (the reason in err).
static int checkpoint_model(const char* src, char* model, size_t cap, char* err, size_t errlen) {
  char path[4200];
  snprintf(path, sizeof path, "%s/meta.json", src);
  struct stat st;
  if (stat(path, &st) != 0) return 0;
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

int model_source_check(const FSDP* fs, const char* src, char* err, size_t errlen) {
  char model[256];
  int ck = checkpoint_model(src, model, sizeof model, err, errlen);
  if (ck < 0) return -1;
  // Weights files were checked against their model when it was read from them.
  return ck ? checkpoint_check_source(fs, "SRC", src, model, err, errlen) : 0;
}

void model_source_load(FSDP* fs, const ModelConfig* cfg, const char* src) {
  char model[256], err[4096];
  char used[4300];
  int ck = checkpoint_model(src, model, sizeof model, err, sizeof err);
  if (ck < 0) fatal("%s", err);
  // The checkpoint's own spelling of its model (cfg was parsed from it).
  if (ck) checkpoint_load(fs, "SRC", src, model, used, sizeof used, NULL);
  else weights_load(fs, cfg, src, "SRC");
}
