// config.c: model presets and the custom model forms.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rope.h"
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

typedef struct {
  const char* name;
  int L, C, H, KV, F, tied;
  float rope_factor;
} LlamaPreset;

// Llama 3 shapes as Meta publishes them (the config.json of each checkpoint; Llama 3 herd paper,
// table 3): vocabulary 128256, RMS norms with eps 1e-5, rotary embeddings with theta 500000 and
// the llama3 frequency scaling (low 1, high 4, original context 8192; factor 32 for the 3.2
// models, 8 for 3.1), contexts of 131072 tokens. 3.2 1B and 3B tie the lm_head to the embedding.
static const LlamaPreset llama_presets[] = {
    {"llama3.2-1b", 16, 2048, 32, 8, 8192, 1, 32.0f},      {"llama3.2-3b", 28, 3072, 24, 8, 8192, 1, 32.0f},
    {"llama3.1-8b", 32, 4096, 32, 8, 14336, 0, 8.0f},      {"llama3.1-70b", 80, 8192, 64, 8, 28672, 0, 8.0f},
    {"llama3.1-405b", 126, 16384, 128, 8, 53248, 0, 8.0f},
};
#define LLAMA_VOCAB LLAMA3_VOCAB
#define LLAMA_CONTEXT 131072
#define LLAMA_THETA 500000

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
  for (size_t i = 0; i < sizeof llama_presets / sizeof *llama_presets && o < len; i++) {
    const LlamaPreset* p = &llama_presets[i];
    o += snprintf(out + o, len - o, "  %-13s L=%d C=%d H=%d KV=%d F=%d V=%d T=%d %s\n", p->name, p->L, p->C, p->H,
                  p->KV, p->F, LLAMA_VOCAB, LLAMA_CONTEXT, p->tied ? "tied" : "untied");
  }
  if (o < len)
    o += snprintf(out + o, len - o,
                  "  gpt:L=..,C=..,H=..,V=..,T=..        custom GPT (defaults L=2,C=64,H=4,V=256,T=64)\n"
                  "  t5:L=..,M=..,C=..,H=..,D=..,F=..,V=..  custom T5 v1.0 (M decoder blocks, default M=L;\n"
                  "  t5v1.1:...                          defaults L=2,C=64,H=4,D=16,F=128,V=512)\n"
                  "  llama:L=..,C=..,H=..,KV=..,F=..,V=..,T=..,theta=..,scaling=..,tied=..,eps=..\n"
                  "                                      custom Llama (defaults L=2,C=64,H=4,KV=2,F=160,V=256,\n"
                  "                                      T=64, theta=500000, scaling=0: none, else Llama 3.1's\n"
                  "                                      with that factor, tied=0, eps=5: norms' epsilon 1e-5)\n");
}

// A key of a custom form and the smallest value it takes (1, or 0 for a switch or a "none").
typedef struct {
  const char* name;
  int min;
} FormKey;

// Parses "K=v,K=v" into vals[i] for keys[i] (names matched whole).
static int parse_kv(const char* s, const FormKey* keys, int nkeys, int* vals, char* err, size_t errlen) {
  char names[128] = "";
  for (int i = 0; i < nkeys; i++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? "," : "", keys[i].name);
  while (*s) {
    const char* eq = strchr(s, '=');
    const char* comma = strchr(s, ',');
    int k = -1;
    for (int i = 0; eq && (!comma || eq < comma) && i < nkeys; i++)
      if ((size_t)(eq - s) == strlen(keys[i].name) && !strncmp(s, keys[i].name, (size_t)(eq - s))) k = i;
    if (k < 0) {
      snprintf(err, errlen, "bad key in '%s': expected one of the keys %s as K=value, separated by commas", s, names);
      return -1;
    }
    char* end;
    // Digits only: strtol would also take leading blanks (a TAB would then reach meta.json) and a sign.
    long v = eq[1] >= '0' && eq[1] <= '9' ? strtol(eq + 1, &end, 10) : (end = (char*)eq + 1, 0);
    if (end == eq + 1 || (*end && *end != ',') || v < keys[k].min || v > 1 << 24) {
      snprintf(err, errlen, "bad value for %s in '%s': expected an integer from %d to %d", keys[k].name, s, keys[k].min,
               1 << 24);
      return -1;
    }
    vals[k] = (int)v;
    s = *end ? end + 1 : end;
  }
  return 0;
}

static void gpt_config(ModelConfig* c, const char* name, int L, int C, int H, int V, int T) {
  *c = (ModelConfig){.kind = MODEL_GPT, .L = L, .C = C, .H = H, .KV = H, .D = C / H, .F = 4 * C, .V = V,
                     .Vp = pad_vocab(V), .T = T, .tied = 1};
  snprintf(c->name, sizeof c->name, "%s", name);
}

