// elementwise.c: small vector helpers, fp32 CPU. Each element is independent, so a plain
// static split across threads is already deterministic.
#include <string.h>

#include "kernels/cpu/parallel.h"
#include "kernels/kernels.h"

void add_inplace(KernelCtx* ctx, act_t* y, const act_t* x, size_t n) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(n))
  for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void scale_act(KernelCtx* ctx, act_t* x, float s, size_t n) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(n))
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

void fill_zero_act(KernelCtx* ctx, act_t* x, size_t n) { memset(x, 0, n * sizeof(act_t)); }

void fill_zero_f32(KernelCtx* ctx, float* x, size_t n) { memset(x, 0, n * sizeof(float)); }

void scale_f32(KernelCtx* ctx, float* x, float s, size_t n) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(n))
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

void add_f32(KernelCtx* ctx, float* y, const float* x, size_t n) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(n))
  for (size_t i = 0; i < n; i++) y[i] += x[i];
}

// act_t is float on this backend, so the casts are copies (memmove: in == out is harmless).
void cast_f32_to_act(KernelCtx* ctx, act_t* out, const float* in, size_t n) {
  if (out != in) memmove(out, in, n * sizeof(float));
}

void cast_act_to_f32(KernelCtx* ctx, float* out, const act_t* in, size_t n) {
  if (out != in) memmove(out, in, n * sizeof(float));
}

void narrow_f32_to_act(KernelCtx* ctx, float* buf, size_t n) {}
