// activation.cu: GELU (tanh form, as GPT-2), ReLU, gated GELU (T5 v1.1) and SwiGLU (Llama), bf16
// in and out,
// fp32 math with the same formulas as kernels/cpu/activation.c. Every output element is one
// thread's and reads only its own inputs, so in-place use (out == x, dx == dout) is safe.
#include "kernels/cuda/common.cuh"

#define ACT_THREADS 256
#define GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// GELU runs over W-wide packs (ActPack, common.cuh): element p * W + j of pack p.
template <int W>
__global__ void gelu_forward_kernel(act16* out, const act16* x, size_t n) {
  GRID_STRIDE(p, n / W) {
    ActPack<W> v = load_pack<W>(x + p * W);
#pragma unroll
    for (int j = 0; j < W; j++) v.v[j] = f2act(gelu_tanh(act2f(v.v[j])));
    store_pack<W>(out + p * W, v);
  }
}

template <int W>
__global__ void gelu_backward_kernel(act16* dx, const act16* x, const act16* dout, size_t n) {
  GRID_STRIDE(p, n / W) {
    ActPack<W> xv = load_pack<W>(x + p * W), dv = load_pack<W>(dout + p * W);
#pragma unroll
    for (int j = 0; j < W; j++) dv.v[j] = f2act(act2f(dv.v[j]) * gelu_tanh_grad(act2f(xv.v[j])));
    store_pack<W>(dx + p * W, dv);
  }
}

__global__ void relu_forward_kernel(act16* out, const act16* x, size_t n) {
  GRID_STRIDE(i, n) {
    float v = act2f(x[i]);
    out[i] = f2act(v > 0.0f ? v : 0.0f);
  }
}

// The subgradient at exactly 0 is 0, matching the forward's strict comparison.
__global__ void relu_backward_kernel(act16* dx, const act16* x, const act16* dout, size_t n) {
  GRID_STRIDE(i, n) dx[i] = act2f(x[i]) > 0.0f ? dout[i] : f2act(0.0f);
}

// Element i of row n of out: gate = x[n, i], up = x[n, F + i].
__global__ void geglu_forward_kernel(act16* out, const act16* x, int N, int F) {
  size_t total = (size_t)N * F;
  GRID_STRIDE(e, total) {
    size_t n = e / F, i = e % F;
    const act16* row = x + n * 2 * (size_t)F;
    out[e] = f2act(gelu_tanh(act2f(row[i])) * act2f(row[F + i]));
  }
}

// d/dgate = dout * up * gelu'(gate), d/dup = dout * gelu(gate). One thread writes both halves
// of its element, after reading both inputs, so dx may alias x.
__global__ void geglu_backward_kernel(act16* dx, const act16* x, const act16* dout, int N, int F) {
  size_t total = (size_t)N * F;
  GRID_STRIDE(e, total) {
    size_t n = e / F, i = e % F;
    const act16* row = x + n * 2 * (size_t)F;
    float g = act2f(row[i]), u = act2f(row[F + i]), d = act2f(dout[e]);
    act16* drow = dx + n * 2 * (size_t)F;
    drow[i] = f2act(d * u * gelu_tanh_grad(g));
    drow[F + i] = f2act(d * gelu_tanh(g));
  }
}

// SwiGLU's logistic s = 1 / (1 + e^-g), with e = e^-g from the clamped exponent as on the CPU.
static __device__ __forceinline__ float silu_s(float g, float* e_out) {
  float z = fminf(fmaxf(-g, -87.0f), 88.0f);
  float e = expf(z);
  *e_out = e;
  return 1.0f / (1.0f + e);
}

// Element i of row n of out: gate = x[n, i], up = x[n, F + i]; out = silu(gate) * up.
__global__ void swiglu_forward_kernel(act16* out, const act16* x, int N, int F) {
  size_t total = (size_t)N * F;
  GRID_STRIDE(e, total) {
    size_t n = e / F, i = e % F;
    const act16* row = x + n * 2 * (size_t)F;
    float g = act2f(row[i]), ex;
    out[e] = f2act(g * silu_s(g, &ex) * act2f(row[F + i]));
  }
}

