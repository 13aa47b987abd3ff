// llama.c: Llama 3 (Meta, "The Llama 3 Herd of Models", 2024) on the kernels API, driven by the
// FSDP schedule.
//
// Llama differs from GPT-2 in these ways: RMS norms (weight only, eps from the config) before
// attention and feed-forward and at the end; no biases; no position embedding, but rotary
// embeddings turning q and k (kernels.h's RopeConfig: theta and Llama 3.1's frequency scaling);
// grouped-query attention, H query heads sharing KV key/value heads; a SwiGLU feed-forward,
// down(silu(gate(x)) * up(x)); an lm_head of its own (3.1) or the embedding's (3.2 1B and 3B).
//
// Units: the root (token embedding, final norm, untied lm_head) and one unit per block, or
// under --wrap linear four per block, one per matmul weight with the norm that feeds it:
// [attention norm, qkv] [o] [feed-forward norm, gate|up] [down]. Forward visits the root, the
// blocks in order, then the root again (final norm, lm_head); backward runs the reverse. The
// block is written as those four stages, which --wrap block runs inside one unit.
//
// Layout of the fused weights (rows, as PyTorch stores Linear weights): qkv is q's H heads, then
// k's KV heads, then v's KV heads, D rows each; gate|up is gate's F rows then up's F rows. The
// rotary pairs are a head's halves, the layout transformers' checkpoints hold (kernels.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "layers/model.h"

// Parameter indices inside a block unit (the same for every block).
enum { P_ATTN_NORM, P_QKV, P_O, P_MLP_NORM, P_GATE_UP, P_DOWN, NUM_BLOCK_PARAMS };
// Parameter indices inside the root unit (lm_head only when untied).
enum { R_EMBED, R_NORM, R_LM_HEAD };

enum { S_QKV, S_O, S_GATE_UP, S_DOWN, NUM_STAGES };
static const int STAGE_OF[NUM_BLOCK_PARAMS] = {S_QKV, S_QKV, S_O, S_GATE_UP, S_GATE_UP, S_DOWN};
static const int STAGE_FIRST_PARAM[NUM_STAGES] = {P_ATTN_NORM, P_O, P_MLP_NORM, P_DOWN};

static int units_per_block(int wrap) { return wrap == WRAP_LINEAR ? NUM_STAGES : 1; }

// The unit of stage s of block l, and where block parameter p sits (unit, index in it).
static int stage_unit(const Model* m, int l, int s) {
  int per = m->fs->block_units;
  return 1 + l * per + (per > 1 ? s : 0);
}
static int param_index(const Model* m, int p) {
  return m->fs->block_units > 1 ? p - STAGE_FIRST_PARAM[STAGE_OF[p]] : p;
}

// Columns of the fused q|k|v row and of attention's output.
static int qkv_width(const ModelConfig* c) { return (c->H + 2 * c->KV) * c->D; }
static int heads_width(const ModelConfig* c) { return c->H * c->D; }

// What one block saves in forward for its backward.
typedef struct {
  act_t *ln1, *qkv, *att, *res2, *ln2, *gate_up, *act, *out;
  float *rstd1, *rstd2, *lse;
} BlockActs;

typedef struct Llama {
  BlockActs* blocks;
  act_t* embedded;       // embedding output = input of block 0
  act_t* lnf;
  float* lnf_rstd;
  // backward and forward scratch, shared by all blocks
  act_t *scratch_c, *dresidual, *dln, *dqkv, *datt, *dact, *dgate_up;
  // planned regions holding every block's activations of one kind (carved per block)
  act_t *r_ln1, *r_qkv, *r_att, *r_res2, *r_ln2, *r_gate_up, *r_act;
  float *r_stats, *r_lse;
} Llama;

