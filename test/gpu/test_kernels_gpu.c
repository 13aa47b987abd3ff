// test_kernels_gpu.c: every CUDA kernel of kernels.h against the CPU reference kernels.
//
//   test_kernels_gpu [--profile full|small]
//
// The profile picks the shapes (the tables in main): full (the default) runs the real sizes of
// the models on a GPU; small runs every test at small and odd shapes that still take every
// branch the full profile takes, sized for an emulated GPU (about 1000x slower per flop than a
// CPU): the whole small profile is about 2*10^8 flops, most of them the tensor-core products
// of attention (the padded tiles count in full).
//
// An fp16 build (make PRECISION=fp16: build/test-gpu-fp16, build/sim-fp16) runs the same tests on
// the fp16 kernels: read fp16 for bf16 below, with u = 2^-11 (fp16 keeps 11 significant bits) in
// every bound that names u; the fp32 parts of the bounds are unchanged.
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
//   (attention: a bound per element, below; an infinite reference must be matched exactly);
// - every kernel runs twice from the same state and the two results must be bit-identical.
//
// Tolerances (why each holds for a correct kernel and not for a wrong one):
// - A bf16 output is the fp32 result rounded once. bf16 keeps 8 significant bits, so the
//   relative error is at most u/(1+u) < u, where u = 2^-8 is its unit roundoff. rtol = u then
//   leaves room for fp32 differences up to ~u^2 = 2^-16 relative (accumulation order, FMA
//   contraction, tanhf/expf/logf ulps: ~1e-7, far below), and arel for the rest.
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
// - Attention (kernels/cuda/attention.cu): the second product of each pass takes its left
//   operand from registers rounded to bf16: P for out (relative to the running max) and dv,
//   dS = P (dP - D) for dq and dk. Every term t_j of such a sum then carries a relative error
//   of up to u, so an element may be off by u * sum_j |t_j| however much its terms cancel; no
//   bound relative to |ref| or to the rms holds on the elements that cancel most. So the test
//   computes, per element and in double from the CPU's inputs (attention_term_sizes), the size
//   of its terms R = sum_j |t_j| and F (below), and requires
//     |gpu - ref| <= u |ref| + (u + 2^-10) R + 2^-14 F.
//   u |ref| is the output's own rounding, u R the rounded operand. 2^-10 R covers, with 2x or
//   more to spare, the fp32 errors of the terms themselves: P = exp(score - lse) where the score
//   is a dot product of D <= 160 inputs below 1 (absolute error, so relative error of P, at
//   most D^2 scale 2^-24 <= 2^-12 for these inputs), and the sums over Tk <= 1024 keys (at
//   most Tk 2^-24 = 2^-14 of R). F covers dP_ij = dout_i.v_j and D_i = dout_i.out_i: they
//   cancel in dS, so their fp32 errors are not relative to dS (the first causal row sees one
//   key, dP = D exactly, and its dS = 0 comes out of fp32 as a rounding residue). F is R with
//   |dS_ij| replaced by P_ij (|dout_i|.|v_j| + |dout_i|.|out_i|); those errors are at most
//   D 2^-24 < 2^-16 of it, and 2^-14 is 4x that. dtable (the position bias gradient) sums fp32
//   dS (nothing rounded to bf16) per (bucket, head) onto its random start d0:
//   |gpu - ref| <= 2^-22 |d0| + 2^-10 R + 2^-14 F, with R = sum |dS_ij| and F = sum P_ij (...)
//   over the (b, i, j) of the bucket. Both backends add the same terms in different trees; an
//   fp32 sum of depth d errs by at most d 2^-24 of R, so 2^-10 R holds while the deepest chain
//   of additions (the CPU's B + Tk + Tq, the GPU's per-thread, diagonal, query-tile, (batch, key
//   tile) and position stages) stays below 2^14. The unfused path (D > 128) rounds nothing to
//   bf16 before its outputs and meets the same bounds with more to spare.
//   The first two terms bound the rounding errors, the last two twice the fp32 errors. Wrong
//   kernels exceed it on many elements: a dq/dk scale off by 2^-4 moves each element by 6% of
//   itself, up to 6% / (2.25 u) = 7x the bound where R ~ |ref|; a score scale off by 2^-4 moves
//   P_ij by ~6% of |score_ij - lse_i|, 5x the bound and more; a dropped or extra key (a masking
//   or tile-edge bug) removes or adds a whole term: ~100x on its own dk and dv rows, and
//   P_ij |v_j| on every row that sees it.
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/step_control.h"
#include "test/adamw_step.h"
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

// ---- the 16-bit activation type on the host ---------------------------------------------
// bf16, or IEEE fp16 in an fp16 build (PRECISION=fp16), converted here independently of the
// CUDA headers: by hand for bf16, with the compiler's _Float16 for fp16.
#ifdef FSDP_FP16
static uint16_t h_f2act(float f) {  // round to nearest even, as __float2half_rn
  _Float16 h = (_Float16)f;
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}
static float h_act2f(uint16_t b) {
  _Float16 h;
  memcpy(&h, &b, 2);
  return (float)h;
}
#else
static uint16_t h_f2act(float f) {  // round to nearest even, as __float2bfloat16_rn
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float h_act2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
#endif
static void round_act(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = h_act2f(h_f2act(x[i]));
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
  round_act(x, n);
  uint16_t* b = malloc((n ? n : 1) * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++) b[i] = h_f2act(x[i]);
  act_t* d = dmalloc(n * sizeof(act_t));
  CUDA_T(cudaMemcpy(d, b, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
  free(b);
  return d;
}
static void set_act(act_t* d, float* x, size_t n) {  // re-upload into an existing buffer
  round_act(x, n);
  uint16_t* b = malloc((n ? n : 1) * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++) b[i] = h_f2act(x[i]);
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
  for (size_t i = 0; i < n; i++) r.f[i] = h_act2f(((uint16_t*)r.bits)[i]);
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

// |gpu - ref| <= rtol |ref| + arel rms(ref) + floor for every element; NaN never passes. An
// infinite reference (a loss of +inf) must be matched exactly and is left out of the rms.
static void check_close_floor(const char* name, const float* gpu, const float* ref, size_t n, double rtol,
                              double arel, double floor) {
  double ss = 0.0;
  size_t nfinite = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(ref[i])) ss += (double)ref[i] * ref[i], nfinite++;
  double rms = nfinite ? sqrt(ss / nfinite) : 0.0, atol = arel * rms + floor;
  size_t bad = 0, first = 0, worst_i = 0;
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)gpu[i] - (double)ref[i]);
    double bound = rtol * fabs((double)ref[i]) + atol;
    int ok = isinf(ref[i]) ? gpu[i] == ref[i] : err <= bound;  // false for NaN
    if (isinf(ref[i])) err = ok ? 0.0 : INFINITY, bound = 0.0;
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
static void check_close(const char* name, const float* gpu, const float* ref, size_t n, double rtol, double arel) {
  check_close_floor(name, gpu, ref, n, rtol, arel, 0.0);
}

// |gpu - ref| <= bound[i] for every element, with a bound per element; NaN never passes.
static void check_bounded(const char* name, const float* gpu, const float* ref, const double* bound, size_t n) {
  size_t bad = 0, first = 0, worst_i = 0;
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)gpu[i] - (double)ref[i]);
    int ok = err <= bound[i];  // false for NaN
    double ratio = !ok ? (bound[i] > 0 && err == err ? err / bound[i] : INFINITY) : (bound[i] > 0 ? err / bound[i] : 0.0);
    if (!ok && !bad++) first = i;
    if (ratio > worst) worst = ratio, worst_i = i;
  }
  char d[320];
  if (!bad) {
    snprintf(d, sizeof d, " (%zu elements, worst error %.3g of its bound)", n, worst);
    pass(name, d);
  } else {
    snprintf(d, sizeof d, "%zu of %zu elements out of bounds; first at %zu: gpu %.9g ref %.9g bound %.3g; "
             "worst at %zu: gpu %.9g ref %.9g bound %.3g", bad, n, first, gpu[first], ref[first], bound[first],
             worst_i, gpu[worst_i], ref[worst_i], bound[worst_i]);
    fail(name, d);
  }
}

