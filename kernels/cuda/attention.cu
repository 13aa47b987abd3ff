// attention.cu: fused multi-head attention (forward and backward) on tensor cores, 16-bit in,
// fp32 accumulation, with T5's relative position bias computed inside the kernels, plus an
// unfused deterministic path used as a test oracle and fallback.
//
// Semantics are those of kernels/cpu/attention.c (see kernels.h, AttnShape, AttnBias): scores =
// scale * q.k + table[bucket(j - i), h], causal keeps key j iff j <= i (top-left aligned, also
// for Tq != Tk), lse[B,H,Tq] is the natural-log log-sum-exp of the kept scores, dq/dk/dv are
// overwritten in their own columns only, dtable[buckets, H] accumulates the bias gradient.
// Grouped-query attention (Llama): query head h reads key/value head h / group (AttnArgs.group
// = H / KV); the backward's CTA of a key tile takes the group's query heads one after another,
// so a shared head's dK and dV sum them in increasing head in its registers (no scratch).
//
// Algorithm: FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with Better
// Parallelism and Work Partitioning"): Algorithm 1 for the forward, Algorithm 2 for the
// backward, section 3.2-3.3 for the partitioning. The Tq x Tk score matrix never goes to memory.
//
// Tensor cores: mma.sync.m16n8k16 (fp32 accumulate) and ldmatrix (kernels/cuda/ptx.cuh). The
// fp32 accumulators of two neighbouring n8 tiles are, element for element, the A fragment of the
// next k16 step, so P = softmax(S) (and dS) feed the next product straight from registers.
//
// Head size: one template per padded size DP in {16,32,...,128}; columns D..DP-1 of every shared
// tile are zero-filled, so they add nothing. D > 128 goes to the simple path. Loads are 16-byte
// cp.async when every pointer is 16-byte aligned and D and the row strides are multiples of 8,
// else element-wise (same kernel, uniform branch). Shared tiles are row-major with a row stride
// of DP + 8 elements (16 bytes of padding: the 8 rows an ldmatrix reads land in distinct banks).
//
// Forward (FA2 section 3.3, "work partitioning between warps"): CTA = (128 query rows, head,
//   batch), 4 warps of 32 rows. A warp's 32 rows are two m16 tiles, so every K or V fragment an
//   ldmatrix brings feeds two mma (half the shared-memory bytes per mma of 16-row warps). At
//   DP <= 64 the warp's Q fragments are loaded once and stay in registers for the whole key
//   loop, and a key tile is 128 keys (64 above). K and V tiles go through a FwdCfg::STAGES-deep
//   cp.async pipeline: tile j+1 is in flight while tile j computes, one cp.async wait and one
//   barrier per tile. Inside a tile the online softmax runs in steps of 64 keys (32 above
//   DP = 64), which bounds the score registers, in base 2 on raw scores: the running max is
//   kept on q.k (or on scale * q.k + bias), and each probability is one FFMA and one ex2,
//   exp2(x * c - m * c), so the scale costs no separate multiply. The causal mask and the Tk
//   edge are applied only on the steps that cross them (a warp-uniform branch), and a warp
//   stops at the step past its last row. The grid is (heads, batches, query tiles) with the
//   last query tile first, so the longest causal tiles of every (batch, head) start first.
// Backward (FA2 Algorithm 2, its 5 products per tile: S = Q K^T, dV += P^T dO, dP = dO V^T,
//   dK += dS^T Q, dQ += dS K): CTA = (128 keys, head, batch), 8 warps of 16 keys, looping over
//   query tiles of 64 rows from the last down to the diagonal (Q, dO, and lse and D =
//   rowsum(dO * O) by 4-byte cp.async, two-stage pipelined). Each warp holds S^T, P^T, dP^T and
//   dS^T of its keys in registers (in two sub-tiles of 32 queries above DP = 64); dV and dK
//   accumulate in registers and are written once. dS^T goes to shared memory (16 bits) for the
//   dQ product, where warp w takes 16 query rows (w % 4) and half the columns (w / 4) over all
//   128 keys.
//   dQ is deterministic without floating-point atomics: the key-tile CTAs of a (batch, head) add
//   their dQ of a query tile into fp32 partial sums (the kernel scratch, each warp's slice in its
//   accumulators' order, one 16-byte load or store per accumulator tile) one after another, in
//   increasing key tile order: key tile 0 stores, key tile j adds once j tiles have, the last
//   (the diagonal's, or the last key tile) writes dq itself in 16 bits. The order of every sum
//   depends on the shape only: the same bits on every run and GPU. A query tile's flag counts
//   the key tiles that have added; a CTA counts its turn (red.release, one thread after the
//   __syncthreads that follows every warp's adds: no __threadfence) at the start of its next
//   tile, and each warp loads the flag (ld.acquire) at the start of a tile and checks it only
//   before its adds, waiting then if it must; the partial sums of (at most) two column groups are
//   loaded at once before their product, which hides their latency.
//   Work is handed out by a ticket counter taken at block start (as CUB's decoupled look-back
//   does): ticket n is key tile n / P of pair n % P (P pairs of a launch), so every CTA a wait is
//   for took a lower ticket and has started, whatever order the GPU starts blocks in: the waits
//   cannot deadlock. All pairs' key tile 0 (in a causal attention the longest) go first, and
//   since every CTA visits the last query tile first, a CTA that starts with its predecessors
//   trails them by one tile's adds, once.
// Position bias (T5): bucket(r) does not change beyond |r| >= max_distance, so a CTA keeps the
//   bias of head h for r clamped to [-M, M] (M = max_distance) in shared memory, 2M + 1 floats,
//   computed from the table at its start. Its gradient: each thread first sums its dS^T values
//   that share a relative position (they lie on the tile's diagonals), stages the sums in
//   shared memory, and one thread per diagonal of the tile adds them in a fixed order into the
//   CTA's per-position sums (|r| < M) or its own running sums of the two far ends; at the end
//   the CTA writes its 2M + 1 sums to the scratch, and attn_bias_grad_kernel adds them per
//   (position, head) over (batch, key tile) in order, then per bucket over positions in order,
//   into dtable. No [H, Tq, Tk] tensor anywhere.
// Launch attributes (opt-in shared memory) are set once, by attention_init at kernels_init.
//
// Simple path (static kernels below, also callable as attention_forward_simple /
// attention_backward_simple, and forced for every call with the environment variable
// FSDP_ATTN=simple, see attention_mode): one CTA per score row, scores materialized in fp32 in
// the scratch. Every value is summed by one thread in index order (or a fixed block-reduction
// tree), so it is deterministic.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "kernels/attention_tiles.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ptx.cuh"
#include "kernels/position_bucket.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kThreads = 128;     // the forward and the simple path's kernels: 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kBwdThreads = 32 * ATTN_BWD_WARPS;  // the backward's: 8 warps (BwdCfg)
constexpr int kBwdWarps = kBwdThreads / 32;
// The fused kernels keep the bias per clamped relative position in shared memory: at most
// 2 * kMaxBiasDistance + 1 floats (T5 uses 128); a larger max_distance takes the simple path.
constexpr int kMaxBiasDistance = 1024;
constexpr int kMaxBuckets = 256;

struct AttnArgs {
  const act16* q;
  const act16* k;
  const act16* v;
  const act16* out;   // backward: forward output, [B*Tq, H*D]
  const act16* dout;  // backward: [B*Tq, H*D]
  const float* lse;   // backward: [B, H, Tq]
  const float* Dvec;  // backward: rowsum(dout*out), [B, H, Tq]
  act16* o;           // forward output
  float* lse_out;     // forward lse
  act16* dq;
  act16* dk;
  act16* dv;
  // Position bias: table [nbuckets, H] (NULL: none); dtable [nbuckets, H] accumulates.
  const act16* table;
  float* dtable;
  int nbuckets, maxdist, bidir;
  // Backward work buffers (kernel scratch), for the heads h0 .. h0 + Hc - 1 of a launch: the dq
  // partial sums [B][Hc][query tiles][warps][BwdCfg::SLOT] fp32 (each warp's slice of a query
  // tile in its fragment order), the dQ flags [B][Hc][query tiles], the ticket counter, and
  // the bias gradient per CTA [B][Hc][key tiles][2M + 1].
  float* dq_acc;
  int* dq_flag;
  unsigned int* ticket;
  float* bias_part;
  int h0, Hc;
  int B, Tq, Tk, H, D, q_stride, kv_stride, causal, vec;
  int group;  // query heads per key/value head (1: no grouping)
  float scale, scale_log2;
};

// ---- register helpers ------------------------------------------------------------------

// Two floats rounded to 16 bits in one b32 register, lo in the lower half (an mma A fragment).
// Built from the bit patterns, not by punning a __nv_bfloat162 (strict aliasing).
__device__ __forceinline__ uint32_t pack_act16(float lo, float hi) {
  return (uint32_t)act16_bits(f2act(lo)) | ((uint32_t)act16_bits(f2act(hi)) << 16);
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
template <int N>
__device__ __forceinline__ void zero_acc(float (&acc)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
}

// ---- fragment loads (ldmatrix addressing of an m16n8k16 operand) -----------------------

// A fragment of 16 rows x 16 columns of a row-major tile (row stride LD): rows r0.., cols c0..
template <int LD>
__device__ __forceinline__ void load_a(uint32_t (&af)[4], const act16* tile, int r0, int c0, int lane) {
  ldsm_x4(af, tile + (r0 + (lane & 15)) * LD + c0 + (lane >> 4) * 8);
}
// A fragment whose 16 x 16 block is stored transposed (k-major: row = k, column = m).
template <int LD>
__device__ __forceinline__ void load_a_t(uint32_t (&af)[4], const act16* tile, int k0, int m0, int lane) {
  ldsm_x4_t(af, tile + (k0 + (lane & 7) + ((lane >> 4) << 3)) * LD + m0 + ((lane >> 3) & 1) * 8);
}
// B fragments of two n8 tiles (16 n rows, 16 k columns) of an [n][k] row-major tile (the "q.k"
// form): bf[0..1] for rows n0..n0+7, bf[2..3] for n0+8..n0+15.
template <int LD>
__device__ __forceinline__ void load_b_nk(uint32_t (&bf)[4], const act16* tile, int n0, int k0, int lane) {
  ldsm_x4(bf, tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * LD + k0 + ((lane >> 3) & 1) * 8);
}
// B fragments of two n8 tiles of a [k][n] row-major tile (the "P V" form), k0.., n0..n0+15.
template <int LD>
__device__ __forceinline__ void load_b_kn(uint32_t (&bf)[4], const act16* tile, int k0, int n0, int lane) {
  ldsm_x4_t(bf, tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8);
}

// acc[16 x 8*NT] += A[16 x 16*KS] * B^T with A's fragments in registers (af[KS][4]) and B an
// [n][k] row-major shared tile of 8*NT rows: S = Q K^T, dP = dO V^T and their transposes.
template <int KS, int NT, int LD>
__device__ __forceinline__ void mma_frags_nk(float (&acc)[NT][4], const uint32_t (&af)[KS][4], const act16* b_nk,
                                             int lane) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bf[4];
      load_b_nk<LD>(bf, b_nk, np * 16, kk * 16, lane);
      mma_act16(acc[2 * np], af[kk], bf[0], bf[1]);
      mma_act16(acc[2 * np + 1], af[kk], bf[2], bf[3]);
    }
}

