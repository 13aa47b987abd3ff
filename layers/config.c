// config.c: model presets and the custom model forms.
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
// gpt-1t: the 1T-parameter shape the AWS post trains (Megatron-LM's: 128 layers, hidden 25600,
// 160 heads of 160, sequence 2048) with the same 50257-token vocabulary.
static const GPTPreset gpt_presets[] = {
    {"gpt2-124m", 12, 768, 12, 50257, 1024},  {"gpt2-350m", 24, 1024, 16, 50257, 1024},
    {"gpt2-774m", 36, 1280, 20, 50257, 1024}, {"gpt2-1.5b", 48, 1600, 25, 50257, 1024},
    {"gpt3-2.7b", 32, 2560, 32, 50257, 2048}, {"gpt3-6.7b", 32, 4096, 32, 50257, 2048},
    {"gpt3-13b", 40, 5120, 40, 50257, 2048},  {"gpt3-175b", 96, 12288, 96, 50257, 2048},
    {"gpt-1t", 128, 25600, 160, 50257, 2048},
};

typedef struct {
  const char* name;
  int L, C, H, D, F, gated;
} T5Preset;

// T5 (Raffel et al. 2020, table 14) v1.0 shapes: ReLU feed-forward, lm_head tied to the
// shared embedding; and the v1.1 shapes: gated-GELU, untied lm_head. Encoder and decoder have
// L blocks each; the vocabulary is 32128 (32100 tokens, padded for efficiency).
static const T5Preset t5_presets[] = {
    {"t5-small", 6, 512, 8, 64, 2048, 0},         {"t5-base", 12, 768, 12, 64, 3072, 0},
    {"t5-large", 24, 1024, 16, 64, 4096, 0},      {"t5-3b", 24, 1024, 32, 128, 16384, 0},
    {"t5-11b", 24, 1024, 128, 128, 65536, 0},     {"t5v1.1-small", 8, 512, 6, 64, 1024, 1},
    {"t5v1.1-base", 12, 768, 12, 64, 2048, 1},    {"t5v1.1-large", 24, 1024, 16, 64, 2816, 1},
    {"t5v1.1-xl", 24, 2048, 32, 64, 5120, 1},     {"t5v1.1-xxl", 24, 4096, 64, 64, 10240, 1},
};
#define T5_VOCAB 32128

static int pad_vocab(int V) { return (V + 127) / 128 * 128; }

void model_list_presets(char* out, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < sizeof gpt_presets / sizeof *gpt_presets && o < len; i++) {
    const GPTPreset* p = &gpt_presets[i];
    o += snprintf(out + o, len - o, "  %-13s L=%d C=%d H=%d V=%d T=%d\n", p->name, p->L, p->C, p->H, p->V, p->T);
  }
  for (size_t i = 0; i < sizeof t5_presets / sizeof *t5_presets && o < len; i++) {
    const T5Preset* p = &t5_presets[i];
    o += snprintf(out + o, len - o, "  %-13s L=%d+%d C=%d H=%d D=%d F=%d V=%d %s\n", p->name, p->L, p->L, p->C,
                  p->H, p->D, p->F, T5_VOCAB, p->gated ? "gated-GELU, untied" : "ReLU, tied");
  }
  if (o < len)
    o += snprintf(out + o, len - o,
                  "  gpt:L=..,C=..,H=..,V=..,T=..        custom GPT (defaults L=2,C=64,H=4,V=256,T=64)\n"
                  "  t5:L=..,M=..,C=..,H=..,D=..,F=..,V=..  custom T5 v1.0 (M decoder blocks, default M=L;\n"
                  "  t5v1.1:...                          defaults L=2,C=64,H=4,D=16,F=128,V=512)\n");
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
    // Digits only: strtol would also take leading blanks (a TAB would then reach meta.json) and a sign.
    long v = s[2] >= '0' && s[2] <= '9' ? strtol(s + 2, &end, 10) : (end = (char*)s + 2, 0);
    if (end == s + 2 || (*end && *end != ',') || v < 1 || v > 1 << 24) {
      snprintf(err, errlen, "bad value for %c in '%s': expected a positive integer", key, s);
      return -1;
    }
    vals[k - keys] = (int)v;
    s = *end ? end + 1 : end;
  }
  return 0;
}

static void gpt_config(ModelConfig* c, const char* name, int L, int C, int H, int V, int T) {
  *c = (ModelConfig){.kind = MODEL_GPT, .L = L, .C = C, .H = H, .D = C / H, .F = 4 * C, .V = V,
                     .Vp = pad_vocab(V), .T = T, .tied = 1};
  snprintf(c->name, sizeof c->name, "%s", name);
}

static void t5_config(ModelConfig* c, const char* name, int L, int Ld, int C, int H, int D, int F, int V, int gated) {
  *c = (ModelConfig){.kind = MODEL_T5, .L = L, .Ld = Ld, .C = C, .H = H, .D = D, .F = F, .V = V,
                     .Vp = pad_vocab(V), .gated = gated, .tied = !gated};
  snprintf(c->name, sizeof c->name, "%s", name);
}

// Every model is bounded before anything is planned from it: its blocks (the plan keeps tables
// per unit) and its parameters, counted in floating point so no product can overflow.
static int model_size_check(const ModelConfig* c, const char* spec, char* err, size_t errlen) {
  int blocks = c->L + c->Ld;
  double C = c->C, I = (double)c->H * c->D, F = c->F;
  double block = c->kind == MODEL_GPT ? 4 * C * I + 2 * C * F : 6 * C * I + 3 * C * F;  // generous for T5's decoder
  double params = (double)c->Vp * C * 2 + (double)c->T * C + blocks * (block + 16 * C);
  if (blocks > MODEL_MAX_BLOCKS) {
    snprintf(err, errlen, "model %s: %d blocks, more than the %d a model may have here", spec, blocks, MODEL_MAX_BLOCKS);
    return -1;
  }
  if (params > MODEL_MAX_PARAMS) {
    snprintf(err, errlen, "model %s: about %.3g parameters, more than the %.3g a model may have here (2^44)", spec, params,
             MODEL_MAX_PARAMS);
    return -1;
  }
  return 0;
}

