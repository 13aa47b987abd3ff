// test_kernels_gpu.c: every CUDA kernel of kernels.h against the CPU reference kernels.
//
// One binary holds both backends: the CUDA kernels (kernels.h, act_t = bf16 bits) and the CPU
// kernels compiled with act_t = float, renamed cpu_<name> (test/gpu/cpu_ref.h). For every
// kernel:
// - inputs are random and never zero (magnitudes in [0.1, 1) times a scale, random signs), and
//   rounded to bf16 first, so both backends compute on exactly the same values;
// - outputs are poisoned (all bits set: NaN in bf16, fp32 and fp64) before each GPU run, so an
//   element a kernel forgets to write fails; accumulating outputs (+=) start from random
//   values instead, which also checks that they accumulate;
// - the GPU result (converted to fp32) is compared with the CPU's elementwise:
//     |gpu - ref| <= rtol * |ref| + arel * rms(ref)          (a NaN never passes)
// - every kernel runs twice from the same state and the two results must be bit-identical.
//
// Tolerances (why each holds for a correct kernel and not for a wrong one):
// - A bf16 output is the fp32 result rounded once: relative error <= 2^-9. rtol = 2^-8 leaves
//   a factor 2 for the fp32 differences (accumulation order, FMA contraction, tanhf/expf/logf
//   ulps), which are ~1e-6 relative, far below 2^-9.
// - arel covers elements whose value cancels to nearly 0 (a matmul output, a gradient that
//   crosses zero): their fp32 error is relative to the size of the terms, not of the result.
//   2^-10 of the rms for products over K <= 4096 terms (fp32 accumulation error ~ K * 2^-24
//   of the terms at worst, i.e. <= 2.4e-4 relative to the rms), 2^-12 for elementwise maps.
// - fp32 outputs that are sums (parameter gradients, loss, statistics): only the summation
//   order differs, errors ~ sqrt(n) * 2^-24 relative; 1e-4 (1e-3 where tensor cores
//   accumulate) is 10-100x above that and far below any indexing or formula bug.
// - Where the CUDA kernel performs the same fp32 operations in the same order as the CPU
//   (elementwise maps, casts, embedding backward, AdamW), the result must be bit-identical
//   (bf16: the CPU value rounded to nearest even).
// - Attention (flash kernels): P and dS are rounded to bf16 before the second product on the
//   tensor cores, each a 2^-9 relative error on terms summed over Tk keys, plus the output
//   rounding; 2^-6 (relative and of the rms) is ~4x above that and far below a masking, scale
//   or layout bug (O(1) errors).
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/cuda/kernels_cuda.h"
#include "test/gpu/cpu_ref.h"
#include "test/test.h"

static KernelCtx* K;

#define CUDA_T(call)                                                                             \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      printf("FAIL CUDA error: %s (%s at %s:%d)\n", cudaGetErrorString(e_), #call, __FILE__, __LINE__); \
      test_failed_++;                                                                            \
      test_summary();                                                                            \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