static void t5_config(ModelConfig* c, const char* name, int L, int Ld, int C, int H, int D, int F, int V, int gated) {
  *c = (ModelConfig){.kind = MODEL_T5, .L = L, .Ld = Ld, .C = C, .H = H, .KV = H, .D = D, .F = F, .V = V,
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

// Llama 3.1's frequency scaling with the given factor (0: none), its other constants as every
// Llama 3.1 and 3.2 config.json has them.
static RopeConfig llama_rope(int theta, float factor) {
  if (factor <= 0) return (RopeConfig){.theta = (float)theta};
  return (RopeConfig){.theta = (float)theta, .factor = factor, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                      .original_context = 8192};
}

static void llama_config(ModelConfig* c, const char* name, int L, int C, int H, int KV, int F, int V, int T, int tied,
                         RopeConfig rope, int eps_exponent) {
  *c = (ModelConfig){.kind = MODEL_LLAMA, .L = L, .C = C, .H = H, .KV = KV, .D = C / H, .F = F, .V = V,
                     .Vp = pad_vocab(V), .T = T, .tied = tied, .norm_eps = (float)pow(10.0, -eps_exponent),
                     .rope = rope};
  snprintf(c->name, sizeof c->name, "%s", name);
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
  for (size_t i = 0; i < sizeof llama_presets / sizeof *llama_presets; i++) {
    const LlamaPreset* p = &llama_presets[i];
    if (!strcmp(spec, p->name)) {
      llama_config(cfg, spec, p->L, p->C, p->H, p->KV, p->F, LLAMA_VOCAB, LLAMA_CONTEXT, p->tied,
                   llama_rope(LLAMA_THETA, p->rope_factor), 5);
      return 0;
    }
  }
  if (!strncmp(spec, "gpt:", 4) || !strcmp(spec, "gpt")) {
    static const FormKey keys[] = {{"L", 1}, {"C", 1}, {"H", 1}, {"V", 1}, {"T", 1}};
    int vals[5] = {2, 64, 4, 256, 64};  // L, C, H, V, T
    if (spec[3] == ':' && parse_kv(spec + 4, keys, 5, vals, err, errlen)) return -1;
    if (vals[1] % vals[2]) {
      snprintf(err, errlen, "model %s: the width C=%d must be divisible by the number of heads H=%d", spec, vals[1], vals[2]);
      return -1;
    }
    gpt_config(cfg, spec, vals[0], vals[1], vals[2], vals[3], vals[4]);
  } else if (!strncmp(spec, "t5:", 3) || !strncmp(spec, "t5v1.1:", 7)) {
    int gated = spec[2] == 'v';
    static const FormKey keys[] = {{"L", 1}, {"M", 1}, {"C", 1}, {"H", 1}, {"D", 1}, {"F", 1}, {"V", 1}};
    int vals[7] = {2, 0, 64, 4, 16, 128, 512};  // L, M, C, H, D, F, V
    if (parse_kv(spec + (gated ? 7 : 3), keys, 7, vals, err, errlen)) return -1;
    t5_config(cfg, spec, vals[0], vals[1] ? vals[1] : vals[0], vals[2], vals[3], vals[4], vals[5], vals[6], gated);
  } else if (!strncmp(spec, "llama:", 6) || !strcmp(spec, "llama")) {
    static const FormKey keys[] = {{"L", 1}, {"C", 1}, {"H", 1}, {"KV", 1}, {"F", 1}, {"V", 1}, {"T", 1},
                                   {"theta", 1}, {"scaling", 0}, {"tied", 0}, {"eps", 1}};
    int vals[11] = {2, 64, 4, 2, 160, 256, 64, LLAMA_THETA, 0, 0, 5};  // in the order of keys
    if (spec[5] == ':' && parse_kv(spec + 6, keys, 11, vals, err, errlen)) return -1;
    int C = vals[1], H = vals[2], KV = vals[3];
    if (C % H || (C / H) % 2 || C / H > ROPE_MAX_HEAD) {
      snprintf(err, errlen, "model %s: the width C=%d must be H=%d heads of an even size of at most %d (rotary "
               "embeddings turn a head's columns in pairs)", spec, C, H, ROPE_MAX_HEAD);
      return -1;
    }
    if (H % KV) {
      snprintf(err, errlen, "model %s: the key/value heads KV=%d must divide the query heads H=%d (each key/value "
               "head serves H/KV query heads)", spec, KV, H);
      return -1;
    }
    if (vals[9] > 1) {
      snprintf(err, errlen, "model %s: tied=%d: expected 0 (an lm_head of its own) or 1 (the embedding's)", spec, vals[9]);
      return -1;
    }
    if (vals[10] > 12) {
      snprintf(err, errlen, "model %s: eps=%d: the norms' epsilon is 10^-eps, eps from 1 to 12", spec, vals[10]);
      return -1;
    }
    llama_config(cfg, spec, vals[0], C, H, KV, vals[4], vals[5], vals[6], vals[9], llama_rope(vals[7], (float)vals[8]),
                 vals[10]);
  } else {
    char list[4096];
    model_list_presets(list, sizeof list);
    snprintf(err, errlen, "unknown model '%s'; known models:\n%s", spec, list);
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

// Llama: the q, k and v projections make H + 2 KV heads (grouped-query attention shares KV of
// them), the scores and weighted values use all H query heads, and SwiGLU's gate and up are two
// products of C x F beside the down projection. The lm_head is there tied or not.
double llama_flops(const ModelConfig* c, int B, int T, int Te) {
  (void)Te;  // no encoder
  double N = (double)B * T, C = c->C, D = c->D, HD = (double)c->H * D;
  double block = 2 * N * C * (c->H + 2.0 * c->KV) * D                // q, k, v
                 + 2 * 2 * B * attention_pairs(T, T, 1) * HD        // scores and weighted values
                 + 2 * N * HD * C                                   // output projection
                 + 2 * N * C * c->F * 2 + 2 * N * c->F * C;         // gate and up, down
  double forward = c->L * block + 2 * N * C * c->Vp;                  // + lm_head
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
