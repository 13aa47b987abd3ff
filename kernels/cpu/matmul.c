// matmul.c: the linear layer, out = inp @ weight^T + bias, and its backward, fp32 CPU.
//
// All three products go through one register-tiled kernel, gemm_tile below, that computes a
// TM x TN block of outputs at once: for each k in increasing order it adds A[m,k] * B[k,j]
// to TM*TN independent accumulators. The innermost loop runs over TN contiguous columns of
// B, so it vectorizes without reassociating any sum, and every output element is the plain
// sequential sum over k (then + bias, or added once to an accumulating output). Which
// thread computes a tile never changes that order, so results are bit-identical for any
// OMP_NUM_THREADS.
#include <stdlib.h>

#include "kernels/kernels.h"

// Tile shape: TM*TN accumulators must fit the vector register file (32 zmm with AVX-512,
// 16 ymm with AVX2) with room for the B row and the broadcast. The shape only changes
// speed, never bits: each output is still the same sequential sum over k. (The build is
// -std=c11, which keeps GCC from contracting a*b+c into an FMA; even with FMAs the order
// would be fixed per binary.)
#if defined(__AVX512F__)
#define TM 8   // output rows per tile (broadcast operands)
#define TN 32  // output columns per tile (vector lanes), contiguous in B and in out
#else
#define TM 6
#define TN 16
#endif

// A is addressed as A[m*sam + k*sak] so that both a row-major operand and a transposed
// one (dout^T for dweight) can be read without a copy; B is row-major [K, ldb].
typedef struct {
  const float* A;
  size_t sam, sak;
  const float* B;
  size_t ldb;
  float* out;  // row-major [M, ldo]
  size_t ldo;
  const float* bias;  // per column, may be NULL
  int accumulate;     // out += result instead of out = result
  int M, K, Ncol;
} Gemm;

static void gemm_tile_full(const Gemm* g, int m0, int j0) {
  float acc[TM][TN] = {{0}};
  const float* a[TM];
  for (int r = 0; r < TM; r++) a[r] = g->A + (size_t)(m0 + r) * g->sam;
  for (int k = 0; k < g->K; k++) {
    const float* b = g->B + (size_t)k * g->ldb + j0;
    size_t ko = (size_t)k * g->sak;
    for (int r = 0; r < TM; r++) {
      float x = a[r][ko];
      for (int j = 0; j < TN; j++) acc[r][j] += x * b[j];
    }
  }
  for (int r = 0; r < TM; r++) {
    float* o = g->out + (size_t)(m0 + r) * g->ldo + j0;
    if (g->bias)
      for (int j = 0; j < TN; j++) acc[r][j] += g->bias[j0 + j];
    if (g->accumulate)
      for (int j = 0; j < TN; j++) o[j] += acc[r][j];
    else
      for (int j = 0; j < TN; j++) o[j] = acc[r][j];
  }
}

// Edge tiles: same arithmetic in the same order, just with runtime extents.
static void gemm_tile_edge(const Gemm* g, int m0, int j0) {
  int mr = g->M - m0 < TM ? g->M - m0 : TM;
  int nc = g->Ncol - j0 < TN ? g->Ncol - j0 : TN;
  float acc[TM][TN] = {{0}};
  for (int k = 0; k < g->K; k++) {
    const float* b = g->B + (size_t)k * g->ldb + j0;
    for (int r = 0; r < mr; r++) {
      float x = g->A[(size_t)(m0 + r) * g->sam + (size_t)k * g->sak];
      for (int j = 0; j < nc; j++) acc[r][j] += x * b[j];
    }
  }
  for (int r = 0; r < mr; r++) {
    float* o = g->out + (size_t)(m0 + r) * g->ldo + j0;
    for (int j = 0; j < nc; j++) {
      float v = acc[r][j];
      if (g->bias) v += g->bias[j0 + j];
      if (g->accumulate)
        o[j] += v;
      else
        o[j] = v;
    }
  }
}

static void gemm_run(const Gemm* g) {
  int tm = (g->M + TM - 1) / TM, tn = (g->Ncol + TN - 1) / TN;
  long ntiles = (long)tm * tn;
  // Column tile outer, row tile inner: consecutive tiles of a thread share a B panel.
#pragma omp parallel for schedule(static)
  for (long t = 0; t < ntiles; t++) {
    int m0 = (int)(t % tm) * TM, j0 = (int)(t / tm) * TN;
    if (m0 + TM <= g->M && j0 + TN <= g->Ncol)
      gemm_tile_full(g, m0, j0);
    else
      gemm_tile_edge(g, m0, j0);
  }
}

void matmul_forward(KernelCtx* ctx, act_t* out, const act_t* inp, const act_t* weight,
                    const act_t* bias, int N, int C, int OC) {
  // weight is [OC, C]; the tile kernel wants the reduction index k = c on the rows of B,
  // so transpose once (O(C*OC), small next to the O(N*C*OC) product).
  float* wT = malloc((size_t)C * OC * sizeof(float));
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; c++)
    for (int o = 0; o < OC; o++) wT[(size_t)c * OC + o] = weight[(size_t)o * C + c];
  Gemm g = {.A = inp, .sam = (size_t)C, .sak = 1, .B = wT, .ldb = (size_t)OC, .out = out,
            .ldo = (size_t)OC, .bias = bias, .accumulate = 0, .M = N, .K = C, .Ncol = OC};
  gemm_run(&g);
  free(wT);
}

void matmul_backward(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias,
                     const act_t* dout, const act_t* inp, const act_t* weight, int N, int C,
                     int OC) {
  if (dinp) {  // dinp[N,C] = dout[N,OC] @ weight[OC,C]: weight already has k = o on rows
    Gemm g = {.A = dout, .sam = (size_t)OC, .sak = 1, .B = weight, .ldb = (size_t)C,
              .out = dinp, .ldo = (size_t)C, .bias = NULL, .accumulate = 0, .M = N, .K = OC,
              .Ncol = C};
    gemm_run(&g);
  }
  {  // dweight[OC,C] += dout^T[OC,N] @ inp[N,C]: A read transposed, k = n summed in order
    Gemm g = {.A = dout, .sam = 1, .sak = (size_t)OC, .B = inp, .ldb = (size_t)C,
              .out = dweight, .ldo = (size_t)C, .bias = NULL, .accumulate = 1, .M = OC, .K = N,
              .Ncol = C};
    gemm_run(&g);
  }
  if (dbias) {  // column sums of dout; each block of outputs owned by one thread
    int nb = (OC + TN - 1) / TN;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nb; blk++) {
      int o0 = blk * TN, len = o0 + TN <= OC ? TN : OC - o0;
      float acc[TN] = {0};
      for (int n = 0; n < N; n++) {
        const float* d = dout + (size_t)n * OC + o0;
        for (int j = 0; j < len; j++) acc[j] += d[j];
      }
      for (int j = 0; j < len; j++) dbias[o0 + j] += acc[j];
    }
  }
}

// GELU after the product, unfused: the same arithmetic as matmul_forward then gelu_forward.
void matmul_forward_gelu(KernelCtx* ctx, act_t* out, act_t* pre, const act_t* inp, const act_t* weight,
                         const act_t* bias, int N, int C, int OC) {
  matmul_forward(ctx, pre, inp, weight, bias, N, C, OC);
  gelu_forward(ctx, out, pre, (size_t)N * OC);
}