static void add_block_params(Model* m, int l) {
  FSDP* fs = m->fs;
  const ModelConfig* c = &m->cfg;
  int64_t C = c->C, F = c->F;
  // transformers' initializer_range 0.02, with GPT-2's 1/sqrt(2L) on the two projections that
  // write into the residual stream.
  float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * c->L);
  int64_t s_c[1] = {C}, s_qkv[2] = {qkv_width(c), C}, s_o[2] = {C, heads_width(c)}, s_gu[2] = {2 * F, C},
          s_down[2] = {C, F};
  struct { const char* name; int ndim; const int64_t* shape; InitRule init; float std; int decay; } t[NUM_BLOCK_PARAMS] = {
      {"attn_norm.weight", 1, s_c, INIT_ONE, 0, 0},          {"attn.qkv.weight", 2, s_qkv, INIT_NORMAL, std, 1},
      {"attn.o.weight", 2, s_o, INIT_NORMAL, proj_std, 1},   {"mlp_norm.weight", 1, s_c, INIT_ONE, 0, 0},
      {"mlp.gate_up.weight", 2, s_gu, INIT_NORMAL, std, 1},  {"mlp.down.weight", 2, s_down, INIT_NORMAL, proj_std, 1}};
  // Order matters: it is the flat layout (of the block, or of each stage's unit). Weight decay
  // only on matmul weights. Every parameter keeps the identity it has in the block's unit.
  for (int p = 0; p < NUM_BLOCK_PARAMS; p++) {
    int u = stage_unit(m, l, STAGE_OF[p]);
    int i = fsdp_add_param(fs, u, t[p].name, t[p].ndim, t[p].shape, t[p].init, t[p].std, t[p].decay);
    fsdp_set_home(fs, u, i, 1 + l, p);
  }
}

// Block l's pointer into a region planned for one kind of tensor: its slice (`slice` slices of
// `bytes` in).
static void slice_of(MemPlan* p, void* region, size_t slice, size_t bytes, void* block_field) {
  memplan_view(p, (void**)region, slice * bytes, (void**)block_field);
}

