// common.cuh: what every CUDA kernel file shares: the context, error checks, bf16 helpers.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

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

typedef __nv_bfloat16 bf16;
static __device__ __forceinline__ float bf2f(bf16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ bf16 f2bf(float x) { return __float2bfloat16_rn(x); }
// act_t is the bf16 bit pattern in the C API; kernels see it as bf16.
static inline bf16* as_bf16(act_t* p) { return reinterpret_cast<bf16*>(p); }
static inline const bf16* as_bf16(const act_t* p) { return reinterpret_cast<const bf16*>(p); }
static inline unsigned int ceil_div(size_t a, size_t b) { return (unsigned int)((a + b - 1) / b); }
