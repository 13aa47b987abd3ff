// attention.cu: fused multi-head attention (forward and backward) on tensor cores, bf16 in,
// fp32 accumulation, plus an unfused deterministic path used as a test oracle and fallback.
//
// Semantics are those of kernels/cpu/attention.c (see kernels.h, AttnShape): scores =
// scale * q.k + pos_bias[h,i,j], causal keeps key j iff j <= i (top-left aligned, also for
// Tq != Tk), lse[B,H,Tq] is the natural-log log-sum-exp of the kept scores, dq/dk/dv are
// overwritten in their own columns only, dpos_bias[H,Tq,Tk] accumulates the sum over batches.
//
// Algorithm (FlashAttention-2, Dao 2023, "FlashAttention-2: Faster Attention with Better
// Parallelism and Work Partitioning": Algorithm 1 / section 3.1 for the forward, Algorithm 2 /
// section 3.1 for the backward, section 3.2-3.3 for the thread-block and warp partitioning).
// The Tq x Tk score matrix never goes to memory; it lives in mma accumulator registers, one
// 16-row slice per warp.
//
// Tensor cores: bf16 mma.sync.m16n8k16 (fp32 accumulate) via inline PTX, operands fetched with
// ldmatrix (.trans where the operand is stored k-major). PTX mma rather than nvcuda::wmma
// because the accumulator layout of m16n8k16 is documented: the fp32 accumulators of two
// neighbouring n8 tiles are, element for element, the A fragment of the next k16 step, so
// P = softmax(S) (and dS) feed the second matmul straight from registers. With wmma the
// fragment layout is opaque and P would have to go through shared memory.
//
// Head size: one template per padded size DP in {16,32,48,64,80,96,112,128}; D <= 128 runs
// the fused kernels with D padded up to DP inside the kernel (columns D..DP-1 of every shared
// tile are zero-filled, so they add nothing to q.k and are never stored). D > 128 goes to the
// simple path. Loads are 16-byte cp.async when every pointer is 16-byte aligned and D and the
// row strides are multiples of 8, else element-wise (same kernel, uniform branch), so odd
// tiny test shapes (D = 8..24) also run the fused code.
//
// Warp layout: 128 threads = 4 warps per CTA. Shared tiles are row-major with a row stride of
// DP + 8 elements (16 bytes of padding: ldmatrix row addresses land in distinct banks).
//  forward   CTA = (64 query rows, head, batch); warp w owns query rows 16w..16w+15. Loops
//            over 64-key tiles, K and V double-buffered with cp.async (smem: Q + 2x(K+V) =
//            5*64*(DP+8)*2 bytes, 45 KiB at DP=64, 85 KiB at DP=128). Per tile: S = Q K^T
//            (16x64 per warp, in registers), online softmax in base 2 (exp2 of log2e * score),
//            O += P V. The output is staged through the warp's own rows of the Q tile so the
//            global stores are coalesced 16-byte rows.
//  backward  (1) D_i = rowsum(dout_i * out_i), one warp per (b,i,h), fp32 into the kernel
//            scratch (ctx->scratch, or ctx->workspace when there is none).
//            (2) dk/dv kernel: CTA = (64 keys, head, batch), warp w owns keys 16w..16w+15; K
//            and V stay in shared memory; loops over query tiles of BQ rows (64 for DP <= 64,
//            32 above, to bound registers) in increasing order, Q, dO, lse, D double-buffered.
//            Per tile it recomputes S^T = K Q^T and P^T = exp(S^T - lse), then dV += P^T dO,
//            dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q. dK and dV stay in registers
//            and are written once: every dk/dv element has one owner, fixed summation order.
//            (3) dq kernel: CTA = (64 query rows, head, batch), like the forward: loops over key
//            tiles in increasing order, recomputes P and dS, dQ += dS K in registers, written
//            once. So dq is deterministic without atomics (FA2's atomicAdd on dq is replaced
//            by this query-parallel pass; it recomputes S and dP, two matmuls per tile).
//            When dpos_bias is non-NULL the dq kernel also sums dS over the batches into
//            dpos_bias[h, rows, :], without atomics: the batches are split into G groups
//            (enough for about kBiasGradCtas CTAs; G = 1 when the partial sums do not fit the
//            scratch), and CTA (64 query rows, head, group) loops over its group's batches in
//            order with plain loads/stores. Group 0 adds into dpos_bias itself, group g > 0
//            into a partial sum of its own in the kernel scratch, and a last kernel adds the
//            partials to dpos_bias in group order. Each element has one writer per group and
//            a fixed order: (((dpos_bias + b0 + b1..) + group 1) + group 2..). Deterministic,
//            and the grouping depends on the shape only, not on the GPU. (One CTA looping over
//            every batch, G = 1, left a T5 encoder of 8 heads with 64 CTAs for 132 SMs.)
//            D needs B*H*Tq floats of that scratch; if it does not fit, the batch is processed
//            in chunks (one after another, in increasing b); if one batch does not fit
//            the simple path runs.
// Causal skip: the forward and dq loops stop at the key tile holding the last query row of
// the CTA; the dk/dv loop starts at the query tile holding the first key of the CTA; only
// tiles crossing the diagonal (or the Tk / Tq edge) evaluate the element mask. Query tiles
// are scheduled last-first in the forward and dq grids so the longest causal rows start first.
// Partial tiles: rows past Tq / Tk are zero-filled; in the backward their lse is +inf so P=0.
//
// Simple path (static kernels below, also callable as attention_forward_simple /
// attention_backward_simple, and forced for every call with the environment variable
// FSDP_ATTN=simple): one CTA per score row, scores materialized in fp32 in the same scratch
// (Tk floats per CTA in the forward and dq pass, 2*Tq per CTA in the dk/dv pass; the grid is
// sized to what fits). Every value is summed by one thread in index order (or a fixed
// block-reduction tree), so it is deterministic; dpos_bias is summed over b in order.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ptx.cuh"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kThreads = 128;  // every kernel in this file: 4 warps
constexpr int kTile = 64;      // query rows per CTA (forward, dq) and keys per tile / per CTA
// The dq kernel with dpos_bias splits the batches into groups until it has about this many
// CTAs (two per SM of an H100). A constant, not the device's SM count: the grouping fixes the
// order of dpos_bias's sum, so it must not change from one GPU to another.
constexpr int kBiasGradCtas = 256;

struct AttnArgs {
  const act16* q;
  const act16* k;
  const act16* v;
  const act16* bias;   // [H, Tq, Tk] or NULL
  const act16* out;    // backward: forward output, [B*Tq, H*D]
  const act16* dout;   // backward: [B*Tq, H*D]
  const float* lse;   // backward: [B, H, Tq]
  const float* Dvec;  // backward: rowsum(dout*out), [B, H, Tq]
  act16* o;            // forward output
  float* lse_out;     // forward lse
  act16* dq;
  act16* dk;
  act16* dv;
  float* dbias;  // [H, Tq, Tk] or NULL, accumulates
  float* dbias_part;  // dq kernel with dbias: batch groups 1.. write their sums here, [G-1][H][Tq][Tk]
  int group_batches;  // dq kernel with dbias: batches per CTA (one batch group)
  int B, Tq, Tk, H, D, q_stride, kv_stride, causal, vec;
  float scale, scale_log2;
};

