// backend.c: the CPU backend has no context to create: kernels run on the calling thread's
// OpenMP team and write host memory.
#include <stdio.h>

#include "kernels/cpu/vec.h"
#include "kernels/kernels.h"

KernelCtx* kernels_init(int device) {
  (void)device;
  return NULL;
}
void kernels_shutdown(KernelCtx* ctx) { (void)ctx; }
KernelCtx* kernels_stream_ctx(KernelCtx* ctx, int stream) {
  (void)stream;
  return ctx;
}
const char* kernels_backend(void) { return "cpu"; }
void kernels_device_name(KernelCtx* ctx, char* out, size_t len) {
  (void)ctx;
  snprintf(out, len, "cpu (%s vectors)", VEC_TARGET);
}