static void plan(Model* m) {
  const ModelConfig* cfg = &m->cfg;
  FSDP* fs = m->fs;
  int B = m->B, T = m->T;
  if (T > cfg->T) fatal("--seq %d exceeds the model's maximum sequence length T=%d", T, cfg->T);
  Llama* g = xcalloc(1, sizeof(Llama), "model");
  m->impl = g;
  int L = cfg->L;
  int64_t C = cfg->C, Vp = cfg->Vp;

  // Root unit: the token embedding, the final norm, the lm_head when untied.
  int64_t s_emb[2] = {Vp, C}, s_c[1] = {C};
  int d = fs->opt.decay_embeddings;
  fsdp_unit_name(fs, 0, "root");
  fsdp_add_param(fs, 0, "embed.weight", 2, s_emb, INIT_NORMAL, 0.02f, d);
  fsdp_set_live(fs, 0, R_EMBED, (int64_t)cfg->V * C);  // rows V..Vp-1 are vocabulary padding
  fsdp_add_param(fs, 0, "norm.weight", 1, s_c, INIT_ONE, 0, 0);
  if (!cfg->tied) {
    fsdp_add_param(fs, 0, "lm_head.weight", 2, s_emb, INIT_NORMAL, 0.02f, d);
    fsdp_set_live(fs, 0, R_LM_HEAD, (int64_t)cfg->V * C);
  }
  static const char* stage_names[NUM_STAGES] = {"attn.qkv", "attn.o", "mlp.gate_up", "mlp.down"};
  fs->block_units = units_per_block(fs->opt.wrap);
  for (int l = 0; l < L; l++) {
    for (int s = 0; s < fs->block_units; s++) {
      char name[32];
      if (fs->block_units > 1) snprintf(name, sizeof name, "block.%d.%s", l, stage_names[s]);
      else snprintf(name, sizeof name, "block.%d", l);
      fsdp_unit_name(fs, stage_unit(m, l, s), name);
    }
    add_block_params(m, l);
  }
  fsdp_finalize_layout(fs);

  // Activations: what each block saves for backward (one region per kind, L slices each), plus
  // shared scratch. Slices per kind: L when every block keeps its own, 1 when one slice is
  // refilled before each block's backward: everything but the block output (--recompute block),
  // or the cheap tensors, norms and SwiGLU (--recompute selective).
  size_t N = (size_t)B * T, H = cfg->H, QKV = qkv_width(cfg), HD = heads_width(cfg), F = cfg->F;
  MemPlan* p = &fs->plan;
  const char* A = "activations";
  int mode = fs->opt.recompute;
  size_t Lm = mode == RECOMPUTE_BLOCK ? 1 : (size_t)L;  // matmul and attention outputs
  size_t Lc = mode != RECOMPUTE_NONE ? 1 : (size_t)L;   // norms, their statistics, SwiGLU
  memplan_add_array(p, A, Lc == 1 ? "attention norm (N x C, recomputed)" : "attention norm (L x N x C)", Lc * N * C, sizeof(act_t), (void**)&g->r_ln1);
  memplan_add_array(p, A, Lm == 1 ? "qkv (N x (H+2KV)D, recomputed)" : "qkv (L x N x (H+2KV)D)", Lm * N * QKV, sizeof(act_t), (void**)&g->r_qkv);
  memplan_add_array(p, A, Lm == 1 ? "attention out (N x HD, recomputed)" : "attention out (L x N x HD)", Lm * N * HD, sizeof(act_t), (void**)&g->r_att);
  memplan_add_array(p, A, Lm == 1 ? "residual 2 (N x C, recomputed)" : "residual 2 (L x N x C)", Lm * N * C, sizeof(act_t), (void**)&g->r_res2);
  memplan_add_array(p, A, Lc == 1 ? "mlp norm (N x C, recomputed)" : "mlp norm (L x N x C)", Lc * N * C, sizeof(act_t), (void**)&g->r_ln2);
  memplan_add_array(p, A, Lm == 1 ? "gate|up (N x 2F, recomputed)" : "gate|up (L x N x 2F)", Lm * N * 2 * F, sizeof(act_t), (void**)&g->r_gate_up);
  memplan_add_array(p, A, Lc == 1 ? "swiglu (N x F, recomputed)" : "swiglu (L x N x F)", Lc * N * F, sizeof(act_t), (void**)&g->r_act);
  size_t* outs = xmalloc((size_t)L * sizeof(size_t), "block outputs");
  for (int l = 0; l < L; l++) outs[l] = (size_t)N * C;
  fsdp_plan_block_outputs(fs, L, outs);  // the block outputs: the schedule's (--offload activations)
  free(outs);
  memplan_add_array(p, A, Lc == 1 ? "norm statistics (2 x N, recomputed)" : "norm statistics (2 x L x N)", 2 * Lc * N, sizeof(float), (void**)&g->r_stats);
  memplan_add_array(p, A, Lm == 1 ? "attention lse (B x H x T, recomputed)" : "attention lse (L x B x H x T)", Lm * N * H, sizeof(float), (void**)&g->r_lse);
  memplan_add_array(p, A, "embedding out (N x C)", N * C, sizeof(act_t), (void**)&g->embedded);
  memplan_add_array(p, A, "final norm (N x C)", N * C, sizeof(act_t), (void**)&g->lnf);
  memplan_add_array(p, A, "final norm statistics", N, sizeof(float), (void**)&g->lnf_rstd);
  memplan_add_array(p, A, "logits (N x Vp)", N * Vp, sizeof(act_t), (void**)&m->logits);
  memplan_add_array(p, A, "losses (N)", N, sizeof(float), (void**)&m->losses);
  memplan_add_array(p, A, "loss sum (1)", 1, sizeof(double), (void**)&m->loss_sum);
  const char* W = "workspace";
  memplan_add_array(p, W, "scratch (N x C)", N * C, sizeof(act_t), (void**)&g->scratch_c);
  memplan_add_array(p, W, "d residual (N x C)", N * C, sizeof(act_t), (void**)&g->dresidual);
  memplan_add_array(p, W, "d norm (N x C)", N * C, sizeof(act_t), (void**)&g->dln);
  memplan_add_array(p, W, "d qkv (N x (H+2KV)D)", N * QKV, sizeof(act_t), (void**)&g->dqkv);
  memplan_add_array(p, W, "d attention (N x HD)", N * HD, sizeof(act_t), (void**)&g->datt);
  memplan_add_array(p, W, "d swiglu (N x F)", N * F, sizeof(act_t), (void**)&g->dact);
  memplan_add_array(p, W, "d gate|up (N x 2F)", N * 2 * F, sizeof(act_t), (void**)&g->dgate_up);
  memplan_add_array(p, W, "tokens (2 x N)", 2 * N, sizeof(int32_t), (void**)&m->inputs);
  memplan_view(p, (void**)&m->inputs, N * sizeof(int32_t), (void**)&m->targets);

  // Where each block's tensors lie in those regions: its own slice of a kind, or the one every
  // block shares (recomputed). Its output is where the schedule puts it (fsdp_act_out in
  // forward, fsdp_act_in in backward).
  g->blocks = xcalloc(L, sizeof(BlockActs), "activation table");
  size_t a = sizeof(act_t), f = sizeof(float);
  for (int l = 0; l < L; l++) {
    BlockActs* b = &g->blocks[l];
    size_t sm = l % Lm, sc = l % Lc;
    slice_of(p, &g->r_ln1, sc, N * C * a, &b->ln1);
    slice_of(p, &g->r_qkv, sm, N * QKV * a, &b->qkv);
    slice_of(p, &g->r_att, sm, N * HD * a, &b->att);
    slice_of(p, &g->r_res2, sm, N * C * a, &b->res2);
    slice_of(p, &g->r_ln2, sc, N * C * a, &b->ln2);
    slice_of(p, &g->r_gate_up, sm, N * 2 * F * a, &b->gate_up);
    slice_of(p, &g->r_act, sc, N * F * a, &b->act);
    slice_of(p, &g->r_stats, 0 * Lc + sc, N * f, &b->rstd1);  // two statistics, Lc slices each
    slice_of(p, &g->r_stats, 1 * Lc + sc, N * f, &b->rstd2);
    slice_of(p, &g->r_lse, sm, N * H * f, &b->lse);
  }
}

