// ptx.cuh: every inline PTX instruction the kernels use, in one place, behind small device
// functions. Each names the section of the PTX ISA (version 8.x) that defines it.
//
// The kernels call only these functions, never asm directly, so this file is the one the CUDA
// simulator (test/cudasim/) replaces: its cu2cpp.sh compiles the kernels with
// test/cudasim/include/cudasim/ptx.h in its place, the same functions emulated from the same ISA
// sections (fragment tables, cp.async groups).
#pragma once
#include <stdint.h>

// Shared-window address of a generic pointer to shared memory (what .shared operands take).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 9.7.9.25 cp.async: 16 bytes global -> shared, asynchronous, cache-global (.cg: L2 only).
// The data is in shared memory only after the cp.async.wait_group that covers its group.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src)
               : "memory");
}
// The same for 4 bytes (cache-all, .ca: the 16-byte form is the only one .cg allows); 4-byte
// aligned: one fp32 value of a row, whatever the row's alignment (the attention backward's lse
// and D).
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(dst)), "l"(src)
               : "memory");
}
// 9.7.9.26 cp.async.commit_group: closes the group of this thread's cp.async issued so far.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// 9.7.9.27 cp.async.wait_group N: waits until at most N of this thread's groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 9.7.14.5.15 ldmatrix .m8n8.x4 .b16: four 8x8 b16 matrices from shared memory; lane l gives
// the 16-byte-aligned address of row (l & 7) of matrix (l >> 3); register i of lane l gets
// row l/4, columns 2(l%4) and 2(l%4)+1 of matrix i (.trans: the transposed matrix).
// "memory": the instruction reads shared memory that plain stores of this thread wrote.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p))
               : "memory");
}

// 9.7.14.5.8 mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32:
// c[16x8] += a[16x16] b[16x8], a and b of the kernels' act16 type (common.cuh: bf16, or f16 in
// an fp16 build). Fragment layout (9.7.14.5.8 figures; g = lane/4, t = lane%4), each b32
// register two 16-bit values (lower half first):
//   a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..); b0 (k 2t..2t+1, n g),
//   b1 (k 2t+8.., n g); c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1).
#ifdef FSDP_FP16
#define MMA_ACT16 "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#else
#define MMA_ACT16 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#endif
__device__ __forceinline__ void mma_act16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm(MMA_ACT16 " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 9.7.3.22 ex2.approx.ftz.f32: 2^x (max relative error 2^-22), subnormals flushed; ex2(-inf) = +0.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// A flag in global memory that blocks count up and later blocks wait on (the attention
// backward's ordered dQ sum). ld with .acquire and red with .release at .gpu scope (9.7.9.8 ld,
// 9.7.12.6 red; 8. Memory Consistency Model): the waiter's loads after the acquire that reads
// the value see every write made visible before the release that wrote it, including the
// writes of the releasing block's other threads that a barrier ordered before it (causality
// order is transitive through the barrier), so one thread releases for its block after __syncthreads: no
// __threadfence (fence.sc, MEMBAR.SC) is needed.
// flag_load_acquire: one acquire load of *flag (issued early, checked later: its latency hides
// behind other work).
__device__ __forceinline__ int flag_load_acquire(const int* flag) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
  return v;
}
// flag_wait_eq: spins until *flag == value.
__device__ __forceinline__ void flag_wait_eq(const int* flag, int value) {
  while (flag_load_acquire(flag) != value) __nanosleep(64);
}
// flag_release_add: *flag += v, ordered after this thread's earlier writes and those ordered
// before them (a __syncthreads).
__device__ __forceinline__ void flag_release_add(int* flag, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(flag), "r"(v) : "memory");
}

// 10.26 %globaltimer: a 64-bit nanosecond timer.
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
