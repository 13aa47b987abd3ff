// t5.c: the T5 encoder-decoder (Raffel et al. 2020) on the kernels API, driven by the FSDP
// schedule.
//
// T5 differs from GPT in these ways: RMS norm without mean or bias (eps 1e-6), no biases in
// linear layers, attention logits not scaled by 1/sqrt(d_kv), a relative position bias
// (32 buckets, max distance 128; one table per stack, shared by its layers, which the
// attention kernels read for every score: no [H, T, T] bias tensor), decoder
// cross-attention without position bias, and a ReLU (v1.0) or gated-GELU (v1.1) feed-forward.
// v1.0 ties the lm_head to the shared embedding and scales its input by d_model^-0.5; v1.1
// has an untied lm_head.
//
// Units: the root (shared embedding, the two position-bias tables, the two final norms and
// an untied lm_head), one unit per encoder block, then one per decoder block. Forward visits
// root, encoder blocks, decoder blocks; backward the reverse, so prefetch crosses the
// encoder/decoder boundary like any other. The encoder output is kept for every decoder
// block's cross-attention, and its gradient is accumulated over the decoder blocks.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "layers/model.h"

#define RMS_EPS 1e-6f
#define NUM_BUCKETS 32
#define MAX_DISTANCE 128

// Root parameters (lm_head only when untied).
enum { R_SHARED, R_ENC_BIAS, R_DEC_BIAS, R_ENC_NORM, R_DEC_NORM, R_LM_HEAD };
// Encoder block parameters.
enum { E_LN1, E_QKV, E_O, E_LN2, E_WI, E_WO };
// Decoder block parameters.
enum { D_LN1, D_QKV, D_O, D_LN2, D_CQ, D_CKV, D_CO, D_LN3, D_WI, D_WO };

// What one block saves in forward for its backward. Encoder blocks leave the cross fields
// unused.
typedef struct {
  act_t *ln1, *qkv, *att, *res2, *ln2;
  act_t *cq, *ckv, *catt, *res3, *ln3;  // decoder: cross-attention
  act_t *ffh, *ffa, *out;               // feed-forward input projection, activation, block output
  float *rstd1, *rstd2, *rstd3, *lse, *clse;
} T5Acts;

typedef struct T5 {
  T5Acts* enc;
  T5Acts* dec;
  act_t *enc_emb, *enc_final, *dec_emb, *dec_final;
  float *enc_final_rstd, *dec_final_rstd;
  // scratch shared by all blocks (sized for the longer of encoder and decoder)
  act_t *scratch, *dres, *dln, *dqkv, *datt, *dact, *dff, *denc, *dkv, *denc_tmp;
  // planned regions holding every block's activations (carved per block)
  act_t *r_act, *r_act_shared;  // tensors every block keeps / one slice refilled before each backward
  float *r_f32, *r_f32_shared;
} T5;

static int ff_in(const ModelConfig* c) { return c->gated ? 2 * c->F : c->F; }

static void add_encoder_params(FSDP* fs, int u, const ModelConfig* c) {
  int64_t C = c->C, I = (int64_t)c->H * c->D, F = c->F;
  // Mesh TensorFlow / T5 initialization: q (C*d_kv)^-1/2 (it stands in for the missing
  // 1/sqrt(d_kv) logit scale), k and v C^-1/2, attention output (H*d_kv)^-1/2, wi C^-1/2,
  // wo d_ff^-1/2.
  float sq = 1.0f / sqrtf((float)C * c->D), skv = 1.0f / sqrtf((float)C), so = 1.0f / sqrtf((float)I);
  int64_t s_c[1] = {C}, s_qkv[2] = {3 * I, C}, s_o[2] = {C, I}, s_wi[2] = {ff_in(c), C}, s_wo[2] = {C, F};
  fsdp_add_param(fs, u, "ln1.weight", 1, s_c, INIT_ONE, 0, 0);
  int q = fsdp_add_param(fs, u, "attn.qkv.weight", 2, s_qkv, INIT_NORMAL, sq, 1);
  fsdp_set_init_split(fs, u, q, I * C, skv);
  fsdp_add_param(fs, u, "attn.o.weight", 2, s_o, INIT_NORMAL, so, 1);
  fsdp_add_param(fs, u, "ln2.weight", 1, s_c, INIT_ONE, 0, 0);
  fsdp_add_param(fs, u, "mlp.wi.weight", 2, s_wi, INIT_NORMAL, skv, 1);
  fsdp_add_param(fs, u, "mlp.wo.weight", 2, s_wo, INIT_NORMAL, 1.0f / sqrtf((float)F), 1);
}

