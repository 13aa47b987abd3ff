// cudasim/ptx.h: the simulator's kernels/cuda/ptx.cuh (cu2cpp.sh includes it in ptx.cuh's
// place): the same functions, emulated by test/cudasim/ptx.cpp from the PTX ISA sections ptx.cuh
// cites.
#pragma once
#include <stdint.h>

extern "C" {
void cudasim_cp_async(void* dst_shared, const void* src_global, int bytes, const char* file, int line);
void cudasim_cp_async_commit(void);
void cudasim_cp_async_wait(int n);
void cudasim_ldmatrix_x4(uint32_t r[4], const void* row_address, int trans, const char* file, int line);
// f16: 1 for .f16 inputs, 0 for .bf16
void cudasim_mma_m16n8k16(int f16, float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const char* file,
                          int line);
float cudasim_ex2_approx_ftz(float x);
int cudasim_flag_load_acquire(const int* flag, const char* file, int line);
void cudasim_flag_wait_eq(const int* flag, int value, const char* file, int line);
void cudasim_flag_release_add(int* flag, int v, const char* file, int line);
}

static inline void cp_async16(void* dst, const void* src, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  cudasim_cp_async(dst, src, 16, file, line);
}
static inline void cp_async4(void* dst, const void* src, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  cudasim_cp_async(dst, src, 4, file, line);
}
static inline void cp_async_commit() { cudasim_cp_async_commit(); }
template <int N>
static inline void cp_async_wait() {
  cudasim_cp_async_wait(N);
}
static inline void ldsm_x4(uint32_t (&r)[4], const void* p, const char* file = __builtin_FILE(),
                           int line = __builtin_LINE()) {
  cudasim_ldmatrix_x4(r, p, 0, file, line);
}
static inline void ldsm_x4_t(uint32_t (&r)[4], const void* p, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
  cudasim_ldmatrix_x4(r, p, 1, file, line);
}
// mma_act16: the act16 type of kernels/cuda/common.cuh (f16 in an fp16 build, else bf16)
static inline void mma_act16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
#ifdef FSDP_FP16
  cudasim_mma_m16n8k16(1, c, a, b0, b1, file, line);
#else
  cudasim_mma_m16n8k16(0, c, a, b0, b1, file, line);
#endif
}
static inline float ex2(float x) { return cudasim_ex2_approx_ftz(x); }
// Blocks run one after another here, so a flag never changes while a block waits on it: the
// wait checks it once, and a value not yet reached is a deadlock (ptx.cpp). Both acquire the
// releases that wrote the value (order.h: the blocks' happens-before).
static inline int flag_load_acquire(const int* flag, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return cudasim_flag_load_acquire(flag, file, line);
}
static inline void flag_wait_eq(const int* flag, int value, const char* file = __builtin_FILE(),
                                int line = __builtin_LINE()) {
  cudasim_flag_wait_eq(flag, value, file, line);
}
static inline void flag_release_add(int* flag, int v, const char* file = __builtin_FILE(),
                                    int line = __builtin_LINE()) {
  cudasim_flag_release_add(flag, v, file, line);
}
static inline unsigned long long globaltimer_ns() { return cudasim_globaltimer(); }
