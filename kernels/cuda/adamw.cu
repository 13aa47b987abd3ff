// adamw.cu: AdamW on one contiguous shard range (fp32 master weights, m and v, optional bf16
// compute copy) and the blockwise sum of squares for the global gradient norm, with its exact
// total.
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/exact_sum.h"

#define ADAM_THREADS 256

// The update is the CPU backend's formula, operation for operation, with explicitly rounded
// intrinsics: nvcc would otherwise contract a*b + c into FMAs, which round once instead of
// twice. With them (and IEEE division and square root, nvcc's defaults) every value is the
// same float the CPU computes:
//   g' = g * grad_scale;  m = b1 m + (1-b1) g';  v = b2 v + ((1-b2) g') g'
//   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p),  mhat = m / bc1,  vhat = v / bc2
__global__ void adamw_kernel(float* p, act16* p_act, const float* g, float* m, float* v, size_t n,
                             float lr, float b1, float b2, float omb1, float omb2, float eps,
                             float wd, float gscale, float bc1, float bc2) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float gi = __fmul_rn(g[i], gscale);
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(omb1, gi));
    float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(omb2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float mhat = __fdiv_rn(mi, bc1), vhat = __fdiv_rn(vi, bc2);
    float pi = p[i];
    float upd = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps)), __fmul_rn(wd, pi));
    pi = __fsub_rn(pi, __fmul_rn(lr, upd));
    p[i] = pi;
    if (p_act) p_act[i] = f2act(pi);
  }
}

extern "C" void adamw_update(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v,
                             size_t n, AdamWArgs a) {
  if (!n) return;
  // Bias corrections in double, rounded to float once, exactly as kernels/cpu/adamw.c.
  float bc1 = (float)(1.0 - pow((double)a.beta1, a.step));
  float bc2 = (float)(1.0 - pow((double)a.beta2, a.step));
  float omb1 = 1.0f - a.beta1, omb2 = 1.0f - a.beta2;
  adamw_kernel<<<grid_for(n, ADAM_THREADS), ADAM_THREADS, 0, ctx->stream>>>(
      p, p_act ? as_act16(p_act) : NULL, g, m, v, n, a.lr, a.beta1, a.beta2, omb1, omb2, a.eps,
      a.weight_decay, a.grad_scale, bc1, bc2);
  CUDA_LAUNCH_CHECK();
}

// One warp per NORM_BLOCK block: lane l sums g[l], g[l+32], g[l+64], g[l+96] in double, in
// that order, then a fixed shuffle-down tree adds the lanes; lane 0 writes. The value depends
// only on the block's 128 gradients (not on the rank, the world size or the launch), so it is
// the same on every run; it need not equal the CPU's strictly sequential sum bit for bit.
#define SUMSQ_WARPS 8
__global__ void block_sumsq_kernel(double* sums, const float* g, size_t nblocks) {
  size_t b = (size_t)blockIdx.x * SUMSQ_WARPS + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  if (b >= nblocks) return;
  const float* x = g + b * NORM_BLOCK;
  double s = 0.0;
#pragma unroll
  for (int i = lane; i < NORM_BLOCK; i += 32) s += (double)x[i] * (double)x[i];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if (lane == 0) sums[b] = s;
}

extern "C" void block_sumsq(KernelCtx* ctx, double* block_sums, const float* g, size_t n) {
  size_t nb = n / NORM_BLOCK;
  if (!nb) return;
  size_t blocks = (nb + SUMSQ_WARPS - 1) / SUMSQ_WARPS;
  if (blocks > 0x7fffffffu) cuda_fail("block_sumsq", "too many blocks", __FILE__, __LINE__);
  block_sumsq_kernel<<<(unsigned int)blocks, 32 * SUMSQ_WARPS, 0, ctx->stream>>>(block_sums, g, nb);
  CUDA_LAUNCH_CHECK();
}

// The exact sum in two passes, without atomics: EXACT_GRID blocks each add a strided share of x
// into per-thread limbs, sum those over the block word by word in shared memory and write one
// partial (NORM_WORDS int64) to the kernel scratch; one block of NORM_WORDS threads then adds
// the partials. Integer sums, so any split gives the same words.
#define EXACT_GRID 64
#define EXACT_THREADS 256
__global__ void exact_partials_kernel(int64_t* partials, const double* x, size_t n) {
  __shared__ int64_t part[EXACT_THREADS];
  int64_t w[NORM_WORDS] = {0};
  for (size_t i = blockIdx.x * (size_t)EXACT_THREADS + threadIdx.x; i < n; i += (size_t)EXACT_GRID * EXACT_THREADS) {
    double v = x[i];
    if (!isfinite(v)) w[EXACT_WORDS]++;
    exact_add(w, v);
  }
  for (int k = 0; k < NORM_WORDS; k++) {
    part[threadIdx.x] = w[k];
    __syncthreads();
    for (int s = EXACT_THREADS / 2; s > 0; s >>= 1) {
      if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x * NORM_WORDS + k] = part[0];
    __syncthreads();
  }
}

__global__ void exact_finish_kernel(int64_t* words, const int64_t* partials) {
  int k = threadIdx.x;
  int64_t s = 0;
  for (int b = 0; b < EXACT_GRID; b++) s += partials[b * NORM_WORDS + k];
  words[k] = s;
}

extern "C" void exact_sum(KernelCtx* ctx, int64_t* words, const double* x, size_t n) {
  static_assert(NORM_WORDS == EXACT_WORDS + 1, "NORM_WORDS: the limbs, the overflow count, the non-finite count");
  size_t need = (size_t)EXACT_GRID * NORM_WORDS * sizeof(int64_t);
  if (ctx->scratch_bytes < need) cuda_fail("exact_sum", "kernel scratch too small", __FILE__, __LINE__);
  int64_t* partials = (int64_t*)ctx->scratch;
  exact_partials_kernel<<<EXACT_GRID, EXACT_THREADS, 0, ctx->stream>>>(partials, x, n);
  CUDA_LAUNCH_CHECK();
  exact_finish_kernel<<<1, NORM_WORDS, 0, ctx->stream>>>(words, partials);
  CUDA_LAUNCH_CHECK();
}