// The same product for a warp's 16 rows of A: from its fragments in registers (AREG: af[KS]), or
// loaded from a [rows][k] row-major shared tile at row a_row0 (af unused).
template <bool AREG, int KS, int NT, int LD>
__device__ __forceinline__ void mma_warp_nk(float (&acc)[NT][4], const uint32_t (&af)[AREG ? KS : 1][4],
                                            const act16* a_tile, int a_row0, const act16* b_nk, int lane) {
  if constexpr (AREG) {
    mma_frags_nk<KS, NT, LD>(acc, af, b_nk, lane);
  } else {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      uint32_t a1[1][4];
      load_a<LD>(a1[0], a_tile, a_row0, kk * 16, lane);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bf[4];
        load_b_nk<LD>(bf, b_nk, np * 16, kk * 16, lane);
        mma_act16(acc[2 * np], a1[0], bf[0], bf[1]);
        mma_act16(acc[2 * np + 1], a1[0], bf[2], bf[3]);
      }
    }
  }
}

// acc[16 x DP] += P[16 x 8*NP] * B, P as fp32 accumulators (rounded to 16-bit A fragments in
// registers), B a [k][n] row-major shared tile of 8*NP rows: dV += P^T dO, dK += dS^T Q.
template <int NP, int DP, int LD>
__device__ __forceinline__ void mma_regs_kn(float (&acc)[DP / 8][4], const float (&p)[NP][4], const act16* b_kn,
                                            int lane) {
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
      load_b_kn<LD>(bf, b_kn, kk * 16, dp * 16, lane);
      mma_act16(acc[2 * dp], af, bf[0], bf[1]);
      mma_act16(acc[2 * dp + 1], af, bf[2], bf[3]);
    }
  }
}

// ---- shared tiles ------------------------------------------------------------------------

// Copies ROWS x DP of a strided 16-bit matrix into a shared tile (row stride DP + 8); rows >=
// nrows and columns >= D are zero-filled. Whole CTA of NTH threads. vec: 16-byte cp.async
// (caller commits).
template <int ROWS, int DP, int NTH>
__device__ __forceinline__ void load_tile(act16* sm, const act16* g, size_t stride, int nrows, int D, int vec) {
  constexpr int LD = DP + 8, CH = DP / 8;
  if (vec) {
    for (int c = threadIdx.x; c < ROWS * CH; c += NTH) {
      const int r = c / CH, cc = c % CH;
      act16* dst = sm + r * LD + cc * 8;
      if (r < nrows && cc * 8 < D)
        cp_async16(dst, g + (size_t)r * stride + cc * 8);
      else
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
    }
  } else {
    const act16 zero = f2act(0.0f);
    for (int e = threadIdx.x; e < ROWS * DP; e += NTH) {
      const int r = e / DP, d = e % DP;
      sm[r * LD + d] = (r < nrows && d < D) ? g[(size_t)r * stride + d] : zero;
    }
  }
}

// Writes a warp's 16 x DP accumulator slice times mul as 16-bit values into 16 rows of a shared
// tile (row stride DP + 8).
template <int DP>
__device__ __forceinline__ void stage_acc(act16* sm, const float (&acc)[DP / 8][4], float mul_lo, float mul_hi,
                                          int lane) {
  constexpr int LD = DP + 8;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < DP / 8; ++nt) {
    *reinterpret_cast<uint32_t*>(sm + g * LD + nt * 8 + 2 * t) = pack_act16(acc[nt][0] * mul_lo, acc[nt][1] * mul_lo);
    *reinterpret_cast<uint32_t*>(sm + (g + 8) * LD + nt * 8 + 2 * t) =
        pack_act16(acc[nt][2] * mul_hi, acc[nt][3] * mul_hi);
  }
}

// One warp stores ROWS staged rows (nrows of them valid, D columns) to a strided matrix.
template <int ROWS, int DP>
__device__ __forceinline__ void store_rows(const act16* sm, act16* g, size_t stride, int nrows, int D, int vec,
                                           int lane) {
  constexpr int LD = DP + 8, CH = DP / 8;
  if (vec) {
    for (int c = lane; c < ROWS * CH; c += 32) {
      const int r = c / CH, cc = c % CH;
      if (r < nrows && cc * 8 < D)
        *reinterpret_cast<uint4*>(g + (size_t)r * stride + cc * 8) = *reinterpret_cast<const uint4*>(sm + r * LD + cc * 8);
    }
  } else {
    for (int e = lane; e < ROWS * DP; e += 32) {
      const int r = e / DP, d = e % DP;
      if (r < nrows && d < D) g[(size_t)r * stride + d] = sm[r * LD + d];
    }
  }
}

// ---- position bias ----------------------------------------------------------------------

// pb[r + M] = the bias of head h at relative position r = j - i, for r in [-M, M], M =
// max_distance (beyond it the bucket no longer changes: position_bucket.h). Whole CTA of NTH
// threads; visible after the next barrier.
template <int NTH>
__device__ __forceinline__ void fill_bias(float* pb, const AttnArgs& a, int h) {
  const int M = a.maxdist;
  for (int s = threadIdx.x; s <= 2 * M; s += NTH)
    pb[s] = act2f(a.table[(size_t)position_bucket(s - M, a.bidir, a.nbuckets, M) * a.H + h]);
}
// Index into pb (and the gradient's per-position sums) of relative position r.
__device__ __forceinline__ int bias_slot(int r, int M) { return min(max(r, -M), M) + M; }

// ---- forward ----------------------------------------------------------------------------

template <int DP>
struct FwdCfg {
  static constexpr int BM = ATTN_FWD_ROWS;                // 4 warps x 32 query rows
  static constexpr int MT = ATTN_FWD_WARP_ROWS / 16;      // m16 tiles per warp
  static constexpr int BN = ATTN_FWD_KEYS(DP);            // keys per tile (one pipeline stage)
  static constexpr int SUB = ATTN_FWD_STEP(DP);           // keys per softmax step (S in registers)
  static constexpr int STAGES = 2;                  // K/V tiles in flight
  static constexpr bool QREG = DP <= 64;            // Q fragments in registers for the whole loop
  static constexpr int LD = DP + 8;
  static constexpr size_t tiles = (size_t)(BM + 2 * STAGES * BN) * LD * sizeof(act16);
};