static void add_decoder_params(FSDP* fs, int u, const ModelConfig* c) {
  int64_t C = c->C, I = (int64_t)c->H * c->D, F = c->F;
  float sq = 1.0f / sqrtf((float)C * c->D), skv = 1.0f / sqrtf((float)C), so = 1.0f / sqrtf((float)I);
  int64_t s_c[1] = {C}, s_qkv[2] = {3 * I, C}, s_o[2] = {C, I}, s_q[2] = {I, C}, s_kv[2] = {2 * I, C};
  int64_t s_wi[2] = {ff_in(c), C}, s_wo[2] = {C, F};
  fsdp_add_param(fs, u, "ln1.weight", 1, s_c, INIT_ONE, 0, 0);
  int q = fsdp_add_param(fs, u, "attn.qkv.weight", 2, s_qkv, INIT_NORMAL, sq, 1);
  fsdp_set_init_split(fs, u, q, I * C, skv);
  fsdp_add_param(fs, u, "attn.o.weight", 2, s_o, INIT_NORMAL, so, 1);
  fsdp_add_param(fs, u, "ln2.weight", 1, s_c, INIT_ONE, 0, 0);
  fsdp_add_param(fs, u, "cross.q.weight", 2, s_q, INIT_NORMAL, sq, 1);
  fsdp_add_param(fs, u, "cross.kv.weight", 2, s_kv, INIT_NORMAL, skv, 1);
  fsdp_add_param(fs, u, "cross.o.weight", 2, s_o, INIT_NORMAL, so, 1);
  fsdp_add_param(fs, u, "ln3.weight", 1, s_c, INIT_ONE, 0, 0);
  fsdp_add_param(fs, u, "mlp.wi.weight", 2, s_wi, INIT_NORMAL, skv, 1);
  fsdp_add_param(fs, u, "mlp.wo.weight", 2, s_wo, INIT_NORMAL, 1.0f / sqrtf((float)F), 1);
}

// Hands out consecutive pieces of a pair of regions (16-bit tensors, fp32 statistics) planned
// after the walk from what it handed out: each piece is a view of the plan (memplan_view), set
// when the plan is allocated.
typedef struct {
  MemPlan* plan;
  act_t** act;        // the regions' targets
  float** f32;
  size_t acts, f32s;  // elements handed out
} ActLayout;
static void take_act(ActLayout* r, size_t n, act_t** at) {
  memplan_view(r->plan, (void**)r->act, r->acts * sizeof(act_t), (void**)at);
  r->acts += n;
}
static void take_f32(ActLayout* r, size_t n, float** at) {
  memplan_view(r->plan, (void**)r->f32, r->f32s * sizeof(float), (void**)at);
  r->f32s += n;
}

// The block activations, walked once: it counts what the regions hold and places every tensor
// in them. Each tensor comes from `kept` (one per block) or from `shared` (one slice for all
// blocks of a stack, refilled by recomputation before a block's backward): --recompute block
// shares all but the block output; selective shares the cheap tensors, RMS-norm outputs with
// their statistics and the feed-forward activation.
static void walk_blocks(Model* m, ActLayout* kept, ActLayout* shared) {
  T5* t = m->impl;
  const ModelConfig* c = &m->cfg;
  size_t B = m->B, Te = m->Te, Td = m->T, Ne = B * Te, Nd = B * Td, C = c->C, H = c->H;
  size_t I = (size_t)c->H * c->D, F = c->F, FI = ff_in(c);
  int mode = m->fs->opt.recompute;
  ActLayout* big = mode == RECOMPUTE_BLOCK ? shared : kept;    // matmul and attention outputs
  ActLayout* cheap = mode != RECOMPUTE_NONE ? shared : kept;   // norms, statistics, activations
  size_t stack_start_acts = shared->acts, stack_start_f32s = shared->f32s, enc_end_acts = 0, enc_end_f32s = 0;
  t->enc = xcalloc(c->L, sizeof(T5Acts), "activation table");
  t->dec = xcalloc(c->Ld, sizeof(T5Acts), "activation table");
  for (int l = 0; l < c->L; l++) {
    T5Acts* e = &t->enc[l];
    shared->acts = stack_start_acts, shared->f32s = stack_start_f32s;  // every block: the same slice
    take_act(cheap, Ne * C, &e->ln1);
    take_act(big, Ne * 3 * I, &e->qkv);
    take_act(big, Ne * I, &e->att);
    take_act(big, Ne * C, &e->res2);
    take_act(cheap, Ne * C, &e->ln2);
    take_act(big, Ne * FI, &e->ffh);
    take_act(cheap, Ne * F, &e->ffa);
    take_f32(cheap, Ne, &e->rstd1);
    take_f32(cheap, Ne, &e->rstd2);
    take_f32(big, B * H * Te, &e->lse);
    if (shared->acts > enc_end_acts) enc_end_acts = shared->acts;
    if (shared->f32s > enc_end_f32s) enc_end_f32s = shared->f32s;
  }
  for (int l = 0; l < c->Ld; l++) {
    T5Acts* d = &t->dec[l];
    shared->acts = enc_end_acts, shared->f32s = enc_end_f32s;  // after the encoder's slice
    take_act(cheap, Nd * C, &d->ln1);
    take_act(big, Nd * 3 * I, &d->qkv);
    take_act(big, Nd * I, &d->att);
    take_act(big, Nd * C, &d->res2);
    take_act(cheap, Nd * C, &d->ln2);
    take_act(big, Nd * I, &d->cq);
    take_act(big, Nd * C, &d->res3);
    take_act(cheap, Nd * C, &d->ln3);
    take_act(big, Nd * FI, &d->ffh);
    take_act(cheap, Nd * F, &d->ffa);
    take_act(big, Nd * I, &d->catt);
    take_act(big, Ne * 2 * I, &d->ckv);
    take_f32(cheap, Nd, &d->rstd1);
    take_f32(cheap, Nd, &d->rstd2);
    take_f32(cheap, Nd, &d->rstd3);
    take_f32(big, B * H * Td, &d->lse);
    take_f32(big, B * H * Td, &d->clse);
  }
  if (shared->acts < enc_end_acts) shared->acts = enc_end_acts;
  if (shared->f32s < enc_end_f32s) shared->f32s = enc_end_f32s;
}

