// dump.c: --dump-params, the final parameters in global order for comparisons between runs.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "train/train.h"

// Writes every parameter's live fp32 values in global order (units, then table order) to
// path, and the table (unit, name, shape, count) to path.json, from rank 0, through temporary
// names so a crash never leaves a partial file.
void dump_params(FSDP* fs, const char* path) {
  char tmp[4096], meta[4096], meta_tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  snprintf(meta, sizeof meta, "%s.json", path);
  snprintf(meta_tmp, sizeof meta_tmp, "%s.tmp", meta);
  FILE *f = NULL, *j = NULL;
  if (fs->world_rank == 0 && (!(f = fopen(tmp, "wb")) || !(j = fopen(meta_tmp, "w"))))
    fatal("--dump-params: cannot open '%s' for writing: %s", path, strerror(errno));
  if (j) fprintf(j, "[");
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    float* full = xmalloc((size_t)U->numel * sizeof(float), "parameter dump");
    fsdp_gather_master(fs, u, full);
    for (int i = 0; i < U->nparams && f; i++) {
      const ParamInfo* p = &U->params[i];
      if (fwrite(full + p->offset, sizeof(float), p->live, f) != (size_t)p->live)
        fatal("--dump-params: writing '%s' failed: %s", tmp, strerror(errno));
      fprintf(j, "%s{\"unit\": \"%s\", \"name\": \"%s\", \"shape\": [", u || i ? ", " : "", U->name, p->name);
      for (int d = 0; d < p->ndim; d++) fprintf(j, "%s%lld", d ? ", " : "", (long long)p->shape[d]);
      fprintf(j, "], \"count\": %lld}", (long long)p->live);
    }
    free(full);
  }
  if (j) fprintf(j, "]\n");
  if (f && (fflush(j) || ferror(j) || fclose(f) || fclose(j) || rename(tmp, path) || rename(meta_tmp, meta)))
    fatal("--dump-params: writing '%s' failed: %s", path, strerror(errno));
}