// The 16-bit result must be the CPU's fp32 value rounded to nearest even, bit for bit.
static void check_act_exact(const char* name, const Result* g, const float* ref) {
  const uint16_t* b = g->bits;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g->n; i++)
    if (b[i] != h_f2act(ref[i])) {
      if (!bad) first = i;
      bad++;
    }
  char d[256];
  if (!bad) {
    snprintf(d, sizeof d, " (%zu elements, bit-identical to the CPU value rounded to " ACT_NAME ")", g->n);
    pass(name, d);
  } else {
    snprintf(d, sizeof d, "%zu of %zu elements differ from the CPU value rounded to " ACT_NAME "; first at %zu: gpu %.9g ref %.9g",
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

// ACT_ETA2 is half the smallest subnormal: below the normal range a rounding errs by up to
// that much, whatever u says. bf16 shares fp32's range (2^-134: nothing here gets near it);
// fp16's subnormals start at 2^-14, where small attention gradients live (attn_bound).
#ifdef FSDP_FP16
#define R_ACT 0.00048828125  // 2^-11 = u, the unit roundoff of fp16
#define ACT_ETA2 0x1p-25
#else
#define R_ACT 0.00390625     // 2^-8 = u, the unit roundoff of bf16
#define ACT_ETA2 0x1p-134
#endif
#define A_PROD 0.0009765625   // 2^-10
#define A_ELEM 0.000244140625 // 2^-12
// An output of the activation type: one rounding to it (R_ACT relative) and, below its normal
// range, half the smallest subnormal (ACT_ETA2: fp16 dlogits of a 50257-word softmax live there).
static void check_close_act(const char* name, const float* gpu, const float* ref, size_t n, double arel) {
  check_close_floor(name, gpu, ref, n, R_ACT, arel, ACT_ETA2);
}
// attention (see the top): |gpu - ref| <= u |ref| + (u + ATTN_R) R + ATTN_F F, dtable
// ATTN_D0 |d0| + ATTN_R R + ATTN_F F
#define ATTN_R 0.0009765625          // 2^-10
#define ATTN_F 0.00006103515625      // 2^-14
#define ATTN_D0 2.384185791015625e-07 // 2^-22

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
  if (!test_wanted("elementwise")) return;
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
  check_act_exact(label, &r[0], ref);
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
  check_act_exact(label, &r[0], ref);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  // fill_zero_act
  poison(dy, n * sizeof(act_t));
  fill_zero_act(K, dy, n);
  r[0] = get_act(dy, n);
  float* zeros = hzero(n);
  snprintf(label, sizeof label, "fill_zero_act n=%zu", n);
  check_act_exact(label, &r[0], zeros);
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
  check_act_exact(label, &r[0], fx);
  free_result(&r[0]);
  poison(dfy, n * 4);
  cast_act_to_f32(K, dfy, dx, n);  // dx holds bf16(x); x itself was rounded in place by up_act
  r[0] = get_f32(dfy, n);
  snprintf(label, sizeof label, "cast_act_to_f32 n=%zu", n);
  check_f32_exact(label, r[0].f, x, n);
  free_result(&r[0]);
  // in place: the fp32 values become the rounded 16-bit ones in the buffer's first half
  set_f32(dfy, fx, n);
  narrow_f32_to_act(K, dfy, n);
  r[0] = get_act((act_t*)dfy, n);
  snprintf(label, sizeof label, "narrow_f32_to_act n=%zu (in place, %s)", n, n > NARROW_HEAD ? "head block and ranges" : "head block");
  check_act_exact(label, &r[0], fx);
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
  if (!test_wanted(name)) return;
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
  check_close_act(label, r[0].f, ref, n, A_ELEM);
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
  check_close_act(label, r[0].f, ref, n, A_ELEM);
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
  if (!test_wanted("geglu")) return;
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
  check_close_act(label, r[0].f, ref, no, A_ELEM);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  cpu_geglu_backward(NULL, ref, x, dout, N, F);
  for (int rep = 0; rep < 2; rep++) {
    poison(ddx, nx * 2);
    geglu_backward(K, ddx, dxin, ddout, N, F);
    r[rep] = get_act(ddx, nx);
  }
  snprintf(label, sizeof label, "geglu_backward N=%d F=%d", N, F);
  check_close_act(label, r[0].f, ref, nx, A_ELEM);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  dfree(dxin), dfree(ddout), dfree(dout_buf), dfree(ddx);
  free(x), free(dout), free(ref);
}

// SwiGLU (Llama): the same checks as GEGLU's, gates over [-6, 6] (SiLU's curved region).
static void test_swiglu(int N, int F) {
  if (!test_wanted("swiglu")) return;
  char label[160];
  size_t nx = (size_t)N * 2 * F, no = (size_t)N * F;
  float* x = hrand(nx, 6.0f, 0.0f);
  float* dout = hrand(no, 1.0f, 0.0f);
  act_t* dxin = up_act(x, nx);
  act_t* ddout = up_act(dout, no);
  act_t* dout_buf = dmalloc(no * 2);
  act_t* ddx = dmalloc(nx * 2);
  float* ref = hzero(nx);
  Result r[2];
  cpu_swiglu_forward(NULL, ref, x, N, F);
  for (int rep = 0; rep < 2; rep++) {
    poison(dout_buf, no * 2);
    swiglu_forward(K, dout_buf, dxin, N, F);
    r[rep] = get_act(dout_buf, no);
  }
  snprintf(label, sizeof label, "swiglu_forward N=%d F=%d", N, F);
  check_close_act(label, r[0].f, ref, no, A_ELEM);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  cpu_swiglu_backward(NULL, ref, x, dout, N, F);
  for (int rep = 0; rep < 2; rep++) {
    poison(ddx, nx * 2);
    swiglu_backward(K, ddx, dxin, ddout, N, F);
    r[rep] = get_act(ddx, nx);
  }
  snprintf(label, sizeof label, "swiglu_backward N=%d F=%d", N, F);
  check_close_act(label, r[0].f, ref, nx, A_ELEM);
  check_same(label, &r[0], &r[1]);
  free_result(&r[0]), free_result(&r[1]);
  dfree(dxin), dfree(ddout), dfree(dout_buf), dfree(ddx);
  free(x), free(dout), free(ref);
}

// Rotary embeddings, in place on rows of `stride` columns whose first `heads` heads of D turn:
// forward and backward against the CPU on the same 16-bit inputs, deterministic, and the
// columns past the heads (a fused row's v) left with their bits.
static void test_rope(int N, int T, int heads, int D, int stride, RopeConfig rc) {
  if (!test_wanted("rope")) return;
  char label[160];
  size_t n = (size_t)N * stride;
  float* x = hrand(n, 2.0f, 0.0f);
  act_t* dx = up_act(x, n);  // x is rounded to 16 bits in place
  float* ref = hzero(n);
  Result r[2];
  for (int dir = 0; dir < 2; dir++) {
    memcpy(ref, x, n * sizeof(float));
    if (dir == 0) cpu_rope_forward(NULL, ref, rc, N, T, heads, D, stride);
    else cpu_rope_backward(NULL, ref, rc, N, T, heads, D, stride);
    for (int rep = 0; rep < 2; rep++) {
      act_t* d = up_act(x, n);
      if (dir == 0) rope_forward(K, d, rc, N, T, heads, D, stride);
      else rope_backward(K, d, rc, N, T, heads, D, stride);
      r[rep] = get_act(d, n);
      dfree(d);
    }
    snprintf(label, sizeof label, "rope_%s N=%d T=%d heads=%d D=%d stride=%d%s", dir ? "backward" : "forward", N, T,
             heads, D, stride, rc.factor > 0 ? " (Llama 3.1 scaling)" : "");
    check_close_act(label, r[0].f, ref, n, A_ELEM);
    check_same(label, &r[0], &r[1]);
    int kept = 1;
    for (int row = 0; row < N; row++)
      for (int c = heads * D; c < stride; c++) kept &= r[0].f[(size_t)row * stride + c] == x[(size_t)row * stride + c];
    snprintf(label, sizeof label, "rope_%s leaves the columns past the heads", dir ? "backward" : "forward");
    check_true(label, kept, "a column past the turned heads changed");
    free_result(&r[0]), free_result(&r[1]);
  }
  dfree(dx);
  free(x), free(ref);
}

// ---- normalization --------------------------------------------------------------------

static void test_layernorm(int N, int C, int rms) {
  if (!test_wanted(rms ? "rmsnorm" : "layernorm")) return;
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
  check_close_act(label, o[0].f, ref, n, A_PROD);
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
  check_act_exact(label, &rr[0], sum);
  check_same(label, &rr[0], &rr[1]);
  if (rms) cpu_rmsnorm_forward(NULL, ref, rrstd, rr[0].f, w, N, C, eps);
  else cpu_layernorm_forward(NULL, ref, rmean, rrstd, rr[0].f, w, bias, N, C, eps);
  snprintf(label, sizeof label, "residual_%s_forward out N=%d C=%d", nm, N, C);
  check_close_act(label, o[0].f, ref, n, A_PROD);
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
  check_close_act(label, gx[0].f, rdx, n, A_PROD);
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
  if (!test_wanted("matmul")) return;
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
  check_close_act(label, r[0].f, ref, no, A_PROD);
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
  check_close_act(label, gi[0].f, rdinp, ni, A_PROD);
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
  if (!test_wanted("matmul_gelu")) return;
  char label[192];
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float* inp = hrand(ni, 1.0f, 0.0f);
  float* w = hrand(nw, 2.0f / sqrtf((float)C), 0.0f);  // pre-activations of order 1
  float* b = hrand(OC, 0.5f, 0.0f);
  act_t *di = up_act(inp, ni), *dw = up_act(w, nw), *db = up_act(b, OC);
  act_t *dout = dmalloc(no * 2), *dpre = dmalloc(no * 2);
  float *rpre = hzero(no), *rout = hzero(no);
  cpu_matmul_forward(NULL, rpre, inp, w, with_bias ? b : NULL, N, C, OC);
  // The epilogue takes GELU of the fp32 pre-activation; where it is not used (OC % 8 != 0, no
  // cuBLASLt algorithm for it, or turned off: matmul_gelu_fuses says) out is gelu_forward of
  // the stored bf16 pre-activation, whose rounding GELU's slope (up to 1.13) carries into out:
  // compare with GELU of the rounded value there.
  int fused, bwd;
  matmul_gelu_fuses(K, N, C, OC, with_bias, &fused, &bwd);
  float* gin = hcopy(rpre, no);
  if (fused != 1) round_act(gin, no);
  cpu_gelu_forward(NULL, rout, gin, no);
  free(gin);
  Result o[2], p[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(dout, no * 2), poison(dpre, no * 2);
    matmul_forward_gelu(K, dout, dpre, di, dw, with_bias ? db : NULL, N, C, OC);
    o[rep] = get_act(dout, no), p[rep] = get_act(dpre, no);
  }
  snprintf(label, sizeof label, "matmul_forward_gelu pre N=%d C=%d OC=%d%s", N, C, OC, with_bias ? " bias" : "");
  check_close_act(label, p[0].f, rpre, no, A_PROD);
  check_same(label, &p[0], &p[1]);
  snprintf(label, sizeof label, "matmul_forward_gelu out N=%d C=%d OC=%d%s", N, C, OC, with_bias ? " bias" : "");
  check_close_act(label, o[0].f, rout, no, A_PROD);
  check_same(label, &o[0], &o[1]);
  for (int i = 0; i < 2; i++) free_result(&o[i]), free_result(&p[i]);
  dfree(di), dfree(dw), dfree(db), dfree(dout), dfree(dpre);
  free(inp), free(w), free(b), free(rpre), free(rout);
}

// matmul_backward_gelu: the matmul's input is gelu(pre), and dinp is the gradient of pre. Where
// the DGELU epilogue runs (C % 8 == 0, pre 16-byte aligned, an algorithm for it, the epilogue
// on) GELU' multiplies the fp32 product in it; elsewhere dinp is rounded to bf16 first and
// gelu_backward follows, so the
// reference rounds the product there too (as test_matmul_gelu's). dweight and dbias as in
// matmul_backward, from the same (random) starting values.
static void test_matmul_backward_gelu(int N, int C, int OC) {
  if (!test_wanted("matmul_backward_gelu")) return;
  char tag[96], label[192];
  int fwd, fused;  // the DGELU epilogue of this product (matmul_gelu_fuses: a GELU of width C, then C -> OC)
  matmul_gelu_fuses(K, N, OC, C, 0, &fwd, &fused);
  snprintf(tag, sizeof tag, "N=%d C=%d OC=%d%s", N, C, OC, fused == 1 ? " (DGELU epilogue)" : " (unfused)");
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float* pre = hrand(ni, 2.0f, 0.0f);  // GELU inputs across its curved part
  round_act(pre, ni);
  float* inp = hzero(ni);
  cpu_gelu_forward(NULL, inp, pre, ni);
  round_act(inp, ni);
  float* w = hrand(nw, 0.5f, 0.0f);
  float* g = hrand(no, 1.0f, 0.0f);
  float* dw0 = hrand(nw, 1.0f, 0.0f);
  float* db0 = hrand(OC, 1.0f, 0.0f);
  act_t *dpre = up_act(pre, ni), *dinp_in = up_act(inp, ni), *dwt = up_act(w, nw), *dg = up_act(g, no);
  act_t* ddinp = dmalloc(ni * 2);
  float *ddw = up_f32(dw0, nw), *ddb = up_f32(db0, OC);
  float *rdinp = hzero(ni), *rdw = hcopy(dw0, nw), *rdb = hcopy(db0, OC);
  cpu_matmul_backward(NULL, rdinp, rdw, rdb, g, inp, w, N, C, OC);
  if (fused != 1) round_act(rdinp, ni);
  cpu_gelu_backward(NULL, rdinp, pre, rdinp, ni);
  // The CPU's own matmul_backward_gelu is that sequence (without the rounding).
  float *cdinp = hzero(ni), *cdw = hcopy(dw0, nw), *cdb = hcopy(db0, OC), *plain = hzero(ni);
  cpu_matmul_backward_gelu(NULL, cdinp, cdw, cdb, g, inp, w, pre, N, C, OC);
  float* scratch_w = hcopy(dw0, nw);
  cpu_matmul_backward(NULL, plain, scratch_w, NULL, g, inp, w, N, C, OC);
  cpu_gelu_backward(NULL, plain, pre, plain, ni);
  snprintf(label, sizeof label, "cpu matmul_backward_gelu is matmul_backward then gelu_backward %s", tag);
  check_true(label, !memcmp(cdinp, plain, ni * 4) && !memcmp(cdw, scratch_w, nw * 4), "bits differ");
  Result gi[2], gw[2], gb[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(ddinp, ni * 2);
    set_f32(ddw, dw0, nw), set_f32(ddb, db0, OC);
    matmul_backward_gelu(K, ddinp, ddw, ddb, dg, dinp_in, dwt, dpre, N, C, OC);
    gi[rep] = get_act(ddinp, ni), gw[rep] = get_f32(ddw, nw), gb[rep] = get_f32(ddb, OC);
  }
  snprintf(label, sizeof label, "matmul_backward_gelu dinp (gradient of the GELU's input) %s", tag);
  check_close_act(label, gi[0].f, rdinp, ni, A_PROD);
  check_same(label, &gi[0], &gi[1]);
  snprintf(label, sizeof label, "matmul_backward_gelu dweight (accumulated) %s", tag);
  check_close(label, gw[0].f, rdw, nw, 1e-3, 1e-3);
  check_same(label, &gw[0], &gw[1]);
  snprintf(label, sizeof label, "matmul_backward_gelu dbias (accumulated) %s", tag);
  check_close(label, gb[0].f, rdb, OC, 1e-4, 1e-4);
  check_same(label, &gb[0], &gb[1]);
  for (int i = 0; i < 2; i++) free_result(&gi[i]), free_result(&gw[i]), free_result(&gb[i]);
  dfree(dpre), dfree(dinp_in), dfree(dwt), dfree(dg), dfree(ddinp), dfree(ddw), dfree(ddb);
  free(pre), free(inp), free(w), free(g), free(dw0), free(db0), free(rdinp), free(rdw), free(rdb);
  free(cdinp), free(cdw), free(cdb), free(plain), free(scratch_w);
}

// ---- embeddings -----------------------------------------------------------------------

// token_range: ids are drawn from [0, token_range) (repeats), and every 7th row is id 42 % V
// (one long segment).
static void test_embedding(int N, int T, int C, int V, int Vp, int token_range, int with_wpe) {
  if (!test_wanted("embedding")) return;
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
  check_act_exact(label, &r[0], ref);
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
  if (!test_wanted("classifier")) return;
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
  cpu_classifier_forward_backward(NULL, rloss, rl, tgt, N, V, Vp, &dloss);
  float* ddloss = up_f32(&dloss, 1);  // the kernel reads dloss from device memory
  Result g[2], l[2];
  for (int rep = 0; rep < 2; rep++) {
    set_act(dl, logits, nl);
    poison(dlosses, N * 4);
    classifier_forward_backward(K, dlosses, dl, dt, N, V, Vp, ddloss);
    g[rep] = get_act(dl, nl), l[rep] = get_f32(dlosses, N);
  }
  snprintf(label, sizeof label, "classifier_forward_backward losses %s", tag);
  check_close(label, l[0].f, rloss, N, 1e-5, 1e-5);
  check_same(label, &l[0], &l[1]);
  // Padding columns and ignored rows must be exactly 0: their reference is 0 and the bound
  // there is only the tiny atol.
  snprintf(label, sizeof label, "classifier_forward_backward dlogits (in place, padding 0) %s", tag);
  check_close_act(label, g[0].f, rl, nl, 1.0 / 16384);
  check_same(label, &g[0], &g[1]);
  for (int i = 0; i < 2; i++) free_result(&g[i]), free_result(&l[i]);

  // losses = NULL is allowed (evaluation of gradients only)
  set_act(dl, logits, nl);
  classifier_forward_backward(K, NULL, dl, dt, N, V, Vp, ddloss);
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
  for (int j = 0; j < V; j++) hrow[j] = h_f2act(logits[(size_t)row * Vp + j]);
  memset(probs, 0, V * 4);
  softmax_row(NULL, probs, hrow, V, 0.7f);
  snprintf(label, sizeof label, "softmax_row (host row, ctx NULL) V=%d", V);
  check_close(label, probs, rprobs, V, 1e-6, 1e-7);
  free(hrow), free(probs), free(rprobs);
  dfree(dl), dfree(dt), dfree(dlosses), dfree(ddloss);
  free(logits), free(tgt), free(rl), free(rloss);
}

// Rows with infinite logits, which follow the rule of kernels/cpu/classifier.c: -inf logits get
// probability exactly 0 (a -inf target: loss +inf), a row of only -inf logits is uniform (loss
// log V), +inf logits share the probability. The kernel must agree with the CPU reference and
// give no NaN. In the "leading -inf" row the first min(600, V/2) logits are -inf: for V >= 1200
// every one of the kernel's 512 threads of a row meets -inf before any finite logit.
// loss_accumulate: the per-token losses summed in kernels/loss_sum.h's fixed order, bit for bit
// the CPU's, added to what the accumulator held. The values span 2^-40 .. 2^40 with both signs
// (and zeros, the ignored positions), so that the double sums round and cancel and another
// order of the additions changes the bits (real losses, fp32 values of a few units, mostly sum
// exactly in double, where any order would pass).
static void test_loss_accumulate(int N) {
  if (!test_wanted("loss_accumulate")) return;
  char label[160];
  float* losses = malloc((size_t)(N > 0 ? N : 1) * sizeof(float));
  for (int i = 0; i < N; i++) losses[i] = i % 7 == 3 ? 0.0f : ldexpf(rv(2.0f), irand(80) - 40);
  double cpu = 0.25, start = 0.25;
  cpu_loss_accumulate(NULL, &cpu, losses, N);
  float* d = up_f32(losses, N > 0 ? N : 1);
  double* dacc = dmalloc(sizeof(double));
  double gpu[2];
  for (int rep = 0; rep < 2; rep++) {
    CUDA_T(cudaMemcpy(dacc, &start, sizeof start, cudaMemcpyHostToDevice));
    loss_accumulate(K, dacc, d, N);
    gpu_done();
    CUDA_T(cudaMemcpy(&gpu[rep], dacc, sizeof gpu[rep], cudaMemcpyDeviceToHost));
  }
  double inorder = start;  // the plain in-order sum, to show the order matters at this N
  for (int i = 0; i < N; i++) inorder += losses[i];
  char d2[160];
  snprintf(d2, sizeof d2, "gpu %.17g, cpu %.17g (the in-order sum: %.17g)", gpu[0], cpu, inorder);
  snprintf(label, sizeof label, "loss_accumulate N=%d: bit-identical to the CPU's fixed order, twice", N);
  check_true(label, !memcmp(&gpu[0], &cpu, sizeof cpu) && !memcmp(&gpu[1], &cpu, sizeof cpu), d2);
  dfree(d), dfree(dacc);
  free(losses);
}

static void test_classifier_inf(int V, int Vp) {
  if (!test_wanted("classifier")) return;
  enum { N = 9 };
  char tag[64], label[192];
  snprintf(tag, sizeof tag, "N=%d V=%d Vp=%d", N, V, Vp);
  size_t nl = (size_t)N * Vp;
  float* logits = hrand(nl, 4.0f, 0.0f);
  int32_t tgt[N];
  int lead = V / 2 < 600 ? V / 2 : 600;
  for (int n = 0; n < N; n++) {
    float* row = logits + (size_t)n * Vp;
    switch (n) {
      case 0:  // all -inf
        for (int j = 0; j < V; j++) row[j] = -INFINITY;
        tgt[n] = V / 2;
        break;
      case 1:  // leading -inf, the target among the finite logits after them
        for (int j = 0; j < lead; j++) row[j] = -INFINITY;
        tgt[n] = V - 1 - irand(V - lead);
        break;
      case 2:  // every third logit -inf, the target finite
        for (int j = 1; j < V; j += 3) row[j] = -INFINITY;
        tgt[n] = 3 * irand((V + 2) / 3);
        break;
      case 3:  // the target's logit -inf among finite ones: loss +inf
        for (int j = 2; j < V; j += 5) row[j] = -INFINITY;
        tgt[n] = 2;
        break;
      case 4:  // one finite logit, the target: loss 0, gradient 0
        for (int j = 0; j < V; j++)
          if (j != V / 3) row[j] = -INFINITY;
        tgt[n] = V / 3;
        break;
      case 5:  // two +inf logits, one the target, and a -inf: loss log 2
        row[0] = -INFINITY, row[1] = INFINITY, row[V - 2] = INFINITY;
        tgt[n] = V - 2;
        break;
      case 6:  // +inf and a finite target: loss +inf
        row[3] = INFINITY;
        tgt[n] = 0;
        break;
      case 7:  // ignored row of -inf logits: loss 0, gradient 0
        for (int j = 0; j < V; j++) row[j] = -INFINITY;
        tgt[n] = -1;
        break;
      default:  // an ordinary row
        tgt[n] = irand(V);
    }
  }
  float dloss = 1.0f / N;
  act_t* dl = up_act(logits, nl);
  int32_t* dt = up_i32(tgt, N);
  float* dlosses = dmalloc(N * 4);
  float *rl = hcopy(logits, nl), *rloss = hzero(N);
  cpu_classifier_forward_backward(NULL, rloss, rl, tgt, N, V, Vp, &dloss);
  float* ddloss = up_f32(&dloss, 1);  // the kernel reads dloss from device memory
  Result g[2], l[2];
  for (int rep = 0; rep < 2; rep++) {
    set_act(dl, logits, nl);
    poison(dlosses, N * 4);
    classifier_forward_backward(K, dlosses, dl, dt, N, V, Vp, ddloss);
    g[rep] = get_act(dl, nl), l[rep] = get_f32(dlosses, N);
  }
  size_t nan_ref = 0, nan_gpu = 0;
  for (size_t i = 0; i < nl; i++) nan_ref += isnan(rl[i]), nan_gpu += isnan(g[0].f[i]);
  for (int n = 0; n < N; n++) nan_ref += isnan(rloss[n]), nan_gpu += isnan(l[0].f[n]);
  char d[96];
  snprintf(d, sizeof d, "%zu NaN in the CPU reference, %zu on the GPU", nan_ref, nan_gpu);
  snprintf(label, sizeof label, "classifier_forward_backward with infinite logits: no NaN %s", tag);
  check_true(label, nan_ref == 0 && nan_gpu == 0, d);
  snprintf(label, sizeof label, "classifier_forward_backward losses with infinite logits %s", tag);
  check_close(label, l[0].f, rloss, N, 1e-5, 1e-5);
  check_same(label, &l[0], &l[1]);
  snprintf(label, sizeof label, "classifier_forward_backward dlogits with infinite logits %s", tag);
  check_close_act(label, g[0].f, rl, nl, 1.0 / 16384);
  check_same(label, &g[0], &g[1]);
  for (int i = 0; i < 2; i++) free_result(&g[i]), free_result(&l[i]);

  // softmax_row of the all -inf row (uniform), the every-third -inf row and the +inf row
  float *probs = hzero(V), *rprobs = hzero(V);
  static const int rows[] = {0, 2, 5};
  for (int r = 0; r < 3; r++) {
    const float* lrow = logits + (size_t)rows[r] * Vp;
    cpu_softmax_row(NULL, rprobs, lrow, V, 0.7f);
    set_act(dl, logits, nl);
    memset(probs, 0xFF, V * 4);
    softmax_row(K, probs, dl + (size_t)rows[r] * Vp, V, 0.7f);
    snprintf(label, sizeof label, "softmax_row with infinite logits (row %d) V=%d", rows[r], V);
    check_close(label, probs, rprobs, V, 1e-6, 1e-7);
  }
  free(probs), free(rprobs);
  dfree(dl), dfree(dt), dfree(dlosses), dfree(ddloss);
  free(logits), free(rl), free(rloss);
}

// ---- relative position bias -----------------------------------------------------------

// The device's buckets against the host's (kernels/position_bucket.h compiled for both), and
// the property the fused attention kernels rely on: beyond max_distance the bucket no longer
// changes, so they keep one bias per relative position clamped to [-max_distance, max_distance].
static void test_position(int bidir, int nb, int maxd) {
  if (!test_wanted("position")) return;
  char tag[96], label[192];
  snprintf(tag, sizeof tag, "%s buckets=%d max=%d", bidir ? "bidirectional" : "one-directional", nb, maxd);
  int mism = 0, moved = 0;
  for (int r = -1000; r <= 1000; r++)
    if (relative_position_bucket(r, bidir, nb, maxd) != cpu_relative_position_bucket(r, bidir, nb, maxd)) mism++;
  snprintf(label, sizeof label, "relative_position_bucket -1000..1000 equals the CPU's, %s", tag);
  check_true(label, mism == 0, "buckets differ");
  for (int r = maxd; r <= maxd + 5000; r++)
    moved += cpu_relative_position_bucket(r, bidir, nb, maxd) != cpu_relative_position_bucket(maxd, bidir, nb, maxd) ||
             cpu_relative_position_bucket(-r, bidir, nb, maxd) != cpu_relative_position_bucket(-maxd, bidir, nb, maxd);
  snprintf(label, sizeof label, "relative_position_bucket constant beyond +-max_distance (to 5000 past), %s", tag);
  check_true(label, moved == 0, "a bucket changes past max_distance");
}

// ---- optimizer ------------------------------------------------------------------------

// Random AdamW state of n elements: parameters, gradients, m and a positive v; the step's constants.
static AdamWArgs adam_inputs(size_t n, int step, float** p0, float** g, float** m0, float** v0) {
  *p0 = hrand(n, 1.0f, 0.0f);
  *g = hrand(n, 0.01f, 0.0f);
  *m0 = hrand(n, 0.01f, 0.0f);
  *v0 = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) (*v0)[i] = (float)(1e-5 + 1e-4 * urand());
  return (AdamWArgs){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                     .grad_scale = 0.5f, .step = step};
}

