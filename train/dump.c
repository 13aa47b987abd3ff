// dump.c: --dump-params, the final parameters in global order for comparisons between runs.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infra/dist.h"
#include "train/train.h"

static char dump_tmp[4096], dump_meta_tmp[4200];

// A failed dump (a full disk) leaves neither temporary behind: only whole files are ever left.
static void dump_failed(const char* what, const char* path) __attribute__((noreturn));
static void dump_failed(const char* what, const char* path) {
  int e = errno;
  unlink(dump_tmp);
  unlink(dump_meta_tmp);
  fatal("--dump-params: %s '%s' failed: %s (nothing was left behind)", what, path, strerror(e));
}

// Writes every parameter's live fp32 values in global order (units, then table order) to
// path, and the table (unit, name, shape, count) to path.json, from rank 0, through temporary
// names so a crash never leaves a partial file.
void dump_params(FSDP* fs, const char* path) {
  char meta[4096];
  char* tmp = dump_tmp;
  snprintf(dump_tmp, sizeof dump_tmp, "%s.tmp", path);
  snprintf(meta, sizeof meta, "%s.json", path);
  snprintf(dump_meta_tmp, sizeof dump_meta_tmp, "%s.tmp", meta);
  FILE *f = NULL, *j = NULL;
  if (fs->world_rank == 0 && (!(f = fopen(dump_tmp, "wb")) || !(j = fopen(dump_meta_tmp, "w"))))
    dump_failed("opening", path);
  if (j) fprintf(j, "[");
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    float* full = xmalloc((size_t)U->numel * sizeof(float), "parameter dump");
    fsdp_gather_master(fs, u, full);
    for (int i = 0; i < U->nparams && f; i++) {
      const ParamInfo* p = &U->params[i];
      if (fwrite(full + p->offset, sizeof(float), p->live, f) != (size_t)p->live) dump_failed("writing", tmp);
      fprintf(j, "%s{\"unit\": \"%s\", \"name\": \"%s\", \"shape\": [", u || i ? ", " : "", U->name, p->name);
      for (int d = 0; d < p->ndim; d++) fprintf(j, "%s%lld", d ? ", " : "", (long long)p->shape[d]);
      fprintf(j, "], \"count\": %lld}", (long long)p->live);
    }
    free(full);
  }
  if (j) fprintf(j, "]\n");
  if (!f) return;
  int failed = fflush(j) || ferror(j);
  failed |= fclose(f) != 0;  // both closed whatever happens, so a failure leaves no open file
  failed |= fclose(j) != 0;
  if (failed || rename(dump_tmp, path) || rename(dump_meta_tmp, meta)) dump_failed("writing", path);
}

