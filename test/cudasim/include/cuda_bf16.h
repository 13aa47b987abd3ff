// cuda_bf16.h (CUDA simulator): bfloat16 storage and the conversions the kernels use, with
// CUDA's rounding: float -> bf16 rounds to nearest even (NaN stays a quiet NaN), bf16 -> float
// is exact. Also usable from C host code (the types only).
#ifndef CUDASIM_CUDA_BF16_H
#define CUDASIM_CUDA_BF16_H
#include <stdint.h>
#include <string.h>

typedef struct __attribute__((aligned(2))) __nv_bfloat16 {
  unsigned short __x;
} __nv_bfloat16;
typedef struct __attribute__((aligned(4))) __nv_bfloat162 {
  __nv_bfloat16 x, y;
} __nv_bfloat162;

#ifdef __cplusplus
#define CUDASIM_BF16_FN static inline __attribute__((always_inline))
#else
#define CUDASIM_BF16_FN static inline
#endif

// Round to nearest even on the upper 16 bits; NaN keeps its sign and becomes quiet.
CUDASIM_BF16_FN unsigned short cudasim_f2bf_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
CUDASIM_BF16_FN float cudasim_bf_bits2f(unsigned short b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

CUDASIM_BF16_FN __nv_bfloat16 __float2bfloat16_rn(float f) {
  __nv_bfloat16 r;
  r.__x = cudasim_f2bf_bits(f);
  return r;
}
CUDASIM_BF16_FN __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
CUDASIM_BF16_FN float __bfloat162float(__nv_bfloat16 b) { return cudasim_bf_bits2f(b.__x); }
CUDASIM_BF16_FN unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
CUDASIM_BF16_FN __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 r;
  r.__x = u;
  return r;
}
CUDASIM_BF16_FN __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  __nv_bfloat162 r;
  r.x = __float2bfloat16_rn(lo);
  r.y = __float2bfloat16_rn(hi);
  return r;
}
CUDASIM_BF16_FN __nv_bfloat162 __float22bfloat162_rn(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
CUDASIM_BF16_FN float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
CUDASIM_BF16_FN float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }
#endif