// One query tile of 128 rows against every key it may see. HAS_BIAS: T5's position bias.
template <int DP, bool HAS_BIAS>
__global__ void __launch_bounds__(kThreads) attn_fwd_kernel(const AttnArgs a) {
  using Cfg = FwdCfg<DP>;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, SUB = Cfg::SUB, MT = Cfg::MT, ST = Cfg::STAGES, LD = Cfg::LD;
  constexpr int NS = SUB / 8, DT = DP / 8, KS = DP / 16;
  constexpr bool QREG = Cfg::QREG;
  DYNAMIC_SMEM(smem);
  act16* Qs = reinterpret_cast<act16*>(smem);  // [BM][LD]; the output is staged here at the end
  act16* Ks = Qs + BM * LD;                    // [ST][BN][LD]
  act16* Vs = Ks + ST * BN * LD;               // [ST][BN][LD]
  float* pb = reinterpret_cast<float*>(Vs + ST * BN * LD);  // HAS_BIAS: [2M + 1]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int Tq = a.Tq, Tk = a.Tk, C = a.H * a.D, M = a.maxdist;
  // Grid (heads, batches, query tiles), the last query tile at blockIdx.z = 0: the longest causal
  // tiles of every (batch, head) pair start first (GPUs start blocks in about index order, x
  // fastest; the order is for speed only).
  const int q0 = (int)(gridDim.z - 1 - blockIdx.z) * BM, h = blockIdx.x, b = blockIdx.y;
  const int qrows = min(BM, Tq - q0);
  const int wrow0 = q0 + warp * 32;  // the warp's first query row
  // A position bias never comes with grouped heads (fused_ok): the bias kernels keep h itself.
  const size_t hoff = (size_t)h * a.D, kvoff = (size_t)(HAS_BIAS ? h : h / a.group) * a.D;
  const act16* kg = a.k + (size_t)b * Tk * a.kv_stride + kvoff;
  const act16* vg = a.v + (size_t)b * Tk * a.kv_stride + kvoff;
  int n_tiles = (Tk + BN - 1) / BN;
  if (a.causal) n_tiles = min(n_tiles, (q0 + qrows - 1) / BN + 1);

  auto load_kv = [&](int it) {
    const int k0 = it * BN, rows = min(BN, Tk - k0), stage = it % ST;
    load_tile<BN, DP, kThreads>(Ks + stage * BN * LD, kg + (size_t)k0 * a.kv_stride, a.kv_stride, rows, a.D, a.vec);
    load_tile<BN, DP, kThreads>(Vs + stage * BN * LD, vg + (size_t)k0 * a.kv_stride, a.kv_stride, rows, a.D, a.vec);
  };
  // Prologue: Q and the first ST - 1 key tiles, one commit group each (Q joins the first).
  load_tile<BM, DP, kThreads>(Qs, a.q + ((size_t)b * Tq + q0) * a.q_stride + hoff, a.q_stride, qrows, a.D, a.vec);
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    if (s < n_tiles) load_kv(s);
    cp_async_commit();
  }
  if (HAS_BIAS) fill_bias<kThreads>(pb, a, h);
  cp_async_wait<ST - 2>();  // Q and key tile 0
  __syncthreads();

  uint32_t qf[QREG ? MT : 1][KS][4];  // the warp's Q fragments (QREG)
  if constexpr (QREG) {
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) load_a<LD>(qf[mi][kk], Qs, warp * 32 + mi * 16, kk * 16, lane);
  }
  // x: the score in units where max and exp are taken: q.k (no bias, scale > 0) or
  // scale * q.k + bias; p = exp2(x * xl2 - m * xl2).
  const float xl2 = HAS_BIAS ? kLog2e : a.scale_log2;
  float o[MT][DT][4];
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) zero_acc(o[mi]);
  float m[MT][2], l[MT][2];  // per row (mi, g / g + 8): running max of x, this thread's partial sum
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) m[mi][0] = m[mi][1] = -INFINITY, l[mi][0] = l[mi][1] = 0.0f;

  for (int it = 0; it < n_tiles; ++it) {
    if (it > 0) {
      cp_async_wait<ST - 2>();  // key tile it has landed (this thread's copies)
      __syncthreads();          // ... everyone's; and every warp is done with tile it - 1
    }
    if (it + ST - 1 < n_tiles) load_kv(it + ST - 1);  // into the stage tile it - 1 used
    cp_async_commit();
    const act16* Kt = Ks + (it % ST) * BN * LD;
    const act16* Vt = Vs + (it % ST) * BN * LD;
#pragma unroll 1
    for (int sb = 0; sb < BN / SUB; ++sb) {
      const int c0 = it * BN + sb * SUB;  // the sub-block's first key
      if (a.causal && c0 > wrow0 + 31) break;  // causal: every key from here is past the warp's rows

      // S = Q K^T, 32 x SUB per warp: each K fragment feeds both m16 tiles.
      float s[MT][NS][4];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) zero_acc(s[mi]);
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        uint32_t af[MT][4];
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
          if constexpr (QREG) {
#pragma unroll
            for (int e = 0; e < 4; ++e) af[mi][e] = qf[mi][kk][e];
          } else {
            load_a<LD>(af[mi], Qs, warp * 32 + mi * 16, kk * 16, lane);
          }
        }
#pragma unroll
        for (int np = 0; np < NS / 2; ++np) {
          uint32_t bf[4];
          load_b_nk<LD>(bf, Kt, sb * SUB + np * 16, kk * 16, lane);
#pragma unroll
          for (int mi = 0; mi < MT; ++mi) {
            mma_act16(s[mi][2 * np], af[mi], bf[0], bf[1]);
            mma_act16(s[mi][2 * np + 1], af[mi], bf[2], bf[3]);
          }
        }
      }
      // Element (mi, nt, e) of this thread: row wrow0 + 16 mi + 8 (e >> 1) + g, key c0 + 8 nt +
      // 2 t + (e & 1), so its relative position is c0 - wrow0 + 2t - g + (e & 1) + 8 u with
      // u = nt - 2 mi - (e >> 1): one bias load per (u, e & 1), shared by up to four elements.
      if (HAS_BIAS) {
        const int base = c0 - wrow0 + 2 * t - g;
#pragma unroll
        for (int u = -(2 * MT - 1); u < NS; ++u)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float bias = pb[bias_slot(base + c + 8 * u, M)];
#pragma unroll
            for (int mi = 0; mi < MT; ++mi)
#pragma unroll
              for (int rr = 0; rr < 2; ++rr) {
                const int nt = u + 2 * mi + rr;
                if (nt >= 0 && nt < NS) s[mi][nt][2 * rr + c] = fmaf(s[mi][nt][2 * rr + c], a.scale, bias);
              }
          }
      }
      // Masks only where the sub-block crosses the diagonal or the end of the keys (warp-uniform).
      if (c0 + SUB > Tk || (a.causal && c0 + SUB - 1 > wrow0)) {
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
          for (int nt = 0; nt < NS; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int row = wrow0 + mi * 16 + (e >> 1) * 8 + g, col = c0 + nt * 8 + 2 * t + (e & 1);
              if (col >= Tk || (a.causal && col > row)) s[mi][nt][e] = -INFINITY;
            }
      }

      // Online softmax (base 2). A row's SUB columns are spread over the 4 threads of a quad; l
      // stays a per-thread partial sum until the end.
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < NS; ++nt) mx = fmaxf(mx, fmaxf(s[mi][nt][2 * r], s[mi][nt][2 * r + 1]));
          const float mn = fmaxf(m[mi][r], quad_max(mx));
          const float base = mn == -INFINITY ? 0.0f : mn * xl2;  // a row with nothing kept yet stays at 0
          const float alpha = ex2(fmaf(m[mi][r], xl2, -base));
          m[mi][r] = mn;
          float ls = 0.0f;
#pragma unroll
          for (int nt = 0; nt < NS; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const float p = ex2(fmaf(s[mi][nt][2 * r + c], xl2, -base));
              s[mi][nt][2 * r + c] = p;
              ls += p;
            }
          l[mi][r] = fmaf(l[mi][r], alpha, ls);
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) o[mi][dt][2 * r] *= alpha, o[mi][dt][2 * r + 1] *= alpha;
        }

      // O += P V: each V fragment feeds both m16 tiles.
