// activation.c: GELU (tanh form, as GPT-2), ReLU, gated GELU (T5 v1.1) and SwiGLU (Llama),
// fp32 CPU.
// All are elementwise, so each output is one thread's work and in-place use is safe.
//
// GELU's tanh is computed here (gelu_s, through exp_lanes) rather than by libm's tanhf, which
// the compiler cannot vectorize: straight-line float arithmetic with explicit fmaf, so the loops
// below run 16 lanes at a time and give the same bits on every target and any thread count.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/parallel.h"
#include "kernels/kernels.h"

#define GELU_K 0.7978845608028654f  // sqrt(2/pi)
#define GELU_A 0.044715f

// e^x for x in [-87, 88] (callers clamp): x = n ln2 + r with |r| <= ln2/2 (n rounded to
// nearest by the 1.5 * 2^23 shift), e^r by its degree-6 Taylor polynomial (truncation below
// 1.2e-7 relative), times 2^n built in the exponent bits.
static inline float exp_lanes(float x) {
  const float shift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float n = (x * 1.44269504f + shift) - shift;
  float r = fmaf(n, -0.693145752f, x);  // ln2 in two parts, the first exact in float
  r = fmaf(n, -1.42860677e-6f, r);
  float p = 1.0f / 720;
  p = fmaf(p, r, 1.0f / 120);
  p = fmaf(p, r, 1.0f / 24);
  p = fmaf(p, r, 1.0f / 6);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// GELU's tanh enters only as 0.5 (1 + tanh u) and 0.5 (1 - tanh^2 u), which are the logistic
// function of 2u and its derivative: with e = e^(-2u) and s = 1 / (1 + e),
//   0.5 (1 + tanh u) = s,   0.5 (1 - tanh^2 u) = 2 s (1 - s) = 2 e s^2.
// Written this way nothing cancels (tanh near -1 would), so the error stays within a few float
// rounding errors relative to the result (bounds tested in test/test_kernels.c over [-20, 20]).
// -2u is clamped to [-87, 88], where s is already 1, or below every float GELU can show; a NaN
// is clamped too (the first test is false for it), so exp_lanes never converts a NaN to an int
// (undefined) and a NaN input still gives NaN through the factor x.
static inline float gelu_s(float u, float* e_out) {
  float z = -2.0f * u;
  z = !(z >= -87.0f) ? -87.0f : z;
  z = z > 88.0f ? 88.0f : z;
  float e = exp_lanes(z);
  *e_out = e;
  return 1.0f / (1.0f + e);
}

static inline float gelu(float x) {
  float u = GELU_K * (x + GELU_A * x * x * x), e;
  return x * gelu_s(u, &e);
}

// d/dx of x s(u), u = k (x + a x^3):  s + x 2 e s^2 k (1 + 3 a x^2)
static inline float gelu_grad(float x) {
  float u = GELU_K * (x + GELU_A * x * x * x), e;
  float s = gelu_s(u, &e);
  return s + x * (2.0f * e * s * s) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
}

void gelu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(4 * n))
  for (size_t i = 0; i < n; i++) out[i] = gelu(x[i]);
}

void gelu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(4 * n))
  for (size_t i = 0; i < n; i++) dx[i] = dout[i] * gelu_grad(x[i]);
}

void relu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(n))
  for (size_t i = 0; i < n; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// The subgradient at exactly 0 is taken as 0, matching the forward's strict comparison.
void relu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(n))
  for (size_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dout[i] : 0.0f;
}

void geglu_forward(KernelCtx* ctx, act_t* out, const act_t* x, int N, int F) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(8 * (size_t)N * F))
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
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(8 * (size_t)N * F))
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

// SiLU's logistic s = 1 / (1 + e^-g), with e = e^-g clamped as gelu_s clamps it (beyond, s is 0
// or 1 to float precision, and silu(g) = g s below every float it could show).
static inline float silu_s(float g, float* e_out) {
  float z = -g;
  z = !(z >= -87.0f) ? -87.0f : z;  // a NaN too: exp_lanes must not convert it to an int
  z = z > 88.0f ? 88.0f : z;
  float e = exp_lanes(z);
  *e_out = e;
  return 1.0f / (1.0f + e);
}

void swiglu_forward(KernelCtx* ctx, act_t* out, const act_t* x, int N, int F) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH((size_t)N * F))
  for (int n = 0; n < N; n++) {
    const float* gate = x + (size_t)n * 2 * F;
    const float* up = gate + F;
    float* o = out + (size_t)n * F;
    for (int i = 0; i < F; i++) {
      float e, g = gate[i];
      o[i] = g * silu_s(g, &e) * up[i];
    }
  }
}

// d/dgate = dout * up * silu'(gate), d/dup = dout * silu(gate), where
// silu'(g) = s + g s (1 - s) = s (1 + g (e s)) (1 - s = e s, nothing cancels; e s <= 1, so a
// large negative g cannot overflow it).
void swiglu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, int N, int F) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH((size_t)N * F))
  for (int n = 0; n < N; n++) {
    const float* gate = x + (size_t)n * 2 * F;
    const float* up = gate + F;
    const float* d = dout + (size_t)n * F;
    float* dg = dx + (size_t)n * 2 * F;
    float* du = dg + F;
    for (int i = 0; i < F; i++) {
      float e, g = gate[i], ui = up[i], di = d[i];
      float s = silu_s(g, &e);
      dg[i] = di * ui * (s * (1.0f + g * (e * s)));
      du[i] = di * (g * s);
    }
  }
}
