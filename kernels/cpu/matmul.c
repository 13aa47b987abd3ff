// matmul.c: the linear layer, out = inp @ weight^T + bias, and its backward, fp32 CPU.
//
// The weight stays in its stored layout [OC, C]; the row form copies the slices of its operands
// it is about to reuse into a thread's own buffers (below). Two register-tiled kernels cover
// the three products:
//
//   dot form    out[n,o] = sum_c inp[n,c] * w[o,c]          (forward: both operands have the
//               reduction index contiguous). Each output is summed in VL = 16 lanes, lane l
//               taking c = l, l+16, l+32, ... in increasing order (one fused multiply-add per
//               term), then the lanes are added in a fixed pairwise tree (lane_sum) and the
//               bias last. Tiles of DM rows x DO weight rows share their operand loads.
//   row form    out[m,j] (+)= sum_k A[m,k] * B[k,j]          (input gradient, B = w [OC, C];
//               weight gradient, A = dout^T, B = inp). The innermost loop runs over contiguous
//               columns j of B, so each output is the plain sequential chain of fused
//               multiply-adds over k, from 0, in increasing k.
//
// Both orders are properties of the output element alone: the tile shapes, the cache blocks,
// the vector registers the build targets (vec.h: AVX-512, AVX2 or plain C) and which thread
// computes a tile never change a bit, so results are bit-identical for any OMP_NUM_THREADS and
// any target. Fused multiply-adds are explicit (the build is -std=c11, which keeps GCC from
// contracting a*b+c on its own): vec.h's vn_fma is the target's FMA instruction, or fmaf, the
// same correctly rounded operation either way. The tiles are sized in the target's registers
// (VEC_REGS), so a 16-register AVX2 machine runs tiles half the size of AVX-512's.
//
// Cache blocking (sizes change speed only): the row form runs over the reduction index in
// chunks of KC, keeping the running sums of a tile between chunks (in `out`, or in a buffer of
// the task's own when out must be added to: a float chain stored and reloaded is the same
// chain), so a KC x (block columns) slice of B is reused from cache by every row tile; this is
// what keeps the lm_head's input gradient (K = the vocabulary) from streaming the weight once
// per row tile. Each chunk's A rows and B columns are first copied into panels in the order the
// tiles read them (RowChunk): the rows of dout^T and of the weight lie thousands of floats
// apart, where a tile's cache lines would share a few cache sets. The dot form takes a block of
// weight rows per task and runs all token rows against it, so every weight is read from memory
// once per call.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/kernels.h"

// ---- dot form: out[n,o] = sum_c A[n,c] * W[o,c] (+ bias[o]) ---------------------------

// A tile of DM token rows x DO weight rows keeps DM * DO * VP accumulator registers and
// shares its operand loads: per 16-lane step, VP * (DM + DO) loads for DM * DO * VP FMAs.
#if VEC_REGS >= 32
#define DM 4  // 24 accumulators, 6 weight registers and one input register of the 32
#define DO 6
#else
#define DM 3  // 12 accumulators, DO weight registers and one input register of the 16
#define DO (4 / VP)
#endif

// Every dot-form output ends the same way: the lanes in vec.h's fixed tree, then the bias.
static inline float dot_finish(vf v, const float* bias, int o) {
  float s = lane_sum(v);
  return bias ? s + bias[o] : s;
}

static void dot_tile_full(float* out, const float* A, const float* W, const float* bias, int n0,
                          int o0, int C, int OC) {
  vn acc[DM][DO][VP];
  for (int r = 0; r < DM; r++)
    for (int q = 0; q < DO; q++)
      for (int p = 0; p < VP; p++) acc[r][q][p] = vn_zero();
  const float* a[DM];
  const float* w[DO];
  for (int r = 0; r < DM; r++) a[r] = A + (size_t)(n0 + r) * C;
  for (int q = 0; q < DO; q++) w[q] = W + (size_t)(o0 + q) * C;
  int c = 0;
  for (; c + VL <= C; c += VL)
#pragma GCC unroll 16
    for (int p = 0; p < VP; p++) {  // lanes p * NL .. p * NL + NL - 1 of the step
      vn wv[DO];
      for (int q = 0; q < DO; q++) wv[q] = vn_pin(vn_load(w[q] + c + p * NL));
      for (int r = 0; r < DM; r++) {
        vn av = vn_pin(vn_load(a[r] + c + p * NL));
        for (int q = 0; q < DO; q++) acc[r][q][p] = vn_fma(av, wv[q], acc[r][q][p]);
      }
    }
  for (int r = 0; r < DM; r++)
    for (int q = 0; q < DO; q++) {
      vf v;
      for (int p = 0; p < VP; p++) v.r[p] = acc[r][q][p];
      v = vfma_tail(a[r] + c, w[q] + c, v, C - c);
      out[(size_t)(n0 + r) * OC + o0 + q] = dot_finish(v, bias, o0 + q);
    }
}

