// cuda_fp16.h (CUDA simulator): IEEE half storage and its conversions, with CUDA's rounding:
// float -> half rounds to nearest even, with subnormal halves (2^-24 steps below 2^-14), values
// from 65520 up becoming inf and NaN staying a quiet NaN; half -> float is exact. The ground
// work of an fp16 build of the kernels (the project's kernels use bf16 today). Also usable from
// C host code (the types only).
#ifndef CUDASIM_CUDA_FP16_H
#define CUDASIM_CUDA_FP16_H
#include <stdint.h>
#include <string.h>

typedef struct __attribute__((aligned(2))) __half {
  unsigned short __x;
} __half;
typedef struct __attribute__((aligned(4))) __half2 {
  __half x, y;
} __half2;

#ifdef __cplusplus
#define CUDASIM_FP16_FN static inline __attribute__((always_inline))
#else
#define CUDASIM_FP16_FN static inline
#endif

// Keeps the 10 bits above `shift` of a 24-bit significand, rounding the rest to nearest even.
CUDASIM_FP16_FN uint32_t cudasim_round_shift(uint32_t m, int shift) {
  uint32_t kept = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1u)));
}

CUDASIM_FP16_FN unsigned short cudasim_f2h_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quiet
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // 65520 and up: inf (and inf)
  int e = (int)(a >> 23) - 127;                                    // unbiased exponent
  uint32_t m = (a & 0x7fffffu) | 0x800000u;                        // 24-bit significand
  if (e >= -14) {  // a normal half; a carry out of the significand moves into the exponent
    uint32_t h = ((uint32_t)(e + 15) << 10) + (cudasim_round_shift(m, 13) - 0x400u);
    return (unsigned short)(sign | h);
  }
  if (e < -25) return (unsigned short)sign;  // below half the smallest subnormal: zero
  // A subnormal half counts units of 2^-24: m x 2^(e-23) = (m >> -(e+1)) units, rounded.
  return (unsigned short)(sign | cudasim_round_shift(m, -(e + 1)));
}

CUDASIM_FP16_FN float cudasim_h_bits2f(unsigned short h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0x1f) u = sign | 0x7f800000u | (m << 13);           // inf, NaN
  else if (e) u = sign | ((e + 112u) << 23) | (m << 13);       // normal: rebias 15 -> 127
  else if (!m) u = sign;                                       // zero
  else {                                                       // subnormal: normalize
    int s = 0;
    while (!(m & 0x400u)) m <<= 1, s++;
    u = sign | ((uint32_t)(113 - s) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

CUDASIM_FP16_FN __half __float2half_rn(float f) {
  __half r;
  r.__x = cudasim_f2h_bits(f);
  return r;
}
CUDASIM_FP16_FN __half __float2half(float f) { return __float2half_rn(f); }
CUDASIM_FP16_FN float __half2float(__half h) { return cudasim_h_bits2f(h.__x); }
CUDASIM_FP16_FN unsigned short __half_as_ushort(__half h) { return h.__x; }
CUDASIM_FP16_FN __half __ushort_as_half(unsigned short u) {
  __half r;
  r.__x = u;
  return r;
}
CUDASIM_FP16_FN __half2 __floats2half2_rn(float lo, float hi) {
  __half2 r;
  r.x = __float2half_rn(lo);
  r.y = __float2half_rn(hi);
  return r;
}
#ifdef __cplusplus  // overloads of cuda_bf16.h's: C++ only, as in CUDA
CUDASIM_FP16_FN float __low2float(__half2 v) { return __half2float(v.x); }
CUDASIM_FP16_FN float __high2float(__half2 v) { return __half2float(v.y); }
#endif
#endif
