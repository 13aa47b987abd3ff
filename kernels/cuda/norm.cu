// norm.cu: LayerNorm and RMSNorm (plain and fused with a residual add), forward and backward,
// bf16 activations, fp32 statistics and accumulation.
//
// Forward: one warp per row. The row statistics are two-pass (mean, then the centered sum of
// squares) in fp32: each lane sums its channels in order, then a fixed xor butterfly (warp_sum)
// combines the lanes. The saved mean/rstd are exactly what the output was normalized with, and
// the backward normalizes with them again.
// The fused residual variant stores residual = bf16(a + b) and normalizes the ROUNDED
// residual: the backward reads the stored residual as x, so both passes see the same input.
//
// Backward: dx accumulates (dx += ...), one warp per row, the two row means reduced as in the
// forward. dweight and dbias are column sums over rows: per-chunk partials into the ctx
// scratch, then a fixed-order sum over chunks (reduce.cu), so they are deterministic without
// atomics. Both kernels read x and dout; fusing them would save one read (left for tuning).
//
// Memory access: lane l of a warp owns the W-wide packs l, l + 32, ... of its row (ActPack,
// common.cuh): 16-byte loads when the row allows (W = 8), single values otherwise (W = 1). The
// pointers are __restrict__: the buffers never overlap (kernels.h), and without the promise a
// store to dx or out forces the next loads to wait for it. On an H100 the backward's dx kernel
// took 200 us per gpt2-124m call that way, and 30 us with __restrict__ alone.
#include "kernels/cuda/common.cuh"

#define ROWS_PER_BLOCK 8  // warps per block in the row kernels
#define COL_THREADS 256

// residual (may be NULL): residual = bf16(a + b) and the row normalized is the residual;
// otherwise the row is a. rms: RMSNorm (no mean, no bias). mean may be NULL for rms.
template <int W>
__global__ void norm_forward_kernel(act16* __restrict__ out, float* __restrict__ mean,
                                    float* __restrict__ rstd, act16* __restrict__ residual,
                                    const act16* __restrict__ a, const act16* __restrict__ b,
                                    const act16* __restrict__ weight,
                                    const act16* __restrict__ bias, int N, int C, float eps,
                                    int rms) {
  int lane = threadIdx.x & 31;
  int n = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
  if (n >= N) return;  // the whole warp leaves together
  size_t off = (size_t)n * C;
  const act16* x = a + off;
  if (residual) {
    // Each lane later re-reads exactly the packs it wrote, so no barrier is needed.
    for (int c = lane * W; c < C; c += 32 * W) {
      ActPack<W> av = load_pack<W>(a + off + c), bv = load_pack<W>(b + off + c), rv;
#pragma unroll
      for (int j = 0; j < W; j++) rv.v[j] = f2act(act2f(av.v[j]) + act2f(bv.v[j]));
      store_pack<W>(residual + off + c, rv);
    }
    x = residual + off;
  }
  float m = 0.0f, r;
  if (!rms) {
    float s = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
      ActPack<W> xv = load_pack<W>(x + c);
#pragma unroll
      for (int j = 0; j < W; j++) s += act2f(xv.v[j]);
    }
    m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
      ActPack<W> xv = load_pack<W>(x + c);
#pragma unroll
      for (int j = 0; j < W; j++) {
        float d = act2f(xv.v[j]) - m;
        v += d * d;
      }
    }
    r = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
  } else {
    float ss = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
      ActPack<W> xv = load_pack<W>(x + c);
#pragma unroll
      for (int j = 0; j < W; j++) ss += act2f(xv.v[j]) * act2f(xv.v[j]);
    }
    r = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
  }
  for (int c = lane * W; c < C; c += 32 * W) {
    ActPack<W> xv = load_pack<W>(x + c), wv = load_pack<W>(weight + c), ov;
    if (!rms) {
      ActPack<W> bv = load_pack<W>(bias + c);
#pragma unroll
      for (int j = 0; j < W; j++)
        ov.v[j] = f2act((act2f(xv.v[j]) - m) * r * act2f(wv.v[j]) + act2f(bv.v[j]));
    } else {
#pragma unroll
      for (int j = 0; j < W; j++) ov.v[j] = f2act(act2f(xv.v[j]) * r * act2f(wv.v[j]));
    }
    store_pack<W>(out + off + c, ov);
  }
  if (lane == 0) {
    if (mean) mean[n] = m;
    rstd[n] = r;
  }
}