static void test_adamw(size_t n, int with_act) {
  if (!test_wanted("adamw")) return;
  char label[160];
  float *p0, *g, *m0, *v0;
  AdamWArgs a = adam_inputs(n, 7, &p0, &g, &m0, &v0);
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
    check_act_exact(label, &A[0], ract);
  }
  for (int i = 0; i < 2; i++) free_result(&P[i]), free_result(&M[i]), free_result(&Vv[i]), free_result(&A[i]);
  dfree(dp), dfree(dg), dfree(dm), dfree(dv), dfree(dact);
  free(p0), free(g), free(m0), free(v0), free(rp), free(rm), free(rv_), free(ract);
}

// A unit's ranges in one call against the CPU's adamw_update on each range: ranges of uneven
// sizes (1 element up to several thousand), gaps between some (left alone), the first starting
// off a multiple of 4, weight decay on some; `shift` elements past an aligned address (1: no
// 16-byte accesses); more than 32 ranges take more than one launch.
// The step's decision on the device (step_prepare, grad_norm_words, step_decide: one thread
// each) against the CPU's, over a sequence of steps that takes every branch: finite steps (the
// dynamic scale doubles after its window), an overflow (a NaN in one unit's words), a NaN loss,
// the stop at max_bad_steps and a finite step after it. Every field of the StepControl, the
// zeroed loss sum and the norm's words must be bit-identical (the same double arithmetic).
static void test_step_control(void) {
  if (!test_wanted("step_control")) return;
  const int nunits = 5;
  StepControl c;
  memset(&c, 0, sizeof c);
  c.grad_clip = 1.0f, c.dynamic = 1, c.window = 2, c.max_bad_steps = 2;
  c.adamw.beta1 = 0.9f, c.adamw.beta2 = 0.95f, c.adamw.eps = 1e-8f, c.adamw.weight_decay = 0.1f;
  c.scale = 65536.0, c.nonfinite_unit = -1;
  StepControl* dc = dmalloc(sizeof c);
  int64_t *dunits = dmalloc(nunits * NORM_WORDS * 8), *dtotal = dmalloc((EXACT_WORDS + nunits) * 8);
  double* dloss_sum = dmalloc(8);
  StepControl ref = c;
  CUDA_T(cudaMemcpy(dc, &c, sizeof c, cudaMemcpyHostToDevice));
  int64_t units[5 * NORM_WORDS], units_ref[5 * NORM_WORDS], total_ref[EXACT_WORDS + 5], total[EXACT_WORDS + 5];
  int steps = 7, same = 1;
  for (int s = 0; s < steps; s++) {
    // Step s: random sums of squares per unit (about (S x 0.5)^2 over 1000 blocks); a NaN in unit 2
    // at step 2; a NaN loss at steps 4 and 5 (the stop at the second), a finite step 6 after it.
    memset(units, 0, sizeof units);
    for (int u = 0; u < nunits; u++) {
      for (int b = 0; b < 1000; b++) exact_add(units + u * NORM_WORDS, urand() * ref.scale * ref.scale * 2.5e-4);
      if (s == 2 && u == 2) units[u * NORM_WORDS + EXACT_WORDS] = 1;
    }
    double loss_sum = s == 4 || s == 5 ? NAN : 100.0 * (1.0 + urand());
    ref.in = (StepInputs){.tokens = 37 + s, .lr = 1e-3f * (s + 1), .bc1 = adamw_bias_correction(0.9f, s + 1),
                          .bc2 = adamw_bias_correction(0.95f, s + 1), .step = s + 1};
    memcpy(units_ref, units, sizeof units);
    double ls_ref = loss_sum;
    cpu_step_prepare(NULL, &ref);
    cpu_grad_norm_words(NULL, total_ref, units_ref, nunits);
    cpu_step_decide(NULL, &ref, &ls_ref, total_ref, nunits);
    CUDA_T(cudaMemcpy(&dc->in, &ref.in, sizeof ref.in, cudaMemcpyHostToDevice));
    CUDA_T(cudaMemcpy(dunits, units, sizeof units, cudaMemcpyHostToDevice));
    CUDA_T(cudaMemcpy(dloss_sum, &loss_sum, 8, cudaMemcpyHostToDevice));
    step_prepare(K, dc);
    grad_norm_words(K, dtotal, dunits, nunits);
    step_decide(K, dc, dloss_sum, dtotal, nunits);
    StepControl got;
    double ls_got;
    CUDA_T(cudaMemcpy(&got, dc, sizeof got, cudaMemcpyDeviceToHost));
    CUDA_T(cudaMemcpy(&ls_got, dloss_sum, 8, cudaMemcpyDeviceToHost));
    CUDA_T(cudaMemcpy(total, dtotal, sizeof total, cudaMemcpyDeviceToHost));
    int ok = !memcmp(&got, &ref, sizeof got) && !memcmp(&ls_got, &ls_ref, 8) && !memcmp(total, total_ref, sizeof total);
    if (!ok && same) printf("     step %d differs: device update %d scale %g bad_steps %d, CPU update %d scale %g bad_steps %d\n",
                            s + 1, got.adamw.update, got.scale, got.bad_steps, ref.adamw.update, ref.scale, ref.bad_steps);
    same &= ok;
  }
  check_true("step_prepare, grad_norm_words and step_decide on the device: every field bit-identical to the CPU's over "
             "7 steps (updates, a scale doubling, an overflow, NaN losses, the stop, a step after it)",
             same && ref.stopped && ref.bad_steps == 2 && !ref.adamw.update, "they differ");
  dfree(dc), dfree(dunits), dfree(dtotal), dfree(dloss_sum);
}

