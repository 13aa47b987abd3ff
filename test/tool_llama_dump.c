// tool_llama_dump.c: dumps one Llama model's parameters, logits, loss, gradients and a few AdamW
// steps of fsdp.c, for the check against transformers' LlamaForCausalLM, test/ref_llama.py (the
// Llama twin of tool_gpt_dump.c).
//
//   llama_dump OUTDIR MODEL B T SEED K LR WD CLIP [INIT]
//
// INIT is llama (default: the model's own initialization) or wide (every live element redrawn
// so activations are O(1); see wide_init).
// Single rank (FSDP with F = 1, SHARD_FULL, limit_all_gathers 2, sync_accum 1, prefetch both),
// driven like train_gpt.c drives a step. Writes into OUTDIR the files tool_gpt_dump.c
// describes (meta.json, params.bin, tokens.bin, targets.bin, logits.bin, grads.bin,
// params_final.bin); meta.json also carries the Llama configuration (KV, F, the norms' eps,
// the rotary embeddings' theta and scaling, tied).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "infra/dist.h"
#include "fsdp/fsdp.h"
#include "layers/model.h"

#include "test/tool_dump.h"

// The "wide" initialization: every live element redrawn so the activations are O(1): matmul
// weights of unit variance through (uniform, variance 1/fan_in), norm gains 1 +- 0.5, the
// embedding +- 1. transformers' initialization (std 0.02) keeps the scores tiny, where attention
// is nearly uniform and the rotary angles hardly matter, and SiLU nearly linear; a reference
// check run only there misses errors in those regions. Single rank: the master shard of a unit
// is the whole padded unit. Padding stays zero.
static void wide_init(FSDP* fs, uint64_t seed) {
  rng_state = seed * 0x9E3779B97F4A7C15ull + 777;
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    float* host = xmalloc((size_t)U->shard * sizeof(float), "wide init");
    device_copy_to_host(host, U->master, (size_t)U->shard * sizeof(float));
    for (int i = 0; i < U->nparams; i++) {
      const ParamInfo* p = &U->params[i];
      float base = 0.0f, scale;
      if (!strcmp(p->name, "embed.weight")) scale = 1.0f;
      else if (p->ndim == 2) scale = sqrtf(3.0f / (float)p->shape[1]);  // block matmuls and the lm_head
      else base = 1.0f, scale = 0.5f;                                    // norm gains
      for (int64_t e = 0; e < p->live; e++) {
        double r = (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
        host[p->offset + e] = base + scale * (float)(2.0 * r - 1.0);
      }
    }
    device_copy_to_device(U->master, host, (size_t)U->shard * sizeof(float));
    free(host);
  }
}

static void usage(void) {
  fprintf(stderr, "usage: llama_dump OUTDIR MODEL B T SEED K LR WD CLIP [INIT]\n"
                  "  INIT: llama (default, the model's own initialization) or wide\n"
                  "  e.g. llama_dump /tmp/d llama:L=2,C=64,H=4,KV=1,F=96,V=61,T=16 2 16 7 3 1e-3 0.1 1.0\n");
  dist_finalize();
  exit(2);
}

int main(int argc, char** argv) {
  dist_init(&argc, &argv);
  if (argc != 10 && argc != 11) usage();
  const char* init = argc == 11 ? argv[10] : "llama";
  if (strcmp(init, "llama") && strcmp(init, "wide")) usage();
  const char* dir = argv[1];
  char err[2048];
  ModelConfig cfg;
  if (model_config_parse(argv[2], &cfg, err, sizeof err)) fatal("%s", err);
  if (cfg.kind != MODEL_LLAMA) fatal("llama_dump: %s is not a Llama model", argv[2]);
  int B = atoi(argv[3]), T = atoi(argv[4]), K = atoi(argv[6]);
  uint64_t seed = strtoull(argv[5], NULL, 10);
  float lr = strtof(argv[7], NULL), wd = strtof(argv[8], NULL), clip = strtof(argv[9], NULL);
  if (B < 1 || T < 1 || T > cfg.T || K < 0) usage();
  if (dist_world() != 1) fatal("llama_dump runs on one rank (it reads whole gradient shards)");
  mkdir(dir, 0755);

  FSDPOptions opt = {.strategy = SHARD_FULL, .limit_all_gathers = 2, .sync_accum = 1,
                     .prefetch_forward = 1, .prefetch_backward = 1, .reduce_dtype = DT_F32};
  FSDP fs;
  fsdp_init(&fs, model_num_units(&cfg, opt.wrap), opt, comm_world(), NULL);
  Model m;
  model_create(&m, &cfg, &fs, B, T, 0, seed);
  if (!strcmp(init, "wide")) wide_init(&fs, seed);
  int N = B * T;
  fill_tokens(m.inputs, N, cfg.V, seed);
  fill_tokens(m.targets, N, cfg.V, seed + 1000003);

  float* params = gather_params(&fs);
  size_t pbytes = (size_t)total_live(&fs) * sizeof(float);
  write_file(dir, "params.bin", params, pbytes);
  write_file(dir, "tokens.bin", m.inputs, (size_t)N * sizeof(int32_t));
  write_file(dir, "targets.bin", m.targets, (size_t)N * sizeof(int32_t));

  // Raw logits of an evaluation forward, then K AdamW steps on the same batch.
  DumpTraining run = dump_logits_and_train(&fs, &m, dir, K, lr, wd, clip, N, pbytes);

  char path[4096];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  FILE* f = fopen(path, "w");
  if (!f) fatal("llama_dump: cannot open %s for writing", path);
  fprintf(f, "{\n  \"model\": \"%s\",\n", cfg.name);
  fprintf(f, "  \"L\": %d, \"C\": %d, \"H\": %d, \"KV\": %d, \"D\": %d, \"F\": %d, \"V\": %d, \"Vp\": %d, \"T_model\": %d,\n",
          cfg.L, cfg.C, cfg.H, cfg.KV, cfg.D, cfg.F, cfg.V, cfg.Vp, cfg.T);
  fprintf(f, "  \"tied\": %d, \"norm_eps\": %.9g, \"rope_theta\": %.9g, \"rope_factor\": %.9g,\n", cfg.tied,
          cfg.norm_eps, cfg.rope.theta, cfg.rope.factor);
  fprintf(f, "  \"rope_low_freq_factor\": %.9g, \"rope_high_freq_factor\": %.9g, \"rope_original_context\": %d,\n",
          cfg.rope.low_freq_factor, cfg.rope.high_freq_factor, cfg.rope.original_context);
  fprintf(f, "  \"B\": %d, \"T\": %d, \"seed\": %llu, \"K\": %d, \"init\": \"%s\",\n", B, T,
          (unsigned long long)seed, K, init);
  fprintf(f, "  \"lr\": %.9g, \"weight_decay\": %.9g, \"grad_clip\": %.9g,\n", lr, wd, clip);
  fprintf(f, "  \"beta1\": 0.9, \"beta2\": 0.95, \"eps\": 1e-8, \"decay_embeddings\": %d,\n", fs.opt.decay_embeddings);
  dump_meta_tail(f, &fs, &run, K);
  fclose(f);
  free(params);
  dist_finalize();
  return 0;
}