#pragma unroll
      for (int kk = 0; kk < NS / 2; ++kk) {
        uint32_t af[MT][4];
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
          af[mi][0] = pack_act16(s[mi][2 * kk][0], s[mi][2 * kk][1]);
          af[mi][1] = pack_act16(s[mi][2 * kk][2], s[mi][2 * kk][3]);
          af[mi][2] = pack_act16(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
          af[mi][3] = pack_act16(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < DP / 16; ++dp) {
          uint32_t bf[4];
          load_b_kn<LD>(bf, Vt, sb * SUB + kk * 16, dp * 16, lane);
#pragma unroll
          for (int mi = 0; mi < MT; ++mi) {
            mma_act16(o[mi][2 * dp], af[mi], bf[0], bf[1]);
            mma_act16(o[mi][2 * dp + 1], af[mi], bf[2], bf[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();  // the last (empty) groups
  __syncthreads();     // every warp's reads of Q are done before rows are staged over them

  act16* o_warp = Qs + warp * 32 * LD;
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[mi][r] = quad_sum(l[mi][r]);
      inv[r] = l[mi][r] > 0.0f ? 1.0f / l[mi][r] : 0.0f;
    }
    stage_acc<DP>(o_warp + mi * 16 * LD, o[mi], inv[0], inv[1], lane);
    if (t == 0)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = wrow0 + mi * 16 + r * 8 + g;
        if (row < Tq)
          a.lse_out[((size_t)b * a.H + h) * Tq + row] = l[mi][r] > 0.0f ? (m[mi][r] * xl2 + log2f(l[mi][r])) * kLn2 : -INFINITY;
      }
  }
  __syncwarp();
  store_rows<32, DP>(o_warp, a.o + ((size_t)b * Tq + wrow0) * C + hoff, C, Tq - wrow0, a.D, a.vec, lane);
}

// ---- backward: D = rowsum(dout * out) ----------------------------------------------------

// One warp per (b, i, h) row of D <= 128 elements; a fixed shuffle tree, so deterministic.
__global__ void __launch_bounds__(kThreads)
    attn_bwd_rowdot_kernel(float* Dvec, const act16* out, const act16* dout, int B, int Tq, int H, int D) {
  const long rows = (long)B * Tq * H;
  const long r = (long)blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  const act16* o = out + (size_t)r * D;  // [B*Tq, H*D] row-major: (b*Tq + i)*H + h = r
  const act16* d = dout + (size_t)r * D;
  // D <= 128 (the fused path's head sizes): every load issued before the first product.
  float x[4], y[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int c = lane + 32 * k;
    x[k] = c < D ? act2f(o[c]) : 0.0f, y[k] = c < D ? act2f(d[c]) : 0.0f;
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k)
    if (lane + 32 * k < D) sum += x[k] * y[k];
  sum = warp_sum(sum);
  if (lane == 0) {
    const int h = (int)(r % H);
    const long bi = r / H;
    const int i = (int)(bi % Tq), b = (int)(bi / Tq);
    Dvec[((size_t)b * H + h) * Tq + i] = sum;
  }
}

// ---- backward: one CTA per key tile, the five products ----------------------------------

template <int DP>
struct BwdCfg {
  static constexpr int BK = ATTN_BWD_KEYS;  // keys per CTA: 8 warps x 16
  static constexpr int BQ = ATTN_BWD_ROWS;  // query rows per tile
  static constexpr int STAGES = 2;
  static constexpr bool KVREG = DP <= 64;  // the warp's K and V fragments in registers
  // queries per sub-tile of the products with S^T and dP^T in registers
  static constexpr int QSUB = DP <= 64 ? BQ : BQ / 2;
  // dQ = dS K: warp w takes query rows 16 (w % 4).. and, of the DP / 16 column groups of 16, the
  // first HALF (w < 4) or the rest.
  static constexpr int NCG = DP / 16, HALF = (NCG + 1) / 2;
  // A warp's dq partial sums of a query tile: 2 HALF float4 per lane (its accumulator tiles),
  // stored lane-contiguous so each float4 of the warp is one 512-byte access.
  static constexpr int SLOT = 2 * HALF * 4 * 32;
  static constexpr int LD = DP + 8, LDS = BQ + 8;
  static constexpr int U = BQ / 8 + 1;  // a thread's diagonals per tile (per column parity)
  // The diagonal sums' row of one (warp, parity, t): 8 U values indexed by 8 u + g, padded so
  // that the row stride is 8 banks: the 32 lanes writing one (u, c) hit 32 banks (8 t + g), and
  // the 32 threads reading consecutive diagonals read consecutive words.
  static constexpr int XS = 8 * U + (40 - 8 * U % 32) % 32;
  // K, V, the Q and dO stages, dS^T, the lse and D stages, and the CTA's ticket (16 bytes)
  static constexpr size_t tiles = (size_t)(2 * BK + 2 * STAGES * BQ) * LD * sizeof(act16) +
                                  (size_t)BK * LDS * sizeof(act16) + (size_t)2 * STAGES * BQ * sizeof(float) + 16;
  // with the bias gradient: each thread's diagonal sums of a tile, [warps][2][4][XS], and the
  // warps' sums of the two far ends, [2][warps]
  static constexpr size_t diag_stage = (size_t)(kBwdWarps * 2 * 4 * XS + 2 * kBwdWarps) * sizeof(float);
};

// The ordered dQ accumulation's flag of a query tile counts the key tiles that have added to
// it (see the top). A warp waits until `value` have (an acquire, so their adds are visible to
// its loads); seen: the value of an earlier acquire load of the flag, issued at the start of the
// tile so that its latency hides behind the products. After a __syncthreads that follows every
// warp's adds, one thread counts the CTA's turn (a release: the barrier orders the other warps'
// stores before it).
__device__ __forceinline__ void dq_turn_wait(const int* flag, int seen, int value) {
  if (seen != value) flag_wait_eq(flag, value);
}
__device__ __forceinline__ void dq_turn_done(int* flag) { flag_release_add(flag, 1); }

// BIAS: the position bias is read; BGRAD: its gradient is summed too (into a.bias_part).
template <int DP, bool BIAS, bool BGRAD>
__global__ void __launch_bounds__(kBwdThreads) attn_bwd_kernel(const AttnArgs a) {
  using Cfg = BwdCfg<DP>;
  constexpr int BK = Cfg::BK, BQ = Cfg::BQ, ST = Cfg::STAGES, LD = Cfg::LD, LDS = Cfg::LDS, U = Cfg::U;
  constexpr int NCG = Cfg::NCG, HALF = Cfg::HALF, QSUB = Cfg::QSUB, NS = QSUB / 8, XS = Cfg::XS;
  constexpr int NT = BQ / 8, DT = DP / 8, KS = DP / 16;
  constexpr bool KVREG = Cfg::KVREG;
  DYNAMIC_SMEM(smem);
  act16* Ks = reinterpret_cast<act16*>(smem);                // [BK][LD]
  act16* Vs = Ks + BK * LD;                                   // [BK][LD]
  act16* Qs = Vs + BK * LD;                                   // [ST][BQ][LD]
  act16* dOs = Qs + ST * BQ * LD;                             // [ST][BQ][LD]
  act16* dSs = dOs + ST * BQ * LD;                            // [BK][LDS]: dS^T of the tile
  float* Ls = reinterpret_cast<float*>(dSs + BK * LDS);      // [ST][BQ]: lse * log2(e)
  float* Ds = Ls + ST * BQ;                                   // [ST][BQ]: D
  int* work_sm = reinterpret_cast<int*>(Ds + ST * BQ);        // [4]: the CTA's work (below)
  float* pb = Ds + ST * BQ + 4;                               // BIAS: [2M + 1]
  float* gsum = pb + (BIAS ? 2 * a.maxdist + 1 : 0);          // BGRAD: [2M + 1] per-position sums
  float* dstage = gsum + (BGRAD ? 2 * a.maxdist + 1 : 0);     // BGRAD: [warps][2][4][XS]
  float* far = dstage + kBwdWarps * 2 * 4 * XS;               // BGRAD: [2][warps]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // The CTA's work: ticket n = j P + pair (P = B Hc / group pairs of a batch and a key/value head
  // of the launch), in the order CTAs start, whatever order the GPU starts blocks in: every key
  // tile j' < j of a pair, the only CTAs this one waits for, took a lower ticket, so they have
  // started (see the top). Kept in shared memory, work[0] = j, [1] = pair, [2] = batch, [3] = the
  // pair's first query head, and read where used rather than held in registers through the
  // products (the registers are this kernel's limit). The CTA visits the group's query heads in
  // increasing order, each over its query tiles; query head g of the group is the launch's
  // query pair pair * group + g (flags, partial sums).
  const int Tq = a.Tq, Tk = a.Tk, C = a.H * a.D, M = a.maxdist, G = BIAS ? 1 : a.group;  // (fused_ok)
  const int nk = (Tk + BK - 1) / BK, nq = (Tq + BQ - 1) / BQ;
  volatile int* work = work_sm;
  if (threadIdx.x == 0) {
    const int n = (int)atomicAdd(a.ticket, 1u), KVc = a.Hc / G, P = a.B * KVc, pair = n % P;
    work[0] = n / P, work[1] = pair, work[2] = pair / KVc, work[3] = a.h0 + pair % KVc * G;
  }
  __syncthreads();
  auto J = [&] { return work[0]; };
  auto PQ = [&](int g) { return (work[1] * G + g) * nq; };  // query head g's first query tile
  auto Bi = [&] { return work[2]; };
  auto Hoff = [&](int g) { return (size_t)(work[3] + g) * a.D; };
  const int k0 = J() * BK, b = Bi(), h = work[3];
  const size_t kvoff = (size_t)(work[3] / G) * a.D;  // the key/value head's columns
  const int it_end = a.causal ? k0 / BQ : 0;  // the last query tile visited: the first with a row i >= k0
  const int nsteps = nq - it_end;              // query tiles nq - 1 down to it_end, per query head
  const int kw0 = k0 + warp * 16;              // the warp's first key

  load_tile<BK, DP, kBwdThreads>(Ks, a.k + ((size_t)b * Tk + k0) * a.kv_stride + kvoff, a.kv_stride, min(BK, Tk - k0), a.D, a.vec);
  load_tile<BK, DP, kBwdThreads>(Vs, a.v + ((size_t)b * Tk + k0) * a.kv_stride + kvoff, a.kv_stride, min(BK, Tk - k0), a.D, a.vec);
  // Step s's query tile into stage s % ST: Q, dO, and lse and D by 4-byte cp.async, thread r
  // < 2 BQ one value (rows past Tq: lse = +inf, so P = 0, and D = 0, stored here). lse_to_log2
  // converts the landed lse to base 2 (lse * log2(e)) in place, by the thread that copied it,
  // before the barrier that publishes the stage.
  static_assert(2 * BQ <= kBwdThreads, "one lse or D value per thread");
  // Step s of the CTA is query head s / nsteps of the group, its query tile nq - 1 - s % nsteps
  // (no division where there is no group: GPT, T5).
  auto head_of = [&](int step) { return G == 1 ? 0 : step / nsteps; };
  auto tile_of = [&](int step) { return nq - 1 - (G == 1 ? step : step % nsteps); };
  auto load_q = [&](int step) {
    const int gq = head_of(step), qi0 = tile_of(step) * BQ, rows = min(BQ, Tq - qi0), stage = step % ST;
    const size_t row0 = (size_t)Bi() * Tq + qi0, hd = Hoff(gq);
    load_tile<BQ, DP, kBwdThreads>(Qs + stage * BQ * LD, a.q + row0 * a.q_stride + hd, a.q_stride, rows, a.D, a.vec);
    load_tile<BQ, DP, kBwdThreads>(dOs + stage * BQ * LD, a.dout + row0 * C + hd, C, rows, a.D, a.vec);
    const int r = threadIdx.x % BQ;
    if (threadIdx.x < 2 * BQ) {
      float* dst = (threadIdx.x < BQ ? Ls : Ds) + stage * BQ + r;
      if (r < rows) cp_async4(dst, (threadIdx.x < BQ ? a.lse : a.Dvec) + ((size_t)Bi() * a.H + work[3] + gq) * Tq + qi0 + r);
      else *dst = threadIdx.x < BQ ? INFINITY : 0.0f;
    }
  };
  auto lse_to_log2 = [&](int step) {
    const int qi0 = tile_of(step) * BQ;
    if (threadIdx.x < BQ && (int)threadIdx.x < Tq - qi0) Ls[step % ST * BQ + threadIdx.x] *= kLog2e;
  };
  const int nall = G * nsteps;  // the CTA's steps over the group's query heads
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    if (s < nall) load_q(s);
    cp_async_commit();
  }
  if (BIAS) fill_bias<kBwdThreads>(pb, a, h);
  if (BGRAD)
    for (int s = threadIdx.x; s <= 2 * M; s += kBwdThreads) gsum[s] = 0.0f;
  cp_async_wait<ST - 2>();
  if (nall > 0) lse_to_log2(0);
  __syncthreads();

  uint32_t kf[KVREG ? KS : 1][4], vf[KVREG ? KS : 1][4];  // the warp's 16 keys and values as A fragments
  if constexpr (KVREG) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      load_a<LD>(kf[kk], Ks, warp * 16, kk * 16, lane);
      load_a<LD>(vf[kk], Vs, warp * 16, kk * 16, lane);
    }
  }
  float dk[DT][4], dv[DT][4];
  zero_acc(dk);
  zero_acc(dv);
  float far_lo = 0.0f, far_hi = 0.0f;  // BGRAD: this thread's sums of positions <= -M and >= M
  // dQ = dS K: warp w takes 16 query rows (w % 4) and column groups (BwdCfg) of every tile.
  const int rg = warp & 3, cg0 = warp < 4 ? 0 : HALF, ncg = warp < 4 ? HALF : NCG - HALF;
  // A key tile's adds to query tile it are the last unless j < jmax(it) (then its flag counts
  // them, after the barrier at the start of the next tile).
  auto jmax_of = [&](int it) { return a.causal ? min(nk - 1, (it * BQ + BQ - 1) / BK) : nk - 1; };

  for (int step = 0; step < nall; ++step) {
    const int gq = head_of(step), it = tile_of(step), stage = step % ST, qi0 = it * BQ;
    if (step > 0) {
      cp_async_wait<ST - 2>();
      lse_to_log2(step);
      __syncthreads();  // tile it landed; every warp is done with the previous tile (its stage, dS, sums, dq adds)
    }
    if (step > 0 && threadIdx.x == 0) {  // the previous step's turn: its query head and tile
      const int gp = head_of(step - 1), itp = tile_of(step - 1);
      if (J() < jmax_of(itp)) dq_turn_done(a.dq_flag + PQ(gp) + itp);
    }
    if (step + ST - 1 < nall) load_q(step + ST - 1);
    cp_async_commit();
    // This tile's turn: key tiles add to a query tile in increasing order, j after j - 1.
    const int j = J();
    const bool first = j == 0, last = j == jmax_of(it);
    const int seen = DP <= 64 && ncg > 0 && !first ? flag_load_acquire(a.dq_flag + PQ(gq) + it) : -1;
    const act16* Qt = Qs + stage * BQ * LD;
    const act16* dOt = dOs + stage * BQ * LD;
    const float* Lt = Ls + stage * BQ;
    const float* Dt = Ds + stage * BQ;

    // The products over query sub-tiles of QSUB rows (S^T and dP^T of a sub-tile in registers).
#pragma unroll 1
    for (int q1 = 0; q1 < BQ; q1 += QSUB) {
      // S^T = K Q^T: rows = the warp's 16 keys, columns = the sub-tile's queries.
      float s[NS][4];
      zero_acc(s);
      mma_warp_nk<KVREG, KS, NS, LD>(s, kf, Ks, warp * 16, Qt + q1 * LD, lane);
      // Element (nt, e): key kw0 + g + 8 (e >> 1), query qi0 + q1 + 8 nt + 2t + (e & 1): relative
      // position kw0 - qi0 - q1 + g - 2t - (e & 1) + 8 u, u = (e >> 1) - nt.
      const int base = kw0 - qi0 - q1 + g - 2 * t;
      if (BIAS) {
#pragma unroll
        for (int u = -(NS - 1); u <= 1; ++u)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float bias = pb[bias_slot(base - c + 8 * u, M)];
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
              const int nt = rr - u;
              if (nt >= 0 && nt < NS) s[nt][2 * rr + c] = fmaf(s[nt][2 * rr + c], a.scale, bias);
            }
          }
      }
      // P^T = exp2(x * xl2 - lse2), masked where the sub-tile crosses the diagonal or the key end.
      const float xl2 = BIAS ? kLog2e : a.scale_log2;
      const bool need_mask = (a.causal && qi0 + q1 < kw0 + 15) || kw0 + 15 >= Tk;
