// rope.h: the frequencies of rotary position embeddings, one body for both backends.
//
// kernels/cpu/rope.c and kernels/cuda/rope.cu both take a head's D/2 frequencies from
// rope_frequencies on the host, so the two backends rotate by the same angles: position times
// frequency, rounded to fp32 as transformers' and Meta's Llama code round it.
//
// Pair i of a head of D columns turns at theta^(-2i/D) radians per position (RoFormer, Su et al.
// 2021, section 3.2.2). Llama 3.1 stretches the slow pairs for long context (the "llama3"
// rope_scaling of its config.json): a pair whose wavelength 2 pi / f is longer than
// original_context / low_freq_factor turns `factor` times slower, one shorter than
// original_context / high_freq_factor is left alone, and the ones between are blended linearly
// in original_context / wavelength.
#ifndef FSDP_ROPE_H
#define FSDP_ROPE_H
#include <math.h>

#include "kernels/kernels.h"

// The largest head a rotation handles: the CUDA kernel passes the frequencies by value.
#define ROPE_MAX_HEAD 512

// freq[0 .. D/2): the frequency of each pair of a head of D columns, in double and rounded
// once to fp32.
static inline void rope_frequencies(RopeConfig r, int D, float* freq) {
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < D / 2; i++) {
    double f = 1.0 / pow((double)r.theta, (double)(2 * i) / D);
    if (r.factor > 0) {
      double wavelength = 2 * pi / f;
      double low = r.original_context / (double)r.low_freq_factor;    // longer waves: slowed
      double high = r.original_context / (double)r.high_freq_factor;  // shorter waves: kept
      if (wavelength > low) {
        f /= r.factor;
      } else if (wavelength >= high) {
        double smooth = (r.original_context / wavelength - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = (1 - smooth) * f / r.factor + smooth * f;
      }
    }
    freq[i] = (float)f;
  }
}
#endif
