// predict_gpt.c: predict_gpt, the prediction binary: train_gpt's options on the timeline
// backend. train_gpt and train_gpt_cpu hand --predict over to it (train/predict_exec.c).
#include <stdio.h>
#include <string.h>

#include "infra/dist.h"
#include "predict/predict.h"

// --plan: the memory plan with train_gpt's dtypes (act_t is bf16 in this build), as train_gpt
// would print it, for a machine without a GPU.
static int plan_main(Options* o) {
  if (o->plan_backend && strcmp(o->plan_backend, "cuda"))
    usage_error("%s", "predict_gpt plans the cuda backend; plan the cpu backend with train_gpt_cpu --plan --backend cpu");
  char err[2048];
  ModelConfig cfg;
  if (model_config_parse(o->model, &cfg, err, sizeof err)) usage_error("%s", err);
  RunShape shape;
  if (run_shape(o, &cfg, o->plan_world ? o->plan_world : 1, &shape, err, sizeof err)) usage_error("%s", err);
  o->accum = o->fsdp.accum_steps = shape.A;
  return plan_report(o, &cfg, shape.B, shape.T, shape.Te, shape.W);
}

int main(int argc, char** argv) {
  Options o = parse_options(argc, argv);
  if (o.predict.cluster && !strcmp(o.predict.cluster, "list")) {  // the catalogue, with its figures
    catalogue_print(stdout);
    return 0;
  }
  if (o.plan) return plan_main(&o);  // --plan for the cuda backend, from train_gpt_cpu (train/predict_exec.c)
  if (!o.predict.cluster)
    usage_error("%s", "predict_gpt predicts a training step: give --predict GPU[:NETWORK] --world N (and the trainer's options)");
  char err[2048];
  ModelConfig cfg;
  if (model_config_parse(o.model, &cfg, err, sizeof err)) usage_error("%s", err);
  int t5 = cfg.kind == MODEL_T5;
  Cluster c;
  if (catalogue_cluster(o.predict.cluster, o.plan_world, &c, err, sizeof err)) usage_error("%s", err);
  // --shard hpz: node groups of the cluster's GPUs per node unless F2 is given.
  if (o.fsdp.strategy == SHARD_HPZ && !o.fsdp.hpz_factor) o.fsdp.hpz_factor = c.net.gpus_per_node;
  c.alloc_retry_s = o.predict.alloc_retry_ms / 1e3;
  c.comm_sms_max = o.predict.comm_sms;
  if (o.predict.attention && !strcmp(o.predict.attention, "eager")) c.attention = t5 ? ATTENTION_EAGER_HF_T5 : ATTENTION_EAGER_MINGPT;
  RunShape shape;  // refuses a --seq or --global-batch this world cannot run, before any prediction
  if (run_shape(&o, &cfg, c.world, &shape, err, sizeof err)) usage_error("%s", err);
  if (o.predict.sweep) return predict_sweep(&o, &c, &cfg, 20) ? 1 : 0;
  Prediction p;
  predict_run(&o, &c, &cfg, o.trace_path, &p);
  predict_print(&o, &c, &cfg, &p);
  return 0;
}