// ---- PTX (kernels/cuda/ptx.cuh) and register helpers -----------------------------------

// Two floats rounded to bf16 in one b32 register, lo in the lower half (an mma A fragment).
// Built from the bit patterns, not by punning a __nv_bfloat162 (strict aliasing).
__device__ __forceinline__ uint32_t pack_act16(float lo, float hi) {
  return (uint32_t)act16_bits(f2act(lo)) |
         ((uint32_t)act16_bits(f2act(hi)) << 16);
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- fragment-level building blocks ----------------------------------------------------

// acc[16 x 8*NT] += A[16 x 16*KS] * B^T, A row-major rows a_rows (stride LD), B stored as
// [n][k] row-major (n = 8*NT rows, stride LD): the "q.k" form (S = Q K^T, dP = dO V^T).
template <int KS, int NT, int LD>
__device__ __forceinline__ void mma_rows_nk(float (&acc)[NT][4], const act16* a_rows,
                                            const act16* b_nk, int lane) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    uint32_t af[4];
    ldsm_x4(af, a_rows + (lane & 15) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bf[4];
      ldsm_x4(bf, b_nk + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 +
                      ((lane >> 3) & 1) * 8);
      mma_act16(acc[2 * np], af, bf[0], bf[1]);
      mma_act16(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

// acc[16 x DP] += P[16 x 8*NP] * B, P given as fp32 accumulators (converted to bf16 A
// fragments in registers), B stored [k][n] row-major (k = 8*NP rows, stride LD): the "P V" form
// (O += P V, dq += dS K, dV += P^T dO, dK += dS^T Q).
template <int NP, int DP, int LD>
__device__ __forceinline__ void mma_regs_kn(float (&acc)[DP / 8][4], const float (&p)[NP][4],
                                            const act16* b_kn, int lane) {
#pragma unroll
  for (int kk = 0; kk < NP / 2; ++kk) {
    uint32_t af[4];
    af[0] = pack_act16(p[2 * kk][0], p[2 * kk][1]);
    af[1] = pack_act16(p[2 * kk][2], p[2 * kk][3]);
    af[2] = pack_act16(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    af[3] = pack_act16(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int dp = 0; dp < DP / 16; ++dp) {
      uint32_t bf[4];
      ldsm_x4_t(bf, b_kn + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 +
                        (lane >> 4) * 8);
      mma_act16(acc[2 * dp], af, bf[0], bf[1]);
      mma_act16(acc[2 * dp + 1], af, bf[2], bf[3]);
    }
  }
}

template <int N>
__device__ __forceinline__ void zero_acc(float (&acc)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
}

// Copies ROWS x DP of a strided bf16 matrix into a shared tile (row stride DP + 8); rows >=
// nrows and columns >= D are zero-filled. Whole CTA. vec: 16-byte cp.async (caller commits).
template <int ROWS, int DP>
__device__ __forceinline__ void load_tile(act16* sm, const act16* g, size_t stride, int nrows,
                                          int D, int vec) {
  constexpr int LD = DP + 8, CH = DP / 8;
  if (vec) {
    for (int c = threadIdx.x; c < ROWS * CH; c += kThreads) {
      const int r = c / CH, cc = c % CH;
      act16* dst = sm + r * LD + cc * 8;
      if (r < nrows && cc * 8 < D)
        cp_async16(dst, g + (size_t)r * stride + cc * 8);
      else
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
    }
  } else {
    const act16 zero = f2act(0.0f);
    for (int e = threadIdx.x; e < ROWS * DP; e += kThreads) {
      const int r = e / DP, d = e % DP;
      sm[r * LD + d] = (r < nrows && d < D) ? g[(size_t)r * stride + d] : zero;
    }
  }
}

// Writes a warp's 16 x DP accumulator slice (times mul_lo for row g, mul_hi for row g+8) as
// bf16 into 16 rows of a shared tile.
template <int DP>
__device__ __forceinline__ void stage_acc(act16* sm, const float (&acc)[DP / 8][4], float mul_lo,
                                          float mul_hi, int lane) {
  constexpr int LD = DP + 8;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < DP / 8; ++nt) {
    *reinterpret_cast<uint32_t*>(sm + g * LD + nt * 8 + 2 * t) =
        pack_act16(acc[nt][0] * mul_lo, acc[nt][1] * mul_lo);
    *reinterpret_cast<uint32_t*>(sm + (g + 8) * LD + nt * 8 + 2 * t) =
        pack_act16(acc[nt][2] * mul_hi, acc[nt][3] * mul_hi);
  }
}

// One warp stores 16 staged rows (nrows of them valid, D columns) to a strided matrix.
template <int DP>
__device__ __forceinline__ void store_rows16(const act16* sm, act16* g, size_t stride, int nrows,
                                             int D, int vec, int lane) {
  constexpr int LD = DP + 8, CH = DP / 8;
  if (vec) {
    for (int c = lane; c < 16 * CH; c += 32) {
      const int r = c / CH, cc = c % CH;
      if (r < nrows && cc * 8 < D)
        *reinterpret_cast<uint4*>(g + (size_t)r * stride + cc * 8) =
            *reinterpret_cast<const uint4*>(sm + r * LD + cc * 8);
    }
  } else {
    for (int e = lane; e < 16 * DP; e += 32) {
      const int r = e / DP, d = e % DP;
      if (r < nrows && d < D) g[(size_t)r * stride + d] = sm[r * LD + d];
    }
  }
}

// Scores of a warp's 16 query rows (row0 = row of element c0, row0 + 8 for c2) against keys
// col0 + 0..8*NT-1, turned into log2 units: x = log2(e) * (scale * q.k + bias); masked -> -inf.
// Bias reads clamp the row and column into range instead of branching (fewer registers): a
// clamped column is past Tk and masked; a clamped row is past Tq and never stored.
template <int NT, bool HAS_BIAS>
__device__ __forceinline__ void scores_rows(float (&s)[NT][4], const AttnArgs& a,
                                            const act16* bias, int row0, int col0, int t,
                                            bool need_mask) {
  const act16* brow[2];
  if (HAS_BIAS) {
    brow[0] = bias + (size_t)min(row0, a.Tq - 1) * a.Tk;
    brow[1] = bias + (size_t)min(row0 + 8, a.Tq - 1) * a.Tk;
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + ((e >> 1) << 3);
      const int col = col0 + nt * 8 + 2 * t + (e & 1);
      float x = s[nt][e] * a.scale_log2;
      if (HAS_BIAS) x += act2f(__ldg(brow[e >> 1] + min(col, a.Tk - 1))) * kLog2e;
      if (need_mask && (col >= a.Tk || (a.causal && col > row))) x = -INFINITY;
      s[nt][e] = x;
    }
}

// Number of 64-key tiles a query tile starting at q0 with qrows valid rows must visit.
__device__ __forceinline__ int key_tiles(const AttnArgs& a, int q0, int qrows) {
  int n = (a.Tk + kTile - 1) / kTile;
  if (a.causal) n = min(n, (q0 + qrows - 1) / kTile + 1);
  return n;
}

// ---- forward ----------------------------------------------------------------------------

template <int DP>
constexpr size_t fwd_smem() {
  return (size_t)5 * kTile * (DP + 8) * sizeof(act16);
}

template <int DP, bool HAS_BIAS>
__global__ void __launch_bounds__(kThreads) attn_fwd_kernel(const AttnArgs a) {
  constexpr int BM = kTile, BN = kTile, LD = DP + 8, NT = BN / 8, DT = DP / 8;
  DYNAMIC_SMEM(smem);
  act16* Qs = reinterpret_cast<act16*>(smem);
  act16* Ks = Qs + BM * LD;      // [2][BN][LD]
  act16* Vs = Ks + 2 * BN * LD;  // [2][BN][LD]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * BM, h = blockIdx.y, b = blockIdx.z;
  const int Tq = a.Tq, Tk = a.Tk, C = a.H * a.D;
  const int qrows = min(BM, Tq - q0);
  const size_t hoff = (size_t)h * a.D;
  const act16* kg = a.k + (size_t)b * Tk * a.kv_stride + hoff;
  const act16* vg = a.v + (size_t)b * Tk * a.kv_stride + hoff;
  const act16* bias = a.bias ? a.bias + (size_t)h * Tq * Tk : nullptr;
  const int n_tiles = key_tiles(a, q0, qrows);

  auto load_kv = [&](int it, int stage) {
    const int k0 = it * BN, rows = min(BN, Tk - k0);
    load_tile<BN, DP>(Ks + stage * BN * LD, kg + (size_t)k0 * a.kv_stride, a.kv_stride, rows,
                      a.D, a.vec);
    load_tile<BN, DP>(Vs + stage * BN * LD, vg + (size_t)k0 * a.kv_stride, a.kv_stride, rows,
                      a.D, a.vec);
  };
  load_tile<BM, DP>(Qs, a.q + ((size_t)b * Tq + q0) * a.q_stride + hoff, a.q_stride, qrows, a.D,
                    a.vec);
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  float o[DT][4];
  zero_acc(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row0 = q0 + warp * 16 + g;
  act16* q_warp = Qs + warp * 16 * LD;

  for (int it = 0; it < n_tiles; ++it) {
    if (it + 1 < n_tiles) {
      load_kv(it + 1, (it + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const act16* Kt = Ks + (it & 1) * BN * LD;
    const act16* Vt = Vs + (it & 1) * BN * LD;
    const int k0 = it * BN;

    float s[NT][4];
    zero_acc(s);
    mma_rows_nk<DP / 16, NT, LD>(s, q_warp, Kt, lane);
    const bool need_mask = (k0 + BN > Tk) || (a.causal && k0 + BN - 1 > q0 + warp * 16);
    scores_rows<NT, HAS_BIAS>(s, a, bias, row0, k0, t, need_mask);

    // Online softmax (base 2). Each thread holds 2 rows (g, g+8) x 16 columns; a row's 64
    // columns are spread over the 4 threads of a quad. l stays a per-thread partial sum.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
    float base[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mn = fmaxf(m[r], quad_max(mx[r]));
      base[r] = (mn == -INFINITY) ? 0.0f : mn;  // a row with nothing kept yet stays at 0
      alpha[r] = ex2(m[r] - base[r]);
      m[r] = mn;
    }
    float ls[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = ex2(s[nt][e] - base[e >> 1]);
        s[nt][e] = p;
        ls[e >> 1] += p;
      }
    l[0] = l[0] * alpha[0] + ls[0];
    l[1] = l[1] * alpha[1] + ls[1];
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }
    mma_regs_kn<NT, DP, LD>(o, s, Vt, lane);
    __syncthreads();
  }
  cp_async_wait<0>();
  __syncthreads();  // (n_tiles == 0: the Q copies of other threads must land before staging)

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
  }
  stage_acc<DP>(q_warp, o, inv[0], inv[1], lane);
  __syncwarp();
  store_rows16<DP>(q_warp, a.o + ((size_t)b * Tq + q0 + warp * 16) * C + hoff, C,
                   Tq - q0 - warp * 16, a.D, a.vec, lane);
  if (t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      if (row < Tq)
        a.lse_out[((size_t)b * a.H + h) * Tq + row] =
            l[r] > 0.0f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
    }
  }
}

// ---- backward: D = rowsum(dout * out) ----------------------------------------------------

// One warp per (b, i, h) row of D elements; a fixed shuffle tree, so deterministic.
__global__ void __launch_bounds__(kThreads)
    attn_bwd_rowdot_kernel(float* Dvec, const act16* out, const act16* dout, int B, int Tq, int H,
                           int D) {
  const long rows = (long)B * Tq * H;
  const long r = (long)blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const act16* o = out + (size_t)r * D;  // [B*Tq, H*D] row-major: (b*Tq + i)*H + h = r
  const act16* d = dout + (size_t)r * D;
  float sum = 0.0f;
  for (int c = lane; c < D; c += 32) sum += act2f(o[c]) * act2f(d[c]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) {
    const int h = (int)(r % H);
    const long bi = r / H;
    const int i = (int)(bi % Tq), b = (int)(bi / Tq);
    Dvec[((size_t)b * H + h) * Tq + i] = sum;
  }
}

// ---- backward: dk, dv (key-tile parallel) -------------------------------------------------

template <int DP>
struct DkdvCfg {
  static constexpr int BQ = DP <= 64 ? 64 : 32;  // query rows per inner iteration
  static constexpr size_t smem =
      (size_t)(2 * kTile + 4 * BQ) * (DP + 8) * sizeof(act16) + (size_t)4 * BQ * sizeof(float);
};

template <int DP, bool HAS_BIAS>
__global__ void __launch_bounds__(kThreads) attn_bwd_dkdv_kernel(const AttnArgs a) {
  constexpr int BK = kTile, BQ = DkdvCfg<DP>::BQ, LD = DP + 8, NT = BQ / 8, DT = DP / 8;
  DYNAMIC_SMEM(smem);
  act16* Ks = reinterpret_cast<act16*>(smem);
  act16* Vs = Ks + BK * LD;
  act16* Qs = Vs + BK * LD;       // [2][BQ][LD]
  act16* dOs = Qs + 2 * BQ * LD;  // [2][BQ][LD]
  float* Ls = reinterpret_cast<float*>(dOs + 2 * BQ * LD);  // [2][BQ] lse * log2(e)
  float* Ds = Ls + 2 * BQ;                                  // [2][BQ] D
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int k0 = blockIdx.x * BK, h = blockIdx.y, b = blockIdx.z;
  const int Tq = a.Tq, Tk = a.Tk, C = a.H * a.D;
  const size_t hoff = (size_t)h * a.D;
  const act16* qg = a.q + (size_t)b * Tq * a.q_stride + hoff;
  const act16* dog = a.dout + (size_t)b * Tq * C + hoff;
  const float* lse_b = a.lse + ((size_t)b * a.H + h) * Tq;
  const float* D_b = a.Dvec + ((size_t)b * a.H + h) * Tq;
  const act16* bias = a.bias ? a.bias + (size_t)h * Tq * Tk : nullptr;
  const int krows = min(BK, Tk - k0);

  load_tile<BK, DP>(Ks, a.k + ((size_t)b * Tk + k0) * a.kv_stride + hoff, a.kv_stride, krows,
                    a.D, a.vec);
  load_tile<BK, DP>(Vs, a.v + ((size_t)b * Tk + k0) * a.kv_stride + hoff, a.kv_stride, krows,
                    a.D, a.vec);
  const int it_begin = a.causal ? k0 / BQ : 0;  // first query tile with a row i >= k0
  const int it_end = (Tq + BQ - 1) / BQ;
  auto load_q = [&](int it, int stage) {
    const int qi0 = it * BQ, rows = min(BQ, Tq - qi0);
    load_tile<BQ, DP>(Qs + stage * BQ * LD, qg + (size_t)qi0 * a.q_stride, a.q_stride, rows,
                      a.D, a.vec);
    load_tile<BQ, DP>(dOs + stage * BQ * LD, dog + (size_t)qi0 * C, C, rows, a.D, a.vec);
    for (int r = threadIdx.x; r < BQ; r += kThreads) {
      // Rows past Tq: lse = +inf makes P = 0, so they contribute nothing.
      Ls[stage * BQ + r] = r < rows ? lse_b[qi0 + r] * kLog2e : INFINITY;
      Ds[stage * BQ + r] = r < rows ? D_b[qi0 + r] : 0.0f;
    }
  };
  if (it_begin < it_end) load_q(it_begin, 0);
  cp_async_commit();

  float dk[DT][4], dv[DT][4];
  zero_acc(dk);
  zero_acc(dv);
  const int krow0 = k0 + warp * 16 + g;  // this thread's keys: krow0, krow0 + 8
  act16* k_warp = Ks + warp * 16 * LD;
  act16* v_warp = Vs + warp * 16 * LD;

  for (int it = it_begin; it < it_end; ++it) {
    const int stage = (it - it_begin) & 1;
    if (it + 1 < it_end) {
      load_q(it + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const act16* Qt = Qs + stage * BQ * LD;
    const act16* dOt = dOs + stage * BQ * LD;
    const float* Lt = Ls + stage * BQ;
    const float* Dt = Ds + stage * BQ;
    const int qi0 = it * BQ;

    // S^T = K Q^T: rows = this warp's 16 keys, columns = the BQ queries of the tile.
    float s[NT][4];
    zero_acc(s);
    mma_rows_nk<DP / 16, NT, LD>(s, k_warp, Qt, lane);
    const bool need_mask = a.causal && (qi0 < k0 + warp * 16 + 15);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int krow = krow0 + ((e >> 1) << 3);
        const int ql = nt * 8 + 2 * t + (e & 1);
        const int qcol = qi0 + ql;
        float x = s[nt][e] * a.scale_log2;
        if (HAS_BIAS)  // clamped: out-of-range keys are never stored, queries have P = 0
          x += act2f(__ldg(bias + (size_t)min(qcol, Tq - 1) * Tk + min(krow, Tk - 1))) *
               kLog2e;
        if (need_mask && qcol < krow) x = -INFINITY;
        s[nt][e] = ex2(x - Lt[ql]);  // P^T
      }
    mma_regs_kn<NT, DP, LD>(dv, s, dOt, lane);  // dV += P^T dO

    float dp[NT][4];  // dP^T = V dO^T
    zero_acc(dp);
    mma_rows_nk<DP / 16, NT, LD>(dp, v_warp, dOt, lane);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ql = nt * 8 + 2 * t + (e & 1);
        dp[nt][e] = s[nt][e] * (dp[nt][e] - Dt[ql]);  // dS^T
      }
    mma_regs_kn<NT, DP, LD>(dk, dp, Qt, lane);  // dK += dS^T Q
    __syncthreads();
  }
  cp_async_wait<0>();
  __syncthreads();

  stage_acc<DP>(k_warp, dk, a.scale, a.scale, lane);
  stage_acc<DP>(v_warp, dv, 1.0f, 1.0f, lane);
  __syncwarp();
  const int nrows = Tk - (k0 + warp * 16);
  const size_t grow = (size_t)b * Tk + k0 + warp * 16;
  store_rows16<DP>(k_warp, a.dk + grow * a.kv_stride + hoff, a.kv_stride, nrows, a.D, a.vec,
                   lane);
  store_rows16<DP>(v_warp, a.dv + grow * a.kv_stride + hoff, a.kv_stride, nrows, a.D, a.vec,
                   lane);
}

// ---- backward: dq (and dpos_bias), query-tile parallel ----------------------------------

template <int DP>
struct DqCfg {
  static constexpr int ST = DP <= 112 ? 2 : 1;  // K/V pipeline stages (shared memory <= 100 KB)
  static constexpr size_t smem = (size_t)(2 * kTile + 2 * ST * kTile) * (DP + 8) * sizeof(act16);
};

// BGRAD: one CTA per (query tile, head, batch group) looping over the group's batches in order,
// adding dS into dpos_bias (group 0) or into the group's own partial sum (the first batch
// writes it); otherwise one CTA per (query tile, head, batch). HAS_BIAS: pos_bias is read.
template <int DP, bool HAS_BIAS, bool BGRAD>
__global__ void __launch_bounds__(kThreads) attn_bwd_dq_kernel(const AttnArgs a) {
  constexpr int BM = kTile, BN = kTile, LD = DP + 8, NT = BN / 8, DT = DP / 8;
  constexpr int ST = DqCfg<DP>::ST;
  DYNAMIC_SMEM(smem);
  act16* Qs = reinterpret_cast<act16*>(smem);
  act16* dOs = Qs + BM * LD;
  act16* Ks = dOs + BM * LD;      // [ST][BN][LD]
  act16* Vs = Ks + ST * BN * LD;  // [ST][BN][LD]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * BM, h = blockIdx.y;
  const int Tq = a.Tq, Tk = a.Tk, C = a.H * a.D;
  const int qrows = min(BM, Tq - q0);
  const size_t hoff = (size_t)h * a.D;
  const act16* bias = a.bias ? a.bias + (size_t)h * Tq * Tk : nullptr;
  const int group = BGRAD ? (int)blockIdx.z : 0;
  float* dbias = BGRAD ? (group == 0 ? a.dbias : a.dbias_part + (size_t)(group - 1) * a.H * Tq * Tk) +
                             (size_t)h * Tq * Tk
                       : nullptr;
  const int n_tiles = key_tiles(a, q0, qrows);
  const int row0 = q0 + warp * 16 + g;
  act16* q_warp = Qs + warp * 16 * LD;
  act16* do_warp = dOs + warp * 16 * LD;
  const int b_begin = BGRAD ? group * a.group_batches : (int)blockIdx.z;
  const int b_end = BGRAD ? min(a.B, b_begin + a.group_batches) : (int)blockIdx.z + 1;

  for (int b = b_begin; b < b_end; ++b) {
    __syncthreads();  // the previous batch's readers of the shared tiles are done
    const act16* kg = a.k + (size_t)b * Tk * a.kv_stride + hoff;
    const act16* vg = a.v + (size_t)b * Tk * a.kv_stride + hoff;
    auto load_kv = [&](int it, int stage) {
      const int k0 = it * BN, rows = min(BN, Tk - k0);
      load_tile<BN, DP>(Ks + stage * BN * LD, kg + (size_t)k0 * a.kv_stride, a.kv_stride, rows,
                        a.D, a.vec);
      load_tile<BN, DP>(Vs + stage * BN * LD, vg + (size_t)k0 * a.kv_stride, a.kv_stride, rows,
                        a.D, a.vec);
    };
    load_tile<BM, DP>(Qs, a.q + ((size_t)b * Tq + q0) * a.q_stride + hoff, a.q_stride, qrows,
                      a.D, a.vec);
    load_tile<BM, DP>(dOs, a.dout + ((size_t)b * Tq + q0) * C + hoff, C, qrows, a.D, a.vec);
    if (n_tiles > 0) load_kv(0, 0);
    cp_async_commit();

    float lse2[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      const size_t idx = ((size_t)b * a.H + h) * Tq + row;
      lse2[r] = row < Tq ? a.lse[idx] * kLog2e : INFINITY;
      Dr[r] = row < Tq ? a.Dvec[idx] : 0.0f;
    }
    float dq[DT][4];
    zero_acc(dq);

    for (int it = 0; it < n_tiles; ++it) {
      if (ST == 2) {
        if (it + 1 < n_tiles) {
          load_kv(it + 1, (it + 1) & 1);
          cp_async_commit();
          cp_async_wait<1>();
        } else {
          cp_async_wait<0>();
        }
      } else {
        if (it > 0) {
          load_kv(it, 0);
          cp_async_commit();
        }
        cp_async_wait<0>();
      }
      __syncthreads();
      const int stage = ST == 2 ? (it & 1) : 0;
      const act16* Kt = Ks + stage * BN * LD;
      const act16* Vt = Vs + stage * BN * LD;
      const int k0 = it * BN;

      float s[NT][4];
      zero_acc(s);
      mma_rows_nk<DP / 16, NT, LD>(s, q_warp, Kt, lane);
      const bool need_mask = (k0 + BN > Tk) || (a.causal && k0 + BN - 1 > q0 + warp * 16);
      scores_rows<NT, HAS_BIAS>(s, a, bias, row0, k0, t, need_mask);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = ex2(s[nt][e] - lse2[e >> 1]);  // P

      float dp[NT][4];  // dP = dO V^T
      zero_acc(dp);
      mma_rows_nk<DP / 16, NT, LD>(dp, do_warp, Vt, lane);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nt][e] = s[nt][e] * (dp[nt][e] - Dr[e >> 1]);  // dS

      if (BGRAD) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = row0 + ((e >> 1) << 3);
            const int col = k0 + nt * 8 + 2 * t + (e & 1);
            if (row < Tq && col < Tk && !(a.causal && col > row)) {
              float* d = dbias + (size_t)row * Tk + col;
              *d = (group > 0 && b == b_begin) ? dp[nt][e] : *d + dp[nt][e];
            }
          }
      }
      mma_regs_kn<NT, DP, LD>(dq, dp, Kt, lane);  // dQ += dS K
      __syncthreads();
    }
    cp_async_wait<0>();
    __syncthreads();

    stage_acc<DP>(q_warp, dq, a.scale, a.scale, lane);
    __syncwarp();
    store_rows16<DP>(q_warp, a.dq + ((size_t)b * Tq + q0 + warp * 16) * a.q_stride + hoff,
                     a.q_stride, Tq - q0 - warp * 16, a.D, a.vec, lane);
  }
}

// dpos_bias += the partial sums of batch groups 1..groups-1, in group order, over the entries
// the dq kernel writes (the causal mask's upper triangle is never written, so never read).
__global__ void attn_bias_groups_kernel(float* dbias, const float* part, int groups, int H, int Tq, int Tk,
                                        int causal) {
  const size_t n = (size_t)H * Tq * Tk;
  const size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int row = (int)(e / Tk % Tq), col = (int)(e % Tk);
  if (causal && col > row) return;
  float x = dbias[e];
  for (int g = 1; g < groups; ++g) x += part[(size_t)(g - 1) * n + e];
  dbias[e] = x;
}

// ---- simple (unfused) path ----------------------------------------------------------------

// Block-wide sum or max; every thread gets the same value (fixed order: deterministic).
__device__ float block_reduce(float v, bool is_max, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < nw; ++w) r = is_max ? fmaxf(r, red[w]) : r + red[w];
  __syncthreads();
  return r;
}