// A T5 block is one unit: no per-linear policy.
static int units_per_block(int wrap) { return wrap == WRAP_BLOCK; }

static void plan(Model* m) {
  const ModelConfig* c = &m->cfg;
  FSDP* fs = m->fs;
  if (m->Te < 1) fatal("T5 needs an encoder length (--enc-len)");
  T5* t = xcalloc(1, sizeof(T5), "model");
  m->impl = t;
  int64_t C = c->C, Vp = c->Vp, H = c->H;
  int d = fs->opt.decay_embeddings;

  fsdp_unit_name(fs, 0, "root");
  int64_t s_emb[2] = {Vp, C}, s_bias[2] = {NUM_BUCKETS, H}, s_c[1] = {C};
  fsdp_add_param(fs, 0, "shared.weight", 2, s_emb, INIT_NORMAL, 1.0f, d);
  fsdp_set_live(fs, 0, R_SHARED, (int64_t)c->V * C);
  fsdp_add_param(fs, 0, "encoder.rel_bias", 2, s_bias, INIT_NORMAL, 1.0f / sqrtf((float)C), 0);
  fsdp_add_param(fs, 0, "decoder.rel_bias", 2, s_bias, INIT_NORMAL, 1.0f / sqrtf((float)C), 0);
  fsdp_add_param(fs, 0, "encoder.final_norm.weight", 1, s_c, INIT_ONE, 0, 0);
  fsdp_add_param(fs, 0, "decoder.final_norm.weight", 1, s_c, INIT_ONE, 0, 0);
  if (!c->tied) {
    fsdp_add_param(fs, 0, "lm_head.weight", 2, s_emb, INIT_NORMAL, 1.0f, d);
    fsdp_set_live(fs, 0, R_LM_HEAD, (int64_t)c->V * C);
  }
  for (int l = 0; l < c->L; l++) {
    char name[32];
    snprintf(name, sizeof name, "encoder.%d", l);
    fsdp_unit_name(fs, 1 + l, name);
    add_encoder_params(fs, 1 + l, c);
  }
  for (int l = 0; l < c->Ld; l++) {
    char name[32];
    snprintf(name, sizeof name, "decoder.%d", l);
    fsdp_unit_name(fs, 1 + c->L + l, name);
    add_decoder_params(fs, 1 + c->L + l, c);
  }
  fsdp_finalize_layout(fs);

  size_t B = m->B, Te = m->Te, Td = m->T, Ne = B * Te, Nd = B * Td, Nmax = Ne > Nd ? Ne : Nd;
  size_t I = (size_t)c->H * c->D, F = c->F, FI = ff_in(c);
  // Block activations: the walk places every block's tensors and counts what the blocks keep and
  // the one shared slice that --recompute refills before each block's backward.
  MemPlan* p = &fs->plan;
  ActLayout kept = {.plan = p, .act = &t->r_act, .f32 = &t->r_f32};
  ActLayout shared = {.plan = p, .act = &t->r_act_shared, .f32 = &t->r_f32_shared};
  walk_blocks(m, &kept, &shared);
  // The block outputs are the schedule's (--offload activations): the encoder's, then the
  // decoder's, in forward order.
  size_t* outs = xmalloc((size_t)(c->L + c->Ld) * sizeof(size_t), "block outputs");
  for (int l = 0; l < c->L + c->Ld; l++) outs[l] = (l < c->L ? Ne : Nd) * C;
  fsdp_plan_block_outputs(fs, c->L + c->Ld, outs);
  free(outs);
  const char* rc = fs->opt.recompute == RECOMPUTE_BLOCK       ? " (block outputs only; the rest recomputed)"
                   : fs->opt.recompute == RECOMPUTE_SELECTIVE ? " (norms and activations recomputed)" : "";
  char name[2][128];
  snprintf(name[0], sizeof name[0], "encoder + decoder blocks%s", rc);
  snprintf(name[1], sizeof name[1], "block statistics%s", rc);
  const char* A = "activations";
  memplan_add_array(p, A, name[0], kept.acts, sizeof(act_t), (void**)&t->r_act);
  memplan_add_array(p, A, name[1], kept.f32s, sizeof(float), (void**)&t->r_f32);
  if (shared.acts) memplan_add_array(p, A, "one block's recomputed tensors", shared.acts, sizeof(act_t), (void**)&t->r_act_shared);
  if (shared.f32s) memplan_add_array(p, A, "one block's recomputed statistics", shared.f32s, sizeof(float), (void**)&t->r_f32_shared);
  memplan_add_array(p, A, "embeddings (Ne+Nd x C)", (Ne + Nd) * C, sizeof(act_t), (void**)&t->enc_emb);
  memplan_add_array(p, A, "final norms (Ne+Nd x C)", (Ne + Nd) * C, sizeof(act_t), (void**)&t->enc_final);
  memplan_add_array(p, A, "final norm statistics", Ne + Nd, sizeof(float), (void**)&t->enc_final_rstd);
  memplan_add_array(p, A, "logits (Nd x Vp)", Nd * Vp, sizeof(act_t), (void**)&m->logits);
  memplan_add_array(p, A, "losses (Nd)", Nd, sizeof(float), (void**)&m->losses);
  memplan_add_array(p, A, "loss sum (1)", 1, sizeof(double), (void**)&m->loss_sum);
  const char* W = "workspace";
  memplan_add_array(p, W, "scratch (N x C)", Nmax * C, sizeof(act_t), (void**)&t->scratch);
  memplan_add_array(p, W, "d residual (N x C)", Nmax * C, sizeof(act_t), (void**)&t->dres);
  memplan_add_array(p, W, "d norm (N x C)", Nmax * C, sizeof(act_t), (void**)&t->dln);
  memplan_add_array(p, W, "d qkv (N x 3I)", Nmax * 3 * I, sizeof(act_t), (void**)&t->dqkv);
  memplan_add_array(p, W, "d attention (N x I)", Nmax * I, sizeof(act_t), (void**)&t->datt);
  memplan_add_array(p, W, "d activation (N x F)", Nmax * F, sizeof(act_t), (void**)&t->dact);
  memplan_add_array(p, W, "d feed-forward (N x FI)", Nmax * FI, sizeof(act_t), (void**)&t->dff);
  memplan_add_array(p, W, "d encoder output (Ne x C)", Ne * C, sizeof(act_t), (void**)&t->denc);
  memplan_add_array(p, W, "d encoder output, one block", Ne * C, sizeof(act_t), (void**)&t->denc_tmp);
  memplan_add_array(p, W, "d cross kv (Ne x 2I)", Ne * 2 * I, sizeof(act_t), (void**)&t->dkv);
  memplan_add_array(p, W, "tokens (Ne + 2 Nd)", Ne + 2 * Nd, sizeof(int32_t), (void**)&m->inputs);
  // The decoder's halves of the encoder-first regions, and the token buffer's parts.
  memplan_view(p, (void**)&t->enc_emb, Ne * C * sizeof(act_t), (void**)&t->dec_emb);
  memplan_view(p, (void**)&t->enc_final, Ne * C * sizeof(act_t), (void**)&t->dec_final);
  memplan_view(p, (void**)&t->enc_final_rstd, Ne * sizeof(float), (void**)&t->dec_final_rstd);
  memplan_view(p, (void**)&m->inputs, Nd * sizeof(int32_t), (void**)&m->targets);
  memplan_view(p, (void**)&m->inputs, 2 * Nd * sizeof(int32_t), (void**)&m->enc_inputs);
}

