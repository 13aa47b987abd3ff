// cublaslt.cpp (CUDA simulator): cuBLASLt on the CPU, for exactly the products that
// kernels/cuda/matmul.cu issues: D = alpha op(A) op(B) + beta C, column-major, op(A) m x k,
// op(B) k x n, C and D m x n; bf16 or fp16 A and B, fp32 compute and scale (CUBLAS_COMPUTE_32F,
// CUDA_R_32F) with the sum over k accumulated in increasing k, C = D in their type or fp32; epilogues
// DEFAULT, BIAS (bias[i] added to row i of D), GELU_AUX and GELU_AUX_BIAS (the pre-GELU value
// stored in the aux matrix, D = GELU(pre) with the tanh approximation), and DGELU, the backward
// of GELU_AUX: "apply GELU gradient to matmul output", D = GELU'(aux) * (alpha op(A) op(B)), the
// aux matrix (the GELU's input, as GELU_AUX stored it: m x n, ld = CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD)
// read, not written; with beta = 0 only, since the documentation does not say whether beta C is
// added before or after the gradient.
//
// Three kinds of outcome besides success:
//   - something the simulator does not implement (an attribute, a value, a type, an epilogue,
//     a layout order, a batch): cudasim::fatal naming it, since any result would be made up;
//   - a call that cuBLASLt rejects or that would misbehave on a GPU (dimensions that do not
//     fit, a leading dimension below the rows, a missing bias or aux pointer, an algorithm
//     used on less aligned data than it was chosen for, overlapping operands, ...):
//     cudasim::report, and the call returns an error status, as cuBLASLt would (or should);
//   - the heuristic finding no algorithm: not a finding; the caller falls back (see the rule
//     at heuristic_finds_none).
// The device work (reading A, B, C and bias, writing D and aux) is queued in stream order
// through cudasim::stream_op with a copy of everything the call was given, so a later change to
// the descriptor (matmul.cu sets the bias pointer before each call) does not affect work
// already queued, as on a GPU. Host-side objects (handle, descriptors, layouts, preferences)
// are tracked, so a destroyed or made-up one is reported instead of read.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>
#include <unordered_set>
#include <vector>

#include "cublaslt.h"
#include "order.h"
#include "sim.h"

using namespace lt;

// ---- host objects (their types: cublaslt.h) ----------------------------------------------------

std::mutex lt::g_mu;  // guards the sets below and the algorithm registry
std::unordered_set<const void*> lt::g_handles, lt::g_descs, lt::g_layouts, lt::g_prefs;

static void track(std::unordered_set<const void*>& set, const void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  set.insert(p);
}

// Removes p from the set; false if it was not there (never created, or destroyed before).
static bool untrack(std::unordered_set<const void*>& set, const void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  return set.erase(p) == 1;
}

bool lt::is_live(const std::unordered_set<const void*>& set, const void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  return p && set.count(p) == 1;
}

// ---- names for messages ----------------------------------------------------------------------

const char* lt::type_name(int t) {
  switch (t) {
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_64F: return "CUDA_R_64F";
    case CUDA_R_8I: return "CUDA_R_8I";
    case CUDA_R_32I: return "CUDA_R_32I";
    case -1: return "unset";
    default: return "an unknown cudaDataType_t";
  }
}

const char* lt::op_name(int op) {
  switch (op) {
    case CUBLAS_OP_N: return "CUBLAS_OP_N";
    case CUBLAS_OP_T: return "CUBLAS_OP_T";
    case CUBLAS_OP_C: return "CUBLAS_OP_C";
    case CUBLAS_OP_CONJG: return "CUBLAS_OP_CONJG";
    default: return "an unknown cublasOperation_t";
  }
}

