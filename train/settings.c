// settings.c: the start-up table a run prints before its first step: the model, the sharding
// and the other options as the run resolved them, the parameter counts and the step's FLOPs.
#include <stdio.h>
#include <string.h>

#include "infra/dist.h"
#include "train/train.h"

void print_model_line(const ModelConfig* c) {
  if (c->kind == MODEL_T5)
    log0("fsdp.c | model %s | T5 %s | L=%d+%d C=%d H=%d D=%d F=%d V=%d (padded %d)\n", c->name,
         c->gated ? "v1.1" : "v1.0", c->L, c->Ld, c->C, c->H, c->D, c->F, c->V, c->Vp);
  else if (c->kind == MODEL_LLAMA)
    log0("fsdp.c | model %s | Llama | L=%d C=%d H=%d KV=%d D=%d F=%d V=%d (padded %d) T=%d rope theta %g%s %s\n",
         c->name, c->L, c->C, c->H, c->KV, c->D, c->F, c->V, c->Vp, c->T, c->rope.theta,
         c->rope.factor > 0 ? ", 3.1 scaling" : "", c->tied ? "tied" : "untied");
  else
    log0("fsdp.c | model %s | GPT | L=%d C=%d H=%d V=%d (padded %d) T=%d\n", c->name, c->L, c->C, c->H, c->V, c->Vp, c->T);
}

void print_settings(const Options* o, const Model* m, const FSDP* fs, int A) {
  const ModelConfig* c = &m->cfg;
  int W = fs->world_size, M = W * A;
  char shard[64];
  if (o->fsdp.strategy == SHARD_HPZ)
    snprintf(shard, sizeof shard, "hpz (F=%d, node groups of %d)", fs->F, fs->secondary.F2);
  else
    snprintf(shard, sizeof shard, "%s (F=%d, %d replica%s)", strategy_name(o->fsdp.strategy), fs->F,
             fs->replicas, fs->replicas > 1 ? "s" : "");
  log0("| %-22s | %-30s |\n", "setting", "value");
  log0("| %-22s | %-30d |\n", "ranks", W);
  if (!strcmp(kernels_backend(), "cpu")) log0("| %-22s | %-30d |\n", "OpenMP threads per rank", dist_threads());
  log0("| %-22s | %-30s |\n", "sharding", shard);
  log0("| %-22s | %-30d |\n", "limit all-gathers", o->fsdp.limit_all_gathers);
  if (o->fsdp.sim_world > 1) {
    char sim[64];
    snprintf(sim, sizeof sim, "%d ranks at %g GB/s", o->fsdp.sim_world, o->fsdp.sim_gbps);
    log0("| %-22s | %-30s |\n", "simulated link", sim);
  }
  log0("| %-22s | %-30s |\n", "prefetch", prefetch_name(&o->fsdp));
  log0("| %-22s | %-30s |\n", "recompute", o->fsdp.recompute == RECOMPUTE_BLOCK       ? "block (activation checkpointing)"
                                          : o->fsdp.recompute == RECOMPUTE_SELECTIVE ? "selective (norms, activations)"
                                                                                     : "none");
  char offload[64];
  offload_name(o->fsdp.offload, offload, sizeof offload);
  log0("| %-22s | %-30s |\n", "offload to host", offload);
  log0("| %-22s | %-30s |\n", "wrap", o->fsdp.wrap == WRAP_LINEAR ? "linear (a unit per matmul)" : "block");
  char precision[64], scale[64];
  snprintf(precision, sizeof precision, "%s compute, reduce %s", ACT_NAME, dtype_name(o->fsdp.reduce_dtype));
  log0("| %-22s | %-30s |\n", "precision", precision);
  if (o->loss_scale_dynamic)
    snprintf(scale, sizeof scale, "dynamic %.0f, window %d", o->loss_scale, o->loss_scale_window);
  else
    snprintf(scale, sizeof scale, o->loss_scale == 1.0 ? "none" : "static %.0f", o->loss_scale);
  log0("| %-22s | %-30s |\n", "loss scale", scale);
  log0("| %-22s | %-30s |\n", "gradient accumulation", o->fsdp.sync_accum ? "reduce every micro-step" : "no sync (reduce on last)");
  log0("| %-22s | %-30d |\n", "micro-batch (B)", m->B);
  if (c->kind == MODEL_T5) {
    log0("| %-22s | %-30d |\n", "encoder length", m->Te);
    log0("| %-22s | %-30d |\n", "decoder length", m->T);
  } else {
    log0("| %-22s | %-30d |\n", "sequence (T)", m->T);
  }
  log0("| %-22s | %-30d |\n", "accumulation (A)", A);
  log0("| %-22s | %-30lld |\n", "sequences per step", (long long)M * m->B);
  log0("| %-22s | %-30d |\n", "steps", o->steps);
  log0("| %-22s | %-30g |\n", "learning rate", o->lr);
  log0("| %-22s | %-30d |\n", "warmup", o->warmup);
  log0("| %-22s | %-30g |\n", "weight decay", o->weight_decay);
  log0("| %-22s | %-30g |\n", "grad clip", o->grad_clip);
  log0("| %-22s | %-30llu |\n", "seed", (unsigned long long)o->seed);
  log0("| %-22s | %-30lld |\n", "parameters", (long long)fsdp_num_params(fs));
  log0("| %-22s | %-30lld |\n", "padded flat elements", (long long)fsdp_num_padded(fs));
  log0("| %-22s | %-30d |\n", "units", fs->nunits);
  log0("| %-22s | %-30.4g |\n", "matmul FLOPs per step", M * model_flops(c, m->B, m->T, m->Te));
  if (c->kind == MODEL_T5) log0("| %-22s | %-30.4g |\n", "IBM T5 formula (s=enc)", M * t5_flops_ibm(c, m->B, m->Te));
}
