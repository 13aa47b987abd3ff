// names.c: our parameters and the tensors of GPT-2 (Hugging Face, llm.c) and T5 (Hugging Face),
// and the model a file holds (its config.json or llm.c header).
//
// GPT-2 (transformers' GPT2Model): its Conv1D layers store weights as [in, out], ours are
// [out, in] like torch.nn.Linear, so c_attn, c_proj and c_fc are transposed; c_attn's columns
// are q | k | v, the order of our fused qkv rows. llm.c stores [out, in] already.
// T5 (transformers' T5ForConditionalGeneration): separate q, k, v, o; ours fuse q | k | v of
// self-attention and k | v of cross-attention as row blocks, and v1.1's wi_0 (the GELU gate)
// and wi_1 (the linear half) as the rows [0, F) and [F, 2F) of mlp.wi. The relative position
// bias tables live in block 0 of each stack. Vocabulary padding rows (V..Vp) have no
// counterpart: only the V live rows are read and written.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weights/tensor_file.h"
#include "weights/weights.h"

__attribute__((format(printf, 3, 4))) static int fail(char* err, size_t errlen, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

// GPT block parameters: our name, the Hugging Face suffix after "h.<l>.", Conv1D (transposed),
// the llm.c name (before ".<l>").
static const struct {
  const char *ours, *hf;
  int conv1d;
  const char* llmc;
} GPT_BLOCK[] = {
    {"ln1.weight", "ln_1.weight", 0, "ln1w"},          {"ln1.bias", "ln_1.bias", 0, "ln1b"},
    {"attn.qkv.weight", "attn.c_attn.weight", 1, "qkvw"}, {"attn.qkv.bias", "attn.c_attn.bias", 0, "qkvb"},
    {"attn.proj.weight", "attn.c_proj.weight", 1, "attprojw"}, {"attn.proj.bias", "attn.c_proj.bias", 0, "attprojb"},
    {"ln2.weight", "ln_2.weight", 0, "ln2w"},          {"ln2.bias", "ln_2.bias", 0, "ln2b"},
    {"mlp.fc.weight", "mlp.c_fc.weight", 1, "fcw"},    {"mlp.fc.bias", "mlp.c_fc.bias", 0, "fcb"},
    {"mlp.proj.weight", "mlp.c_proj.weight", 1, "fcprojw"}, {"mlp.proj.bias", "mlp.c_proj.bias", 0, "fcprojb"},
};
static const struct {
  const char *ours, *hf, *llmc;
} GPT_ROOT[] = {
    {"wte", "wte.weight", "wte"}, {"wpe", "wpe.weight", "wpe"},
    {"lnf.weight", "ln_f.weight", "lnfw"}, {"lnf.bias", "ln_f.bias", "lnfb"},
};

// Appends a piece of `rows` rows to the map (rows follow the previous piece's).
static void add_piece(ParamMap* m, const ParamInfo* p, int64_t rows, int transposed, const char* fmt, ...) {
  Piece* pc = &m->piece[m->npieces];
  memset(pc, 0, sizeof *pc);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pc->name, sizeof pc->name, fmt, ap);
  va_end(ap);
  pc->cols = p->ndim == 2 ? p->shape[1] : 1;
  pc->row0 = m->npieces ? m->piece[m->npieces - 1].row0 + m->piece[m->npieces - 1].rows : 0;
  pc->rows = rows;
  pc->ndim = p->ndim;
  pc->transposed = transposed;
  m->npieces++;
}

static int map_gpt(WeightsFormat f, const char* prefix, int unit, const ParamInfo* p, ParamMap* m) {
  int64_t rows = p->live / (p->ndim == 2 ? p->shape[1] : 1);
  if (unit == 0) {
    for (size_t i = 0; i < sizeof GPT_ROOT / sizeof *GPT_ROOT; i++)
      if (!strcmp(p->name, GPT_ROOT[i].ours)) {
        if (f == FMT_LLMC) add_piece(m, p, rows, 0, "%s", GPT_ROOT[i].llmc);
        else add_piece(m, p, rows, 0, "%s%s", prefix, GPT_ROOT[i].hf);
        return 0;
      }
    return -1;
  }
  int l = unit - 1;
  for (size_t i = 0; i < sizeof GPT_BLOCK / sizeof *GPT_BLOCK; i++)
    if (!strcmp(p->name, GPT_BLOCK[i].ours)) {
      if (f == FMT_LLMC) add_piece(m, p, rows, 0, "%s.%d", GPT_BLOCK[i].llmc, l);
      else add_piece(m, p, rows, GPT_BLOCK[i].conv1d, "%sh.%d.%s", prefix, l, GPT_BLOCK[i].hf);
      return 0;
    }
  return -1;
}

