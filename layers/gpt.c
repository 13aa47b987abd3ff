// gpt.c: the GPT-2 model on the kernels API, driven by the FSDP schedule.
//
// Units: the root (token embedding wte, which is also the tied lm_head, position embedding
// wpe, final LayerNorm) and one unit per transformer block. Forward visits the root, the
// blocks in order, then the root again (final norm, lm_head); backward runs the reverse.
// Every parameter is a view into its unit's unsharded buffer, valid between the unit's
// unshard and reshard points (fsdp/schedule.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "layers/model.h"

#define LN_EPS 1e-5f

// Parameter indices inside a block unit (the same for every block).
enum { P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_PROJ_W, P_PROJ_B, P_LN2_W, P_LN2_B,
       P_FC_W, P_FC_B, P_FCPROJ_W, P_FCPROJ_B, NUM_BLOCK_PARAMS };
// Parameter indices inside the root unit.
enum { R_WTE, R_WPE, R_LNF_W, R_LNF_B };

// --wrap linear cuts a block into four units, one per matmul weight, each with the norm
// that feeds it and its bias: [ln1, qkv] [proj] [ln2, fc] [fc proj]. The block then runs as
// four stages, one per unit; with --wrap block the same stages run inside one unit.
enum { S_QKV, S_PROJ, S_FC, S_FCPROJ, NUM_STAGES };
static const int STAGE_OF[NUM_BLOCK_PARAMS] = {S_QKV, S_QKV, S_QKV, S_QKV, S_PROJ, S_PROJ,
                                               S_FC, S_FC, S_FC, S_FC, S_FCPROJ, S_FCPROJ};
static const int STAGE_FIRST_PARAM[NUM_STAGES] = {P_LN1_W, P_PROJ_W, P_LN2_W, P_FCPROJ_W};

static int units_per_block(int wrap) { return wrap == WRAP_LINEAR ? NUM_STAGES : 1; }

// The unit of stage s of block l, and where block parameter p sits (unit, index in it).
static int stage_unit(const Model* m, int l, int s) {
  int per = m->fs->block_units;
  return 1 + l * per + (per > 1 ? s : 0);
}
static int param_index(const Model* m, int p) {
  return m->fs->block_units > 1 ? p - STAGE_FIRST_PARAM[STAGE_OF[p]] : p;
}

// What one block saves in forward for its backward.
typedef struct {
  act_t *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu, *out;
  float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
} BlockActs;

typedef struct GPT {
  BlockActs* blocks;
  act_t* encoded;        // embedding output = input of block 0
  act_t* lnf;
  float *lnf_mean, *lnf_rstd;
  // backward and forward scratch, shared by all blocks
  act_t *scratch_c, *dresidual, *dln, *dqkv, *datty, *dfch;
  // planned regions holding every block's activations of one kind (carved per block)
  act_t *r_ln1, *r_qkv, *r_atty, *r_res2, *r_ln2, *r_fch, *r_fch_gelu;
  float *r_stats, *r_lse;
} GPT;