const char* lt::epilogue_name(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "CUBLASLT_EPILOGUE_DEFAULT";
    case CUBLASLT_EPILOGUE_RELU: return "CUBLASLT_EPILOGUE_RELU";
    case CUBLASLT_EPILOGUE_RELU_AUX: return "CUBLASLT_EPILOGUE_RELU_AUX";
    case CUBLASLT_EPILOGUE_BIAS: return "CUBLASLT_EPILOGUE_BIAS";
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "CUBLASLT_EPILOGUE_RELU_BIAS";
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return "CUBLASLT_EPILOGUE_RELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DRELU: return "CUBLASLT_EPILOGUE_DRELU";
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return "CUBLASLT_EPILOGUE_DRELU_BGRAD";
    case CUBLASLT_EPILOGUE_GELU: return "CUBLASLT_EPILOGUE_GELU";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "CUBLASLT_EPILOGUE_GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "CUBLASLT_EPILOGUE_GELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "CUBLASLT_EPILOGUE_GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "CUBLASLT_EPILOGUE_DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "CUBLASLT_EPILOGUE_DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADA: return "CUBLASLT_EPILOGUE_BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB: return "CUBLASLT_EPILOGUE_BGRADB";
    default: return "an unknown cublasLtEpilogue_t";
  }
}

static const char* desc_attr_name(int a) {
  switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return "CUBLASLT_MATMUL_DESC_COMPUTE_TYPE";
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return "CUBLASLT_MATMUL_DESC_SCALE_TYPE";
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return "CUBLASLT_MATMUL_DESC_POINTER_MODE";
    case CUBLASLT_MATMUL_DESC_TRANSA: return "CUBLASLT_MATMUL_DESC_TRANSA";
    case CUBLASLT_MATMUL_DESC_TRANSB: return "CUBLASLT_MATMUL_DESC_TRANSB";
    case CUBLASLT_MATMUL_DESC_TRANSC: return "CUBLASLT_MATMUL_DESC_TRANSC";
    case CUBLASLT_MATMUL_DESC_FILL_MODE: return "CUBLASLT_MATMUL_DESC_FILL_MODE";
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return "CUBLASLT_MATMUL_DESC_EPILOGUE";
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return "CUBLASLT_MATMUL_DESC_BIAS_POINTER";
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return "CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE";
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER";
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD";
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE";
    case CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE: return "CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE";
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: return "CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET";
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return "CUBLASLT_MATMUL_DESC_A_SCALE_POINTER";
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return "CUBLASLT_MATMUL_DESC_B_SCALE_POINTER";
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: return "CUBLASLT_MATMUL_DESC_C_SCALE_POINTER";
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: return "CUBLASLT_MATMUL_DESC_D_SCALE_POINTER";
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: return "CUBLASLT_MATMUL_DESC_AMAX_D_POINTER";
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE";
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER: return "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER";
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER: return "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER";
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return "CUBLASLT_MATMUL_DESC_FAST_ACCUM";
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE";
    default: return "an unknown cublasLtMatmulDescAttributes_t";
  }
}

static const char* layout_attr_name(int a) {
  switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return "CUBLASLT_MATRIX_LAYOUT_TYPE";
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return "CUBLASLT_MATRIX_LAYOUT_ORDER";
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return "CUBLASLT_MATRIX_LAYOUT_ROWS";
    case CUBLASLT_MATRIX_LAYOUT_COLS: return "CUBLASLT_MATRIX_LAYOUT_COLS";
    case CUBLASLT_MATRIX_LAYOUT_LD: return "CUBLASLT_MATRIX_LAYOUT_LD";
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT";
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET";
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return "CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET";
    default: return "an unknown cublasLtMatrixLayoutAttribute_t";
  }
}

static const char* pref_attr_name(int a) {
  switch (a) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return "CUBLASLT_MATMUL_PREF_SEARCH_MODE";
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES";
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return "CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK";
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES";
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES";
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES";
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES";
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return "CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT";
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return "CUBLASLT_MATMUL_PREF_IMPL_MASK";
    default: return "an unknown cublasLtMatmulPreferenceAttributes_t";
  }
}

// ---- small helpers ---------------------------------------------------------------------------

size_t lt::type_size(int t) { return t == CUDA_R_32F ? 4 : 2; }  // only these two are accepted

// The layout types the simulator implements: bf16 or fp16 for A and B, the same or fp32 for C
// and D (checked per product, cublaslt_matmul.cpp).
static void require_matrix_type(const char* fn, int t) {
  if (t != CUDA_R_16BF && t != CUDA_R_16F && t != CUDA_R_32F)
    cudasim::fatal("unimplemented",
                   "%s: matrix type %s (%d) is not implemented (CUDA_R_16BF, CUDA_R_16F and CUDA_R_32F are)", fn,
                   type_name(t), t);
}