// One output, the same lanes in the same order as a full tile.
static float dot_one(const float* a, const float* w, const float* bias, int o, int C) {
  float s = dot_lanes(a, w, C);
  return bias ? s + bias[o] : s;
}

// Weight rows per task: a block stays in the L2 cache while every token row passes over it.
#define DOT_BLOCK 48

static void dot_gemm(float* out, const float* A, const float* W, const float* bias, int N,
                     int C, int OC) {
  int nblocks = (OC + DOT_BLOCK - 1) / DOT_BLOCK;
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH((size_t)N * C * OC))
  for (int blk = 0; blk < nblocks; blk++) {
    int ob = blk * DOT_BLOCK, oe = ob + DOT_BLOCK < OC ? ob + DOT_BLOCK : OC;
    for (int n0 = 0; n0 < N; n0 += DM) {
      int o0 = ob;
      if (n0 + DM <= N)
        for (; o0 + DO <= oe; o0 += DO) dot_tile_full(out, A, W, bias, n0, o0, C, OC);
      for (int n = n0; n < n0 + DM && n < N; n++)
        for (int o = o0; o < oe; o++)
          out[(size_t)n * OC + o] = dot_one(A + (size_t)n * C, W + (size_t)o * C, bias, o, C);
    }
  }
}

// ---- row form: out[m,j] (+)= sum_k A[m,k] * B[k,j] ------------------------------------

// A tile is RM rows x RN columns, two registers per row: RM * 2 accumulators, two B registers
// and one broadcast A value; per k, 2 + RM loads for 2 * RM FMAs.
#if VEC_REGS >= 32
#define RM 12  // 24 accumulators of the 32
#else
#define RM 6   // 12 accumulators of the 16
#endif
#define RN (2 * NL)  // columns per tile
#define KC 256       // reduction chunk
#define RB_ROWS 264  // rows of a task's block (a multiple of 12, 6 and 4)
#define RB_COLS 64   // columns of a block (a multiple of RN)
#define RB_GROUP 4   // blocks of columns in a task, at most

// A is addressed as A[m*sam + k*sak] so that both a row-major operand and a transposed one
// (dout^T for dweight) are read in place; B is row-major [K, ldb]; out is row-major [M, ldo].
typedef struct {
  const float* A;
  size_t sam, sak;
  const float* B;
  size_t ldb;
  float* out;
  size_t ldo;
  int accumulate;  // out += sum instead of out = sum
  int M, K, Ncol;
} RowGemm;

// The operands of one reduction chunk [k0, k1), copied where the tiles read them in order (a
// copy changes no value): A's rows in panels of RM, k-major, so that a tile's broadcasts for one
// k are adjacent (the transposed operand dout^T would otherwise take one cache line per k, its
// rows thousands of floats apart, and those lines share a few cache sets); and B's columns of
// one block in panels of RN, k-major, so that a tile's B rows are adjacent too (B's own rows, a
// weight's or an input's, share cache sets the same way).
// The running sums live in `run` between chunks: `out` itself, or, for an accumulating product,
// a buffer of the task's own, added to out when the chains are complete.
typedef struct {
  const float* a;  // panel p of the task's rows: a[p * RM * kc + (k - k0) * RM + r]
  const float* b;  // panel q of the block's columns: b[q * RN * kc + (k - k0) * RN + j]
  float* run;      // row m of the task at run + (m - mb) * ldr, from the task's first column
  size_t ldr;
  int k0, k1, last;
} RowChunk;

