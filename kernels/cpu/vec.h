// vec.h: the 16-lane float vector the CPU kernels compute with, and its fixed-order operations.
//
// vf is a GCC/Clang vector of VL floats: one AVX-512 register, two AVX2 registers, or plain
// lanes elsewhere. Every operation here gives the same bits on every target: vfma is one
// correctly rounded fused multiply-add per lane (the AVX-512 instruction, or fmaf), and
// lane_sum adds the lanes in one fixed pairwise tree. A kernel that sums with these in a fixed
// order therefore gives the same result for any thread count and any vector width.
#ifndef FSDP_KERNELS_CPU_VEC_H
#define FSDP_KERNELS_CPU_VEC_H

#include <math.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

// Without AVX-512, GCC warns at every definition and call that passing a 64-byte vector by value
// has another ABI. vf values only pass between static inline functions of the including file,
// never across an ABI boundary, so the warning is off for the files that include this header.
#pragma GCC diagnostic ignored "-Wpsabi"

#define VL 16  // lanes of a vector (one zmm register)
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef float vf_unaligned __attribute__((vector_size(VL * sizeof(float)), aligned(4)));

static inline vf vload(const float* p) { return *(const vf_unaligned*)p; }
static inline void vstore(float* p, vf v) { *(vf_unaligned*)p = v; }
// Keeps a loaded operand in a register: without it GCC folds every use into a memory operand
// of an FMA, which turns one load per step into one load per FMA and makes a tile load-bound.
static inline vf vpin(vf x) {
#if defined(__AVX512F__)
  __asm__("" : "+v"(x));
#endif
  return x;
}
static inline vf vbroadcast(float x) {
  return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
}
static inline vf vfma(vf a, vf b, vf c) {  // a * b + c, one rounding per lane
#if defined(__AVX512F__)
  return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#else
  vf r;
  for (int l = 0; l < VL; l++) r[l] = fmaf(a[l], b[l], c[l]);
  return r;
#endif
}

// The sum of the lanes in a fixed tree: lanes l and l + h added for h = 8, 4, 2, 1.
static inline float lane_sum(vf v) {
#if defined(__AVX512F__)
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256((__m512)v), _mm512_extractf32x8_ps((__m512)v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
#else
  for (int h = VL / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; l++) v[l] += v[l + h];
  return v[0];
#endif
}

// The last rem < VL terms of a lane-split sum: lane l < rem adds a[l] * b[l]; the other lanes
// are skipped rather than fed zeros, so an infinite operand cannot turn them into NaN.
static inline vf vfma_tail(const float* a, const float* b, vf acc, int rem) {
  for (int l = 0; l < rem; l++) acc[l] = fmaf(a[l], b[l], acc[l]);
  return acc;
}

// Dot product of n floats in the lane order of the CPU kernels: lane l sums the terms
// l, l + VL, l + 2 VL, ... with fused multiply-adds in increasing order (the last n % VL terms
// by vfma_tail), then lane_sum.
static inline float dot_lanes(const float* a, const float* b, int n) {
  vf acc = (vf){0};
  int i = 0;
  for (; i + VL <= n; i += VL) acc = vfma(vload(a + i), vload(b + i), acc);
  return lane_sum(vfma_tail(a + i, b + i, acc, n - i));
}

#endif
