// model.c: the model interface: the family's functions, looked up by the model's kind, and what
// every family shares (the classifier and its loss, the plan's allocation).
#include <string.h>

#include "infra/dist.h"
#include "layers/model.h"

static const ModelFamily* family(const ModelConfig* cfg) {
  static const ModelFamily* const families[] = {[MODEL_GPT] = &gpt_family, [MODEL_T5] = &t5_family,
                                                [MODEL_LLAMA] = &llama_family};
  return families[cfg->kind];
}

void model_check_options(const ModelConfig* cfg, const FSDPOptions* o) {
  if (!family(cfg)->units_per_block(o->wrap))
    fatal("--wrap linear: model %s has no per-linear wrapping policy (GPT and Llama models have one); use --wrap block",
          cfg->name);
}

int model_num_units(const ModelConfig* cfg, int wrap) {
  int per = family(cfg)->units_per_block(wrap);
  return 1 + (cfg->L + cfg->Ld) * (per ? per : 1);
}

void model_plan(Model* m, const ModelConfig* cfg, FSDP* fs, int B, int T, int Te) {
  memset(m, 0, sizeof *m);
  m->cfg = *cfg;
  m->B = B;
  m->T = T;
  m->Te = Te;
  m->fs = fs;
  model_check_options(cfg, &fs->opt);
  if (fs->nunits != model_num_units(cfg, fs->opt.wrap))
    fatal("model %s has %d units but the FSDP runtime was made for %d", cfg->name, model_num_units(cfg, fs->opt.wrap), fs->nunits);
  family(cfg)->plan(m);
}

void model_allocate(Model* m, uint64_t seed) {
  memplan_allocate(&m->fs->plan);
  fsdp_materialize(m->fs, seed);
}

void model_create(Model* m, const ModelConfig* cfg, FSDP* fs, int B, int T, int Te, uint64_t seed) {
  model_plan(m, cfg, fs, B, T, Te);
  model_allocate(m, seed);
}

// The classifier over m->logits against m->targets (the end of every family's forward): adds the
// sum of the per-token losses to m->loss_sum and, in training, leaves the logit gradients.
static void loss(Model* m, const float* dloss) {
  int N = m->B * m->T;
  // Fused softmax + cross-entropy; in training it leaves d logits (scaled by dloss) in place.
  classifier_forward_backward(m->fs->kctx, m->losses, m->logits, m->targets, N, m->cfg.V, m->cfg.Vp,
                              m->fs->training ? dloss : NULL);
  loss_accumulate(m->fs->kctx, m->loss_sum, m->losses, N);
}

// The family's forward to the logits, the classifier when there are targets (its loss sum added
// to m->loss_sum), and the forward's end (evaluation reshards the root there).
static void forward(Model* m, int use_targets, const float* dloss) {
  family(&m->cfg)->forward(m);
  if (use_targets) loss(m, dloss);
  fsdp_end_forward(m->fs);
}

void model_forward_accumulate(Model* m, const float* dloss) { forward(m, 1, dloss); }

double model_take_loss(Model* m) {
  double sum = 0.0;
  device_copy_to_host(&sum, m->loss_sum, sizeof sum);
  fill_zero_f32(m->fs->kctx, (float*)m->loss_sum, 2);  // the double's 8 bytes
  return sum;
}

double model_forward(Model* m, int use_targets, const float* dloss) {
  forward(m, use_targets, dloss);
  return use_targets ? model_take_loss(m) : 0.0;
}

void model_backward(Model* m) { family(&m->cfg)->backward(m); }

double model_flops(const ModelConfig* cfg, int B, int T, int Te) { return family(cfg)->flops(cfg, B, T, Te); }

double model_recompute_flops(const ModelConfig* cfg, int B, int T, int Te, int recompute) {
  if (recompute != RECOMPUTE_BLOCK) return 0.0;
  // One more forward of every block: the forward (a third of forward + backward) without the
  // lm_head, which is not recomputed.
  return model_flops(cfg, B, T, Te) / 3 - 2.0 * B * T * cfg->C * cfg->Vp;
}

void block_stages_forward(Model* m, const BlockStages* b, int l, const act_t* x, act_t* out) {
  FSDP* fs = m->fs;
  int split = fs->block_units > 1;
  for (int s = 0; s < b->stages; s++) {
    if (split || s == 0) fsdp_pre_forward(fs, b->unit(m, l, s));
    b->forward(m, l, s, x, out);
    if (split || s == b->stages - 1) fsdp_post_forward(fs, b->unit(m, l, s));
  }
}

void block_stages_backward(Model* m, const BlockStages* b, int l, const act_t* x, act_t* scratch) {
  FSDP* fs = m->fs;
  int split = fs->block_units > 1;
  // Activation checkpointing: refill the shared slices with this block's forward (the same
  // kernels on the same inputs, so the same bits).
  if (fs->opt.recompute == RECOMPUTE_BLOCK)
    for (int s = 0; s < b->stages; s++) {
      if (split || s == 0) fsdp_pre_recompute(fs, b->unit(m, l, s));
      b->forward(m, l, s, x, scratch);
      if (split || s == b->stages - 1) fsdp_post_recompute(fs, b->unit(m, l, s));
    }
  for (int s = b->stages - 1; s >= 0; s--) {
    if (split || s == b->stages - 1) fsdp_pre_backward(fs, b->unit(m, l, s));
    b->backward(m, l, s, x);
    if (split || s == 0) fsdp_post_backward(fs, b->unit(m, l, s));
  }
}
