// cublaslt_matmul.cpp (CUDA simulator): cublasLtMatmul and cublasLtMatmulAlgoGetHeuristic: the
// validation of a product against its descriptor and layouts, the algorithms the heuristic hands
// out (and the rule for finding none), and the computation, queued in stream order. What the
// subset implements and how it reports is described at the top of cublaslt.cpp.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cublaslt.h"
#include "order.h"
#include "sim.h"

using namespace lt;

// ---- the product -----------------------------------------------------------------------------

// Everything a product depends on except its pointers and scalars; also what an algorithm
// from the heuristic is bound to. Built with memset so two can be compared with memcmp.
struct Problem {
  int32_t transa, transb;
  uint32_t epilogue;
  int32_t ab_type, cd_type;
  int32_t bias_type, aux_type;  // -1 where the epilogue has no bias / no aux
  uint64_t m, n, k;
  int64_t lda, ldb, ldd;
  int64_t aux_ld;  // 0 without aux
};

static bool has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
static bool has_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}
// DGELU reads the aux matrix (the GELU's input); the GELU_AUX epilogues write it.
static bool aux_is_input(uint32_t e) { return e == CUBLASLT_EPILOGUE_DGELU; }

// Stored (rows, cols) of A and B for a problem: op(A) is m x k, op(B) is k x n.
static uint64_t a_rows(const Problem& p) { return p.transa == CUBLAS_OP_N ? p.m : p.k; }
static uint64_t a_cols(const Problem& p) { return p.transa == CUBLAS_OP_N ? p.k : p.m; }
static uint64_t b_rows(const Problem& p) { return p.transb == CUBLAS_OP_N ? p.k : p.n; }
static uint64_t b_cols(const Problem& p) { return p.transb == CUBLAS_OP_N ? p.n : p.k; }

static void describe(const Problem& p, char* buf, size_t n) {
  snprintf(buf, n,
           "m=%llu n=%llu k=%llu transa=%s transb=%s epilogue=%s A,B %s, C,D %s, lda=%lld ldb=%lld ldc=ldd=%lld"
           " aux_ld=%lld",
           (unsigned long long)p.m, (unsigned long long)p.n, (unsigned long long)p.k, op_name(p.transa),
           op_name(p.transb), epilogue_name(p.epilogue), type_name(p.ab_type), type_name(p.cd_type),
           (long long)p.lda, (long long)p.ldb, (long long)p.ldd, (long long)p.aux_ld);
}

