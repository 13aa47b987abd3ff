// common.cuh: what every CUDA kernel file shares: the context, error checks, the 16-bit
// activation type (bf16, or fp16 in an fp16 build), warp reductions and 16-byte packs.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "kernels/cuda/kernels_cuda.h"

// Sizes of the two device buffers kernels_init allocates once (never inside the loop):
//   the cuBLASLt workspace (split-K and stream-K algorithms use it), and
//   the kernel scratch: per-chunk partial column sums (norm and bias gradients,
//   column_sums.cuh), the sort buffers of the embedding backward and the diagonal sums of the
//   relative position bias backward. Kernels that use it run on the one compute stream, one
//   after the other, so they can share it; so do the column sums' arrival counters, which
//   every kernel leaves at 0.
// The reduce-scatter stream's view has a small scratch of its own: the gradient norm's exact
// sum of a shard leaving for host memory (--offload grads) runs there (exact_sum's partials).
#define CUBLASLT_WORKSPACE_BYTES ((size_t)32 << 20)
#define KERNEL_SCRATCH_BYTES ((size_t)32 << 20)
#define REDUCE_STREAM_SCRATCH_BYTES ((size_t)64 << 10)
#define KERNEL_COUNTERS 65536

// The CUDA backend's context: the compute stream every kernel of this API runs on, the
// cuBLASLt handle with one preallocated workspace, and the matmul plan cache (matmul.cu).
struct KernelCtx {
  int device;
  cudaStream_t stream;
  cublasLtHandle_t lt;
  void* workspace;
  size_t workspace_bytes;
  cudaDeviceProp prop;
  struct MatmulCache* matmul_cache;  // owned by matmul.cu
  // The FSDP runtime's two communication streams (kernels/cuda/device.c maps StreamId onto
  // stream / comm_streams[0] (all-gather) / comm_streams[1] (reduce-scatter) / comm_streams[2]
  // (activation copies of --offload activations)).
  cudaStream_t comm_streams[3];
  void* scratch;  // KERNEL_SCRATCH_BYTES of device memory (the reduce-scatter view's: its own, smaller)
  size_t scratch_bytes;
  unsigned int* counters;  // KERNEL_COUNTERS zeroed words (column_sums.cuh); NULL in the views
  size_t ncounters;
  struct KernelCtx* views[2];  // the same context on comm_streams[0] and [1] (kernels_stream_ctx)
};

void cuda_fail(const char* what, const char* detail, const char* file, int line);

// Every CUDA and cuBLAS return code is checked; a failure aborts with the call and location.
#define CUDA_CHECK(call)                                                     \
  do {                                                                       \
    cudaError_t e_ = (call);                                                 \
    if (e_ != cudaSuccess) cuda_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
  } while (0)
#define CUBLAS_CHECK(call)                                                   \
  do {                                                                       \
    cublasStatus_t s_ = (call);                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                       \
      char b_[64];                                                           \
      snprintf(b_, sizeof b_, "cublas status %d", (int)s_);                 \
      cuda_fail(#call, b_, __FILE__, __LINE__);                              \
    }                                                                        \
  } while (0)
// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

