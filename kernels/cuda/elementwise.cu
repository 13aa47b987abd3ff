// elementwise.cu: small vector helpers, bf16 activations and fp32 buffers. Every element is
// independent (grid-stride loops, fp32 arithmetic, one rounding to bf16 on store), so the
// results do not depend on the launch shape. In-place use is what these functions are for
// (y += x, x *= s); the casts need distinct input and output buffers, and narrow_f32_to_act
// casts in place.
#include "kernels/cuda/common.cuh"

#define EW_THREADS 256

__global__ void add_act_kernel(act16* y, const act16* x, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] = f2act(act2f(y[i]) + act2f(x[i]));
}

__global__ void scale_act_kernel(act16* x, float s, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = f2act(act2f(x[i]) * s);
}

__global__ void scale_f32_kernel(float* x, float s, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] *= s;
}

__global__ void add_f32_kernel(float* y, const float* x, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] += x[i];
}

// Over W-wide packs (Pack, common.cuh): 8 floats in, 8 act16 out per pack when W = 8.
template <int W>
__global__ void cast_f32_to_act_kernel(act16* __restrict__ out, const float* __restrict__ in, size_t n) {
  for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < n / W; p += (size_t)gridDim.x * blockDim.x) {
    Pack<float, W> f = load_pack<W>(in + p * W);
    ActPack<W> a;
#pragma unroll
    for (int j = 0; j < W; j++) a.v[j] = f2act(f.v[j]);
    store_pack<W>(out + p * W, a);
  }
}

__global__ void cast_act_to_f32_kernel(float* out, const act16* in, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = act2f(in[i]);
}

// In-place narrowing (narrow_f32_to_act): element i's 16-bit value lands on bytes [2i, 2i+2),
// inside fp32 element i/2, so an element is overwritten only by one of at least twice its
// index. The elements are converted in ranges [a, 2a) in increasing order: a range reads bytes
// [4a, 8a) and writes [2a, 4a), which it does not read and whose fp32 elements the ranges
// before it have already converted. A range is one launch (stream order separates them); the
// small ranges of the first NARROW_HEAD elements share one block, a barrier between them.
__global__ void narrow_head_kernel(float* buf, size_t n) {
  act16* out = (act16*)buf;
  size_t end = n < NARROW_HEAD ? n : NARROW_HEAD;
  for (size_t a = 0, b = 1; a < end; a = b, b *= 2) {
    for (size_t i = a + threadIdx.x; i < b && i < end; i += blockDim.x) out[i] = f2act(buf[i]);
    __syncthreads();
  }
}

__global__ void narrow_range_kernel(float* buf, size_t a, size_t b) {
  act16* out = (act16*)buf;
  for (size_t i = a + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < b; i += (size_t)gridDim.x * blockDim.x)
    out[i] = f2act(buf[i]);
}

extern "C" void add_inplace(KernelCtx* ctx, act_t* y, const act_t* x, size_t n) {
  if (!n) return;
  add_act_kernel<<<grid_for(n, EW_THREADS), EW_THREADS, 0, ctx->stream>>>(as_act16(y), as_act16(x), n);
  CUDA_LAUNCH_CHECK();
}

extern "C" void scale_act(KernelCtx* ctx, act_t* x, float s, size_t n) {
  if (!n) return;
  scale_act_kernel<<<grid_for(n, EW_THREADS), EW_THREADS, 0, ctx->stream>>>(as_act16(x), s, n);
  CUDA_LAUNCH_CHECK();
}

extern "C" void fill_zero_act(KernelCtx* ctx, act_t* x, size_t n) {
  if (!n) return;
  CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(act_t), ctx->stream));  // bf16 +0 is all zero bits
}

extern "C" void fill_zero_f32(KernelCtx* ctx, float* x, size_t n) {
  if (!n) return;
  CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), ctx->stream));
}

extern "C" void scale_f32(KernelCtx* ctx, float* x, float s, size_t n) {
  if (!n) return;
  scale_f32_kernel<<<grid_for(n, EW_THREADS), EW_THREADS, 0, ctx->stream>>>(x, s, n);
  CUDA_LAUNCH_CHECK();
}

extern "C" void add_f32(KernelCtx* ctx, float* y, const float* x, size_t n) {
  if (!n) return;
  add_f32_kernel<<<grid_for(n, EW_THREADS), EW_THREADS, 0, ctx->stream>>>(y, x, n);
  CUDA_LAUNCH_CHECK();
}

// Round to nearest even (the all-gather sends these bits; fsdp/schedule.c casts the shard).
extern "C" void cast_f32_to_act(KernelCtx* ctx, act_t* out, const float* in, size_t n) {
  if (!n) return;
  if (pack_width(n, out, in) == 8)
    cast_f32_to_act_kernel<8><<<grid_for(n / 8, EW_THREADS), EW_THREADS, 0, ctx->stream>>>(as_act16(out), in, n);
  else
    cast_f32_to_act_kernel<1><<<grid_for(n, EW_THREADS), EW_THREADS, 0, ctx->stream>>>(as_act16(out), in, n);
  CUDA_LAUNCH_CHECK();
}

extern "C" void cast_act_to_f32(KernelCtx* ctx, float* out, const act_t* in, size_t n) {
  if (!n) return;
  cast_act_to_f32_kernel<<<grid_for(n, EW_THREADS), EW_THREADS, 0, ctx->stream>>>(out, as_act16(in), n);
  CUDA_LAUNCH_CHECK();
}

extern "C" void narrow_f32_to_act(KernelCtx* ctx, float* buf, size_t n) {
  if (!n) return;
  narrow_head_kernel<<<1, 1024, 0, ctx->stream>>>(buf, n);
  CUDA_LAUNCH_CHECK();
  for (size_t a = NARROW_HEAD; a < n; a *= 2) {
    size_t b = a * 2 < n ? a * 2 : n;
    narrow_range_kernel<<<grid_for(b - a, EW_THREADS), EW_THREADS, 0, ctx->stream>>>(buf, a, b);
    CUDA_LAUNCH_CHECK();
  }
}