// dx += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight;
// for RMSNorm the mean(dnorm) term is absent and norm = x * rstd.
template <int W>
__global__ void norm_backward_dx_kernel(act16* __restrict__ dx, const act16* __restrict__ dout,
                                        const act16* __restrict__ x,
                                        const act16* __restrict__ weight,
                                        const float* __restrict__ mean,
                                        const float* __restrict__ rstd, int N, int C, int rms) {
  int lane = threadIdx.x & 31;
  int n = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
  if (n >= N) return;
  size_t off = (size_t)n * C;
  float m = rms ? 0.0f : mean[n], r = rstd[n];
  float sd = 0.0f, sdn = 0.0f;
  for (int c = lane * W; c < C; c += 32 * W) {
    ActPack<W> xv = load_pack<W>(x + off + c), dv = load_pack<W>(dout + off + c), wv = load_pack<W>(weight + c);
#pragma unroll
    for (int j = 0; j < W; j++) {
      float norm = (act2f(xv.v[j]) - m) * r;
      float dnorm = act2f(dv.v[j]) * act2f(wv.v[j]);
      sd += dnorm;
      sdn += dnorm * norm;
    }
  }
  float am = rms ? 0.0f : warp_sum(sd) / (float)C;
  float bm = warp_sum(sdn) / (float)C;
  for (int c = lane * W; c < C; c += 32 * W) {
    ActPack<W> xv = load_pack<W>(x + off + c), dv = load_pack<W>(dout + off + c), wv = load_pack<W>(weight + c);
    ActPack<W> gv = load_pack<W>(dx + off + c);
#pragma unroll
    for (int j = 0; j < W; j++) {
      float norm = (act2f(xv.v[j]) - m) * r;
      float dnorm = act2f(dv.v[j]) * act2f(wv.v[j]);
      gv.v[j] = f2act(act2f(gv.v[j]) + r * (dnorm - am - norm * bm));
    }
    store_pack<W>(dx + off + c, gv);
  }
}

// grid (column tiles, chunks): partial sums of dout * norm (dweight) and dout (dbias) over the
// chunk's rows, in row order. partials: [chunks, C] for dweight, then [chunks, C] for dbias.
__global__ void norm_param_partials_kernel(float* partials, const act16* dout, const act16* x,
                                           const float* mean, const float* rstd, int N, int C,
                                           int rows, int chunks, int with_bias, int rms) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int chunk = blockIdx.y;
  int n0 = chunk * rows, n1 = min(N, n0 + rows);
  float aw = 0.0f, ab = 0.0f;
  for (int n = n0; n < n1; n++) {
    size_t i = (size_t)n * C + c;
    float d = act2f(dout[i]);
    float norm = (act2f(x[i]) - (rms ? 0.0f : mean[n])) * rstd[n];
    aw += d * norm;
    ab += d;
  }
  partials[(size_t)chunk * C + c] = aw;
  if (with_bias) partials[((size_t)chunks + chunk) * C + c] = ab;
}

static void norm_forward(KernelCtx* ctx, act_t* out, float* mean, float* rstd, act_t* residual,
                         const act_t* a, const act_t* b, const act_t* weight, const act_t* bias,
                         int N, int C, float eps, int rms) {
  if (N <= 0 || C <= 0) return;
  unsigned int blocks = ceil_div(N, ROWS_PER_BLOCK);
  act16* res16 = residual ? as_act16(residual) : NULL;
  const act16* b16 = b ? as_act16(b) : NULL;
  const act16* bias16 = bias ? as_act16(bias) : NULL;
  if (pack_width(C, out, residual, a, b) == 8 && pack_width(C, weight, bias) == 8)
    norm_forward_kernel<8><<<blocks, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(
        as_act16(out), mean, rstd, res16, as_act16(a), b16, as_act16(weight), bias16, N, C, eps, rms);
  else
    norm_forward_kernel<1><<<blocks, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(
        as_act16(out), mean, rstd, res16, as_act16(a), b16, as_act16(weight), bias16, N, C, eps, rms);
  CUDA_LAUNCH_CHECK();
}

