// adamw.cu: AdamW on one contiguous shard range (fp32 master weights, m and v, optional bf16
// compute copy) or on all of a unit's ranges in one launch, and the blockwise sum of squares for
// the global gradient norm, with its exact total.
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
struct AdamConsts {
  float lr, b1, b2, omb1, omb2, eps, gscale, bc1, bc2;
};

// Bias corrections in double, rounded to float once, exactly as kernels/adamw_host.h.
static AdamConsts adam_consts(AdamWArgs a) {
  AdamConsts c = {a.lr, a.beta1, a.beta2, 1.0f - a.beta1, 1.0f - a.beta2, a.eps, a.grad_scale,
                  adamw_bias_correction(a.beta1, a.step), adamw_bias_correction(a.beta2, a.step)};
  return c;
}
// The same from a step's scalars in device memory (the host computed the bias corrections).
static __device__ __forceinline__ AdamConsts adam_consts_at(const AdamWStep* s) {
  AdamConsts c = {s->lr, s->beta1, s->beta2, 1.0f - s->beta1, 1.0f - s->beta2, s->eps, s->grad_scale, s->bc1, s->bc2};
  return c;
}

// One element; returns the new p.
__device__ __forceinline__ float adam_element(float pi, float gi, float* mi, float* vi, const AdamConsts& c, float wd) {
  gi = __fmul_rn(gi, c.gscale);
  float m = __fadd_rn(__fmul_rn(c.b1, *mi), __fmul_rn(c.omb1, gi));
  float v = __fadd_rn(__fmul_rn(c.b2, *vi), __fmul_rn(__fmul_rn(c.omb2, gi), gi));
  *mi = m;
  *vi = v;
  float mhat = __fdiv_rn(m, c.bc1), vhat = __fdiv_rn(v, c.bc2);
  float upd = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), c.eps)), __fmul_rn(wd, pi));
  return __fsub_rn(pi, __fmul_rn(c.lr, upd));
}

__global__ void adamw_kernel(float* p, act16* p_act, const float* g, float* m, float* v, size_t n, AdamConsts c,
                             float wd) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float pi = adam_element(p[i], g[i], &m[i], &v[i], c, wd);
    p[i] = pi;
    if (p_act) p_act[i] = f2act(pi);
  }
}

extern "C" void adamw_update(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v,
                             size_t n, AdamWArgs a) {
  if (!n) return;
  adamw_kernel<<<grid_for(n, ADAM_THREADS), ADAM_THREADS, 0, ctx->stream>>>(
      p, p_act ? as_act16(p_act) : NULL, g, m, v, n, adam_consts(a), a.weight_decay);
  CUDA_LAUNCH_CHECK();
}

// A unit's ranges in one launch: up to ADAM_MAX_RANGES per launch, passed by value (kernel
// parameters). Each thread takes 4 consecutive elements from a multiple of 4, finds the range of
// the first by binary search and steps through the next ones; when all 4 are in ranges and the
// pointers allow it, they move as 16-byte loads and stores (8-byte for the 16-bit copy). Elements
// in gaps are left alone.
#define ADAM_MAX_RANGES 32
struct AdamRanges {
  int64_t start[ADAM_MAX_RANGES], end[ADAM_MAX_RANGES];
  unsigned decay;  // bit k: range k takes weight decay
  int n;
};