// ---- random inputs --------------------------------------------------------------------

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rng_next(void) {  // splitmix64
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double urand(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }
static int irand(int n) { return (int)(rng_next() % (uint64_t)n); }
// Magnitude in [0.1, 1) * scale, random sign: never zero.
static float rv(float scale) {
  float m = (float)(0.1 + 0.9 * urand()) * scale;
  return (rng_next() & 1) ? m : -m;
}
static float* hrand(size_t n, float scale, float offset) {
  float* x = malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = offset + rv(scale);
  return x;
}
static float* hcopy(const float* x, size_t n) {
  float* y = malloc((n ? n : 1) * sizeof(float));
  memcpy(y, x, n * sizeof(float));
  return y;
}
static float* hzero(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

// ---- bf16 on the host -----------------------------------------------------------------

static uint16_t h_f2bf(float f) {  // round to nearest even, as __float2bfloat16_rn
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float h_bf2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static void round_bf16(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = h_bf2f(h_f2bf(x[i]));
}

// ---- device buffers -------------------------------------------------------------------

static void* dmalloc(size_t bytes) {
  void* p = NULL;
  CUDA_T(cudaMalloc(&p, bytes ? bytes : 16));
  return p;
}
static void dfree(void* p) { CUDA_T(cudaFree(p)); }
// Rounds x to bf16 in place (the CPU reference then sees the same values) and uploads it.
static act_t* up_act(float* x, size_t n) {
  round_bf16(x, n);
  uint16_t* b = malloc((n ? n : 1) * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++) b[i] = h_f2bf(x[i]);
  act_t* d = dmalloc(n * sizeof(act_t));
  CUDA_T(cudaMemcpy(d, b, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
  free(b);
  return d;
}
static void set_act(act_t* d, float* x, size_t n) {  // re-upload into an existing buffer
  round_bf16(x, n);
  uint16_t* b = malloc((n ? n : 1) * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++) b[i] = h_f2bf(x[i]);
  CUDA_T(cudaMemcpy(d, b, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
  free(b);
}
static float* up_f32(const float* x, size_t n) {
  float* d = dmalloc(n * sizeof(float));
  CUDA_T(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}
static void set_f32(float* d, const float* x, size_t n) {
  CUDA_T(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
}
static int32_t* up_i32(const int32_t* x, size_t n) {
  int32_t* d = dmalloc(n * sizeof(int32_t));
  CUDA_T(cudaMemcpy(d, x, n * sizeof(int32_t), cudaMemcpyHostToDevice));
  return d;
}
static void poison(void* d, size_t bytes) { CUDA_T(cudaMemset(d, 0xFF, bytes)); }
// Waits for the kernels and surfaces any asynchronous error.
static void gpu_done(void) { CUDA_T(cudaDeviceSynchronize()); }
// A device result: raw bits (for the determinism check) and fp32 values (for the comparison).
typedef struct {
  void* bits;
  float* f;
  size_t n, bytes;
} Result;
static Result get_act(const act_t* d, size_t n) {
  gpu_done();
  Result r = {malloc(n * 2 + 16), malloc(n * sizeof(float) + 16), n, n * 2};
  CUDA_T(cudaMemcpy(r.bits, d, n * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) r.f[i] = h_bf2f(((uint16_t*)r.bits)[i]);
  return r;
}
static Result get_f32(const float* d, size_t n) {
  gpu_done();
  Result r = {malloc(n * 4 + 16), malloc(n * sizeof(float) + 16), n, n * 4};
  CUDA_T(cudaMemcpy(r.bits, d, n * 4, cudaMemcpyDeviceToHost));
  memcpy(r.f, r.bits, n * 4);
  return r;
}
static void free_result(Result* r) {
  free(r->bits);
  free(r->f);
}

// ---- checks ---------------------------------------------------------------------------

static void pass(const char* fmt_name, const char* detail) {
  test_passed_++;
  printf("ok   %s%s\n", fmt_name, detail);
}
static void fail(const char* name, const char* detail) {
  test_failed_++;
  printf("FAIL %s: %s\n", name, detail);
}

// |gpu - ref| <= rtol |ref| + arel rms(ref) for every element; NaN never passes.
static void check_close(const char* name, const float* gpu, const float* ref, size_t n, double rtol, double arel) {
  double ss = 0.0;
  for (size_t i = 0; i < n; i++) ss += (double)ref[i] * ref[i];
  double rms = n ? sqrt(ss / n) : 0.0, atol = arel * rms;
  size_t bad = 0, first = 0, worst_i = 0;
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)gpu[i] - (double)ref[i]);
    double bound = rtol * fabs((double)ref[i]) + atol;
    int ok = err <= bound;  // false for NaN
    double ratio = !ok ? (bound > 0 && err == err ? err / bound : INFINITY) : (bound > 0 ? err / bound : 0.0);
    if (!ok && !bad++) first = i;
    if (ratio > worst) worst = ratio, worst_i = i;
  }
  char d[320];
  if (!bad) {
    snprintf(d, sizeof d, " (%zu elements, worst error %.3g of the bound, rtol %.3g, atol %.3g)", n, worst, rtol, atol);
    pass(name, d);
  } else {
    snprintf(d, sizeof d, "%zu of %zu elements out of bounds (rtol %.3g, atol %.3g); first at %zu: gpu %.9g ref %.9g; "
             "worst at %zu: gpu %.9g ref %.9g", bad, n, rtol, atol, first, gpu[first], ref[first], worst_i,
             gpu[worst_i], ref[worst_i]);
    fail(name, d);
  }
}

// The bf16 result must be the CPU's fp32 value rounded to nearest even, bit for bit.
static void check_bf16_exact(const char* name, const Result* g, const float* ref) {
  const uint16_t* b = g->bits;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g->n; i++)
    if (b[i] != h_f2bf(ref[i])) {
      if (!bad) first = i;
      bad++;
    }
  char d[256];
  if (!bad) {
    snprintf(d, sizeof d, " (%zu elements, bit-identical to the CPU value rounded to bf16)", g->n);
    pass(name, d);
  } else {
    snprintf(d, sizeof d, "%zu of %zu elements differ from the CPU value rounded to bf16; first at %zu: gpu %.9g ref %.9g",
             bad, g->n, first, g->f[first], ref[first]);
    fail(name, d);
  }
}

static void check_f32_exact(const char* name, const float* gpu, const float* ref, size_t n) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&gpu[i], &ref[i], 4) != 0) {
      if (!bad) first = i;
      bad++;
    }
  char d[256];
  if (!bad) {
    snprintf(d, sizeof d, " (%zu elements, bit-identical to the CPU)", n);
    pass(name, d);
  } else {
    snprintf(d, sizeof d, "%zu of %zu elements not bit-identical to the CPU; first at %zu: gpu %.9g ref %.9g", bad, n,
             first, gpu[first], ref[first]);
    fail(name, d);
  }
}

static void check_same(const char* name, const Result* a, const Result* b) {
  char label[256];
  snprintf(label, sizeof label, "%s: deterministic (two runs bit-identical)", name);
  if (a->bytes == b->bytes && !memcmp(a->bits, b->bits, a->bytes)) {
    pass(label, "");
  } else {
    size_t i = 0;
    while (i < a->bytes && ((char*)a->bits)[i] == ((char*)b->bits)[i]) i++;
    char d[128];
    snprintf(d, sizeof d, "runs differ (first differing byte %zu of %zu)", i, a->bytes);
    fail(label, d);
  }
}

static void check_true(const char* name, int ok, const char* detail) {
  if (ok) pass(name, "");
  else fail(name, detail);
}

#define R_BF16 0.00390625     // 2^-8
#define A_PROD 0.0009765625   // 2^-10
#define A_ELEM 0.000244140625 // 2^-12
#define R_ATTN 0.015625       // 2^-6

// ---- backend --------------------------------------------------------------------------

static void test_backend(void) {
  check_true("kernels_backend() is \"cuda\"", !strcmp(kernels_backend(), "cuda"), kernels_backend());
  char name[256] = "";
  kernels_device_name(K, name, sizeof name);
  printf("     device: %s\n", name);
  check_true("kernels_device_name names the GPU", name[0] && strcmp(name, "cuda (no context)"), name);
}

// ---- elementwise ----------------------------------------------------------------------

static void test_elementwise(size_t n) {
  char label[160];
  float* y0 = hrand(n, 1.0f, 0.0f);
  float* x = hrand(n, 1.0f, 0.0f);
  act_t* dy = up_act(y0, n);
  act_t* dx = up_act(x, n);
  Result r[2];
  // add_inplace
  for (int rep = 0; rep < 2; rep++) {
    set_act(dy, y0, n);
    add_inplace(K, dy, dx, n);
    r[rep] = get_act(dy, n);
  }
  float* ref = hcopy(y0, n);
  cpu_add_inplace(NULL, ref, x, n);
  snprintf(label, sizeof label, "add_inplace n=%zu", n);
  check_bf16_exact(label, &r[0], ref);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  // scale_act
  for (int rep = 0; rep < 2; rep++) {
    set_act(dy, y0, n);
    scale_act(K, dy, 0.37f, n);
    r[rep] = get_act(dy, n);
  }
  memcpy(ref, y0, n * sizeof(float));
  cpu_scale_act(NULL, ref, 0.37f, n);
  snprintf(label, sizeof label, "scale_act n=%zu", n);
  check_bf16_exact(label, &r[0], ref);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  // fill_zero_act
  poison(dy, n * sizeof(act_t));
  fill_zero_act(K, dy, n);
  r[0] = get_act(dy, n);
  float* zeros = hzero(n);
  snprintf(label, sizeof label, "fill_zero_act n=%zu", n);
  check_bf16_exact(label, &r[0], zeros);
  free_result(&r[0]);

  // fp32 helpers
  float* fy0 = hrand(n, 1.0f, 0.0f);
  float* fx = hrand(n, 1.0f, 0.0f);
  float* dfy = up_f32(fy0, n);
  float* dfx = up_f32(fx, n);
  poison(dfy, n * 4);
  fill_zero_f32(K, dfy, n);
  r[0] = get_f32(dfy, n);
  snprintf(label, sizeof label, "fill_zero_f32 n=%zu", n);
  check_f32_exact(label, r[0].f, zeros, n);
  free_result(&r[0]);
  for (int rep = 0; rep < 2; rep++) {
    set_f32(dfy, fy0, n);
    scale_f32(K, dfy, -1.37f, n);
    r[rep] = get_f32(dfy, n);
  }
  memcpy(ref, fy0, n * 4);
  cpu_scale_f32(NULL, ref, -1.37f, n);
  snprintf(label, sizeof label, "scale_f32 n=%zu", n);
  check_f32_exact(label, r[0].f, ref, n);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  for (int rep = 0; rep < 2; rep++) {
    set_f32(dfy, fy0, n);
    add_f32(K, dfy, dfx, n);
    r[rep] = get_f32(dfy, n);
  }
  memcpy(ref, fy0, n * 4);
  cpu_add_f32(NULL, ref, fx, n);
  snprintf(label, sizeof label, "add_f32 n=%zu", n);
  check_f32_exact(label, r[0].f, ref, n);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  // casts
  poison(dy, n * sizeof(act_t));
  cast_f32_to_act(K, dy, dfx, n);
  r[0] = get_act(dy, n);
  snprintf(label, sizeof label, "cast_f32_to_act n=%zu (round to nearest even)", n);
  check_bf16_exact(label, &r[0], fx);
  free_result(&r[0]);
  poison(dfy, n * 4);
  cast_act_to_f32(K, dfy, dx, n);  // dx holds bf16(x); x itself was rounded in place by up_act
  r[0] = get_f32(dfy, n);
  snprintf(label, sizeof label, "cast_act_to_f32 n=%zu", n);
  check_f32_exact(label, r[0].f, x, n);
  free_result(&r[0]);

  dfree(dy), dfree(dx), dfree(dfy), dfree(dfx);
  free(y0), free(x), free(ref), free(zeros), free(fy0), free(fx);
}

// ---- activations ----------------------------------------------------------------------

typedef void (*ActFwd)(KernelCtx*, act_t*, const act_t*, size_t);
typedef void (*ActBwd)(KernelCtx*, act_t*, const act_t*, const act_t*, size_t);
typedef void (*CpuFwd)(KernelCtx*, float*, const float*, size_t);
typedef void (*CpuBwd)(KernelCtx*, float*, const float*, const float*, size_t);

static void test_unary(const char* name, ActFwd fwd, ActBwd bwd, CpuFwd cfwd, CpuBwd cbwd, size_t n) {
  char label[160];
  float* x = hrand(n, 3.0f, 0.0f);
  float* dout = hrand(n, 1.0f, 0.0f);
  act_t* dx_in = up_act(x, n);
  act_t* d_dout = up_act(dout, n);
  act_t* dres = dmalloc(n * sizeof(act_t));
  float* ref = hzero(n);
  Result r[2];
  // forward into a separate buffer, then in place
  cfwd(NULL, ref, x, n);
  for (int rep = 0; rep < 2; rep++) {
    poison(dres, n * 2);
    fwd(K, dres, dx_in, n);
    r[rep] = get_act(dres, n);
  }
  snprintf(label, sizeof label, "%s_forward n=%zu", name, n);
  check_close(label, r[0].f, ref, n, R_BF16, A_ELEM);
  check_same(label, &r[0], &r[1]);
  free_result(&r[1]);
  act_t* dinpl = up_act(x, n);
  fwd(K, dinpl, dinpl, n);
  r[1] = get_act(dinpl, n);
  snprintf(label, sizeof label, "%s_forward in place (out == x) equals out of place", name);
  check_true(label, !memcmp(r[0].bits, r[1].bits, n * 2), "in-place result differs");
  free_result(&r[0]), free_result(&r[1]);
  // backward out of place, then in place (dx == dout), as layers/gpt.c calls it
  cbwd(NULL, ref, x, dout, n);
  for (int rep = 0; rep < 2; rep++) {
    poison(dres, n * 2);
    bwd(K, dres, dx_in, d_dout, n);
    r[rep] = get_act(dres, n);
  }
  snprintf(label, sizeof label, "%s_backward n=%zu", name, n);
  check_close(label, r[0].f, ref, n, R_BF16, A_ELEM);
  check_same(label, &r[0], &r[1]);
  free_result(&r[1]);
  bwd(K, d_dout, dx_in, d_dout, n);
  r[1] = get_act(d_dout, n);
  snprintf(label, sizeof label, "%s_backward in place (dx == dout) equals out of place", name);
  check_true(label, !memcmp(r[0].bits, r[1].bits, n * 2), "in-place result differs");
  free_result(&r[0]), free_result(&r[1]);
  dfree(dx_in), dfree(d_dout), dfree(dres), dfree(dinpl);
  free(x), free(dout), free(ref);
}

static void test_geglu(int N, int F) {
  char label[160];
  size_t nx = (size_t)N * 2 * F, no = (size_t)N * F;
  float* x = hrand(nx, 3.0f, 0.0f);
  float* dout = hrand(no, 1.0f, 0.0f);
  act_t* dxin = up_act(x, nx);
  act_t* ddout = up_act(dout, no);
  act_t* dout_buf = dmalloc(no * 2);
  act_t* ddx = dmalloc(nx * 2);
  float* ref = hzero(nx);
  Result r[2];
  cpu_geglu_forward(NULL, ref, x, N, F);
  for (int rep = 0; rep < 2; rep++) {
    poison(dout_buf, no * 2);
    geglu_forward(K, dout_buf, dxin, N, F);
    r[rep] = get_act(dout_buf, no);
  }
  snprintf(label, sizeof label, "geglu_forward N=%d F=%d", N, F);
  check_close(label, r[0].f, ref, no, R_BF16, A_ELEM);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  cpu_geglu_backward(NULL, ref, x, dout, N, F);
  for (int rep = 0; rep < 2; rep++) {
    poison(ddx, nx * 2);
    geglu_backward(K, ddx, dxin, ddout, N, F);
    r[rep] = get_act(ddx, nx);
  }
  snprintf(label, sizeof label, "geglu_backward N=%d F=%d", N, F);
  check_close(label, r[0].f, ref, nx, R_BF16, A_ELEM);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  dfree(dxin), dfree(ddout), dfree(dout_buf), dfree(ddx);
  free(x), free(dout), free(ref);
}

// ---- normalization --------------------------------------------------------------------

static void test_layernorm(int N, int C, int rms) {
  const char* nm = rms ? "rmsnorm" : "layernorm";
  char label[160];
  size_t n = (size_t)N * C;
  const float eps = 1e-5f;
  float* a = hrand(n, 1.0f, 0.3f);  // a mean away from 0, as a residual stream has
  float* b = hrand(n, 0.5f, 0.0f);
  float* w = hrand(C, 0.5f, 1.0f);
  float* bias = hrand(C, 0.2f, 0.0f);
  act_t *da = up_act(a, n), *db = up_act(b, n), *dw = up_act(w, C), *dbias = up_act(bias, C);
  act_t *dout = dmalloc(n * 2), *dres = dmalloc(n * 2);
  float *dmean = dmalloc(N * 4), *drstd = dmalloc(N * 4);
  float *ref = hzero(n), *rmean = hzero(N), *rrstd = hzero(N), *rres = hzero(n);
  Result o[2], m[2], s[2];

  // plain forward
  if (rms) cpu_rmsnorm_forward(NULL, ref, rrstd, a, w, N, C, eps);
  else cpu_layernorm_forward(NULL, ref, rmean, rrstd, a, w, bias, N, C, eps);
  for (int rep = 0; rep < 2; rep++) {
    poison(dout, n * 2), poison(dmean, N * 4), poison(drstd, N * 4);
    if (rms) rmsnorm_forward(K, dout, drstd, da, dw, N, C, eps);
    else layernorm_forward(K, dout, dmean, drstd, da, dw, dbias, N, C, eps);
    o[rep] = get_act(dout, n), m[rep] = get_f32(dmean, N), s[rep] = get_f32(drstd, N);
  }
  snprintf(label, sizeof label, "%s_forward out N=%d C=%d", nm, N, C);
  check_close(label, o[0].f, ref, n, R_BF16, A_PROD);
  check_same(label, &o[0], &o[1]);
  if (!rms) {
    snprintf(label, sizeof label, "%s_forward mean N=%d C=%d", nm, N, C);
    check_close(label, m[0].f, rmean, N, 1e-5, 1e-5);
    check_same(label, &m[0], &m[1]);
  }
  snprintf(label, sizeof label, "%s_forward rstd N=%d C=%d", nm, N, C);
  check_close(label, s[0].f, rrstd, N, 1e-4, 0);
  check_same(label, &s[0], &s[1]);
  for (int i = 0; i < 2; i++) free_result(&o[i]), free_result(&m[i]), free_result(&s[i]);

  // fused residual forward: the residual must be bf16(a + b) exactly, and the output the norm
  // of that stored (rounded) residual.
  float* sum = hcopy(a, n);
  cpu_add_inplace(NULL, sum, b, n);
  Result rr[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(dout, n * 2), poison(dres, n * 2), poison(dmean, N * 4), poison(drstd, N * 4);
    if (rms) residual_rmsnorm_forward(K, dres, dout, drstd, da, db, dw, N, C, eps);
    else residual_layernorm_forward(K, dres, dout, dmean, drstd, da, db, dw, dbias, N, C, eps);
    rr[rep] = get_act(dres, n), o[rep] = get_act(dout, n), m[rep] = get_f32(dmean, N), s[rep] = get_f32(drstd, N);
  }
  snprintf(label, sizeof label, "residual_%s_forward residual N=%d C=%d", nm, N, C);
  check_bf16_exact(label, &rr[0], sum);
  check_same(label, &rr[0], &rr[1]);
  if (rms) cpu_rmsnorm_forward(NULL, ref, rrstd, rr[0].f, w, N, C, eps);
  else cpu_layernorm_forward(NULL, ref, rmean, rrstd, rr[0].f, w, bias, N, C, eps);
  snprintf(label, sizeof label, "residual_%s_forward out N=%d C=%d", nm, N, C);
  check_close(label, o[0].f, ref, n, R_BF16, A_PROD);
  check_same(label, &o[0], &o[1]);
  snprintf(label, sizeof label, "residual_%s_forward rstd N=%d C=%d", nm, N, C);
  check_close(label, s[0].f, rrstd, N, 1e-4, 0);
  check_same(label, &s[0], &s[1]);
  if (!rms) {
    snprintf(label, sizeof label, "residual_%s_forward mean N=%d C=%d", nm, N, C);
    check_close(label, m[0].f, rmean, N, 1e-5, 1e-5);
    check_same(label, &m[0], &m[1]);
  }
  for (int i = 0; i < 2; i++) free_result(&rr[i]), free_result(&o[i]), free_result(&m[i]), free_result(&s[i]);

  // backward on the CPU's statistics (the same fp32 values for both), with dx, dweight and dbias
  // starting from random values: all three accumulate.
  if (rms) cpu_rmsnorm_forward(NULL, ref, rrstd, a, w, N, C, eps);
  else cpu_layernorm_forward(NULL, ref, rmean, rrstd, a, w, bias, N, C, eps);
  set_f32(dmean, rmean, N), set_f32(drstd, rrstd, N);
  float* dy = hrand(n, 1.0f, 0.0f);
  float* dx0 = hrand(n, 1.0f, 0.0f);
  float* dw0 = hrand(C, 1.0f, 0.0f);
  float* db0 = hrand(C, 1.0f, 0.0f);
  act_t* ddy = up_act(dy, n);
  act_t* ddx = up_act(dx0, n);
  float *ddw = up_f32(dw0, C), *ddb = up_f32(db0, C);
  float *rdx = hcopy(dx0, n), *rdw = hcopy(dw0, C), *rdb = hcopy(db0, C);
  if (rms) cpu_rmsnorm_backward(NULL, rdx, rdw, dy, a, w, rrstd, N, C);
  else cpu_layernorm_backward(NULL, rdx, rdw, rdb, dy, a, w, rmean, rrstd, N, C);
  Result gx[2], gw[2], gb[2];
  for (int rep = 0; rep < 2; rep++) {
    set_act(ddx, dx0, n), set_f32(ddw, dw0, C), set_f32(ddb, db0, C);
    if (rms) rmsnorm_backward(K, ddx, ddw, ddy, da, dw, drstd, N, C);
    else layernorm_backward(K, ddx, ddw, ddb, ddy, da, dw, dmean, drstd, N, C);
    gx[rep] = get_act(ddx, n), gw[rep] = get_f32(ddw, C), gb[rep] = get_f32(ddb, C);
  }
  snprintf(label, sizeof label, "%s_backward dx (accumulated) N=%d C=%d", nm, N, C);
  check_close(label, gx[0].f, rdx, n, R_BF16, A_PROD);
  check_same(label, &gx[0], &gx[1]);
  snprintf(label, sizeof label, "%s_backward dweight (accumulated) N=%d C=%d", nm, N, C);
  check_close(label, gw[0].f, rdw, C, 1e-4, 1e-4);
  check_same(label, &gw[0], &gw[1]);
  if (!rms) {
    snprintf(label, sizeof label, "%s_backward dbias (accumulated) N=%d C=%d", nm, N, C);
    check_close(label, gb[0].f, rdb, C, 1e-4, 1e-4);
    check_same(label, &gb[0], &gb[1]);
  }
  // dbias = NULL is allowed for LayerNorm too
  if (!rms) {
    set_act(ddx, dx0, n), set_f32(ddw, dw0, C);
    layernorm_backward(K, ddx, ddw, NULL, ddy, da, dw, dmean, drstd, N, C);
    Result nb = get_f32(ddw, C);
    snprintf(label, sizeof label, "layernorm_backward with dbias NULL gives the same dweight N=%d C=%d", N, C);
    check_true(label, !memcmp(nb.bits, gw[0].bits, C * 4), "dweight differs");
    free_result(&nb);
  }
  for (int i = 0; i < 2; i++) free_result(&gx[i]), free_result(&gw[i]), free_result(&gb[i]);

  dfree(da), dfree(db), dfree(dw), dfree(dbias), dfree(dout), dfree(dres), dfree(dmean), dfree(drstd);
  dfree(ddy), dfree(ddx), dfree(ddw), dfree(ddb);
  free(a), free(b), free(w), free(bias), free(ref), free(rmean), free(rrstd), free(rres), free(sum);
  free(dy), free(dx0), free(dw0), free(db0), free(rdx), free(rdw), free(rdb);
}

// ---- matmul ---------------------------------------------------------------------------

// weight_offset: elements by which the weight starts after its allocation (64 elements = 128
// bytes, the flat layout's alignment of a parameter, less than cuBLASLt's default 256).
static void test_matmul(int N, int C, int OC, int with_bias, int weight_offset) {
  char tag[96], label[192];
  snprintf(tag, sizeof tag, "N=%d C=%d OC=%d%s%s", N, C, OC, with_bias ? " bias" : "",
           weight_offset ? " weight+128B" : "");
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float* inp = hrand(ni, 1.0f, 0.0f);
  float* w = hrand(nw, 0.5f, 0.0f);
  float* b = hrand(OC, 1.0f, 0.0f);
  act_t* dinp_in = up_act(inp, ni);
  act_t* wbuf = dmalloc((nw + weight_offset) * 2);
  act_t* dwt = wbuf + weight_offset;
  set_act(dwt, w, nw);
  act_t* db = up_act(b, OC);
  act_t* dout = dmalloc(no * 2);
  float* ref = hzero(no);
  cpu_matmul_forward(NULL, ref, inp, w, with_bias ? b : NULL, N, C, OC);
  Result r[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(dout, no * 2);
    matmul_forward(K, dout, dinp_in, dwt, with_bias ? db : NULL, N, C, OC);
    r[rep] = get_act(dout, no);
  }
  snprintf(label, sizeof label, "matmul_forward %s", tag);
  check_close(label, r[0].f, ref, no, R_BF16, A_PROD);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);

  // backward: dinp overwritten (poisoned first), dweight and dbias accumulate
  float* g = hrand(no, 1.0f, 0.0f);
  float* dw0 = hrand(nw, 1.0f, 0.0f);
  float* db0 = hrand(OC, 1.0f, 0.0f);
  act_t* dg = up_act(g, no);
  act_t* ddinp = dmalloc(ni * 2);
  float *ddw = up_f32(dw0, nw), *ddb = up_f32(db0, OC);
  float *rdinp = hzero(ni), *rdw = hcopy(dw0, nw), *rdb = hcopy(db0, OC);
  cpu_matmul_backward(NULL, rdinp, rdw, with_bias ? rdb : NULL, g, inp, w, N, C, OC);
  Result gi[2], gw[2], gb[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(ddinp, ni * 2);
    set_f32(ddw, dw0, nw), set_f32(ddb, db0, OC);
    matmul_backward(K, ddinp, ddw, with_bias ? ddb : NULL, dg, dinp_in, dwt, N, C, OC);
    gi[rep] = get_act(ddinp, ni), gw[rep] = get_f32(ddw, nw), gb[rep] = get_f32(ddb, OC);
  }
  snprintf(label, sizeof label, "matmul_backward dinp %s", tag);
  check_close(label, gi[0].f, rdinp, ni, R_BF16, A_PROD);
  check_same(label, &gi[0], &gi[1]);
  snprintf(label, sizeof label, "matmul_backward dweight (accumulated) %s", tag);
  check_close(label, gw[0].f, rdw, nw, 1e-3, 1e-3);
  check_same(label, &gw[0], &gw[1]);
  if (with_bias) {
    snprintf(label, sizeof label, "matmul_backward dbias (accumulated) %s", tag);
    check_close(label, gb[0].f, rdb, OC, 1e-4, 1e-4);
    check_same(label, &gb[0], &gb[1]);
  } else {
    snprintf(label, sizeof label, "matmul_backward leaves dbias alone when NULL %s", tag);
    check_f32_exact(label, gb[0].f, db0, OC);
  }
  // dinp = NULL skips the input gradient and still accumulates dweight
  set_f32(ddw, dw0, nw);
  matmul_backward(K, NULL, ddw, NULL, dg, dinp_in, dwt, N, C, OC);
  Result nw2 = get_f32(ddw, nw);
  snprintf(label, sizeof label, "matmul_backward with dinp NULL gives the same dweight %s", tag);
  check_true(label, !memcmp(nw2.bits, gw[0].bits, nw * 4), "dweight differs");
  free_result(&nw2);
  for (int i = 0; i < 2; i++) free_result(&gi[i]), free_result(&gw[i]), free_result(&gb[i]);

  dfree(dinp_in), dfree(wbuf), dfree(db), dfree(dout), dfree(dg), dfree(ddinp), dfree(ddw), dfree(ddb);
  free(inp), free(w), free(b), free(ref), free(g), free(dw0), free(db0), free(rdinp), free(rdw), free(rdb);
}

static void test_matmul_gelu(int N, int C, int OC, int with_bias) {
  char label[192];
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float* inp = hrand(ni, 1.0f, 0.0f);
  float* w = hrand(nw, 2.0f / sqrtf((float)C), 0.0f);  // pre-activations of order 1
  float* b = hrand(OC, 0.5f, 0.0f);
  act_t *di = up_act(inp, ni), *dw = up_act(w, nw), *db = up_act(b, OC);
  act_t *dout = dmalloc(no * 2), *dpre = dmalloc(no * 2);
  float *rpre = hzero(no), *rout = hzero(no);
  cpu_matmul_forward(NULL, rpre, inp, w, with_bias ? b : NULL, N, C, OC);
  cpu_gelu_forward(NULL, rout, rpre, no);  // gelu of the fp32 pre-activation, as the epilogue
  Result o[2], p[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(dout, no * 2), poison(dpre, no * 2);
    matmul_forward_gelu(K, dout, dpre, di, dw, with_bias ? db : NULL, N, C, OC);
    o[rep] = get_act(dout, no), p[rep] = get_act(dpre, no);
  }
  snprintf(label, sizeof label, "matmul_forward_gelu pre N=%d C=%d OC=%d%s", N, C, OC, with_bias ? " bias" : "");
  check_close(label, p[0].f, rpre, no, R_BF16, A_PROD);
  check_same(label, &p[0], &p[1]);
  snprintf(label, sizeof label, "matmul_forward_gelu out N=%d C=%d OC=%d%s", N, C, OC, with_bias ? " bias" : "");
  check_close(label, o[0].f, rout, no, R_BF16, A_PROD);
  check_same(label, &o[0], &o[1]);
  for (int i = 0; i < 2; i++) free_result(&o[i]), free_result(&p[i]);
  dfree(di), dfree(dw), dfree(db), dfree(dout), dfree(dpre);
  free(inp), free(w), free(b), free(rpre), free(rout);
}

// ---- embeddings -----------------------------------------------------------------------

// token_range: ids are drawn from [0, token_range) (repeats), and every 7th row is id 42 % V
// (one long segment).
static void test_embedding(int N, int T, int C, int V, int Vp, int token_range, int with_wpe) {
  char tag[96], label[192];
  snprintf(tag, sizeof tag, "N=%d T=%d C=%d V=%d%s", N, T, C, V, with_wpe ? "" : " no wpe");
  size_t nte = (size_t)Vp * C, npe = (size_t)T * C, no = (size_t)N * C;
  int32_t* tok = malloc(N * sizeof(int32_t));
  for (int n = 0; n < N; n++) tok[n] = n % 7 == 0 ? 42 % V : irand(token_range < V ? token_range : V);
  float* wte = hrand(nte, 0.5f, 0.0f);
  float* wpe = hrand(npe, 0.5f, 0.0f);
  act_t *dwte_p = up_act(wte, nte), *dwpe_p = up_act(wpe, npe);
  int32_t* dtok = up_i32(tok, N);
  act_t* dout = dmalloc(no * 2);
  float* ref = hzero(no);
  cpu_embedding_forward(NULL, ref, tok, wte, with_wpe ? wpe : NULL, N, T, C);
  Result r[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(dout, no * 2);
    embedding_forward(K, dout, dtok, dwte_p, with_wpe ? dwpe_p : NULL, N, T, C);
    r[rep] = get_act(dout, no);
  }
  snprintf(label, sizeof label, "embedding_forward %s", tag);
  check_bf16_exact(label, &r[0], ref);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);

  float* g = hrand(no, 1.0f, 0.0f);
  float* dte0 = hrand(nte, 1.0f, 0.0f);
  float* dpe0 = hrand(npe, 1.0f, 0.0f);
  act_t* dg = up_act(g, no);
  float *ddte = up_f32(dte0, nte), *ddpe = up_f32(dpe0, npe);
  float *rte = hcopy(dte0, nte), *rpe = hcopy(dpe0, npe);
  cpu_embedding_backward(NULL, rte, with_wpe ? rpe : NULL, g, tok, N, T, C);
  Result te[2], pe[2];
  for (int rep = 0; rep < 2; rep++) {
    set_f32(ddte, dte0, nte), set_f32(ddpe, dpe0, npe);
    embedding_backward(K, ddte, with_wpe ? ddpe : NULL, dg, dtok, N, T, C);
    te[rep] = get_f32(ddte, nte), pe[rep] = get_f32(ddpe, npe);
  }
  // Same adds in the same order as the CPU (rows in increasing n per token id): bit-identical.
  snprintf(label, sizeof label, "embedding_backward dwte (accumulated, sorted segments) %s", tag);
  check_f32_exact(label, te[0].f, rte, nte);
  check_same(label, &te[0], &te[1]);
  snprintf(label, sizeof label, "embedding_backward dwpe (accumulated) %s", tag);
  check_f32_exact(label, pe[0].f, rpe, npe);
  check_same(label, &pe[0], &pe[1]);
  for (int i = 0; i < 2; i++) free_result(&te[i]), free_result(&pe[i]);
  dfree(dwte_p), dfree(dwpe_p), dfree(dtok), dfree(dout), dfree(dg), dfree(ddte), dfree(ddpe);
  free(tok), free(wte), free(wpe), free(ref), free(g), free(dte0), free(dpe0), free(rte), free(rpe);
}

// ---- classifier -----------------------------------------------------------------------

static void test_classifier(int N, int V, int Vp) {
  char tag[64], label[192];
  snprintf(tag, sizeof tag, "N=%d V=%d Vp=%d", N, V, Vp);
  size_t nl = (size_t)N * Vp;
  float* logits = hrand(nl, 4.0f, 0.0f);
  int32_t* tgt = malloc(N * sizeof(int32_t));
  for (int n = 0; n < N; n++) tgt[n] = n % 5 == 3 ? -1 : irand(V);
  tgt[0] = V - 1;  // the last real column
  float dloss = 1.0f / N;
  act_t* dl = up_act(logits, nl);  // logits now hold the bf16 values
  int32_t* dt = up_i32(tgt, N);
  float* dlosses = dmalloc(N * 4);
  float *rl = hcopy(logits, nl), *rloss = hzero(N);
  cpu_classifier_forward_backward(NULL, rloss, rl, tgt, N, V, Vp, dloss);
  Result g[2], l[2];
  for (int rep = 0; rep < 2; rep++) {
    set_act(dl, logits, nl);
    poison(dlosses, N * 4);
    classifier_forward_backward(K, dlosses, dl, dt, N, V, Vp, dloss);
    g[rep] = get_act(dl, nl), l[rep] = get_f32(dlosses, N);
  }
  snprintf(label, sizeof label, "classifier_forward_backward losses %s", tag);
  check_close(label, l[0].f, rloss, N, 1e-5, 1e-5);
  check_same(label, &l[0], &l[1]);
  // Padding columns and ignored rows must be exactly 0: their reference is 0 and the bound
  // there is only the tiny atol.
  snprintf(label, sizeof label, "classifier_forward_backward dlogits (in place, padding 0) %s", tag);
  check_close(label, g[0].f, rl, nl, R_BF16, 1.0 / 16384);
  check_same(label, &g[0], &g[1]);
  for (int i = 0; i < 2; i++) free_result(&g[i]), free_result(&l[i]);

  // losses = NULL is allowed (evaluation of gradients only)
  set_act(dl, logits, nl);
  classifier_forward_backward(K, NULL, dl, dt, N, V, Vp, dloss);
  gpu_done();
  check_true("classifier_forward_backward accepts losses = NULL", 1, "");

  // softmax_row, with the row on the device and already on the host
  float *probs = hzero(V), *rprobs = hzero(V);
  int row = N > 1 ? 1 : 0;
  cpu_softmax_row(NULL, rprobs, logits + (size_t)row * Vp, V, 0.7f);
  set_act(dl, logits, nl);
  softmax_row(K, probs, dl + (size_t)row * Vp, V, 0.7f);
  snprintf(label, sizeof label, "softmax_row (device row) V=%d", V);
  check_close(label, probs, rprobs, V, 1e-6, 1e-7);
  uint16_t* hrow = malloc(V * 2);
  for (int j = 0; j < V; j++) hrow[j] = h_f2bf(logits[(size_t)row * Vp + j]);
  memset(probs, 0, V * 4);
  softmax_row(NULL, probs, hrow, V, 0.7f);
  snprintf(label, sizeof label, "softmax_row (host row, ctx NULL) V=%d", V);
  check_close(label, probs, rprobs, V, 1e-6, 1e-7);
  free(hrow), free(probs), free(rprobs);
  dfree(dl), dfree(dt), dfree(dlosses);
  free(logits), free(tgt), free(rl), free(rloss);
}

// ---- relative position bias -----------------------------------------------------------

static void test_position(int H, int Tq, int Tk, int bidir, int nb, int maxd) {
  char tag[96], label[192];
  snprintf(tag, sizeof tag, "H=%d Tq=%d Tk=%d %s buckets=%d max=%d", H, Tq, Tk, bidir ? "bidirectional" : "causal",
           nb, maxd);
  int mism = 0;
  for (int r = -1000; r <= 1000; r++)
    if (relative_position_bucket(r, bidir, nb, maxd) != cpu_relative_position_bucket(r, bidir, nb, maxd)) mism++;
  snprintf(label, sizeof label, "relative_position_bucket -1000..1000 equals the CPU's, %s", tag);
  check_true(label, mism == 0, "buckets differ");
  // table[b, h] = b + 1 + nb*h: exact in bf16 when nb*H <= 256, so every bucket is identifiable
  size_t nt = (size_t)nb * H, nbias = (size_t)H * Tq * Tk;
  float* table = malloc(nt * sizeof(float));
  for (int b = 0; b < nb; b++)
    for (int h = 0; h < H; h++) table[(size_t)b * H + h] = nt <= 256 ? (float)(b + 1 + nb * h) : rv(1.0f);
  act_t* dtab = up_act(table, nt);
  act_t* dbias = dmalloc(nbias * 2);
  float* ref = hzero(nbias);
  cpu_relative_bias_forward(NULL, ref, table, H, Tq, Tk, bidir, nb, maxd);
  Result r[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(dbias, nbias * 2);
    relative_bias_forward(K, dbias, dtab, H, Tq, Tk, bidir, nb, maxd);
    r[rep] = get_act(dbias, nbias);
  }
  snprintf(label, sizeof label, "relative_bias_forward (device buckets) %s", tag);
  check_bf16_exact(label, &r[0], ref);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);

  float* g = hrand(nbias, 1.0f, 0.0f);
  float* dt0 = hrand(nt, 1.0f, 0.0f);
  float *dg = up_f32(g, nbias), *ddt = up_f32(dt0, nt);
  float* rdt = hcopy(dt0, nt);
  cpu_relative_bias_backward(NULL, rdt, g, H, Tq, Tk, bidir, nb, maxd);
  for (int rep = 0; rep < 2; rep++) {
    set_f32(ddt, dt0, nt);
    relative_bias_backward(K, ddt, dg, H, Tq, Tk, bidir, nb, maxd);
    r[rep] = get_f32(ddt, nt);
  }
  snprintf(label, sizeof label, "relative_bias_backward (accumulated) %s", tag);
  check_close(label, r[0].f, rdt, nt, 1e-4, 1e-4);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  dfree(dtab), dfree(dbias), dfree(dg), dfree(ddt);
  free(table), free(ref), free(g), free(dt0), free(rdt);
}