static void norm_backward(KernelCtx* ctx, act_t* dx, float* dweight, float* dbias,
                          const act_t* dout, const act_t* x, const act_t* weight,
                          const float* mean, const float* rstd, int N, int C, int rms) {
  if (N <= 0 || C <= 0) return;
  unsigned int blocks = ceil_div(N, ROWS_PER_BLOCK);
  if (pack_width(C, dx, dout, x, weight) == 8)
    norm_backward_dx_kernel<8><<<blocks, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(
        as_act16(dx), as_act16(dout), as_act16(x), as_act16(weight), mean, rstd, N, C, rms);
  else
    norm_backward_dx_kernel<1><<<blocks, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(
        as_act16(dx), as_act16(dout), as_act16(x), as_act16(weight), mean, rstd, N, C, rms);
  CUDA_LAUNCH_CHECK();
  int with_bias = dbias != NULL;
  RowChunks rc = plan_row_chunks(ctx, N, C, 1 + with_bias);
  float* partials = (float*)ctx->scratch;
  dim3 grid(ceil_div(C, COL_THREADS), rc.chunks);
  norm_param_partials_kernel<<<grid, COL_THREADS, 0, ctx->stream>>>(
      partials, as_act16(dout), as_act16(x), mean, rstd, N, C, rc.rows, rc.chunks, with_bias, rms);
  CUDA_LAUNCH_CHECK();
  finish_column_sums(ctx, dweight, partials, rc.chunks, C);
  if (with_bias) finish_column_sums(ctx, dbias, partials + (size_t)rc.chunks * C, rc.chunks, C);
}

extern "C" void layernorm_forward(KernelCtx* ctx, act_t* out, float* mean, float* rstd,
                                  const act_t* x, const act_t* weight, const act_t* bias, int N,
                                  int C, float eps) {
  norm_forward(ctx, out, mean, rstd, NULL, x, NULL, weight, bias, N, C, eps, 0);
}

extern "C" void residual_layernorm_forward(KernelCtx* ctx, act_t* residual, act_t* out,
                                           float* mean, float* rstd, const act_t* a,
                                           const act_t* b, const act_t* weight,
                                           const act_t* bias, int N, int C, float eps) {
  norm_forward(ctx, out, mean, rstd, residual, a, b, weight, bias, N, C, eps, 0);
}

extern "C" void layernorm_backward(KernelCtx* ctx, act_t* dx, float* dweight, float* dbias,
                                   const act_t* dout, const act_t* x, const act_t* weight,
                                   const float* mean, const float* rstd, int N, int C) {
  norm_backward(ctx, dx, dweight, dbias, dout, x, weight, mean, rstd, N, C, 0);
}

extern "C" void rmsnorm_forward(KernelCtx* ctx, act_t* out, float* rstd, const act_t* x,
                                const act_t* weight, int N, int C, float eps) {
  norm_forward(ctx, out, NULL, rstd, NULL, x, NULL, weight, NULL, N, C, eps, 1);
}

extern "C" void residual_rmsnorm_forward(KernelCtx* ctx, act_t* residual, act_t* out,
                                         float* rstd, const act_t* a, const act_t* b,
                                         const act_t* weight, int N, int C, float eps) {
  norm_forward(ctx, out, NULL, rstd, residual, a, b, weight, NULL, N, C, eps, 1);
}

extern "C" void rmsnorm_backward(KernelCtx* ctx, act_t* dx, float* dweight, const act_t* dout,
                                 const act_t* x, const act_t* weight, const float* rstd, int N,
                                 int C) {
  norm_backward(ctx, dx, dweight, NULL, dout, x, weight, NULL, rstd, N, C, 1);
}
