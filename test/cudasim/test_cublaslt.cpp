// test_cublaslt.cpp: the CUDA simulator's cuBLASLt (cublaslt.cpp) and CUB radix sort (cub.cpp).
//
// cuBLASLt: every product kernels/cuda/matmul.cu issues (forward T/N with and without BIAS,
// GELU_AUX and GELU_AUX_BIAS with both outputs, dinp N/N plain and with DGELU (the GELU's input
// in the aux matrix, read only), dweight N/T into fp32 with beta = 1),
// called with the column-major descriptors of matmul.cu's table and checked against references
// computed here from the row-major meaning of each product, so the column-major mapping itself
// is under test. Two references: a double-precision sum with a derived tolerance (the
// semantics), and a float sum in increasing k (the promised accumulation order, which is also
// the order of matmul.cu's fallback kernel, so both paths give the same bits). Then the
// heuristic: no algorithm for 2-byte aligned operands, for rows that are not a multiple of 16
// bytes, and for every shape under CUDASIM_LT_NO_ALGO=1. Planted mistakes (a swapped transa, an
// output off by one bf16 ulp, DGELU with a wrong derivative) must fail the checks, so the checks
// can fail.
//
// CUB: SortPairs on int32 keys as embedding.cu calls it: the size query, stability with
// duplicate keys, negative keys in numeric order, CUB's bit-range rule for signed keys, and
// a planted unstable result that the stability check must catch.
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>
#include <vector>

#include "test/test.h"

