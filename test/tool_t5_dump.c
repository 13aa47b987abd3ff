// tool_t5_dump.c: dumps one T5 model's parameters, logits, loss, gradients and a few AdamW
// steps of fsdp.c, for the PyTorch reference check test/ref_t5.py (the T5 twin of
// tool_gpt_dump.c).
//
//   t5_dump OUTDIR MODEL B Te Td SEED K LR WD CLIP [INIT]
//
// INIT is t5 (default: the model's own initialization) or wide (every live element redrawn
// so activations are O(1); see wide_init).
// Single rank (FSDP with F = 1, SHARD_FULL, limit_all_gathers 2, sync_accum 1, prefetch both,
// embeddings not decayed), driven like train_gpt.c drives a step. Writes into OUTDIR:
//   meta.json          config, the parameter list (unit, name, shape, live elements, decay
//                      flag) in the order of the .bin files, the losses, gradient norms and
//                      clip scales
//   params.bin         fp32, every parameter's live elements, units in order, table order
//   enc_tokens.bin     int32 [B*Te] encoder inputs
//   tokens.bin         int32 [B*Td] decoder inputs;  targets.bin int32 [B*Td] (-1: ignored;
//                      the last few positions of some rows, like padded T5 targets)
//   logits.bin         fp32 [B*Td, Vp] of an evaluation forward (no targets)
//   grads.bin          fp32 gradient of the first training step (loss = mean over the targets
//                      >= 0), same layout as params.bin
//   params_final.bin   fp32 parameters after K AdamW steps on the same batch (same layout)
//   buckets.bin        int32 [2, 601]: relative_position_bucket(r, bidirectional, 32, 128) for
//                      r = -300..300, row 0 bidirectional (encoder), row 1 one-directional
//                      (decoder)
// Losses: K+1 values, the loss before step 1 and after each of the K steps; grad norms: the
// K+1 global norms of the gradients at those points (the first K are the ones clipped and used).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "infra/dist.h"
#include "fsdp/fsdp.h"
#include "kernels/kernels.h"
#include "layers/model.h"

#define BUCKET_RANGE 300  // buckets.bin covers relative positions -300..300

#include "test/tool_dump.h"

// Padded targets: row b ignores (-1) its last (2b) mod Td positions, always keeping the first
// one (row 0 is unpadded; with B >= 2 some row is padded whenever Td > 2).
static int pad_targets(int32_t* targets, int B, int Td) {
  int valid = 0;
  for (int b = 0; b < B; b++) {
    int npad = (2 * b) % Td;
    if (npad > Td - 1) npad = Td - 1;
    for (int t = Td - npad; t < Td; t++) targets[b * Td + t] = -1;
  }
  for (int i = 0; i < B * Td; i++) valid += targets[i] >= 0;
  return valid;
}

// The "wide" initialization: every live element redrawn so the activations are O(1) (unit
// variance through the matmuls, norm gains 1 +- 0.5, position-bias tables +- 1, shared
// embedding of unit variance, as T5's own). The attention query rows (qkv rows [0, H*D) and
// cross.q) are scaled by D^-1/2 on top, as T5's own initialization does, since T5 does not
// scale the logits: the scores are O(1) and the softmax far from uniform without saturating.
// T5's own initialization keeps the scores small, where attention is nearly uniform and the
// position bias hardly matters; a reference check run only there misses errors in those
// regions. Single rank: the master shard of a unit is the whole padded unit. Padding stays 0.
static void wide_init(FSDP* fs, const ModelConfig* c, uint64_t seed) {
  rng_state = seed * 0x9E3779B97F4A7C15ull + 777;
  int64_t I = (int64_t)c->H * c->D;
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    float* host = xmalloc((size_t)U->shard * sizeof(float), "wide init");
    device_copy_to_host(host, U->master, (size_t)U->shard * sizeof(float));
    for (int i = 0; i < U->nparams; i++) {
      const ParamInfo* p = &U->params[i];
      int is_qkv = !strcmp(p->name, "attn.qkv.weight"), is_q = !strcmp(p->name, "cross.q.weight");
      float base = 0.0f, scale;
      int64_t q_elems = 0;  // leading elements that are query rows
      if (p->ndim == 2 && u > 0) {
        scale = sqrtf(3.0f / (float)p->shape[1]);  // uniform, variance 1/fan_in
        if (is_qkv || is_q) q_elems = I * p->shape[1];
      } else if (!strcmp(p->name, "shared.weight")) {
        scale = sqrtf(3.0f);  // variance 1
      } else if (!strcmp(p->name, "lm_head.weight")) {
        scale = sqrtf(3.0f / (float)p->shape[1]);
      } else if (strstr(p->name, "rel_bias")) {
        scale = 1.0f;
      } else {
        base = 1.0f, scale = 0.5f;  // norm gains
      }
      float qs = 1.0f / sqrtf((float)c->D);
      for (int64_t e = 0; e < p->live; e++) {
        double r = (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
        host[p->offset + e] = base + (e < q_elems ? qs : 1.0f) * scale * (float)(2.0 * r - 1.0);
      }
    }
    device_copy_to_device(U->master, host, (size_t)U->shard * sizeof(float));
    free(host);
  }
}