__device__ __forceinline__ float dot_act16(const act16* x, const act16* y, int D) {
  float s = 0.0f;
  for (int c = 0; c < D; ++c) s += act2f(x[c]) * act2f(y[c]);
  return s;
}

// One CTA per (b, h, i) row (grid-stride); scores in ws[blockIdx.x * ws_row ..].
__global__ void __launch_bounds__(kThreads)
    attn_simple_fwd_kernel(const AttnArgs a, float* ws, size_t ws_row) {
  __shared__ float red[32];
  float* sc = ws + blockIdx.x * ws_row;
  const long R = (long)a.B * a.H * a.Tq;
  const int C = a.H * a.D;
  for (long r = blockIdx.x; r < R; r += gridDim.x) {
    const int i = (int)(r % a.Tq), h = (int)((r / a.Tq) % a.H), b = (int)(r / ((long)a.Tq * a.H));
    const int nk = (a.causal && i + 1 < a.Tk) ? i + 1 : a.Tk;
    const size_t hoff = (size_t)h * a.D;
    const act16* qi = a.q + ((size_t)b * a.Tq + i) * a.q_stride + hoff;
    const act16* brow = a.bias ? a.bias + ((size_t)h * a.Tq + i) * a.Tk : nullptr;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
      const act16* kj = a.k + ((size_t)b * a.Tk + j) * a.kv_stride + hoff;
      const float x = a.scale * dot_act16(qi, kj, a.D) + (brow ? act2f(brow[j]) : 0.0f);
      sc[j] = x;
      mx = fmaxf(mx, x);
    }
    mx = block_reduce(mx, true, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {  // same thread wrote sc[j]
      const float e = expf(sc[j] - mx);
      sc[j] = e;
      sum += e;
    }
    sum = block_reduce(sum, false, red);  // its barrier also publishes sc
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int c = threadIdx.x; c < a.D; c += blockDim.x) {
      float acc = 0.0f;
      for (int j = 0; j < nk; ++j)
        acc += sc[j] * act2f(a.v[((size_t)b * a.Tk + j) * a.kv_stride + hoff + c]);
      a.o[((size_t)b * a.Tq + i) * C + hoff + c] = f2act(acc * inv);
    }
    if (threadIdx.x == 0)
      a.lse_out[((size_t)b * a.H + h) * a.Tq + i] = sum > 0.0f ? mx + logf(sum) : -INFINITY;
    __syncthreads();
  }
}