static AttnShape self_shape(const Model* m, int T, int causal) {
  int I = m->cfg.H * m->cfg.D;
  return (AttnShape){.B = m->B, .Tq = T, .Tk = T, .H = m->cfg.H, .D = m->cfg.D, .q_stride = 3 * I,
                     .kv_stride = 3 * I, .scale = 1.0f, .causal = causal};
}

// The position bias of the encoder (bidirectional) or the decoder (keys before the query),
// from its table in the root unit.
static AttnBias self_bias(const Model* m, int decoder) {
  return (AttnBias){.table = fsdp_param(m->fs, 0, decoder ? R_DEC_BIAS : R_ENC_BIAS), .num_buckets = NUM_BUCKETS,
                    .max_distance = MAX_DISTANCE, .bidirectional = !decoder};
}
static float* self_bias_grad(const Model* m, int decoder) { return fsdp_grad(m->fs, 0, decoder ? R_DEC_BIAS : R_ENC_BIAS); }
static const AttnBias no_bias = {0};

static AttnShape cross_shape(const Model* m) {
  int I = m->cfg.H * m->cfg.D;
  return (AttnShape){.B = m->B, .Tq = m->T, .Tk = m->Te, .H = m->cfg.H, .D = m->cfg.D, .q_stride = I,
                     .kv_stride = 2 * I, .scale = 1.0f, .causal = 0};
}

