// matmul.cu: the linear layer on cuBLASLt: out = inp @ weight^T + bias, its backward, and a
// variant with GELU fused into the epilogue. bf16 operands, fp32 accumulation
// (CUBLAS_COMPUTE_32F), bf16 activations out, fp32 weight gradients accumulated in place.
//
// Row-major API on column-major cuBLASLt. A row-major [R, K] matrix with leading dimension K
// is, byte for byte, the column-major [K, R] matrix (its transpose) with the same ld. So each
// product is computed transposed, D^T = op(A) op(B) with column-major operands:
//
//   forward   out[N,OC] = inp[N,C] @ W[OC,C]^T
//             out^T (OC x N, ld OC) = op_T(W as C x OC, ld C) . (inp as C x N, ld C)
//             m = OC, n = N, k = C; transa = T, transb = N; bias[OC] is per row of D
//             (CUBLASLT_EPILOGUE_BIAS adds bias[i] to row i of D), i.e. per output feature.
//   dinp      dinp[N,C] = dout[N,OC] @ W[OC,C]
//             dinp^T (C x N, ld C) = (W as C x OC, ld C) . (dout as OC x N, ld OC)
//             m = C, n = N, k = OC; transa = N, transb = N; beta = 0 (overwrite)
//   dweight   dW[OC,C] += dout^T @ inp
//             dW^T (C x OC, ld C, fp32) = (inp as C x N, ld C) . op_T(dout as OC x N, ld OC)
//             m = C, n = OC, k = N; transa = N, transb = T; beta = 1 (accumulate), C = D
//   dbias     column sums of dout: a deterministic one-launch kernel (reduce.cu), not the BGRAD
//             epilogue, which overwrites instead of accumulating.
//   dinp through a GELU (matmul_backward_gelu): the dinp product with CUBLASLT_EPILOGUE_DGELU,
//             D = gelu'(aux) * (A.B), aux = the GELU's input (the forward's GELU_AUX output,
//             laid out like D: C x N, ld C), so the GELU backward is no pass of its own.
//
// Plans. Descriptors, the four layouts and the heuristic's algorithm are created once per
// shape and cached (struct MatmulCache, an open-addressing hash table in the ctx); a call only
// sets the bias/aux pointers on the cached descriptor and launches. The key includes the
// operands' actual pointer alignments (the heuristic is told them through the MIN_ALIGNMENT
// preferences; its default assumes 256 bytes, while parameters inside a flat unit buffer are
// only 128-byte aligned), so an algorithm is never used on less aligned data than it was
// chosen for. Determinism: cuBLASLt gives the same bits run to run for a fixed algorithm and
// workspace on the same GPU; the cache pins the algorithm per shape.
//
// Epilogues chosen, not hoped for: where the heuristic has no algorithm for a GELU epilogue
// (GELU_AUX, DGELU), or the epilogue is turned off (matmul_gelu_epilogue: --gelu-epilogue off,
// as llm.c ships, which measured it slower in bf16), the product runs without it and the GELU
// kernel follows (activation.cu: gelu_forward, gelu_backward); matmul_gelu_fuses says which, for
// the start-up report. Only where the heuristic has no algorithm even for the plain product
// (unusual shapes or alignments) does a simple tiled fp32-accumulating kernel compute it
// instead (same semantics, far slower), with a note on stderr the first time for each shape.
#include <string.h>

#include "kernels/cuda/common.cuh"

enum { MM_FORWARD = 0, MM_FORWARD_GELU = 1, MM_DINP = 2, MM_DWEIGHT = 3, MM_DINP_DGELU = 4 };

typedef struct {
  int kind, m, n, k, has_bias;
  int align_a, align_b, align_c;  // bytes, powers of two up to 256
} MatmulKey;

typedef struct {
  int used;
  MatmulKey key;
  int has_algo;  // 0: cuBLASLt found no algorithm, the fallback kernel runs instead
  int warned;    // the fallback's note was printed for this shape
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c, d;
  cublasLtMatmulAlgo_t algo;
} MatmulPlan;

