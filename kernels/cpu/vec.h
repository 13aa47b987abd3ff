// vec.h: the 16-lane float vector the CPU kernels sum in, held in the machine's own vector
// registers, and its fixed-order operations.
//
// The arithmetic is a property of the 16 lanes, never of the registers: a kernel that sums in
// lanes gives lane l the terms l, l + 16, l + 32, ... in increasing order, one correctly rounded
// fused multiply-add each, and adds the lanes in one fixed pairwise tree (lane_sum). A vf holds
// its VL = 16 lanes as VP = VL / NL registers of NL lanes (vn), whichever vector unit the build
// targets:
//
//   AVX-512            NL = 16, VP = 1   one zmm register; one vfmadd per 16-lane step
//   AVX2 + FMA         NL = 8,  VP = 2   two ymm registers; two vfmadds per step
//   plain C            NL = 4,  VP = 4   GCC vector extensions and fmaf, which the compiler
//                                        turns into the target's 128-bit vector FMA (SSE, NEON)
//                                        where it has one, and a libm call where it has none
//
// An FMA rounds once per lane whichever instruction computes it, and lane_sum adds the same
// lanes in the same tree, so every target gives the same bits, for any thread count.
//
// The target is fixed when the file is compiled: the compiler's -march decides (the Makefile's
// CPU_ARCH, -march=native by default: the vector unit of the machine that builds is the one
// that runs make run), and -DVEC_PLAIN forces the plain path. Choosing at run time instead would
// compile every kernel once per target and dispatch on every call, for nothing the bits could
// show: a build for a smaller vector unit computes exactly what a wider one does, only slower.
// The suite builds all three and compares their losses and parameters bit for bit
// (test/test_vec_widths.sh).
//
// Kernels whose speed is register-bound (the matmul tiles) size their tiles in vn registers;
// VEC_REGS says how many the target has.
#ifndef FSDP_KERNELS_CPU_VEC_H
#define FSDP_KERNELS_CPU_VEC_H

#include <math.h>
#include <string.h>

#if !defined(VEC_PLAIN) && (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))
#include <immintrin.h>
#endif

#define VL 16  // lanes of a vf: the summation order of every lane-split sum

#if !defined(VEC_PLAIN) && defined(__AVX512F__)
#define VEC_TARGET "avx512"
#define NL 16
#define VEC_REGS 32
typedef __m512 vn;
static inline vn vn_load(const float* p) { return _mm512_loadu_ps(p); }
static inline void vn_store(float* p, vn x) { _mm512_storeu_ps(p, x); }
static inline vn vn_fma(vn a, vn b, vn c) { return _mm512_fmadd_ps(a, b, c); }
static inline vn vn_add(vn a, vn b) { return _mm512_add_ps(a, b); }
static inline vn vn_set1(float x) { return _mm512_set1_ps(x); }
static inline vn vn_zero(void) { return _mm512_setzero_ps(); }
// Lanes l and l + h added for h = 8, 4, 2, 1.
static inline float vn_lane_sum(vn v) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

#elif !defined(VEC_PLAIN) && defined(__AVX2__) && defined(__FMA__)
#define VEC_TARGET "avx2"
#define NL 8
#define VEC_REGS 16
typedef __m256 vn;
static inline vn vn_load(const float* p) { return _mm256_loadu_ps(p); }
static inline void vn_store(float* p, vn x) { _mm256_storeu_ps(p, x); }
static inline vn vn_fma(vn a, vn b, vn c) { return _mm256_fmadd_ps(a, b, c); }
static inline vn vn_add(vn a, vn b) { return _mm256_add_ps(a, b); }
static inline vn vn_set1(float x) { return _mm256_set1_ps(x); }
static inline vn vn_zero(void) { return _mm256_setzero_ps(); }
// Lanes l and l + h added for h = 4, 2, 1.
static inline float vn_lane_sum(vn v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

#else
#define VEC_TARGET "plain"
#define NL 4
#define VEC_REGS 16
typedef float vn __attribute__((vector_size(NL * sizeof(float))));
static inline vn vn_load(const float* p) {
  vn x;
  memcpy(&x, p, sizeof x);
  return x;
}
static inline void vn_store(float* p, vn x) { memcpy(p, &x, sizeof x); }
static inline vn vn_fma(vn a, vn b, vn c) {
  for (int l = 0; l < NL; l++) c[l] = fmaf(a[l], b[l], c[l]);
  return c;
}
static inline vn vn_add(vn a, vn b) { return a + b; }
static inline vn vn_set1(float x) { return (vn){x, x, x, x}; }
static inline vn vn_zero(void) { return (vn){0}; }
// Lanes l and l + h added for h = 2, 1.
static inline float vn_lane_sum(vn v) { return (v[0] + v[2]) + (v[1] + v[3]); }
#endif

#define VP (VL / NL)  // registers per vf

// Keeps a loaded operand in a register: without it GCC folds every use into a memory operand
// of an FMA, which turns one load per step into one load per FMA and makes a tile load-bound.
static inline vn vn_pin(vn x) {
#if !defined(VEC_PLAIN) && (defined(__AVX512F__) || defined(__AVX2__))
  __asm__("" : "+v"(x));
#endif
  return x;
}

// ---- the 16 lanes ---------------------------------------------------------------------

typedef struct {
  vn r[VP];  // lanes p * NL .. p * NL + NL - 1 in r[p]
} vf;

static inline vf vzero(void) {
  vf v;
  for (int p = 0; p < VP; p++) v.r[p] = vn_zero();
  return v;
}
static inline vf vload(const float* x) {
  vf v;
  for (int p = 0; p < VP; p++) v.r[p] = vn_load(x + p * NL);
  return v;
}
static inline vf vfma(vf a, vf b, vf c) {  // a * b + c, one rounding per lane
  for (int p = 0; p < VP; p++) c.r[p] = vn_fma(a.r[p], b.r[p], c.r[p]);
  return c;
}

// The sum of the lanes in a fixed tree: lanes l and l + h added for h = 8, 4, 2, 1. The
// steps with h >= NL add whole registers; the rest are vn_lane_sum's.
static inline float lane_sum(vf v) {
  for (int h = VP / 2; h >= 1; h /= 2)
    for (int p = 0; p < h; p++) v.r[p] = vn_add(v.r[p], v.r[p + h]);
  return vn_lane_sum(v.r[0]);
}

// The last rem < VL terms of a lane-split sum: lane l < rem adds a[l] * b[l]; the other lanes
// are skipped rather than fed zeros, so an infinite operand cannot turn them into NaN.
static inline vf vfma_tail(const float* a, const float* b, vf acc, int rem) {
  for (int l = 0; l < rem; l++) acc.r[l / NL][l % NL] = fmaf(a[l], b[l], acc.r[l / NL][l % NL]);
  return acc;
}

// Dot product of n floats in the lane order of the CPU kernels: lane l sums the terms
// l, l + VL, l + 2 VL, ... with fused multiply-adds in increasing order (the last n % VL terms
// by vfma_tail), then lane_sum.
static inline float dot_lanes(const float* a, const float* b, int n) {
  vf acc = vzero();
  int i = 0;
  for (; i + VL <= n; i += VL) acc = vfma(vload(a + i), vload(b + i), acc);
  return lane_sum(vfma_tail(a + i, b + i, acc, n - i));
}

#endif
