// exact_sum.h: an exact, order-independent sum of non-negative doubles (fixed point in limbs).
//
// The global gradient norm must have the same bits for any world size. Per-block sums of
// squares (NORM_BLOCK elements, fixed positions in the flat layout) are converted to a fixed
// point number of EXACT_LIMBS 32-bit limbs held in int64 and added as integers. Integer
// addition is associative, so partial sums can be combined across threads, ranks (an int64
// all-reduce) or GPU atomics in any order with identical results. The value of a sum is
//   sum_k limb[k] * 2^(32*k - EXACT_FRAC_BITS)
// so the resolution is 2^-160 and the range 2^96; a block sum outside the range is flagged
// in limb[EXACT_LIMBS] (the overflow / non-finite counter).
#ifndef FSDP_EXACT_SUM_H
#define FSDP_EXACT_SUM_H
#include <math.h>
#include <stdint.h>

#define EXACT_LIMBS 8
#define EXACT_FRAC_BITS 160
#define EXACT_WORDS (EXACT_LIMBS + 1)  // limbs + the overflow counter

#ifdef __CUDACC__
#define EXACT_FN static __host__ __device__ inline
#else
#define EXACT_FN static inline
#endif

// Adds x >= 0 to the limbs (bits below 2^-160 are dropped, the same way for every caller).
EXACT_FN void exact_add(int64_t* w, double x) {
  if (x == 0.0) return;
  if (!(x > 0.0) || x >= 79228162514264337593543950336.0 /* 2^96 */) {  // NaN, inf, negative, overflow
    w[EXACT_LIMBS] += 1;
    return;
  }
  int e;
  double m = frexp(x, &e);                         // x = m * 2^e, 0.5 <= m < 1
  uint64_t mant = (uint64_t)ldexp(m, 53);          // x = mant * 2^(e-53), exact
  int pos = e - 53 + EXACT_FRAC_BITS;              // bit position of mant's lowest bit
  if (pos < 0) {
    if (pos <= -64) return;
    mant >>= -pos;
    pos = 0;
  }
  int limb = pos / 32, shift = pos % 32;
  // mant << shift spans at most 53 + 31 bits: three limbs.
  uint64_t lo = mant << shift;
  uint64_t hi = shift ? mant >> (64 - shift) : 0;
  w[limb] += (int64_t)(lo & 0xffffffffu);
  if (limb + 1 < EXACT_LIMBS) w[limb + 1] += (int64_t)(lo >> 32);
  if (limb + 2 < EXACT_LIMBS) w[limb + 2] += (int64_t)hi;
}

// Propagates carries so every limb is in [0, 2^32): the canonical form.
EXACT_FN void exact_normalize(int64_t* w) {
  for (int k = 0; k + 1 < EXACT_LIMBS; k++) {
    int64_t carry = w[k] >> 32;
    w[k] &= 0xffffffff;
    w[k + 1] += carry;
  }
}

// The value as a double (canonical limbs give the same bits however they were summed).
EXACT_FN double exact_value(const int64_t* w) {
  if (w[EXACT_LIMBS] != 0) return NAN;
  double v = 0.0;
  for (int k = EXACT_LIMBS - 1; k >= 0; k--) v += ldexp((double)w[k], 32 * k - EXACT_FRAC_BITS);
  return v;
}
#endif