#pragma unroll
      for (int nt = 0; nt < NS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int ql = q1 + nt * 8 + 2 * t + (e & 1);
          float p = ex2(fmaf(s[nt][e], xl2, -Lt[ql]));
          if (need_mask) {
            const int key = kw0 + g + (e >> 1) * 8;
            if (key >= Tk || (a.causal && qi0 + ql < key)) p = 0.0f;
          }
          s[nt][e] = p;
        }
      mma_regs_kn<NS, DP, LD>(dv, s, dOt + q1 * LD, lane);  // dV += P^T dO

      float dp[NS][4];  // dP^T = V dO^T
      zero_acc(dp);
      mma_warp_nk<KVREG, KS, NS, LD>(dp, vf, Vs, warp * 16, dOt + q1 * LD, lane);
#pragma unroll
      for (int nt = 0; nt < NS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nt][e] = s[nt][e] * (dp[nt][e] - Dt[q1 + nt * 8 + 2 * t + (e & 1)]);  // dS^T
      mma_regs_kn<NS, DP, LD>(dk, dp, Qt + q1 * LD, lane);  // dK += dS^T Q

      // dS^T to shared memory (16 bits) for dQ = dS K, and the bias gradient's diagonal sums.
      act16* ds_warp = dSs + warp * 16 * LDS + q1;
#pragma unroll
      for (int nt = 0; nt < NS; ++nt) {
        *reinterpret_cast<uint32_t*>(ds_warp + g * LDS + nt * 8 + 2 * t) = pack_act16(dp[nt][0], dp[nt][1]);
        *reinterpret_cast<uint32_t*>(ds_warp + (g + 8) * LDS + nt * 8 + 2 * t) = pack_act16(dp[nt][2], dp[nt][3]);
      }
      if (BGRAD) {
        // This thread's sums per (u, column parity c) over the tile: relative position
        // kw0 - qi0 + g - 2t - c + 8 u, u = (e >> 1) - nt - q1 / 8. A sub-tile's u = 1 is the
        // previous sub-tile's lowest u: that one sum adds, the others are new.
#pragma unroll
        for (int u = -(NS - 1); u <= 1; ++u)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float sum = 0.0f;
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
              const int nt = rr - u;
              if (nt >= 0 && nt < NS) sum += dp[nt][2 * rr + c];
            }
            float* slot = dstage + ((warp * 2 + c) * 4 + t) * XS + 8 * (u - q1 / 8 + NT - 1) + g;
            *slot = (q1 > 0 && u == 1 ? *slot : 0.0f) + sum;
          }
      }
    }
    __syncthreads();  // dS^T (and the diagonal sums) of every warp

    if (BGRAD && threadIdx.x < BK + BQ - 1) {
      // Thread d owns the tile's diagonal d: relative position r = k0 - qi0 - (BQ - 1) + d. Its
      // terms come from (warp w, lane g*4+t, parity c) with 16 w + 8 u + g - 2t - c = d - (BQ - 1),
      // at x = 8 u + g of the row (w, c, t): consecutive threads read consecutive words.
      const int d = threadIdx.x;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kBwdWarps; ++w)
#pragma unroll
        for (int tt = 0; tt < 4; ++tt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int x = d - (BQ - 1) - 16 * w + 2 * tt + c + 8 * (NT - 1);  // = 8 (u + NT - 1) + g
            if (x >= 0 && x < 8 * U) sum += dstage[((w * 2 + c) * 4 + tt) * XS + x];
          }
      const int r = k0 - qi0 - (BQ - 1) + d;
      if (r <= -M) far_lo += sum;
      else if (r >= M) far_hi += sum;
      else gsum[r + M] += sum;  // each position has one owner per tile; tiles are barrier-separated
    }

    // dQ = dS K over the CTA's BK keys, this warp's 16 query rows and column groups, added to the
    // sums of key tiles 0 .. j - 1 once their turns are done, in chunks of CH column groups: a
    // chunk's partial sums are loaded (one 16-byte load per accumulator tile, all issued at once)
    // before its product, which hides them, and the registers hold one chunk at a time.
    constexpr int CH = DP > 64 ? 1 : HALF < 2 ? HALF : 2, NCH = (HALF + CH - 1) / CH;
    float4* acc = a.dq_acc ? reinterpret_cast<float4*>(a.dq_acc) + ((size_t)(PQ(gq) + it) * kBwdWarps + warp) * (Cfg::SLOT / 4) + lane
                           : nullptr;  // (one key tile: no partial sums)
    if (ncg > 0 && !first) dq_turn_wait(a.dq_flag + PQ(gq) + it, seen, j);