// Feed-forward: out = wo(act(wi(x))) + residual, act = ReLU (v1.0) or gelu(gate) * up (v1.1).
static void ff_forward(Model* m, int u, int p_wi, int p_wo, T5Acts* a, const act_t* x, const act_t* residual, int N) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  const ModelConfig* c = &m->cfg;
  matmul_forward(k, a->ffh, x, fsdp_param(fs, u, p_wi), NULL, N, c->C, ff_in(c));
  if (c->gated) geglu_forward(k, a->ffa, a->ffh, N, c->F);
  else relu_forward(k, a->ffa, a->ffh, (size_t)N * c->F);
  matmul_forward(k, a->out, a->ffa, fsdp_param(fs, u, p_wo), NULL, N, c->F, c->C);
  add_inplace(k, a->out, residual, (size_t)N * c->C);
}

// Backward of the feed-forward; t->dres holds d(out) and keeps it (the skip path); the
// gradient of the norm output x is left in t->dln.
static void ff_backward(Model* m, int u, int p_wi, int p_wo, T5Acts* a, const act_t* x, int N) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  T5* t = m->impl;
  const ModelConfig* c = &m->cfg;
  matmul_backward(k, t->dact, fsdp_grad(fs, u, p_wo), NULL, t->dres, a->ffa, fsdp_param(fs, u, p_wo), N, c->F, c->C);
  if (c->gated) geglu_backward(k, t->dff, a->ffh, t->dact, N, c->F);
  else relu_backward(k, t->dff, a->ffh, t->dact, (size_t)N * c->F);
  matmul_backward(k, t->dln, fsdp_grad(fs, u, p_wi), NULL, t->dff, x, fsdp_param(fs, u, p_wi), N, c->C, ff_in(c));
}

static void encoder_block_forward(Model* m, int l, const act_t* x) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  T5* t = m->impl;
  T5Acts* a = &t->enc[l];
  int u = 1 + l, N = m->B * m->Te, C = m->cfg.C, I = m->cfg.H * m->cfg.D;
  rmsnorm_forward(k, a->ln1, a->rstd1, x, fsdp_param(fs, u, E_LN1), N, C, RMS_EPS);
  matmul_forward(k, a->qkv, a->ln1, fsdp_param(fs, u, E_QKV), NULL, N, C, 3 * I);
  attention_forward(k, a->att, a->lse, a->qkv, a->qkv + I, a->qkv + 2 * I, self_bias(m, 0), self_shape(m, m->Te, 0));
  matmul_forward(k, t->scratch, a->att, fsdp_param(fs, u, E_O), NULL, N, I, C);
  residual_rmsnorm_forward(k, a->res2, a->ln2, a->rstd2, x, t->scratch, fsdp_param(fs, u, E_LN2), N, C, RMS_EPS);
  ff_forward(m, u, E_WI, E_WO, a, a->ln2, a->res2, N);
}