__global__ void adamw_ranges_kernel(float* p, act16* p_act, const float* g, float* m, float* v, AdamRanges R,
                                    const AdamWStep* step, int vec) {
  if (!step->update) return;  // the step was skipped on the device (kernels/step_control.h)
  const AdamConsts c = adam_consts_at(step);
  const float wd = step->weight_decay;
  int64_t lo = R.start[0] & ~(int64_t)3, hi = R.end[R.n - 1];
  for (int64_t i0 = lo + 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x); i0 < hi;
       i0 += 4 * (int64_t)gridDim.x * blockDim.x) {
    int a = 0, b = R.n - 1;  // the first range that ends after i0
    while (a < b) {
      int mid = (a + b) / 2;
      if (R.end[mid] > i0) b = mid;
      else a = mid + 1;
    }
    float wds[4];
    int in[4], all = 1;
    for (int j = 0, k = a; j < 4; j++) {
      int64_t i = i0 + j;
      while (k < R.n && R.end[k] <= i) k++;
      in[j] = k < R.n && i >= R.start[k];
      wds[j] = in[j] && (R.decay >> k & 1u) ? wd : 0.0f;
      all &= in[j];
    }
    if (all && vec) {
      Pack<float, 4> pv = load_pack<4>(p + i0), gv = load_pack<4>(g + i0);
      Pack<float, 4> mv = load_pack<4>(m + i0), vv = load_pack<4>(v + i0);
      for (int j = 0; j < 4; j++) pv.v[j] = adam_element(pv.v[j], gv.v[j], &mv.v[j], &vv.v[j], c, wds[j]);
      store_pack<4>(p + i0, pv), store_pack<4>(m + i0, mv), store_pack<4>(v + i0, vv);
      if (p_act) {
        ActPack<4> av;
        for (int j = 0; j < 4; j++) av.v[j] = f2act(pv.v[j]);
        store_pack<4>(p_act + i0, av);
      }
    } else {
      for (int j = 0; j < 4; j++)
        if (in[j]) {
          float pi = adam_element(p[i0 + j], g[i0 + j], &m[i0 + j], &v[i0 + j], c, wds[j]);
          p[i0 + j] = pi;
          if (p_act) p_act[i0 + j] = f2act(pi);
        }
    }
  }
}

extern "C" void adamw_update_ranges(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v,
                                    const AdamWRange* r, int nr, const AdamWStep* s) {
  // 16-byte accesses of the fp32 arrays, 8-byte ones of the 16-bit copy (4 elements a thread).
  int vec = aligned16(p, g, m, v) && (uintptr_t)p_act % 8 == 0;
  for (int k0 = 0; k0 < nr; k0 += ADAM_MAX_RANGES) {
    AdamRanges R = {};
    R.n = nr - k0 < ADAM_MAX_RANGES ? nr - k0 : ADAM_MAX_RANGES;
    for (int k = 0; k < R.n; k++) {
      const AdamWRange* x = &r[k0 + k];
      if (x->start >= x->end || (k > 0 && x->start < R.end[k - 1]))
        cuda_fail("adamw_update_ranges", "ranges must be non-empty, ascending and disjoint", __FILE__, __LINE__);
      R.start[k] = x->start, R.end[k] = x->end;
      if (x->decay) R.decay |= 1u << k;
    }
    size_t quads = (size_t)((R.end[R.n - 1] - (R.start[0] & ~(int64_t)3) + 3) / 4);
    adamw_ranges_kernel<<<grid_for(quads, ADAM_THREADS), ADAM_THREADS, 0, ctx->stream>>>(
        p, p_act ? as_act16(p_act) : NULL, g, m, v, R, s, vec);
    CUDA_LAUNCH_CHECK();
  }
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
  static_assert((size_t)EXACT_GRID * NORM_WORDS * sizeof(int64_t) <= REDUCE_STREAM_SCRATCH_BYTES,
                "the reduce-scatter stream's scratch holds exact_sum's partials");
  size_t need = (size_t)EXACT_GRID * NORM_WORDS * sizeof(int64_t);
  if (ctx->scratch_bytes < need) cuda_fail("exact_sum", "kernel scratch too small", __FILE__, __LINE__);
  int64_t* partials = (int64_t*)ctx->scratch;
  exact_partials_kernel<<<EXACT_GRID, EXACT_THREADS, 0, ctx->stream>>>(partials, x, n);
  CUDA_LAUNCH_CHECK();
  exact_finish_kernel<<<1, NORM_WORDS, 0, ctx->stream>>>(words, partials);
  CUDA_LAUNCH_CHECK();
}
