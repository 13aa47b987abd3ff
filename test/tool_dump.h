// tool_dump.h: what the reference-check dump tools (tool_gpt_dump.c, tool_t5_dump.c,
// tool_llama_dump.c) share: writing files, reading every parameter and gradient of a
// single-rank FSDP runtime in global order (live elements only), and deterministic test tokens.
#ifndef FSDP_TOOL_DUMP_H
#define FSDP_TOOL_DUMP_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "fsdp/fsdp.h"
#include "layers/model.h"
#include "test/adamw_step.h"

static void write_file(const char* dir, const char* name, const void* data, size_t bytes) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "wb");
  if (!f) fatal("cannot open %s for writing", path);
  if (bytes && fwrite(data, 1, bytes, f) != bytes) fatal("short write to %s", path);
  fclose(f);
}

static int64_t total_live(const FSDP* fs) {
  int64_t n = 0;
  for (int u = 0; u < fs->nunits; u++)
    for (int i = 0; i < fs->units[u].nparams; i++) n += fs->units[u].params[i].live;
  return n;
}

// Every parameter's live fp32 master elements, in unit order then table order.
static float* gather_params(FSDP* fs) {
  float* out = xmalloc((size_t)total_live(fs) * sizeof(float), "params dump");
  size_t o = 0;
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    float* full = xmalloc((size_t)U->numel * sizeof(float), "unit staging");
    fsdp_gather_master(fs, u, full);
    for (int i = 0; i < U->nparams; i++) {
      memcpy(out + o, full + U->params[i].offset, (size_t)U->params[i].live * sizeof(float));
      o += (size_t)U->params[i].live;
    }
    free(full);
  }
  return out;
}

// The fp32 gradient shard of every unit (F = 1: the whole padded unit), live elements only.
// *pad_maxabs gets the largest |gradient| over padding elements [live, numel) of parameters.
static float* gather_grads(FSDP* fs, double* pad_maxabs) {
  float* out = xmalloc((size_t)total_live(fs) * sizeof(float), "grads dump");
  size_t o = 0;
  *pad_maxabs = 0.0;
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    float* full = xmalloc((size_t)U->shard * sizeof(float), "unit staging");
    device_copy_to_host(full, U->grad, (size_t)U->shard * sizeof(float));
    for (int i = 0; i < U->nparams; i++) {
      const ParamInfo* p = &U->params[i];
      memcpy(out + o, full + p->offset, (size_t)p->live * sizeof(float));
      o += (size_t)p->live;
      for (int64_t e = p->live; e < p->numel; e++)
        if (fabs(full[p->offset + e]) > *pad_maxabs) *pad_maxabs = fabs(full[p->offset + e]);
    }
    free(full);
  }
  return out;
}

// Largest |value| of the padding elements of the fp32 master parameters.
static double param_pad_maxabs(FSDP* fs) {
  double mx = 0.0;
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    float* full = xmalloc((size_t)U->numel * sizeof(float), "unit staging");
    fsdp_gather_master(fs, u, full);
    for (int i = 0; i < U->nparams; i++)
      for (int64_t e = U->params[i].live; e < U->params[i].numel; e++)
        if (fabs(full[U->params[i].offset + e]) > mx) mx = fabs(full[U->params[i].offset + e]);
    free(full);
  }
  return mx;
}

// Deterministic token ids (splitmix64). Every id in [0, V) is drawn with equal probability,
// the two ends 0 and V-1 are always present, and every fifth token repeats one three places
// earlier, so some ids occur several times (the embedding backward must accumulate them).
static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static void fill_tokens(int32_t* x, int n, int V, uint64_t seed) {
  rng_state = seed * 0x2545F4914F6CDD1Dull + 12345;
  for (int i = 0; i < n; i++) x[i] = (int32_t)(rng_next() % (uint64_t)V);
  for (int i = 5; i < n; i += 5) x[i] = x[i - 3];
  if (n > 0) x[0] = V - 1;
  if (n > 1) x[n - 1] = 0;
  if (n > 3) x[n / 2] = x[0];
}

typedef struct {
  double *losses, *norms, *scales;  // K+1 losses and norms (before step 1, after each step), K scales
  double pad_grad, pad_param;       // largest |grad| / final |param| over vocabulary padding
} DumpTraining;