static void add_block_params(Model* m, int l) {
  FSDP* fs = m->fs;
  const ModelConfig* c = &m->cfg;
  int64_t C = c->C;
  float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * c->L);  // GPT-2: residual projections scaled by 1/sqrt(2L)
  int64_t s_c[1] = {C}, s_3c[1] = {3 * C}, s_4c[1] = {4 * C};
  int64_t s_qkv[2] = {3 * C, C}, s_proj[2] = {C, C}, s_fc[2] = {4 * C, C}, s_fcp[2] = {C, 4 * C};
  struct { const char* name; int ndim; const int64_t* shape; InitRule init; float std; int decay; } t[NUM_BLOCK_PARAMS] = {
      {"ln1.weight", 1, s_c, INIT_ONE, 0, 0},           {"ln1.bias", 1, s_c, INIT_ZERO, 0, 0},
      {"attn.qkv.weight", 2, s_qkv, INIT_NORMAL, std, 1}, {"attn.qkv.bias", 1, s_3c, INIT_ZERO, 0, 0},
      {"attn.proj.weight", 2, s_proj, INIT_NORMAL, proj_std, 1}, {"attn.proj.bias", 1, s_c, INIT_ZERO, 0, 0},
      {"ln2.weight", 1, s_c, INIT_ONE, 0, 0},           {"ln2.bias", 1, s_c, INIT_ZERO, 0, 0},
      {"mlp.fc.weight", 2, s_fc, INIT_NORMAL, std, 1},  {"mlp.fc.bias", 1, s_4c, INIT_ZERO, 0, 0},
      {"mlp.proj.weight", 2, s_fcp, INIT_NORMAL, proj_std, 1}, {"mlp.proj.bias", 1, s_c, INIT_ZERO, 0, 0}};
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
  GPT* g = xcalloc(1, sizeof(GPT), "model");
  m->impl = g;
  int L = cfg->L;
  int64_t C = cfg->C, Vp = cfg->Vp;

  // Root unit: wte (the tied lm_head too), wpe, final norm.
  int64_t s_wte[2] = {Vp, C}, s_wpe[2] = {cfg->T, C}, s_c[1] = {C};
  int d = fs->opt.decay_embeddings;
  fsdp_unit_name(fs, 0, "root");
  fsdp_add_param(fs, 0, "wte", 2, s_wte, INIT_NORMAL, 0.02f, d);
  fsdp_set_live(fs, 0, R_WTE, (int64_t)cfg->V * C);  // rows V..Vp-1 are vocabulary padding
  fsdp_add_param(fs, 0, "wpe", 2, s_wpe, INIT_NORMAL, 0.01f, d);
  fsdp_add_param(fs, 0, "lnf.weight", 1, s_c, INIT_ONE, 0, 0);
  fsdp_add_param(fs, 0, "lnf.bias", 1, s_c, INIT_ZERO, 0, 0);
  static const char* stage_names[NUM_STAGES] = {"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"};
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

  // Activations: what each block saves for backward (one region per kind, L slices each),
  // plus shared scratch. With --recompute block only the block outputs keep L slices; the
  // rest is one slice, refilled by re-running a block's forward before its backward.
  size_t N = (size_t)B * T, H = cfg->H;
  MemPlan* p = &fs->plan;
  const char* A = "activations";
  // Slices per kind: L when every block keeps its own, 1 when one slice is refilled before each
  // block's backward: everything but the block output (--recompute block), or the cheap
  // tensors, norms and GELU (--recompute selective).
  int mode = fs->opt.recompute;
  size_t Lm = mode == RECOMPUTE_BLOCK ? 1 : (size_t)L;                 // matmul and attention outputs
  size_t Lc = mode != RECOMPUTE_NONE ? 1 : (size_t)L;                  // norms, their statistics, GELU
  memplan_add_array(p, A, Lc == 1 ? "ln1 (N x C, recomputed)" : "ln1 (L x N x C)", Lc * N * C, sizeof(act_t), (void**)&g->r_ln1);
  memplan_add_array(p, A, Lm == 1 ? "qkv (N x 3C, recomputed)" : "qkv (L x N x 3C)", Lm * N * 3 * C, sizeof(act_t), (void**)&g->r_qkv);
  memplan_add_array(p, A, Lm == 1 ? "attention out (N x C, recomputed)" : "attention out (L x N x C)", Lm * N * C, sizeof(act_t), (void**)&g->r_atty);
  memplan_add_array(p, A, Lm == 1 ? "residual 2 (N x C, recomputed)" : "residual 2 (L x N x C)", Lm * N * C, sizeof(act_t), (void**)&g->r_res2);
  memplan_add_array(p, A, Lc == 1 ? "ln2 (N x C, recomputed)" : "ln2 (L x N x C)", Lc * N * C, sizeof(act_t), (void**)&g->r_ln2);
  memplan_add_array(p, A, Lm == 1 ? "mlp fc (N x 4C, recomputed)" : "mlp fc (L x N x 4C)", Lm * N * 4 * C, sizeof(act_t), (void**)&g->r_fch);
  memplan_add_array(p, A, Lc == 1 ? "mlp gelu (N x 4C, recomputed)" : "mlp gelu (L x N x 4C)", Lc * N * 4 * C, sizeof(act_t), (void**)&g->r_fch_gelu);
  size_t* outs = xmalloc((size_t)L * sizeof(size_t), "block outputs");
  for (int l = 0; l < L; l++) outs[l] = (size_t)N * C;
  fsdp_plan_block_outputs(fs, L, outs);  // the block outputs: the schedule's (--offload activations)
  free(outs);
  memplan_add_array(p, A, Lc == 1 ? "norm statistics (4 x N, recomputed)" : "norm statistics (4 x L x N)", 4 * Lc * N, sizeof(float), (void**)&g->r_stats);
  memplan_add_array(p, A, Lm == 1 ? "attention lse (B x H x T, recomputed)" : "attention lse (L x B x H x T)", Lm * N * H, sizeof(float), (void**)&g->r_lse);
  memplan_add_array(p, A, "embedding out (N x C)", N * C, sizeof(act_t), (void**)&g->encoded);
  memplan_add_array(p, A, "final norm (N x C)", N * C, sizeof(act_t), (void**)&g->lnf);
  memplan_add_array(p, A, "final norm statistics", 2 * N, sizeof(float), (void**)&g->lnf_mean);
  memplan_add_array(p, A, "logits (N x Vp)", N * Vp, sizeof(act_t), (void**)&m->logits);
  memplan_add_array(p, A, "losses (N)", N, sizeof(float), (void**)&m->losses);
  memplan_add_array(p, A, "loss sum (1)", 1, sizeof(double), (void**)&m->loss_sum);
  const char* W = "workspace";
  memplan_add_array(p, W, "scratch (N x C)", N * C, sizeof(act_t), (void**)&g->scratch_c);
  memplan_add_array(p, W, "d residual (N x C)", N * C, sizeof(act_t), (void**)&g->dresidual);
  memplan_add_array(p, W, "d norm (N x C)", N * C, sizeof(act_t), (void**)&g->dln);
  memplan_add_array(p, W, "d qkv (N x 3C)", N * 3 * C, sizeof(act_t), (void**)&g->dqkv);
  memplan_add_array(p, W, "d attention (N x C)", N * C, sizeof(act_t), (void**)&g->datty);
  memplan_add_array(p, W, "d mlp (N x 4C)", N * 4 * C, sizeof(act_t), (void**)&g->dfch);
  memplan_add_array(p, W, "tokens (2 x N)", 2 * N, sizeof(int32_t), (void**)&m->inputs);
  memplan_view(p, (void**)&m->inputs, N * sizeof(int32_t), (void**)&m->targets);
  memplan_view(p, (void**)&g->lnf_mean, N * sizeof(float), (void**)&g->lnf_rstd);

  // Where each block's tensors lie in those regions: its own slice of a kind, or the one every
  // block shares (recomputed). Its output is where the schedule puts it (fsdp_act_out in
  // forward, fsdp_act_in in backward).
  g->blocks = xcalloc(L, sizeof(BlockActs), "activation table");
  size_t a = sizeof(act_t), f = sizeof(float);
  for (int l = 0; l < L; l++) {
    BlockActs* b = &g->blocks[l];
    size_t sm = l % Lm, sc = l % Lc;
    slice_of(p, &g->r_ln1, sc, N * C * a, &b->ln1);
    slice_of(p, &g->r_qkv, sm, N * 3 * C * a, &b->qkv);
    slice_of(p, &g->r_atty, sm, N * C * a, &b->atty);
    slice_of(p, &g->r_res2, sm, N * C * a, &b->res2);
    slice_of(p, &g->r_ln2, sc, N * C * a, &b->ln2);
    slice_of(p, &g->r_fch, sm, N * 4 * C * a, &b->fch);
    slice_of(p, &g->r_fch_gelu, sc, N * 4 * C * a, &b->fch_gelu);
    slice_of(p, &g->r_stats, 0 * Lc + sc, N * f, &b->ln1_mean);  // four statistics, Lc slices each
    slice_of(p, &g->r_stats, 1 * Lc + sc, N * f, &b->ln1_rstd);
    slice_of(p, &g->r_stats, 2 * Lc + sc, N * f, &b->ln2_mean);
    slice_of(p, &g->r_stats, 3 * Lc + sc, N * f, &b->ln2_rstd);
    slice_of(p, &g->r_lse, sm, N * H * f, &b->lse);
  }
}