static const AttnBias no_bias = {0};  // rotary embeddings instead of a position bias
static AttnShape attn_shape(const Model* m) {
  const ModelConfig* c = &m->cfg;
  return (AttnShape){.B = m->B, .Tq = m->T, .Tk = m->T, .H = c->H, .KV = c->KV, .D = c->D, .q_stride = qkv_width(c),
                     .kv_stride = qkv_width(c), .scale = 1.0f / sqrtf((float)c->D), .causal = 1};
}

#define P(i) fsdp_param(fs, stage_unit(m, l, STAGE_OF[i]), param_index(m, i))
#define G(i) fsdp_grad(fs, stage_unit(m, l, STAGE_OF[i]), param_index(m, i))

// One stage of the pre-norm block x -> norm -> attention -> +x -> norm -> SwiGLU -> +.
static void stage_forward(Model* m, int l, int s, const act_t* x, act_t* out) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  Llama* g = m->impl;
  BlockActs* a = &g->blocks[l];
  const ModelConfig* c = &m->cfg;
  int N = m->B * m->T, C = c->C, HD = heads_width(c), KVD = c->KV * c->D, F = c->F;
  switch (s) {
    case S_QKV:
      rmsnorm_forward(k, a->ln1, a->rstd1, x, P(P_ATTN_NORM), N, C, c->norm_eps);
      matmul_forward(k, a->qkv, a->ln1, P(P_QKV), NULL, N, C, qkv_width(c));
      // q's and k's heads are adjacent in the row: one rotation turns all H + KV of them.
      rope_forward(k, a->qkv, c->rope, N, m->T, c->H + c->KV, c->D, qkv_width(c));
      attention_forward(k, a->att, a->lse, a->qkv, a->qkv + HD, a->qkv + HD + KVD, no_bias, attn_shape(m));
      break;
    case S_O: matmul_forward(k, g->scratch_c, a->att, P(P_O), NULL, N, HD, C); break;
    case S_GATE_UP:
      residual_rmsnorm_forward(k, a->res2, a->ln2, a->rstd2, x, g->scratch_c, P(P_MLP_NORM), N, C, c->norm_eps);
      matmul_forward(k, a->gate_up, a->ln2, P(P_GATE_UP), NULL, N, C, 2 * F);
      swiglu_forward(k, a->act, a->gate_up, N, F);
      break;
    case S_DOWN:
      matmul_forward(k, out, a->act, P(P_DOWN), NULL, N, F, C);
      add_inplace(k, out, a->res2, (size_t)N * C);
      break;
  }
}

