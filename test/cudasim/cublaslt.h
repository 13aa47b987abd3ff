// cublaslt.h: what the two halves of the simulator's cuBLASLt share: cublaslt.cpp (the handle,
// descriptors, layouts and preferences, with their attributes) and cublaslt_matmul.cpp (the
// product: validation, the heuristic's algorithms, the computation).
#pragma once
#include <cublasLt.h>
#include <stddef.h>
#include <stdint.h>

#include <mutex>
#include <unordered_set>

// ---- host objects ----------------------------------------------------------------------------

struct cublasLtContext {
  int unused;
};

struct cublasLtMatmulDescOpaque_t {
  int32_t transa, transb;  // cublasOperation_t
  uint32_t epilogue;       // cublasLtEpilogue_t
  const void* bias;
  int32_t bias_type;  // cudaDataType_t, or -1: unset, which means D's type
  void* aux;
  int64_t aux_ld;
  int32_t aux_type;  // as bias_type
};

struct cublasLtMatrixLayoutOpaque_t {
  int32_t type;  // cudaDataType_t
  uint64_t rows, cols;
  int64_t ld;
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace;
  uint32_t min_align[4];  // bytes, for A, B, C, D
};

// The shared state and helpers, in their own namespace (the library links into other programs).
namespace lt {

extern std::mutex g_mu;  // guards the sets below and the algorithm registry
// Live objects: a destroyed or made-up one is reported instead of read.
extern std::unordered_set<const void*> g_handles, g_descs, g_layouts, g_prefs;

// ---- helpers (cublaslt.cpp) ------------------------------------------------------------------
bool is_live(const std::unordered_set<const void*>& set, const void* p);
const char* type_name(int t);
const char* op_name(int op);
const char* epilogue_name(uint32_t e);
size_t type_size(int t);
uint64_t extent(uint64_t rows, uint64_t cols, int64_t ld);
bool overlap(const void* p, size_t pn, const void* q, size_t qn);
// A 16-bit element of type t (CUDA_R_16BF or CUDA_R_16F) to float (exact) and back (round
// to nearest even).
float half_to_f32(int t, uint16_t h);
uint16_t f32_to_half(int t, float f);
float gelu_tanh(float x);
float gelu_tanh_grad(float x);
bool device_range(const void* p, size_t bytes, const char* what);

}  // namespace lt