// Pass A: one CTA per (h, i) row looping over b in order: dq rows and dpos_bias[h, i, :].
__global__ void __launch_bounds__(kThreads)
    attn_simple_bwd_dq_kernel(const AttnArgs a, float* ws, size_t ws_row) {
  __shared__ float red[32];
  float* ds = ws + blockIdx.x * ws_row;
  const long R = (long)a.H * a.Tq;
  const int C = a.H * a.D;
  for (long r = blockIdx.x; r < R; r += gridDim.x) {
    const int i = (int)(r % a.Tq), h = (int)(r / a.Tq);
    const int nk = (a.causal && i + 1 < a.Tk) ? i + 1 : a.Tk;
    const size_t hoff = (size_t)h * a.D;
    const act16* brow = a.bias ? a.bias + ((size_t)h * a.Tq + i) * a.Tk : nullptr;
    for (int b = 0; b < a.B; ++b) {
      const act16* qi = a.q + ((size_t)b * a.Tq + i) * a.q_stride + hoff;
      const act16* doi = a.dout + ((size_t)b * a.Tq + i) * C + hoff;
      const act16* oi = a.out + ((size_t)b * a.Tq + i) * C + hoff;
      float part = 0.0f;
      for (int c = threadIdx.x; c < a.D; c += blockDim.x)
        part += act2f(doi[c]) * act2f(oi[c]);
      const float Di = block_reduce(part, false, red);
      const float l = a.lse[((size_t)b * a.H + h) * a.Tq + i];
      for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        const act16* kj = a.k + ((size_t)b * a.Tk + j) * a.kv_stride + hoff;
        const act16* vj = a.v + ((size_t)b * a.Tk + j) * a.kv_stride + hoff;
        const float x = a.scale * dot_act16(qi, kj, a.D) + (brow ? act2f(brow[j]) : 0.0f);
        const float p = expf(x - l);
        ds[j] = p * (dot_act16(doi, vj, a.D) - Di);
      }
      __syncthreads();
      for (int c = threadIdx.x; c < a.D; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < nk; ++j)
          acc += ds[j] * act2f(a.k[((size_t)b * a.Tk + j) * a.kv_stride + hoff + c]);
        a.dq[((size_t)b * a.Tq + i) * a.q_stride + hoff + c] = f2act(a.scale * acc);
      }
      if (a.dbias)
        for (int j = threadIdx.x; j < nk; j += blockDim.x)
          a.dbias[((size_t)h * a.Tq + i) * a.Tk + j] += ds[j];
      __syncthreads();
    }
  }
}

