// embedding.cu: token (+ optional position) embedding lookup and its deterministic backward.
//
// Backward of the token embedding: several rows may share a token id, so rows cannot simply be
// scattered in parallel (float atomics would add in a timing-dependent order). Instead:
//   1. a stable radix sort (CUB) of the pairs (token id, row index n) by token id: rows with
//      the same id become one contiguous segment, in increasing n (stability);
//   2. one block per sorted position; the block at the first position of a segment owns that
//      token id (the others exit) and each of its threads owns channels c: it starts from
//      dwte[id, c] and adds dout[n, c] for the segment's rows in increasing n.
// That is exactly the CPU backend's order (dwte[id][c] += dout[n][c] for n = 0, 1, ...), so
// the result is deterministic, and for the same bf16 inputs equals the CPU's bits. A radix sort
// is a fixed permutation of its input: its output does not depend on timing.
// Position embedding: thread (t, c) adds dout[n, c] for n = t, t + T, t + 2T, ... in order.
//
// Scratch (ctx->scratch): sorted ids, row indices in and out (3 x N int32) and CUB's
// temporary storage; a clear error if N is too large for it (KERNEL_SCRATCH_BYTES).
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"

#define EMB_THREADS 256

__global__ void embedding_forward_kernel(act16* out, const int32_t* tokens, const act16* wte, const act16* wpe,
                                         int N, int T, int C) {
  size_t total = (size_t)N * C;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
    size_t n = e / C, c = e % C;
    float v = act2f(wte[(size_t)tokens[n] * C + c]);
    if (wpe) v += act2f(wpe[(n % T) * C + c]);
    out[e] = f2act(v);
  }
}

__global__ void iota_kernel(int32_t* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = i;
}

// Block i: if sorted position i starts a segment of equal ids, add the segment's rows.
// Segments can be long (a frequent token, or a small vocabulary: hundreds of rows), and each
// channel's adds must stay in row order, so the time goes into latency: the segment's end is
// found by binary search over the sorted ids (not a walk of dependent loads), and DWTE_UNROLL
// rows' loads are in flight before their adds, which still happen in row order.
#define DWTE_UNROLL 16
__global__ void embedding_dwte_kernel(float* dwte, const act16* dout, const int32_t* ids, const int32_t* rows,
                                      int N, int C) {
  int i = blockIdx.x;
  int id = ids[i];
  if (i > 0 && ids[i - 1] == id) return;
  int lo = i + 1, hi = N;  // the first position after i whose id differs: in [lo, hi]
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (ids[mid] == id) lo = mid + 1;
    else hi = mid;
  }
  int end = lo;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float* w = dwte + (size_t)id * C + c;
    float acc = *w;
    int j = i;
    for (; j + DWTE_UNROLL <= end; j += DWTE_UNROLL) {
      float v[DWTE_UNROLL];
#pragma unroll
      for (int u = 0; u < DWTE_UNROLL; u++) v[u] = act2f(dout[(size_t)rows[j + u] * C + c]);
#pragma unroll
      for (int u = 0; u < DWTE_UNROLL; u++) acc += v[u];
    }
    for (; j < end; j++) acc += act2f(dout[(size_t)rows[j] * C + c]);
    *w = acc;
  }
}

__global__ void embedding_dwpe_kernel(float* dwpe, const act16* dout, int N, int T, int C) {
  size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (e >= (size_t)T * C) return;
  int t = (int)(e / C), c = (int)(e % C);
  float acc = dwpe[e];
  for (int n = t; n < N; n += T) acc += act2f(dout[(size_t)n * C + c]);
  dwpe[e] = acc;
}

extern "C" void embedding_forward(KernelCtx* ctx, act_t* out, const int32_t* tokens, const act_t* wte,
                                  const act_t* wpe, int N, int T, int C) {
  size_t total = (size_t)N * C;
  if (!total) return;
  embedding_forward_kernel<<<grid_for(total, EMB_THREADS), EMB_THREADS, 0, ctx->stream>>>(
      as_act16(out), tokens, as_act16(wte), wpe ? as_act16(wpe) : NULL, N, T, C);
  CUDA_LAUNCH_CHECK();
}

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

extern "C" void embedding_backward(KernelCtx* ctx, float* dwte, float* dwpe, const act_t* dout,
                                   const int32_t* tokens, int N, int T, int C) {
  if (N <= 0 || C <= 0) return;
  // Scratch layout: ids_sorted | rows_in | rows_sorted | CUB temporary storage.
  size_t vec = align256((size_t)N * sizeof(int32_t));
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const int32_t*)NULL, (int32_t*)NULL,
                                             (const int32_t*)NULL, (int32_t*)NULL, N, 0, 32, ctx->stream));
  if (3 * vec + temp_bytes > ctx->scratch_bytes) {
    char b[160];
    snprintf(b, sizeof b, "sorting %d token ids needs %zu bytes of kernel scratch, more than its %zu", N,
             3 * vec + temp_bytes, ctx->scratch_bytes);
    cuda_fail("embedding_backward", b, __FILE__, __LINE__);
  }
  char* s = (char*)ctx->scratch;
  int32_t* ids_sorted = (int32_t*)s;
  int32_t* rows_in = (int32_t*)(s + vec);
  int32_t* rows_sorted = (int32_t*)(s + 2 * vec);
  void* temp = s + 3 * vec;
  iota_kernel<<<ceil_div(N, EMB_THREADS), EMB_THREADS, 0, ctx->stream>>>(rows_in, N);
  CUDA_LAUNCH_CHECK();
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, ids_sorted, (const int32_t*)rows_in,
                                             rows_sorted, N, 0, 32, ctx->stream));
  embedding_dwte_kernel<<<N, EMB_THREADS, 0, ctx->stream>>>(dwte, as_act16(dout), ids_sorted, rows_sorted, N, C);
  CUDA_LAUNCH_CHECK();
  if (dwpe && T > 0) {
    size_t n = (size_t)T * C;
    embedding_dwpe_kernel<<<ceil_div(n, EMB_THREADS), EMB_THREADS, 0, ctx->stream>>>(dwpe, as_act16(dout), N, T, C);
    CUDA_LAUNCH_CHECK();
  }
}
