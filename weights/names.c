// names.c: our parameters and the tensors of GPT-2 (Hugging Face, llm.c) and T5 (Hugging Face),
// and the model a file holds (its config.json or llm.c header).
//
// GPT-2 (transformers' GPT2Model): its Conv1D layers store weights as [in, out], ours are
// [out, in] like torch.nn.Linear, so c_attn, c_proj and c_fc are transposed; c_attn's columns
// are q | k | v, the order of our fused qkv rows. llm.c stores [out, in] already.
// T5 (transformers' T5ForConditionalGeneration): separate q, k, v, o; ours fuse q | k | v of
// self-attention and k | v of cross-attention as row blocks, and v1.1's wi_0 (the GELU gate)
// and wi_1 (the linear half) as the rows [0, F) and [F, 2F) of mlp.wi. The relative position
// bias tables live in block 0 of each stack.
// Llama (transformers' LlamaForCausalLM): separate q_proj, k_proj, v_proj (H, KV and KV heads
// of D rows) are the row blocks of our fused attn.qkv, gate_proj and up_proj those of
// mlp.gate_up. transformers' q_proj and k_proj rows hold each head's rotary pairs as its two
// halves (ROPE_PAIRS_ARE_HALVES below), which is how our rotation pairs them (kernels.h).
// Vocabulary padding rows (V..Vp) have no counterpart: only the V live rows are read and
// written.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "infra/json.h"
#include "weights/tensor_file.h"
#include "weights/weights.h"
#include "infra/files.h"