// Pass B: one CTA per (b, h, j) key row: dk, dv over queries i in increasing order.
__global__ void __launch_bounds__(kThreads)
    attn_simple_bwd_dkdv_kernel(const AttnArgs a, float* ws, size_t ws_row) {
  float* pb = ws + blockIdx.x * ws_row;  // [0, Tq): P, [Tq, 2Tq): dS
  const long R = (long)a.B * a.H * a.Tk;
  const int C = a.H * a.D;
  for (long r = blockIdx.x; r < R; r += gridDim.x) {
    const int j = (int)(r % a.Tk), h = (int)((r / a.Tk) % a.H), b = (int)(r / ((long)a.Tk * a.H));
    const size_t hoff = (size_t)h * a.D;
    const act16* kj = a.k + ((size_t)b * a.Tk + j) * a.kv_stride + hoff;
    const act16* vj = a.v + ((size_t)b * a.Tk + j) * a.kv_stride + hoff;
    const int i0 = a.causal ? j : 0;
    for (int i = i0 + threadIdx.x; i < a.Tq; i += blockDim.x) {
      const act16* qi = a.q + ((size_t)b * a.Tq + i) * a.q_stride + hoff;
      const act16* doi = a.dout + ((size_t)b * a.Tq + i) * C + hoff;
      const act16* oi = a.out + ((size_t)b * a.Tq + i) * C + hoff;
      const float Di = dot_act16(doi, oi, a.D);
      float x = a.scale * dot_act16(qi, kj, a.D);
      if (a.bias) x += act2f(a.bias[((size_t)h * a.Tq + i) * a.Tk + j]);
      const float p = expf(x - a.lse[((size_t)b * a.H + h) * a.Tq + i]);
      pb[i] = p;
      pb[a.Tq + i] = p * (dot_act16(doi, vj, a.D) - Di);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < a.D; c += blockDim.x) {
      float accv = 0.0f, acck = 0.0f;
      for (int i = i0; i < a.Tq; ++i) {
        accv += pb[i] * act2f(a.dout[((size_t)b * a.Tq + i) * C + hoff + c]);
        acck += pb[a.Tq + i] *
                act2f(a.q[((size_t)b * a.Tq + i) * a.q_stride + hoff + c]);
      }
      const size_t o = ((size_t)b * a.Tk + j) * a.kv_stride + hoff + c;
      a.dk[o] = f2act(a.scale * acck);
      a.dv[o] = f2act(accv);
    }
    __syncthreads();
  }
}