// A GPT or T5 model has a few dozen distinct products (x a few pointer alignments); the
// table is kept at most 3/4 full so probes stay short.
#define MATMUL_CACHE_SIZE 1024
struct MatmulCache {
  int count;
  MatmulPlan e[MATMUL_CACHE_SIZE];
};

void matmul_cache_create(KernelCtx* ctx) {
  ctx->matmul_cache = (struct MatmulCache*)calloc(1, sizeof(struct MatmulCache));
  if (!ctx->matmul_cache) cuda_fail("calloc(MatmulCache)", "out of host memory", __FILE__, __LINE__);
}

void matmul_cache_destroy(KernelCtx* ctx) {
  struct MatmulCache* mc = ctx->matmul_cache;
  if (!mc) return;
  for (int i = 0; i < MATMUL_CACHE_SIZE; i++) {
    MatmulPlan* p = &mc->e[i];
    if (!p->used) continue;
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->c));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->d));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
  }
  free(mc);
  ctx->matmul_cache = NULL;
}

// Largest power of two (up to 256) dividing the address: what the heuristic may assume.
static int ptr_align(const void* p) {
  uintptr_t a = (uintptr_t)p;
  int al = 256;
  while (al > 2 && (a % (uintptr_t)al) != 0) al >>= 1;
  return al;
}

static uint32_t key_hash(const MatmulKey* k) {
  const int* w = (const int*)k;
  uint32_t h = 2166136261u;  // FNV-1a over the key's ints
  for (size_t i = 0; i < sizeof(MatmulKey) / sizeof(int); i++) {
    h ^= (uint32_t)w[i];
    h *= 16777619u;
  }
  return h;
}

static void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* v, size_t n) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, v, n));
}

// Creates the descriptor, layouts and algorithm of one product (see the table at the top).
static void plan_create(KernelCtx* ctx, MatmulPlan* p, const MatmulKey* k) {
  p->key = *k;
  cublasOperation_t ta, tb;
  cudaDataType_t ab_type = ACT16_CUDA_TYPE, cd_type = ACT16_CUDA_TYPE;
  // stored (rows, cols, ld) of A, B and C/D, column-major
  uint64_t ar, ac, br, bc, dr, dc;
  int64_t lda, ldb, ldd;
  if (k->kind == MM_FORWARD || k->kind == MM_FORWARD_GELU) {  // m=OC, n=N, k=C
    ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    ar = k->k, ac = k->m, lda = k->k;  // W as C x OC
    br = k->k, bc = k->n, ldb = k->k;  // inp as C x N
    dr = k->m, dc = k->n, ldd = k->m;  // out as OC x N
  } else if (k->kind == MM_DINP || k->kind == MM_DINP_DGELU) {  // m=C, n=N, k=OC
    ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    ar = k->m, ac = k->k, lda = k->m;  // W as C x OC
    br = k->k, bc = k->n, ldb = k->k;  // dout as OC x N
    dr = k->m, dc = k->n, ldd = k->m;  // dinp as C x N
  } else {  // MM_DWEIGHT: m=C, n=OC, k=N
    ta = CUBLAS_OP_N, tb = CUBLAS_OP_T;
    ar = k->m, ac = k->k, lda = k->m;  // inp as C x N
    br = k->n, bc = k->k, ldb = k->n;  // dout as OC x N
    dr = k->m, dc = k->n, ldd = k->m;  // dW as C x OC, fp32
    cd_type = CUDA_R_32F;
  }
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (k->kind == MM_FORWARD) epi = k->has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (k->kind == MM_FORWARD_GELU) epi = k->has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (k->kind == MM_DINP_DGELU) epi = CUBLASLT_EPILOGUE_DGELU;
  set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (k->has_bias) {
    cudaDataType_t bt = ACT16_CUDA_TYPE;
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
  }
  if (k->kind == MM_FORWARD_GELU || k->kind == MM_DINP_DGELU) {  // the pre-GELU values, laid out like D
    int64_t aux_ld = ldd;
    cudaDataType_t at = ACT16_CUDA_TYPE;
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at);
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, ab_type, ar, ac, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, ab_type, br, bc, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, cd_type, dr, dc, ldd));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, cd_type, dr, dc, ldd));

  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = ctx->workspace_bytes;
  uint32_t al_a = (uint32_t)k->align_a, al_b = (uint32_t)k->align_b, al_c = (uint32_t)k->align_c;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
  cublasLtMatmulHeuristicResult_t res;
  int nres = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->desc, p->a, p->b, p->c, p->d, pref, 1, &res, &nres);
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  p->has_algo = (st == CUBLAS_STATUS_SUCCESS && nres > 0 && res.state == CUBLAS_STATUS_SUCCESS);
  if (p->has_algo) p->algo = res.algo;
  p->used = 1;
}