static const AttnBias no_bias = {0};  // GPT's attention has no position bias (wpe instead)
static AttnShape attn_shape(const Model* m) {
  int C = m->cfg.C, H = m->cfg.H;
  return (AttnShape){.B = m->B, .Tq = m->T, .Tk = m->T, .H = H, .D = C / H,
                     .q_stride = 3 * C, .kv_stride = 3 * C, .scale = 1.0f / sqrtf((float)(C / H)), .causal = 1};
}

#define P(i) fsdp_param(fs, stage_unit(m, l, STAGE_OF[i]), param_index(m, i))
#define G(i) fsdp_grad(fs, stage_unit(m, l, STAGE_OF[i]), param_index(m, i))

// One stage of the pre-norm GPT-2 block x -> ln1 -> attention -> +x -> ln2 -> MLP -> +.
static void stage_forward(Model* m, int l, int s, const act_t* x, act_t* out) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  GPT* g = m->impl;
  BlockActs* a = &g->blocks[l];
  int N = m->B * m->T, C = m->cfg.C;
  switch (s) {
    case S_QKV:
      layernorm_forward(k, a->ln1, a->ln1_mean, a->ln1_rstd, x, P(P_LN1_W), P(P_LN1_B), N, C, LN_EPS);
      matmul_forward(k, a->qkv, a->ln1, P(P_QKV_W), P(P_QKV_B), N, C, 3 * C);
      attention_forward(k, a->atty, a->lse, a->qkv, a->qkv + C, a->qkv + 2 * C, no_bias, attn_shape(m));
      break;
    case S_PROJ: matmul_forward(k, g->scratch_c, a->atty, P(P_PROJ_W), P(P_PROJ_B), N, C, C); break;
    case S_FC:
      residual_layernorm_forward(k, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, x, g->scratch_c,
                                 P(P_LN2_W), P(P_LN2_B), N, C, LN_EPS);
      matmul_forward_gelu(k, a->fch_gelu, a->fch, a->ln2, P(P_FC_W), P(P_FC_B), N, C, 4 * C);
      break;
    case S_FCPROJ:
      matmul_forward(k, out, a->fch_gelu, P(P_FCPROJ_W), P(P_FCPROJ_B), N, 4 * C, C);
      add_inplace(k, out, a->res2, (size_t)N * C);
      break;
  }
}