// ---- host side ------------------------------------------------------------------------------

bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

int padded_head_dim(int D) {
  if (D <= 0) return 0;
  if (D > 128) return 0;
  return (D + 15) / 16 * 16;
}

bool force_simple() {
  static int v = -1;
  if (v < 0) {
    const char* e = getenv("FSDP_ATTN");
    v = (e != nullptr && strcmp(e, "simple") == 0) ? 1 : 0;
  }
  return v == 1;
}

AttnArgs make_args(const AttnShape& s) {
  AttnArgs a;
  memset(&a, 0, sizeof a);
  a.B = s.B, a.Tq = s.Tq, a.Tk = s.Tk, a.H = s.H, a.D = s.D;
  a.q_stride = s.q_stride, a.kv_stride = s.kv_stride, a.causal = s.causal ? 1 : 0;
  a.scale = s.scale;
  a.scale_log2 = s.scale * kLog2e;
  return a;
}

// Calls f(std::integral_constant<int, DP>) for the padded head size.
template <class F>
void dispatch_dp(int DP, F&& f) {
  switch (DP) {
    case 16: f(std::integral_constant<int, 16>()); break;
    case 32: f(std::integral_constant<int, 32>()); break;
    case 48: f(std::integral_constant<int, 48>()); break;
    case 64: f(std::integral_constant<int, 64>()); break;
    case 80: f(std::integral_constant<int, 80>()); break;
    case 96: f(std::integral_constant<int, 96>()); break;
    case 112: f(std::integral_constant<int, 112>()); break;
    case 128: f(std::integral_constant<int, 128>()); break;
    default: cuda_fail("attention dispatch", "unsupported padded head size", __FILE__, __LINE__);
  }
}