// ---- optimizer ------------------------------------------------------------------------

static void test_adamw(size_t n, int with_act) {
  char label[160];
  float* p0 = hrand(n, 1.0f, 0.0f);
  float* g = hrand(n, 0.01f, 0.0f);
  float* m0 = hrand(n, 0.01f, 0.0f);
  float* v0 = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) v0[i] = (float)(1e-5 + 1e-4 * urand());
  AdamWArgs a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                 .grad_scale = 0.5f, .step = 7};
  float *dp = up_f32(p0, n), *dg = up_f32(g, n), *dm = up_f32(m0, n), *dv = up_f32(v0, n);
  act_t* dact = dmalloc(n * 2);
  float *rp = hcopy(p0, n), *rm = hcopy(m0, n), *rv_ = hcopy(v0, n), *ract = hzero(n);
  cpu_adamw_update(NULL, rp, with_act ? ract : NULL, g, rm, rv_, n, a);
  Result P[2], M[2], Vv[2], A[2];
  for (int rep = 0; rep < 2; rep++) {
    set_f32(dp, p0, n), set_f32(dm, m0, n), set_f32(dv, v0, n);
    poison(dact, n * 2);
    adamw_update(K, dp, with_act ? dact : NULL, dg, dm, dv, n, a);
    P[rep] = get_f32(dp, n), M[rep] = get_f32(dm, n), Vv[rep] = get_f32(dv, n), A[rep] = get_act(dact, n);
  }
  snprintf(label, sizeof label, "adamw_update p n=%zu%s", n, with_act ? " (+ bf16 copy)" : "");
  check_close(label, P[0].f, rp, n, 1e-6, 0);
  check_f32_exact(label, P[0].f, rp, n);
  check_same(label, &P[0], &P[1]);
  snprintf(label, sizeof label, "adamw_update m n=%zu", n);
  check_f32_exact(label, M[0].f, rm, n);
  snprintf(label, sizeof label, "adamw_update v n=%zu", n);
  check_f32_exact(label, Vv[0].f, rv_, n);
  if (with_act) {
    snprintf(label, sizeof label, "adamw_update p_act = bf16(p) n=%zu", n);
    check_bf16_exact(label, &A[0], ract);
  }
  for (int i = 0; i < 2; i++) free_result(&P[i]), free_result(&M[i]), free_result(&Vv[i]), free_result(&A[i]);
  dfree(dp), dfree(dg), dfree(dm), dfree(dv), dfree(dact);
  free(p0), free(g), free(m0), free(v0), free(rp), free(rm), free(rv_), free(ract);
}