// ---- helpers ---------------------------------------------------------------------------------

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)
#define LT_OK(call)                                                                     \
  do {                                                                                  \
    cublasStatus_t s_ = (call);                                                         \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                  \
      printf("FAIL %s:%d: %s: cublas status %d\n", __FILE__, __LINE__, #call, (int)s_); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {  // splitmix64
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double rnd_unit(void) { return (double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }  // [-1, 1)

// The 16-bit type of the products under test: bf16 (matmul.cu's default), then fp16 (its
// fp16 build). bf2f and f2bf convert that type; kBf is its unit roundoff.
static cudaDataType_t g_half = CUDA_R_16BF;
static const char* g_tag = "";  // " [fp16]" in the fp16 pass, so every test name is unique
static double kBf = 1.0 / 256.0;

static float bf2f(uint16_t h) {
  if (g_half == CUDA_R_16F) return cudasim_h_bits2f(h);
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint16_t f2bf(float f) {  // round to nearest even; inputs here are finite
  if (g_half == CUDA_R_16F) return cudasim_f2h_bits(f);
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static uint16_t rnd_bf16_nonzero(void) {
  for (;;) {
    uint16_t h = f2bf((float)rnd_unit());
    if (bf2f(h) != 0.0f) return h;
  }
}
static std::vector<uint16_t> rnd_bf16s(size_t n) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = rnd_bf16_nonzero();
  return v;
}

static void* dev_alloc(size_t bytes) {
  void* p = NULL;
  CUDA_OK(cudaMalloc(&p, bytes));
  return p;
}
template <typename T>
static T* upload(const std::vector<T>& v) {
  T* p = (T*)dev_alloc(v.size() * sizeof(T));
  CUDA_OK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}
template <typename T>
static std::vector<T> download(const T* p, size_t n) {
  std::vector<T> v(n);
  CUDA_OK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// As matmul.cu: the largest power of two (up to 256) dividing the address.
static uint32_t ptr_align(const void* p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 2 && (a % al) != 0) al >>= 1;
  return al;
}

static cublasLtHandle_t g_lt;
static cudaStream_t g_stream;
static void* g_workspace;
static const size_t kWorkspaceBytes = (size_t)1 << 20;

// ---- plans, as matmul.cu builds them ---------------------------------------------------------

enum Kind { FORWARD, FORWARD_GELU, DINP, DWEIGHT, DINP_DGELU };
static const char* kind_name(int k) {
  static const char* n[] = {"forward", "forward_gelu", "dinp", "dweight", "dinp_dgelu"};
  return n[k];
}

typedef struct {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c, d;
  int has_algo;
  cublasLtMatmulAlgo_t algo;
  size_t algo_workspace;
} Plan;

// The column-major descriptors of matmul.cu's table for (m, n, k). flip_transa plants a
// mistake: the other transa, with A's layout swapped to match (so only for m == k).
static void plan_create(Plan* p, int kind, int m, int n, int k, int has_bias, uint32_t al_a, uint32_t al_b,
                        uint32_t al_c, int flip_transa) {
  memset(p, 0, sizeof *p);
  cublasOperation_t ta, tb;
  cudaDataType_t cd_type = g_half;
  uint64_t ar, ac, br, bc, dr = (uint64_t)m, dc = (uint64_t)n;
  int64_t lda, ldb, ldd = m;
  if (kind == FORWARD || kind == FORWARD_GELU) {  // m=OC, n=N, k=C
    ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    ar = k, ac = m, lda = k;
    br = k, bc = n, ldb = k;
  } else if (kind == DINP || kind == DINP_DGELU) {  // m=C, n=N, k=OC
    ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    ar = m, ac = k, lda = m;
    br = k, bc = n, ldb = k;
  } else {  // DWEIGHT: m=C, n=OC, k=N
    ta = CUBLAS_OP_N, tb = CUBLAS_OP_T;
    ar = m, ac = k, lda = m;
    br = n, bc = k, ldb = n;
    cd_type = CUDA_R_32F;
  }
  if (flip_transa) {
    ta = ta == CUBLAS_OP_N ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint64_t t = ar;
    ar = ac, ac = t;
  }
  LT_OK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_OK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT_OK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (kind == FORWARD && has_bias) epi = CUBLASLT_EPILOGUE_BIAS;
  if (kind == FORWARD_GELU) epi = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (kind == DINP_DGELU) epi = CUBLASLT_EPILOGUE_DGELU;
  LT_OK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (has_bias) {
    cudaDataType_t bt = g_half;
    LT_OK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  if (kind == FORWARD_GELU || kind == DINP_DGELU) {
    int64_t aux_ld = ldd;
    cudaDataType_t at = g_half;
    LT_OK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    LT_OK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof at));
  }
  LT_OK(cublasLtMatrixLayoutCreate(&p->a, g_half, ar, ac, lda));
  LT_OK(cublasLtMatrixLayoutCreate(&p->b, g_half, br, bc, ldb));
  LT_OK(cublasLtMatrixLayoutCreate(&p->c, cd_type, dr, dc, ldd));
  LT_OK(cublasLtMatrixLayoutCreate(&p->d, cd_type, dr, dc, ldd));

  cublasLtMatmulPreference_t pref;
  LT_OK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = kWorkspaceBytes;
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
  cublasLtMatmulHeuristicResult_t res;
  int nres = -1;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_lt, p->desc, p->a, p->b, p->c, p->d, pref, 1, &res, &nres);
  LT_OK(cublasLtMatmulPreferenceDestroy(pref));
  p->has_algo = st == CUBLAS_STATUS_SUCCESS && nres > 0 && res.state == CUBLAS_STATUS_SUCCESS;
  if (p->has_algo) {
    p->algo = res.algo;
    p->algo_workspace = res.workspaceSize;
  }
  // No algorithm must read as none, whichever way the status says it.
  CHECK(p->has_algo ? nres == 1 : nres == 0, "heuristic: status %d with %d results", (int)st, nres);
}

static void plan_destroy(Plan* p) {
  LT_OK(cublasLtMatrixLayoutDestroy(p->a));
  LT_OK(cublasLtMatrixLayoutDestroy(p->b));
  LT_OK(cublasLtMatrixLayoutDestroy(p->c));
  LT_OK(cublasLtMatrixLayoutDestroy(p->d));
  LT_OK(cublasLtMatmulDescDestroy(p->desc));
}

// As matmul.cu's run_plan: bias and aux pointers set on the descriptor, then the product.
static void plan_run(Plan* p, int kind, const void* A, const void* B, void* D, const void* bias, void* aux,
                     float beta) {
  if (bias) LT_OK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  if (kind == FORWARD_GELU || kind == DINP_DGELU)
    LT_OK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  float alpha = 1.0f;
  LT_OK(cublasLtMatmul(g_lt, p->desc, &alpha, A, p->a, B, p->b, &beta, D, p->c, D, p->d, &p->algo, g_workspace,
                       kWorkspaceBytes, g_stream));
}

// ---- references from the row-major meaning ---------------------------------------------------
//   forward  out[i][o] = sum_c inp[i][c] W[o][c] (+ bias[o]); GELU: pre = that, out = GELU(pre)
//   dinp     dinp[i][c] = sum_o dout[i][o] W[o][c]
//   dweight  dW[o][c] += sum_i dout[i][o] inp[i][c]
// Each output is sum_t x_t y_t over t = 0..K-1 (plus extras); both references walk t upwards.

typedef struct {
  std::vector<double> val;  // the exact value (double: the bf16 products and their sum are exact enough)
  std::vector<double> mag;  // sum of |terms|, including bias and the accumulated value
  std::vector<float> f32;   // float sum in increasing t, then the same epilogue arithmetic
  int K;
  std::vector<float> dgelu_in;  // DGELU: the aux matrix (the GELU's input) per output, row-major
} Ref;

static float gelu_f(float x) {  // the simulator's and the fallback kernel's float GELU
  float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}
// GELU's derivative: the float one of the simulator and the fallback kernel (the same
// operations as kernels/cuda/common.cuh), and the exact one in double.
static float gelu_grad_f(float x) {
  float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}
static double gelu_grad_d(double x) {
  const double k = sqrt(2.0 / 3.14159265358979323846);
  double t = tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// out[r][s] = sum_t X[r*xr + t*xt] * Y[s*ys + t*yt] (+ bias[s]) (+ acc[r][s]), R x S row-major.
static Ref reference(const std::vector<uint16_t>& X, size_t xr, size_t xt, const std::vector<uint16_t>& Y, size_t ys,
                     size_t yt, const std::vector<uint16_t>* bias, const std::vector<float>* acc, int R, int S,
                     int K) {
  Ref r;
  r.K = K;
  r.val.resize((size_t)R * S);
  r.mag.resize((size_t)R * S);
  r.f32.resize((size_t)R * S);
  for (int i = 0; i < R; i++)
    for (int s = 0; s < S; s++) {
      double v = 0, m = 0;
      float f = 0.0f;
      for (int t = 0; t < K; t++) {
        float x = bf2f(X[i * xr + t * xt]), y = bf2f(Y[s * ys + t * yt]);
        v += (double)x * y;
        m += fabs((double)x * y);
        f += x * y;
      }
      size_t o = (size_t)i * S + s;
      if (acc) {
        v += (*acc)[o];
        m += fabs((*acc)[o]);
        f = f + (*acc)[o];
      }
      if (bias) {
        v += bf2f((*bias)[s]);
        m += fabs(bf2f((*bias)[s]));
        f += bf2f((*bias)[s]);
      }
      r.val[o] = v;
      r.mag[o] = m;
      r.f32[o] = f;
    }
  return r;
}

// Tolerances against the double reference. The inputs are bf16 (8 significant bits), so every
// product x*y is exact in float and double. The simulator adds the K products in float, each
// addition rounding with relative error at most u = 2^-24, and then at most two more terms
// (the accumulated dW, the bias): the float value is within (K + 2) u S of the exact one, with
// S = the sum of |terms| (Higham's gamma_n bound). A bf16 output rounds once more, by at most
// 2^-8 relative (round to nearest, 8 significant bits; fp16: 2^-11, 11 bits). (K + 3) absorbs gamma's 1/(1 - n u) and
// the final rounding's factor 1 + 2^-8 on the float error, for K up to 254 (here K <= 136).
//   bf16 out / aux:  |got - ref| <= 2^-8 |ref| + (K + 3) u S
//   fp32 dweight:    |got - ref| <= (K + 3) u S
//   GELU out:        the pre-activation error e = (K + 3) u S grows by at most max|GELU'| < 1.13;
//                    the float GELU itself is within 16 u (|x| + 1) of the exact one (a few
//                    roundings of terms bounded by |x|, tanhf within 2 ulp, and tanh' = sech^2
//                    damps the error of its argument where that argument is large); then bf16:
//                    |got - ref| <= 2^-8 |ref| + 1.13 e + 16 u (|x| + 1)
//   DGELU out:       the product v times GELU'(x) for the aux value x (|x| < 1 here): |GELU'| < 1.13
//                    carries the product's error e, and the float derivative, a few roundings of
//                    terms bounded by 1 + |x| with tanhf within 2 ulp, is within 16 u (1 + |x|) of
//                    the exact one; then bf16:
//                    |got - ref| <= 2^-8 |ref| + 1.13 e + 16 u (1 + |x|) |v|
// Any mistake in the mapping (a wrong transpose, a bias per column, a swapped operand) moves
// results by about the size of the values themselves, far beyond these bounds.
static const double kU = 1.0 / 16777216.0;

enum Out { OUT_BF16, OUT_FP32, OUT_GELU, OUT_DGELU };

// Elements of got (R x S row-major, bf16 bits or floats) outside the tolerance; *worst is the
// largest |error| / tolerance seen.
static int count_bad(const void* got, Out kind, const Ref& r, double* worst) {
  int bad = 0;
  *worst = 0;
  for (size_t o = 0; o < r.val.size(); o++) {
    double e = (r.K + 3) * kU * r.mag[o], ref = r.val[o], g;
    if (kind == OUT_FP32) {
      g = ((const float*)got)[o];
    } else {
      g = bf2f(((const uint16_t*)got)[o]);
      if (kind == OUT_GELU) {
        double x = ref;
        ref = gelu_d(x);
        e = 1.13 * e + 16 * kU * (fabs(x) + 1);
      } else if (kind == OUT_DGELU) {
        double x = r.dgelu_in[o], v = ref;
        ref = v * gelu_grad_d(x);
        e = 1.13 * e + 16 * kU * (1 + fabs(x)) * fabs(v);
      }
      e += kBf * fabs(ref);
    }
    double q = fabs(g - ref) / e;
    if (!(q <= 1.0)) bad++;
    if (!(q <= *worst)) *worst = q;
  }
  return bad;
}

// Elements whose bits differ from the float reference (with its epilogue applied).
static int count_bits_differ(const void* got, Out kind, const Ref& r) {
  int bad = 0;
  for (size_t o = 0; o < r.f32.size(); o++) {
    float f = r.f32[o];
    if (kind == OUT_FP32) {
      bad += memcmp(&((const float*)got)[o], &f, sizeof f) != 0;
    } else {
      uint16_t want = f2bf(kind == OUT_GELU ? gelu_f(f) : kind == OUT_DGELU ? f * gelu_grad_f(r.dgelu_in[o]) : f);
      bad += ((const uint16_t*)got)[o] != want;
    }
  }
  return bad;
}

static void expect_matches(const char* what, const void* got, Out kind, const Ref& r) {
  char name[200];
  double worst;
  int bad = count_bad(got, kind, r, &worst);
  snprintf(name, sizeof name, "%s: within the derived tolerance of the double reference%s", what, g_tag);
  EXPECT(name, bad == 0, "%d of %zu elements outside; worst error/tolerance %.3g", bad, r.val.size(), worst);
  bad = count_bits_differ(got, kind, r);
  snprintf(name, sizeof name, "%s: bit-exact with fp32 accumulation in increasing k%s", what, g_tag);
  EXPECT(name, bad == 0, "%d of %zu elements differ", bad, r.f32.size());
}

// ---- the products ----------------------------------------------------------------------------

static void test_shape(int N, int C, int OC) {
  char what[160];
  std::vector<uint16_t> inp = rnd_bf16s((size_t)N * C), W = rnd_bf16s((size_t)OC * C);
  std::vector<uint16_t> bias = rnd_bf16s(OC), dout = rnd_bf16s((size_t)N * OC);
  std::vector<float> dW0((size_t)OC * C);
  for (auto& x : dW0) x = (float)rnd_unit();
  uint16_t *d_inp = upload(inp), *d_W = upload(W), *d_bias = upload(bias), *d_dout = upload(dout);
  uint16_t* d_out = (uint16_t*)dev_alloc((size_t)N * OC * 2);
  uint16_t* d_pre = (uint16_t*)dev_alloc((size_t)N * OC * 2);
  uint16_t* d_dinp = (uint16_t*)dev_alloc((size_t)N * C * 2);
  float* d_dW = upload(dW0);
  // D starts as NaN: with beta = 0, C (= D) must not be read.
  std::vector<uint16_t> nans((size_t)N * (OC > C ? OC : C), 0x7fc0);
  CUDA_OK(cudaMemcpy(d_out, nans.data(), (size_t)N * OC * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_dinp, nans.data(), (size_t)N * C * 2, cudaMemcpyHostToDevice));

  for (int kind = FORWARD; kind <= FORWARD_GELU; kind++)
    for (int hb = 0; hb <= 1; hb++) {
      Plan p;
      plan_create(&p, kind, OC, N, C, hb, ptr_align(d_W), ptr_align(d_inp), ptr_align(d_out), 0);
      snprintf(what, sizeof what, "%s%s N=%d C=%d OC=%d", kind_name(kind), hb ? "+bias" : "", N, C, OC);
      char name[200];
      snprintf(name, sizeof name, "%s: heuristic finds an algorithm", what);
      EXPECT(name, p.has_algo, "none");
      if (!p.has_algo) continue;
      plan_run(&p, kind, d_W, d_inp, d_out, hb ? d_bias : NULL, d_pre, 0.0f);
      CUDA_OK(cudaStreamSynchronize(g_stream));
      Ref r = reference(inp, C, 1, W, C, 1, hb ? &bias : NULL, NULL, N, OC, C);
      std::vector<uint16_t> out = download(d_out, (size_t)N * OC);
      if (kind == FORWARD) {
        expect_matches(what, out.data(), OUT_BF16, r);
      } else {
        std::vector<uint16_t> pre = download(d_pre, (size_t)N * OC);
        snprintf(name, sizeof name, "%s aux (pre-GELU)", what);
        expect_matches(name, pre.data(), OUT_BF16, r);
        snprintf(name, sizeof name, "%s out (GELU)", what);
        expect_matches(name, out.data(), OUT_GELU, r);
      }
      plan_destroy(&p);
    }

  {
    Plan p;
    plan_create(&p, DINP, C, N, OC, 0, ptr_align(d_W), ptr_align(d_dout), ptr_align(d_dinp), 0);
    snprintf(what, sizeof what, "dinp N=%d C=%d OC=%d", N, C, OC);
    if (p.has_algo) {
      plan_run(&p, DINP, d_W, d_dout, d_dinp, NULL, NULL, 0.0f);
      CUDA_OK(cudaStreamSynchronize(g_stream));
      std::vector<uint16_t> dinp = download(d_dinp, (size_t)N * C);
      expect_matches(what, dinp.data(), OUT_BF16, reference(dout, OC, 1, W, 1, C, NULL, NULL, N, C, OC));
    }
    EXPECT("dinp: heuristic finds an algorithm", p.has_algo, "none for %s", what);
    plan_destroy(&p);
  }
  {  // dinp through the GELU: D = GELU'(aux) * (dout @ W), the aux matrix (C x N, ld C) read only
    Plan p;
    plan_create(&p, DINP_DGELU, C, N, OC, 0, ptr_align(d_W), ptr_align(d_dout), ptr_align(d_dinp), 0);
    snprintf(what, sizeof what, "dinp DGELU N=%d C=%d OC=%d", N, C, OC);
    std::vector<uint16_t> x = rnd_bf16s((size_t)N * C);
    uint16_t* d_x = upload(x);
    CUDA_OK(cudaMemcpy(d_dinp, nans.data(), (size_t)N * C * 2, cudaMemcpyHostToDevice));
    if (p.has_algo) {
      plan_run(&p, DINP_DGELU, d_W, d_dout, d_dinp, NULL, d_x, 0.0f);
      CUDA_OK(cudaStreamSynchronize(g_stream));
      std::vector<uint16_t> dinp = download(d_dinp, (size_t)N * C);
      Ref r = reference(dout, OC, 1, W, 1, C, NULL, NULL, N, C, OC);
      r.dgelu_in.resize(x.size());
      for (size_t i = 0; i < x.size(); i++) r.dgelu_in[i] = bf2f(x[i]);
      expect_matches(what, dinp.data(), OUT_DGELU, r);
      char name[200];
      snprintf(name, sizeof name, "%s: the aux matrix is read, not written%s", what, g_tag);
      EXPECT(name, download(d_x, x.size()) == x, "it changed");
    }
    EXPECT("dinp DGELU: heuristic finds an algorithm", p.has_algo, "none for %s", what);
    plan_destroy(&p);
    cudaFree(d_x);
  }
  {
    Plan p;
    plan_create(&p, DWEIGHT, C, OC, N, 0, ptr_align(d_inp), ptr_align(d_dout), ptr_align(d_dW), 0);
    snprintf(what, sizeof what, "dweight (fp32, beta=1) N=%d C=%d OC=%d", N, C, OC);
    if (p.has_algo) {
      plan_run(&p, DWEIGHT, d_inp, d_dout, d_dW, NULL, NULL, 1.0f);
      CUDA_OK(cudaStreamSynchronize(g_stream));
      std::vector<float> dW = download(d_dW, (size_t)OC * C);
      expect_matches(what, dW.data(), OUT_FP32, reference(dout, 1, OC, inp, 1, C, NULL, &dW0, OC, C, N));
    }
    EXPECT("dweight: heuristic finds an algorithm", p.has_algo, "none for %s", what);
    plan_destroy(&p);
  }
  cudaFree(d_inp), cudaFree(d_W), cudaFree(d_bias), cudaFree(d_dout);
  cudaFree(d_out), cudaFree(d_pre), cudaFree(d_dinp), cudaFree(d_dW);
}

// Planted mistakes: the checks above must be able to fail.
static void test_planted_mistakes(void) {
  const int N = 7, C = 24, OC = 24;  // square weight: transa N fits the same layouts
  std::vector<uint16_t> inp = rnd_bf16s((size_t)N * C), W = rnd_bf16s((size_t)OC * C);
  uint16_t *d_inp = upload(inp), *d_W = upload(W);
  uint16_t* d_out = (uint16_t*)dev_alloc((size_t)N * OC * 2);
  Ref r = reference(inp, C, 1, W, C, 1, NULL, NULL, N, OC, C);

  Plan p;
  plan_create(&p, FORWARD, OC, N, C, 0, 256, 256, 256, 1);
  EXPECT("planted: swapped transa gets an algorithm", p.has_algo, "none");
  if (p.has_algo) {
    plan_run(&p, FORWARD, d_W, d_inp, d_out, NULL, NULL, 0.0f);
    CUDA_OK(cudaStreamSynchronize(g_stream));
    std::vector<uint16_t> out = download(d_out, (size_t)N * OC);
    double worst;
    int bad = count_bad(out.data(), OUT_BF16, r, &worst);
    EXPECT("planted: swapped transa (inp @ W instead of inp @ W^T) fails the tolerance check", bad > N * OC / 2,
           "only %d of %d elements outside", bad, N * OC);
  }
  plan_destroy(&p);

  plan_create(&p, FORWARD, OC, N, C, 0, 256, 256, 256, 0);
  if (p.has_algo) {
    plan_run(&p, FORWARD, d_W, d_inp, d_out, NULL, NULL, 0.0f);
    CUDA_OK(cudaStreamSynchronize(g_stream));
    std::vector<uint16_t> out = download(d_out, (size_t)N * OC);
    double worst;
    int bad = count_bad(out.data(), OUT_BF16, r, &worst) + count_bits_differ(out.data(), OUT_BF16, r);
    EXPECT("planted: the correct product passes both checks", bad == 0, "it does not");
    out[5] ^= 1;  // one bf16 ulp
    EXPECT("planted: one element off by one bf16 ulp fails the bit-exact check",
           count_bits_differ(out.data(), OUT_BF16, r) == 1, "it does not");
  }
  plan_destroy(&p);
  cudaFree(d_inp), cudaFree(d_W), cudaFree(d_out);

  // DGELU against a wrong derivative: the checks must tell GELU' from the derivative with the
  // tanh' term dropped (0.5 (1 + t)), and from GELU itself in its place.
  std::vector<uint16_t> dout = rnd_bf16s((size_t)N * OC), x = rnd_bf16s((size_t)N * C);
  Ref rd = reference(dout, OC, 1, W, 1, C, NULL, NULL, N, C, OC);
  rd.dgelu_in.resize(x.size());
  for (size_t i = 0; i < x.size(); i++) rd.dgelu_in[i] = bf2f(x[i]);
  std::vector<uint16_t> good(x.size()), no_tanh_term(x.size()), gelu_not_grad(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    float v = rd.f32[i], xi = rd.dgelu_in[i];
    float u = 0.7978845608028654f * (xi + 0.044715f * xi * xi * xi);
    good[i] = f2bf(v * gelu_grad_f(xi));
    no_tanh_term[i] = f2bf(v * 0.5f * (1.0f + tanhf(u)));
    gelu_not_grad[i] = f2bf(v * gelu_f(xi));
  }
  double worst;
  EXPECT("planted: DGELU with the right derivative passes both checks",
         count_bad(good.data(), OUT_DGELU, rd, &worst) == 0 && count_bits_differ(good.data(), OUT_DGELU, rd) == 0,
         "it does not (worst %.3g)", worst);
  int bad1 = count_bad(no_tanh_term.data(), OUT_DGELU, rd, &worst);
  EXPECT("planted: DGELU without the tanh' term of the derivative fails the tolerance check", bad1 > N * C / 4,
         "only %d of %d elements outside", bad1, N * C);
  int bad2 = count_bad(gelu_not_grad.data(), OUT_DGELU, rd, &worst);
  EXPECT("planted: DGELU with GELU in place of its derivative fails the tolerance check", bad2 > N * C / 2,
         "only %d of %d elements outside", bad2, N * C);
}

// The product is queued with the descriptor's values at the call: setting another bias
// pointer afterwards (as the next matmul.cu call does) must not change queued work.
static void test_queued_bias(void) {
  const int N = 3, C = 16, OC = 8;
  std::vector<uint16_t> inp = rnd_bf16s((size_t)N * C), W = rnd_bf16s((size_t)OC * C);
  std::vector<uint16_t> b1 = rnd_bf16s(OC), b2 = rnd_bf16s(OC);
  uint16_t *d_inp = upload(inp), *d_W = upload(W), *d_b1 = upload(b1), *d_b2 = upload(b2);
  uint16_t* d_out = (uint16_t*)dev_alloc((size_t)N * OC * 2);
  Plan p;
  plan_create(&p, FORWARD, OC, N, C, 1, 256, 256, 256, 0);
  plan_run(&p, FORWARD, d_W, d_inp, d_out, d_b1, NULL, 0.0f);
  const void* other = d_b2;
  LT_OK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &other, sizeof other));
  plan_destroy(&p);  // also allowed while the product is queued
  CUDA_OK(cudaStreamSynchronize(g_stream));
  std::vector<uint16_t> out = download(d_out, (size_t)N * OC);
  Ref r = reference(inp, C, 1, W, C, 1, &b1, NULL, N, OC, C);
  EXPECT("queued product keeps the bias pointer of its call", count_bits_differ(out.data(), OUT_BF16, r) == 0,
         "it used another");
  cudaFree(d_inp), cudaFree(d_W), cudaFree(d_b1), cudaFree(d_b2), cudaFree(d_out);
}

// ---- the heuristic ---------------------------------------------------------------------------

static int heuristic_finds(int kind, int m, int n, int k, int has_bias, uint32_t al_a, uint32_t al_b,
                           uint32_t al_c) {
  Plan p;
  plan_create(&p, kind, m, n, k, has_bias, al_a, al_b, al_c, 0);
  int found = p.has_algo;
  plan_destroy(&p);
  return found;
}

static void test_heuristic(void) {
  EXPECT("heuristic: an aligned forward (m=24 n=5 k=16, bias) has an algorithm",
         heuristic_finds(FORWARD, 24, 5, 16, 1, 256, 128, 16), "none");
  {
    Plan p;
    plan_create(&p, FORWARD, 24, 5, 16, 0, 256, 256, 256, 0);
    EXPECT("heuristic: the algorithm's workspace fits the preference",
           p.has_algo && p.algo_workspace <= kWorkspaceBytes, "workspace %zu", p.algo_workspace);
    plan_destroy(&p);
  }
  // Operands only 2-byte aligned, as bf16 data at an odd element offset: the alignments come
  // from real pointers, as in matmul.cu.
  uint16_t* base = (uint16_t*)dev_alloc(4096);
  uint32_t al2 = ptr_align(base + 1);
  EXPECT("heuristic: a pointer one bf16 past a cudaMalloc base is 2-byte aligned", al2 == 2, "%u", al2);
  EXPECT("heuristic: no algorithm with A 2-byte aligned", !heuristic_finds(FORWARD, 24, 5, 16, 0, al2, 256, 256),
         "found one");
  EXPECT("heuristic: no algorithm with B 2-byte aligned", !heuristic_finds(DINP, 24, 5, 16, 0, 256, al2, 256),
         "found one");
  EXPECT("heuristic: no algorithm with C/D 2-byte aligned", !heuristic_finds(FORWARD_GELU, 24, 5, 16, 1, 256, 256, al2),
         "found one");
  EXPECT("heuristic: no algorithm with 8-byte aligned A", !heuristic_finds(DWEIGHT, 24, 16, 5, 0, 8, 256, 256),
         "found one");
  EXPECT("heuristic: an algorithm with 16-byte aligned operands", heuristic_finds(DWEIGHT, 24, 16, 5, 0, 16, 16, 16),
         "none");
  cudaFree(base);
  // Rows that are not a multiple of 16 bytes.
  EXPECT("heuristic: no algorithm for forward with C = 7 (14-byte rows)",
         !heuristic_finds(FORWARD, 8, 3, 7, 0, 256, 256, 256), "found one");
  EXPECT("heuristic: no algorithm for forward with OC = 12 (24-byte rows of out)",
         !heuristic_finds(FORWARD, 12, 3, 8, 0, 256, 256, 256), "found one");
  EXPECT("heuristic: no algorithm for dweight with OC = 4 (8-byte rows of dout)",
         !heuristic_finds(DWEIGHT, 8, 4, 3, 0, 256, 256, 256), "found one");
  EXPECT("heuristic: no algorithm for dinp with C = 20 (40-byte rows)",
         !heuristic_finds(DINP, 20, 3, 8, 0, 256, 256, 256), "found one");
  // The switch that sends every shape to the fallback kernel.
  // The switch that sends every shape to the fallback kernel: shapes that have algorithms
  // without it have none with it, and have them again once it is 0.
  const int good[4][4] = {{FORWARD, 16, 3, 8}, {FORWARD_GELU, 16, 3, 8}, {DINP, 16, 3, 8}, {DWEIGHT, 16, 8, 3}};
  int found[3] = {0, 0, 0};
  const char* env[3] = {NULL, "1", "0"};
  for (int e = 0; e < 3; e++) {
    if (env[e])
      setenv("CUDASIM_LT_NO_ALGO", env[e], 1);
    for (int s = 0; s < 4; s++)
      found[e] += heuristic_finds(good[s][0], good[s][1], good[s][2], good[s][3], good[s][0] <= FORWARD_GELU, 256, 256,
                                  256);
  }
  unsetenv("CUDASIM_LT_NO_ALGO");
  EXPECT("heuristic: CUDASIM_LT_NO_ALGO=1 gives no algorithm for any kind", found[0] == 4 && found[1] == 0,
         "%d of 4 without it, %d of 4 with it", found[0], found[1]);
  EXPECT("heuristic: CUDASIM_LT_NO_ALGO=0 gives algorithms again", found[2] == 4, "%d of 4", found[2]);
}

// ---- CUB radix sort --------------------------------------------------------------------------

// Sorts (keys, iota) with SortPairs on the device: the size query as embedding.cu makes it,
// temporary storage of exactly that size (placed at `temp_offset` bytes into a larger
// allocation, so the sort must align it itself, and followed by guard bytes that must stay
// untouched), then the sort. Returns keys and values.
template <typename K>
static void device_sort(const std::vector<K>& keys, int begin_bit, int end_bit, size_t temp_offset,
                        std::vector<K>* keys_out, std::vector<int32_t>* vals_out) {
  int n = (int)keys.size();
  std::vector<int32_t> vals(n);
  for (int i = 0; i < n; i++) vals[i] = i;
  size_t temp_bytes = 0;
  CUDA_OK(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const K*)NULL, (K*)NULL, (const int32_t*)NULL,
                                          (int32_t*)NULL, n, begin_bit, end_bit, g_stream));
  K* d_kin = upload(keys.empty() ? std::vector<K>(1) : keys);
  int32_t* d_vin = upload(vals.empty() ? std::vector<int32_t>(1) : vals);
  K* d_kout = (K*)dev_alloc((n ? n : 1) * sizeof(K));
  int32_t* d_vout = (int32_t*)dev_alloc((n ? n : 1) * sizeof(int32_t));
  const size_t guard = 512;
  char* d_temp = (char*)dev_alloc(temp_offset + temp_bytes + guard);
  std::vector<char> pattern(guard, 0x5a);
  CUDA_OK(cudaMemcpy(d_temp + temp_offset + temp_bytes, pattern.data(), guard, cudaMemcpyHostToDevice));
  CUDA_OK(cub::DeviceRadixSort::SortPairs(d_temp + temp_offset, temp_bytes, (const K*)d_kin, d_kout,
                                          (const int32_t*)d_vin, d_vout, n, begin_bit, end_bit, g_stream));
  CUDA_OK(cudaStreamSynchronize(g_stream));
  CHECK(download(d_temp + temp_offset + temp_bytes, guard) == pattern, "SortPairs wrote past its temporary storage");
  keys_out->clear();
  vals_out->clear();
  if (n > 0) {
    *keys_out = download(d_kout, n);
    *vals_out = download(d_vout, n);
    CHECK(download(d_kin, n) == keys && download(d_vin, n) == vals, "SortPairs changed its inputs");
  }
  cudaFree(d_kin), cudaFree(d_vin), cudaFree(d_kout), cudaFree(d_vout), cudaFree(d_temp);
}