// Backward of one stage. g->dresidual holds d(out) on entry to the last stage and d(x) on exit
// from the first. --recompute selective first refills the stage's cheap tensors (its norm with
// its statistics, SwiGLU) from the kept matmul outputs, with the kernels the forward ran.
static void stage_backward(Model* m, int l, int s, const act_t* x) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  Llama* g = m->impl;
  BlockActs* a = &g->blocks[l];
  const ModelConfig* c = &m->cfg;
  int N = m->B * m->T, C = c->C, HD = heads_width(c), KVD = c->KV * c->D, F = c->F;
  int selective = fs->opt.recompute == RECOMPUTE_SELECTIVE;
  act_t* dres = g->dresidual;
  switch (s) {
    case S_DOWN:  // out = res2 + down(swiglu(gate_up(ln2)))
      if (selective) swiglu_forward(k, a->act, a->gate_up, N, F);
      matmul_backward(k, g->dact, G(P_DOWN), NULL, dres, a->act, P(P_DOWN), N, F, C);
      swiglu_backward(k, g->dgate_up, a->gate_up, g->dact, N, F);
      break;
    case S_GATE_UP:
      if (selective) rmsnorm_forward(k, a->ln2, a->rstd2, a->res2, P(P_MLP_NORM), N, C, c->norm_eps);
      matmul_backward(k, g->dln, G(P_GATE_UP), NULL, g->dgate_up, a->ln2, P(P_GATE_UP), N, C, 2 * F);
      // dres becomes d(res2): the skip path plus the norm's input gradient (accumulated).
      rmsnorm_backward(k, dres, G(P_MLP_NORM), g->dln, a->res2, P(P_MLP_NORM), a->rstd2, N, C);
      break;
    case S_O:  // res2 = x + o(attention(rope(qkv(ln1))))
      matmul_backward(k, g->datt, G(P_O), NULL, dres, a->att, P(P_O), N, HD, C);
      break;
    case S_QKV:
      if (selective) rmsnorm_forward(k, a->ln1, a->rstd1, x, P(P_ATTN_NORM), N, C, c->norm_eps);
      attention_backward(k, g->dqkv, g->dqkv + HD, g->dqkv + HD + KVD, NULL, g->datt, a->att, a->lse, a->qkv,
                         a->qkv + HD, a->qkv + HD + KVD, no_bias, attn_shape(m));
      rope_backward(k, g->dqkv, c->rope, N, m->T, c->H + c->KV, c->D, qkv_width(c));  // to the unturned q, k
      matmul_backward(k, g->dln, G(P_QKV), NULL, g->dqkv, a->ln1, P(P_QKV), N, C, qkv_width(c));
      rmsnorm_backward(k, dres, G(P_ATTN_NORM), g->dln, x, P(P_ATTN_NORM), a->rstd1, N, C);
      break;
  }
}
#undef P
#undef G

