// position.cu: T5's relative position bias, forward and deterministic backward.
//
// The bucket function is kernels/position_bucket.h, the same source the CPU backend and the
// host function relative_position_bucket use (here compiled for both host and device).
//
// Backward without atomics, in two fixed-order passes. A bucket depends only on the relative
// position r = j - i, so:
//   1. diagonal sums: thread (h, r) adds dbias[h, i, i + r] over i in increasing order into the
//      ctx scratch (S[h, r], r from -(Tq-1) to Tk-1). Neighbouring threads read neighbouring
//      j, so the reads are coalesced.
//   2. thread (bucket, h) adds S[h, r] over r in increasing order for the r in its bucket and
//      adds the total to dtable[bucket, h].
// The summation order differs from the CPU's (i, j) order, but is fixed: the same bits on
// every run.
#include "kernels/cuda/common.cuh"
#include "kernels/position_bucket.h"

#define POS_THREADS 256

extern "C" int relative_position_bucket(int relative_position, int bidirectional, int num_buckets,
                                        int max_distance) {
  return position_bucket(relative_position, bidirectional, num_buckets, max_distance);
}

// Thread (i, j): one bucket evaluation, then the H heads (coalesced in j for each head).
__global__ void relative_bias_forward_kernel(act16* bias, const act16* table, int H, int Tq, int Tk,
                                             int bidirectional, int num_buckets, int max_distance) {
  size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (e >= (size_t)Tq * Tk) return;
  int i = (int)(e / Tk), j = (int)(e % Tk);
  int b = position_bucket(j - i, bidirectional, num_buckets, max_distance);
  for (int h = 0; h < H; h++) bias[((size_t)h * Tq + i) * Tk + j] = table[(size_t)b * H + h];
}

// S[h * R + (r + Tq - 1)] = sum over i (increasing) of dbias[h, i, i + r], R = Tq + Tk - 1.
__global__ void relative_bias_diag_kernel(float* S, const float* dbias, int H, int Tq, int Tk) {
  int R = Tq + Tk - 1;
  size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (e >= (size_t)H * R) return;
  int h = (int)(e / R), r = (int)(e % R) - (Tq - 1);
  int i0 = r < 0 ? -r : 0, i1 = min(Tq, Tk - r);  // i in [i0, i1): 0 <= i < Tq, 0 <= i + r < Tk
  const float* base = dbias + (size_t)h * Tq * Tk;
  float s = 0.0f;
  for (int i = i0; i < i1; i++) s += base[(size_t)i * Tk + i + r];
  S[e] = s;
}

__global__ void relative_bias_bucket_kernel(float* dtable, const float* S, int H, int Tq, int Tk,
                                            int bidirectional, int num_buckets, int max_distance) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= num_buckets * H) return;
  int b = e / H, h = e % H;
  int R = Tq + Tk - 1;
  float s = 0.0f;
  for (int k = 0; k < R; k++)
    if (position_bucket(k - (Tq - 1), bidirectional, num_buckets, max_distance) == b) s += S[(size_t)h * R + k];
  dtable[(size_t)b * H + h] += s;
}

extern "C" void relative_bias_forward(KernelCtx* ctx, act_t* bias, const act_t* table, int H, int Tq, int Tk,
                                      int bidirectional, int num_buckets, int max_distance) {
  size_t n = (size_t)Tq * Tk;
  if (!n || H <= 0) return;
  relative_bias_forward_kernel<<<ceil_div(n, POS_THREADS), POS_THREADS, 0, ctx->stream>>>(
      as_act16(bias), as_act16(table), H, Tq, Tk, bidirectional, num_buckets, max_distance);
  CUDA_LAUNCH_CHECK();
}

extern "C" void relative_bias_backward(KernelCtx* ctx, float* dtable, const float* dbias, int H, int Tq, int Tk,
                                       int bidirectional, int num_buckets, int max_distance) {
  if (Tq <= 0 || Tk <= 0 || H <= 0 || num_buckets <= 0) return;
  size_t R = (size_t)Tq + Tk - 1;
  if ((size_t)H * R * sizeof(float) > ctx->scratch_bytes)
    cuda_fail("relative_bias_backward", "H x (Tq + Tk - 1) diagonal sums exceed the kernel scratch", __FILE__,
              __LINE__);
  float* S = (float*)ctx->scratch;
  relative_bias_diag_kernel<<<ceil_div((size_t)H * R, POS_THREADS), POS_THREADS, 0, ctx->stream>>>(S, dbias, H, Tq,
                                                                                                   Tk);
  CUDA_LAUNCH_CHECK();
  relative_bias_bucket_kernel<<<ceil_div((size_t)num_buckets * H, POS_THREADS), POS_THREADS, 0, ctx->stream>>>(
      dtable, S, H, Tq, Tk, bidirectional, num_buckets, max_distance);
  CUDA_LAUNCH_CHECK();
}