// CUB's order: stable, by bits [begin_bit, end_bit) of the key with its sign bit inverted
// (for signed types), computed here with std::stable_sort.
template <typename K>
static void reference_sort(const std::vector<K>& keys, int begin_bit, int end_bit, std::vector<K>* keys_out,
                           std::vector<int32_t>* vals_out) {
  typedef typename std::make_unsigned<K>::type U;
  std::vector<int32_t> idx(keys.size());
  for (size_t i = 0; i < idx.size(); i++) idx[i] = (int32_t)i;
  auto sort_key = [&](int32_t i) {
    U u = (U)keys[i];
    if (std::is_signed<K>::value) u ^= (U)((U)1 << (sizeof(K) * 8 - 1));
    uint64_t v = (uint64_t)u >> begin_bit;
    int width = end_bit - begin_bit;
    return width >= 64 ? v : v & ((1ull << width) - 1);
  };
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return sort_key(a) < sort_key(b); });
  keys_out->resize(keys.size());
  for (size_t i = 0; i < idx.size(); i++) (*keys_out)[i] = keys[idx[i]];
  *vals_out = idx;
}

// Sorted by key and, within equal keys, in increasing value (row index): what embedding.cu
// relies on. The values must be a permutation with keys_out[i] == keys_in[vals[i]].
static bool sorted_and_stable(const std::vector<int32_t>& keys_in, const std::vector<int32_t>& k,
                              const std::vector<int32_t>& v) {
  if (k.size() != keys_in.size() || v.size() != keys_in.size()) return false;
  std::vector<char> seen(k.size(), 0);
  for (size_t i = 0; i < k.size(); i++) {
    if (v[i] < 0 || (size_t)v[i] >= k.size() || seen[v[i]] || keys_in[v[i]] != k[i]) return false;
    seen[v[i]] = 1;
    if (i > 0 && (k[i - 1] > k[i] || (k[i - 1] == k[i] && v[i - 1] > v[i]))) return false;
  }
  return true;
}

