// adamw_host.h: the AdamW update as a host loop, the one home of its float arithmetic on a CPU.
//
// The CPU backend's adamw_update runs it on its (host) memory; --offload optim runs it on the
// pinned host shards of any backend (adamw_update_host). The CUDA kernel (kernels/cuda/adamw.cu)
// is the same formula operation for operation. Bias corrections are computed once
// (adamw_bias_correction, kernels.h); each element is float arithmetic in the order of the formula
// in kernels.h:
//   m = b1 m + (1-b1) g';  v = b2 v + ((1-b2) g') g';  g' = g * grad_scale
//   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p),  mhat = m / bc1,  vhat = v / bc2
// Builds compile C in ISO mode (-std=c11), so no multiply-add is contracted into an FMA.
#ifndef FSDP_KERNELS_ADAMW_HOST_H
#define FSDP_KERNELS_ADAMW_HOST_H
#include <math.h>
#include <stddef.h>

#include "kernels/cpu/parallel.h"
#include "kernels/kernels.h"

// copy: when not NULL, receives p as well (the CPU backend's fp32 compute copy).
static inline void adamw_host_loop(float* p, float* copy, const float* g, float* m, float* v, size_t n, AdamWArgs a) {
  float bc1 = adamw_bias_correction(a.beta1, a.step), bc2 = adamw_bias_correction(a.beta2, a.step);
  float omb1 = 1.0f - a.beta1, omb2 = 1.0f - a.beta2;
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(2 * n))
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * a.grad_scale;
    float mi = a.beta1 * m[i] + omb1 * gi;
    float vi = a.beta2 * v[i] + omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    float pi = p[i];
    pi -= a.lr * (mhat / (sqrtf(vhat) + a.eps) + a.weight_decay * pi);
    p[i] = pi;
    if (copy) copy[i] = pi;
  }
}
#endif