#pragma unroll
    for (int ch = 0; ch < NCH; ++ch) {
      const int c0 = ch * CH;  // the chunk's first column group of the warp's
      if (c0 >= ncg) break;  // (DP = 16: warps 4-7 have no columns)
      float4 prev[2 * CH];
      if (!first)
#pragma unroll
        for (int i = 0; i < 2 * CH; ++i)
          if (2 * c0 + i < 2 * ncg) prev[i] = acc[(2 * c0 + i) * 32];
      float dq[2 * CH][4];
#pragma unroll
      for (int i = 0; i < 2 * CH; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        uint32_t af[4];
        load_a_t<LDS>(af, dSs, kk * 16, rg * 16, lane);
#pragma unroll
        for (int cg = 0; cg < CH; ++cg) {
          if (c0 + cg >= ncg) break;
          uint32_t bf[4];
          load_b_kn<LD>(bf, Ks, kk * 16, (cg0 + c0 + cg) * 16, lane);
          mma_act16(dq[2 * cg], af, bf[0], bf[1]);
          mma_act16(dq[2 * cg + 1], af, bf[2], bf[3]);
        }
      }
#pragma unroll
      for (int i = 0; i < 2 * CH; ++i) {
        const int n = 2 * c0 + i;  // the warp's accumulator tile
        if (n >= 2 * ncg) break;
        float4 x = make_float4(dq[i][0], dq[i][1], dq[i][2], dq[i][3]);
        if (!first) x.x += prev[i].x, x.y += prev[i].y, x.z += prev[i].z, x.w += prev[i].w;
        if (!last) {
          acc[n * 32] = x;
          continue;
        }
        // The last adder writes dq: element e of accumulator tile n is row g + 8 (e >> 1),
        // column 8 n + 2t + (e & 1) of the warp's slice.
        const float xe[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = qi0 + rg * 16 + g + 8 * (e >> 1), col = cg0 * 16 + n * 8 + 2 * t + (e & 1);
          if (row < Tq && col < a.D) a.dq[((size_t)Bi() * Tq + row) * a.q_stride + Hoff(gq) + col] = f2act(xe[e] * a.scale);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the last tile before K and V are overwritten
  if (nall > 0 && threadIdx.x == 0 && J() < jmax_of(it_end)) dq_turn_done(a.dq_flag + PQ(head_of(nall - 1)) + it_end);

  act16* k_warp = Ks + warp * 16 * LD;
  act16* v_warp = Vs + warp * 16 * LD;
  stage_acc<DP>(k_warp, dk, a.scale, a.scale, lane);
  stage_acc<DP>(v_warp, dv, 1.0f, 1.0f, lane);
  __syncwarp();
  const size_t grow = (size_t)Bi() * Tk + kw0;
  store_rows<16, DP>(k_warp, a.dk + grow * a.kv_stride + kvoff, a.kv_stride, Tk - kw0, a.D, a.vec, lane);
  store_rows<16, DP>(v_warp, a.dv + grow * a.kv_stride + kvoff, a.kv_stride, Tk - kw0, a.D, a.vec, lane);
  if (BGRAD) {
    // The far ends: one fixed tree over the CTA's threads, then the CTA's sums to the scratch.
    const float lo = warp_sum(far_lo), hi = warp_sum(far_hi);
    if (lane == 0) far[warp] = lo, far[kBwdWarps + warp] = hi;
    __syncthreads();
    if (threadIdx.x == 0) {
      float x = 0.0f, y = 0.0f;
      for (int w = 0; w < kBwdWarps; ++w) x += far[w], y += far[kBwdWarps + w];
      gsum[0] = x, gsum[2 * M] = y;
    }
    __syncthreads();
    float* part = a.bias_part + ((size_t)work[1] * nk + J()) * (2 * M + 1);  // pair = b Hc + hc
    for (int s2 = threadIdx.x; s2 <= 2 * M; s2 += kBwdThreads) part[s2] = gsum[s2];
  }
}

// dtable[bucket, h] += the bias gradient of the CTAs' sums: per relative position over (batch,
// key tile) in order, then per bucket over positions in increasing order. One block per head of
// the launch's range h0 .. h0 + Hc - 1 (H: the table's heads).
__global__ void __launch_bounds__(256) attn_bias_grad_kernel(float* dtable, const float* part, int B, int Hc, int h0,
                                                             int H, int nk, int M, int nbuckets, int bidir) {
  __shared__ float pos[2 * kMaxBiasDistance + 1];
  const int hc = blockIdx.x, h = h0 + hc, P = 2 * M + 1;
  for (int s = threadIdx.x; s < P; s += blockDim.x) {
    float x = 0.0f;
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < nk; ++j) x += part[(((size_t)b * Hc + hc) * nk + j) * P + s];
    pos[s] = x;
  }
  __syncthreads();
  for (int bk = threadIdx.x; bk < nbuckets; bk += blockDim.x) {
    float x = 0.0f;
    for (int s = 0; s < P; ++s)
      if (position_bucket(s - M, bidir, nbuckets, M) == bk) x += pos[s];
    dtable[(size_t)bk * H + h] += x;
  }
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

// The position bias of (h, i, j), evaluated from the table (0 without one).
__device__ __forceinline__ float simple_bias(const AttnArgs& a, int h, int i, int j) {
  if (!a.table) return 0.0f;
  return act2f(a.table[(size_t)position_bucket(j - i, a.bidir, a.nbuckets, a.maxdist) * a.H + h]);
}

// One CTA per (b, h, i) row (grid-stride); scores in ws[blockIdx.x * ws_row ..].
__global__ void __launch_bounds__(kThreads) attn_simple_fwd_kernel(const AttnArgs a, float* ws, size_t ws_row) {
  __shared__ float red[32];
  float* sc = ws + blockIdx.x * ws_row;
  const long R = (long)a.B * a.H * a.Tq;
  const int C = a.H * a.D;
  for (long r = blockIdx.x; r < R; r += gridDim.x) {
    const int i = (int)(r % a.Tq), h = (int)((r / a.Tq) % a.H), b = (int)(r / ((long)a.Tq * a.H));
    const int nk = (a.causal && i + 1 < a.Tk) ? i + 1 : a.Tk;
    const size_t hoff = (size_t)h * a.D, kvoff = (size_t)(h / a.group) * a.D;
    const act16* qi = a.q + ((size_t)b * a.Tq + i) * a.q_stride + hoff;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
      const act16* kj = a.k + ((size_t)b * a.Tk + j) * a.kv_stride + kvoff;
      const float x = a.scale * dot_act16(qi, kj, a.D) + simple_bias(a, h, i, j);
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
      for (int j = 0; j < nk; ++j) acc += sc[j] * act2f(a.v[((size_t)b * a.Tk + j) * a.kv_stride + kvoff + c]);
      a.o[((size_t)b * a.Tq + i) * C + hoff + c] = f2act(acc * inv);
    }
    if (threadIdx.x == 0) a.lse_out[((size_t)b * a.H + h) * a.Tq + i] = sum > 0.0f ? mx + logf(sum) : -INFINITY;
    __syncthreads();
  }
}

// Pass A: one CTA per (h, i) row looping over b in order: dq rows, and with dtable the row's
// bias gradient summed over b (dsum) and then per bucket over j in order, into
// rowsum[(h * Tq + i) * nbuckets + bucket] (kernels/cpu/attention.c's order).
__global__ void __launch_bounds__(kThreads)
    attn_simple_bwd_dq_kernel(const AttnArgs a, float* ws, size_t ws_row, float* rowsum) {
  __shared__ float red[32];
  float* ds = ws + blockIdx.x * ws_row;
  float* dsum = ds + a.Tk;
  const long R = (long)a.H * a.Tq;
  const int C = a.H * a.D;
  for (long r = blockIdx.x; r < R; r += gridDim.x) {
    const int i = (int)(r % a.Tq), h = (int)(r / a.Tq);
    const int nk = (a.causal && i + 1 < a.Tk) ? i + 1 : a.Tk;
    const size_t hoff = (size_t)h * a.D, kvoff = (size_t)(h / a.group) * a.D;
    for (int b = 0; b < a.B; ++b) {
      const act16* qi = a.q + ((size_t)b * a.Tq + i) * a.q_stride + hoff;
      const act16* doi = a.dout + ((size_t)b * a.Tq + i) * C + hoff;
      const act16* oi = a.out + ((size_t)b * a.Tq + i) * C + hoff;
      float part = 0.0f;
      for (int c = threadIdx.x; c < a.D; c += blockDim.x) part += act2f(doi[c]) * act2f(oi[c]);
      const float Di = block_reduce(part, false, red);
      const float l = a.lse[((size_t)b * a.H + h) * a.Tq + i];
      for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        const act16* kj = a.k + ((size_t)b * a.Tk + j) * a.kv_stride + kvoff;
        const act16* vj = a.v + ((size_t)b * a.Tk + j) * a.kv_stride + kvoff;
        const float x = a.scale * dot_act16(qi, kj, a.D) + simple_bias(a, h, i, j);
        const float p = expf(x - l);
        ds[j] = p * (dot_act16(doi, vj, a.D) - Di);
        if (rowsum) dsum[j] = b == 0 ? ds[j] : dsum[j] + ds[j];
      }
      __syncthreads();
      for (int c = threadIdx.x; c < a.D; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < nk; ++j) acc += ds[j] * act2f(a.k[((size_t)b * a.Tk + j) * a.kv_stride + kvoff + c]);
        a.dq[((size_t)b * a.Tq + i) * a.q_stride + hoff + c] = f2act(a.scale * acc);
      }
      __syncthreads();
    }
    if (rowsum) {
      for (int bk = threadIdx.x; bk < a.nbuckets; bk += blockDim.x) {
        float x = 0.0f;
        for (int j = 0; j < nk; ++j)
          if (position_bucket(j - i, a.bidir, a.nbuckets, a.maxdist) == bk) x += dsum[j];
        rowsum[((size_t)h * a.Tq + i) * a.nbuckets + bk] = x;
      }
      __syncthreads();
    }
  }
}

// dtable[bucket, h] += rowsum over the rows i in increasing order.
__global__ void attn_simple_bias_grad_kernel(float* dtable, const float* rowsum, int H, int Tq, int nbuckets) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= nbuckets * H) return;
  const int bk = e / H, h = e % H;
  float x = 0.0f;
  for (int i = 0; i < Tq; ++i) x += rowsum[((size_t)h * Tq + i) * nbuckets + bk];
  dtable[e] += x;
}

// Pass B: one CTA per (b, key/value head, j) key row: dk, dv over the group's query heads in
// increasing order, and for each over queries i in increasing order (each query head's part
// scaled as a whole, then added, as kernels/cpu/attention.c sums them).
__global__ void __launch_bounds__(kThreads) attn_simple_bwd_dkdv_kernel(const AttnArgs a, float* ws, size_t ws_row) {
  float* pbuf = ws + blockIdx.x * ws_row;  // [0, Tq): P, [Tq, 2Tq): dS, then dk and dv [2][D]
  float* dkv = pbuf + 2 * (size_t)a.Tq;
  const int KV = a.H / a.group;
  const long R = (long)a.B * KV * a.Tk;
  const int C = a.H * a.D;
  for (long r = blockIdx.x; r < R; r += gridDim.x) {
    const int j = (int)(r % a.Tk), kvh = (int)((r / a.Tk) % KV), b = (int)(r / ((long)a.Tk * KV));
    const size_t kvoff = (size_t)kvh * a.D;
    const act16* kj = a.k + ((size_t)b * a.Tk + j) * a.kv_stride + kvoff;
    const act16* vj = a.v + ((size_t)b * a.Tk + j) * a.kv_stride + kvoff;
    const int i0 = a.causal ? j : 0;
    for (int h = kvh * a.group; h < (kvh + 1) * a.group; ++h) {
      const size_t hoff = (size_t)h * a.D;
      for (int i = i0 + threadIdx.x; i < a.Tq; i += blockDim.x) {
        const act16* qi = a.q + ((size_t)b * a.Tq + i) * a.q_stride + hoff;
        const act16* doi = a.dout + ((size_t)b * a.Tq + i) * C + hoff;
        const act16* oi = a.out + ((size_t)b * a.Tq + i) * C + hoff;
        const float Di = dot_act16(doi, oi, a.D);
        const float x = a.scale * dot_act16(qi, kj, a.D) + simple_bias(a, h, i, j);
        const float p = expf(x - a.lse[((size_t)b * a.H + h) * a.Tq + i]);
        pbuf[i] = p;
        pbuf[a.Tq + i] = p * (dot_act16(doi, vj, a.D) - Di);
      }
      __syncthreads();
      const bool first = h == kvh * a.group;
      for (int c = threadIdx.x; c < a.D; c += blockDim.x) {  // column c: this thread's, every head
        float accv = 0.0f, acck = 0.0f;
        for (int i = i0; i < a.Tq; ++i) {
          accv += pbuf[i] * act2f(a.dout[((size_t)b * a.Tq + i) * C + hoff + c]);
          acck += pbuf[a.Tq + i] * act2f(a.q[((size_t)b * a.Tq + i) * a.q_stride + hoff + c]);
        }
        dkv[c] = first ? a.scale * acck : dkv[c] + a.scale * acck;
        dkv[a.D + c] = first ? accv : dkv[a.D + c] + accv;
      }
      __syncthreads();
    }
    for (int c = threadIdx.x; c < a.D; c += blockDim.x) {
      const size_t o = ((size_t)b * a.Tk + j) * a.kv_stride + kvoff + c;
      a.dk[o] = f2act(dkv[c]);
      a.dv[o] = f2act(dkv[a.D + c]);
    }
    __syncthreads();
  }
}