// A kernel's dynamic shared memory (the launch's third <<<>>> argument) as the byte array
// `name`, 16-byte aligned. The CUDA simulator's cuda_runtime.h defines its own.
#ifndef DYNAMIC_SMEM
#define DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// ---- the 16-bit activation type: the one precision switch of the CUDA kernels ----------
// act16 is bf16 by default and IEEE fp16 in an fp16 build (make PRECISION=fp16 defines
// FSDP_FP16). Kernels use only act16, act2f, f2act and act16_bits; the tensor-core product and
// the cuBLASLt types follow the same switch (ptx.cuh mma_act16, matmul.cu ACT16_CUDA_TYPE).
// bf16 keeps fp32's range with 8 significant bits; fp16 keeps 11 bits but overflows above
// 65504, which is why an fp16 run needs the dynamic loss scale (fsdp/scaler.c).
#ifdef FSDP_FP16
typedef __half act16;
#define ACT16_CUDA_TYPE CUDA_R_16F
static __host__ __device__ __forceinline__ float act2f(act16 x) { return __half2float(x); }
static __host__ __device__ __forceinline__ act16 f2act(float x) { return __float2half_rn(x); }
static __host__ __device__ __forceinline__ unsigned short act16_bits(act16 x) { return __half_as_ushort(x); }
static __host__ __device__ __forceinline__ act16 act16_from_bits(unsigned short b) { return __ushort_as_half(b); }
#else
typedef __nv_bfloat16 act16;
#define ACT16_CUDA_TYPE CUDA_R_16BF
static __host__ __device__ __forceinline__ float act2f(act16 x) { return __bfloat162float(x); }
static __host__ __device__ __forceinline__ act16 f2act(float x) { return __float2bfloat16_rn(x); }
static __host__ __device__ __forceinline__ unsigned short act16_bits(act16 x) { return __bfloat16_as_ushort(x); }
static __host__ __device__ __forceinline__ act16 act16_from_bits(unsigned short b) { return __ushort_as_bfloat16(b); }
#endif
// act_t is the act16 bit pattern in the C API; kernels see it as act16.
static inline act16* as_act16(act_t* p) { return reinterpret_cast<act16*>(p); }
static inline const act16* as_act16(const act_t* p) { return reinterpret_cast<const act16*>(p); }
static inline unsigned int ceil_div(size_t a, size_t b) { return (unsigned int)((a + b - 1) / b); }

// Blocks for a grid-stride loop over n elements: enough to fill any current GPU, never 0.
static inline unsigned int grid_for(size_t n, int threads) {
  size_t b = (n + threads - 1) / threads;
  if (b > 65536) b = 65536;
  return (unsigned int)(b ? b : 1);
}

// Sum over the 32 lanes of a warp with an xor butterfly. Every lane ends with the same bits:
// at each step lanes i and i^o add the same two values (IEEE addition is commutative), and
// the pairing is fixed, so the result is the same on every run.
static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- GELU, tanh form (GPT-2): the one home of its formulas for every kernel ----------------
// (activation.cu's maps; kernels/cpu/activation.c has the
// same arithmetic.)
#define GELU_K 0.7978845608028654f  // sqrt(2/pi)
#define GELU_A 0.044715f
static __device__ __forceinline__ float gelu_tanh(float x) {
  float u = GELU_K * (x + GELU_A * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
// d/dx of 0.5 x (1 + tanh u), u = k (x + a x^3):  0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2)
static __device__ __forceinline__ float gelu_tanh_grad(float x) {
  float u = GELU_K * (x + GELU_A * x * x * x);
  float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
}

// ---- deterministic column sums (reduce.cu, column_sums.cuh) --------------------------------
// out[c] += sum over rows n of x[n*C + c] (the bias gradient of a linear layer), in one launch,
// the same bits on every run.
void column_sums_accumulate(KernelCtx* ctx, float* out, const act16* x, int N, int C);

// ---- 16-byte loads and stores ---------------------------------------------------------
// A kernel that moves one 2-byte act16 per lane keeps 64 bytes per warp in flight, too few to
// cover DRAM latency; Pack<act16, 8> (ActPack<8>) moves 8 consecutive values as one 16-byte
// access (the PTX ld/st .v4 forms), Pack<float, 8> as two. Width 1 is the same code for rows
// whose length or address does not allow that (pack_width picks), so a kernel templated on W
// has one body for both.
template <typename T, int W>
struct alignas(W * sizeof(T) < 16 ? W * sizeof(T) : 16) Pack {
  T v[W];
};
template <int W>
using ActPack = Pack<act16, W>;
template <int W, typename T>
static __device__ __forceinline__ Pack<T, W> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, W>*>(p);
}
template <int W, typename T>
static __device__ __forceinline__ void store_pack(T* p, const Pack<T, W>& v) {
  *reinterpret_cast<Pack<T, W>*>(p) = v;
}
// Whether every pointer is 16-byte aligned (a Pack of 16 bytes may be loaded at it).
static inline int aligned16(const void* a, const void* b = NULL, const void* c = NULL, const void* d = NULL) {
  return ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) % 16 == 0;
}
// 8 when `len` is a multiple of 8 and every pointer is 16-byte aligned (so is every row of len
// 16-bit elements after it), else 1.
static inline int pack_width(size_t len, const void* a, const void* b = NULL, const void* c = NULL,
                             const void* d = NULL) {
  return len % 8 == 0 && aligned16(a, b, c, d) ? 8 : 1;
}