template <class K>
void set_smem(K kernel, size_t bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// Preallocated device scratch: the kernel scratch of common.cuh when the context has one, else
// the cuBLASLt workspace. Both are only used by work on the compute stream, in stream order.
float* scratch_f32(KernelCtx* ctx, size_t* nfloats) {
  void* p = ctx->scratch ? ctx->scratch : ctx->workspace;
  const size_t bytes = ctx->scratch ? ctx->scratch_bytes : ctx->workspace_bytes;
  *nfloats = p ? bytes / sizeof(float) : 0;
  return static_cast<float*>(p);
}

void simple_forward(KernelCtx* ctx, const AttnArgs& a) {
  size_t wsf;
  float* ws = scratch_f32(ctx, &wsf);
  const size_t row = a.Tk > 0 ? (size_t)a.Tk : 1;
  if (wsf < row)
    cuda_fail("attention simple forward", "scratch smaller than one score row", __FILE__,
              __LINE__);
  const size_t R = (size_t)a.B * a.H * a.Tq;
  size_t grid = wsf / row;
  if (grid > R) grid = R;
  if (grid > 8192) grid = 8192;
  attn_simple_fwd_kernel<<<(unsigned)grid, kThreads, 0, ctx->stream>>>(a, ws, row);
  CUDA_LAUNCH_CHECK();
}

void simple_backward(KernelCtx* ctx, const AttnArgs& a) {
  size_t wsf;
  float* ws = scratch_f32(ctx, &wsf);
  const size_t rowA = a.Tk > 0 ? (size_t)a.Tk : 1, rowB = 2 * (size_t)a.Tq;
  if (wsf < rowA || wsf < rowB)
    cuda_fail("attention simple backward", "scratch smaller than one score row", __FILE__,
              __LINE__);
  if (a.Tq > 0) {
    const size_t R = (size_t)a.H * a.Tq;
    size_t grid = wsf / rowA;
    if (grid > R) grid = R;
    if (grid > 8192) grid = 8192;
    attn_simple_bwd_dq_kernel<<<(unsigned)grid, kThreads, 0, ctx->stream>>>(a, ws, rowA);
    CUDA_LAUNCH_CHECK();
  }
  if (a.Tk > 0) {
    const size_t R = (size_t)a.B * a.H * a.Tk;
    size_t grid = wsf / rowB;
    if (grid > R) grid = R;
    if (grid > 8192) grid = 8192;
    attn_simple_bwd_dkdv_kernel<<<(unsigned)grid, kThreads, 0, ctx->stream>>>(a, ws, rowB);
    CUDA_LAUNCH_CHECK();
  }
}

AttnArgs forward_args(act_t* out, float* lse, const act_t* q, const act_t* k, const act_t* v,
                      const act_t* pos_bias, const AttnShape& s) {
  AttnArgs a = make_args(s);
  a.q = as_act16(q), a.k = as_act16(k), a.v = as_act16(v);
  a.bias = pos_bias ? as_act16(pos_bias) : nullptr;
  a.o = as_act16(out), a.lse_out = lse;
  a.vec = (s.D % 8 == 0 && s.q_stride % 8 == 0 && s.kv_stride % 8 == 0 && aligned16(q) &&
           aligned16(k) && aligned16(v) && aligned16(out))
              ? 1
              : 0;
  return a;
}

AttnArgs backward_args(act_t* dq, act_t* dk, act_t* dv, float* dpos_bias, const act_t* dout,
                       const act_t* out, const float* lse, const act_t* q, const act_t* k,
                       const act_t* v, const act_t* pos_bias, const AttnShape& s) {
  AttnArgs a = make_args(s);
  a.q = as_act16(q), a.k = as_act16(k), a.v = as_act16(v);
  a.bias = pos_bias ? as_act16(pos_bias) : nullptr;
  a.out = as_act16(out), a.dout = as_act16(dout), a.lse = lse;
  a.dq = as_act16(dq), a.dk = as_act16(dk), a.dv = as_act16(dv);
  a.dbias = dpos_bias;
  a.vec = (s.D % 8 == 0 && s.q_stride % 8 == 0 && s.kv_stride % 8 == 0 && aligned16(q) &&
           aligned16(k) && aligned16(v) && aligned16(out) && aligned16(dout) && aligned16(dq) &&
           aligned16(dk) && aligned16(dv))
              ? 1
              : 0;
  return a;
}

}  // namespace

// ---- API ---------------------------------------------------------------------------------

extern "C" void attention_forward_simple(KernelCtx* ctx, act_t* out, float* lse, const act_t* q,
                                         const act_t* k, const act_t* v, const act_t* pos_bias,
                                         AttnShape s) {
  if (s.B <= 0 || s.H <= 0 || s.Tq <= 0 || s.D <= 0) return;
  simple_forward(ctx, forward_args(out, lse, q, k, v, pos_bias, s));
}

extern "C" void attention_backward_simple(KernelCtx* ctx, act_t* dq, act_t* dk, act_t* dv,
                                          float* dpos_bias, const act_t* dout, const act_t* out,
                                          const float* lse, const act_t* q, const act_t* k,
                                          const act_t* v, const act_t* pos_bias, AttnShape s) {
  if (s.B <= 0 || s.H <= 0 || s.D <= 0) return;
  simple_backward(ctx, backward_args(dq, dk, dv, dpos_bias, dout, out, lse, q, k, v, pos_bias, s));
}

