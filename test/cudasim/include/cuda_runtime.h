// cuda_runtime.h (CUDA simulator): the CUDA C++ device language on the host, for
// kernels/cuda/*.cu compiled with g++ (test/cudasim/README.md). Every CUDA thread is a fiber
// of its block; the built-in variables, barriers and warp intrinsics below call the
// simulator's executor (cudasim/device.h). Qualifiers that only steer nvcc become nothing.
#ifndef CUDASIM_CUDA_RUNTIME_H
#define CUDASIM_CUDA_RUNTIME_H
#ifndef __cplusplus
// Host C code (kernels/cuda/comm_nccl.c) includes cuda_runtime.h for the API alone.
#include "cuda_runtime_api.h"
#else
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "cuda_runtime_api.h"
#include "cudasim/device.h"

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
// Static shared memory: one copy per process, in its own section, so the checkers know its
// bounds (__start_/__stop_cudasim_shared). Blocks run one at a time, so one copy serves every
// block; the checkers treat it as fresh (unwritten) at each block's start.
#define __shared__ static __attribute__((section("cudasim_shared")))
// Dynamic shared memory (the launch's third <<<>>> argument); kernels/cuda/common.cuh takes
// this definition instead of `extern __shared__ unsigned char name[]`.
#define DYNAMIC_SMEM(name) unsigned char* name = cudasim_dynamic_smem()

#define threadIdx (cudasim_thread_idx())
#define blockIdx (cudasim_block_idx())
#define blockDim (cudasim_block_dim())
#define gridDim (cudasim_grid_dim())
#define warpSize 32

#define __syncthreads() cudasim_syncthreads(__FILE__, __LINE__)
static inline void __syncwarp(unsigned int mask = 0xffffffffu, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  cudasim_syncwarp(mask, file, line);
}
#define __nanosleep(ns) cudasim_nanosleep(ns)

struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; };
struct __attribute__((aligned(8))) uint2 { unsigned int x, y; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
static inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return float2{a, b}; }

// CUDA's host/device min and max: one overload set for mixed integer and float arguments.
template <class A, class B>
static inline typename std::common_type<A, B>::type min(A a, B b) {
  typedef typename std::common_type<A, B>::type T;
  return (T)a < (T)b ? (T)a : (T)b;
}
template <class A, class B>
static inline typename std::common_type<A, B>::type max(A a, B b) {
  typedef typename std::common_type<A, B>::type T;
  return (T)a > (T)b ? (T)a : (T)b;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
template <class T>
static inline T __ldg(const T* p) { return *p; }
// Single fp32 operations with round-to-nearest that nvcc never fuses into an FMA; the host
// compiler does not contract them either (ISO mode: -ffp-contract=off).
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

// ---- global-memory atomics and fences -------------------------------------------------------
// Blocks run one at a time and the threads of a block are fibers of one host thread that
// switch only at barriers and warp collectives, so a read-modify-write is atomic as it stands
// (exec.cpp: checked as an access of the kernel, and an acquire and a release of its word for
// the blocks' happens-before, order.h). A fence orders nothing more than program order already
// does. __ldcg (a load through L2, past L1: what a block reads of another block's stores after
// a fence) is a plain load.
extern "C" unsigned int cudasim_atomic_add_u32(unsigned int* p, unsigned int v, const void* pc);
extern "C" unsigned long long cudasim_atomic_add_u64(unsigned long long* p, unsigned long long v, const void* pc);
static inline unsigned int atomicAdd(unsigned int* p, unsigned int v) {
  return cudasim_atomic_add_u32(p, v, __builtin_return_address(0));
}
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return cudasim_atomic_add_u64(p, v, __builtin_return_address(0));
}
// One memory, and one block at a time: every write is visible to every later access already;
// only the compiler must not move accesses across the fence.
static inline void __threadfence() { __asm__ __volatile__("" ::: "memory"); }
template <class T>
static inline T __ldcg(const T* p) { return *p; }

// ---- warp intrinsics: exchanges among the lanes of `mask` ----------------------------------
template <class T>
static inline T cudasim_shfl_(unsigned mask, T v, int src, int width, const char* op, const char* file, int line) {
  T all[32];
  cudasim_warp_exchange(mask, &v, all, sizeof(T), op, file, line);
  const int lane = cudasim_lane();
  const int base = lane & ~(width - 1);
  if (src < base || src >= base + width) src = lane;  // out of the segment: own value
  return all[src];
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                                const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return cudasim_shfl_(mask, v, cudasim_lane() ^ lane_mask, width, "__shfl_xor_sync", file, line);
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,
                                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return cudasim_shfl_(mask, v, cudasim_lane() + (int)delta, width, "__shfl_down_sync", file, line);
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                               const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return cudasim_shfl_(mask, v, cudasim_lane() - (int)delta, width, "__shfl_up_sync", file, line);
}
template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
  return cudasim_shfl_(mask, v, (cudasim_lane() & ~(width - 1)) + (src & (width - 1)), width, "__shfl_sync", file,
                       line);
}
static inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
  int all[32], mine = pred != 0;
  cudasim_warp_exchange(mask, &mine, all, sizeof mine, "__ballot_sync", file, line);
  unsigned r = 0;
  for (int l = 0; l < 32; l++)
    if ((mask >> l & 1u) && all[l]) r |= 1u << l;
  return r;
}
static inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  return __ballot_sync(mask, pred, file, line) != 0;
}
static inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  return __ballot_sync(mask, pred, file, line) == mask;
}

// cudaFuncSetAttribute takes the kernel itself in C++.
extern "C" cudaError_t cudasim_func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value);
template <class T>
static inline cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
  return cudasim_func_set_attribute(reinterpret_cast<const void*>(kernel), attr, value);
}
#endif  // __cplusplus
#endif
