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
// Backward (one launch): dx accumulates (dx += ...), the two row means reduced as in the
// forward; dweight and dbias, column sums over rows, are summed by the same kernel as it makes
// dx, per chunk of rows in a fixed order, and finished in the same launch by the tree of
// column_sums.cuh, so they are deterministic without float atomics.
//
// Memory access: W-wide packs (ActPack, common.cuh): 16-byte loads when the row allows (W = 8),
// single values otherwise (W = 1); in a row reduction lane l of a warp owns packs l, l + 32, ...
// The pointers are __restrict__: the buffers never overlap (kernels.h), and without the promise
// a store to dx or out forces the next loads to wait for it.
#include "kernels/cuda/column_sums.cuh"

#define ROWS_PER_BLOCK 8  // warps per block in the forward

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

// Phase 1 for one row, lane `lane` of its warp: the lane's sums of dnorm and dnorm * norm over
// its packs of W columns, in order.
template <int W>
static __device__ __forceinline__ void norm_row_sums(const act16* __restrict__ x, const act16* __restrict__ dout,
                                                     const act16* __restrict__ weight, float m, float r, int C,
                                                     int lane, float* sd, float* sdn) {
  for (int c = lane * W; c < C; c += 32 * W) {
    ActPack<W> xv = load_pack<W>(x + c), dv = load_pack<W>(dout + c), wv = load_pack<W>(weight + c);
#pragma unroll
    for (int j = 0; j < W; j++) {
      float norm = (act2f(xv.v[j]) - m) * r, dnorm = act2f(dv.v[j]) * act2f(wv.v[j]);
      *sd += dnorm;
      *sdn += dnorm * norm;
    }
  }
}

// Phase 2 for the pack of W columns at c over rows g, g + G, ... of the chunk: dx updated, and
// the pack's sums of dout * norm (aw) and dout (ab) in row order.
template <int W>
static __device__ __forceinline__ void norm_column_pass(act16* __restrict__ dx, const act16* __restrict__ x,
                                                        const act16* __restrict__ dout, const act16* __restrict__ weight,
                                                        const float* __restrict__ mean, const float* __restrict__ rstd,
                                                        const float* row_am, const float* row_bm, int n0, int nrows,
                                                        int g, int G, int c, int C, int rms, float* aw, float* ab) {
  ActPack<W> wv = load_pack<W>(weight + c);
  for (int i = g; i < nrows; i += G) {
    size_t off = (size_t)(n0 + i) * C + c;
    float m = rms ? 0.0f : mean[n0 + i], r = rstd[n0 + i], am = row_am[i], bm = row_bm[i];
    ActPack<W> xv = load_pack<W>(x + off), dv = load_pack<W>(dout + off), gv = load_pack<W>(dx + off);
#pragma unroll
    for (int j = 0; j < W; j++) {
      float d = act2f(dv.v[j]), norm = (act2f(xv.v[j]) - m) * r, dnorm = d * act2f(wv.v[j]);
      gv.v[j] = f2act(act2f(gv.v[j]) + r * (dnorm - am - norm * bm));
      aw[j] += d * norm;
      ab[j] += d;
    }
    store_pack<W>(dx + off, gv);
  }
}