extern "C" void attention_forward(KernelCtx* ctx, act_t* out, float* lse, const act_t* q,
                                  const act_t* k, const act_t* v, const act_t* pos_bias,
                                  AttnShape s) {
  if (s.B <= 0 || s.H <= 0 || s.Tq <= 0 || s.D <= 0) return;
  const AttnArgs a = forward_args(out, lse, q, k, v, pos_bias, s);
  const int DP = padded_head_dim(s.D);
  if (DP == 0 || force_simple()) {
    simple_forward(ctx, a);
    return;
  }
  dispatch_dp(DP, [&](auto dpc) {
    constexpr int P = decltype(dpc)::value;
    constexpr size_t smem = fwd_smem<P>();
    const dim3 grid(ceil_div(a.Tq, kTile), a.H, a.B);
    if (a.bias) {
      set_smem(attn_fwd_kernel<P, true>, smem);
      attn_fwd_kernel<P, true><<<grid, kThreads, smem, ctx->stream>>>(a);
    } else {
      set_smem(attn_fwd_kernel<P, false>, smem);
      attn_fwd_kernel<P, false><<<grid, kThreads, smem, ctx->stream>>>(a);
    }
    CUDA_LAUNCH_CHECK();
  });
}

extern "C" void attention_backward(KernelCtx* ctx, act_t* dq, act_t* dk, act_t* dv,
                                   float* dpos_bias, const act_t* dout, const act_t* out,
                                   const float* lse, const act_t* q, const act_t* k,
                                   const act_t* v, const act_t* pos_bias, AttnShape s) {
  if (s.B <= 0 || s.H <= 0 || s.D <= 0) return;
  const AttnArgs a0 = backward_args(dq, dk, dv, dpos_bias, dout, out, lse, q, k, v, pos_bias, s);
  const int DP = padded_head_dim(s.D);
  size_t wsf;
  float* ws = scratch_f32(ctx, &wsf);
  const size_t per_batch = (size_t)s.H * (s.Tq > 0 ? s.Tq : 1);  // floats of D per batch
  // (A bias gradient without a bias, never used by the models, also takes the simple path.)
  if (DP == 0 || force_simple() || wsf < per_batch || (dpos_bias && !pos_bias)) {
    simple_backward(ctx, a0);
    return;
  }
  // With dpos_bias, G batch groups: the largest G up to kBiasGradCtas CTAs whose G - 1 partial
  // sums fit in the workspace beside one batch's D vector per group.
  const size_t htt = (size_t)s.H * s.Tq * s.Tk;
  int G = 1;
  if (dpos_bias && s.Tq > 0 && s.Tk > 0) {
    const int ctas = (int)ceil_div(s.Tq, kTile) * s.H, wanted = (int)ceil_div(kBiasGradCtas, ctas);
    G = wanted < s.B ? wanted : s.B;
    while (G > 1 && (size_t)(G - 1) * htt + (size_t)G * per_batch > wsf) --G;
  }
  float* part = ws;                              // [G-1][H][Tq][Tk]
  float* dvec = ws + (size_t)(G - 1) * htt;      // the chunk's D vectors
  const size_t dvec_floats = wsf - (size_t)(G - 1) * htt;
  // Batches per chunk: the D vector of a chunk must fit in the workspace. Chunks run in
  // increasing b, and so do the groups inside a chunk.
  const int nb = (int)(dvec_floats / per_batch < (size_t)s.B ? dvec_floats / per_batch : (size_t)s.B);
  const int C = s.H * s.D;
  dispatch_dp(DP, [&](auto dpc) {
    constexpr int P = decltype(dpc)::value;
    constexpr size_t smem_kv = DkdvCfg<P>::smem, smem_q = DqCfg<P>::smem;
    const bool bias = a0.bias != nullptr, bgrad = a0.dbias != nullptr;
    if (bias) {
      set_smem(attn_bwd_dkdv_kernel<P, true>, smem_kv);
      if (bgrad) set_smem(attn_bwd_dq_kernel<P, true, true>, smem_q);
      else set_smem(attn_bwd_dq_kernel<P, true, false>, smem_q);
    } else {
      set_smem(attn_bwd_dkdv_kernel<P, false>, smem_kv);
      set_smem(attn_bwd_dq_kernel<P, false, false>, smem_q);
    }
    for (int b0 = 0; b0 < s.B; b0 += nb) {
      AttnArgs a = a0;
      a.B = s.B - b0 < nb ? s.B - b0 : nb;
      const size_t qoff = (size_t)b0 * s.Tq * s.q_stride, kvoff = (size_t)b0 * s.Tk * s.kv_stride;
      const size_t ooff = (size_t)b0 * s.Tq * C, loff = (size_t)b0 * s.H * s.Tq;
      a.q += qoff, a.dq += qoff;
      a.k += kvoff, a.v += kvoff, a.dk += kvoff, a.dv += kvoff;
      a.out += ooff, a.dout += ooff;
      a.lse += loff;
      a.Dvec = dvec;
      // This chunk's groups: as many as it has batches, up to G, of equal size but the last.
      a.group_batches = (int)ceil_div(a.B, G < a.B ? G : a.B);
      const int groups = (int)ceil_div(a.B, a.group_batches);
      a.dbias_part = part;
      if (s.Tq > 0) {
        const long rows = (long)a.B * s.Tq * s.H;
        attn_bwd_rowdot_kernel<<<ceil_div(rows, kThreads / 32), kThreads, 0, ctx->stream>>>(
            dvec, a.out, a.dout, a.B, s.Tq, s.H, s.D);
        CUDA_LAUNCH_CHECK();
      }
      if (s.Tk > 0) {
        const dim3 grid(ceil_div(s.Tk, kTile), s.H, a.B);
        if (bias) attn_bwd_dkdv_kernel<P, true><<<grid, kThreads, smem_kv, ctx->stream>>>(a);
        else attn_bwd_dkdv_kernel<P, false><<<grid, kThreads, smem_kv, ctx->stream>>>(a);
        CUDA_LAUNCH_CHECK();
      }
      if (s.Tq > 0) {
        const dim3 grid(ceil_div(s.Tq, kTile), s.H, bgrad ? groups : a.B);  // bgrad: CTA loops b
        if (bgrad) attn_bwd_dq_kernel<P, true, true><<<grid, kThreads, smem_q, ctx->stream>>>(a);
        else if (bias)
          attn_bwd_dq_kernel<P, true, false><<<grid, kThreads, smem_q, ctx->stream>>>(a);
        else attn_bwd_dq_kernel<P, false, false><<<grid, kThreads, smem_q, ctx->stream>>>(a);
        CUDA_LAUNCH_CHECK();
        if (bgrad && groups > 1) {
          attn_bias_groups_kernel<<<ceil_div(htt, 256), 256, 0, ctx->stream>>>(a.dbias, part, groups, s.H, s.Tq,
                                                                               s.Tk, s.causal ? 1 : 0);
          CUDA_LAUNCH_CHECK();
        }
      }
    }
  });
}
