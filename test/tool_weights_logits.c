// tool_weights_logits.c: fsdp.c's logits and loss for weights given to --init-from, on tokens
// a test wrote, for test/test_hf_parity.py (transformers against us on the same weights) and
// test/test_weights.sh (loading on several ranks).
//
//   weights_logits PATH B T TE DIR
//
// PATH: an llm.c .bin or a Hugging Face directory (weights/load.c). Reads DIR/tokens.bin
// (int32 [B*T]: GPT inputs / T5 decoder inputs), DIR/targets.bin (int32 [B*T], < 0 ignored)
// and, for T5 (TE > 0), DIR/enc_tokens.bin (int32 [B*TE]). Writes, on rank 0, DIR/logits.bin
// (fp32 [B*T, V]: the real vocabulary's columns of an evaluation forward) and DIR/loss.txt
// (mean cross-entropy over the targets >= 0) and prints params_digest like train_gpt --digest.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "fsdp/fsdp.h"
#include "layers/model.h"
#include "weights/weights.h"

static void read_ints(const char* dir, const char* name, int32_t* out, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (!f || fread(out, sizeof(int32_t), n, f) != n) fatal("weights_logits: cannot read %zu ints from %s", n, path);
  fclose(f);
}

int main(int argc, char** argv) {
  dist_init(&argc, &argv);
  if (argc != 6) {
    fprintf(stderr, "usage: weights_logits PATH B T TE DIR\n");
    dist_finalize();
    return 2;
  }
  const char *path = argv[1], *dir = argv[5];
  int B = atoi(argv[2]), T = atoi(argv[3]), Te = atoi(argv[4]);
  char err[4096];
  ModelConfig cfg;
  if (weights_resolve_model(NULL, path, &cfg, err, sizeof err)) fatal("%s", err);
  if (B < 1 || T < 1 || (cfg.kind != MODEL_T5 && T > cfg.T) || (cfg.kind == MODEL_T5 && Te < 1))
    fatal("weights_logits: bad B %d / T %d / TE %d for %s", B, T, Te, cfg.name);
  FSDPOptions opt = {.strategy = SHARD_FULL, .limit_all_gathers = 2, .sync_accum = 1,
                     .prefetch_forward = 1, .prefetch_backward = 1, .reduce_dtype = DT_F32};
  FSDP fs;
  fsdp_init(&fs, model_num_units(&cfg, opt.wrap), opt, comm_world(), NULL);
  Model m;
  model_create(&m, &cfg, &fs, B, T, cfg.kind == MODEL_T5 ? Te : 0, 1);
  weights_load(&fs, &cfg, path, "--init-from");
  size_t N = (size_t)B * T, V = cfg.V, Vp = cfg.Vp;
  int32_t* toks = xmalloc(N * sizeof(int32_t), "tokens");
  int32_t* targets = xmalloc(N * sizeof(int32_t), "targets");
  read_ints(dir, "tokens.bin", toks, N);
  read_ints(dir, "targets.bin", targets, N);
  device_copy_to_device(m.inputs, toks, N * sizeof(int32_t));
  device_copy_to_device(m.targets, targets, N * sizeof(int32_t));
  if (cfg.kind == MODEL_T5) {
    int32_t* enc = xmalloc((size_t)B * Te * sizeof(int32_t), "encoder tokens");
    read_ints(dir, "enc_tokens.bin", enc, (size_t)B * Te);
    device_copy_to_device(m.enc_inputs, enc, (size_t)B * Te * sizeof(int32_t));
    free(enc);
  }
  // Raw logits first (a forward with targets may leave other values in the logits buffer).
  fsdp_begin_forward(&fs, 0, 0);
  model_forward(&m, 0, NULL);
  float* logits = xmalloc(N * Vp * sizeof(float), "logits");
  device_copy_to_host(logits, m.logits, N * Vp * sizeof(float));
  fsdp_begin_forward(&fs, 0, 0);
  double loss_sum = model_forward(&m, 1, NULL);
  int valid = 0;
  for (size_t i = 0; i < N; i++) valid += targets[i] >= 0;
  uint64_t digest = fsdp_params_digest(&fs);
  if (dist_rank() == 0) {
    char p[4200];
    snprintf(p, sizeof p, "%s/logits.bin", dir);
    FILE* f = fopen(p, "wb");
    for (size_t i = 0; f && i < N; i++)
      if (fwrite(logits + i * Vp, sizeof(float), V, f) != V) fatal("weights_logits: writing %s failed", p);
    if (!f || fclose(f)) fatal("weights_logits: cannot write %s", p);
    snprintf(p, sizeof p, "%s/loss.txt", dir);
    f = fopen(p, "w");
    if (!f) fatal("weights_logits: cannot write %s", p);
    fprintf(f, "%.9g\n", loss_sum / (valid ? valid : 1));
    fclose(f);
    printf("params_digest %016llx\n", (unsigned long long)digest);
  }
  free(logits);
  free(toks);
  free(targets);
  dist_finalize();
  return 0;
}