// A block's forward: its stages around the units' schedule points (model.c). The output goes
// where the schedule keeps block outputs (a host copy follows with --offload activations).
static const BlockStages STAGES = {NUM_STAGES, stage_unit, stage_forward, stage_backward};
static void block_forward(Model* m, int l, const act_t* x) {
  BlockActs* a = &((Llama*)m->impl)->blocks[l];
  a->out = fsdp_act_out(m->fs, l);
  block_stages_forward(m, &STAGES, l, x, a->out);
  fsdp_act_written(m->fs, l);
}

static void block_backward(Model* m, int l, const act_t* x) {
  block_stages_backward(m, &STAGES, l, x, ((Llama*)m->impl)->scratch_c);
}

static const act_t* block_input(Model* m, int l) {
  return l == 0 ? ((Llama*)m->impl)->embedded : ((Llama*)m->impl)->blocks[l - 1].out;
}

static const act_t* lm_head(Model* m) { return fsdp_param(m->fs, 0, m->cfg.tied ? R_EMBED : R_LM_HEAD); }
static float* lm_head_grad(Model* m) { return fsdp_grad(m->fs, 0, m->cfg.tied ? R_EMBED : R_LM_HEAD); }

// Forward to the logits (model.c adds the classifier and ends the forward).
static void forward(Model* m) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  Llama* g = m->impl;
  const ModelConfig* c = &m->cfg;
  int N = m->B * m->T, C = c->C, L = c->L;
  fsdp_pre_forward(fs, 0);
  embedding_forward(k, g->embedded, m->inputs, fsdp_param(fs, 0, R_EMBED), NULL, N, m->T, C);
  fsdp_post_forward(fs, 0);
  for (int l = 0; l < L; l++) block_forward(m, l, block_input(m, l));
  // The root is still unsharded: final norm and the lm_head.
  rmsnorm_forward(k, g->lnf, g->lnf_rstd, block_input(m, L), fsdp_param(fs, 0, R_NORM), N, C, c->norm_eps);
  matmul_forward(k, m->logits, g->lnf, lm_head(m), NULL, N, C, c->Vp);
}

// Backward from the logit gradients the classifier left in m->logits.
static void backward(Model* m) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  Llama* g = m->impl;
  const ModelConfig* c = &m->cfg;
  int N = m->B * m->T, C = c->C, L = c->L;
  fsdp_pre_backward(fs, 0);
  // lm_head and final norm (the logits buffer holds d logits).
  matmul_backward(k, g->dln, lm_head_grad(m), NULL, m->logits, g->lnf, lm_head(m), N, C, c->Vp);
  fill_zero_act(k, g->dresidual, (size_t)N * C);
  g->blocks[L - 1].out = (act_t*)fsdp_act_in(fs, L - 1);
  rmsnorm_backward(k, g->dresidual, fsdp_grad(fs, 0, R_NORM), g->dln, block_input(m, L), fsdp_param(fs, 0, R_NORM),
                   g->lnf_rstd, N, C);
  fsdp_act_release(fs, L - 1);
  for (int l = L - 1; l >= 0; l--) {
    if (l > 0) g->blocks[l - 1].out = (act_t*)fsdp_act_in(fs, l - 1);  // the block's input
    block_backward(m, l, block_input(m, l));
    if (l > 0) fsdp_act_release(fs, l - 1);
  }
  embedding_backward(k, fsdp_grad(fs, 0, R_EMBED), NULL, g->dresidual, m->inputs, N, m->T, C);
  fsdp_post_backward(fs, 0);
}

const ModelFamily llama_family = {.name = "Llama", .units_per_block = units_per_block, .plan = plan, .forward = forward,
                                  .backward = backward, .flops = llama_flops};
