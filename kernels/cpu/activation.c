// activation.c: GELU (tanh form, as GPT-2), ReLU and gated GELU (T5 v1.1), fp32 CPU.
// All are elementwise, so each output is one thread's work and in-place use is safe.
#include <math.h>

#include "kernels/kernels.h"

#define GELU_K 0.7978845608028654f  // sqrt(2/pi)
#define GELU_A 0.044715f

static inline float gelu(float x) {
  float u = GELU_K * (x + GELU_A * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d/dx of 0.5 x (1 + tanh u), u = k (x + a x^3):  0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2)
static inline float gelu_grad(float x) {
  float u = GELU_K * (x + GELU_A * x * x * x);
  float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
}

void gelu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = gelu(x[i]);
}

void gelu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) dx[i] = dout[i] * gelu_grad(x[i]);
}

void relu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// The subgradient at exactly 0 is taken as 0, matching the forward's strict comparison.
void relu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dout[i] : 0.0f;
}

void geglu_forward(KernelCtx* ctx, act_t* out, const act_t* x, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* gate = x + (size_t)n * 2 * F;
    const float* up = gate + F;
    float* o = out + (size_t)n * F;
    for (int i = 0; i < F; i++) o[i] = gelu(gate[i]) * up[i];
  }
}

// d/dgate = dout * up * gelu'(gate), d/dup = dout * gelu(gate).
void geglu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, int N,
                    int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* gate = x + (size_t)n * 2 * F;
    const float* up = gate + F;
    const float* d = dout + (size_t)n * F;
    float* dg = dx + (size_t)n * 2 * F;
    float* du = dg + F;
    for (int i = 0; i < F; i++) {
      float gi = gate[i], ui = up[i], di = d[i];
      dg[i] = di * ui * gelu_grad(gi);
      du[i] = di * gelu(gi);
    }
  }
}
