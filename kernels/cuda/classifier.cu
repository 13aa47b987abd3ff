// classifier.cu: fused softmax + cross-entropy + logit gradient over a padded vocabulary, and
// the host sampling probabilities.
//
// One block per row, and each logit is read once and written once (the row's memory floor):
//   1. each thread loads its packs of W columns (ActPack, common.cuh: 16-byte loads when the
//      padded row allows, W = 8), keeps them in the block's shared memory, and keeps an online
//      (max, sum of exp(x - max)) pair: each pack's own pair is combined into it, and a new
//      maximum rescales the running sum;
//   2. the pairs are combined across the block in a fixed tree (warp butterfly, then the warps'
//      results in warp order), giving the row's max M and S = sum exp(x - M), deterministic;
//   3. loss = M + log(S) - x[target] (fp32), and every column is overwritten in place, from the
//      shared copy, with dloss * (exp(x - M) / S - onehot), padding columns V..Vp-1 with 0.
// Shared memory rather than registers: GPT-2's row is 13 packs a thread, which registers hold
// only by spilling (ptxas). A row beyond the shared memory (Vp > 116,224) is read again for step
// 3, with the same arithmetic.
// The logit of the target is read before the block barrier of step 2, and every thread has
// finished reading its columns at that barrier, so the in-place writes of step 3 never race
// with a read. Rows with target < 0 get loss 0 and an all-zero gradient.
//
// Infinite logits follow the CPU reference (kernels/cpu/classifier.c): a logit equal to the
// max counts exp(0) = 1, also when the max is infinite. So -inf logits get probability 0 (and
// a -inf target loss +inf), a row of only -inf logits is uniform (loss log V), and a thread
// whose first columns are -inf counts them instead of evaluating exp(-inf - -inf) = NaN. A
// (max, sum) pair is therefore empty exactly when its sum is 0: any element makes it >= 1.
#include <math.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/loss_sum.h"

#define CLS_THREADS 512

// Combine two (max, sum) pairs. A pair with no elements is (-inf, 0).
static __device__ __forceinline__ void lse_combine(float& m, float& s, float m2, float s2) {
  if (s2 == 0.0f) return;
  if (s == 0.0f) {
    m = m2, s = s2;
    return;
  }
  // The larger max is never subtracted from itself: with an infinite max, inf - inf is NaN.
  if (m == m2) {
    s += s2;
  } else if (m2 > m) {
    s = s * expf(m - m2) + s2;
    m = m2;
  } else {
    s += s2 * expf(m2 - m);
  }
}

// The elements of one W-wide pack (ActPack, common.cuh) as a (max, sum) pair: the pack's max,
// then exp(x - max) over its elements below V (a column j counts only when j < V).
template <int W>
static __device__ __forceinline__ void pack_lse(float& m, float& s, const ActPack<W>& p, int j0, int V) {
  m = -INFINITY, s = 0.0f;
#pragma unroll
  for (int k = 0; k < W; k++)
    if (j0 + k < V) m = fmaxf(m, act2f(p.v[k]));
#pragma unroll
  for (int k = 0; k < W; k++) {
    float x = act2f(p.v[k]);
    if (j0 + k < V) s += x == m ? 1.0f : expf(x - m);
  }
}

// This thread's (max, sum) pair over its packs of the row's first V columns.
template <int W>
static __device__ __forceinline__ void thread_lse(float& m, float& s, const act16* row, int V) {
  m = -INFINITY, s = 0.0f;
  for (int j = threadIdx.x * W; j < V; j += blockDim.x * W) {
    float pm, ps;
    pack_lse<W>(pm, ps, load_pack<W>(row + j), j, V);
    lse_combine(m, s, pm, ps);
  }
}

// Overwrite this thread's packs of the row with the logit gradient (0 where j >= V), from the
// logits at src (the row itself, or the block's shared copy of it). With t < 0 (an ignored
// position) every column gets 0.
template <int W>
static __device__ __forceinline__ void write_dlogits(act16* row, const act16* src, int V, int Vp, int t, float M,
                                                     float inv, float dloss) {
  for (int j = threadIdx.x * W; j < Vp; j += blockDim.x * W) {
    ActPack<W> p = load_pack<W>(src + j);
#pragma unroll
    for (int k = 0; k < W; k++) {
      float g = 0.0f;
      if (t >= 0 && j + k < V) {
        float x = act2f(p.v[k]);
        g = dloss * ((x == M ? 1.0f : expf(x - M)) * inv - (j + k == t ? 1.0f : 0.0f));
      }
      p.v[k] = f2act(g);
    }
    store_pack<W>(row + j, p);
  }
}