static void test_sort(void) {
  // The size query: nonzero, growing with n, and no work (NULL arrays are not touched).
  size_t small = 0, large = 0;
  EXPECT("SortPairs size query returns cudaSuccess",
         cub::DeviceRadixSort::SortPairs(NULL, small, (const int32_t*)NULL, (int32_t*)NULL, (const int32_t*)NULL,
                                         (int32_t*)NULL, 10, 0, 32, g_stream) == cudaSuccess,
         "error");
  CUDA_OK(cub::DeviceRadixSort::SortPairs(NULL, large, (const int32_t*)NULL, (int32_t*)NULL, (const int32_t*)NULL,
                                          (int32_t*)NULL, 100000, 0, 32, g_stream));
  EXPECT("SortPairs size query: nonzero, and room for the items' alternate buffers", small > 0 && large > 100000 * 8,
         "%zu bytes for 10 items, %zu for 100000", small, large);
  {
    std::vector<int32_t> sentinel(16, 12345);
    int32_t* d_out = upload(sentinel);
    int32_t* d_in = upload(sentinel);
    size_t bytes = 0;
    CUDA_OK(cub::DeviceRadixSort::SortPairs(NULL, bytes, (const int32_t*)d_in, d_out, (const int32_t*)d_in + 8,
                                            d_out + 8, 8, 0, 32, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
    EXPECT("SortPairs size query writes nothing", download(d_out, 16) == sentinel, "outputs changed");
    cudaFree(d_out), cudaFree(d_in);
  }

  // Token ids as embedding.cu sorts them: few distinct ids, many duplicates, rows in order.
  std::vector<int32_t> ids(1000);
  for (auto& x : ids) x = (int32_t)(rnd() % 37);
  std::vector<int32_t> k, v;
  device_sort(ids, 0, 32, 0, &k, &v);
  EXPECT("SortPairs: token ids sorted, equal ids in increasing row (stable)", sorted_and_stable(ids, k, v),
         "not sorted or not stable");

  // Negative and extreme keys sort numerically.
  std::vector<int32_t> neg(777);
  for (auto& x : neg) x = (int32_t)(rnd() % 13) - 6;
  const int32_t extremes[] = {INT_MIN, INT_MAX, -1, 0, 1, INT_MIN + 1, INT_MAX - 1, -256, 256, -65536};
  for (size_t i = 0; i < sizeof extremes / sizeof extremes[0]; i++) neg[i * 70] = extremes[i];
  device_sort(neg, 0, 32, 4, &k, &v);  // temporary storage 4 bytes past an allocation's start
  EXPECT("SortPairs: negative and extreme keys in numeric order, stable", sorted_and_stable(neg, k, v),
         "not sorted or not stable");
  EXPECT("SortPairs: INT_MIN first and INT_MAX last", k.front() == INT_MIN && k.back() == INT_MAX, "%d .. %d",
         k.front(), k.back());

  // Bit ranges select bits of the transformed key (sign bit inverted, then truncated).
  const int ranges[][2] = {{0, 8}, {4, 32}, {8, 24}, {31, 32}, {5, 5}};
  for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
    std::vector<int32_t> rk, rv;
    device_sort(neg, ranges[r][0], ranges[r][1], 0, &k, &v);
    reference_sort(neg, ranges[r][0], ranges[r][1], &rk, &rv);
    char name[120];
    snprintf(name, sizeof name, "SortPairs: bits [%d, %d) of signed keys as CUB orders them", ranges[r][0],
             ranges[r][1]);
    EXPECT(name, k == rk && v == rv, "differs from the reference");
  }

  // Other key types go through the same code: 64-bit signed, 16-bit unsigned.
  {
    std::vector<int64_t> k64(500), k64o;
    for (auto& x : k64) x = (int64_t)(rnd() % 9 - 4) * 1000000007ll * 1000;
    k64[3] = INT64_MIN, k64[4] = INT64_MAX;
    std::vector<int64_t> rk;
    std::vector<int32_t> rv;
    device_sort(k64, 0, 64, 0, &k64o, &v);
    reference_sort(k64, 0, 64, &rk, &rv);
    EXPECT("SortPairs: int64 keys", k64o == rk && v == rv, "differs from the reference");
    std::vector<uint16_t> k16(300), k16o, rk16;
    for (auto& x : k16) x = (uint16_t)(rnd() % 70000);
    device_sort(k16, 0, 16, 0, &k16o, &v);
    reference_sort(k16, 0, 16, &rk16, &rv);
    EXPECT("SortPairs: uint16 keys", k16o == rk16 && v == rv, "differs from the reference");
  }

  // No items: nothing to do, success.
  std::vector<int32_t> none;
  device_sort(none, 0, 32, 0, &k, &v);
  EXPECT("SortPairs: zero items", k.empty() && v.empty(), "output not empty");

  // Planted: an unstable result (two rows of one id swapped) must fail the stability check.
  device_sort(ids, 0, 32, 0, &k, &v);
  size_t i = 1;
  while (i < k.size() && k[i] != k[i - 1]) i++;
  if (i < k.size()) std::swap(v[i], v[i - 1]);
  EXPECT("planted: swapping two equal-key rows fails the stability check",
         i < k.size() && !sorted_and_stable(ids, k, v), "it passes");
}

int main(void) {
  LT_OK(cublasLtCreate(&g_lt));
  CUDA_OK(cudaStreamCreate(&g_stream));
  g_workspace = dev_alloc(kWorkspaceBytes);

  // Odd token counts; feature sizes multiples of 8 (16-byte bf16 rows, so the heuristic finds
  // algorithms) and up to k = 136.
  const int shapes[][3] = {{1, 8, 8}, {3, 8, 16}, {5, 24, 8}, {17, 40, 24}, {7, 24, 24}, {33, 136, 72}, {2, 16, 136}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) test_shape(shapes[s][0], shapes[s][1], shapes[s][2]);
  test_planted_mistakes();
  test_queued_bias();
  // The fp16 build's products (matmul.cu with CUDA_R_16F): the same shapes and checks, with
  // fp16's unit roundoff 2^-11 in the tolerance (the products of fp16 values are exact in fp32).
  g_half = CUDA_R_16F, g_tag = " [fp16]", kBf = 1.0 / 2048.0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) test_shape(shapes[s][0], shapes[s][1], shapes[s][2]);
  g_half = CUDA_R_16BF, g_tag = "", kBf = 1.0 / 256.0;
  test_heuristic();
  test_sort();

  cudaFree(g_workspace);
  CUDA_OK(cudaStreamDestroy(g_stream));
  LT_OK(cublasLtDestroy(g_lt));
  return test_summary();
}
