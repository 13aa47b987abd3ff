// config.c: model presets and the custom model form.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/model.h"

typedef struct {
  const char* name;
  int L, C, H, V, T;
} GPTPreset;

// GPT-2 shapes (Radford et al. 2019) with the 50257-token vocabulary, T = 1024, and the
// GPT-3 shapes (Brown et al. 2020, table 2.1), T = 2048. GPT-3 13B is listed there with
// d_model 5140 and 40 heads of 128; we use 5120 = 40 x 128 so the heads divide the width.
static const GPTPreset gpt_presets[] = {
    {"gpt2-124m", 12, 768, 12, 50257, 1024},  {"gpt2-350m", 24, 1024, 16, 50257, 1024},
    {"gpt2-774m", 36, 1280, 20, 50257, 1024}, {"gpt2-1.5b", 48, 1600, 25, 50257, 1024},
    {"gpt3-2.7b", 32, 2560, 32, 50257, 2048}, {"gpt3-6.7b", 32, 4096, 32, 50257, 2048},
    {"gpt3-13b", 40, 5120, 40, 50257, 2048},  {"gpt3-175b", 96, 12288, 96, 50257, 2048},
};

static int pad_vocab(int V) { return (V + 127) / 128 * 128; }

void model_list_presets(char* out, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < sizeof gpt_presets / sizeof *gpt_presets && o < len; i++) {
    const GPTPreset* p = &gpt_presets[i];
    o += snprintf(out + o, len - o, "  %-10s L=%d C=%d H=%d V=%d T=%d\n", p->name, p->L, p->C, p->H, p->V, p->T);
  }
  if (o < len)
    snprintf(out + o, len - o, "  gpt:L=..,C=..,H=..,V=..,T=..  custom (defaults L=2,C=64,H=4,V=256,T=64)\n");
}

// Parses "K=v,K=v" into the given fields; keys are single letters from `keys`.
static int parse_kv(const char* s, const char* keys, int* vals, char* err, size_t errlen) {
  while (*s) {
    char key = s[0];
    const char* k = strchr(keys, key);
    if (!k || s[1] != '=') {
      snprintf(err, errlen, "bad key in '%s': expected one of the keys %s as K=value, separated by commas", s, keys);
      return -1;
    }
    char* end;
    long v = strtol(s + 2, &end, 10);
    if (end == s + 2 || (*end && *end != ',') || v < 1 || v > 1 << 24) {
      snprintf(err, errlen, "bad value for %c in '%s': expected a positive integer", key, s);
      return -1;
    }
    vals[k - keys] = (int)v;
    s = *end ? end + 1 : end;
  }
  return 0;
}

int model_config_parse(const char* spec, ModelConfig* cfg, char* err, size_t errlen) {
  memset(cfg, 0, sizeof *cfg);
  snprintf(cfg->name, sizeof cfg->name, "%s", spec);
  for (size_t i = 0; i < sizeof gpt_presets / sizeof *gpt_presets; i++) {
    const GPTPreset* p = &gpt_presets[i];
    if (!strcmp(spec, p->name)) {
      *cfg = (ModelConfig){MODEL_GPT, "", p->L, p->C, p->H, p->V, pad_vocab(p->V), p->T};
      snprintf(cfg->name, sizeof cfg->name, "%s", spec);
      return 0;
    }
  }
  if (!strncmp(spec, "gpt:", 4) || !strcmp(spec, "gpt")) {
    int vals[5] = {2, 64, 4, 256, 64};  // L, C, H, V, T
    if (spec[3] == ':' && parse_kv(spec + 4, "LCHVT", vals, err, errlen)) return -1;
    *cfg = (ModelConfig){MODEL_GPT, "", vals[0], vals[1], vals[2], vals[3], pad_vocab(vals[3]), vals[4]};
    snprintf(cfg->name, sizeof cfg->name, "%s", spec);
    if (cfg->C % cfg->H) {
      snprintf(err, errlen, "model %s: the width C=%d must be divisible by the number of heads H=%d", spec, cfg->C, cfg->H);
      return -1;
    }
    if (cfg->V > 65536) {
      snprintf(err, errlen, "model %s: V=%d exceeds 65536, the largest vocabulary uint16 token shards can hold", spec, cfg->V);
      return -1;
    }
    return 0;
  }
  char list[1024];
  model_list_presets(list, sizeof list);
  snprintf(err, errlen, "unknown model '%s'; known models:\n%s", spec, list);
  return -1;
}

double model_flops_per_step(const ModelConfig* c, int B, int T) {
  // Per token and block: qkv 3C^2, attention projection C^2, MLP 8C^2 weights (2 flops per
  // multiply-add), attention scores and weighted values 2 * T_eff * C with causal masking
  // counted in full as cuBLAS-free implementations do; lm_head C * Vp. Backward costs twice
  // the forward.
  double N = (double)B * T, C = c->C;
  double per_block = 2.0 * N * (12.0 * C * C) + 2.0 * 2.0 * (double)B * T * T * C;
  double fwd = c->L * per_block + 2.0 * N * C * c->Vp;
  return 3.0 * fwd;
}