// ---- host side ------------------------------------------------------------------------------

// The environment variable FSDP_ATTN: "simple" runs every call on the simple path; "chunked"
// runs the fused backward one batch and one group of heads per launch, as it runs where the scratch holds
// no more (how the tests reach those launches at small shapes).
int attention_mode() {
  static int v = -1;
  if (v < 0) {
    const char* e = getenv("FSDP_ATTN");
    v = e == nullptr ? 0 : !strcmp(e, "simple") ? 1 : !strcmp(e, "chunked") ? 2 : 0;
  }
  return v;
}
bool force_simple() { return attention_mode() == 1; }

bool fused_smem_fits(const AttnShape& s, const AttnBias& bias);

// Whether the fused kernels take this call: a padded head size, a positive scale (the running
// max is kept on raw scores), a bias table they can hold per clamped position (T5's buckets:
// max_distance above the exact range, so every position beyond it is the last bucket), and
// shared memory the device has.
bool fused_ok(const AttnShape& s, const AttnBias& bias) {
  if (ATTN_PADDED_HEAD(s.D) == 0 || force_simple()) return false;
  if (!bias.table) return s.scale > 0.0f && isfinite(s.scale) && fused_smem_fits(s, bias);
  if (attn_kv_heads(s) != s.H) return false;  // a position bias with grouped heads (no model has one)
  const int exact = (bias.bidirectional ? bias.num_buckets / 2 : bias.num_buckets) / 2;
  return bias.num_buckets >= 1 && bias.num_buckets <= kMaxBuckets && bias.max_distance > exact &&
         bias.max_distance <= kMaxBiasDistance && isfinite(s.scale) && fused_smem_fits(s, bias);
}

AttnArgs make_args(const AttnShape& s, const AttnBias& bias) {
  if (attn_kv_heads(s) < 1 || s.H % attn_kv_heads(s))
    cuda_fail("attention", "the key/value heads KV must divide the query heads H", __FILE__, __LINE__);
  AttnArgs a;
  memset(&a, 0, sizeof a);
  a.B = s.B, a.Tq = s.Tq, a.Tk = s.Tk, a.H = s.H, a.D = s.D, a.group = s.H / attn_kv_heads(s);
  a.q_stride = s.q_stride, a.kv_stride = s.kv_stride, a.causal = s.causal ? 1 : 0;
  a.scale = s.scale;
  a.scale_log2 = s.scale * kLog2e;
  a.table = bias.table ? as_act16(bias.table) : nullptr;
  a.nbuckets = bias.num_buckets, a.maxdist = bias.max_distance, a.bidir = bias.bidirectional ? 1 : 0;
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

// Dynamic shared memory of the fused kernels for a max_distance M (the bias tables grow with it).
template <int DP>
size_t fwd_smem(bool bias, int M) {
  return FwdCfg<DP>::tiles + (bias ? (size_t)(2 * M + 1) * sizeof(float) : 0);
}
template <int DP>
size_t bwd_smem(bool bias, bool bgrad, int M) {
  return BwdCfg<DP>::tiles + (bias ? (size_t)(2 * M + 1) * sizeof(float) : 0) +
         (bgrad ? (size_t)(2 * M + 1) * sizeof(float) + BwdCfg<DP>::diag_stage : 0);
}

// The dynamic shared memory a block may opt into on this device (attention_init; 0 before).
size_t g_smem_optin = 0;

// Whether the forward and the backward of this call fit the device's shared memory per block
// (227 KiB on an H100, 163 on an A100: a head size of 128 with a long position bias may not).
bool fused_smem_fits(const AttnShape& s, const AttnBias& bias) {
  if (g_smem_optin == 0) return true;
  size_t need = 0;
  dispatch_dp(ATTN_PADDED_HEAD(s.D), [&](auto dpc) {
    constexpr int P = decltype(dpc)::value;
    const bool b = bias.table != nullptr;
    const size_t f = fwd_smem<P>(b, bias.max_distance), k = bwd_smem<P>(b, b, bias.max_distance);
    need = f > k ? f : k;
  });
  return need <= g_smem_optin;
}

// Every fused kernel with its block size and the most dynamic shared memory it launches with:
// attention_init opts each in once, and the kernel report reads the table.
struct FusedKernel {
  const void* fn;
  char name[48];
  int threads;
  size_t smem;
};
template <class K>
void add_kernel(FusedKernel* out, int* n, K kernel, const char* name, int dp, const char* flags, int threads,
                size_t smem) {
  FusedKernel& k = out[(*n)++];
  k.fn = reinterpret_cast<const void*>(kernel);
  snprintf(k.name, sizeof k.name, "%s<%d%s>", name, dp, flags);
  k.threads = threads;
  k.smem = smem;
}
int fused_kernels(FusedKernel* out, int M) {
  int n = 0;
  for (int dp = 16; dp <= 128; dp += 16)
    dispatch_dp(dp, [&](auto dpc) {
      constexpr int P = decltype(dpc)::value;
      add_kernel(out, &n, attn_fwd_kernel<P, false>, "attn_fwd_kernel", P, ", false", kThreads, fwd_smem<P>(false, M));
      add_kernel(out, &n, attn_fwd_kernel<P, true>, "attn_fwd_kernel", P, ", true", kThreads, fwd_smem<P>(true, M));
      add_kernel(out, &n, attn_bwd_kernel<P, false, false>, "attn_bwd_kernel", P, ", false, false", kBwdThreads,
                 bwd_smem<P>(false, false, M));
      add_kernel(out, &n, attn_bwd_kernel<P, true, false>, "attn_bwd_kernel", P, ", true, false", kBwdThreads,
                 bwd_smem<P>(true, false, M));
      add_kernel(out, &n, attn_bwd_kernel<P, true, true>, "attn_bwd_kernel", P, ", true, true", kBwdThreads,
                 bwd_smem<P>(true, true, M));
    });
  return n;
}
constexpr int kFusedKernels = 8 * 5;

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
  if (wsf < row) cuda_fail("attention simple forward", "scratch smaller than one score row", __FILE__, __LINE__);
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
  // The bias gradient's row sums first, then the rows' workspaces.
  const size_t nrowsum = a.dtable ? (size_t)a.H * a.Tq * a.nbuckets : 0;
  const size_t rowA = 2 * (a.Tk > 0 ? (size_t)a.Tk : 1), rowB = 2 * (size_t)a.Tq + 2 * (size_t)a.D;
  if (wsf < nrowsum + rowA || wsf < rowB)
    cuda_fail("attention simple backward", "scratch smaller than one score row", __FILE__, __LINE__);
  float* rowsum = a.dtable ? ws : nullptr;
  if (a.Tq > 0) {
    const size_t R = (size_t)a.H * a.Tq;
    size_t grid = (wsf - nrowsum) / rowA;
    if (grid > R) grid = R;
    if (grid > 8192) grid = 8192;
    attn_simple_bwd_dq_kernel<<<(unsigned)grid, kThreads, 0, ctx->stream>>>(a, ws + nrowsum, rowA, rowsum);
    CUDA_LAUNCH_CHECK();
    if (rowsum) {
      attn_simple_bias_grad_kernel<<<ceil_div((size_t)a.nbuckets * a.H, kThreads), kThreads, 0, ctx->stream>>>(
          a.dtable, rowsum, a.H, a.Tq, a.nbuckets);
      CUDA_LAUNCH_CHECK();
    }
  }
  if (a.Tk > 0) {
    const size_t R = (size_t)a.B * (a.H / a.group) * a.Tk;
    size_t grid = wsf / rowB;
    if (grid > R) grid = R;
    if (grid > 8192) grid = 8192;
    attn_simple_bwd_dkdv_kernel<<<(unsigned)grid, kThreads, 0, ctx->stream>>>(a, ws, rowB);
    CUDA_LAUNCH_CHECK();
  }
}

AttnArgs forward_args(act_t* out, float* lse, const act_t* q, const act_t* k, const act_t* v, const AttnBias& bias,
                      const AttnShape& s) {
  AttnArgs a = make_args(s, bias);
  a.q = as_act16(q), a.k = as_act16(k), a.v = as_act16(v);
  a.o = as_act16(out), a.lse_out = lse;
  a.vec = (s.D % 8 == 0 && s.q_stride % 8 == 0 && s.kv_stride % 8 == 0 && aligned16(q, k, v, out))
              ? 1
              : 0;
  return a;
}

AttnArgs backward_args(act_t* dq, act_t* dk, act_t* dv, float* dtable, const act_t* dout, const act_t* out,
                       const float* lse, const act_t* q, const act_t* k, const act_t* v, const AttnBias& bias,
                       const AttnShape& s) {
  AttnArgs a = make_args(s, bias);
  a.q = as_act16(q), a.k = as_act16(k), a.v = as_act16(v);
  a.out = as_act16(out), a.dout = as_act16(dout), a.lse = lse;
  a.dq = as_act16(dq), a.dk = as_act16(dk), a.dv = as_act16(dv);
  a.dtable = bias.table ? dtable : nullptr;
  a.vec = (s.D % 8 == 0 && s.q_stride % 8 == 0 && s.kv_stride % 8 == 0 && aligned16(q, k, v, out) &&
           aligned16(dout, dq, dk, dv))
              ? 1
              : 0;
  return a;
}