static MatmulPlan* plan_get(KernelCtx* ctx, const MatmulKey* k) {
  struct MatmulCache* mc = ctx->matmul_cache;
  if (!mc)  // a communication-stream view (kernels_stream_ctx) has no plans and no workspace
    cuda_fail("matmul plan cache", "matmul called on a context without one (a kernels_stream_ctx view)", __FILE__,
              __LINE__);
  uint32_t h = key_hash(k);
  for (int probe = 0; probe < MATMUL_CACHE_SIZE; probe++) {
    MatmulPlan* p = &mc->e[(h + probe) % MATMUL_CACHE_SIZE];
    if (!p->used) {
      if (mc->count >= MATMUL_CACHE_SIZE * 3 / 4) break;  // keep probes short
      plan_create(ctx, p, k);
      mc->count++;
      return p;
    }
    if (!memcmp(&p->key, k, sizeof *k)) return p;
  }
  cuda_fail("matmul plan cache", "more than 768 distinct matmul shapes; raise MATMUL_CACHE_SIZE", __FILE__, __LINE__);
  return NULL;
}

// ---- fallback kernel ---------------------------------------------------------------------
// out(i, j) = sum_k A(i, k) B(k, j) in k order (fp32), with A(i, k) = A[i*sai + k*sak] and
// B(k, j) = B[k*sbk + j*sbj]; out row-major [M, ldo]. Epilogue: + bias[j]; then either
// accumulate into fp32 (out_f32 += ...) or store bf16 (a GELU follows as its own kernel).
#define FB_TILE 16

__global__ void matmul_fallback_kernel(act16* out_act, float* out_f32, const act16* A,
                                       size_t sai, size_t sak, const act16* B, size_t sbk,
                                       size_t sbj, const act16* bias, int M, int Ncol, int K,
                                       size_t ldo) {
  __shared__ float as[FB_TILE][FB_TILE + 1], bs[FB_TILE][FB_TILE + 1];
  int ti = threadIdx.y, tj = threadIdx.x;
  int i = blockIdx.y * FB_TILE + ti, j = blockIdx.x * FB_TILE + tj;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += FB_TILE) {
    int ai = blockIdx.y * FB_TILE + ti, ak = k0 + tj;  // A tile: rows i, columns k
    as[ti][tj] = (ai < M && ak < K) ? act2f(A[ai * sai + ak * sak]) : 0.0f;
    int bk = k0 + ti, bj = blockIdx.x * FB_TILE + tj;  // B tile: rows k, columns j
    bs[ti][tj] = (bk < K && bj < Ncol) ? act2f(B[bk * sbk + bj * sbj]) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < FB_TILE; kk++) acc += as[ti][kk] * bs[kk][tj];
    __syncthreads();
  }
  if (i >= M || j >= Ncol) return;
  size_t o = (size_t)i * ldo + j;
  if (bias) acc += act2f(bias[j]);
  if (out_f32) out_f32[o] += acc;
  else out_act[o] = f2act(acc);
}