// --recompute selective: the cheap tensors of a block again, from its kept matmul outputs: the
// RMS norms (with their statistics) and the feed-forward activation, as the forward made them.
static void ff_activation(Model* m, T5Acts* a, int N) {
  const ModelConfig* c = &m->cfg;
  if (c->gated) geglu_forward(m->fs->kctx, a->ffa, a->ffh, N, c->F);
  else relu_forward(m->fs->kctx, a->ffa, a->ffh, (size_t)N * c->F);
}
static void encoder_recompute_cheap(Model* m, int l, const act_t* x) {
  FSDP* fs = m->fs;
  T5Acts* a = &((T5*)m->impl)->enc[l];
  int u = 1 + l, N = m->B * m->Te, C = m->cfg.C;
  rmsnorm_forward(fs->kctx, a->ln1, a->rstd1, x, fsdp_param(fs, u, E_LN1), N, C, RMS_EPS);
  rmsnorm_forward(fs->kctx, a->ln2, a->rstd2, a->res2, fsdp_param(fs, u, E_LN2), N, C, RMS_EPS);
  ff_activation(m, a, N);
}
static void decoder_recompute_cheap(Model* m, int l, const act_t* y) {
  FSDP* fs = m->fs;
  T5Acts* a = &((T5*)m->impl)->dec[l];
  int u = 1 + m->cfg.L + l, N = m->B * m->T, C = m->cfg.C;
  rmsnorm_forward(fs->kctx, a->ln1, a->rstd1, y, fsdp_param(fs, u, D_LN1), N, C, RMS_EPS);
  rmsnorm_forward(fs->kctx, a->ln2, a->rstd2, a->res2, fsdp_param(fs, u, D_LN2), N, C, RMS_EPS);
  rmsnorm_forward(fs->kctx, a->ln3, a->rstd3, a->res3, fsdp_param(fs, u, D_LN3), N, C, RMS_EPS);
  ff_activation(m, a, N);
}

static void encoder_block_backward(Model* m, int l, const act_t* x) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  T5* t = m->impl;
  T5Acts* a = &t->enc[l];
  int u = 1 + l, N = m->B * m->Te, C = m->cfg.C, I = m->cfg.H * m->cfg.D;
  ff_backward(m, u, E_WI, E_WO, a, a->ln2, N);
  rmsnorm_backward(k, t->dres, fsdp_grad(fs, u, E_LN2), t->dln, a->res2, fsdp_param(fs, u, E_LN2), a->rstd2, N, C);
  matmul_backward(k, t->datt, fsdp_grad(fs, u, E_O), NULL, t->dres, a->att, fsdp_param(fs, u, E_O), N, I, C);
  attention_backward(k, t->dqkv, t->dqkv + I, t->dqkv + 2 * I, self_bias_grad(m, 0), t->datt, a->att, a->lse, a->qkv,
                     a->qkv + I, a->qkv + 2 * I, self_bias(m, 0), self_shape(m, m->Te, 0));
  matmul_backward(k, t->dln, fsdp_grad(fs, u, E_QKV), NULL, t->dqkv, a->ln1, fsdp_param(fs, u, E_QKV), N, C, 3 * I);
  rmsnorm_backward(k, t->dres, fsdp_grad(fs, u, E_LN1), t->dln, x, fsdp_param(fs, u, E_LN1), a->rstd1, N, C);
}

static void decoder_block_forward(Model* m, int l, const act_t* y) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  T5* t = m->impl;
  T5Acts* a = &t->dec[l];
  int u = 1 + m->cfg.L + l, N = m->B * m->T, Ne = m->B * m->Te, C = m->cfg.C, I = m->cfg.H * m->cfg.D;
#define P(i) fsdp_param(fs, u, i)
  // causal self-attention with the decoder's position bias
  rmsnorm_forward(k, a->ln1, a->rstd1, y, P(D_LN1), N, C, RMS_EPS);
  matmul_forward(k, a->qkv, a->ln1, P(D_QKV), NULL, N, C, 3 * I);
  attention_forward(k, a->att, a->lse, a->qkv, a->qkv + I, a->qkv + 2 * I, self_bias(m, 1), self_shape(m, m->T, 1));
  matmul_forward(k, t->scratch, a->att, P(D_O), NULL, N, I, C);
  residual_rmsnorm_forward(k, a->res2, a->ln2, a->rstd2, y, t->scratch, P(D_LN2), N, C, RMS_EPS);
  // cross-attention over the encoder output, no position bias
  matmul_forward(k, a->cq, a->ln2, P(D_CQ), NULL, N, C, I);
  matmul_forward(k, a->ckv, t->enc_final, P(D_CKV), NULL, Ne, C, 2 * I);
  attention_forward(k, a->catt, a->clse, a->cq, a->ckv, a->ckv + I, no_bias, cross_shape(m));
  matmul_forward(k, t->scratch, a->catt, P(D_CO), NULL, N, I, C);
  residual_rmsnorm_forward(k, a->res3, a->ln3, a->rstd3, a->res2, t->scratch, P(D_LN3), N, C, RMS_EPS);
  ff_forward(m, u, D_WI, D_WO, a, a->ln3, a->res3, N);