// Elements spanned by a column-major rows x cols matrix with leading dimension ld (rows, cols
// >= 1 and ld >= rows, checked before use): the last column starts at (cols - 1) * ld.
uint64_t lt::extent(uint64_t rows, uint64_t cols, int64_t ld) { return (cols - 1) * (uint64_t)ld + rows; }

bool lt::overlap(const void* p, size_t pn, const void* q, size_t qn) {
  uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
  return p && q && pn && qn && a < b + qn && b < a + pn;
}

// Attribute values arrive as (buffer, size); cuBLASLt rejects a size other than the
// attribute's own, and so does the simulator.
static bool attr_size_ok(const char* fn, const char* attr, const void* buf, size_t got, size_t want) {
  if (buf && got == want) return true;
  cudasim::report("cublasLt", "%s: %s given %s%zu bytes, expected %zu", fn, attr, buf ? "" : "a NULL buffer of ",
                  got, want);
  return false;
}

float lt::half_to_f32(int t, uint16_t h) {
  if (t == CUDA_R_16F) return cudasim_h_bits2f(h);
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest, ties to even, as __float2bfloat16_rn / __float2half_rn; a NaN becomes the
// canonical 0x7fff in bf16 (a quiet NaN in fp16, cuda_fp16.h).
uint16_t lt::f32_to_half(int t, float f) {
  if (t == CUDA_R_16F) return cudasim_f2h_bits(f);
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

// The tanh approximation, in float with the same operations as matmul.cu's fallback kernel, so
// both paths give the same bits for the same pre-activation.
float lt::gelu_tanh(float x) {
  float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
// Its derivative, again with the fallback kernel's operations (kernels/cuda/common.cuh).
float lt::gelu_tanh_grad(float x) {
  float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

// Reports (through check_device_range) when [p, p + bytes) is not inside one live device
// allocation, and says whether it is, so a bad operand is reported and then left untouched.
bool lt::device_range(const void* p, size_t bytes, const char* what) {
  cudasim::check_device_range(p, bytes, what);
  const cudasim::Allocation* a = cudasim::find_allocation(p);
  return a && (uintptr_t)p >= a->base && (uintptr_t)p - a->base + bytes <= a->bytes;
}

// ---- handle, descriptors, layouts, preferences -----------------------------------------------

extern "C" cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) {
    cudasim::report("cublasLt", "cublasLtCreate: lightHandle is NULL");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  cublasLtContext* h = (cublasLtContext*)calloc(1, sizeof *h);
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  track(g_handles, h);
  *lightHandle = h;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!untrack(g_handles, lightHandle)) {
    cudasim::report("cublasLt", "cublasLtDestroy: %p is not a live handle (never created, or destroyed before)",
                    (void*)lightHandle);
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  free(lightHandle);
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                                   cudaDataType_t scaleType) {
  if (!matmulDesc) {
    cudasim::report("cublasLt", "cublasLtMatmulDescCreate: matmulDesc is NULL");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (computeType != CUBLAS_COMPUTE_32F)
    cudasim::fatal("unimplemented",
                   "cublasLtMatmulDescCreate: compute type %d is not implemented (CUBLAS_COMPUTE_32F is)",
                   (int)computeType);
  if (scaleType != CUDA_R_32F)
    cudasim::fatal("unimplemented", "cublasLtMatmulDescCreate: scale type %s (%d) is not implemented (CUDA_R_32F is)",
                   type_name(scaleType), (int)scaleType);
  cublasLtMatmulDescOpaque_t* d = (cublasLtMatmulDescOpaque_t*)calloc(1, sizeof *d);
  if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
  d->transa = CUBLAS_OP_N;
  d->transb = CUBLAS_OP_N;
  d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  d->bias_type = -1;
  d->aux_type = -1;
  track(g_descs, d);
  *matmulDesc = d;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  if (!matmulDesc) return CUBLAS_STATUS_SUCCESS;
  if (!untrack(g_descs, matmulDesc)) {
    cudasim::report("cublasLt",
                    "cublasLtMatmulDescDestroy: %p is not a live descriptor (never created, or destroyed before)",
                    (void*)matmulDesc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  free(matmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                         cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                         size_t sizeInBytes) {
  const char* fn = "cublasLtMatmulDescSetAttribute";
  const char* name = desc_attr_name(attr);
  if (!is_live(g_descs, matmulDesc)) {
    cudasim::report("cublasLt", "%s(%s): %p is not a live descriptor", fn, name, (void*)matmulDesc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  cublasLtMatmulDescOpaque_t* d = matmulDesc;
  int32_t i32;
  uint32_t u32;
  int64_t i64;
  const void* ptr;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof i32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&i32, buf, sizeof i32);
      if (i32 != CUBLAS_COMPUTE_32F)
        cudasim::fatal("unimplemented", "%s: %s = %d is not implemented (CUBLAS_COMPUTE_32F is)", fn, name, (int)i32);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof i32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&i32, buf, sizeof i32);
      if (i32 != CUDA_R_32F)
        cudasim::fatal("unimplemented", "%s: %s = %s (%d) is not implemented (CUDA_R_32F is)", fn, name, type_name(i32),
                       (int)i32);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof i32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&i32, buf, sizeof i32);
      if (i32 != CUBLASLT_POINTER_MODE_HOST)
        cudasim::fatal("unimplemented", "%s: %s = %d is not implemented (CUBLASLT_POINTER_MODE_HOST is)", fn, name,
                       (int)i32);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof i32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&i32, buf, sizeof i32);
      if (i32 != CUBLAS_OP_N && i32 != CUBLAS_OP_T)
        cudasim::fatal("unimplemented", "%s: %s = %s (%d) is not implemented (CUBLAS_OP_N and CUBLAS_OP_T are)", fn,
                       name, op_name(i32), (int)i32);
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = i32;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSC:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof i32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&i32, buf, sizeof i32);
      if (i32 != CUBLAS_OP_N)  // cuBLASLt itself supports only N here
        cudasim::fatal("unimplemented", "%s: %s = %s (%d) is not implemented (CUBLAS_OP_N is)", fn, name, op_name(i32),
                       (int)i32);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof u32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&u32, buf, sizeof u32);
      if (u32 != CUBLASLT_EPILOGUE_DEFAULT && u32 != CUBLASLT_EPILOGUE_BIAS && u32 != CUBLASLT_EPILOGUE_GELU_AUX &&
          u32 != CUBLASLT_EPILOGUE_GELU_AUX_BIAS && u32 != CUBLASLT_EPILOGUE_DGELU)
        cudasim::fatal("unimplemented",
                       "%s: %s = %s (%u) is not implemented (DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS and DGELU are)", fn,
                       name, epilogue_name(u32), u32);
      d->epilogue = u32;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof ptr)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&ptr, buf, sizeof ptr);
      if (attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER)
        d->bias = ptr;
      else
        d->aux = (void*)ptr;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof i64)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&i64, buf, sizeof i64);
      d->aux_ld = i64;  // checked against the product when one uses it
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof i32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&i32, buf, sizeof i32);
      if (i32 != CUDA_R_16BF && i32 != CUDA_R_16F && i32 != -1)
        cudasim::fatal("unimplemented", "%s: %s = %s (%d) is not implemented (CUDA_R_16BF and CUDA_R_16F are)", fn,
                       name, type_name(i32), (int)i32);
      (attr == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE ? d->bias_type : d->aux_type) = i32;
      return CUBLAS_STATUS_SUCCESS;
    default:
      cudasim::fatal("unimplemented", "%s: attribute %s (%d) is not implemented", fn, name, (int)attr);
  }
}

