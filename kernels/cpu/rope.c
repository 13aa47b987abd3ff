// rope.c: rotary position embeddings (Llama), forward and backward, fp32 CPU.
//
// A call first tabulates cos and sin of every (position, pair) angle it needs, T x D/2 of them,
// then turns every head of every row with the table: each row is one thread's work, so the
// result does not depend on the thread count. The angle is position x frequency rounded to fp32
// (kernels/rope.h), and cos and sin are libm's of that float.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/parallel.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"

// cs[(t * half + i) * 2 + 0 / 1]: cos and sin of position t's angle for pair i.
static float* angle_table(RopeConfig r, int T, int D) {
  int half = D / 2;
  float* cs = malloc((size_t)T * half * 2 * sizeof(float) + 1);
  if (D % 2 || D > ROPE_MAX_HEAD || !cs) {  // the model's forms admit no other head (layers/config.c)
    fprintf(stderr, "error: rope: head size %d must be even and at most %d (or out of memory)\n", D, ROPE_MAX_HEAD);
    exit(1);
  }
  float freq[ROPE_MAX_HEAD / 2];
  rope_frequencies(r, D, freq);
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH((size_t)T * half))
  for (int t = 0; t < T; t++)
    for (int i = 0; i < half; i++) {
      float angle = (float)t * freq[i];
      cs[((size_t)t * half + i) * 2] = cosf(angle);
      cs[((size_t)t * half + i) * 2 + 1] = sinf(angle);
    }
  return cs;
}

// Turns every head of every row by its angle times `sign` (+1 forward, -1 backward).
static void rotate(act_t* x, RopeConfig r, int N, int T, int heads, int D, int stride, float sign) {
  int half = D / 2;
  float* cs = angle_table(r, T, D);
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH((size_t)N * heads * D))
  for (int n = 0; n < N; n++) {
    const float* row_cs = cs + (size_t)(n % T) * half * 2;
    for (int h = 0; h < heads; h++) {
      float* a = x + (size_t)n * stride + (size_t)h * D;
      float* b = a + half;
      for (int i = 0; i < half; i++) {
        float c = row_cs[2 * i], s = sign * row_cs[2 * i + 1];
        float ai = a[i], bi = b[i];
        a[i] = ai * c - bi * s;
        b[i] = bi * c + ai * s;
      }
    }
  }
  free(cs);
}

void rope_forward(KernelCtx* ctx, act_t* x, RopeConfig r, int N, int T, int heads, int D, int stride) {
  rotate(x, r, N, T, heads, D, stride, 1.0f);
}

// The rotation is orthogonal: its gradient is the rotation by the opposite angle.
void rope_backward(KernelCtx* ctx, act_t* dx, RopeConfig r, int N, int T, int heads, int D, int stride) {
  rotate(dx, r, N, T, heads, D, stride, -1.0f);
}