// Steps 2 and 3 of a row for every thread of the block: the (max, sum) pairs combined across the
// block (warp butterfly, then the warps' pairs in warp order), the loss written by thread 0 (xt:
// the target's logit, which thread 0 read), and the row's max and 1 / sum returned to all.
static __device__ __forceinline__ void row_lse(float& M, float& inv, float m, float s, float xt, float* losses, int n,
                                               float* sm, float* ss, float* row) {
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    lse_combine(m, s, m2, s2);
  }
  if (lane == 0) sm[warp] = m, ss[warp] = s;
  __syncthreads();
  if (tid == 0) {
    float Mr = sm[0], Sr = ss[0];
    for (int w = 1; w < nwarps; w++) lse_combine(Mr, Sr, sm[w], ss[w]);
    row[0] = Mr, row[1] = Sr;
    if (losses) losses[n] = xt == Mr ? logf(Sr) : Mr + logf(Sr) - xt;
  }
  __syncthreads();
  M = row[0], inv = 1.0f / row[1];
}

// The row read once: this thread's packs go to the block's shared memory as they are loaded
// for the (max, sum) pass, and the gradient pass reads them back from there. Each thread reads
// back only the packs it stored, so no barrier is needed between the two (row_lse has its own).
template <int W>
static __device__ __forceinline__ void row_in_smem(float* losses, act16* row, act16* keep, int n, int t, int V, int Vp,
                                                   float dloss, float* sm, float* ss, float* row_ms) {
  float m = -INFINITY, s = 0.0f;
  for (int j = threadIdx.x * W; j < Vp; j += blockDim.x * W) {
    ActPack<W> p = load_pack<W>(row + j);
    store_pack<W>(keep + j, p);
    if (j < V) {
      float pm, ps;
      pack_lse<W>(pm, ps, p, j, V);
      lse_combine(m, s, pm, ps);
    }
  }
  float xt = threadIdx.x == 0 ? act2f(row[t]) : 0.0f;  // read before the barrier in row_lse
  float M, inv;
  row_lse(M, inv, m, s, xt, losses, n, sm, ss, row_ms);
  write_dlogits<W>(row, keep, V, Vp, t, M, inv, dloss);
}

// A row longer than the shared memory holds (classifier_init's limit): read twice.
template <int W>
static __device__ __forceinline__ void row_read_twice(float* losses, act16* row, int n, int t, int V, int Vp,
                                                      float dloss, float* sm, float* ss, float* row_ms) {
  float m, s;
  thread_lse<W>(m, s, row, V);
  float xt = threadIdx.x == 0 ? act2f(row[t]) : 0.0f;
  float M, inv;
  row_lse(M, inv, m, s, xt, losses, n, sm, ss, row_ms);
  write_dlogits<W>(row, row, V, Vp, t, M, inv, dloss);
}

// wide: the padded rows allow 16-byte packs (W = 8), else W = 1. (Not a template parameter:
// the simulator needs the static __shared__ variables of a kernel outside templates.) keep: the
// row fits the dynamic shared memory (Vp 16-bit values).
__global__ void classifier_kernel(float* losses, act16* logits, const int32_t* targets, int V, int Vp,
                                  const float* dloss_at, int wide, int keep) {
  __shared__ float sm[32], ss[32];
  __shared__ float row_ms[2];  // the row's max and sum
  DYNAMIC_SMEM(smem);
  act16* kept = reinterpret_cast<act16*>(smem);
  int n = blockIdx.x;
  act16* row = logits + (size_t)n * Vp;
  int t = targets[n];
  float dloss = dloss_at ? *dloss_at : 0.0f;
  if (t < 0) {  // ignored position: no loss, no gradient
    if (wide) write_dlogits<8>(row, row, V, Vp, t, 0.0f, 0.0f, 0.0f);
    else write_dlogits<1>(row, row, V, Vp, t, 0.0f, 0.0f, 0.0f);
    if (threadIdx.x == 0 && losses) losses[n] = 0.0f;
    return;
  }
  if (wide && keep) row_in_smem<8>(losses, row, kept, n, t, V, Vp, dloss, sm, ss, row_ms);
  else if (wide) row_read_twice<8>(losses, row, n, t, V, Vp, dloss, sm, ss, row_ms);
  else if (keep) row_in_smem<1>(losses, row, kept, n, t, V, Vp, dloss, sm, ss, row_ms);
  else row_read_twice<1>(losses, row, n, t, V, Vp, dloss, sm, ss, row_ms);
}