static int map_t5(const ModelConfig* c, int unit, const ParamInfo* p, ParamMap* m) {
  int64_t rows = p->live / (p->ndim == 2 ? p->shape[1] : 1), I = (int64_t)c->H * c->D;
  const char* n = p->name;
  if (unit == 0) {
    if (!strcmp(n, "shared.weight")) add_piece(m, p, rows, 0, "shared.weight");
    else if (!strcmp(n, "lm_head.weight")) add_piece(m, p, rows, 0, "lm_head.weight");
    else if (!strcmp(n, "encoder.rel_bias"))
      add_piece(m, p, rows, 0, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    else if (!strcmp(n, "decoder.rel_bias"))
      add_piece(m, p, rows, 0, "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    else if (!strcmp(n, "encoder.final_norm.weight")) add_piece(m, p, rows, 0, "encoder.final_layer_norm.weight");
    else if (!strcmp(n, "decoder.final_norm.weight")) add_piece(m, p, rows, 0, "decoder.final_layer_norm.weight");
    else return -1;
    return 0;
  }
  int dec = unit > c->L, l = dec ? unit - 1 - c->L : unit - 1;
  char b[64];
  snprintf(b, sizeof b, "%s.block.%d.layer", dec ? "decoder" : "encoder", l);
  int ff = dec ? 2 : 1;  // the feed-forward layer's index in the block
  if (!strcmp(n, "ln1.weight")) add_piece(m, p, rows, 0, "%s.0.layer_norm.weight", b);
  else if (!strcmp(n, "attn.qkv.weight")) {
    add_piece(m, p, I, 0, "%s.0.SelfAttention.q.weight", b);
    add_piece(m, p, I, 0, "%s.0.SelfAttention.k.weight", b);
    add_piece(m, p, I, 0, "%s.0.SelfAttention.v.weight", b);
  } else if (!strcmp(n, "attn.o.weight")) add_piece(m, p, rows, 0, "%s.0.SelfAttention.o.weight", b);
  else if (!strcmp(n, "ln2.weight")) add_piece(m, p, rows, 0, "%s.1.layer_norm.weight", b);
  else if (dec && !strcmp(n, "cross.q.weight")) add_piece(m, p, rows, 0, "%s.1.EncDecAttention.q.weight", b);
  else if (dec && !strcmp(n, "cross.kv.weight")) {
    add_piece(m, p, I, 0, "%s.1.EncDecAttention.k.weight", b);
    add_piece(m, p, I, 0, "%s.1.EncDecAttention.v.weight", b);
  } else if (dec && !strcmp(n, "cross.o.weight")) add_piece(m, p, rows, 0, "%s.1.EncDecAttention.o.weight", b);
  else if (dec && !strcmp(n, "ln3.weight")) add_piece(m, p, rows, 0, "%s.2.layer_norm.weight", b);
  else if (!strcmp(n, "mlp.wi.weight")) {
    if (c->gated) {
      add_piece(m, p, c->F, 0, "%s.%d.DenseReluDense.wi_0.weight", b, ff);
      add_piece(m, p, c->F, 0, "%s.%d.DenseReluDense.wi_1.weight", b, ff);
    } else add_piece(m, p, rows, 0, "%s.%d.DenseReluDense.wi.weight", b, ff);
  } else if (!strcmp(n, "mlp.wo.weight")) add_piece(m, p, rows, 0, "%s.%d.DenseReluDense.wo.weight", b, ff);
  else return -1;
  return 0;
}

int weights_map_param(WeightsFormat format, const ModelConfig* cfg, const char* prefix, int unit,
                      const ParamInfo* p, ParamMap* map) {
  map->npieces = 0;
  if (format == FMT_HF_T5) return cfg->kind == MODEL_T5 ? map_t5(cfg, unit, p, map) : -1;
  return cfg->kind == MODEL_GPT ? map_gpt(format, prefix, unit, p, map) : -1;
}

int weights_ignorable(WeightsFormat format, const ModelConfig* cfg, const char* prefix, const char* name) {
  if (format == FMT_HF_GPT2) {
    // The tied lm_head, and the attention-mask buffers older checkpoints carry.
    const char* s = strrchr(name, '.');
    if (!strcmp(name, "lm_head.weight")) return 1;
    return s && strstr(name, "attn.") && (!strcmp(s, ".bias") || !strcmp(s, ".masked_bias")) &&
           !strstr(name, "c_attn") && !strstr(name, "c_proj");
  }
  // T5: the stacks' copies of the shared embedding, a tied lm_head, and a cross-attention
  // position bias the original t5-small checkpoint carries but T5 never uses (transformers
  // ignores it on load too).
  if (format == FMT_HF_T5)
    return !strcmp(name, "encoder.embed_tokens.weight") || !strcmp(name, "decoder.embed_tokens.weight") ||
           (cfg->tied && !strcmp(name, "lm_head.weight")) ||
           !strcmp(name, "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight");
  return 0;
}

void piece_shape(const Piece* pc, int* ndim, int64_t shape[2]) {
  *ndim = pc->ndim;
  if (pc->ndim == 1) shape[0] = pc->rows, shape[1] = 0;
  else if (pc->transposed) shape[0] = pc->cols, shape[1] = pc->rows;
  else shape[0] = pc->rows, shape[1] = pc->cols;
}

// ---- the model a file holds ------------------------------------------------------------

// The number after "key": in config.json (flat keys; nested ones are never asked for);
// `otherwise` when the key is absent or null.
static long cfg_int(const char* text, const char* key, long otherwise) {
  char pat[80];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  const char* p = strstr(text, pat);
  if (!p) return otherwise;
  p += strlen(pat);
  while (*p == ' ' || *p == ':' || *p == '\n' || *p == '\t') p++;
  if (!strncmp(p, "null", 4)) return otherwise;
  if (!strncmp(p, "true", 4)) return 1;
  if (!strncmp(p, "false", 5)) return 0;
  char* e;
  long v = strtol(p, &e, 10);
  return e == p ? otherwise : v;
}
static void cfg_str(const char* text, const char* key, char* out, size_t cap) {
  char pat[80];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  const char* p = strstr(text, pat);
  out[0] = 0;
  if (!p) return;
  p += strlen(pat);
  while (*p == ' ' || *p == ':' || *p == '\n' || *p == '\t') p++;
  if (*p == '"') sscanf(p + 1, "%63[^\"]", out);
}

int weights_model_config(const char* path, ModelConfig* cfg, char* err, size_t errlen) {
  WeightsFormat f;
  char tensors[4200], spec[256];
  if (weights_locate(path, &f, tensors, sizeof tensors, err, errlen)) return -1;
  if (f == FMT_LLMC) {
    TensorFile tf;
    if (tensor_file_open_llmc(tensors, &tf, err, errlen)) return -1;
    // wpe is [maxT, C], qkvw.0 [3C, C]; the header's numbers were checked against the size.
    int32_t h[256];
    FILE* fp = fopen(tensors, "rb");
    size_t got = fp ? fread(h, sizeof(int32_t), 256, fp) : 0;
    if (fp) fclose(fp);
    tensor_file_close(&tf);
    if (got != 256) return fail(err, errlen, "%s: cannot read the header", tensors);
    snprintf(spec, sizeof spec, "gpt:L=%d,C=%d,H=%d,V=%d,T=%d", h[4], h[6], h[5], h[3], h[2]);
  } else {
    char dir[4200], cpath[4300];
    snprintf(dir, sizeof dir, "%s", tensors);
    char* slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    static char text[1 << 16];
    FILE* fp = fopen(cpath, "r");
    if (!fp) return fail(err, errlen, "cannot read %s", cpath);
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = 0;
    if (f == FMT_HF_GPT2) {
      long C = cfg_int(text, "n_embd", -1), inner = cfg_int(text, "n_inner", 4 * C);
      char act[64];
      cfg_str(text, "activation_function", act, sizeof act);
      if (inner != 4 * C) return fail(err, errlen, "%s: n_inner %ld; fsdp.c's GPT has an MLP of 4 x n_embd", cpath, inner);
      if (act[0] && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        return fail(err, errlen, "%s: activation_function \"%s\"; fsdp.c's GPT uses the tanh GELU (gelu_new)", cpath, act);
      if (!cfg_int(text, "tie_word_embeddings", 1))
        return fail(err, errlen, "%s: an untied lm_head; fsdp.c's GPT ties it to wte", cpath);
      snprintf(spec, sizeof spec, "gpt:L=%ld,C=%ld,H=%ld,V=%ld,T=%ld", cfg_int(text, "n_layer", -1), C,
               cfg_int(text, "n_head", -1), cfg_int(text, "vocab_size", -1), cfg_int(text, "n_positions", -1));
    } else {
      char ff[64];
      cfg_str(text, "feed_forward_proj", ff, sizeof ff);
      int gated = !strcmp(ff, "gated-gelu");
      if (ff[0] && !gated && strcmp(ff, "relu"))
        return fail(err, errlen, "%s: feed_forward_proj \"%s\"; fsdp.c's T5 has \"relu\" (v1.0) and \"gated-gelu\" (v1.1)",
                    cpath, ff);
      long tied = cfg_int(text, "tie_word_embeddings", 1);
      if (tied == gated)
        return fail(err, errlen, "%s: feed_forward_proj \"%s\" with tie_word_embeddings %s; fsdp.c's T5 v1.0 ties the "
                    "lm_head (relu) and v1.1 unties it (gated-gelu)", cpath, ff, tied ? "true" : "false");
      if (cfg_int(text, "relative_attention_num_buckets", 32) != 32 ||
          cfg_int(text, "relative_attention_max_distance", 128) != 128)
        return fail(err, errlen, "%s: relative attention with other than 32 buckets and max distance 128", cpath);
      long L = cfg_int(text, "num_layers", -1);
      snprintf(spec, sizeof spec, "%s:L=%ld,M=%ld,C=%ld,H=%ld,D=%ld,F=%ld,V=%ld", gated ? "t5v1.1" : "t5", L,
               cfg_int(text, "num_decoder_layers", L), cfg_int(text, "d_model", -1), cfg_int(text, "num_heads", -1),
               cfg_int(text, "d_kv", -1), cfg_int(text, "d_ff", -1), cfg_int(text, "vocab_size", -1));
    }
  }
  char perr[1024];
  if (model_config_parse(spec, cfg, perr, sizeof perr)) return fail(err, errlen, "%s: %s", path, perr);
  return 0;
}

int weights_config_match(const ModelConfig* given, const ModelConfig* found, char* err, size_t errlen) {
  const char* what = NULL;
  int a = 0, b = 0;
#define CHECK(field, label) \
  if (!what && given->field != found->field) what = label, a = given->field, b = found->field;
  CHECK(kind, "model family (0 GPT, 1 T5)")
  CHECK(L, "blocks L")
  CHECK(Ld, "decoder blocks M")
  CHECK(C, "width C")
  CHECK(H, "heads H")
  CHECK(D, "head size D")
  CHECK(F, "feed-forward width F")
  CHECK(V, "vocabulary V")
  CHECK(T, "positions T")
  CHECK(gated, "gated feed-forward (v1.1)")
#undef CHECK
  if (!what) return 0;
  return fail(err, errlen, "--model %s has %s = %d but the weights hold %s (%s = %d); leave --model out to take the "
              "weights' shape", given->name, what, a, found->name, what, b);
}

int weights_resolve_model(const char* spec, const char* init_from, ModelConfig* cfg, char* err, size_t errlen) {
  if (!init_from) return model_config_parse(spec, cfg, err, errlen);
  if (weights_model_config(init_from, cfg, err, errlen)) return -1;
  if (!spec) return 0;
  ModelConfig given;
  if (model_config_parse(spec, &given, err, errlen) || weights_config_match(&given, cfg, err, errlen)) return -1;
  *cfg = given;  // keep the name the user gave (a preset stays a preset)
  return 0;
}