static void test_block_sumsq(size_t nblocks) {
  char label[160];
  size_t n = nblocks * NORM_BLOCK;
  float* g = hrand(n, 1.0f, 0.0f);
  float* dg = up_f32(g, n);
  double* ds = dmalloc(nblocks * 8);
  double* ref = malloc(nblocks * 8);
  cpu_block_sumsq(NULL, ref, g, n);
  double* out[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(ds, nblocks * 8);
    block_sumsq(K, ds, dg, n);
    gpu_done();
    out[rep] = malloc(nblocks * 8);
    CUDA_T(cudaMemcpy(out[rep], ds, nblocks * 8, cudaMemcpyDeviceToHost));
  }
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < nblocks; i++) {
    double e = fabs(out[0][i] - ref[i]) / ref[i];
    if (!(e <= 1e-12)) bad++;
    if (e > worst || e != e) worst = e;
  }
  snprintf(label, sizeof label, "block_sumsq %zu blocks (double, relative error <= 1e-12)", nblocks);
  char d[128];
  snprintf(d, sizeof d, "%zu blocks off, worst relative error %.3g", bad, worst);
  check_true(label, bad == 0, d);
  snprintf(label, sizeof label, "block_sumsq %zu blocks: deterministic (two runs bit-identical)", nblocks);
  check_true(label, !memcmp(out[0], out[1], nblocks * 8), "runs differ");
  dfree(dg), dfree(ds);
  free(g), free(ref), free(out[0]), free(out[1]);
}