#undef P
}

static void decoder_block_backward(Model* m, int l, const act_t* y) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  T5* t = m->impl;
  T5Acts* a = &t->dec[l];
  int u = 1 + m->cfg.L + l, N = m->B * m->T, Ne = m->B * m->Te, C = m->cfg.C, I = m->cfg.H * m->cfg.D;
#define P(i) fsdp_param(fs, u, i)
#define G(i) fsdp_grad(fs, u, i)
  ff_backward(m, u, D_WI, D_WO, a, a->ln3, N);
  rmsnorm_backward(k, t->dres, G(D_LN3), t->dln, a->res3, P(D_LN3), a->rstd3, N, C);  // dres = d res3
  // cross-attention: q from ln2, k and v from the encoder output
  matmul_backward(k, t->datt, G(D_CO), NULL, t->dres, a->catt, P(D_CO), N, I, C);
  attention_backward(k, t->dqkv, t->dkv, t->dkv + I, NULL, t->datt, a->catt, a->clse, a->cq, a->ckv, a->ckv + I,
                     no_bias, cross_shape(m));
  matmul_backward(k, t->dln, G(D_CQ), NULL, t->dqkv, a->ln2, P(D_CQ), N, C, I);
  matmul_backward(k, t->denc_tmp, G(D_CKV), NULL, t->dkv, t->enc_final, P(D_CKV), Ne, C, 2 * I);
  add_inplace(k, t->denc, t->denc_tmp, (size_t)Ne * C);
  rmsnorm_backward(k, t->dres, G(D_LN2), t->dln, a->res2, P(D_LN2), a->rstd2, N, C);  // dres = d res2
  // causal self-attention
  matmul_backward(k, t->datt, G(D_O), NULL, t->dres, a->att, P(D_O), N, I, C);
  attention_backward(k, t->dqkv, t->dqkv + I, t->dqkv + 2 * I, self_bias_grad(m, 1), t->datt, a->att, a->lse, a->qkv,
                     a->qkv + I, a->qkv + 2 * I, self_bias(m, 1), self_shape(m, m->T, 1));
  matmul_backward(k, t->dln, G(D_QKV), NULL, t->dqkv, a->ln1, P(D_QKV), N, C, 3 * I);
  rmsnorm_backward(k, t->dres, G(D_LN1), t->dln, y, P(D_LN1), a->rstd1, N, C);  // dres = d y
#undef P
#undef G
}

static const act_t* encoder_input(Model* m, int l) {
  T5* t = m->impl;
  return l == 0 ? t->enc_emb : t->enc[l - 1].out;
}
static const act_t* decoder_input(Model* m, int l) {
  T5* t = m->impl;
  return l == 0 ? t->dec_emb : t->dec[l - 1].out;
}

static const act_t* lm_head(Model* m) {
  return fsdp_param(m->fs, 0, m->cfg.tied ? R_SHARED : R_LM_HEAD);
}

// Forward to the logits (model.c adds the classifier and ends the forward).
static void forward(Model* m) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  T5* t = m->impl;
  const ModelConfig* c = &m->cfg;
  int Ne = m->B * m->Te, Nd = m->B * m->T, C = c->C, L = c->L, Ld = c->Ld;
  fsdp_pre_forward(fs, 0);
  embedding_forward(k, t->enc_emb, m->enc_inputs, fsdp_param(fs, 0, R_SHARED), NULL, Ne, m->Te, C);
  fsdp_post_forward(fs, 0);
  for (int l = 0; l < L; l++) {
    t->enc[l].out = fsdp_act_out(fs, l);
    fsdp_pre_forward(fs, 1 + l);
    encoder_block_forward(m, l, encoder_input(m, l));
    fsdp_post_forward(fs, 1 + l);
    fsdp_act_written(fs, l);
  }
  rmsnorm_forward(k, t->enc_final, t->enc_final_rstd, encoder_input(m, L), fsdp_param(fs, 0, R_ENC_NORM), Ne, C, RMS_EPS);
  embedding_forward(k, t->dec_emb, m->inputs, fsdp_param(fs, 0, R_SHARED), NULL, Nd, m->T, C);
  for (int l = 0; l < Ld; l++) {
    t->dec[l].out = fsdp_act_out(fs, L + l);
    fsdp_pre_forward(fs, 1 + L + l);
    decoder_block_forward(m, l, decoder_input(m, l));
    fsdp_post_forward(fs, 1 + L + l);
    fsdp_act_written(fs, L + l);
  }
  rmsnorm_forward(k, t->dec_final, t->dec_final_rstd, decoder_input(m, Ld), fsdp_param(fs, 0, R_DEC_NORM), Nd, C, RMS_EPS);
  // v1.0 (tied): the lm_head input is scaled by d_model^-1/2 (Mesh TensorFlow's convention),
  // in place: the unscaled norm output has no other reader.
  if (c->tied) scale_act(k, t->dec_final, 1.0f / sqrtf((float)C), (size_t)Nd * C);
  matmul_forward(k, m->logits, t->dec_final, lm_head(m), NULL, Nd, C, c->Vp);
}

