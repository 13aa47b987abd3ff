// export_weights.c: a Hugging Face directory from a finished run (export_weights_cpu).
//
//   export_weights_cpu SRC DIR        (or under mpirun: each rank writes its own shards)
//
// SRC: an fsdp.c checkpoint (--save DIR), an llm.c .bin or a Hugging Face directory
// (weights/source.c); DIR gets config.json and model.safetensors (weights/export.c), the same
// files train_gpt --export writes at the end of a run, and the tokenizer files of SRC or of the
// data the checkpoint was trained on (its meta.json records --data).
#include <stdio.h>
#include <stdlib.h>

#include "infra/dist.h"
#include "infra/files.h"
#include "layers/model.h"
#include "weights/weights.h"

int main(int argc, char** argv) {
  dist_init(&argc, &argv);
  if (argc != 3) {
    if (dist_rank() == 0)
      fprintf(stderr, "usage: export_weights_cpu SRC DIR\n"
                      "  SRC  an fsdp.c checkpoint (--save), an llm.c .bin or a Hugging Face directory\n"
                      "  DIR  gets config.json + model.safetensors (transformers' from_pretrained reads it)\n");
    dist_finalize();
    return 2;
  }
  char err[4096];
  ModelConfig cfg;
  if (model_source_config(argv[1], &cfg, err, sizeof err)) fatal("%s", err);
  KernelCtx* kctx = kernels_init(dist_local_rank());
  // Before anything is read: DIR must be a new name or an earlier export of fsdp.c, and no
  // other process may be writing it (weights/export.c, infra/files.h).
  int ok = 1;
  char note[4400] = "";
  if (dist_rank() == 0)
    ok = !weights_export_check("DIR", argv[2], err, sizeof err) && !dir_lock("DIR", argv[2], note, sizeof note, err, sizeof err);
  if (note[0]) fprintf(stderr, "note: %s\n", note);
  if (!comm_all_true(comm_world(), ok)) {
    if (!ok) fprintf(stderr, "error: %s (nothing was written)\n", err);
    dist_finalize();
    return 2;
  }
  FSDPOptions opt = {.strategy = SHARD_FULL, .limit_all_gathers = 2, .sync_accum = 1,
                     .prefetch_forward = 1, .prefetch_backward = 1, .reduce_dtype = DT_F32};
  FSDP fs;
  fsdp_init(&fs, model_num_units(&cfg, opt.wrap), opt, comm_world(), kctx);
  Model m;  // the smallest activations: nothing is computed
  model_create(&m, &cfg, &fs, 1, 1, cfg.kind == MODEL_T5 ? 1 : 0, 1);
  model_source_load(&fs, &cfg, argv[1]);
  char tokenizer_dir[4200];  // an export's own, or beside the data a checkpoint was trained on
  int has_tokenizer = model_source_tokenizer_dir(argv[1], tokenizer_dir, sizeof tokenizer_dir) == 0;
  weights_export(&fs, &cfg, argv[2], has_tokenizer ? tokenizer_dir : NULL);
  log0("exported %s (%s) to %s\n", argv[1], cfg.name, argv[2]);
  comm_shutdown();
  kernels_shutdown(kctx);
  dist_finalize();
  return 0;
}