int model_config_parse(const char* spec, ModelConfig* cfg, char* err, size_t errlen) {
  memset(cfg, 0, sizeof *cfg);
  for (size_t i = 0; i < sizeof gpt_presets / sizeof *gpt_presets; i++) {
    const GPTPreset* p = &gpt_presets[i];
    if (!strcmp(spec, p->name)) {
      gpt_config(cfg, spec, p->L, p->C, p->H, p->V, p->T);
      return 0;
    }
  }
  for (size_t i = 0; i < sizeof t5_presets / sizeof *t5_presets; i++) {
    const T5Preset* p = &t5_presets[i];
    if (!strcmp(spec, p->name)) {
      t5_config(cfg, spec, p->L, p->L, p->C, p->H, p->D, p->F, T5_VOCAB, p->gated);
      return 0;
    }
  }
  if (!strncmp(spec, "gpt:", 4) || !strcmp(spec, "gpt")) {
    int vals[5] = {2, 64, 4, 256, 64};  // L, C, H, V, T
    if (spec[3] == ':' && parse_kv(spec + 4, "LCHVT", vals, err, errlen)) return -1;
    if (vals[1] % vals[2]) {
      snprintf(err, errlen, "model %s: the width C=%d must be divisible by the number of heads H=%d", spec, vals[1], vals[2]);
      return -1;
    }
    gpt_config(cfg, spec, vals[0], vals[1], vals[2], vals[3], vals[4]);
  } else if (!strncmp(spec, "t5:", 3) || !strncmp(spec, "t5v1.1:", 7)) {
    int gated = spec[2] == 'v';
    int vals[7] = {2, 0, 64, 4, 16, 128, 512};  // L, M, C, H, D, F, V
    if (parse_kv(spec + (gated ? 7 : 3), "LMCHDFV", vals, err, errlen)) return -1;
    t5_config(cfg, spec, vals[0], vals[1] ? vals[1] : vals[0], vals[2], vals[3], vals[4], vals[5], vals[6], gated);
  } else {
    char list[4096];
    model_list_presets(list, sizeof list);
    snprintf(err, errlen, "unknown model '%s'; known models:\n%s", spec, list);
    return -1;
  }
  if (cfg->V > 65536) {
    snprintf(err, errlen, "model %s: V=%d exceeds 65536, the largest vocabulary uint16 token shards can hold", spec, cfg->V);
    return -1;
  }
  return model_size_check(cfg, spec, err, errlen);
}

// Score entries of an attention over Tq queries and Tk keys: causal attention computes only
// the lower triangle (key j <= query i).
static double attention_pairs(int Tq, int Tk, int causal) {
  return causal ? (double)Tq * (Tq + 1) / 2 : (double)Tq * Tk;
}

double gpt_flops(const ModelConfig* c, int B, int T, int Te) {
  (void)Te;  // no encoder
  double N = (double)B * T, C = c->C, HD = (double)c->H * c->D;
  double block = 2 * N * C * 3 * HD                                // qkv
                 + 2 * 2 * B * attention_pairs(T, T, 1) * HD      // scores and weighted values
                 + 2 * N * HD * C                                 // attention projection
                 + 2 * N * C * c->F * 2;                          // MLP up and down
  double forward = c->L * block + 2 * N * C * c->Vp;                // + lm_head
  return 3 * forward;  // backward: two products per forward product
}

double t5_flops(const ModelConfig* c, int B, int Td, int Te) {
  double Ne = (double)B * Te, Nd = (double)B * Td, C = c->C, I = (double)c->H * c->D;
  double ff_up = c->gated ? 2.0 * c->F : c->F;
  double enc = 2 * Ne * C * 3 * I + 2 * 2 * B * attention_pairs(Te, Te, 0) * I + 2 * Ne * I * C +
               2 * Ne * C * ff_up + 2 * Ne * c->F * C;
  double dec = 2 * Nd * C * 3 * I + 2 * 2 * B * attention_pairs(Td, Td, 1) * I + 2 * Nd * I * C  // self
               + 2 * Nd * C * I + 2 * Ne * C * 2 * I + 2 * 2 * B * attention_pairs(Td, Te, 0) * I +
               2 * Nd * I * C                                                                   // cross
               + 2 * Nd * C * ff_up + 2 * Nd * c->F * C;
  double forward = c->L * enc + c->Ld * dec + 2 * Nd * C * c->Vp;
  return 3 * forward;
}

// IBM post, appendix: encoder block 23Bsh^2 + 4Bs^2h, decoder block 31Bsh^2 + 8Bs^2h, four
// passes (forward, recompute forward, backward = two forwards) and 6BshV for the lm_head.
// It assumes one sequence length s for encoder and decoder and d_ff = 4h-ish shapes; it is
// printed beside the exact count for comparison with the post's numbers, not used for MFU.
double t5_flops_ibm(const ModelConfig* c, int B, int s) {
  double h = c->C, Bd = B, sd = s;
  return 4.0 * (c->L * (23 * Bd * sd * h * h + 4 * Bd * sd * sd * h) + c->Ld * (31 * Bd * sd * h * h + 8 * Bd * sd * sd * h)) +
         6 * Bd * sd * h * c->V;
}