// Continues the chains of a `rows` x RN tile over the chunk (panels a and b): from 0
// in the first chunk, else from `run`; the last chunk finishes them into `out` (out = sum, or
// out += sum). `rows` is a constant at every call (RM, then 4 and 1 for the last rows of a
// task). The loops over rows are unrolled by request: the plain target's FMA is a loop of fmaf,
// which GCC counts as too large to unroll on its own, and a rolled loop keeps the accumulators
// in memory.
static inline __attribute__((always_inline)) void row_tile(const RowGemm* g, const RowChunk* ch,
                                                           const float* a, const float* b,
                                                           float* run, float* out, const int rows) {
  vn acc[RM][2];
#pragma GCC unroll 16
  for (int r = 0; r < rows; r++) {
    if (ch->k0 == 0) {
      acc[r][0] = acc[r][1] = vn_zero();
    } else {
      acc[r][0] = vn_load(run + r * ch->ldr), acc[r][1] = vn_load(run + r * ch->ldr + NL);
    }
  }
  for (int k = ch->k0; k < ch->k1; k++, a += RM, b += RN) {
    vn b0 = vn_load(b), b1 = vn_load(b + NL);
#pragma GCC unroll 16
    for (int r = 0; r < rows; r++) {
      vn x = vn_set1(a[r]);
      acc[r][0] = vn_fma(x, b0, acc[r][0]);
      acc[r][1] = vn_fma(x, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < rows; r++) {
    float* o = ch->last ? out + r * g->ldo : run + r * ch->ldr;
    if (ch->last && g->accumulate) {
      acc[r][0] = vn_add(acc[r][0], vn_load(o)), acc[r][1] = vn_add(acc[r][1], vn_load(o + NL));
    }
    vn_store(o, acc[r][0]), vn_store(o + NL, acc[r][1]);
  }
}

static void row_tile_full(const RowGemm* g, const RowChunk* ch, const float* a, const float* b,
                          float* run, float* out) {
  row_tile(g, ch, a, b, run, out, RM);
}
static void row_tile_4(const RowGemm* g, const RowChunk* ch, const float* a, const float* b,
                       float* run, float* out) {
  row_tile(g, ch, a, b, run, out, 4);
}
static void row_tile_1(const RowGemm* g, const RowChunk* ch, const float* a, const float* b,
                       float* run, float* out) {
  row_tile(g, ch, a, b, run, out, 1);
}

// Edge tiles of fewer than RN columns: the same chains, one output at a time.
static void row_tile_edge(const RowGemm* g, const RowChunk* ch, const float* a, const float* b,
                          float* run, float* out, int rows, int nc) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < nc; j++) {
      float s = ch->k0 == 0 ? 0.0f : run[r * ch->ldr + j];
      for (int k = 0; k < ch->k1 - ch->k0; k++) s = fmaf(a[k * RM + r], b[k * RN + j], s);
      float* o = ch->last ? out + r * g->ldo + j : run + r * ch->ldr + j;
      *o = ch->last && g->accumulate ? *o + s : s;
    }
}

// The copies of RowChunk: A's rows [mb, me) and B's columns [jb, je) over k in [k0, k1), each
// read along its contiguous index.
static void pack_a(const RowGemm* g, float* apack, int mb, int me, int k0, int k1, int kc) {
  for (int p0 = mb; p0 < me; p0 += RM) {
    float* panel = apack + (size_t)(p0 - mb) * kc;
    int rows = me - p0 < RM ? me - p0 : RM;
    if (g->sam == 1)  // A transposed: its rows are adjacent for one k
      for (int k = k0; k < k1; k++)
        for (int r = 0; r < rows; r++) panel[(size_t)(k - k0) * RM + r] = g->A[(size_t)(p0 + r) + (size_t)k * g->sak];
    else
      for (int r = 0; r < rows; r++) {
        const float* a = g->A + (size_t)(p0 + r) * g->sam;
        for (int k = k0; k < k1; k++) panel[(size_t)(k - k0) * RM + r] = a[(size_t)k * g->sak];
      }
  }
}
static void pack_b(const RowGemm* g, float* bpack, int jb, int je, int k0, int k1, int kc) {
  for (int q0 = jb; q0 < je; q0 += RN) {
    float* panel = bpack + (size_t)(q0 - jb) * kc;
    int cols = je - q0 < RN ? je - q0 : RN;
    const float* b = g->B + (size_t)k0 * g->ldb + q0;
    if (cols == RN)  // two vectors a row (memcpy of 64 bytes becomes a slow rep movs)
      for (int k = k0; k < k1; k++, b += g->ldb, panel += RN) vn_store(panel, vn_load(b)), vn_store(panel + NL, vn_load(b + NL));
    else
      for (int k = k0; k < k1; k++, b += g->ldb, panel += RN)
        for (int j = 0; j < cols; j++) panel[j] = b[j];
  }
}

