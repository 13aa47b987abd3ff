// source.c: where a trained model comes from, for the tools that run one (generate.c,
// export_weights.c): an fsdp.c checkpoint (fsdp/checkpoint.c) or pretrained weights (load.c).
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fsdp/checkpoint.h"
#include "weights/weights.h"

// A checkpoint is a directory with meta.json; its "model" field is the model spec it was
// trained with.
static int checkpoint_model(const char* src, char* model, size_t cap) {
  char path[4200];
  snprintf(path, sizeof path, "%s/meta.json", src);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  char text[4096];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  const char* p = strstr(text, "\"model\": \"");
  if (!p) return -1;
  p += strlen("\"model\": \"");
  const char* e = strchr(p, '"');
  if (!e || (size_t)(e - p) >= cap) return -1;
  memcpy(model, p, e - p);
  model[e - p] = 0;
  return 0;
}

int model_source_config(const char* src, ModelConfig* cfg, char* err, size_t errlen) {
  char model[256];
  if (checkpoint_model(src, model, sizeof model) == 0) return model_config_parse(model, cfg, err, errlen);
  return weights_model_config(src, cfg, err, errlen);
}

void model_source_load(FSDP* fs, const ModelConfig* cfg, const char* src) {
  char model[256];
  char used[4300];
  if (checkpoint_model(src, model, sizeof model) == 0) checkpoint_load(fs, src, cfg->name, used, sizeof used, NULL);
  else weights_load(fs, cfg, src);
}