// Backward of one stage. g->dresidual holds d(out) on entry to the last stage and d(x) on exit
// from the first. --recompute selective first refills the stage's cheap tensors (its norm with
// its statistics, the GELU) from the kept matmul outputs, with the kernels the forward ran.
static void stage_backward(Model* m, int l, int s, const act_t* x) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  GPT* g = m->impl;
  BlockActs* a = &g->blocks[l];
  int N = m->B * m->T, C = m->cfg.C, selective = fs->opt.recompute == RECOMPUTE_SELECTIVE;
  act_t* dres = g->dresidual;
  switch (s) {
    case S_FCPROJ:  // out = res2 + proj(gelu(fc(ln2))); dfch is the gradient of fc's output (the GELU's input)
      if (selective) gelu_forward(k, a->fch_gelu, a->fch, (size_t)N * 4 * C);
      matmul_backward_gelu(k, g->dfch, G(P_FCPROJ_W), G(P_FCPROJ_B), dres, a->fch_gelu, P(P_FCPROJ_W), a->fch, N,
                           4 * C, C);
      break;
    case S_FC:
      if (selective)
        layernorm_forward(k, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, P(P_LN2_W), P(P_LN2_B), N, C, LN_EPS);
      matmul_backward(k, g->dln, G(P_FC_W), G(P_FC_B), g->dfch, a->ln2, P(P_FC_W), N, C, 4 * C);
      // dres becomes d(res2): the skip path plus the norm's input gradient (accumulated).
      layernorm_backward(k, dres, G(P_LN2_W), G(P_LN2_B), g->dln, a->res2, P(P_LN2_W), a->ln2_mean, a->ln2_rstd, N, C);
      break;
    case S_PROJ:  // res2 = x + proj(attention(qkv(ln1)))
      matmul_backward(k, g->datty, G(P_PROJ_W), G(P_PROJ_B), dres, a->atty, P(P_PROJ_W), N, C, C);
      break;
    case S_QKV:
      if (selective)
        layernorm_forward(k, a->ln1, a->ln1_mean, a->ln1_rstd, x, P(P_LN1_W), P(P_LN1_B), N, C, LN_EPS);
      attention_backward(k, g->dqkv, g->dqkv + C, g->dqkv + 2 * C, NULL, g->datty, a->atty, a->lse, a->qkv,
                         a->qkv + C, a->qkv + 2 * C, no_bias, attn_shape(m));
      matmul_backward(k, g->dln, G(P_QKV_W), G(P_QKV_B), g->dqkv, a->ln1, P(P_QKV_W), N, C, 3 * C);
      layernorm_backward(k, dres, G(P_LN1_W), G(P_LN1_B), g->dln, x, P(P_LN1_W), a->ln1_mean, a->ln1_rstd, N, C);
      break;
  }
}
#undef P
#undef G