// A task is a block of up to RB_ROWS rows by a group of up to RB_GROUP column blocks. Per
// reduction chunk of KC it copies its A rows once and each column block's B rows once, then
// passes every column tile of the block over every row tile. The groups are as wide as leaves
// about four tasks per thread, so that one copy of A serves up to 256 columns; the copies and
// the partial chains then take at most about 600 KiB per thread.
static void row_gemm(const RowGemm* g) {
  int mblocks = (g->M + RB_ROWS - 1) / RB_ROWS, jblocks = (g->Ncol + RB_COLS - 1) / RB_COLS;
  int threads = omp_get_max_threads();
  int want = (4 * threads + mblocks - 1) / mblocks, least = (jblocks + RB_GROUP - 1) / RB_GROUP;
  int groups = want > least ? want : least;
  if (groups > jblocks) groups = jblocks;
  int group_blocks = (jblocks + groups - 1) / groups;  // column blocks per group
  groups = (jblocks + group_blocks - 1) / group_blocks;
  int kc = g->K < KC ? g->K : KC;
  int rows = g->M < RB_ROWS ? g->M : RB_ROWS, cols = group_blocks * RB_COLS;
  int chunked = g->accumulate && g->K > kc;  // partial chains need a place of their own
  size_t apack_n = ((size_t)(rows + RM - 1) / RM * RM * kc + 15) / 16 * 16, bpack_n = (size_t)kc * RB_COLS;
  size_t run_n = chunked ? (size_t)rows * cols : 0;
  long ntasks = (long)mblocks * groups;
  // Consecutive tasks of a thread share the row block (the A rows, e.g. dout^T's columns).
#pragma omp parallel if (PARALLEL_WORTH((size_t)g->M * g->K * g->Ncol))
  {
    // 64-byte aligned, so that no vector load of the copies straddles two cache lines
    size_t bytes = sizeof(float) * (apack_n + bpack_n + run_n + 16);
    float* apack = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!apack) {
      fprintf(stderr, "matmul: no host memory for a thread's copies of its operands (%zu bytes)\n",
              sizeof(float) * (apack_n + bpack_n + run_n));
      abort();
    }
    float* bpack = apack + apack_n;
    float* block = chunked ? bpack + bpack_n : NULL;
#pragma omp for schedule(static)
    for (long t = 0; t < ntasks; t++) {
      int mb = (int)(t / groups) * RB_ROWS, gb = (int)(t % groups) * cols;
      int me = mb + RB_ROWS < g->M ? mb + RB_ROWS : g->M;
      int ge = gb + cols < g->Ncol ? gb + cols : g->Ncol;
      if (g->K == 0) {  // an empty sum: 0, or nothing added
        for (int m = mb; m < me; m++)
          for (int j = gb; j < ge && !g->accumulate; j++) g->out[(size_t)m * g->ldo + j] = 0.0f;
        continue;
      }
      for (int k0 = 0; k0 < g->K; k0 += kc) {
        RowChunk ch = {.a = apack, .b = bpack, .k0 = k0, .k1 = k0 + kc < g->K ? k0 + kc : g->K};
        ch.last = ch.k1 == g->K;
        ch.run = block ? block : g->out + (size_t)mb * g->ldo + gb;
        ch.ldr = block ? (size_t)cols : g->ldo;
        pack_a(g, apack, mb, me, ch.k0, ch.k1, kc);
        for (int jb = gb; jb < ge; jb += RB_COLS) {
          int je = jb + RB_COLS < ge ? jb + RB_COLS : ge;
          pack_b(g, bpack, jb, je, ch.k0, ch.k1, kc);
          for (int j0 = jb; j0 < je; j0 += RN)
            for (int m0 = mb; m0 < me; m0 += RM) {
              int mr = me - m0 < RM ? me - m0 : RM, nc = je - j0 < RN ? je - j0 : RN;
              const float* a = apack + (size_t)(m0 - mb) * kc;  // the panel of rows m0 .. m0 + RM - 1
              const float* b = bpack + (size_t)(j0 - jb) * kc;  // the panel of columns j0 .. j0 + RN - 1
              float* run = ch.run + (size_t)(m0 - mb) * ch.ldr + (j0 - gb);
              float* out = g->out + (size_t)m0 * g->ldo + j0;
              if (nc < RN)
                row_tile_edge(g, &ch, a, b, run, out, mr, nc);
              else if (mr == RM)
                row_tile_full(g, &ch, a, b, run, out);
              else
                for (int r = 0; r < mr;)
                  if (r + 4 <= mr)
                    row_tile_4(g, &ch, a + r, b, run + r * ch.ldr, out + r * g->ldo), r += 4;
                  else
                    row_tile_1(g, &ch, a + r, b, run + r * ch.ldr, out + r * g->ldo), r += 1;
            }
        }
      }
    }
    free(apack);
  }
}