void check_bias(const AttnBias& bias) {
  if (bias.table && (bias.num_buckets < 1 || bias.num_buckets > kMaxBuckets || bias.max_distance < 1))
    cuda_fail("attention", "position bias: num_buckets must be 1..256 and max_distance positive", __FILE__, __LINE__);
}

}  // namespace

// ---- API ---------------------------------------------------------------------------------

// Opts every fused kernel into the shared memory it launches with, once (kernels_init), up to
// what the device allows a block; fused_ok sends a call needing more to the simple path.
extern "C" void attention_init(const KernelCtx* ctx) {
  g_smem_optin = ctx->prop.sharedMemPerBlockOptin;
  FusedKernel k[kFusedKernels];
  const int n = fused_kernels(k, kMaxBiasDistance);
  for (int i = 0; i < n; ++i) {
    if (k[i].smem > g_smem_optin) k[i].smem = g_smem_optin;
    CUDA_CHECK(cudaFuncSetAttribute(k[i].fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)k[i].smem));
  }
}

// The fused kernels' names (as "attn_fwd_kernel<64, true>"), block size and dynamic shared
// memory at T5's max_distance for the bias variants, for scripts/kernel_report.py.
extern "C" int attention_kernel_table(char (*names)[48], int* threads, size_t* smem, int max, int max_distance) {
  FusedKernel k[kFusedKernels];
  const int n = fused_kernels(k, max_distance);
  for (int i = 0; i < n && i < max; ++i) {
    memcpy(names[i], k[i].name, sizeof k[i].name);
    threads[i] = k[i].threads;
    smem[i] = k[i].smem;
  }
  return n < max ? n : max;
}

extern "C" void attention_forward_simple(KernelCtx* ctx, act_t* out, float* lse, const act_t* q, const act_t* k,
                                         const act_t* v, AttnBias bias, AttnShape s) {
  if (s.B <= 0 || s.H <= 0 || s.Tq <= 0 || s.D <= 0) return;
  check_bias(bias);
  simple_forward(ctx, forward_args(out, lse, q, k, v, bias, s));
}

extern "C" void attention_backward_simple(KernelCtx* ctx, act_t* dq, act_t* dk, act_t* dv, float* dtable,
                                          const act_t* dout, const act_t* out, const float* lse, const act_t* q,
                                          const act_t* k, const act_t* v, AttnBias bias, AttnShape s) {
  if (s.B <= 0 || s.H <= 0 || s.D <= 0) return;
  check_bias(bias);
  simple_backward(ctx, backward_args(dq, dk, dv, dtable, dout, out, lse, q, k, v, bias, s));
}

extern "C" void attention_forward(KernelCtx* ctx, act_t* out, float* lse, const act_t* q, const act_t* k,
                                  const act_t* v, AttnBias bias, AttnShape s) {
  if (s.B <= 0 || s.H <= 0 || s.Tq <= 0 || s.D <= 0) return;
  check_bias(bias);
  const AttnArgs a = forward_args(out, lse, q, k, v, bias, s);
  if (!fused_ok(s, bias)) {
    simple_forward(ctx, a);
    return;
  }
  dispatch_dp(ATTN_PADDED_HEAD(s.D), [&](auto dpc) {
    constexpr int P = decltype(dpc)::value;
    const unsigned nqt = ceil_div(s.Tq, FwdCfg<P>::BM);
    if (s.B > 65535 || nqt > 65535) cuda_fail("attention forward", "more than 65535 batches or query tiles", __FILE__, __LINE__);
    const dim3 grid(s.H, s.B, nqt);
    const size_t smem = fwd_smem<P>(a.table != nullptr, a.maxdist);
    if (a.table) attn_fwd_kernel<P, true><<<grid, kThreads, smem, ctx->stream>>>(a);
    else attn_fwd_kernel<P, false><<<grid, kThreads, smem, ctx->stream>>>(a);
    CUDA_LAUNCH_CHECK();
  });
}

extern "C" void attention_backward(KernelCtx* ctx, act_t* dq, act_t* dk, act_t* dv, float* dtable,
                                   const act_t* dout, const act_t* out, const float* lse, const act_t* q,
                                   const act_t* k, const act_t* v, AttnBias bias, AttnShape s) {
  if (s.B <= 0 || s.H <= 0 || s.D <= 0) return;
  check_bias(bias);
  const AttnArgs a0 = backward_args(dq, dk, dv, dtable, dout, out, lse, q, k, v, bias, s);
  // Scratch: D = rowsum(dout * out) of a chunk of batches (every head), and per (batch, head) of
  // a launch the dq partial sums (when several key tiles add), the flags and the bias gradient's
  // per-CTA sums, and the launch's ticket counter. Batches run in chunks that fit, in increasing
  // b; where one batch with every head does not fit, one batch at a time in chunks of heads, in
  // increasing h.
  constexpr int BK = ATTN_BWD_KEYS, BQ = ATTN_BWD_ROWS;  // BwdCfg's (the same for every head size)
  const int nk = (int)ceil_div(s.Tk > 0 ? s.Tk : 1, BK), nq = (int)ceil_div(s.Tq > 0 ? s.Tq : 1, BQ);
  const size_t npos = a0.dtable ? 2 * (size_t)bias.max_distance + 1 : 0;  // the bias gradient's positions
  const int dp = ATTN_PADDED_HEAD(s.D), half = (dp / 16 + 1) / 2;
  const size_t slot = (size_t)2 * half * 4 * 32;  // BwdCfg<dp>::SLOT
  const size_t per_head = (nk > 1 ? (size_t)nq * kBwdWarps * slot : 0) + (size_t)nq + (size_t)nk * npos;
  const size_t dvec_batch = (size_t)s.H * s.Tq;
  size_t wsf;
  float* ws = scratch_f32(ctx, &wsf);
  wsf = wsf > 5 ? wsf - 5 : 0;  // the ticket counter, and the partial sums' 16-byte alignment
  // A launch takes whole groups of query heads (their key/value head's CTAs visit them all).
  const int G = a0.group;
  if (!fused_ok(s, bias) || s.Tk == 0 || s.Tq == 0 || wsf < dvec_batch + G * per_head) {
    simple_backward(ctx, a0);
    return;
  }
  const size_t per_batch = dvec_batch + (size_t)s.H * per_head;
  int nb = wsf >= per_batch ? (int)(wsf / per_batch < (size_t)s.B ? wsf / per_batch : (size_t)s.B) : 1;
  int nh = wsf >= per_batch ? s.H : (int)((wsf - dvec_batch) / per_head) / G * G;
  if (attention_mode() == 2) nb = 1, nh = G;
  const int C = s.H * s.D;
  dispatch_dp(ATTN_PADDED_HEAD(s.D), [&](auto dpc) {
    constexpr int DP = decltype(dpc)::value;
    const bool has_bias = a0.table != nullptr, bgrad = a0.dtable != nullptr;
    const size_t smem = bwd_smem<DP>(has_bias, bgrad, a0.maxdist);
    for (int b0 = 0; b0 < s.B; b0 += nb) {
      AttnArgs a = a0;
      a.B = s.B - b0 < nb ? s.B - b0 : nb;
      const size_t qoff = (size_t)b0 * s.Tq * s.q_stride, kvoff = (size_t)b0 * s.Tk * s.kv_stride;
      const size_t ooff = (size_t)b0 * s.Tq * C, loff = (size_t)b0 * s.H * s.Tq;
      a.q += qoff, a.dq += qoff;
      a.k += kvoff, a.v += kvoff, a.dk += kvoff, a.dv += kvoff;
      a.out += ooff, a.dout += ooff;
      a.lse += loff;
      a.Dvec = ws;
      const long rows = (long)a.B * s.Tq * s.H;
      attn_bwd_rowdot_kernel<<<ceil_div(rows, kWarps), kThreads, 0, ctx->stream>>>(ws, a.out, a.dout, a.B, s.Tq,
                                                                                    s.H, s.D);
      CUDA_LAUNCH_CHECK();
      for (int h0 = 0; h0 < s.H; h0 += nh) {
        a.h0 = h0, a.Hc = s.H - h0 < nh ? s.H - h0 : nh;
        static_assert(BwdCfg<DP>::SLOT % 4 == 0, "16-byte partial-sum slots");
        if (slot != BwdCfg<DP>::SLOT) cuda_fail("attention backward", "scratch slot size", __FILE__, __LINE__);
        float* w = ws + ((size_t)a.B * dvec_batch + 3) / 4 * 4;  // 16-byte aligned float4 partial sums
        a.dq_acc = nk > 1 ? w : nullptr;
        w += nk > 1 ? (size_t)a.B * a.Hc * nq * kBwdWarps * BwdCfg<DP>::SLOT : 0;
        a.dq_flag = reinterpret_cast<int*>(w);
        const size_t nflags = (size_t)a.B * a.Hc * nq;
        a.ticket = reinterpret_cast<unsigned int*>(w + nflags);
        w += nflags + 1;
        a.bias_part = bgrad ? w : nullptr;
        CUDA_CHECK(cudaMemsetAsync(a.dq_flag, 0, (nflags + 1) * sizeof(int), ctx->stream));
        const size_t blocks = (size_t)nk * a.B * (a.Hc / G);
        if (blocks > INT32_MAX) cuda_fail("attention backward", "more than 2^31 key tiles", __FILE__, __LINE__);
        const dim3 grid((unsigned)blocks);
        if (bgrad) attn_bwd_kernel<DP, true, true><<<grid, kBwdThreads, smem, ctx->stream>>>(a);
        else if (has_bias) attn_bwd_kernel<DP, true, false><<<grid, kBwdThreads, smem, ctx->stream>>>(a);
        else attn_bwd_kernel<DP, false, false><<<grid, kBwdThreads, smem, ctx->stream>>>(a);
        CUDA_LAUNCH_CHECK();
        if (bgrad) {
          attn_bias_grad_kernel<<<a.Hc, 256, 0, ctx->stream>>>(a.dtable, a.bias_part, a.B, a.Hc, h0, s.H, nk, a.maxdist,
                                                                a.nbuckets, a.bidir);
          CUDA_LAUNCH_CHECK();
        }
      }
    }
  });
}