// Checks a descriptor and four layouts against each other and fills *p; the heuristic and the
// product share it, so both accept exactly the same problems.
static cublasStatus_t validate(const char* fn, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                               cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                               Problem* p) {
  if (!is_live(g_descs, desc)) {
    cudasim::report("cublasLt", "%s: %p is not a live matmul descriptor", fn, (void*)desc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cublasLtMatrixLayout_t layouts[4] = {A, B, C, D};
  for (int i = 0; i < 4; i++)
    if (!is_live(g_layouts, layouts[i])) {
      cudasim::report("cublasLt", "%s: layout of %c (%p) is not a live layout", fn, "ABCD"[i], (void*)layouts[i]);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  if (A->type != B->type || (A->type != CUDA_R_16BF && A->type != CUDA_R_16F))
    cudasim::fatal("unimplemented", "%s: A and B of types %s and %s are not implemented (both CUDA_R_16BF or both "
                   "CUDA_R_16F are)", fn, type_name(A->type), type_name(B->type));
  if (D->type != A->type && D->type != CUDA_R_32F)
    cudasim::fatal("unimplemented", "%s: D of type %s with A and B of type %s is not implemented (D of their type or "
                   "CUDA_R_32F is)", fn, type_name(D->type), type_name(A->type));
  if (C->type != D->type)
    cudasim::fatal("unimplemented", "%s: C of type %s with D of type %s is not implemented (C and D of one type are)",
                   fn, type_name(C->type), type_name(D->type));
  if (C->ld != D->ld)
    cudasim::fatal("unimplemented", "%s: ldc = %lld differing from ldd = %lld is not implemented", fn,
                   (long long)C->ld, (long long)D->ld);

  memset(p, 0, sizeof *p);
  p->transa = desc->transa;
  p->transb = desc->transb;
  p->epilogue = desc->epilogue;
  p->ab_type = A->type;
  p->cd_type = D->type;
  p->m = D->rows;
  p->n = D->cols;
  p->k = desc->transa == CUBLAS_OP_N ? A->cols : A->rows;
  p->lda = A->ld;
  p->ldb = B->ld;
  p->ldd = D->ld;
  p->bias_type = has_bias(p->epilogue) ? (desc->bias_type < 0 ? D->type : desc->bias_type) : -1;
  p->aux_type = has_aux(p->epilogue) ? (desc->aux_type < 0 ? D->type : desc->aux_type) : -1;
  p->aux_ld = has_aux(p->epilogue) ? desc->aux_ld : 0;

  if (p->m == 0 || p->n == 0 || p->k == 0)
    cudasim::fatal("unimplemented", "%s: empty products (m=%llu n=%llu k=%llu) are not implemented", fn,
                   (unsigned long long)p->m, (unsigned long long)p->n, (unsigned long long)p->k);
  if (A->rows != a_rows(*p) || A->cols != a_cols(*p) || B->rows != b_rows(*p) || B->cols != b_cols(*p) ||
      C->rows != D->rows || C->cols != D->cols) {
    cudasim::report("cublasLt",
                    "%s: layouts do not fit one product: m x n = %llux%llu from D and k = %llu from A (transa=%s), so "
                    "A must be %llux%llu and is %llux%llu, B (transb=%s) must be %llux%llu and is %llux%llu, C must "
                    "be %llux%llu and is %llux%llu",
                    fn, (unsigned long long)p->m, (unsigned long long)p->n, (unsigned long long)p->k,
                    op_name(p->transa), (unsigned long long)a_rows(*p), (unsigned long long)a_cols(*p),
                    (unsigned long long)A->rows, (unsigned long long)A->cols, op_name(p->transb),
                    (unsigned long long)b_rows(*p), (unsigned long long)b_cols(*p), (unsigned long long)B->rows,
                    (unsigned long long)B->cols, (unsigned long long)p->m, (unsigned long long)p->n,
                    (unsigned long long)C->rows, (unsigned long long)C->cols);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  for (int i = 0; i < 4; i++)
    if (layouts[i]->ld < 0 || (uint64_t)layouts[i]->ld < layouts[i]->rows) {
      cudasim::report("cublasLt", "%s: ld%c = %lld is less than the %llu rows of %c (column-major)", fn, "abcd"[i],
                      (long long)layouts[i]->ld, (unsigned long long)layouts[i]->rows, "ABCD"[i]);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  if (has_bias(p->epilogue) && p->bias_type != p->ab_type)
    cudasim::fatal("unimplemented", "%s: a bias of type %s with A and B of type %s is not implemented (set "
                   "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE to theirs)", fn, type_name(p->bias_type),
                   type_name(p->ab_type));
  if (has_aux(p->epilogue)) {
    if (p->aux_type != p->ab_type)
      cudasim::fatal("unimplemented", "%s: an aux matrix of type %s with A and B of type %s is not implemented (set "
                     "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE to theirs)", fn, type_name(p->aux_type),
                     type_name(p->ab_type));
    // cuBLASLt's documented requirement for the GELU input matrix.
    if (p->aux_ld < 0 || (uint64_t)p->aux_ld < p->m || p->aux_ld % 8 != 0) {
      cudasim::report("cublasLt", "%s: %s needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD divisible by 8 and at least "
                      "m = %llu; it is %lld", fn, epilogue_name(p->epilogue), (unsigned long long)p->m,
                      (long long)p->aux_ld);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

// ---- algorithms ------------------------------------------------------------------------------
// An algorithm handed out by the heuristic is recorded here, with the problem and the
// alignment promises it was chosen for; cublasLtMatmul accepts only a recorded one, used for
// that same problem (the project pins one algorithm per shape, so anything else is a plan
// cache mistake) on pointers that keep the promises.

static const uint64_t kAlgoMagic = 0x43554441'53494d41ull;  // marks a simulator algorithm
// The workspace a simulated algorithm claims (never more than the preference allows), as
// split-K algorithms do; it is scribbled over on each product, so a workspace that is too
// small, not allocated, or shared with live data shows up.
static const uint64_t kAlgoWorkspace = 64 << 10;

struct AlgoRecord {
  cublasLtMatmulAlgo_t algo;
  Problem problem;
  uint32_t min_align[4];  // the preference's promises for A, B, C, D
  uint64_t workspace;     // bytes the algorithm needs
};
static std::vector<AlgoRecord> g_algos;

// data[]: magic, index into g_algos, workspace, the four alignments, and a check word.
static uint64_t algo_check_word(const cublasLtMatmulAlgo_t& a) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 7; i++) h = (h ^ a.data[i]) * 0x100000001b3ull;
  return h;
}

static bool find_algo(const cublasLtMatmulAlgo_t* algo, AlgoRecord* out) {
  if (algo->data[0] != kAlgoMagic || algo->data[7] != algo_check_word(*algo)) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  if (algo->data[1] >= g_algos.size()) return false;
  const AlgoRecord& r = g_algos[algo->data[1]];
  if (memcmp(&r.algo, algo, sizeof *algo) != 0) return false;
  *out = r;
  return true;
}

// CUDASIM_LT_NO_ALGO: 1 finds no algorithm for any product, gelu none for the GELU epilogues
// (GELU_AUX, GELU_AUX_BIAS, DGELU: as a cuBLASLt version or GPU without them would).
static bool no_algo_forced(uint32_t epilogue) {
  const char* e = getenv("CUDASIM_LT_NO_ALGO");
  if (!e || !*e || !strcmp(e, "0")) return false;
  if (!strcmp(e, "1")) return true;
  if (!strcmp(e, "gelu"))
    return epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           epilogue == CUBLASLT_EPILOGUE_DGELU;
  cudasim::fatal("cublasLt", "CUDASIM_LT_NO_ALGO=%s: expected 0, 1 or gelu", e);
}

// When the simulated heuristic finds no algorithm (returning CUBLAS_STATUS_NOT_SUPPORTED and
// returnAlgoCount = 0, as cuBLASLt does), so the caller's fallback runs. The rule: a GPU's
// tensor-core kernels move operands in 16-byte vectors, so every column of every matrix must
// start on a 16-byte boundary. That needs both the base pointer (which the heuristic never
// sees: the caller promises it through the MIN_ALIGNMENT preferences; bias and aux pointers,
// when already set on the descriptor, are seen) and the leading dimension in bytes to be
// multiples of 16. Real cuBLASLt has slower kernels for some other cases, but which ones
// varies by version and GPU; finding none here makes every such shape exercise the
// project's fallback. CUDASIM_LT_NO_ALGO=1 forces "none" for every shape, so a test can run
// the fallback kernel everywhere.
static const char* heuristic_finds_none(const Problem& p, const cublasLtMatmulDesc_t desc,
                                        const cublasLtMatmulPreference_t pref) {
  if (no_algo_forced(p.epilogue)) return "CUDASIM_LT_NO_ALGO";
  for (int i = 0; i < 4; i++)
    if (pref->min_align[i] < 16) return "an operand aligned to less than 16 bytes";
  const int64_t ld_bytes[4] = {p.lda * 2, p.ldb * 2, p.ldd * (int64_t)type_size(p.cd_type),
                               p.aux_ld * 2};  // aux is 16-bit; 0 without aux
  for (int i = 0; i < 4; i++)
    if (ld_bytes[i] % 16 != 0) return "a leading dimension that is not a multiple of 16 bytes";
  if ((has_bias(p.epilogue) && (uintptr_t)desc->bias % 16 != 0) ||
      (has_aux(p.epilogue) && (uintptr_t)desc->aux % 16 != 0))
    return "a bias or aux pointer aligned to less than 16 bytes";
  return NULL;
}

extern "C" cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                                         cublasLtMatmulDesc_t operationDesc,
                                                         cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                         cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                         cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                                         cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                         int* returnAlgoCount) {
  const char* fn = "cublasLtMatmulAlgoGetHeuristic";
  if (returnAlgoCount) *returnAlgoCount = 0;
  if (!is_live(g_handles, lightHandle)) {
    cudasim::report("cublasLt", "%s: %p is not a live handle", fn, (void*)lightHandle);
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount) {
    cudasim::report("cublasLt", "%s: requestedAlgoCount = %d, heuristicResultsArray = %p, returnAlgoCount = %p", fn,
                    requestedAlgoCount, (void*)heuristicResultsArray, (void*)returnAlgoCount);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!is_live(g_prefs, preference)) {
    cudasim::report("cublasLt", "%s: %p is not a live preference", fn, (void*)preference);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Problem p;
  cublasStatus_t st = validate(fn, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (heuristic_finds_none(p, operationDesc, preference)) return CUBLAS_STATUS_NOT_SUPPORTED;

  AlgoRecord r;
  memset(&r, 0, sizeof r);
  r.problem = p;
  memcpy(r.min_align, preference->min_align, sizeof r.min_align);
  r.workspace = preference->max_workspace < kAlgoWorkspace ? preference->max_workspace : kAlgoWorkspace;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    r.algo.data[0] = kAlgoMagic;
    r.algo.data[1] = g_algos.size();
    r.algo.data[2] = r.workspace;
    for (int i = 0; i < 4; i++) r.algo.data[3 + i] = r.min_align[i];
    r.algo.data[7] = algo_check_word(r.algo);
    g_algos.push_back(r);
  }
  cublasLtMatmulHeuristicResult_t* res = &heuristicResultsArray[0];
  memset(res, 0, sizeof *res);
  res->algo = r.algo;
  res->workspaceSize = r.workspace;
  res->state = CUBLAS_STATUS_SUCCESS;
  res->wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// One queued product: copies of everything it reads, so the caller may change or destroy its
// descriptors right after the call.
struct MatmulJob {
  Problem p;
  float alpha, beta;
  const void *a, *b, *c;
  void* d;
  const void* bias;
  void* aux;
  void* workspace;
  size_t workspace_bytes;  // as passed
  size_t workspace_used;   // what the algorithm claimed
};

// The `count` vectors of k 16-bit values of a column-major operand with leading dimension ld:
// each vector is k contiguous values (stride ld) as stored, or, when `gather` (the vectors run
// across the storage order), gathered once into *copy with stride k.
static const uint16_t* k_contiguous(const uint16_t* X, bool gather, uint64_t count, uint64_t k, int64_t ld,
                                    std::vector<uint16_t>* copy, uint64_t* stride) {
  if (!gather) {
    *stride = (uint64_t)ld;
    return X;
  }
  copy->resize(count * k);
  for (uint64_t i = 0; i < count; i++)
    for (uint64_t kk = 0; kk < k; kk++) (*copy)[i * k + kk] = X[i + kk * ld];
  *stride = k;
  return copy->data();
}

static void run_matmul(const MatmulJob& j) {
  const Problem& p = j.p;
  const size_t cd = type_size(p.cd_type);
  const uint64_t m = p.m, n = p.n, k = p.k;
  bool ok = device_range(j.a, extent(a_rows(p), a_cols(p), p.lda) * 2, "cublasLtMatmul operand A");
  ok &= device_range(j.b, extent(b_rows(p), b_cols(p), p.ldb) * 2, "cublasLtMatmul operand B");
  if (j.beta != 0.0f) ok &= device_range(j.c, extent(m, n, p.ldd) * cd, "cublasLtMatmul operand C");
  ok &= device_range(j.d, extent(m, n, p.ldd) * cd, "cublasLtMatmul operand D");
  if (has_bias(p.epilogue))
    ok &= device_range(j.bias, m * 2, "cublasLtMatmul bias (CUBLASLT_MATMUL_DESC_BIAS_POINTER)");
  if (has_aux(p.epilogue))
    ok &= device_range(j.aux, extent(m, n, p.aux_ld) * 2,
                       "cublasLtMatmul aux (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER)");
  if (j.workspace_bytes) ok &= device_range(j.workspace, j.workspace_bytes, "cublasLtMatmul workspace");
  if (!ok) return;  // reported above; computing would touch memory outside the allocations

  // The operands as this operation reads and writes them (the stream-order checker).
  cudasim::order_access(j.a, extent(a_rows(p), a_cols(p), p.lda) * 2, 0);
  cudasim::order_access(j.b, extent(b_rows(p), b_cols(p), p.ldb) * 2, 0);
  if (j.beta != 0.0f) cudasim::order_access(j.c, extent(m, n, p.ldd) * cd, 0);
  cudasim::order_access(j.d, extent(m, n, p.ldd) * cd, 1);
  if (has_bias(p.epilogue)) cudasim::order_access(j.bias, m * 2, 0);
  if (has_aux(p.epilogue)) cudasim::order_access(j.aux, extent(m, n, p.aux_ld) * 2, !aux_is_input(p.epilogue));
  if (j.workspace_used) cudasim::order_access(j.workspace, j.workspace_used, 1);
  if (j.workspace_used) memset(j.workspace, 0xa5, j.workspace_used);

  // Row i of op(A) and column c of op(B), each k contiguous 16-bit values: stored that way
  // already when transa = T (A is k x m) and transb = N (B is k x n); otherwise gathered once
  // into a copy, so every dot product below reads memory in order.
  std::vector<uint16_t> a_copy, b_copy;
  uint64_t a_stride, b_stride;
  const uint16_t* a_rows_k = k_contiguous((const uint16_t*)j.a, p.transa == CUBLAS_OP_N, m, k, p.lda, &a_copy, &a_stride);
  const uint16_t* b_cols_k = k_contiguous((const uint16_t*)j.b, p.transb == CUBLAS_OP_T, n, k, p.ldb, &b_copy, &b_stride);

  const uint16_t* bias = (const uint16_t*)j.bias;
  uint16_t* aux = (uint16_t*)j.aux;
  const int t = p.ab_type;  // the 16-bit type of A, B, bias, aux and a 16-bit D
  for (uint64_t c = 0; c < n; c++) {
    for (uint64_t i = 0; i < m; i++) {
      const uint16_t* ar = a_rows_k + i * a_stride;
      const uint16_t* bc = b_cols_k + c * b_stride;
      // fp32, in increasing k; bf16 or fp16 to float is exact, and so is their product.
      float acc = 0.0f;
      for (uint64_t kk = 0; kk < k; kk++) acc += half_to_f32(t, ar[kk]) * half_to_f32(t, bc[kk]);
      const uint64_t o = i + c * (uint64_t)p.ldd;
      float v = j.alpha * acc;
      if (j.beta != 0.0f) {  // beta = 0: C is not read, as in cuBLASLt (it may be uninitialized)
        float cv = p.cd_type == CUDA_R_32F ? ((const float*)j.c)[o] : half_to_f32(t, ((const uint16_t*)j.c)[o]);
        v += j.beta * cv;
      }
      if (bias) v += half_to_f32(t, bias[i]);
      if (aux && aux_is_input(p.epilogue)) {
        v *= gelu_tanh_grad(half_to_f32(t, aux[i + c * (uint64_t)p.aux_ld]));
      } else if (aux) {
        aux[i + c * (uint64_t)p.aux_ld] = f32_to_half(t, v);
        v = gelu_tanh(v);
      }
      if (p.cd_type == CUDA_R_32F)
        ((float*)j.d)[o] = v;
      else
        ((uint16_t*)j.d)[o] = f32_to_half(t, v);
    }
  }
}

// A pointer the algorithm was promised to be `align`-byte aligned; false (reported) if not.
static bool keeps_promise(const char* what, const void* ptr, uint32_t align, const char* pref) {
  if ((uintptr_t)ptr % align == 0) return true;
  cudasim::report("cublasLt",
                  "cublasLtMatmul: %s = %p is not %u-byte aligned, but the algorithm was chosen for %s = %u; on a GPU"
                  " this is a misaligned access (an algorithm reused for less aligned data?)",
                  what, ptr, align, pref, align);
  return false;
}

extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                         const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                                         const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                                         const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                         cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                                         void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  const char* fn = "cublasLtMatmul";
  if (!is_live(g_handles, lightHandle)) {
    cudasim::report("cublasLt", "%s: %p is not a live handle", fn, (void*)lightHandle);
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  Problem p;
  cublasStatus_t st = validate(fn, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!algo)
    cudasim::fatal("unimplemented", "%s: algo = NULL (an implicit heuristic query) is not implemented; pass an "
                   "algorithm from cublasLtMatmulAlgoGetHeuristic", fn);
  AlgoRecord rec;
  if (!find_algo(algo, &rec)) {
    cudasim::report("cublasLt", "%s: the algorithm was not handed out by cublasLtMatmulAlgoGetHeuristic (zeroed, "
                    "uninitialized or corrupted)", fn);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (memcmp(&rec.problem, &p, sizeof p) != 0) {
    char chosen[512], used[512];
    describe(rec.problem, chosen, sizeof chosen);
    describe(p, used, sizeof used);
    cudasim::report("cublasLt", "%s: the algorithm was chosen for another product (%s) than this one (%s)", fn, chosen,
                    used);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!alpha || !beta) {
    cudasim::report("cublasLt", "%s: alpha = %p, beta = %p (host pointers, CUBLASLT_POINTER_MODE_HOST)", fn, alpha,
                    beta);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  MatmulJob j;
  memset(&j, 0, sizeof j);
  j.p = p;
  memcpy(&j.alpha, alpha, sizeof j.alpha);  // read now, as cuBLASLt reads host scalars at the call
  memcpy(&j.beta, beta, sizeof j.beta);
  j.a = A;
  j.b = B;
  j.c = C;
  j.d = D;
  j.bias = has_bias(p.epilogue) ? computeDesc->bias : NULL;
  j.aux = has_aux(p.epilogue) ? computeDesc->aux : NULL;
  j.workspace = workspace;
  j.workspace_bytes = workspaceSizeInBytes;
  j.workspace_used = rec.workspace;

  if (aux_is_input(p.epilogue) && j.beta != 0.0f)
    cudasim::fatal("unimplemented", "%s: %s with beta = %g is not implemented (beta = 0 is: the documentation does not "
                   "say whether beta C is added before or after the gradient)", fn, epilogue_name(p.epilogue),
                   (double)j.beta);
  if (!A || !B || !D || (!C && j.beta != 0.0f)) {
    cudasim::report("cublasLt", "%s: A = %p, B = %p, C = %p (beta = %g), D = %p: a NULL operand", fn, A, B, C,
                    (double)j.beta, (void*)D);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if ((has_bias(p.epilogue) && !j.bias) || (has_aux(p.epilogue) && !j.aux)) {
    cudasim::report("cublasLt", "%s: %s needs %s, which is NULL", fn, epilogue_name(p.epilogue),
                    !j.bias && has_bias(p.epilogue) ? "CUBLASLT_MATMUL_DESC_BIAS_POINTER"
                                                    : "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // The project keys its plan cache on pointer alignment; a mismatch here is a real bug.
  bool aligned = keeps_promise("A", A, rec.min_align[0], "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES");
  aligned &= keeps_promise("B", B, rec.min_align[1], "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES");
  if (C) aligned &= keeps_promise("C", C, rec.min_align[2], "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES");
  aligned &= keeps_promise("D", D, rec.min_align[3], "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES");
  // Bias and aux: the heuristic hands out only 16-byte kernels (see heuristic_finds_none).
  if (j.bias) aligned &= keeps_promise("the bias", j.bias, 16, "the 16-byte rule of the simulated algorithms");
  if (j.aux) aligned &= keeps_promise("the aux matrix", j.aux, 16, "the 16-byte rule of the simulated algorithms");
  if (!aligned) return CUBLAS_STATUS_INVALID_VALUE;
  if (workspaceSizeInBytes < rec.workspace || (workspaceSizeInBytes && !workspace)) {
    cudasim::report("cublasLt", "%s: workspace %p of %zu bytes, but the algorithm needs %llu bytes", fn, workspace,
                    workspaceSizeInBytes, (unsigned long long)rec.workspace);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // Outputs (D, aux and the workspace the algorithm scribbles on) must not overlap inputs or
  // each other; C may be D itself, exactly, as the project passes it.
  const size_t cd = type_size(p.cd_type);
  const size_t a_bytes = extent(a_rows(p), a_cols(p), p.lda) * 2, b_bytes = extent(b_rows(p), b_cols(p), p.ldb) * 2;
  const size_t d_bytes = extent(p.m, p.n, p.ldd) * cd;
  const size_t bias_bytes = j.bias ? p.m * 2 : 0, aux_bytes = j.aux ? extent(p.m, p.n, p.aux_ld) * 2 : 0;
  const size_t c_bytes = (C && C != D && j.beta != 0.0f) ? d_bytes : 0;
  struct Range {
    const char* what;
    const void* p;
    size_t n;
  };
  const int aux_in = aux_is_input(p.epilogue);
  const Range in[5] = {{"A", A, a_bytes},
                       {"B", B, b_bytes},
                       {"C", C, c_bytes},
                       {"the bias", j.bias, bias_bytes},
                       {"the aux matrix", j.aux, aux_in ? aux_bytes : 0}};
  const Range out[3] = {{"D", D, d_bytes},
                        {"the aux matrix", j.aux, aux_in ? 0 : aux_bytes},
                        {"the workspace", workspace, rec.workspace}};
  for (int o = 0; o < 3; o++) {
    for (int i = 0; i < 5; i++)
      if (overlap(out[o].p, out[o].n, in[i].p, in[i].n)) {
        cudasim::report("cublasLt", "%s: output %s [%p, +%zu bytes) overlaps input %s [%p, +%zu bytes)", fn,
                        out[o].what, out[o].p, out[o].n, in[i].what, in[i].p, in[i].n);
        return CUBLAS_STATUS_INVALID_VALUE;
      }
    for (int o2 = o + 1; o2 < 3; o2++)
      if (overlap(out[o].p, out[o].n, out[o2].p, out[o2].n)) {
        cudasim::report("cublasLt", "%s: outputs %s [%p, +%zu bytes) and %s [%p, +%zu bytes) overlap", fn,
                        out[o].what, out[o].p, out[o].n, out[o2].what, out[o2].p, out[o2].n);
        return CUBLAS_STATUS_INVALID_VALUE;
      }
  }

  char call[96];
  snprintf(call, sizeof call, "cublasLtMatmul %s", epilogue_name(p.epilogue));
  cudasim::count_library_call(call);
  cudasim::stream_op(stream, "cublasLtMatmul", [j]() { run_matmul(j); });
  return CUBLAS_STATUS_SUCCESS;
}