// ---- the linear layer -----------------------------------------------------------------

void matmul_forward(KernelCtx* ctx, act_t* out, const act_t* inp, const act_t* weight,
                    const act_t* bias, int N, int C, int OC) {
  dot_gemm(out, inp, weight, bias, N, C, OC);
}

void matmul_backward(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias,
                     const act_t* dout, const act_t* inp, const act_t* weight, int N, int C,
                     int OC) {
  if (dinp) {  // dinp[N,C] = dout[N,OC] @ weight[OC,C]: the weight's rows are the k = o rows
    RowGemm g = {.A = dout, .sam = (size_t)OC, .sak = 1, .B = weight, .ldb = (size_t)C,
                 .out = dinp, .ldo = (size_t)C, .accumulate = 0, .M = N, .K = OC, .Ncol = C};
    row_gemm(&g);
  }
  {  // dweight[OC,C] += dout^T[OC,N] @ inp[N,C]: A read transposed, k = n summed in order
    RowGemm g = {.A = dout, .sam = 1, .sak = (size_t)OC, .B = inp, .ldb = (size_t)C,
                 .out = dweight, .ldo = (size_t)C, .accumulate = 1, .M = OC, .K = N, .Ncol = C};
    row_gemm(&g);
  }
  if (dbias) {  // column sums of dout in increasing n; each block of outputs owned by one thread
    int nb = (OC + RN - 1) / RN;
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH((size_t)N * OC))
    for (int blk = 0; blk < nb; blk++) {
      int o0 = blk * RN, len = o0 + RN <= OC ? RN : OC - o0;
      float acc[RN] = {0};
      for (int n = 0; n < N; n++) {
        const float* d = dout + (size_t)n * OC + o0;
        for (int j = 0; j < len; j++) acc[j] += d[j];
      }
      for (int j = 0; j < len; j++) dbias[o0 + j] += acc[j];
    }
  }
}

// GELU after the product, unfused: the same arithmetic as matmul_forward then gelu_forward.
void matmul_backward_gelu(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias, const act_t* dout,
                          const act_t* inp, const act_t* weight, const act_t* pre, int N, int C, int OC) {
  matmul_backward(ctx, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  if (dinp) gelu_backward(ctx, dinp, pre, dinp, (size_t)N * C);
}

void matmul_forward_gelu(KernelCtx* ctx, act_t* out, act_t* pre, const act_t* inp, const act_t* weight,
                         const act_t* bias, int N, int C, int OC) {
  matmul_forward(ctx, pre, inp, weight, bias, N, C, OC);
  gelu_forward(ctx, out, pre, (size_t)N * OC);
}