// ---- attention ------------------------------------------------------------------------

// fused: q, k, v interleaved in one buffer of rows 3*H*D (GPT, T5 self-attention); otherwise
// q has rows H*D and k, v share one buffer of rows 2*H*D (cross-attention).
static void test_attention(const char* name, int B, int Tq, int Tk, int H, int D, int causal, int with_bias,
                           int fused, float scale) {
  char tag[160], label[256];
  snprintf(tag, sizeof tag, "%s (B=%d Tq=%d Tk=%d H=%d D=%d%s%s)", name, B, Tq, Tk, H, D, causal ? " causal" : "",
           with_bias ? " bias" : "");
  int C = H * D;
  AttnShape s = {.B = B, .Tq = Tq, .Tk = Tk, .H = H, .D = D, .q_stride = fused ? 3 * C : C,
                 .kv_stride = fused ? 3 * C : 2 * C, .scale = scale, .causal = causal};
  size_t nq = (size_t)B * Tq * s.q_stride, nkv = fused ? 0 : (size_t)B * Tk * s.kv_stride;
  size_t no = (size_t)B * Tq * C, nl = (size_t)B * H * Tq, nb = (size_t)H * Tq * Tk;
  float* qbuf = hrand(nq, 1.0f, 0.0f);
  float* kvbuf = fused ? NULL : hrand(nkv, 1.0f, 0.0f);
  float* bias = hrand(nb, 1.0f, 0.0f);
  act_t* dq_in = up_act(qbuf, nq);
  act_t* dkv_in = fused ? NULL : up_act(kvbuf, nkv);
  act_t* dbias = up_act(bias, nb);
  const float *q = qbuf, *k = fused ? qbuf + C : kvbuf, *v = fused ? qbuf + 2 * C : kvbuf + C;
  const act_t *gq = dq_in, *gk = fused ? dq_in + C : dkv_in, *gv = fused ? dq_in + 2 * C : dkv_in + C;
  float *rout = hzero(no), *rlse = hzero(nl);
  cpu_attention_forward(NULL, rout, rlse, q, k, v, with_bias ? bias : NULL, s);
  act_t* dout = dmalloc(no * 2);
  float* dlse = dmalloc(nl * 4);
  Result o[2], l[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(dout, no * 2), poison(dlse, nl * 4);
    attention_forward(K, dout, dlse, gq, gk, gv, with_bias ? dbias : NULL, s);
    o[rep] = get_act(dout, no), l[rep] = get_f32(dlse, nl);
  }
  snprintf(label, sizeof label, "attention_forward out %s", tag);
  check_close(label, o[0].f, rout, no, R_ATTN, R_ATTN);
  check_same(label, &o[0], &o[1]);
  snprintf(label, sizeof label, "attention_forward lse %s", tag);
  check_close(label, l[0].f, rlse, nl, 1e-3, 1e-3);
  check_same(label, &l[0], &l[1]);
  for (int i = 0; i < 2; i++) free_result(&o[i]), free_result(&l[i]);

  // Backward from the CPU's forward results (out rounded to bf16, lse as is), so both backends
  // start from the same values. dq/dk/dv are poisoned; dpos_bias accumulates from random.
  float* g = hrand(no, 1.0f, 0.0f);
  act_t* dg = up_act(g, no);
  act_t* dfo = up_act(rout, no);  // rout is now bf16-rounded: the CPU backward uses it too
  float* dfl = up_f32(rlse, nl);
  float* db0 = hrand(nb, 1.0f, 0.0f);
  float* ddb = up_f32(db0, nb);
  act_t* ddq = dmalloc(nq * 2);
  act_t* ddkv = fused ? NULL : dmalloc(nkv * 2);
  float* rdq = hzero(nq);
  float* rdkv = fused ? NULL : hzero(nkv);
  float* rdb = hcopy(db0, nb);
  float *cdq = rdq, *cdk = fused ? rdq + C : rdkv, *cdv = fused ? rdq + 2 * C : rdkv + C;
  cpu_attention_backward(NULL, cdq, cdk, cdv, with_bias ? rdb : NULL, g, rout, rlse, q, k, v, with_bias ? bias : NULL, s);
  act_t *gdq = ddq, *gdk = fused ? ddq + C : ddkv, *gdv = fused ? ddq + 2 * C : ddkv + C;
  Result gq_[2], gkv[2], gb[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(ddq, nq * 2);
    if (!fused) poison(ddkv, nkv * 2);
    set_f32(ddb, db0, nb);
    attention_backward(K, gdq, gdk, gdv, with_bias ? ddb : NULL, dg, dfo, dfl, gq, gk, gv, with_bias ? dbias : NULL, s);
    gq_[rep] = get_act(ddq, nq);
    if (!fused) gkv[rep] = get_act(ddkv, nkv);
    gb[rep] = get_f32(ddb, nb);
  }
  snprintf(label, sizeof label, "attention_backward %s %s", fused ? "dq/dk/dv (fused buffer)" : "dq", tag);
  check_close(label, gq_[0].f, rdq, nq, R_ATTN, R_ATTN);
  check_same(label, &gq_[0], &gq_[1]);
  if (!fused) {
    snprintf(label, sizeof label, "attention_backward dk/dv %s", tag);
    check_close(label, gkv[0].f, rdkv, nkv, R_ATTN, R_ATTN);
    check_same(label, &gkv[0], &gkv[1]);
  }
  if (with_bias) {
    snprintf(label, sizeof label, "attention_backward dpos_bias (accumulated) %s", tag);
    check_close(label, gb[0].f, rdb, nb, R_ATTN, R_ATTN);
    check_same(label, &gb[0], &gb[1]);
  }
  for (int i = 0; i < 2; i++) {
    free_result(&gq_[i]), free_result(&gb[i]);
    if (!fused) free_result(&gkv[i]);
  }
  dfree(dq_in), dfree(dbias), dfree(dout), dfree(dlse), dfree(dg), dfree(dfo), dfree(dfl), dfree(ddb), dfree(ddq);
  if (!fused) dfree(dkv_in), dfree(ddkv);
  free(qbuf), free(kvbuf), free(bias), free(rout), free(rlse), free(g), free(db0), free(rdq), free(rdkv), free(rdb);
}