// Backward, one launch: dx += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), with
// dnorm = dout * weight (for RMSNorm the mean(dnorm) term is absent and norm = x * rstd), and
// the parameter gradients dweight += sum_n dout * norm, dbias += sum_n dout, summed where dx
// is made (column_sums.cuh). One block per chunk of `rows` consecutive rows:
//   1. warp w takes rows w, w + 8, ... of the chunk: each lane sums its packs of the row in
//      order and warp_sum combines the lanes, as the forward does; the two row means go to
//      shared memory;
//   2. thread t owns pack p of W columns for the rows of its row group g (rows g, g + G, ... of
//      the chunk, in order; G groups share the block when a row has fewer packs than the block
//      has threads): it updates dx there and sums dout * norm and dout for its columns in
//      registers; the groups' sums are added in group order, giving the chunk's leaf;
//   3. the chunks meet in column_sums.cuh's tree, and the block that completes it adds the total
//      to dweight (and dbias).
// Phase 2 reads the chunk's x and dout a second time, from L2 (a chunk is a few dozen rows).
#define NB_THREADS 256
#define NB_MAX_ROWS 1024
#define NB_MAX_GROUPS 16
__global__ void __launch_bounds__(NB_THREADS) norm_backward_kernel(
    act16* __restrict__ dx, float* __restrict__ dweight, float* __restrict__ dbias, float* __restrict__ nodes,
    unsigned int* counters, const act16* __restrict__ dout, const act16* __restrict__ x,
    const act16* __restrict__ weight, const float* __restrict__ mean, const float* __restrict__ rstd, int N, int C,
    int rows, int chunks, int rms, int wide) {
  __shared__ float row_am[NB_MAX_ROWS], row_bm[NB_MAX_ROWS];
  __shared__ float group_sums[2][NB_THREADS * 8];  // [vector][group * C + column], when G > 1
  __shared__ unsigned int flag;
  const int W = wide ? 8 : 1, V = dbias ? 2 : 1, tid = threadIdx.x;
  const int chunk = blockIdx.x, n0 = chunk * rows, nrows = min(rows, N - n0);
  // 1. the row means of dnorm and dnorm * norm
  int lane = tid & 31, warp = tid >> 5;
  for (int i = warp; i < nrows; i += NB_THREADS / 32) {
    size_t off = (size_t)(n0 + i) * C;
    float m = rms ? 0.0f : mean[n0 + i], r = rstd[n0 + i];
    float sd = 0.0f, sdn = 0.0f;
    if (wide) norm_row_sums<8>(x + off, dout + off, weight, m, r, C, lane, &sd, &sdn);
    else norm_row_sums<1>(x + off, dout + off, weight, m, r, C, lane, &sd, &sdn);
    float am = rms ? 0.0f : warp_sum(sd) / (float)C, bm = warp_sum(sdn) / (float)C;
    if (lane == 0) row_am[i] = am, row_bm[i] = bm;
  }
  __syncthreads();
  // 2. dx, and this chunk's sums of dout * norm and dout per column
  const int P = (C + W - 1) / W;                                   // packs per row
  const int G = P >= NB_THREADS ? 1 : min(NB_MAX_GROUPS, NB_THREADS / P);  // row groups
  float* leaf = nodes + (size_t)chunk * V * C;
  for (int t = tid; t < (G > 1 ? G * P : P); t += NB_THREADS) {
    const int g = G > 1 ? t / P : 0, p = G > 1 ? t % P : t, c = p * W;
    float aw[8] = {0, 0, 0, 0, 0, 0, 0, 0}, ab[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (wide) norm_column_pass<8>(dx, x, dout, weight, mean, rstd, row_am, row_bm, n0, nrows, g, G, c, C, rms, aw, ab);
    else norm_column_pass<1>(dx, x, dout, weight, mean, rstd, row_am, row_bm, n0, nrows, g, G, c, C, rms, aw, ab);
    for (int j = 0; j < W && c + j < C; j++) {
      if (G > 1) {
        group_sums[0][g * C + c + j] = aw[j];
        group_sums[1][g * C + c + j] = ab[j];
      } else {
        leaf[c + j] = aw[j];
        if (V == 2) leaf[C + c + j] = ab[j];
      }
    }
  }
  if (G > 1) {  // the groups' sums, added in group order
    __syncthreads();
    for (int c = tid; c < C; c += NB_THREADS) {
      float sw = group_sums[0][c], sb = group_sums[1][c];
      for (int g = 1; g < G; g++) sw += group_sums[0][g * C + c], sb += group_sums[1][g * C + c];
      leaf[c] = sw;
      if (V == 2) leaf[C + c] = sb;
    }
  }
  // 3. the tree of chunks; its last block adds the totals
  const float* root = colsum_arrive(nodes, counters, chunk, chunks, V * C, &flag);
  if (!root) return;
  for (int c = tid; c < C; c += NB_THREADS) {
    dweight[c] += __ldcg(root + c);
    if (V == 2) dbias[c] += __ldcg(root + C + c);
  }
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
  int wide = pack_width(C, dx, dout, x, weight) == 8, V = dbias ? 2 : 1;
  // About 256 chunks of 8 to 64 rows (more rows only when the partials would not fit the scratch).
  ColumnSumPlan p = plan_column_sums(ctx, rms ? "rmsnorm_backward" : "layernorm_backward", N, 1, V * C, 8,
                                     NB_MAX_ROWS, 8, 256);
  norm_backward_kernel<<<p.chunks, NB_THREADS, 0, ctx->stream>>>(
      as_act16(dx), dweight, dbias, (float*)ctx->scratch, ctx->counters, as_act16(dout), as_act16(x),
      as_act16(weight), mean, rstd, N, C, p.rows, p.chunks, rms, wide);
  CUDA_LAUNCH_CHECK();
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
