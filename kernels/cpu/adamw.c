// adamw.c: AdamW update of one shard range and the blockwise gradient sum of squares, fp32 CPU.
#include <math.h>

#include "kernels/cpu/parallel.h"
#include "kernels/kernels.h"

// Each block is summed by one thread, in double, in index order: a block's value depends
// only on its 128 gradients, never on the thread count, the rank or the world size.
void block_sumsq(KernelCtx* ctx, double* block_sums, const float* g, size_t n) {
  size_t nb = n / NORM_BLOCK;
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(n))
  for (size_t b = 0; b < nb; b++) {
    const float* x = g + b * NORM_BLOCK;
    double s = 0.0;
    for (int i = 0; i < NORM_BLOCK; i++) s += (double)x[i] * x[i];
    block_sums[b] = s;
  }
}

// Precision: the bias corrections 1 - beta^step are computed once in double (powf of a
// number near 1 at large step loses digits) and rounded to float once; the per-element
// update is float arithmetic in the order of the formula in kernels.h:
//   m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;  g' = g * grad_scale
//   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p),  mhat = m / bc1,  vhat = v / bc2
void adamw_update(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v,
                  size_t n, AdamWArgs a) {
  float bc1 = (float)(1.0 - pow((double)a.beta1, a.step));
  float bc2 = (float)(1.0 - pow((double)a.beta2, a.step));
  float omb1 = 1.0f - a.beta1, omb2 = 1.0f - a.beta2;
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(n))
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
    if (p_act) p_act[i] = pi;
  }
}