// Writes logits.bin (the raw logits of an evaluation forward), then runs K optimizer steps on
// the batch already in the model, as train_gpt.c does with one micro-batch per step (loss
// scaled by 1/valid targets, clipping, AdamW with betas 0.9/0.95, eps 1e-8), writing grads.bin
// (the first step's gradients) and params_final.bin.
static DumpTraining dump_logits_and_train(FSDP* fs, Model* m, const char* dir, int K, float lr, float wd, float clip,
                                          int valid, size_t pbytes) {
  size_t N = (size_t)m->B * m->T, lbytes = N * m->cfg.Vp * sizeof(float);
  fsdp_begin_forward(fs, 0, 0);
  model_forward(m, 0, NULL);
  float* logits = xmalloc(lbytes, "logits dump");
  device_copy_to_host(logits, m->logits, lbytes);
  write_file(dir, "logits.bin", logits, lbytes);
  free(logits);
  DumpTraining r = {xcalloc(K + 1, sizeof(double), "losses"), xcalloc(K + 1, sizeof(double), "norms"),
                    xcalloc(K + 1, sizeof(double), "scales"), 0.0, 0.0};
  for (int k = 0; k <= K; k++) {
    fsdp_begin_step(fs, 1);
    fsdp_begin_forward(fs, 0, 1);
    float dloss = (float)(1.0 / valid);
    r.losses[k] = model_forward(m, 1, &dloss) / valid;
    model_backward(m);
    r.norms[k] = fsdp_grad_norm(fs);
    if (k == 0) {
      float* grads = gather_grads(fs, &r.pad_grad);
      write_file(dir, "grads.bin", grads, pbytes);
      free(grads);
    }
    if (k == K) break;  // the last forward only measures the loss after step K
    r.scales[k] = step_control_clip_scale(r.norms[k], clip);
    AdamWStep a = adamw_step_of((AdamWArgs){.lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = wd,
                                            .grad_scale = (float)r.scales[k], .step = k + 1});
    fsdp_adamw_step(fs, &a);  // (a CPU tool: the backend's memory is the host's)
  }
  float* final_params = gather_params(fs);
  write_file(dir, "params_final.bin", final_params, pbytes);
  free(final_params);
  r.pad_param = param_pad_maxabs(fs);
  return r;
}
static void json_array(FILE* f, const char* key, const double* v, int n, const char* tail) {
  fprintf(f, "  \"%s\": [", key);
  for (int i = 0; i < n; i++) fprintf(f, "%s%.17g", i ? ", " : "", v[i]);
  fprintf(f, "]%s\n", tail);
}

// The end of meta.json, the same for every tool: the training figures and the parameter table
// (unit, name, shape, numel, live elements, decay flag) in the order of params.bin. Frees run.
static void dump_meta_tail(FILE* f, const FSDP* fs, DumpTraining* run, int K) {
  fprintf(f, "  \"loss\": %.17g,\n  \"grad_norm\": %.17g,\n", run->losses[0], run->norms[0]);
  json_array(f, "losses", run->losses, K + 1, ",");
  json_array(f, "grad_norms", run->norms, K + 1, ",");
  json_array(f, "clip_scales", run->scales, K, ",");
  fprintf(f, "  \"pad_grad_maxabs\": %.17g,\n  \"pad_param_final_maxabs\": %.17g,\n", run->pad_grad, run->pad_param);
  fprintf(f, "  \"params\": [\n");
  int first = 1;
  for (int u = 0; u < fs->nunits; u++) {
    const Unit* U = &fs->units[u];
    for (int i = 0; i < U->nparams; i++) {
      const ParamInfo* p = &U->params[i];
      fprintf(f, "%s    {\"unit\": %d, \"unit_name\": \"%s\", \"name\": \"%s\", \"shape\": [", first ? "" : ",\n",
              u, U->name, p->name);
      for (int d = 0; d < p->ndim; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)p->shape[d]);
      fprintf(f, "], \"numel\": %lld, \"live\": %lld, \"decay\": %d}", (long long)p->numel,
              (long long)p->live, p->decay);
      first = 0;
    }
  }
  fprintf(f, "\n  ]\n}\n");
  free(run->losses);
  free(run->norms);
  free(run->scales);
}
#endif