int main(void) {
  K = kernels_init(0);
  test_backend();

  test_elementwise((size_t)4096 * 768 + 13);
  test_elementwise(7);

  test_unary("gelu", gelu_forward, gelu_backward, cpu_gelu_forward, cpu_gelu_backward, (size_t)4096 * 3072);
  test_unary("gelu", gelu_forward, gelu_backward, cpu_gelu_forward, cpu_gelu_backward, 13);
  test_unary("relu", relu_forward, relu_backward, cpu_relu_forward, cpu_relu_backward, (size_t)4096 * 2048 + 5);
  test_unary("relu", relu_forward, relu_backward, cpu_relu_forward, cpu_relu_backward, 13);
  test_geglu(1024, 2048);
  test_geglu(7, 13);

  for (int rms = 0; rms < 2; rms++) {
    test_layernorm(4096, 768, rms);
    test_layernorm(7, 13, rms);
    test_layernorm(130, 4096, rms);
  }

  // GPT-2 124M shapes (N = 4 x 1024 tokens): qkv, attention projection, mlp fc, mlp proj
  test_matmul(4096, 768, 2304, 1, 0);
  test_matmul(4096, 768, 768, 1, 64);
  test_matmul(4096, 768, 3072, 1, 0);
  test_matmul(4096, 3072, 768, 1, 64);
  test_matmul(256, 768, 50304, 0, 0);  // the tied lm_head (a few rows: the CPU reference is slow)
  test_matmul(7, 13, 5, 1, 0);         // odd sizes: unaligned leading dimensions
  test_matmul(33, 65, 17, 0, 1);       // weight only 2-byte aligned
  test_matmul_gelu(4096, 768, 3072, 1);
  test_matmul_gelu(64, 96, 64, 0);
  test_matmul_gelu(7, 13, 5, 1);  // OC % 8 != 0: the unfused path

  test_embedding(4096, 1024, 768, 50257, 50304, 2000, 1);
  test_embedding(7, 3, 13, 5, 8, 5, 1);
  test_embedding(512, 512, 64, 100, 128, 100, 0);

  test_classifier(1024, 50257, 50304);
  test_classifier(7, 13, 16);

  test_position(8, 512, 512, 1, 32, 128);  // T5 encoder
  test_position(8, 114, 114, 0, 32, 128);  // T5 decoder
  test_position(3, 7, 13, 1, 32, 128);
  test_position(2, 300, 300, 1, 64, 256);

  test_adamw(1000003, 1);
  test_adamw(4097, 0);
  test_block_sumsq(10007);
  test_block_sumsq(1);

  test_attention("GPT-2 124M", 4, 1024, 1024, 12, 64, 1, 0, 1, 0.125f);
  test_attention("odd sizes", 3, 37, 37, 3, 24, 1, 0, 1, 1.0f / sqrtf(24.0f));
  test_attention("T5 encoder", 2, 133, 133, 4, 64, 0, 1, 1, 1.0f);
  test_attention("T5 decoder", 2, 23, 23, 4, 64, 1, 1, 1, 1.0f);
  test_attention("cross-attention", 2, 23, 133, 4, 64, 0, 0, 0, 1.0f);
  test_attention("head size 128", 1, 257, 257, 2, 128, 1, 0, 1, 1.0f / sqrtf(128.0f));
  // D % 8 != 0: the fused kernels' element-wise loads and stores (every shape above is 16-byte)
  test_attention("head size 20", 2, 45, 45, 3, 20, 1, 1, 1, 1.0f / sqrtf(20.0f));
  // D > 128: the unfused path (attention_forward_simple / attention_backward_simple)
  test_attention("head size 160", 2, 50, 50, 2, 160, 1, 1, 1, 1.0f / sqrtf(160.0f));

  kernels_shutdown(K);
  return test_summary();
}