static void fallback(KernelCtx* ctx, MatmulPlan* p, act16* out_act, float* out_f32, const act16* A, size_t sai, size_t sak, const act16* B, size_t sbk, size_t sbj,
                     const act16* bias, int M, int Ncol, int K) {
  const MatmulKey* k = &p->key;
  if (!p->warned) {  // once per shape
    fprintf(stderr, "note: cuBLASLt has no algorithm for a matmul (kind %d, m=%d n=%d k=%d, alignments %d/%d/%d);"
            " using the slow fallback kernel\n", k->kind, k->m, k->n, k->k, k->align_a, k->align_b, k->align_c);
    p->warned = 1;
  }
  dim3 block(FB_TILE, FB_TILE), grid(ceil_div(Ncol, FB_TILE), ceil_div(M, FB_TILE));
  if (grid.y > 65535) cuda_fail("matmul fallback", "too many rows for the fallback kernel", __FILE__, __LINE__);
  matmul_fallback_kernel<<<grid, block, 0, ctx->stream>>>(out_act, out_f32, A, sai, sak, B, sbk, sbj, bias, M, Ncol,
                                                          K, (size_t)Ncol);
  CUDA_LAUNCH_CHECK();
}

static void run_plan(KernelCtx* ctx, MatmulPlan* p, const void* A, const void* B, void* D,
                     const void* bias, void* aux, float beta) {
  if (p->key.has_bias) set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  if (p->key.kind == MM_FORWARD_GELU || p->key.kind == MM_DINP_DGELU)
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
  float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(ctx->lt, p->desc, &alpha, A, p->a, B, p->b, &beta, D, p->c, D, p->d, &p->algo,
                              ctx->workspace, ctx->workspace_bytes, ctx->stream));
}

// Whether the GELU epilogues are used where cuBLASLt has them (matmul_gelu_epilogue).
static int g_gelu_epilogue = 1;

extern "C" void matmul_gelu_epilogue(int on) { g_gelu_epilogue = on != 0; }

// The plan of a GELU product (forward: GELU_AUX, backward: DGELU) when the epilogue is on, the
// aux matrix allows it (a leading dimension divisible by 8, 16-byte aligned) and cuBLASLt has an
// algorithm for it; else NULL: the plain product, then the GELU kernel.
static MatmulPlan* gelu_plan(KernelCtx* ctx, const MatmulKey* k, int ld, const void* pre) {
  if (!g_gelu_epilogue || ld % 8 != 0 || (uintptr_t)pre % 16 != 0) return NULL;
  MatmulPlan* p = plan_get(ctx, k);
  return p->has_algo ? p : NULL;
}

static void forward(KernelCtx* ctx, act_t* out, const act_t* inp, const act_t* weight, const act_t* bias, int N, int C,
                    int OC) {
  if (N <= 0 || OC <= 0) return;
  if (C <= 0) cuda_fail("matmul_forward", "C must be positive", __FILE__, __LINE__);
  MatmulKey k = {MM_FORWARD, OC, N, C, bias != NULL, ptr_align(weight), ptr_align(inp), ptr_align(out)};
  MatmulPlan* p = plan_get(ctx, &k);
  if (p->has_algo)
    run_plan(ctx, p, weight, inp, out, bias, NULL, 0.0f);
  else  // out[n][o] = sum_c inp[n*C + c] * weight[o*C + c]
    fallback(ctx, p, as_act16(out), NULL, as_act16(inp), (size_t)C, 1, as_act16(weight), 1,
             (size_t)C, bias ? as_act16(bias) : NULL, N, OC, C);
}

extern "C" void matmul_forward(KernelCtx* ctx, act_t* out, const act_t* inp, const act_t* weight,
                               const act_t* bias, int N, int C, int OC) {
  forward(ctx, out, inp, weight, bias, N, C, OC);
}

extern "C" void matmul_forward_gelu(KernelCtx* ctx, act_t* out, act_t* pre, const act_t* inp,
                                    const act_t* weight, const act_t* bias, int N, int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  if (C <= 0) cuda_fail("matmul_forward_gelu", "C must be positive", __FILE__, __LINE__);
  MatmulKey k = {MM_FORWARD_GELU, OC, N, C, bias != NULL, ptr_align(weight), ptr_align(inp),
                 min(ptr_align(out), ptr_align(pre))};
  MatmulPlan* p = gelu_plan(ctx, &k, OC, pre);
  if (p) {
    run_plan(ctx, p, weight, inp, out, bias, pre, 0.0f);
    return;
  }
  forward(ctx, pre, inp, weight, bias, N, C, OC);
  gelu_forward(ctx, out, pre, (size_t)N * OC);
}