static void test_adamw_ranges(int nr, int shift, int with_act) {
  if (!test_wanted("adamw")) return;
  char label[160];
  static const int sizes[] = {1, 3, 768, 7, 2304, 13, 2, 4096, 5, 33};
  AdamWRange* r = malloc((size_t)nr * sizeof(AdamWRange));
  int64_t at = 5;
  for (int k = 0; k < nr; k++) {
    at += (k % 3 == 1) ? k % 5 : 0;  // a gap before some ranges
    r[k] = (AdamWRange){at, at + sizes[k % 10], (k * 7) % 3 != 0};
    at = r[k].end;
  }
  size_t n = (size_t)at + 3 + shift;
  float *p0, *g, *m0, *v0;
  AdamWArgs a = adam_inputs(n, 3, &p0, &g, &m0, &v0);
  float *rp = hcopy(p0, n), *rm = hcopy(m0, n), *rv_ = hcopy(v0, n);
  for (int k = 0; k < nr; k++) {
    size_t o = (size_t)(r[k].start + shift);
    cpu_adamw_update(NULL, rp + o, NULL, g + o, rm + o, rv_ + o, (size_t)(r[k].end - r[k].start),
                     adamw_range_args(a, &r[k]));
  }
  // The 16-bit working copy (with_act): the updated values rounded at the same indices, the gaps
  // (random starting values) untouched.
  float* pact0 = hrand(n, 1.0f, 0.0f);
  round_act(pact0, n);
  float* rpact = hcopy(pact0, n);
  for (int k = 0; k < nr; k++)
    for (int64_t i = r[k].start + shift; i < r[k].end + shift; i++) rpact[i] = rp[i];
  float *dp = up_f32(p0, n), *dg = up_f32(g, n), *dm = up_f32(m0, n), *dv = up_f32(v0, n);
  act_t* dpact = up_act(pact0, n);
  // The step's scalars in device memory, as the step's decision leaves them.
  AdamWStep st = adamw_step_of(a), *dst = dmalloc(sizeof st);
  CUDA_T(cudaMemcpy(dst, &st, sizeof st, cudaMemcpyHostToDevice));
  Result P[2], M[2], Vv[2], PA[2];
  for (int rep = 0; rep < 2; rep++) {
    set_f32(dp, p0, n), set_f32(dm, m0, n), set_f32(dv, v0, n), set_act(dpact, pact0, n);
    adamw_update_ranges(K, dp + shift, with_act ? dpact + shift : NULL, dg + shift, dm + shift, dv + shift, r, nr, dst);
    P[rep] = get_f32(dp, n), M[rep] = get_f32(dm, n), Vv[rep] = get_f32(dv, n), PA[rep] = get_act(dpact, n);
  }
  // A skipped step (update = 0, decided on the device): nothing is written.
  st.update = 0;
  CUDA_T(cudaMemcpy(dst, &st, sizeof st, cudaMemcpyHostToDevice));
  set_f32(dp, p0, n), set_f32(dm, m0, n), set_f32(dv, v0, n), set_act(dpact, pact0, n);
  adamw_update_ranges(K, dp + shift, with_act ? dpact + shift : NULL, dg + shift, dm + shift, dv + shift, r, nr, dst);
  Result sp = get_f32(dp, n), sm = get_f32(dm, n), sv = get_f32(dv, n);
  snprintf(label, sizeof label, "adamw_update_ranges with update = 0 leaves p, m and v as they were, %d ranges%s", nr,
           shift ? ", unaligned" : "");
  check_true(label, !memcmp(sp.f, p0, n * 4) && !memcmp(sm.f, m0, n * 4) && !memcmp(sv.f, v0, n * 4), "they changed");
  free_result(&sp), free_result(&sm), free_result(&sv);
  dfree(dst);
  if (with_act) {
    snprintf(label, sizeof label, "adamw_update_ranges 16-bit working copy, %d ranges%s (gaps untouched)", nr,
             shift ? ", unaligned" : "");
    check_act_exact(label, &PA[0], rpact);
  }
  snprintf(label, sizeof label, "adamw_update_ranges p, %d ranges over %zu%s (gaps untouched)", nr, n,
           shift ? ", unaligned" : "");
  check_f32_exact(label, P[0].f, rp, n);
  check_same(label, &P[0], &P[1]);
  snprintf(label, sizeof label, "adamw_update_ranges m and v, %d ranges%s", nr, shift ? ", unaligned" : "");
  check_f32_exact(label, M[0].f, rm, n);
  check_f32_exact(label, Vv[0].f, rv_, n);
  for (int i = 0; i < 2; i++) free_result(&P[i]), free_result(&M[i]), free_result(&Vv[i]), free_result(&PA[i]);
  dfree(dp), dfree(dg), dfree(dm), dfree(dv), dfree(dpact);
  free(p0), free(g), free(m0), free(v0), free(rp), free(rm), free(rv_), free(r), free(pact0), free(rpact);
}