// d/dgate = dout * up * s (1 + g (e s)), d/dup = dout * silu(gate), both halves by one thread
// after it read both inputs, so dx may alias x.
__global__ void swiglu_backward_kernel(act16* dx, const act16* x, const act16* dout, int N, int F) {
  size_t total = (size_t)N * F;
  GRID_STRIDE(e, total) {
    size_t n = e / F, i = e % F;
    const act16* row = x + n * 2 * (size_t)F;
    float g = act2f(row[i]), u = act2f(row[F + i]), d = act2f(dout[e]), ex;
    float s = silu_s(g, &ex);
    act16* drow = dx + n * 2 * (size_t)F;
    drow[i] = f2act(d * u * (s * (1.0f + g * (ex * s))));
    drow[F + i] = f2act(d * (g * s));
  }
}

extern "C" void gelu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n) {
  if (!n) return;
  if (pack_width(n, out, x) == 8)
    gelu_forward_kernel<8><<<grid_for(n / 8, ACT_THREADS), ACT_THREADS, 0, ctx->stream>>>(as_act16(out), as_act16(x), n);
  else
    gelu_forward_kernel<1><<<grid_for(n, ACT_THREADS), ACT_THREADS, 0, ctx->stream>>>(as_act16(out), as_act16(x), n);
  CUDA_LAUNCH_CHECK();
}

extern "C" void gelu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n) {
  if (!n) return;
  if (pack_width(n, dx, x, dout) == 8)
    gelu_backward_kernel<8><<<grid_for(n / 8, ACT_THREADS), ACT_THREADS, 0, ctx->stream>>>(as_act16(dx), as_act16(x), as_act16(dout), n);
  else
    gelu_backward_kernel<1><<<grid_for(n, ACT_THREADS), ACT_THREADS, 0, ctx->stream>>>(as_act16(dx), as_act16(x), as_act16(dout), n);
  CUDA_LAUNCH_CHECK();
}

extern "C" void relu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n) {
  if (!n) return;
  relu_forward_kernel<<<grid_for(n, ACT_THREADS), ACT_THREADS, 0, ctx->stream>>>(as_act16(out), as_act16(x), n);
  CUDA_LAUNCH_CHECK();
}

extern "C" void relu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n) {
  if (!n) return;
  relu_backward_kernel<<<grid_for(n, ACT_THREADS), ACT_THREADS, 0, ctx->stream>>>(as_act16(dx), as_act16(x),
                                                                                   as_act16(dout), n);
  CUDA_LAUNCH_CHECK();
}

extern "C" void geglu_forward(KernelCtx* ctx, act_t* out, const act_t* x, int N, int F) {
  size_t n = (size_t)N * F;
  if (!n) return;
  geglu_forward_kernel<<<grid_for(n, ACT_THREADS), ACT_THREADS, 0, ctx->stream>>>(as_act16(out), as_act16(x), N, F);
  CUDA_LAUNCH_CHECK();
}

extern "C" void geglu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, int N, int F) {
  size_t n = (size_t)N * F;
  if (!n) return;
  geglu_backward_kernel<<<grid_for(n, ACT_THREADS), ACT_THREADS, 0, ctx->stream>>>(as_act16(dx), as_act16(x),
                                                                                    as_act16(dout), N, F);
  CUDA_LAUNCH_CHECK();
}

extern "C" void swiglu_forward(KernelCtx* ctx, act_t* out, const act_t* x, int N, int F) {
  size_t n = (size_t)N * F;
  if (!n) return;
  swiglu_forward_kernel<<<grid_for(n, ACT_THREADS), ACT_THREADS, 0, ctx->stream>>>(as_act16(out), as_act16(x), N, F);
  CUDA_LAUNCH_CHECK();
}

extern "C" void swiglu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, int N, int F) {
  size_t n = (size_t)N * F;
  if (!n) return;
  swiglu_backward_kernel<<<grid_for(n, ACT_THREADS), ACT_THREADS, 0, ctx->stream>>>(as_act16(dx), as_act16(x),
                                                                                     as_act16(dout), N, F);
  CUDA_LAUNCH_CHECK();
}
