// adamw_host.c: --offload optim for the CUDA backend: AdamW on the pinned host shards, with the
// host loop every backend shares (kernels/adamw_host.h). Host C, linked into the CUDA binaries.
#include "kernels/adamw_host.h"

void adamw_update_host(KernelCtx* ctx, float* p, const float* g, float* m, float* v, size_t n, AdamWArgs a) {
  (void)ctx;
  adamw_host_loop(p, NULL, g, m, v, n, a);
}