static void test_block_sumsq(size_t nblocks) {
  if (!test_wanted("block_sumsq")) return;
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

// exact_sum on the device against the CPU reference: the words must be identical (integer sums
// of the same per-value limbs, however the values are split among threads), on block sums with
// exponents over 140 binades, a zero, NaN, inf and one value past the range (2^97).
static void test_exact_sum(size_t n) {
  if (!test_wanted("exact_sum")) return;
  char label[160];
  double* x = malloc((n ? n : 1) * sizeof(double));
  for (size_t i = 0; i < n; i++) x[i] = ldexp(0.5 + urand() * 0.5, (int)(urand() * 140) - 100);
  if (n > 3) x[n / 2] = 0.0, x[n / 3] = NAN, x[n - 1] = INFINITY, x[1] = 0x1p97;
  double* dx = dmalloc((n ? n : 1) * 8);
  CUDA_T(cudaMemcpy(dx, x, n * 8, cudaMemcpyHostToDevice));
  int64_t ref[NORM_WORDS], out[2][NORM_WORDS];
  cpu_exact_sum(NULL, ref, x, n);
  int64_t* dw = dmalloc(sizeof ref);
  for (int rep = 0; rep < 2; rep++) {
    poison(dw, sizeof ref);
    exact_sum(K, dw, dx, n);
    gpu_done();
    CUDA_T(cudaMemcpy(out[rep], dw, sizeof ref, cudaMemcpyDeviceToHost));
  }
  char d[200];
  snprintf(d, sizeof d, "words differ: gpu non-finite %lld overflow %lld, cpu %lld %lld", (long long)out[0][NORM_WORDS - 1],
           (long long)out[0][NORM_WORDS - 2], (long long)ref[NORM_WORDS - 1], (long long)ref[NORM_WORDS - 2]);
  snprintf(label, sizeof label, "exact_sum %zu values: the CPU's words exactly", n);
  check_true(label, !memcmp(out[0], ref, sizeof ref), d);
  snprintf(label, sizeof label, "exact_sum %zu values: deterministic (two runs bit-identical)", n);
  check_true(label, !memcmp(out[0], out[1], sizeof ref), "runs differ");
  dfree(dx), dfree(dw);
  free(x);
}

// ---- attention ------------------------------------------------------------------------

// The sizes of the terms of every attention output element, for its bound (see "Attention" at
// the top), in double from the inputs of the CPU reference: q, k, v, bias, dout, out (the
// forward's, rounded to bf16) and lse. With P_ij = exp(score_ij - lse_i), dP_ij = dout_i.v_j,
// D_i = dout_i.out_i, dS_ij = P_ij (dP_ij - D_i) and M_ij = |dout_i|.|v_j| + |dout_i|.|out_i|
// (dot products of absolute values):
//   R, the terms whose left factor the fused kernels round to bf16:
//     out_id: sum_j P_ij |v_jd|         dq_id: scale sum_j |dS_ij| |k_jd|
//     dv_jd:  sum_i P_ij |dout_id|      dk_jd: scale sum_i |dS_ij| |q_id|
//     dtable_bh: sum over (b, i, j) in bucket bk of |dS_ij|
//   F, the size of dP and D: R with |dS_ij| replaced by P_ij M_ij (dq, dk, dtable only).
//   G, the right factors alone: R with the rounded left factor replaced by 1 (out, dq, dk, dv):
//     an operand rounded below the normal range errs by up to ACT_ETA2 absolutely, not u
//     relatively, so G ACT_ETA2 bounds what that adds (fp16 only; nil for bf16).
// Each array is laid out as the output it bounds: rq/fq, rk/fk and rv as dq, dk and dv (rows of
// q_stride and kv_stride elements, so in a fused buffer they interleave as the gradients do),
// rout as out, rdb/fdb as dtable (NULL without a bias). They must start at zero. The loops
// follow the CPU reference: every element has one owner, so they run in parallel (the bias
// gradient's terms per (h, i, j) first, folded into buckets after).
typedef struct {
  double *rout, *rq, *fq, *rk, *fk, *rv, *rdb, *fdb;
  double *gout, *gq, *gk, *gv;  // G, laid out as rout, rq, rk, rv
} AttnTermSizes;

static double dot_d(const float* a, const float* b, int n) {
  double s = 0.0;
  for (int d = 0; d < n; d++) s += (double)a[d] * b[d];
  return s;
}
static double dot_abs(const float* a, const float* b, int n) {
  double s = 0.0;
  for (int d = 0; d < n; d++) s += fabs((double)a[d] * b[d]);
  return s;
}

// The position bias of (h, i, j) from a table, as the CPU reference computes it.
static double table_bias(CpuAttnBias bias, AttnShape s, int h, int i, int j) {
  if (!bias.table) return 0.0;
  return bias.table[(size_t)cpu_relative_position_bucket(j - i, bias.bidirectional, bias.num_buckets, bias.max_distance) *
                        s.H + h];
}

static void attention_term_sizes(AttnTermSizes z, const float* q, const float* k, const float* v, CpuAttnBias bias,
                                 const float* dout, const float* out, const float* lse, AttnShape s) {
  const int C = s.H * s.D, D = s.D, G = s.H / attn_kv_heads(s);  // query head h reads key/value head h / G
  const size_t nhij = z.rdb ? (size_t)s.H * s.Tq * s.Tk : 1;
  double *rhij = calloc(nhij, sizeof(double)), *fhij = calloc(nhij, sizeof(double));
  const long nrows = (long)s.B * s.H * s.Tq;
  double* Dd = malloc((nrows ? nrows : 1) * sizeof(double));  // D_i, indexed as lse
  double* Da = malloc((nrows ? nrows : 1) * sizeof(double));  // |dout_i|.|out_i|
#define QROW(b, i, h) (q + ((size_t)(b) * s.Tq + (i)) * s.q_stride + (size_t)(h) * D)
#define KVROW(x, b, j, h) ((x) + ((size_t)(b) * s.Tk + (j)) * s.kv_stride + (size_t)(h) * D)
#define OROW(x, b, i, h) ((x) + ((size_t)(b) * s.Tq + (i)) * C + (size_t)(h) * D)
#define LIDX(b, h, i) (((size_t)(b) * s.H + (h)) * s.Tq + (i))
#pragma omp parallel for schedule(static)
  for (long r = 0; r < nrows; r++) {
    int i = (int)(r % s.Tq), h = (int)((r / s.Tq) % s.H), b = (int)(r / ((long)s.Tq * s.H));
    Dd[r] = dot_d(OROW(dout, b, i, h), OROW(out, b, i, h), D);
    Da[r] = dot_abs(OROW(dout, b, i, h), OROW(out, b, i, h), D);
  }
  // out, dq and the bias terms: one (h, i) per iteration, looping b.
#pragma omp parallel for schedule(static)
  for (long r = 0; r < (long)s.H * s.Tq; r++) {
    int i = (int)(r % s.Tq), h = (int)(r / s.Tq);
    int nk = (s.causal && i + 1 < s.Tk) ? i + 1 : s.Tk;
    for (int b = 0; b < s.B; b++) {
      const float *qi = QROW(b, i, h), *doi = OROW(dout, b, i, h);
      double l = lse[LIDX(b, h, i)], Di = Dd[LIDX(b, h, i)], Dai = Da[LIDX(b, h, i)];
      double *ro = OROW(z.rout, b, i, h), *go = OROW(z.gout, b, i, h);
      size_t qo = ((size_t)b * s.Tq + i) * s.q_stride + (size_t)h * D;
      for (int j = 0; j < nk; j++) {
        const float *kj = KVROW(k, b, j, h / G), *vj = KVROW(v, b, j, h / G);
        double sc = s.scale * dot_d(qi, kj, D) + table_bias(bias, s, h, i, j);
        double p = exp(sc - l);
        double ds = fabs(p * (dot_d(doi, vj, D) - Di)), pm = p * (dot_abs(doi, vj, D) + Dai);
        for (int d = 0; d < D; d++) {
          ro[d] += p * fabs(vj[d]);
          go[d] += fabs(vj[d]);
          z.rq[qo + d] += s.scale * ds * fabs(kj[d]);
          z.gq[qo + d] += s.scale * fabs(kj[d]);
          z.fq[qo + d] += s.scale * pm * fabs(kj[d]);
        }
        if (z.rdb) {
          rhij[((size_t)h * s.Tq + i) * s.Tk + j] += ds;
          fhij[((size_t)h * s.Tq + i) * s.Tk + j] += pm;
        }
      }
    }
  }
  // dk and dv: one (b, key/value head, j) per iteration, over the group's query heads and the
  // queries that see key j.
  const int KV = s.H / G;
#pragma omp parallel for schedule(static)
  for (long r = 0; r < (long)s.B * KV * s.Tk; r++) {
    int j = (int)(r % s.Tk), kvh = (int)((r / s.Tk) % KV), b = (int)(r / ((long)s.Tk * KV));
    const float *kj = KVROW(k, b, j, kvh), *vj = KVROW(v, b, j, kvh);
    size_t ko = ((size_t)b * s.Tk + j) * s.kv_stride + (size_t)kvh * D;
    for (int h = kvh * G; h < (kvh + 1) * G; h++)
    for (int i = s.causal ? j : 0; i < s.Tq; i++) {
      const float *qi = QROW(b, i, h), *doi = OROW(dout, b, i, h);
      double sc = s.scale * dot_d(qi, kj, D) + table_bias(bias, s, h, i, j);
      double p = exp(sc - lse[LIDX(b, h, i)]);
      double ds = fabs(p * (dot_d(doi, vj, D) - Dd[LIDX(b, h, i)]));
      double pm = p * (dot_abs(doi, vj, D) + Da[LIDX(b, h, i)]);
      for (int d = 0; d < D; d++) {
        z.rk[ko + d] += s.scale * ds * fabs(qi[d]);
        z.fk[ko + d] += s.scale * pm * fabs(qi[d]);
        z.gk[ko + d] += s.scale * fabs(qi[d]);
        z.rv[ko + d] += p * fabs(doi[d]);
        z.gv[ko + d] += fabs(doi[d]);
      }
    }
  }
#undef QROW
#undef KVROW
#undef OROW
#undef LIDX
  if (z.rdb)
    for (int h = 0; h < s.H; h++)
      for (int i = 0; i < s.Tq; i++)
        for (int j = 0; j < s.Tk; j++) {
          size_t e = (size_t)cpu_relative_position_bucket(j - i, bias.bidirectional, bias.num_buckets, bias.max_distance) *
                         s.H + h;
          z.rdb[e] += rhij[((size_t)h * s.Tq + i) * s.Tk + j];
          z.fdb[e] += fhij[((size_t)h * s.Tq + i) * s.Tk + j];
        }
  free(Dd), free(Da), free(rhij), free(fhij);
}

static double* dzero(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
// The bound of a 16-bit attention output: u |ref| + (u + ATTN_R) R + ATTN_F F (F may be NULL:
// 0), plus ACT_ETA2 (1 + G) for the output's and the operands' roundings below the normal range.
static double* attn_bound(const float* ref, const double* R, const double* F, const double* G, size_t n) {
  double* b = malloc((n ? n : 1) * sizeof(double));
  for (size_t e = 0; e < n; e++)
    b[e] = R_ACT * fabs((double)ref[e]) + (R_ACT + ATTN_R) * R[e] + (F ? ATTN_F * F[e] : 0.0) + ACT_ETA2 * (1.0 + G[e]);
  return b;
}

// fused: q, k, v interleaved in one buffer of rows 3*H*D (GPT, T5 self-attention); otherwise
// q has rows H*D and k, v share one buffer of rows 2*H*D (cross-attention). buckets > 0: a
// position-bias table of that many buckets and max_distance maxd (bidirectional unless causal).
// KV key/value heads shared by the H query heads (grouped-query attention; KV = H: plain). The
// fused buffer is then Llama's q | k | v rows of (H + 2 KV) D, the separate one k | v of 2 KV D.
static void test_attention_kv(const char* name, int B, int Tq, int Tk, int H, int D, int causal, int buckets, int maxd,
                              int fused, float scale, int KV) {
  if (!test_wanted("attention")) return;
  char tag[192], label[288], kvs[32] = "";
  if (KV != H) snprintf(kvs, sizeof kvs, " KV=%d", KV);
  if (buckets)
    snprintf(tag, sizeof tag, "%s (B=%d Tq=%d Tk=%d H=%d%s D=%d%s bias %d/%d)", name, B, Tq, Tk, H, kvs, D,
             causal ? " causal" : "", buckets, maxd);
  else
    snprintf(tag, sizeof tag, "%s (B=%d Tq=%d Tk=%d H=%d%s D=%d%s)", name, B, Tq, Tk, H, kvs, D, causal ? " causal" : "");
  int C = H * D, Ck = KV * D;
  AttnShape s = {.B = B, .Tq = Tq, .Tk = Tk, .H = H, .D = D, .q_stride = fused ? C + 2 * Ck : C,
                 .kv_stride = fused ? C + 2 * Ck : 2 * Ck, .scale = scale, .causal = causal, .KV = KV};
  size_t nq = (size_t)B * Tq * s.q_stride, nkv = fused ? 0 : (size_t)B * Tk * s.kv_stride;
  size_t no = (size_t)B * Tq * C, nl = (size_t)B * H * Tq, nt = buckets ? (size_t)buckets * H : 1;
  float* qbuf = hrand(nq, 1.0f, 0.0f);
  float* kvbuf = fused ? NULL : hrand(nkv, 1.0f, 0.0f);
  float* table = hrand(nt, 1.0f, 0.0f);
  act_t* dq_in = up_act(qbuf, nq);
  act_t* dkv_in = fused ? NULL : up_act(kvbuf, nkv);
  act_t* dtab = up_act(table, nt);
  const float *q = qbuf, *k = fused ? qbuf + C : kvbuf, *v = fused ? qbuf + C + Ck : kvbuf + Ck;
  const act_t *gq = dq_in, *gk = fused ? dq_in + C : dkv_in, *gv = fused ? dq_in + C + Ck : dkv_in + Ck;
  CpuAttnBias pb = {buckets ? table : NULL, buckets, maxd, !causal};
  AttnBias gpb = {buckets ? dtab : NULL, buckets, maxd, !causal};
  float *rout = hzero(no), *rlse = hzero(nl);
  cpu_attention_forward(NULL, rout, rlse, q, k, v, pb, s);

  // The backward runs from the CPU's forward results (out rounded to bf16, lse as is), so both
  // backends start from the same values; the term sizes of every output use the same inputs.
  float* g = hrand(no, 1.0f, 0.0f);
  act_t* dg = up_act(g, no);
  float* routb = hcopy(rout, no);
  act_t* dfo = up_act(routb, no);  // routb is now bf16-rounded: the CPU backward uses it too
  float* dfl = up_f32(rlse, nl);
  double *Rout = dzero(no), *Rq = dzero(nq), *Fq = dzero(nq), *Rkv = dzero(nkv), *Fkv = dzero(nkv);
  double *Rdb = dzero(nt), *Fdb = dzero(nt), *Gout = dzero(no), *Gq = dzero(nq), *Gkv = dzero(nkv);
  AttnTermSizes z = {.rout = Rout, .rq = Rq, .fq = Fq, .rk = fused ? Rq + C : Rkv, .fk = fused ? Fq + C : Fkv,
                     .rv = fused ? Rq + C + Ck : Rkv + Ck, .rdb = buckets ? Rdb : NULL, .fdb = buckets ? Fdb : NULL,
                     .gout = Gout, .gq = Gq, .gk = fused ? Gq + C : Gkv, .gv = fused ? Gq + C + Ck : Gkv + Ck};
  attention_term_sizes(z, q, k, v, pb, g, routb, rlse, s);

  act_t* dout = dmalloc(no * 2);
  float* dlse = dmalloc(nl * 4);
  Result o[2], l[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(dout, no * 2), poison(dlse, nl * 4);
    attention_forward(K, dout, dlse, gq, gk, gv, gpb, s);
    o[rep] = get_act(dout, no), l[rep] = get_f32(dlse, nl);
  }
  double* bound = attn_bound(rout, Rout, NULL, Gout, no);
  snprintf(label, sizeof label, "attention_forward out %s", tag);
  check_bounded(label, o[0].f, rout, bound, no);
  check_same(label, &o[0], &o[1]);
  free(bound);
  snprintf(label, sizeof label, "attention_forward lse %s", tag);
  check_close(label, l[0].f, rlse, nl, 1e-3, 1e-3);
  check_same(label, &l[0], &l[1]);
  for (int i = 0; i < 2; i++) free_result(&o[i]), free_result(&l[i]);

  // dq/dk/dv are poisoned; dtable accumulates from random.
  float* db0 = hrand(nt, 1.0f, 0.0f);
  float* ddb = up_f32(db0, nt);
  act_t* ddq = dmalloc(nq * 2);
  act_t* ddkv = fused ? NULL : dmalloc(nkv * 2);
  float* rdq = hzero(nq);
  float* rdkv = fused ? NULL : hzero(nkv);
  float* rdb = hcopy(db0, nt);
  float *cdq = rdq, *cdk = fused ? rdq + C : rdkv, *cdv = fused ? rdq + C + Ck : rdkv + Ck;
  cpu_attention_backward(NULL, cdq, cdk, cdv, buckets ? rdb : NULL, g, routb, rlse, q, k, v, pb, s);
  act_t *gdq = ddq, *gdk = fused ? ddq + C : ddkv, *gdv = fused ? ddq + C + Ck : ddkv + Ck;
  Result gq_[2], gkv[2], gb[2];
  for (int rep = 0; rep < 2; rep++) {
    poison(ddq, nq * 2);
    if (!fused) poison(ddkv, nkv * 2);
    set_f32(ddb, db0, nt);
    attention_backward(K, gdq, gdk, gdv, buckets ? ddb : NULL, dg, dfo, dfl, gq, gk, gv, gpb, s);
    gq_[rep] = get_act(ddq, nq);
    if (!fused) gkv[rep] = get_act(ddkv, nkv);
    gb[rep] = get_f32(ddb, nt);
  }
  bound = attn_bound(rdq, Rq, Fq, Gq, nq);
  snprintf(label, sizeof label, "attention_backward %s %s", fused ? "dq/dk/dv (fused buffer)" : "dq", tag);
  check_bounded(label, gq_[0].f, rdq, bound, nq);
  check_same(label, &gq_[0], &gq_[1]);
  free(bound);
  if (!fused) {
    bound = attn_bound(rdkv, Rkv, Fkv, Gkv, nkv);
    snprintf(label, sizeof label, "attention_backward dk/dv %s", tag);
    check_bounded(label, gkv[0].f, rdkv, bound, nkv);
    check_same(label, &gkv[0], &gkv[1]);
    free(bound);
  }
  if (buckets) {
    bound = malloc(nt * sizeof(double));
    for (size_t e = 0; e < nt; e++) bound[e] = ATTN_D0 * fabs((double)db0[e]) + ATTN_R * Rdb[e] + ATTN_F * Fdb[e];
    snprintf(label, sizeof label, "attention_backward dtable (accumulated) %s", tag);
    check_bounded(label, gb[0].f, rdb, bound, nt);
    check_same(label, &gb[0], &gb[1]);
    free(bound);
  }
  for (int i = 0; i < 2; i++) {
    free_result(&gq_[i]), free_result(&gb[i]);
    if (!fused) free_result(&gkv[i]);
  }
  dfree(dq_in), dfree(dtab), dfree(dout), dfree(dlse), dfree(dg), dfree(dfo), dfree(dfl), dfree(ddb), dfree(ddq);
  if (!fused) dfree(dkv_in), dfree(ddkv);
  free(qbuf), free(kvbuf), free(table), free(rout), free(routb), free(rlse), free(g), free(db0), free(rdq), free(rdkv);
  free(rdb), free(Rout), free(Rq), free(Fq), free(Rkv), free(Fkv), free(Rdb), free(Fdb), free(Gout), free(Gq), free(Gkv);
}
static void test_attention(const char* name, int B, int Tq, int Tk, int H, int D, int causal, int buckets, int maxd,
                           int fused, float scale) {
  test_attention_kv(name, B, Tq, Tk, H, D, causal, buckets, maxd, fused, scale, H);
}

// The order of a shared key/value head's sum over its query heads (grouped-query attention, 3
// query heads on one key/value head): increasing head, as kernels/cpu/attention.c adds them. With
// q = 0 every score is 0 and P is the same for all three heads; the last query row's dO is +BIG,
// -BIG and +SMALL in column 0 for heads 0, 1, 2 (zero elsewhere), so dv[j][0] = P (BIG - BIG +
// SMALL) = P SMALL in increasing order, and 0 in any order that adds SMALL before the two BIG
// parts cancel (BIG / SMALL = 2^27: SMALL vanishes beside BIG in fp32). A bound from the sizes
// of the terms would take either; this check tells them apart.
static void test_attention_group_order(int D, int T) {
  if (!test_wanted("attention")) return;
  const int H = 3, KV = 1, C = H * D, row = C + 2 * KV * D;
  const float BIG = 32768.0f, SMALL = 1.0f / 4096.0f;  // both exact in bf16 and fp16
  AttnShape s = {.B = 1, .Tq = T, .Tk = T, .H = H, .D = D, .q_stride = row, .kv_stride = row,
                 .scale = 1.0f / sqrtf((float)D), .causal = 1, .KV = KV};
  const size_t nq = (size_t)T * row, no = (size_t)T * C, nl = (size_t)H * T;
  float* qbuf = hrand(nq, 1.0f, 0.0f);
  for (int i = 0; i < T; i++) memset(qbuf + (size_t)i * row, 0, sizeof(float) * C);  // q = 0
  float* g = hzero(no);
  const float last[3] = {BIG, -BIG, SMALL};
  for (int h = 0; h < H; h++) g[(size_t)(T - 1) * C + (size_t)h * D] = last[h];
  act_t *dbuf = up_act(qbuf, nq), *dg = up_act(g, no);
  float *rout = hzero(no), *rlse = hzero(nl);
  cpu_attention_forward(NULL, rout, rlse, qbuf, qbuf + C, qbuf + C + KV * D, (CpuAttnBias){0}, s);
  round_act(rout, no);
  act_t* dfo = up_act(rout, no);
  float* dfl = up_f32(rlse, nl);
  float* rd = hzero(nq);
  cpu_attention_backward(NULL, rd, rd + C, rd + C + KV * D, NULL, g, rout, rlse, qbuf, qbuf + C, qbuf + C + KV * D,
                         (CpuAttnBias){0}, s);
  act_t* dd = dmalloc(nq * 2);
  poison(dd, nq * 2);
  attention_backward(K, dd, dd + C, dd + C + KV * D, NULL, dg, dfo, dfl, dbuf, dbuf + C, dbuf + C + KV * D,
                     (AttnBias){0}, s);
  Result r = get_act(dd, nq);
  float *gv = malloc(sizeof(float) * T * D), *cv = malloc(sizeof(float) * T * D);
  for (int j = 0; j < T; j++)
    for (int c = 0; c < D; c++) {
      gv[(size_t)j * D + c] = r.f[(size_t)j * row + C + KV * D + c];
      cv[(size_t)j * D + c] = rd[(size_t)j * row + C + KV * D + c];
    }
  char label[160];
  snprintf(label, sizeof label, "attention_backward dv of a shared head sums its query heads in increasing order "
           "(H=3 KV=1 D=%d T=%d causal)", D, T);
  check_close(label, gv, cv, (size_t)T * D, 2e-2, 0.0);
  free_result(&r);
  free(gv), free(cv), free(qbuf), free(g), free(rout), free(rlse), free(rd);
  dfree(dbuf), dfree(dg), dfree(dfo), dfree(dfl), dfree(dd);
}

static void usage(const char* prog) {
  fprintf(stderr, "usage: %s [--profile full|small] | --launch-table MAX_DISTANCE\n", prog);
  exit(2);
}

// --launch-table: the fused attention kernels' block sizes and dynamic shared memory (the bias
// variants at max_distance M), for scripts/kernel_report.py; no GPU, no kernel runs.
static int launch_table(int M) {
  char names[64][48];
  int threads[64];
  size_t smem[64];
  int n = attention_kernel_table(names, threads, smem, 64, M);
  for (int i = 0; i < n; i++) printf("launch %s threads %d smem %zu\n", names[i], threads[i], smem[i]);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);  // keep check lines and the backend's stderr notes in order
  // full: the real sizes of GPT-2 124M and T5 (for a GPU). small: every test at small and odd
  // shapes that still take each branch of the full profile (for an emulated GPU).
  int small = 0;
  if (argc == 3 && !strcmp(argv[1], "--launch-table")) return launch_table(atoi(argv[2]));
  if (argc == 3 && !strcmp(argv[1], "--profile") && !strcmp(argv[2], "small")) small = 1;
  else if (!(argc == 1 || (argc == 3 && !strcmp(argv[1], "--profile") && !strcmp(argv[2], "full")))) usage(argv[0]);
  printf("     profile: %s\n", small ? "small" : "full");

  K = kernels_init(0);
  test_backend();
  if (!small) {
    test_elementwise((size_t)4096 * 768 + 13);
    test_elementwise((size_t)4096 * 768);
    test_elementwise(7);

    test_unary("gelu", gelu_forward, gelu_backward, cpu_gelu_forward, cpu_gelu_backward, (size_t)4096 * 3072);
    test_unary("gelu", gelu_forward, gelu_backward, cpu_gelu_forward, cpu_gelu_backward, (size_t)4096 * 3072 + 5);
    test_unary("gelu", gelu_forward, gelu_backward, cpu_gelu_forward, cpu_gelu_backward, 13);
    test_unary("relu", relu_forward, relu_backward, cpu_relu_forward, cpu_relu_backward, (size_t)4096 * 2048 + 5);
    test_unary("relu", relu_forward, relu_backward, cpu_relu_forward, cpu_relu_backward, 13);
    test_geglu(1024, 2048);
    test_geglu(7, 13);
    test_swiglu(4096, 14336 / 8);
    test_swiglu(7, 13);
    const RopeConfig llama31 = {.theta = 500000.0f, .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                                .original_context = 8192};
    test_rope(2 * 8192, 8192, 32 + 8, 128, 48 * 128, llama31);  // Llama 3.1 8B's q and k at T = 8192
    test_rope(13, 5, 3, 6, 23, llama31);

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
    test_matmul_backward_gelu(4096, 3072, 768);  // GPT-2 124M's MLP projection
    test_matmul_backward_gelu(7, 13, 5);         // C % 8 != 0: the unfused path

    test_embedding(4096, 1024, 768, 50257, 50304, 2000, 1);
    test_embedding(7, 3, 13, 5, 8, 5, 1);
    test_embedding(512, 512, 64, 100, 128, 100, 0);

    test_classifier(1024, 50257, 50304);
    test_classifier(7, 13, 16);
    test_classifier(7, 13, 14);  // Vp % 8 != 0: one value per access instead of 16-byte packs
    test_classifier(3, 117001, 117056);  // beyond the shared memory: the row is read twice
    test_classifier_inf(50257, 50304);
    test_classifier_inf(13, 16);
    test_loss_accumulate(8192);  // GPT-2's micro-batch of 8 x 1024 tokens
    test_loss_accumulate(1000);
    test_loss_accumulate(37);    // fewer losses than lanes
    test_loss_accumulate(0);

    test_position(1, 32, 128);  // T5 encoder
    test_position(0, 32, 128);  // T5 decoder
    test_position(1, 64, 256);

    test_adamw(1000003, 1);
    test_adamw(4097, 0);
    test_adamw_ranges(12, 0, 0);
    test_adamw_ranges(70, 0, 1);
    test_adamw_ranges(12, 1, 1);
    test_step_control();
    test_block_sumsq(10007);
    test_block_sumsq(1);
    test_exact_sum(1000003);
    test_exact_sum(1);

    test_attention("GPT-2 124M", 4, 1024, 1024, 12, 64, 1, 0, 0, 1, 0.125f);
    test_attention("odd sizes", 3, 37, 37, 3, 24, 1, 0, 0, 1, 1.0f / sqrtf(24.0f));
    test_attention("T5 encoder", 2, 512, 512, 4, 64, 0, 32, 128, 1, 1.0f);
    test_attention("T5 decoder", 2, 114, 114, 4, 64, 1, 32, 128, 1, 1.0f);
    test_attention("cross-attention", 2, 114, 512, 4, 64, 0, 0, 0, 0, 1.0f);
    test_attention("head size 128", 1, 1024, 1024, 4, 128, 1, 0, 0, 1, 1.0f / sqrtf(128.0f));
    test_attention("head size 128, bias", 2, 257, 257, 2, 128, 0, 32, 128, 1, 1.0f);
    // D % 8 != 0: the fused kernels' element-wise loads and stores (every shape above is 16-byte)
    test_attention("head size 20", 2, 45, 45, 3, 20, 1, 8, 10, 1, 1.0f / sqrtf(20.0f));
    // D > 128: the unfused path (attention_forward_simple / attention_backward_simple)
    test_attention("head size 160", 2, 50, 50, 2, 160, 1, 8, 10, 1, 1.0f / sqrtf(160.0f));
    // Llama: 3.2 1B's heads (32 of 64, 8 key/value heads) and 3.1 8B's (32 of 128, 8) at T = 1024.
    test_attention_kv("Llama 3.2 1B", 2, 1024, 1024, 32, 64, 1, 0, 0, 1, 0.125f, 8);
    test_attention_kv("Llama 3.1 8B", 1, 1024, 1024, 32, 128, 1, 0, 0, 1, 1.0f / sqrtf(128.0f), 8);
    test_attention_kv("GQA 3:1, odd sizes", 1, 333, 333, 6, 64, 1, 0, 0, 1, 0.125f, 2);
  } else {
    // Elementwise maps: ~10^4-10^5 elements, one odd length and one shorter than a warp.
    test_elementwise(65536 + 13);
    test_elementwise(65536);  // a multiple of 8: the 16-byte packs of the casts
    test_elementwise(7);

    test_unary("gelu", gelu_forward, gelu_backward, cpu_gelu_forward, cpu_gelu_backward, 49152 + 5);
    test_unary("gelu", gelu_forward, gelu_backward, cpu_gelu_forward, cpu_gelu_backward, 49152);  // 16-byte packs
    test_unary("gelu", gelu_forward, gelu_backward, cpu_gelu_forward, cpu_gelu_backward, 13);
    test_unary("relu", relu_forward, relu_backward, cpu_relu_forward, cpu_relu_backward, 32768 + 5);
    test_unary("relu", relu_forward, relu_backward, cpu_relu_forward, cpu_relu_backward, 13);
    test_geglu(64, 384);
    test_geglu(7, 13);
    test_swiglu(64, 384);
    test_swiglu(7, 13);
    // q and k heads of a fused Llama row: head sizes 64 and 128, T not dividing N, the 3.1
    // scaling (positions up to 300, past where its slowed pairs differ), and odd shapes.
    const RopeConfig llama31 = {.theta = 500000.0f, .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                                .original_context = 8192};
    const RopeConfig plain = {.theta = 10000.0f};
    test_rope(600, 300, 6, 64, 8 * 64, llama31);
    test_rope(40, 17, 3, 128, 4 * 128, llama31);
    test_rope(13, 5, 3, 6, 23, plain);

    // Rows not a multiple of the 8 warps of a block, C not a multiple of 32 (lanes with fewer
    // channels), C > 1024, and N > 32 rows: more than one chunk of the column sums (reduce.cu);
    // N = 600: 19 chunks, more than the 16 runs the second pass spreads a column's chunks over.
    // The backward's column sums (column_sums.cuh): N = 96 is 12 chunks of 8 rows (one level),
    // N = 600 is 75 (a tree of two levels, the last group of 16 short); C = 40 puts 6 row groups
    // in a block, C = 1100 (one value per access) and C = 2056 (16-byte packs) more packs than
    // threads, so a thread loops over packs.
    for (int rms = 0; rms < 2; rms++) {
      test_layernorm(96, 200, rms);
      test_layernorm(7, 13, rms);
      test_layernorm(37, 1100, rms);
      test_layernorm(600, 40, rms);
      test_layernorm(9, 2056, rms);
    }

    // N <= 64, C, OC <= 96, the weight at 128 bytes (not 256) and at 2 bytes, odd sizes
    test_matmul(64, 96, 96, 1, 0);
    test_matmul(64, 64, 96, 1, 64);
    test_matmul(32, 96, 64, 0, 0);   // no bias, as the lm_head
    test_matmul(7, 13, 5, 1, 0);     // odd sizes: unaligned leading dimensions
    test_matmul(33, 65, 17, 0, 1);   // weight only 2-byte aligned
    test_matmul_gelu(64, 96, 64, 1);
    test_matmul_gelu(64, 96, 64, 0);
    test_matmul_gelu(7, 13, 5, 1);   // OC % 8 != 0: the unfused path
    // The bias gradient's tree (column_sums.cuh): 38 chunks of 16 rows (two levels) in one
    // column tile, and 33 chunks in each of two tiles of 256 columns (the second 8 wide).
    test_matmul(600, 24, 40, 1, 0);
    test_matmul(520, 16, 264, 1, 0);
    test_matmul_backward_gelu(64, 96, 64);   // the DGELU epilogue
    test_matmul_backward_gelu(33, 40, 24);   // an odd N
    test_matmul_backward_gelu(7, 13, 5);     // C % 8 != 0: the unfused path

    // V and C not multiples of anything, C > 256 (threads loop over channels), repeated ids
    // (sorted segments: id 42 is every 7th row), with and without wpe
    test_embedding(256, 64, 300, 1999, 2048, 200, 1);
    test_embedding(7, 3, 13, 5, 8, 5, 1);
    test_embedding(128, 128, 48, 100, 128, 100, 0);
    test_embedding(520, 130, 40, 100, 128, 13, 0);  // 13 ids, as the addition data: every segment long

    // V prime and > 512 (every thread of a row has columns), padding Vp - V = 49; 128 rows put
    // most dlogits below fp16's normal range (about 1/(N V)), where the bound needs ACT_ETA2
    test_classifier(128, 1999, 2048);
    test_classifier(7, 13, 16);
    test_classifier(7, 13, 14);  // Vp % 8 != 0: one value per access instead of 16-byte packs
    // Each row read once and kept in shared memory: 3 packs of 8 a thread, and 3 single values,
    // above the default 48 KiB of shared memory (the opt-in); a row beyond the 227 KiB (16-byte
    // packs and single values) is read twice.
    test_classifier(5, 12001, 12224);
    test_classifier(5, 1501, 1502);
    test_classifier(2, 30001, 30016);
    test_classifier(2, 117001, 117056);
    test_classifier(2, 116301, 116302);
    test_classifier_inf(1999, 2048);
    test_classifier_inf(13, 16);
    test_loss_accumulate(8192);  // GPT-2's micro-batch of 8 x 1024 tokens
    test_loss_accumulate(1000);
    test_loss_accumulate(37);    // fewer losses than lanes
    test_loss_accumulate(0);

    test_position(1, 32, 128);  // T5 encoder
    test_position(0, 32, 128);  // T5 decoder
    test_position(1, 8, 12);    // the short tables of the attention tests below
    test_position(0, 8, 10);

    test_adamw(65537, 1);
    test_adamw(4097, 0);
    test_adamw_ranges(12, 0, 0);
    test_adamw_ranges(70, 0, 1);
    test_adamw_ranges(12, 1, 1);
    test_step_control();
    test_block_sumsq(523);
    test_block_sumsq(1);
    test_exact_sum(64 * 256 + 13);  // past one stride of the partials' grid
    test_exact_sum(0);

    // Every branch of the fused kernels at the smallest shapes that reach it. Forward: 128-row
    // query tiles, 128-key tiles (64 above DP = 64) of 64-key softmax steps (32), so T = 150 has
    // a partial query tile, two key tiles, a partial one, and two steps in a tile. Backward:
    // 128-key CTAs over 64-row query tiles (two 32-row sub-tiles above DP = 64), so 140-150 keys
    // are two CTAs adding to a query tile's dq in order (causal: the first query tiles have one
    // adder; bidirectional and cross-attention: both). Causal and not, the
    // position bias at T5's buckets (positions past 128) and at short tables (most positions past
    // max_distance), an odd batch and several heads, Tq != Tk, the fused qkv buffer and separate
    // q and kv, padded head sizes (16, 32, 128), D % 8 != 0 (element-wise loads), D > 128 (the
    // unfused path).
    test_attention("causal, partial tiles", 1, 150, 150, 1, 64, 1, 0, 0, 1, 0.125f);
    // Three key tiles: a query tile's dq summed by up to three CTAs in turn (each waiting for the
    // one before), causal and not.
    test_attention("three key tiles", 2, 300, 300, 1, 16, 1, 0, 0, 1, 0.25f);
    test_attention("three key tiles, cross-attention", 1, 70, 300, 2, 16, 0, 0, 0, 0, 0.25f);
    test_attention("odd sizes", 1, 37, 37, 3, 24, 1, 0, 0, 1, 1.0f / sqrtf(24.0f));
    test_attention("T5 encoder, T5's buckets", 2, 140, 140, 1, 16, 0, 32, 128, 1, 1.0f);
    test_attention("T5 encoder, odd batch", 3, 70, 70, 2, 32, 0, 8, 12, 1, 1.0f);
    test_attention("T5 decoder", 2, 150, 150, 1, 32, 1, 8, 10, 1, 1.0f);
    test_attention("cross-attention", 2, 23, 150, 2, 16, 0, 0, 0, 0, 1.0f);
    test_attention("head size 128", 1, 140, 140, 1, 128, 1, 0, 0, 1, 1.0f / sqrtf(128.0f));
    test_attention("head size 128, bias", 1, 130, 130, 1, 128, 0, 8, 12, 1, 1.0f);
    test_attention("head size 20", 2, 45, 45, 2, 20, 1, 8, 10, 1, 1.0f / sqrtf(20.0f));
    test_attention("head size 160", 2, 33, 33, 2, 160, 1, 8, 10, 1, 1.0f / sqrtf(160.0f));
    // Grouped-query attention (Llama): one key/value head for all, 3:1 at head size 128, 2:1
    // over three key tiles (the ordered dQ across the group's heads), a separate k|v buffer
    // (cross), 3:1 without the causal mask over two batches, and the unfused path (D > 128); T
    // never a tile multiple. Then the order of a shared head's sum, fused and unfused.
    test_attention_kv("GQA, one key/value head", 1, 150, 150, 4, 64, 1, 0, 0, 1, 0.125f, 1);
    test_attention_kv("GQA 3:1, head size 128", 1, 70, 70, 6, 128, 1, 0, 0, 1, 1.0f / sqrtf(128.0f), 2);
    test_attention_kv("GQA 2:1, three key tiles", 1, 300, 300, 4, 16, 1, 0, 0, 1, 0.25f, 2);
    test_attention_kv("GQA, cross-attention", 2, 23, 150, 4, 16, 0, 0, 0, 0, 1.0f, 1);
    test_attention_kv("GQA 3:1, not causal", 2, 77, 77, 3, 64, 0, 0, 0, 1, 0.125f, 1);
    test_attention_kv("GQA, head size 160", 1, 33, 33, 4, 160, 1, 0, 0, 1, 1.0f / sqrtf(160.0f), 2);
    test_attention_group_order(64, 150);  // two key tiles of three query tiles each, per query head
    test_attention_group_order(160, 33);  // the simple path
  }

  kernels_shutdown(K);
  return test_summary();
}