// Backward from the logit gradients the classifier left in m->logits.
static void backward(Model* m) {
  FSDP* fs = m->fs;
  KernelCtx* k = fs->kctx;
  T5* t = m->impl;
  const ModelConfig* c = &m->cfg;
  int Ne = m->B * m->Te, Nd = m->B * m->T, C = c->C, L = c->L, Ld = c->Ld;
  fsdp_pre_backward(fs, 0);
  // lm_head and the decoder's final norm (the logits buffer holds d logits)
  matmul_backward(k, t->dln, fsdp_grad(fs, 0, c->tied ? R_SHARED : R_LM_HEAD), NULL, m->logits, t->dec_final,
                  lm_head(m), Nd, C, c->Vp);
  if (c->tied) scale_act(k, t->dln, 1.0f / sqrtf((float)C), (size_t)Nd * C);
  fill_zero_act(k, t->dres, (size_t)Nd * C);
  t->dec[Ld - 1].out = (act_t*)fsdp_act_in(fs, L + Ld - 1);
  rmsnorm_backward(k, t->dres, fsdp_grad(fs, 0, R_DEC_NORM), t->dln, decoder_input(m, Ld), fsdp_param(fs, 0, R_DEC_NORM),
                   t->dec_final_rstd, Nd, C);
  fsdp_act_release(fs, L + Ld - 1);
  fill_zero_act(k, t->denc, (size_t)Ne * C);
  // Block outputs come back from the schedule in reverse (fsdp_act_in: block l's input is block
  // l-1's output); a recomputed block's own output is not needed again and goes to scratch.
  int rc = fs->opt.recompute == RECOMPUTE_BLOCK, sel = fs->opt.recompute == RECOMPUTE_SELECTIVE;  // see gpt.c
  for (int l = Ld - 1; l >= 0; l--) {
    if (l > 0) t->dec[l - 1].out = (act_t*)fsdp_act_in(fs, L + l - 1);
    fsdp_pre_backward(fs, 1 + L + l);
    if (rc) t->dec[l].out = t->scratch, decoder_block_forward(m, l, decoder_input(m, l));
    if (sel) decoder_recompute_cheap(m, l, decoder_input(m, l));
    decoder_block_backward(m, l, decoder_input(m, l));
    fsdp_post_backward(fs, 1 + L + l);
    if (l > 0) fsdp_act_release(fs, L + l - 1);
  }
  embedding_backward(k, fsdp_grad(fs, 0, R_SHARED), NULL, t->dres, m->inputs, Nd, m->T, C);
  // encoder: its output's gradient was accumulated over every decoder block's cross-attention
  fill_zero_act(k, t->dres, (size_t)Ne * C);
  t->enc[L - 1].out = (act_t*)fsdp_act_in(fs, L - 1);
  rmsnorm_backward(k, t->dres, fsdp_grad(fs, 0, R_ENC_NORM), t->denc, encoder_input(m, L), fsdp_param(fs, 0, R_ENC_NORM),
                   t->enc_final_rstd, Ne, C);
  fsdp_act_release(fs, L - 1);
  for (int l = L - 1; l >= 0; l--) {
    if (l > 0) t->enc[l - 1].out = (act_t*)fsdp_act_in(fs, l - 1);
    fsdp_pre_backward(fs, 1 + l);
    if (rc) t->enc[l].out = t->scratch, encoder_block_forward(m, l, encoder_input(m, l));
    if (sel) encoder_recompute_cheap(m, l, encoder_input(m, l));
    encoder_block_backward(m, l, encoder_input(m, l));
    fsdp_post_backward(fs, 1 + l);
    if (l > 0) fsdp_act_release(fs, l - 1);
  }
  embedding_backward(k, fsdp_grad(fs, 0, R_SHARED), NULL, t->dres, m->enc_inputs, Ne, m->Te, C);
  fsdp_post_backward(fs, 0);
}

const ModelFamily t5_family = {.name = "T5", .units_per_block = units_per_block, .plan = plan, .forward = forward,
                               .backward = backward, .flops = t5_flops};