extern "C" cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                                     uint64_t rows, uint64_t cols, int64_t ld) {
  if (!matLayout) {
    cudasim::report("cublasLt", "cublasLtMatrixLayoutCreate: matLayout is NULL");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  require_matrix_type("cublasLtMatrixLayoutCreate", type);
  cublasLtMatrixLayoutOpaque_t* l = (cublasLtMatrixLayoutOpaque_t*)calloc(1, sizeof *l);
  if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;  // rows, cols and ld are checked against the product that uses the layout
  track(g_layouts, l);
  *matLayout = l;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  if (!matLayout) return CUBLAS_STATUS_SUCCESS;
  if (!untrack(g_layouts, matLayout)) {
    cudasim::report("cublasLt",
                    "cublasLtMatrixLayoutDestroy: %p is not a live layout (never created, or destroyed before)",
                    (void*)matLayout);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  free(matLayout);
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                           cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                           size_t sizeInBytes) {
  const char* fn = "cublasLtMatrixLayoutSetAttribute";
  const char* name = layout_attr_name(attr);
  if (!is_live(g_layouts, matLayout)) {
    cudasim::report("cublasLt", "%s(%s): %p is not a live layout", fn, name, (void*)matLayout);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  int32_t i32;
  uint32_t u32;
  uint64_t u64;
  int64_t i64;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof u32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&u32, buf, sizeof u32);
      require_matrix_type(fn, (int)u32);
      matLayout->type = (int32_t)u32;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof i32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&i32, buf, sizeof i32);
      if (i32 != CUBLASLT_ORDER_COL)
        cudasim::fatal("unimplemented", "%s: %s = %d is not implemented (CUBLASLT_ORDER_COL is)", fn, name, (int)i32);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof u64)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&u64, buf, sizeof u64);
      (attr == CUBLASLT_MATRIX_LAYOUT_ROWS ? matLayout->rows : matLayout->cols) = u64;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_LD:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof i64)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&i64, buf, sizeof i64);
      matLayout->ld = i64;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof i32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&i32, buf, sizeof i32);
      if (i32 != 1)
        cudasim::fatal("unimplemented", "%s: %s = %d is not implemented (only single products, 1)", fn, name, (int)i32);
      return CUBLAS_STATUS_SUCCESS;
    default:
      cudasim::fatal("unimplemented", "%s: attribute %s (%d) is not implemented", fn, name, (int)attr);
  }
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) {
    cudasim::report("cublasLt", "cublasLtMatmulPreferenceCreate: pref is NULL");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  cublasLtMatmulPreferenceOpaque_t* p = (cublasLtMatmulPreferenceOpaque_t*)calloc(1, sizeof *p);
  if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
  p->max_workspace = 0;  // cuBLASLt's defaults: no workspace, 256-byte aligned operands
  for (int i = 0; i < 4; i++) p->min_align[i] = 256;
  track(g_prefs, p);
  *pref = p;
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (!pref) return CUBLAS_STATUS_SUCCESS;
  if (!untrack(g_prefs, pref)) {
    cudasim::report("cublasLt",
                    "cublasLtMatmulPreferenceDestroy: %p is not a live preference (never created, or destroyed before)",
                    (void*)pref);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  free(pref);
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                               cublasLtMatmulPreferenceAttributes_t attr,
                                                               const void* buf, size_t sizeInBytes) {
  const char* fn = "cublasLtMatmulPreferenceSetAttribute";
  const char* name = pref_attr_name(attr);
  if (!is_live(g_prefs, pref)) {
    cudasim::report("cublasLt", "%s(%s): %p is not a live preference", fn, name, (void*)pref);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  uint64_t u64;
  uint32_t u32;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof u64)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&u64, buf, sizeof u64);
      pref->max_workspace = u64;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      if (!attr_size_ok(fn, name, buf, sizeInBytes, sizeof u32)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&u32, buf, sizeof u32);
      // An alignment is a power of two; anything else means the caller computed it wrongly,
      // and the promise checked at cublasLtMatmul would be meaningless.
      if (u32 == 0 || (u32 & (u32 - 1)) != 0) {
        cudasim::report("cublasLt", "%s: %s = %u is not a power of two", fn, name, u32);
        return CUBLAS_STATUS_INVALID_VALUE;
      }
      pref->min_align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = u32;
      return CUBLAS_STATUS_SUCCESS;
    default:
      cudasim::fatal("unimplemented", "%s: attribute %s (%d) is not implemented", fn, name, (int)attr);
  }
}