// The largest row kept in shared memory: what the device allows a block (classifier_init; 227
// KiB on an H100, 116,224 16-bit logits), else the 48 KiB every device has.
static size_t g_row_smem = 48 * 1024;

extern "C" void classifier_init(const KernelCtx* ctx) {
  g_row_smem = ctx->prop.sharedMemPerBlockOptin;
  CUDA_CHECK(cudaFuncSetAttribute(classifier_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_row_smem));
}

extern "C" void classifier_forward_backward(KernelCtx* ctx, float* losses, act_t* logits,
                                            const int32_t* targets, int N, int V, int Vp, const float* dloss) {
  if (N <= 0) return;
  int wide = pack_width(Vp, logits) == 8;
  size_t bytes = ((size_t)Vp * sizeof(act16) + 15) / 16 * 16;
  int keep = bytes <= g_row_smem;
  if (!keep) bytes = 0;
  classifier_kernel<<<N, CLS_THREADS, bytes, ctx->stream>>>(losses, as_act16(logits), targets, V, Vp, dloss, wide,
                                                             keep);
  CUDA_LAUNCH_CHECK();
}

static float act_bits_to_float(uint16_t b) { return act2f(act16_from_bits(b)); }

// A host function: the caller may pass the row in device memory (copied here on the compute
// stream, after the kernels that wrote it) or already copied to host memory (train/evaluate.c
// copies it with device_copy_to_host and passes ctx = NULL). fp32 math as the CPU backend.
extern "C" void softmax_row(KernelCtx* ctx, float* probs, const act_t* logits_row, int V, float temperature) {
  if (V <= 0) return;
  cudaPointerAttributes attr;
  const act_t* row = logits_row;
  uint16_t* copy = NULL;
  if (cudaPointerGetAttributes(&attr, logits_row) == cudaSuccess &&
      (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)) {
    copy = (uint16_t*)malloc((size_t)V * sizeof(uint16_t));
    if (!copy) cuda_fail("softmax_row", "out of host memory", __FILE__, __LINE__);
    cudaStream_t st = ctx ? ctx->stream : (cudaStream_t)kernels_cuda_stream(0);
    CUDA_CHECK(cudaMemcpyAsync(copy, logits_row, (size_t)V * sizeof(uint16_t), cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    row = copy;
  } else {
    (void)cudaGetLastError();  // a host pointer unknown to CUDA is not an error here
  }
  float invt = 1.0f / temperature;
  float mx = -INFINITY;
  for (int j = 0; j < V; j++) {
    float x = act_bits_to_float(row[j]) * invt;
    mx = x > mx ? x : mx;
  }
  double sum = 0.0;  // >= 1: the max contributes 1 (infinite logits as in the kernel above)
  for (int j = 0; j < V; j++) {
    float x = act_bits_to_float(row[j]) * invt;
    probs[j] = x == mx ? 1.0f : expf(x - mx);
    sum += probs[j];
  }
  float inv = (float)(1.0 / sum);
  for (int j = 0; j < V; j++) probs[j] *= inv;
  free(copy);
}

// acc[0] += the losses' sum in loss_sum.h's fixed order (the CPU backend's, bit for bit): one
// block, thread l the lane l; the tree's steps above a warp in shared memory, the last five by
// shuffles (lane l takes lane l + s: the same x[l] += x[l + s]).
__global__ void __launch_bounds__(LOSS_LANES) loss_accumulate_kernel(double* acc, const float* losses, int N) {
  __shared__ double x[LOSS_LANES];
  const int l = threadIdx.x;
  double v = 0.0;
#pragma unroll 8
  for (int i = l; i < N; i += LOSS_LANES) v += (double)losses[i];
  x[l] = v;
  __syncthreads();
#pragma unroll
  for (int s = LOSS_LANES / 2; s >= 32; s /= 2) {
    if (l < s) x[l] = v = v + x[l + s];
    __syncthreads();
  }
  if (l < 32) {
#pragma unroll
    for (int s = 16; s > 0; s /= 2) v += __shfl_down_sync(0xffffffffu, v, s);
    if (l == 0) acc[0] += v;
  }
}

extern "C" void loss_accumulate(KernelCtx* ctx, double* acc, const float* losses, int N) {
  loss_accumulate_kernel<<<1, LOSS_LANES, 0, ctx->stream>>>(acc, losses, N);
  CUDA_LAUNCH_CHECK();
}