// For the start-up report: how a layer's GELU products of these shapes run here, the forward's
// and the backward's (dinp), with the operands at the 16 bytes of alignment every buffer the
// trainer plans has: 1 fused (cuBLASLt's epilogue), 0 the plain product and the GELU kernel (no
// algorithm), -1 the same because the epilogue is off.
extern "C" void matmul_gelu_fuses(KernelCtx* ctx, int N, int C, int OC, int has_bias, int* forward_fuses,
                                  int* backward_fuses) {
  const void* aligned16 = (const void*)(uintptr_t)16;
  MatmulKey f = {MM_FORWARD_GELU, OC, N, C, has_bias, 16, 16, 16};
  MatmulKey b = {MM_DINP_DGELU, OC, N, C, 0, 16, 16, 16};  // dinp of the layer after the GELU: C_next = OC
  *forward_fuses = !g_gelu_epilogue ? -1 : gelu_plan(ctx, &f, OC, aligned16) != NULL;
  *backward_fuses = !g_gelu_epilogue ? -1 : gelu_plan(ctx, &b, OC, aligned16) != NULL;
}

// dinp (through the GELU whose input was `pre`, when pre is not NULL), dweight and dbias.
static void backward(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias, const act_t* dout, const act_t* inp,
                     const act_t* weight, const act_t* pre, int N, int C, int OC) {
  if (N <= 0 || C <= 0 || OC <= 0) return;
  if (dinp) {
    // Through a GELU: the DGELU epilogue where gelu_plan finds it, else the plain product and
    // gelu_backward.
    MatmulKey kg = {MM_DINP_DGELU, C, N, OC, 0, ptr_align(weight), ptr_align(dout), min(ptr_align(dinp), ptr_align(pre))};
    MatmulPlan* pg = pre ? gelu_plan(ctx, &kg, C, pre) : NULL;
    if (pg) {
      run_plan(ctx, pg, weight, dout, dinp, NULL, (void*)pre, 0.0f);
    } else {
      MatmulKey k = {MM_DINP, C, N, OC, 0, ptr_align(weight), ptr_align(dout), ptr_align(dinp)};
      MatmulPlan* p = plan_get(ctx, &k);
      if (p->has_algo)
        run_plan(ctx, p, weight, dout, dinp, NULL, NULL, 0.0f);
      else  // dinp[n][c] = sum_o dout[n*OC + o] * weight[o*C + c]
        fallback(ctx, p, as_act16(dinp), NULL, as_act16(dout), (size_t)OC, 1, as_act16(weight),
                 (size_t)C, 1, NULL, N, C, OC);
      if (pre) gelu_backward(ctx, dinp, pre, dinp, (size_t)N * C);
    }
  }
  {
    MatmulKey k = {MM_DWEIGHT, C, OC, N, 0, ptr_align(inp), ptr_align(dout), ptr_align(dweight)};
    MatmulPlan* p = plan_get(ctx, &k);
    if (p->has_algo)
      run_plan(ctx, p, inp, dout, dweight, NULL, NULL, 1.0f);
    else  // dweight[o][c] += sum_n dout[n*OC + o] * inp[n*C + c]
      fallback(ctx, p, NULL, dweight, as_act16(dout), 1, (size_t)OC, as_act16(inp), (size_t)C, 1,
               NULL, OC, C, N);
  }
  if (dbias) column_sums_accumulate(ctx, dbias, as_act16(dout), N, OC);
}

extern "C" void matmul_backward(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias,
                                const act_t* dout, const act_t* inp, const act_t* weight, int N,
                                int C, int OC) {
  backward(ctx, dinp, dweight, dbias, dout, inp, weight, NULL, N, C, OC);
}

extern "C" void matmul_backward_gelu(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias, const act_t* dout,
                                     const act_t* inp, const act_t* weight, const act_t* pre, int N, int C, int OC) {
  backward(ctx, dinp, dweight, dbias, dout, inp, weight, pre, N, C, OC);
}