static void usage(void) {
  fprintf(stderr, "usage: t5_dump OUTDIR MODEL B Te Td SEED K LR WD CLIP [INIT]\n"
                  "  INIT: t5 (default, the model's own initialization) or wide\n"
                  "  e.g. t5_dump /tmp/d t5:L=2,M=2,C=48,H=3,D=20,F=96,V=131 2 19 9 7 3 1e-3 0.1 1.0\n");
  dist_finalize();
  exit(2);
}

int main(int argc, char** argv) {
  dist_init(&argc, &argv);
  if (argc != 11 && argc != 12) usage();
  const char* init = argc == 12 ? argv[11] : "t5";
  if (strcmp(init, "t5") && strcmp(init, "wide")) usage();
  const char* dir = argv[1];
  char err[2048];
  ModelConfig cfg;
  if (model_config_parse(argv[2], &cfg, err, sizeof err)) fatal("%s", err);
  if (cfg.kind != MODEL_T5) fatal("t5_dump: %s is not a T5 model", argv[2]);
  int B = atoi(argv[3]), Te = atoi(argv[4]), Td = atoi(argv[5]), K = atoi(argv[7]);
  uint64_t seed = strtoull(argv[6], NULL, 10);
  float lr = strtof(argv[8], NULL), wd = strtof(argv[9], NULL), clip = strtof(argv[10], NULL);
  if (B < 1 || Te < 1 || Td < 1 || K < 0) usage();
  if (dist_world() != 1) fatal("t5_dump runs on one rank (it reads whole gradient shards)");
  mkdir(dir, 0755);

  FSDPOptions opt = {.strategy = SHARD_FULL, .limit_all_gathers = 2, .sync_accum = 1,
                     .prefetch_forward = 1, .prefetch_backward = 1, .reduce_dtype = DT_F32};
  FSDP fs;
  fsdp_init(&fs, model_num_units(&cfg, opt.wrap), opt, comm_world(), NULL);
  Model m;
  model_create(&m, &cfg, &fs, B, Td, Te, seed);
  if (!strcmp(init, "wide")) wide_init(&fs, &cfg, seed);
  int Ne = B * Te, Nd = B * Td;
  fill_tokens(m.enc_inputs, Ne, cfg.V, seed + 77);
  fill_tokens(m.inputs, Nd, cfg.V, seed);
  fill_tokens(m.targets, Nd, cfg.V, seed + 1000003);
  int valid = pad_targets(m.targets, B, Td);

  float* params = gather_params(&fs);
  size_t pbytes = (size_t)total_live(&fs) * sizeof(float);
  write_file(dir, "params.bin", params, pbytes);
  write_file(dir, "enc_tokens.bin", m.enc_inputs, (size_t)Ne * sizeof(int32_t));
  write_file(dir, "tokens.bin", m.inputs, (size_t)Nd * sizeof(int32_t));
  write_file(dir, "targets.bin", m.targets, (size_t)Nd * sizeof(int32_t));

  int32_t buckets[2][2 * BUCKET_RANGE + 1];
  for (int d = 0; d < 2; d++)
    for (int r = -BUCKET_RANGE; r <= BUCKET_RANGE; r++)
      buckets[d][r + BUCKET_RANGE] = relative_position_bucket(r, d == 0, 32, 128);
  write_file(dir, "buckets.bin", buckets, sizeof buckets);

  // Raw logits of an evaluation forward, then K AdamW steps on the same batch; the loss is
  // the mean over the valid (>= 0) targets.
  DumpTraining run = dump_logits_and_train(&fs, &m, dir, K, lr, wd, clip, valid, pbytes);

  char path[4096];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  FILE* f = fopen(path, "w");
  if (!f) fatal("t5_dump: cannot open %s for writing", path);
  fprintf(f, "{\n  \"model\": \"%s\",\n", cfg.name);
  fprintf(f, "  \"L\": %d, \"Ld\": %d, \"C\": %d, \"H\": %d, \"D\": %d, \"F\": %d, \"V\": %d, \"Vp\": %d,\n",
          cfg.L, cfg.Ld, cfg.C, cfg.H, cfg.D, cfg.F, cfg.V, cfg.Vp);
  fprintf(f, "  \"gated\": %d, \"tied\": %d,\n", cfg.gated, cfg.tied);
  fprintf(f, "  \"B\": %d, \"Te\": %d, \"Td\": %d, \"valid_targets\": %d, \"seed\": %llu, \"K\": %d, \"init\": \"%s\",\n",
          B, Te, Td, valid, (unsigned long long)seed, K, init);
  fprintf(f, "  \"lr\": %.9g, \"weight_decay\": %.9g, \"grad_clip\": %.9g,\n", lr, wd, clip);
  fprintf(f, "  \"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-8, \"decay_embeddings\": %d,\n", fs.opt.decay_embeddings);
  fprintf(f, "  \"bucket_range\": %d, \"num_buckets\": 32, \"max_distance\": 128,\n", BUCKET_RANGE);
  dump_meta_tail(f, &fs, &run, K);
  fclose(f);
  free(params);
  dist_finalize();
  return 0;
}