// GPT block parameters: our name, the Hugging Face suffix after "h.<l>.", Conv1D (transposed),
// the llm.c name (before ".<l>"), and our shape [rows, cols] in units of C (cols 0: a vector).
static const struct {
  const char *ours, *hf;
  int conv1d;
  const char* llmc;
  int rows, cols;
} GPT_BLOCK[] = {
    {"ln1.weight", "ln_1.weight", 0, "ln1w", 1, 0},          {"ln1.bias", "ln_1.bias", 0, "ln1b", 1, 0},
    {"attn.qkv.weight", "attn.c_attn.weight", 1, "qkvw", 3, 1}, {"attn.qkv.bias", "attn.c_attn.bias", 0, "qkvb", 3, 0},
    {"attn.proj.weight", "attn.c_proj.weight", 1, "attprojw", 1, 1}, {"attn.proj.bias", "attn.c_proj.bias", 0, "attprojb", 1, 0},
    {"ln2.weight", "ln_2.weight", 0, "ln2w", 1, 0},          {"ln2.bias", "ln_2.bias", 0, "ln2b", 1, 0},
    {"mlp.fc.weight", "mlp.c_fc.weight", 1, "fcw", 4, 1},    {"mlp.fc.bias", "mlp.c_fc.bias", 0, "fcb", 4, 0},
    {"mlp.proj.weight", "mlp.c_proj.weight", 1, "fcprojw", 1, 4}, {"mlp.proj.bias", "mlp.c_proj.bias", 0, "fcprojb", 1, 0},
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

// Meta's Llama checkpoints turn the pairs (2i, 2i+1) of a head; transformers' conversion
// (convert_llama_weights_to_hf.py, permute) reorders each head's q and k rows so that pair i is
// rows i and i + D/2 of the head, the layout its rotate_half turns and every Hugging Face Llama
// holds. Our rotary kernels turn the same halves, so q_proj and k_proj rows are copied as they
// are, with no permutation either way.
#define ROPE_PAIRS_ARE_HALVES 1

static int map_llama(const ModelConfig* c, int unit, const ParamInfo* p, ParamMap* m) {
  int64_t rows = p->live / (p->ndim == 2 ? p->shape[1] : 1), D = c->D;
  const char* n = p->name;
  if (unit == 0) {
    if (!strcmp(n, "embed.weight")) add_piece(m, p, rows, 0, "model.embed_tokens.weight");
    else if (!strcmp(n, "norm.weight")) add_piece(m, p, rows, 0, "model.norm.weight");
    else if (!strcmp(n, "lm_head.weight")) add_piece(m, p, rows, 0, "lm_head.weight");
    else return -1;
    return 0;
  }
  char b[48];
  snprintf(b, sizeof b, "model.layers.%d", unit - 1);
  if (!strcmp(n, "attn_norm.weight")) add_piece(m, p, rows, 0, "%s.input_layernorm.weight", b);
  else if (!strcmp(n, "attn.qkv.weight") && ROPE_PAIRS_ARE_HALVES) {
    add_piece(m, p, c->H * D, 0, "%s.self_attn.q_proj.weight", b);
    add_piece(m, p, c->KV * D, 0, "%s.self_attn.k_proj.weight", b);
    add_piece(m, p, c->KV * D, 0, "%s.self_attn.v_proj.weight", b);
  } else if (!strcmp(n, "attn.o.weight")) add_piece(m, p, rows, 0, "%s.self_attn.o_proj.weight", b);
  else if (!strcmp(n, "mlp_norm.weight")) add_piece(m, p, rows, 0, "%s.post_attention_layernorm.weight", b);
  else if (!strcmp(n, "mlp.gate_up.weight")) {
    add_piece(m, p, c->F, 0, "%s.mlp.gate_proj.weight", b);
    add_piece(m, p, c->F, 0, "%s.mlp.up_proj.weight", b);
  } else if (!strcmp(n, "mlp.down.weight")) add_piece(m, p, rows, 0, "%s.mlp.down_proj.weight", b);
  else return -1;
  return 0;
}

int weights_map_param(WeightsFormat format, const ModelConfig* cfg, const char* prefix, int unit,
                      const ParamInfo* p, ParamMap* map) {
  map->npieces = 0;
  if (format == FMT_HF_T5) return cfg->kind == MODEL_T5 ? map_t5(cfg, unit, p, map) : -1;
  if (format == FMT_HF_LLAMA) return cfg->kind == MODEL_LLAMA ? map_llama(cfg, unit, p, map) : -1;
  return cfg->kind == MODEL_GPT ? map_gpt(format, prefix, unit, p, map) : -1;
}

int weights_ignorable(WeightsFormat format, const ModelConfig* cfg, const char* name) {
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
  // Llama: a tied lm_head's copy, and the rotary frequency buffers older checkpoints carry.
  if (format == FMT_HF_LLAMA) {
    const char* s = strrchr(name, '.');
    return (cfg->tied && !strcmp(name, "lm_head.weight")) || (s && !strcmp(s, ".inv_freq") && strstr(name, "rotary_emb"));
  }
  return 0;
}

void piece_shape(const Piece* pc, int* ndim, int64_t shape[2]) {
  *ndim = pc->ndim;
  if (pc->ndim == 1) shape[0] = pc->rows, shape[1] = 0;
  else if (pc->transposed) shape[0] = pc->cols, shape[1] = pc->rows;
  else shape[0] = pc->rows, shape[1] = pc->cols;
}

// ---- what a Hugging Face file of a model holds -------------------------------------------

void shape_text(char* out, size_t cap, int ndim, const int64_t* shape) {
  size_t o = (size_t)snprintf(out, cap, "[");
  for (int d = 0; d < ndim && o < cap; d++) o += (size_t)snprintf(out + o, cap - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (o < cap) snprintf(out + o, cap - o, "]");
}

void problem_add(ProblemList* pl, const char* fmt, ...) {
  if (++pl->count > PROBLEMS_SHOWN) return;
  size_t o = strlen(pl->text);
  if (o + 4 >= sizeof pl->text) return;
  snprintf(pl->text + o, sizeof pl->text - o, "\n  ");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pl->text + o + 3, sizeof pl->text - o - 3, fmt, ap);
  va_end(ap);
}

// One tensor a file of the model must hold: found with its shape, or a problem.
static void expect_tensor(TensorFile* tf, ProblemList* pl, int ndim, int64_t rows, int64_t cols, const char* fmt, ...) {
  char name[TENSOR_NAME_LEN + 64], want[64], have[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  int64_t shape[2] = {rows, cols};
  shape_text(want, sizeof want, ndim, shape);
  FileTensor* t = tensor_file_find(tf, name);
  if (!t) {
    problem_add(pl, "missing tensor %s (shape %s)", name, want);
    return;
  }
  t->used = 1;
  if (t->ndim != ndim || t->shape[0] != rows || (ndim == 2 && t->shape[1] != cols)) {
    shape_text(have, sizeof have, t->ndim, t->shape);
    problem_add(pl, "tensor %s has shape %s, the model needs %s", name, have, want);
  }
}

int weights_table_fits(TensorFile* tf, const ModelConfig* cfg, char* err, size_t errlen) {
  if (tf->format == FMT_LLMC) return 0;  // the table was made from the header the model was read from
  ProblemList* pl = xcalloc(1, sizeof *pl, "problem list");
  int64_t C = cfg->C, V = cfg->V, F = cfg->F, I = (int64_t)cfg->H * cfg->D;
  // Each loop stops once the list is full: a file that misses most of a huge model costs no
  // more than one that misses a little.
  if (tf->format == FMT_HF_GPT2) {
    const char* px = tf->prefix;
    expect_tensor(tf, pl, 2, V, C, "%swte.weight", px);
    expect_tensor(tf, pl, 2, cfg->T, C, "%swpe.weight", px);
    expect_tensor(tf, pl, 1, C, 0, "%sln_f.weight", px);
    expect_tensor(tf, pl, 1, C, 0, "%sln_f.bias", px);
    for (int l = 0; l < cfg->L && pl->count <= PROBLEMS_SHOWN; l++)
      for (size_t i = 0; i < sizeof GPT_BLOCK / sizeof *GPT_BLOCK; i++) {
        int64_t rows = GPT_BLOCK[i].rows * C, cols = GPT_BLOCK[i].cols * C;  // ours: [out, in]
        if (!cols) expect_tensor(tf, pl, 1, rows, 0, "%sh.%d.%s", px, l, GPT_BLOCK[i].hf);
        else if (GPT_BLOCK[i].conv1d) expect_tensor(tf, pl, 2, cols, rows, "%sh.%d.%s", px, l, GPT_BLOCK[i].hf);
        else expect_tensor(tf, pl, 2, rows, cols, "%sh.%d.%s", px, l, GPT_BLOCK[i].hf);
      }
  } else if (tf->format == FMT_HF_LLAMA) {
    int64_t HD = (int64_t)cfg->H * cfg->D, KVD = (int64_t)cfg->KV * cfg->D;
    expect_tensor(tf, pl, 2, V, C, "model.embed_tokens.weight");
    expect_tensor(tf, pl, 1, C, 0, "model.norm.weight");
    if (!cfg->tied) expect_tensor(tf, pl, 2, V, C, "lm_head.weight");
    for (int l = 0; l < cfg->L && pl->count <= PROBLEMS_SHOWN; l++) {
      char s[48];
      snprintf(s, sizeof s, "model.layers.%d", l);
      expect_tensor(tf, pl, 1, C, 0, "%s.input_layernorm.weight", s);
      expect_tensor(tf, pl, 2, HD, C, "%s.self_attn.q_proj.weight", s);
      expect_tensor(tf, pl, 2, KVD, C, "%s.self_attn.k_proj.weight", s);
      expect_tensor(tf, pl, 2, KVD, C, "%s.self_attn.v_proj.weight", s);
      expect_tensor(tf, pl, 2, C, HD, "%s.self_attn.o_proj.weight", s);
      expect_tensor(tf, pl, 1, C, 0, "%s.post_attention_layernorm.weight", s);
      expect_tensor(tf, pl, 2, F, C, "%s.mlp.gate_proj.weight", s);
      expect_tensor(tf, pl, 2, F, C, "%s.mlp.up_proj.weight", s);
      expect_tensor(tf, pl, 2, C, F, "%s.mlp.down_proj.weight", s);
    }
  } else {
    expect_tensor(tf, pl, 2, V, C, "shared.weight");
    if (!cfg->tied) expect_tensor(tf, pl, 2, V, C, "lm_head.weight");
    expect_tensor(tf, pl, 2, 32, cfg->H, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    expect_tensor(tf, pl, 2, 32, cfg->H, "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    expect_tensor(tf, pl, 1, C, 0, "encoder.final_layer_norm.weight");
    expect_tensor(tf, pl, 1, C, 0, "decoder.final_layer_norm.weight");
    for (int b = 0; b < cfg->L + cfg->Ld && pl->count <= PROBLEMS_SHOWN; b++) {
      int dec = b >= cfg->L, l = dec ? b - cfg->L : b, ff = dec ? 2 : 1;
      char s[64];
      snprintf(s, sizeof s, "%s.block.%d.layer", dec ? "decoder" : "encoder", l);
      expect_tensor(tf, pl, 1, C, 0, "%s.0.layer_norm.weight", s);
      for (const char* qkv = "qkv"; *qkv; qkv++) expect_tensor(tf, pl, 2, I, C, "%s.0.SelfAttention.%c.weight", s, *qkv);
      expect_tensor(tf, pl, 2, C, I, "%s.0.SelfAttention.o.weight", s);
      expect_tensor(tf, pl, 1, C, 0, "%s.1.layer_norm.weight", s);
      if (dec) {
        for (const char* qkv = "qkv"; *qkv; qkv++) expect_tensor(tf, pl, 2, I, C, "%s.1.EncDecAttention.%c.weight", s, *qkv);
        expect_tensor(tf, pl, 2, C, I, "%s.1.EncDecAttention.o.weight", s);
        expect_tensor(tf, pl, 1, C, 0, "%s.2.layer_norm.weight", s);
      }
      if (cfg->gated) {
        expect_tensor(tf, pl, 2, F, C, "%s.%d.DenseReluDense.wi_0.weight", s, ff);
        expect_tensor(tf, pl, 2, F, C, "%s.%d.DenseReluDense.wi_1.weight", s, ff);
      } else {
        expect_tensor(tf, pl, 2, F, C, "%s.%d.DenseReluDense.wi.weight", s, ff);
      }
      expect_tensor(tf, pl, 2, C, F, "%s.%d.DenseReluDense.wo.weight", s, ff);
    }
  }
  for (int i = 0; i < tf->ntensors && pl->count <= PROBLEMS_SHOWN; i++) {
    char have[64];
    const FileTensor* t = &tf->tensors[i];
    if (t->used || weights_ignorable(tf->format, cfg, t->name)) continue;
    shape_text(have, sizeof have, t->ndim, t->shape);
    problem_add(pl, "unexpected tensor %s (shape %s): model %s has no place for it", t->name, have, cfg->name);
  }
  for (int i = 0; i < tf->ntensors; i++) tf->tensors[i].used = 0;
  int rc = 0;
  if (pl->count)
    rc = set_error(err, errlen, "--init-from %s does not fit model %s (%s%d problem%s, nothing loaded):%s%s", tf->path, cfg->name,
                   pl->count > PROBLEMS_SHOWN ? "at least " : "", pl->count, pl->count > 1 ? "s" : "", pl->text,
                   pl->count > PROBLEMS_SHOWN ? "\n  ..." : "");
  free(pl);
  return rc;
}

// ---- the model a file holds ------------------------------------------------------------

// A model dimension of config.json: a whole number in [1, 2^24] (layers/config.c's range).
// An absent (or null) field takes `otherwise`; otherwise < 0 makes it required.
static int cfg_dim(const JsonDoc* d, const char* key, long long otherwise, long long* out, char* err, size_t errlen) {
  int32_t v = json_get(d, 0, key);
  if (v < 0 || json_type(d, v) == JSON_NULL) {
    if (otherwise < 0) return set_error(err, errlen, "%s has no \"%s\" (a whole number), which the model needs", d->what, key);
    *out = otherwise;
    return 0;
  }
  return json_int(d, v, key, 1, 1 << 24, out, err, errlen);
}
static int cfg_bool(const JsonDoc* d, const char* key, int otherwise, int* out, char* err, size_t errlen) {
  int32_t v = json_get(d, 0, key);
  if (v < 0) return *out = otherwise, 0;
  return json_bool(d, v, key, out, err, errlen);
}
static int cfg_str(const JsonDoc* d, const char* key, const char* otherwise, char* out, size_t cap, char* err,
                   size_t errlen) {
  int32_t v = json_get(d, 0, key);
  if (v < 0) return snprintf(out, cap, "%s", otherwise), 0;
  return json_string(d, v, key, out, cap, err, errlen);
}

// A number of config.json in [lo, hi]; absent (or null) takes `otherwise`.
static int cfg_number(const JsonDoc* d, int32_t obj, const char* key, double otherwise, double lo, double hi, double* out,
                      char* err, size_t errlen) {
  int32_t v = json_get(d, obj, key);
  if (v < 0 || json_type(d, v) == JSON_NULL) return *out = otherwise, 0;
  return json_number(d, v, key, lo, hi, out, err, errlen);
}

// A whole number written as a float (rope_theta 500000.0, factor 8.0): its value, or -1.
static long long whole(double x) { return x >= 1 && x <= (1 << 24) && x == (double)(long long)x ? (long long)x : -1; }

// Llama's spec: the shape, rope_theta and the llama3 rope_scaling (its factor; the other three
// constants as Llama 3.1 has them), rms_norm_eps as 1e-k, the tied lm_head. What fsdp.c's
// Llama does not compute (other activations, biases, other scalings) is refused by name.
static int llama_spec(const JsonDoc* d, char* spec, size_t cap, char* err, size_t errlen) {
  const char* cpath = d->what;
  long long L, C, H, KV, F, V, T, head_dim;
  double theta, eps;
  int tied, abias, mbias;
  char act[64];
  if (cfg_dim(d, "num_hidden_layers", -1, &L, err, errlen) || cfg_dim(d, "hidden_size", -1, &C, err, errlen) ||
      cfg_dim(d, "num_attention_heads", -1, &H, err, errlen) || cfg_dim(d, "num_key_value_heads", H, &KV, err, errlen) ||
      cfg_dim(d, "intermediate_size", -1, &F, err, errlen) || cfg_dim(d, "vocab_size", -1, &V, err, errlen) ||
      cfg_dim(d, "max_position_embeddings", -1, &T, err, errlen) || cfg_dim(d, "head_dim", C / H, &head_dim, err, errlen) ||
      cfg_str(d, "hidden_act", "silu", act, sizeof act, err, errlen) ||
      cfg_bool(d, "tie_word_embeddings", 0, &tied, err, errlen) || cfg_bool(d, "attention_bias", 0, &abias, err, errlen) ||
      cfg_bool(d, "mlp_bias", 0, &mbias, err, errlen) ||
      cfg_number(d, 0, "rope_theta", 10000.0, 1.0, 1e12, &theta, err, errlen) ||
      cfg_number(d, 0, "rms_norm_eps", 1e-6, 1e-30, 1.0, &eps, err, errlen))
    return -1;
  if (strcmp(act, "silu")) return set_error(err, errlen, "%s: hidden_act \"%s\"; fsdp.c's Llama uses SiLU (SwiGLU)", cpath, act);
  if (abias || mbias) return set_error(err, errlen, "%s: attention_bias or mlp_bias set; fsdp.c's Llama has no biases", cpath);
  if (head_dim * H != C)
    return set_error(err, errlen, "%s: head_dim %lld is not hidden_size / num_attention_heads = %lld / %lld", cpath,
                     head_dim, C, H);
  if (whole(theta) < 0) return set_error(err, errlen, "%s: rope_theta %g; fsdp.c takes a whole number", cpath, theta);
  int k = (int)lround(-log10(eps));
  if (k < 1 || k > 12 || fabs(eps - pow(10.0, -k)) > 1e-6 * eps)
    return set_error(err, errlen, "%s: rms_norm_eps %g; fsdp.c's Llama takes 1e-1 ... 1e-12", cpath, eps);
  long long factor = 0;
  int32_t rs = json_get(d, 0, "rope_scaling");
  if (rs >= 0 && json_type(d, rs) != JSON_NULL) {
    char type[32] = "";
    double fac, low, high, orig;
    int32_t t = json_get(d, rs, "rope_type") >= 0 ? json_get(d, rs, "rope_type") : json_get(d, rs, "type");
    if (json_type(d, rs) != JSON_OBJECT || t < 0 || json_string(d, t, "rope_scaling.rope_type", type, sizeof type, err, errlen))
      return set_error(err, errlen, "%s: rope_scaling is not an object with a rope_type", cpath);
    if (strcmp(type, "llama3"))
      return set_error(err, errlen, "%s: rope_scaling of type \"%s\"; fsdp.c has Llama 3.1's (\"llama3\")", cpath, type);
    if (cfg_number(d, rs, "factor", -1, 0, 1e9, &fac, err, errlen) ||
        cfg_number(d, rs, "low_freq_factor", -1, 0, 1e9, &low, err, errlen) ||
        cfg_number(d, rs, "high_freq_factor", -1, 0, 1e9, &high, err, errlen) ||
        cfg_number(d, rs, "original_max_position_embeddings", -1, 0, 1e9, &orig, err, errlen))
      return -1;
    if ((factor = whole(fac)) < 0 || low != 1.0 || high != 4.0 || orig != 8192.0)
      return set_error(err, errlen, "%s: rope_scaling factor %g, low_freq_factor %g, high_freq_factor %g, "
                       "original_max_position_embeddings %g; fsdp.c takes a whole factor with Llama 3.1's 1, 4 and 8192",
                       cpath, fac, low, high, orig);
  }
  snprintf(spec, cap, "llama:L=%lld,C=%lld,H=%lld,KV=%lld,F=%lld,V=%lld,T=%lld,theta=%lld,scaling=%lld,tied=%d,eps=%d", L, C,
           H, KV, F, V, T, whole(theta), factor, tied, k);
  return 0;
}

// Fields of config.json that change the model in transformers but not its tensors: fsdp.c has
// one value of each (its kernels' constants), and a file with another is refused by name rather
// than loaded as a different model. A float field is compared as the float the kernels use.
static int cfg_fixed(const JsonDoc* d, const char* model, char* err, size_t errlen) {
  double eps = 0;
  int scale = 1, by_layer = 0;
  float want = !strcmp(model, "gpt2") ? 1e-5f : 1e-6f;
  if (cfg_number(d, 0, "layer_norm_epsilon", want, 0.0, 1.0, &eps, err, errlen)) return -1;
  if ((float)eps != want)
    return set_error(err, errlen, "%s: layer_norm_epsilon %g; fsdp.c's %s normalizes with %g (another epsilon would load "
                     "as a different model): use a model with the standard value", d->what, eps,
                     !strcmp(model, "gpt2") ? "GPT-2" : "T5", (double)want);
  if (strcmp(model, "gpt2")) return 0;
  if (cfg_bool(d, "scale_attn_weights", 1, &scale, err, errlen) ||
      cfg_bool(d, "scale_attn_by_inverse_layer_idx", 0, &by_layer, err, errlen))
    return -1;
  if (!scale)
    return set_error(err, errlen, "%s: scale_attn_weights false; fsdp.c's GPT-2 scales attention scores by 1/sqrt(head "
                     "size), as the standard models do", d->what);
  if (by_layer)
    return set_error(err, errlen, "%s: scale_attn_by_inverse_layer_idx true; fsdp.c's GPT-2 does not scale attention by "
                     "the layer's index (the standard models do not)", d->what);
  return 0;
}

// The spec of the model config.json describes ("gpt:L=..", "t5:L=..", "llama:L=.."), from its
// top-level fields only (nested objects such as task_specific_params are never read; Llama's
// rope_scaling is read as its own object).
static int config_spec(const JsonDoc* d, WeightsFormat f, char* spec, size_t cap, char* err, size_t errlen) {
  const char* cpath = d->what;
  if (f == FMT_HF_LLAMA) return llama_spec(d, spec, cap, err, errlen);
  if (cfg_fixed(d, f == FMT_HF_GPT2 ? "gpt2" : "t5", err, errlen)) return -1;
  if (f == FMT_HF_GPT2) {
    long long L, C, H, V, T, inner;
    int tied;
    char act[64];
    if (cfg_dim(d, "n_layer", -1, &L, err, errlen) || cfg_dim(d, "n_embd", -1, &C, err, errlen) ||
        cfg_dim(d, "n_head", -1, &H, err, errlen) || cfg_dim(d, "vocab_size", -1, &V, err, errlen) ||
        cfg_dim(d, "n_positions", -1, &T, err, errlen) || cfg_dim(d, "n_inner", 4 * C, &inner, err, errlen) ||
        cfg_str(d, "activation_function", "gelu_new", act, sizeof act, err, errlen) ||
        cfg_bool(d, "tie_word_embeddings", 1, &tied, err, errlen))
      return -1;
    if (inner != 4 * C) return set_error(err, errlen, "%s: n_inner %lld; fsdp.c's GPT has an MLP of 4 x n_embd", cpath, inner);
    if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
      return set_error(err, errlen, "%s: activation_function \"%s\"; fsdp.c's GPT uses the tanh GELU (gelu_new)", cpath, act);
    if (!tied) return set_error(err, errlen, "%s: an untied lm_head; fsdp.c's GPT ties it to wte", cpath);
    snprintf(spec, cap, "gpt:L=%lld,C=%lld,H=%lld,V=%lld,T=%lld", L, C, H, V, T);
    return 0;
  }
  long long L, M, C, H, D, F, V, buckets, distance;
  int tied;
  char ff[64];
  if (cfg_dim(d, "num_layers", -1, &L, err, errlen) || cfg_dim(d, "num_decoder_layers", L, &M, err, errlen) ||
      cfg_dim(d, "d_model", -1, &C, err, errlen) || cfg_dim(d, "num_heads", -1, &H, err, errlen) ||
      cfg_dim(d, "d_kv", -1, &D, err, errlen) || cfg_dim(d, "d_ff", -1, &F, err, errlen) ||
      cfg_dim(d, "vocab_size", -1, &V, err, errlen) || cfg_str(d, "feed_forward_proj", "relu", ff, sizeof ff, err, errlen) ||
      cfg_bool(d, "tie_word_embeddings", 1, &tied, err, errlen) ||
      cfg_dim(d, "relative_attention_num_buckets", 32, &buckets, err, errlen) ||
      cfg_dim(d, "relative_attention_max_distance", 128, &distance, err, errlen))
    return -1;
  int gated = !strcmp(ff, "gated-gelu");
  if (!gated && strcmp(ff, "relu"))
    return set_error(err, errlen, "%s: feed_forward_proj \"%s\"; fsdp.c's T5 has \"relu\" (v1.0) and \"gated-gelu\" (v1.1)",
                     cpath, ff);
  if (tied == gated)
    return set_error(err, errlen, "%s: feed_forward_proj \"%s\" with tie_word_embeddings %s; fsdp.c's T5 v1.0 ties the "
                     "lm_head (relu) and v1.1 unties it (gated-gelu)", cpath, ff, tied ? "true" : "false");
  if (buckets != 32 || distance != 128)
    return set_error(err, errlen, "%s: relative attention with other than 32 buckets and max distance 128", cpath);
  snprintf(spec, cap, "%s:L=%lld,M=%lld,C=%lld,H=%lld,D=%lld,F=%lld,V=%lld", gated ? "t5v1.1" : "t5", L, M, C, H, D, F, V);
  return 0;
}

int weights_model_config(const char* path, ModelConfig* cfg, char* err, size_t errlen) {
  WeightsFormat f;
  char tensors[4200], spec[256], perr[1024];
  TensorFile tf;
  if (weights_locate(path, &f, tensors, sizeof tensors, err, errlen)) return -1;
  if (f == FMT_LLMC) {
    // The header's numbers, checked against the file's size by the table.
    if (tensor_file_open_llmc(tensors, &tf, err, errlen)) return -1;
    int32_t h[256];
    FILE* fp = fopen(tensors, "rb");
    size_t got = fp ? fread(h, sizeof(int32_t), 256, fp) : 0;
    if (fp) fclose(fp);
    tensor_file_close(&tf);
    if (got != 256) return set_error(err, errlen, "%s: cannot read the header", tensors);
    snprintf(spec, sizeof spec, "gpt:L=%d,C=%d,H=%d,V=%d,T=%d", h[4], h[6], h[5], h[3], h[2]);
    if (model_config_parse(spec, cfg, perr, sizeof perr)) return set_error(err, errlen, "%s: %s", path, perr);
    return 0;
  }
  char cpath[4300];
  JsonDoc d;
  if (weights_read_config(tensors, cpath, sizeof cpath, &d, err, errlen)) return -1;
  int rc = config_spec(&d, f, spec, sizeof spec, err, errlen);
  json_free(&d);
  if (rc) return -1;
  if (model_config_parse(spec, cfg, perr, sizeof perr)) return set_error(err, errlen, "%s: %s", cpath, perr);
  // The tensors must be those of that model before anything of the model's size is allocated:
  // config.json alone decides the layer count and the sequence length.
  if (tensor_file_open_hf(tensors, f, &tf, err, errlen)) return -1;
  rc = weights_table_fits(&tf, cfg, err, errlen);
  tensor_file_close(&tf);
  return rc;
}

int weights_config_match(const ModelConfig* given, const ModelConfig* found, char* err, size_t errlen) {
  const char* what = NULL;
  int a = 0, b = 0;
#define CHECK(field, label) \
  if (!what && given->field != found->field) what = label, a = given->field, b = found->field;
  CHECK(kind, "model family (0 GPT, 1 T5, 2 Llama)")
  CHECK(L, "blocks L")
  CHECK(Ld, "decoder blocks M")
  CHECK(C, "width C")
  CHECK(H, "heads H")
  CHECK(KV, "key/value heads KV")
  CHECK(D, "head size D")
  CHECK(F, "feed-forward width F")
  CHECK(V, "vocabulary V")
  CHECK(T, "positions T")
  CHECK(gated, "gated feed-forward (v1.1)")
  CHECK(tied, "an lm_head tied to the embedding")
  CHECK(rope.original_context, "rotary original context")
#undef CHECK
  if (!what && (given->rope.theta != found->rope.theta || given->rope.factor != found->rope.factor ||
                given->norm_eps != found->norm_eps))
    return set_error(err, errlen, "--model %s has rotary theta %g, scaling %g and norm eps %g but the weights hold %s (%g, "
                     "%g, %g); leave --model out to take the weights' shape", given->name, given->rope.theta,
                     given->rope.factor, given->norm_eps, found->name, found->rope.theta, found->rope.factor,
                     found->norm_eps);
  if (!what) return 0;
  return set_error(err, errlen, "--model %s has %s = %d but the weights hold %s (%s = %d); leave --model out to take the "
                   "weights' shape", given->name, what, a, found->name, what, b);
}

int weights_resolve_model(const char* spec, const char* init_from, ModelConfig* cfg, char* err, size_t errlen) {
  if (!init_from) return model_config_parse(spec, cfg, err, errlen);
  if (model_source_config(init_from, cfg, err, errlen)) return -1;  // weights, or a checkpoint's
  if (!spec) return 0;
  ModelConfig given;
  if (model_config_parse(spec, &given, err, errlen) || weights_config_match(&given, cfg, err, errlen)) return -1;
  *cfg = given;  // keep the name the user gave (a preset stays a preset)
  return 0;
}