// A block's forward: its stages around the units' schedule points (model.c). The output goes
// where the schedule keeps block outputs (a host copy follows with --offload activations).
static const BlockStages STAGES = {NUM_STAGES, stage_unit, stage_forward, stage_backward};
static void block_forward(Model* m, int l, const act_t* x) {
  BlockActs* a = &((GPT*)m->impl)->blocks[l];
  a->out = fsdp_act_out(m->fs, l);
  block_stages_forward(m, &STAGES, l, x, a->out);
  fsdp_act_written(m->fs, l);
}

static void block_backward(Model* m, int l, const act_t* x) {
  block_stages_backward(m, &STAGES, l, x, ((GPT*)m->impl)->scratch_c);
}

static const act_t* block_input(Model* m, int l) {
  return l == 0 ? ((GPT*)m->impl)->encoded : ((GPT*)m->impl)->blocks[l - 1].out;
}

// Forward to the logits (model.c adds the classifier and ends the forward).
static void forward(Model* m) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  GPT* g = m->impl;
  int N = m->B * m->T, C = m->cfg.C, L = m->cfg.L;
  fsdp_pre_forward(fs, 0);
  embedding_forward(k, g->encoded, m->inputs, fsdp_param(fs, 0, R_WTE), fsdp_param(fs, 0, R_WPE), N, m->T, C);
  fsdp_post_forward(fs, 0);
  for (int l = 0; l < L; l++) block_forward(m, l, block_input(m, l));
  // The root is still unsharded: final norm and the tied lm_head (logits = lnf @ wte^T).
  const act_t* last = block_input(m, L);
  layernorm_forward(k, g->lnf, g->lnf_mean, g->lnf_rstd, last, fsdp_param(fs, 0, R_LNF_W), fsdp_param(fs, 0, R_LNF_B), N, C, LN_EPS);
  matmul_forward(k, m->logits, g->lnf, fsdp_param(fs, 0, R_WTE), NULL, N, C, m->cfg.Vp);
}

// Backward from the logit gradients the classifier left in m->logits.
static void backward(Model* m) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  GPT* g = m->impl;
  int N = m->B * m->T, C = m->cfg.C, L = m->cfg.L;
  fsdp_pre_backward(fs, 0);
  // lm_head and final norm (the logits buffer holds d logits).
  matmul_backward(k, g->dln, fsdp_grad(fs, 0, R_WTE), NULL, m->logits, g->lnf, fsdp_param(fs, 0, R_WTE), N, C, m->cfg.Vp);
  fill_zero_act(k, g->dresidual, (size_t)N * C);
  g->blocks[L - 1].out = (act_t*)fsdp_act_in(fs, L - 1);
  layernorm_backward(k, g->dresidual, fsdp_grad(fs, 0, R_LNF_W), fsdp_grad(fs, 0, R_LNF_B), g->dln,
                     block_input(m, L), fsdp_param(fs, 0, R_LNF_W), g->lnf_mean, g->lnf_rstd, N, C);
  fsdp_act_release(fs, L - 1);
  for (int l = L - 1; l >= 0; l--) {
    if (l > 0) g->blocks[l - 1].out = (act_t*)fsdp_act_in(fs, l - 1);  // the block's input
    block_backward(m, l, block_input(m, l));
    if (l > 0) fsdp_act_release(fs, l - 1);
  }
  embedding_backward(k, fsdp_grad(fs, 0, R_WTE), fsdp_grad(fs, 0, R_WPE), g->dresidual, m->inputs, N, m->T, C);
  fsdp_post_backward(fs, 0);
}

const ModelFamily gpt_family = {.name = "GPT", .units_per_block = units_per_block, .plan = plan, .forward = forward,
                                .backward = backward, .flops = gpt_flops};
