// test_kernels.c: unit tests of the fp32 CPU kernels (kernels/cpu).
//
// Every backward is checked against central finite differences of a scalar loss
// L = sum(out * R), R random and bounded away from zero so no output is invisible to L.
// Why the tolerances below hold with a float forward:
// - L is summed in double, and outputs that a perturbation does not touch are bit-identical
//   between the + and - runs, so they cancel exactly; only the touched outputs' float
//   rounding (~6e-8 relative each) is noise, i.e. ~1e-6 on L for the sizes here.
// - With a step h ~ 1e-2 that noise becomes ~1e-4 in the derivative, and the truncation
//   error of the central difference is O(h^2 f''') ~ 1e-4 relative for these smooth maps.
// - The step actually applied is measured in double ((float)(x+h) - x), not assumed.
// So a relative tolerance of 1e-2, with the denominator floored at 1e-2 of the tensor's
// largest gradient (tiny components are all noise), separates bugs (O(1) errors) from noise.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/exact_sum.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"
#include "kernels/step_control.h"
#include "test/adamw_step.h"
#include "test/test.h"

// ---- helpers ------------------------------------------------------------------------

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) {  // splitmix64
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double urand(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }
static float srand1(void) { return (float)(2.0 * urand() - 1.0); }  // [-1, 1)
static int irand(int n) { return (int)(rng_next() % (uint64_t)n); }

static float* falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static void fill_rand(float* x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) x[i] = scale * srand1();
}
// Loss weights: magnitude in [0.2, 1], random sign, never zero.
static void fill_R(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float m = 0.2f + 0.8f * (float)urand();
    x[i] = (rng_next() & 1) ? m : -m;
  }
}
static double dot_loss(const float* out, const float* R, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)out[i] * R[i];
  return s;
}
static double max_abs(const float* x, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
  return m;
}

typedef double (*LossFn)(void* ud);

// Compares grad[i] with the central difference of f in param[i], for all elements or a
// random subset of max_samples. One EXPECT per tensor, reporting the worst element.
static void fd_check(const char* name, float* param, size_t n, const float* grad, LossFn f,
                     void* ud, int max_samples, float h) {
  const double tol = 1e-2;
  double floor_ = fmax(1e-2 * max_abs(grad, n), 1e-6);
  double worst = 0.0, wfd = 0.0, wan = 0.0;
  size_t widx = 0;
  int ns = n <= (size_t)max_samples ? (int)n : max_samples;
  for (int s = 0; s < ns; s++) {
    size_t i = n <= (size_t)max_samples ? (size_t)s : (size_t)(rng_next() % n);
    float x0 = param[i];
    param[i] = x0 + h;
    double hp = (double)param[i] - x0;
    double lp = f(ud);
    param[i] = x0 - h;
    double hm = x0 - (double)param[i];
    double lm = f(ud);
    param[i] = x0;
    double fd = (lp - lm) / (hp + hm);
    double e = rel_err(fd, grad[i], floor_);
    if (e > worst || s == 0) {
      worst = e;
      wfd = fd;
      wan = grad[i];
      widx = i;
    }
  }
  f(ud);  // leave the case's forward outputs as they are at the unperturbed point
  EXPECT(name, worst < tol, "worst rel err %.3e at %zu: fd %.6e analytic %.6e", worst, widx,
         wfd, wan);
}

// Largest relative error of float results against double references.
static double max_rel_err(const float* a, const double* b, size_t n, double floor_) {
  double w = 0.0;
  for (size_t i = 0; i < n; i++) w = fmax(w, rel_err(a[i], b[i], floor_));
  return w;
}

// ---- embedding ----------------------------------------------------------------------

typedef struct {
  float *out, *wte, *wpe, *R;
  int32_t* tok;
  int N, T, C;
} EmbCase;
static double emb_loss(void* p) {
  EmbCase* e = p;
  embedding_forward(NULL, e->out, e->tok, e->wte, e->wpe, e->N, e->T, e->C);
  return dot_loss(e->out, e->R, (size_t)e->N * e->C);
}

static void test_embedding(int use_wpe) {
  const int N = 12, T = 4, C = 10, Vv = 7;
  int32_t tok[12];
  for (int n = 0; n < N; n++) tok[n] = (n * 5) % 4;  // ids 0..3, each repeated 3 times
  tok[7] = 6;
  float *wte = falloc(Vv * C), *wpe = use_wpe ? falloc(T * C) : NULL, *out = falloc(N * C),
        *R = falloc(N * C), *dwte = falloc(Vv * C), *dwpe = use_wpe ? falloc(T * C) : NULL;
  fill_rand(wte, Vv * C, 1.0f);
  if (wpe) fill_rand(wpe, T * C, 1.0f);
  fill_R(R, N * C);
  EmbCase e = {out, wte, wpe, R, tok, N, T, C};
  emb_loss(&e);
  int ok = 1;
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      float ref = wte[tok[n] * C + c] + (wpe ? wpe[(n % T) * C + c] : 0.0f);
      ok &= out[n * C + c] == ref;
    }
  EXPECT(use_wpe ? "embedding_forward wte+wpe" : "embedding_forward wte only", ok, "mismatch");
  embedding_backward(NULL, dwte, dwpe, R, tok, N, T, C);
  int untouched = 1;  // ids 4, 5 never occur: their rows must stay zero
  for (int c = 0; c < C; c++) untouched &= dwte[4 * C + c] == 0.0f && dwte[5 * C + c] == 0.0f;
  EXPECT("embedding_backward unused ids untouched", untouched, "nonzero");
  fd_check(use_wpe ? "embedding_backward dwte (wpe)" : "embedding_backward dwte (no wpe)", wte,
           Vv * C, dwte, emb_loss, &e, 1000, 1e-2f);
  if (wpe) fd_check("embedding_backward dwpe", wpe, T * C, dwpe, emb_loss, &e, 1000, 1e-2f);
  free(wte), free(wpe), free(out), free(R), free(dwte), free(dwpe);
}

// ---- normalization ------------------------------------------------------------------

typedef struct {
  int rms, residual;
  float *a, *b, *res, *x, *w, *bias, *out, *mean, *rstd, *R;
  int N, C;
  float eps;
} NormCase;
// Forward of the selected norm; for the residual variants x is ignored and a + b is normed.
static double norm_loss(void* p) {
  NormCase* t = p;
  if (t->rms && t->residual)
    residual_rmsnorm_forward(NULL, t->res, t->out, t->rstd, t->a, t->b, t->w, t->N, t->C,
                             t->eps);
  else if (t->rms)
    rmsnorm_forward(NULL, t->out, t->rstd, t->x, t->w, t->N, t->C, t->eps);
  else if (t->residual)
    residual_layernorm_forward(NULL, t->res, t->out, t->mean, t->rstd, t->a, t->b, t->w,
                               t->bias, t->N, t->C, t->eps);
  else
    layernorm_forward(NULL, t->out, t->mean, t->rstd, t->x, t->w, t->bias, t->N, t->C, t->eps);
  return dot_loss(t->out, t->R, (size_t)t->N * t->C);
}

static void test_norm(int rms) {
  const int N = 5, C = 13;
  const size_t NC = (size_t)N * C;
  const char* nm = rms ? "rmsnorm" : "layernorm";
  char label[128];
  NormCase t = {.rms = rms, .N = N, .C = C, .eps = 1e-5f};
  t.x = falloc(NC), t.w = falloc(C), t.bias = falloc(C), t.out = falloc(NC), t.mean = falloc(N);
  t.rstd = falloc(N), t.R = falloc(NC);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) t.x[n * C + c] = 0.5f * n - 0.7f + 1.5f * srand1();
  for (int c = 0; c < C; c++) t.w[c] = 1.0f + 0.5f * srand1(), t.bias[c] = 0.3f * srand1();
  fill_R(t.R, NC);
  norm_loss(&t);

  // forward statistics and outputs against double
  double werr = 0.0;
  for (int n = 0; n < N; n++) {
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; c++) m += t.x[n * C + c];
    m /= C;
    if (rms) m = 0.0;
    for (int c = 0; c < C; c++) v += (t.x[n * C + c] - m) * (t.x[n * C + c] - m);
    double r = 1.0 / sqrt(v / C + t.eps);
    if (!rms) werr = fmax(werr, rel_err(t.mean[n], m, 1e-3));
    werr = fmax(werr, rel_err(t.rstd[n], r, 1e-3));
    for (int c = 0; c < C; c++) {
      double o = (t.x[n * C + c] - m) * r * t.w[c] + (rms ? 0.0 : t.bias[c]);
      werr = fmax(werr, rel_err(t.out[n * C + c], o, 1e-3));
    }
  }
  snprintf(label, sizeof label, "%s_forward vs double", nm);
  EXPECT(label, werr < 1e-5, "rel err %.3e", werr);

  float *dx = falloc(NC), *dw = falloc(C), *db = falloc(C);
  if (rms)
    rmsnorm_backward(NULL, dx, dw, t.R, t.x, t.w, t.rstd, N, C);
  else
    layernorm_backward(NULL, dx, dw, db, t.R, t.x, t.w, t.mean, t.rstd, N, C);
  snprintf(label, sizeof label, "%s_backward dx", nm);
  fd_check(label, t.x, NC, dx, norm_loss, &t, 1000, 1e-2f);
  snprintf(label, sizeof label, "%s_backward dweight", nm);
  fd_check(label, t.w, C, dw, norm_loss, &t, 1000, 1e-2f);
  if (!rms) fd_check("layernorm_backward dbias", t.bias, C, db, norm_loss, &t, 1000, 1e-2f);

  // Accumulation: with dx, dweight, dbias prefilled, each result must be prefill + gradient.
  float *dx2 = falloc(NC), *dw2 = falloc(C), *db2 = falloc(C);
  fill_rand(dx2, NC, 1.0f), fill_rand(dw2, C, 1.0f), fill_rand(db2, C, 1.0f);
  float *dx0 = falloc(NC), *dw0 = falloc(C), *db0 = falloc(C);
  memcpy(dx0, dx2, NC * 4), memcpy(dw0, dw2, C * 4), memcpy(db0, db2, C * 4);
  if (rms)
    rmsnorm_backward(NULL, dx2, dw2, t.R, t.x, t.w, t.rstd, N, C);
  else
    layernorm_backward(NULL, dx2, dw2, db2, t.R, t.x, t.w, t.mean, t.rstd, N, C);
  int acc_ok = 1;
  for (size_t i = 0; i < NC; i++) acc_ok &= dx2[i] == dx0[i] + dx[i];
  for (int c = 0; c < C; c++) acc_ok &= dw2[c] == dw0[c] + dw[c];
  if (!rms)
    for (int c = 0; c < C; c++) acc_ok &= db2[c] == db0[c] + db[c];
  snprintf(label, sizeof label, "%s_backward accumulates (+=)", nm);
  EXPECT(label, acc_ok, "prefilled result != prefill + gradient");
  if (!rms) {  // dbias == NULL is allowed
    float* dw3 = falloc(C);
    float* dx3 = falloc(NC);
    layernorm_backward(NULL, dx3, dw3, NULL, t.R, t.x, t.w, t.mean, t.rstd, N, C);
    EXPECT("layernorm_backward dbias NULL", !memcmp(dw3, dw, C * 4) && !memcmp(dx3, dx, NC * 4),
           "results differ");
    free(dw3), free(dx3);
  }

  // Fused residual variant: residual == a + b exactly, out == norm(residual) exactly, and
  // both a and b receive the norm's input gradient.
  t.residual = 1;
  t.a = falloc(NC), t.b = falloc(NC), t.res = falloc(NC);
  for (size_t i = 0; i < NC; i++) t.a[i] = t.x[i] - 0.25f, t.b[i] = 0.25f + 0.3f * srand1();
  norm_loss(&t);
  float *out_f = falloc(NC), *mean_f = falloc(N), *rstd_f = falloc(N);
  int exact = 1;
  for (size_t i = 0; i < NC; i++) exact &= t.res[i] == t.a[i] + t.b[i];
  if (rms)
    rmsnorm_forward(NULL, out_f, rstd_f, t.res, t.w, N, C, t.eps);
  else
    layernorm_forward(NULL, out_f, mean_f, rstd_f, t.res, t.w, t.bias, N, C, t.eps);
  exact &= !memcmp(out_f, t.out, NC * 4) && !memcmp(rstd_f, t.rstd, N * 4);
  if (!rms) exact &= !memcmp(mean_f, t.mean, N * 4);
  snprintf(label, sizeof label, "residual_%s_forward == add + %s", nm, nm);
  EXPECT(label, exact, "mismatch");
  memset(dx, 0, NC * 4), memset(dw, 0, C * 4), memset(db, 0, C * 4);
  if (rms)
    rmsnorm_backward(NULL, dx, dw, t.R, t.res, t.w, t.rstd, N, C);
  else
    layernorm_backward(NULL, dx, dw, db, t.R, t.res, t.w, t.mean, t.rstd, N, C);
  snprintf(label, sizeof label, "residual_%s d/da", nm);
  fd_check(label, t.a, NC, dx, norm_loss, &t, 1000, 1e-2f);
  snprintf(label, sizeof label, "residual_%s d/db", nm);
  fd_check(label, t.b, NC, dx, norm_loss, &t, 1000, 1e-2f);

  free(t.x), free(t.w), free(t.bias), free(t.out), free(t.mean), free(t.rstd), free(t.R);
  free(t.a), free(t.b), free(t.res), free(dx), free(dw), free(db), free(dx2), free(dw2);
  free(db2), free(dx0), free(dw0), free(db0), free(out_f), free(mean_f), free(rstd_f);
}

// ---- matmul -------------------------------------------------------------------------

typedef struct {
  float *out, *inp, *w, *bias, *R;
  int N, C, OC;
} MMCase;
static double mm_loss(void* p) {
  MMCase* m = p;
  matmul_forward(NULL, m->out, m->inp, m->w, m->bias, m->N, m->C, m->OC);
  return dot_loss(m->out, m->R, (size_t)m->N * m->OC);
}

static void test_matmul(int N, int C, int OC, int use_bias) {
  char label[160], tag[64];
  snprintf(tag, sizeof tag, "N=%d C=%d OC=%d %s", N, C, OC, use_bias ? "bias" : "no bias");
  MMCase m = {falloc((size_t)N * OC), falloc((size_t)N * C), falloc((size_t)OC * C),
              use_bias ? falloc(OC) : NULL, falloc((size_t)N * OC), N, C, OC};
  fill_rand(m.inp, (size_t)N * C, 1.0f);
  fill_rand(m.w, (size_t)OC * C, 0.5f);
  if (m.bias) fill_rand(m.bias, OC, 0.5f);
  fill_R(m.R, (size_t)N * OC);
  mm_loss(&m);
  double* ref = calloc((size_t)N * OC, sizeof(double));
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = m.bias ? m.bias[o] : 0.0;
      for (int c = 0; c < C; c++) s += (double)m.inp[n * C + c] * m.w[o * C + c];
      ref[n * OC + o] = s;
    }
  double e = max_rel_err(m.out, ref, (size_t)N * OC, 1.0);
  snprintf(label, sizeof label, "matmul_forward vs double (%s)", tag);
  EXPECT(label, e < 1e-5, "rel err %.3e", e);

  float *dinp = falloc((size_t)N * C), *dw = falloc((size_t)OC * C), *db = falloc(OC);
  matmul_backward(NULL, dinp, dw, use_bias ? db : NULL, m.R, m.inp, m.w, N, C, OC);
  snprintf(label, sizeof label, "matmul_backward dinp (%s)", tag);
  fd_check(label, m.inp, (size_t)N * C, dinp, mm_loss, &m, 60, 1e-2f);
  snprintf(label, sizeof label, "matmul_backward dweight (%s)", tag);
  fd_check(label, m.w, (size_t)OC * C, dw, mm_loss, &m, 60, 1e-2f);
  if (use_bias) {
    snprintf(label, sizeof label, "matmul_backward dbias (%s)", tag);
    fd_check(label, m.bias, OC, db, mm_loss, &m, 60, 1e-2f);
  }
  // dinp == NULL skips the input gradient; dweight/dbias accumulate on top of a prefill.
  float *dw2 = falloc((size_t)OC * C), *db2 = falloc(OC), *dw0 = falloc((size_t)OC * C);
  float* db0 = falloc(OC);
  fill_rand(dw2, (size_t)OC * C, 1.0f), fill_rand(db2, OC, 1.0f);
  memcpy(dw0, dw2, (size_t)OC * C * 4), memcpy(db0, db2, OC * 4);
  matmul_backward(NULL, NULL, dw2, use_bias ? db2 : NULL, m.R, m.inp, m.w, N, C, OC);
  int ok = 1;
  for (size_t i = 0; i < (size_t)OC * C; i++) ok &= dw2[i] == dw0[i] + dw[i];
  for (int o = 0; o < OC; o++) ok &= db2[o] == (use_bias ? db0[o] + db[o] : db0[o]);
  snprintf(label, sizeof label, "matmul_backward accumulates, dinp NULL (%s)", tag);
  EXPECT(label, ok, "prefilled result != prefill + gradient");

  // The summation orders matmul.c states, one output at a time, bit for bit: the forward's 16
  // lanes (lane l takes c = l, l + 16, ... by fmaf), their fixed tree, then the bias; the
  // gradients' chains of fmaf over k from 0 in increasing k, added to what dweight held.
  float* out = falloc((size_t)N * OC);
  matmul_forward(NULL, out, m.inp, m.w, m.bias, N, C, OC);
  float* dw3 = falloc((size_t)OC * C);
  memcpy(dw3, dw0, (size_t)OC * C * 4);
  matmul_backward(NULL, dinp, dw3, NULL, m.R, m.inp, m.w, N, C, OC);
  size_t bad_f = 0, bad_i = 0, bad_w = 0;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      float lane[16] = {0};
      for (int c = 0; c < C; c++) lane[c % 16] = fmaf(m.inp[n * C + c], m.w[o * C + c], lane[c % 16]);
      for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; l++) lane[l] += lane[l + h];
      float want = m.bias ? lane[0] + m.bias[o] : lane[0];
      bad_f += memcmp(&want, &out[n * OC + o], 4) != 0;
    }
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      float s = 0.0f;
      for (int o = 0; o < OC; o++) s = fmaf(m.R[n * OC + o], m.w[o * C + c], s);
      bad_i += memcmp(&s, &dinp[n * C + c], 4) != 0;
    }
  for (int o = 0; o < OC; o++)
    for (int c = 0; c < C; c++) {
      float s = 0.0f;
      for (int n = 0; n < N; n++) s = fmaf(m.R[n * OC + o], m.inp[n * C + c], s);
      float want = dw0[o * C + c] + s;
      bad_w += memcmp(&want, &dw3[o * C + c], 4) != 0;
    }
  snprintf(label, sizeof label, "matmul orders, bit for bit: forward lanes, dinp and dweight chains (%s)", tag);
  EXPECT(label, bad_f + bad_i + bad_w == 0, "%zu forward, %zu dinp, %zu dweight outputs differ", bad_f, bad_i, bad_w);
  free(out), free(dw3);
  free(m.out), free(m.inp), free(m.w), free(m.bias), free(m.R), free(ref), free(dinp);
  free(dw), free(db), free(dw2), free(db2), free(dw0), free(db0);
}

// ---- activations --------------------------------------------------------------------

typedef struct {
  int kind;  // 0 gelu, 1 relu, 2 geglu, 3 swiglu
  float *out, *x, *R;
  int N, F;  // elementwise kinds use n = N*F
} ActCase;
static double act_loss(void* p) {
  ActCase* a = p;
  size_t n = (size_t)a->N * a->F;
  if (a->kind == 0) gelu_forward(NULL, a->out, a->x, n);
  if (a->kind == 1) relu_forward(NULL, a->out, a->x, n);
  if (a->kind == 2) geglu_forward(NULL, a->out, a->x, a->N, a->F);
  if (a->kind == 3) swiglu_forward(NULL, a->out, a->x, a->N, a->F);
  return dot_loss(a->out, a->R, n);
}
static double gelu_ref(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double silu_ref(double x) { return x / (1.0 + exp(-x)); }
static double silu_grad_ref(double x) {
  double s = 1.0 / (1.0 + exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

static void test_activations(void) {
  const int N = 4, F = 13;
  const size_t n = (size_t)N * F;
  ActCase a = {0, falloc(2 * n), falloc(2 * n), falloc(n), N, F};
  fill_rand(a.x, 2 * n, 3.0f);
  fill_R(a.R, n);
  float* dx = falloc(2 * n);

  // GELU
  act_loss(&a);
  double e = 0.0;
  for (size_t i = 0; i < n; i++) e = fmax(e, rel_err(a.out[i], gelu_ref(a.x[i]), 1e-3));
  EXPECT("gelu_forward vs double tanh formula", e < 1e-5, "rel err %.3e", e);
  float* xin = falloc(n);
  memcpy(xin, a.x, n * 4);
  gelu_forward(NULL, xin, xin, n);
  EXPECT("gelu_forward in place", !memcmp(xin, a.out, n * 4), "differs");
  gelu_backward(NULL, dx, a.x, a.R, n);
  fd_check("gelu_backward", a.x, n, dx, act_loss, &a, 1000, 1e-3f);
  float* dio = falloc(n);
  memcpy(dio, a.R, n * 4);
  gelu_backward(NULL, dio, a.x, dio, n);
  EXPECT("gelu_backward in place", !memcmp(dio, dx, n * 4), "differs");

  // ReLU: keep inputs at least 0.05 away from the kink so h = 1e-3 never crosses it.
  a.kind = 1;
  for (size_t i = 0; i < n; i++) a.x[i] = (a.x[i] >= 0 ? 0.05f : -0.05f) + a.x[i];
  act_loss(&a);
  int ok = 1;
  for (size_t i = 0; i < n; i++) ok &= a.out[i] == (a.x[i] > 0 ? a.x[i] : 0.0f);
  EXPECT("relu_forward", ok, "mismatch");
  relu_backward(NULL, dx, a.x, a.R, n);
  fd_check("relu_backward", a.x, n, dx, act_loss, &a, 1000, 1e-3f);

  // GEGLU over rows of [gate | up]
  a.kind = 2;
  fill_rand(a.x, 2 * n, 2.0f);
  act_loss(&a);
  e = 0.0;
  for (int r = 0; r < N; r++)
    for (int i = 0; i < F; i++)
      e = fmax(e, rel_err(a.out[r * F + i],
                          gelu_ref(a.x[r * 2 * F + i]) * a.x[r * 2 * F + F + i], 1e-3));
  EXPECT("geglu_forward vs double", e < 1e-5, "rel err %.3e", e);
  geglu_backward(NULL, dx, a.x, a.R, N, F);
  fd_check("geglu_backward (gate and up halves)", a.x, 2 * n, dx, act_loss, &a, 1000, 1e-3f);

  // SwiGLU over rows of [gate | up]
  a.kind = 3;
  fill_rand(a.x, 2 * n, 4.0f);
  act_loss(&a);
  e = 0.0;
  for (int r = 0; r < N; r++)
    for (int i = 0; i < F; i++)
      e = fmax(e, rel_err(a.out[r * F + i], silu_ref(a.x[r * 2 * F + i]) * a.x[r * 2 * F + F + i], 1e-3));
  EXPECT("swiglu_forward vs double", e < 1e-5, "rel err %.3e", e);
  swiglu_backward(NULL, dx, a.x, a.R, N, F);
  fd_check("swiglu_backward (gate and up halves)", a.x, 2 * n, dx, act_loss, &a, 1000, 1e-3f);
  free(a.out), free(a.x), free(a.R), free(dx), free(xin), free(dio);
}

// GELU over a dense sweep of [-20, 20], against double: bounds the error of the kernels' own
// vectorizable tanh (activation.c's gelu_s and exp_lanes; libm's tanhf gives 1.1e-7 forward,
// 5.5e-7 backward by this measure). The error is relative to max(|ref|, 1).
static double gelu_grad_ref(double x) {
  double k = sqrt(2.0 / M_PI), t = tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
static void test_gelu_accuracy(void) {
  const size_t n = 40 * 1024 + 1;
  float *x = falloc(n), *y = falloc(n), *ones = falloc(n), *dy = falloc(n);
  for (size_t i = 0; i < n; i++) x[i] = -20.0f + (float)i / 1024.0f, ones[i] = 1.0f;
  gelu_forward(NULL, y, x, n);
  gelu_backward(NULL, dy, x, ones, n);
  double ef = 0.0, eb = 0.0;
  for (size_t i = 0; i < n; i++) {
    double rf = gelu_ref(x[i]), rb = gelu_grad_ref(x[i]);
    ef = fmax(ef, fabs(y[i] - rf) / fmax(fabs(rf), 1.0));
    eb = fmax(eb, fabs(dy[i] - rb) / fmax(fabs(rb), 1.0));
  }
  EXPECT("gelu_forward over [-20, 20] vs double", ef < 3e-7, "max err %.3e (bound 3e-7)", ef);
  EXPECT("gelu_backward over [-20, 20] vs double", eb < 3e-7, "max err %.3e (bound 3e-7)", eb);
  printf("     gelu sweep: max error forward %.2e, backward %.2e\n", ef, eb);
  free(x), free(y), free(ones), free(dy);
}

// NaN and infinities through the activations: a NaN stays NaN (the step's guard then skips the
// step) and reaches no undefined arithmetic on the way: gelu's clamp once let a NaN through to a
// float-to-int conversion and a shift of a negative int (found by the sanitizer build, which
// runs this case in the fuzz part).
static void test_activations_nonfinite(void) {
  const int F = 3, N = 2;
  float x[2 * 3 * 2], out[12], dout[12], dx[12];
  float special[4] = {NAN, INFINITY, -INFINITY, -NAN};
  for (int i = 0; i < 12; i++) x[i] = special[i % 4], dout[i] = 1.0f;
  gelu_forward(NULL, out, x, 12);
  gelu_backward(NULL, dx, x, dout, 12);
  int bad = 0;
  for (int i = 0; i < 12; i++) bad += isnan(x[i]) && (!isnan(out[i]) || !isnan(dx[i]));
  geglu_forward(NULL, out, x, N, F);
  geglu_backward(NULL, dx, x, dout, N, F);
  EXPECT("non-finite input: gelu and its gradient of NaN are NaN, geglu runs, no undefined behaviour", bad == 0,
         "%d NaN inputs gave a finite gelu or gradient", bad);
  // SwiGLU's SiLU clamps its exponential the same way.
  swiglu_forward(NULL, out, x, N, F);
  swiglu_backward(NULL, dx, x, dout, N, F);
  bad = 0;
  for (int n = 0; n < N; n++)
    for (int f = 0; f < F; f++) bad += isnan(x[n * 2 * F + f]) && !isnan(out[n * F + f]);
  EXPECT("non-finite input: swiglu of a NaN gate is NaN, its gradient runs, no undefined behaviour", bad == 0,
         "%d NaN gates gave a finite swiglu", bad);
}

// SwiGLU's SiLU over a dense sweep of [-100, 100] (past the clamp of its exponential, both
// ways), against double, with up = 1 and dout = 1: the forward is silu, the gate's gradient
// silu' and the up half's gradient silu again. The error is relative to max(|ref|, 1).
static void test_silu_accuracy(void) {
  const int n = 200 * 256 + 1;
  float *x = falloc(2 * (size_t)n), *y = falloc(n), *ones = falloc(n), *dx = falloc(2 * (size_t)n);
  for (int i = 0; i < n; i++) x[i] = -100.0f + (float)i / 256.0f, x[n + i] = 1.0f, ones[i] = 1.0f;
  // One row of F = n: gate x[0, n), up x[n, 2n).
  swiglu_forward(NULL, y, x, 1, n);
  swiglu_backward(NULL, dx, x, ones, 1, n);
  double ef = 0.0, eb = 0.0, eu = 0.0;
  for (int i = 0; i < n; i++) {
    ef = fmax(ef, fabs(y[i] - silu_ref(x[i])) / fmax(fabs(silu_ref(x[i])), 1.0));
    eb = fmax(eb, fabs(dx[i] - silu_grad_ref(x[i])) / fmax(fabs(silu_grad_ref(x[i])), 1.0));
    eu = fmax(eu, fabs(dx[n + i] - silu_ref(x[i])) / fmax(fabs(silu_ref(x[i])), 1.0));
  }
  EXPECT("swiglu silu over [-100, 100] vs double", ef < 3e-7, "max err %.3e (bound 3e-7)", ef);
  EXPECT("swiglu silu' over [-100, 100] vs double", eb < 3e-7 && eu < 3e-7, "max err gate %.3e up %.3e (bound 3e-7)",
         eb, eu);
  printf("     silu sweep: max error forward %.2e, backward %.2e\n", ef, eb);
  free(x), free(y), free(ones), free(dx);
}

// ---- rotary position embeddings -------------------------------------------------------

// The frequencies written out as transformers' _compute_llama3_parameters computes them, in
// double: an independent reading of the same rule (kernels/rope.h).
static double rope_freq_ref(RopeConfig r, int i, int D) {
  double f = 1.0 / pow(r.theta, 2.0 * i / D);
  if (r.factor <= 0) return f;
  double wavelen = 2 * M_PI / f, low_wavelen = r.original_context / r.low_freq_factor,
         high_wavelen = r.original_context / r.high_freq_factor;
  double scaled = wavelen > low_wavelen ? f / r.factor : f;
  double smooth = (r.original_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  double smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
  int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
  return medium ? smoothed : scaled;
}

typedef struct {
  RopeConfig r;
  float *x, *y, *R;
  int N, T, heads, D, stride;
} RopeCase;
static double rope_loss(void* p) {
  RopeCase* c = p;
  size_t n = (size_t)c->N * c->stride;
  memcpy(c->y, c->x, n * sizeof(float));
  rope_forward(NULL, c->y, c->r, c->N, c->T, c->heads, c->D, c->stride);
  return dot_loss(c->y, c->R, n);
}

// Rows of `stride` columns with `heads` rotated heads first and other columns after (a fused
// qkv row's v part), T not dividing into anything round.
static void test_rope(const char* name, RopeConfig r, int N, int T, int heads, int D, int stride) {
  char label[160];
  size_t n = (size_t)N * stride;
  RopeCase c = {r, falloc(n), falloc(n), falloc(n), N, T, heads, D, stride};
  fill_rand(c.x, n, 1.0f);
  fill_R(c.R, n);
  rope_loss(&c);
  // Against double: the angle (t f) and the rotation in double, from frequencies and angles the
  // float computation rounds the way the kernel does.
  double e = 0.0;
  int others_kept = 1, half = D / 2;
  for (int row = 0; row < N; row++) {
    int t = row % T;
    for (int col = heads * D; col < stride; col++) others_kept &= c.y[(size_t)row * stride + col] == c.x[(size_t)row * stride + col];
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < half; i++) {
        double angle = (double)(float)((float)t * (float)rope_freq_ref(r, i, D));
        const float* a = c.x + (size_t)row * stride + h * D;
        double ra = a[i] * cos(angle) - a[i + half] * sin(angle), rb = a[i + half] * cos(angle) + a[i] * sin(angle);
        const float* y = c.y + (size_t)row * stride + h * D;
        e = fmax(e, fmax(fabs(y[i] - ra), fabs(y[i + half] - rb)));
      }
  }
  snprintf(label, sizeof label, "rope_forward vs double, %s", name);
  EXPECT(label, e < 1e-6, "max abs err %.3e", e);
  snprintf(label, sizeof label, "rope_forward leaves the other columns, %s", name);
  EXPECT(label, others_kept, "a column past the rotated heads changed");
  // The backward turns the loss weights back: with dy = R, dx = R rotated by -t.
  float* dx = falloc(n);
  memcpy(dx, c.R, n * sizeof(float));
  rope_backward(NULL, dx, r, N, T, heads, D, stride);
  snprintf(label, sizeof label, "rope_backward, %s", name);
  fd_check(label, c.x, n, dx, rope_loss, &c, 400, 1e-2f);
  // Forward then backward is the identity up to rounding (a rotation and its inverse).
  float* z = falloc(n);
  memcpy(z, c.x, n * sizeof(float));
  rope_forward(NULL, z, r, N, T, heads, D, stride);
  rope_backward(NULL, z, r, N, T, heads, D, stride);
  double w = 0.0;
  for (size_t i = 0; i < n; i++) w = fmax(w, fabs(z[i] - c.x[i]));
  snprintf(label, sizeof label, "rope_backward undoes rope_forward, %s", name);
  EXPECT(label, w < 1e-6, "max abs err %.3e", w);
  free(c.x), free(c.y), free(c.R), free(dx), free(z);
}

// Llama 3.1's scaling: the three kinds of pair (kept, slowed by the factor, blended) all occur
// for D = 128, theta 500000 and an original context of 8192; the kernels' frequencies against
// the reference's, pair by pair, with the kind each falls in counted.
static void test_rope_frequencies(void) {
  RopeConfig r = {.theta = 500000.0f, .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                  .original_context = 8192};
  float f[64];
  rope_frequencies(r, 128, f);
  double e = 0.0;
  int kept = 0, slowed = 0, blended = 0;
  for (int i = 0; i < 64; i++) {
    double plain = 1.0 / pow(500000.0, 2.0 * i / 128), ref = rope_freq_ref(r, i, 128);
    e = fmax(e, fabs(f[i] - ref) / ref);
    if (fabs(ref - plain) <= 1e-12 * plain) kept++;
    else if (fabs(ref - plain / 8) <= 1e-12 * plain) slowed++;
    else blended++;
  }
  EXPECT("rope_frequencies Llama 3.1 scaling vs reference", e < 1e-7, "max rel err %.3e", e);
  EXPECT("rope_frequencies Llama 3.1 scaling has kept, slowed and blended pairs", kept && slowed && blended,
         "kept %d slowed %d blended %d", kept, slowed, blended);
  RopeConfig plain = {.theta = 10000.0f};
  rope_frequencies(plain, 8, f);
  EXPECT("rope_frequencies without scaling", f[0] == 1.0f && fabs(f[3] - 1.0 / pow(10000.0, 0.75)) < 1e-9,
         "f0 %g f3 %g", f[0], f[3]);
}

// ---- attention ----------------------------------------------------------------------

typedef struct {
  AttnShape s;
  AttnBias bias;  // bias.table: [num_buckets, H] (a float* here)
  float *q, *k, *v, *table, *out, *lse, *R;
} AttnCase;
static double attn_loss(void* p) {
  AttnCase* a = p;
  attention_forward(NULL, a->out, a->lse, a->q, a->k, a->v, a->bias, a->s);
  return dot_loss(a->out, a->R, (size_t)a->s.B * a->s.Tq * a->s.H * a->s.D);
}

// Naive double softmax(scale QK^T + bias) V with the mask, for out and lse.
static void attn_reference(const AttnCase* a, double* out, double* lse) {
  AttnShape s = a->s;
  int C = s.H * s.D, G = s.H / attn_kv_heads(s);
  double* sc = calloc(s.Tk, sizeof(double));
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.H; h++)
      for (int i = 0; i < s.Tq; i++) {
        double mx = -INFINITY;
        for (int j = 0; j < s.Tk; j++) {
          if (s.causal && j > i) continue;
          double d = 0.0;
          for (int c = 0; c < s.D; c++)
            d += (double)a->q[(size_t)(b * s.Tq + i) * s.q_stride + h * s.D + c] *
                 a->k[(size_t)(b * s.Tk + j) * s.kv_stride + h / G * s.D + c];
          double pb = 0.0;
          if (a->table)
            pb = a->table[(size_t)relative_position_bucket(j - i, a->bias.bidirectional, a->bias.num_buckets,
                                                           a->bias.max_distance) * s.H + h];
          sc[j] = s.scale * d + pb;
          mx = fmax(mx, sc[j]);
        }
        double sum = 0.0;
        for (int j = 0; j < s.Tk; j++)
          if (!(s.causal && j > i)) sum += exp(sc[j] - mx);
        lse[((size_t)b * s.H + h) * s.Tq + i] = mx + log(sum);
        for (int c = 0; c < s.D; c++) {
          double o = 0.0;
          for (int j = 0; j < s.Tk; j++)
            if (!(s.causal && j > i))
              o += exp(sc[j] - mx) / sum * a->v[(size_t)(b * s.Tk + j) * s.kv_stride + h / G * s.D + c];
          out[(size_t)(b * s.Tq + i) * C + h * s.D + c] = o;
        }
      }
  free(sc);
}

// Runs forward-vs-reference and finite differences for one attention configuration.
// fused: q, k, v are the column blocks of one [B*T, (H + 2 KV) D] buffer (GPT, Llama), checked as
// one tensor. KV key/value heads (grouped-query attention), dividing H.
// kv_pad extra columns per k/v row (separate buffers) must never be written by the backward.
// use_bias: a position-bias table of few buckets and a short max_distance, so these short
// sequences reach the log-spaced buckets and the last one (positions past max_distance):
// bidirectional 8 buckets (exact below 2), one-directional (causal) 5 (exact below 2), both
// with max_distance 4.
static void test_attention(const char* name, int B, int Tq, int Tk, int H, int D, int causal,
                           int use_bias, int fused, int kv_pad, int KV) {
  char label[160];
  int C = H * D, Ck = KV * D;
  AttnShape s = {B, Tq, Tk, H, D, C, Ck + kv_pad, use_bias ? 1.0f : 1.0f / sqrtf((float)D),
                 causal, KV};
  AttnCase a = {.s = s};
  float *qkv = NULL, *dqkv = NULL, *dq, *dk, *dv;
  size_t nq, nkv;
  if (fused) {  // Tq == Tk; q at column 0, k at C, v at C + Ck of rows of C + 2 Ck
    a.s.q_stride = a.s.kv_stride = C + 2 * Ck;
    nq = nkv = (size_t)B * Tq * (C + 2 * Ck);
    qkv = falloc(nq), dqkv = falloc(nq);
    fill_rand(qkv, nq, 1.0f);
    a.q = qkv, a.k = qkv + C, a.v = qkv + C + Ck;
    dq = dqkv, dk = dqkv + C, dv = dqkv + C + Ck;
    for (size_t i = 0; i < nq; i++) dqkv[i] = NAN;  // every column must be written
  } else {
    nq = (size_t)B * Tq * C, nkv = (size_t)B * Tk * a.s.kv_stride;
    a.q = falloc(nq), a.k = falloc(nkv), a.v = falloc(nkv);
    fill_rand(a.q, nq, 1.0f), fill_rand(a.k, nkv, 1.0f), fill_rand(a.v, nkv, 1.0f);
    dq = falloc(nq), dk = falloc(nkv), dv = falloc(nkv);
    for (size_t i = 0; i < nkv; i++) dk[i] = dv[i] = 7.0f;  // sentinel for padding columns
  }
  size_t nout = (size_t)B * Tq * C;
  int nbuckets = causal ? 5 : 8;
  size_t nbias = (size_t)nbuckets * H;
  float* dbias = NULL;
  if (use_bias) {
    a.table = falloc(nbias), dbias = falloc(nbias);
    fill_rand(a.table, nbias, 1.0f);
    a.bias = (AttnBias){.table = a.table, .num_buckets = nbuckets, .max_distance = 4, .bidirectional = !causal};
  }
  a.out = falloc(nout), a.lse = falloc((size_t)B * H * Tq), a.R = falloc(nout);
  fill_R(a.R, nout);
  attn_loss(&a);

  double *rout = calloc(nout, sizeof(double)), *rlse = calloc((size_t)B * H * Tq, sizeof(double));
  attn_reference(&a, rout, rlse);
  double eo = max_rel_err(a.out, rout, nout, 1e-1);
  double el = max_rel_err(a.lse, rlse, (size_t)B * H * Tq, 1.0);
  snprintf(label, sizeof label, "attention_forward vs double softmax(QK^T)V, %s", name);
  EXPECT(label, eo < 1e-5 && el < 1e-5, "out rel err %.3e lse rel err %.3e", eo, el);

  attention_backward(NULL, dq, dk, dv, dbias, a.R, a.out, a.lse, a.q, a.k, a.v, a.bias, a.s);
  if (fused) {
    int all = 1;
    for (size_t i = 0; i < nq; i++) all &= !isnan(dqkv[i]);
    snprintf(label, sizeof label, "attention_backward fills fused dqkv, %s", name);
    EXPECT(label, all, "some columns never written");
    snprintf(label, sizeof label, "attention_backward dqkv, %s", name);
    fd_check(label, qkv, nq, dqkv, attn_loss, &a, 150, 1e-2f);
  } else {
    int pad_ok = 1;
    for (int r = 0; r < B * Tk; r++)
      for (int c = Ck; c < Ck + kv_pad; c++)
        pad_ok &= dk[(size_t)r * a.s.kv_stride + c] == 7.0f &&
                  dv[(size_t)r * a.s.kv_stride + c] == 7.0f;
    if (kv_pad) {
      snprintf(label, sizeof label, "attention_backward leaves stride padding, %s", name);
      EXPECT(label, pad_ok, "padding columns written");
    }
    snprintf(label, sizeof label, "attention_backward dq, %s", name);
    fd_check(label, a.q, nq, dq, attn_loss, &a, 60, 1e-2f);
    // Padding columns of k/v influence nothing, so their true gradient is 0: clear the
    // sentinel and let the finite differences sample them too.
    for (int r = 0; r < B * Tk; r++)
      for (int c = Ck; c < Ck + kv_pad; c++)
        dk[(size_t)r * a.s.kv_stride + c] = dv[(size_t)r * a.s.kv_stride + c] = 0.0f;
    snprintf(label, sizeof label, "attention_backward dk, %s", name);
    fd_check(label, a.k, nkv, dk, attn_loss, &a, 60, 1e-2f);
    snprintf(label, sizeof label, "attention_backward dv, %s", name);
    fd_check(label, a.v, nkv, dv, attn_loss, &a, 60, 1e-2f);
  }
  if (use_bias) {
    snprintf(label, sizeof label, "attention_backward dtable, %s", name);
    fd_check(label, a.table, nbias, dbias, attn_loss, &a, 60, 1e-2f);
    // dtable accumulates: a second call adds the same gradient again.
    float* d1 = falloc(nbias);
    memcpy(d1, dbias, nbias * 4);
    attention_backward(NULL, dq, dk, dv, dbias, a.R, a.out, a.lse, a.q, a.k, a.v, a.bias, a.s);
    double w = 0.0;
    for (size_t i = 0; i < nbias; i++) w = fmax(w, rel_err(dbias[i], 2.0 * d1[i], 1e-3));
    snprintf(label, sizeof label, "attention_backward dtable accumulates, %s", name);
    EXPECT(label, w < 1e-5, "rel err %.3e", w);
    free(d1);
  }
  if (fused) {
    free(qkv), free(dqkv);
  } else {
    free(a.q), free(a.k), free(a.v), free(dq), free(dk), free(dv);
  }
  free(a.table), free(dbias), free(a.out), free(a.lse), free(a.R), free(rout), free(rlse);
}

// ---- classifier ---------------------------------------------------------------------

typedef struct {
  float *logits, *work, *losses;
  int32_t* tgt;
  int N, V, Vp;
  float dloss;
} ClsCase;
// L = dloss * sum of losses: the function whose gradient the kernel writes into logits.
static double cls_loss(void* p) {
  ClsCase* c = p;
  memcpy(c->work, c->logits, (size_t)c->N * c->Vp * 4);
  classifier_forward_backward(NULL, c->losses, c->work, c->tgt, c->N, c->V, c->Vp, &c->dloss);
  double s = 0.0;
  for (int n = 0; n < c->N; n++) s += c->losses[n];
  return s * c->dloss;
}

static void test_classifier(void) {
  const int N = 5, V = 11, Vp = 16;
  int32_t tgt[5] = {3, -1, 10, 0, 7};
  ClsCase c = {falloc(N * Vp), falloc(N * Vp), falloc(N), tgt, N, V, Vp, 0.37f};
  for (int n = 0; n < N; n++)
    for (int j = 0; j < Vp; j++) c.logits[n * Vp + j] = j < V ? 3.0f * srand1() : 1000.0f;
  c.logits[3 * Vp + 5] = 60.0f;  // a large logit: max subtraction must keep exp finite
  cls_loss(&c);
  float* grad = falloc(N * Vp);
  memcpy(grad, c.work, (size_t)N * Vp * 4);
  double e = 0.0;
  for (int n = 0; n < N; n++) {
    if (tgt[n] < 0) continue;
    double mx = -INFINITY, s = 0.0;
    for (int j = 0; j < V; j++) mx = fmax(mx, c.logits[n * Vp + j]);
    for (int j = 0; j < V; j++) s += exp(c.logits[n * Vp + j] - mx);
    e = fmax(e, rel_err(c.losses[n], mx + log(s) - c.logits[n * Vp + tgt[n]], 1e-3));
  }
  EXPECT("classifier loss vs double logsumexp", e < 1e-5, "rel err %.3e", e);
  int pad = 1, ign = c.losses[1] == 0.0f;
  for (int n = 0; n < N; n++)
    for (int j = V; j < Vp; j++) pad &= grad[n * Vp + j] == 0.0f;
  for (int j = 0; j < Vp; j++) ign &= grad[1 * Vp + j] == 0.0f;
  EXPECT("classifier padding columns get exactly 0", pad, "nonzero padding gradient");
  EXPECT("classifier ignored row: loss 0, zero gradient", ign, "nonzero");
  double rs = 0.0;  // a gradient row of softmax - onehot sums to 0
  for (int j = 0; j < V; j++) rs += grad[0 * Vp + j];
  EXPECT("classifier gradient row sums to 0", fabs(rs) < 1e-6, "sum %.3e", rs);
  fd_check("classifier dlogits (incl. padding = 0)", c.logits, (size_t)N * Vp, grad, cls_loss,
           &c, 1000, 1e-2f);

  float probs[11];
  softmax_row(NULL, probs, c.logits, V, 0.7f);
  double mx = -INFINITY, s = 0.0, w = 0.0, ps = 0.0;
  for (int j = 0; j < V; j++) mx = fmax(mx, c.logits[j] / 0.7);
  for (int j = 0; j < V; j++) s += exp(c.logits[j] / 0.7 - mx);
  for (int j = 0; j < V; j++) {
    w = fmax(w, rel_err(probs[j], exp(c.logits[j] / 0.7 - mx) / s, 1e-6));
    ps += probs[j];
  }
  EXPECT("softmax_row with temperature vs double", w < 1e-5 && fabs(ps - 1.0) < 1e-6,
         "rel err %.3e sum %.9f", w, ps);
  free(c.logits), free(c.work), free(c.losses), free(grad);
}

// Infinite logits (kernels/cpu/classifier.c): a logit equal to the row max counts exp(0) = 1,
// also when the max is infinite. -inf logits get probability exactly 0 (a -inf target: loss
// +inf, gradient -dloss), a row of only -inf logits is uniform (loss log V, as any row of equal
// logits), +inf logits share the probability. Nothing is NaN.
static void test_classifier_inf(void) {
  enum { N = 6, V = 11, Vp = 16 };
  const float dloss = 0.37f;
  int32_t tgt[N] = {4, 6, 2, 9, 8, -1};
  float *lg = falloc(N * Vp), *g = falloc(N * Vp), *losses = falloc(N);
  for (int n = 0; n < N; n++)
    for (int j = 0; j < Vp; j++) lg[n * Vp + j] = j < V ? 3.0f * sinf(1.3f * j + n) : 1000.0f;
  // Rows: 0 all -inf; 1 odd columns -inf, the target finite; 2 the target -inf; 3 one finite
  // logit, the target; 4 two +inf, one the target, and a -inf; 5 ignored, all -inf.
  for (int j = 0; j < V; j++) lg[0 * Vp + j] = lg[5 * Vp + j] = -INFINITY;
  for (int j = 1; j < V; j += 2) lg[1 * Vp + j] = -INFINITY;
  lg[2 * Vp + 2] = lg[2 * Vp + 7] = -INFINITY;
  for (int j = 0; j < V; j++)
    if (j != 9) lg[3 * Vp + j] = -INFINITY;
  lg[4 * Vp + 0] = -INFINITY, lg[4 * Vp + 1] = lg[4 * Vp + 8] = INFINITY;
  memcpy(g, lg, sizeof(float) * N * Vp);
  classifier_forward_backward(NULL, losses, g, tgt, N, V, Vp, &dloss);

  int nan = 0;
  for (int i = 0; i < N * Vp; i++) nan += isnan(g[i]);
  for (int n = 0; n < N; n++) nan += isnan(losses[n]);
  EXPECT("classifier with infinite logits: no NaN", nan == 0, "%d NaN", nan);

  double e = rel_err(losses[0], log((double)V), 1e-6);  // all -inf: uniform
  for (int j = 0; j < V; j++)
    e = fmax(e, rel_err(g[j], dloss * (1.0 / V - (j == tgt[0])), 1e-6));
  EXPECT("classifier all -inf row: uniform softmax, loss log V", e < 1e-6, "rel err %.3e", e);

  // Partly -inf rows: the softmax of the finite logits (in double), exactly 0 at -inf columns.
  int zeros = 1;
  e = 0.0;
  for (int n = 1; n <= 2; n++) {
    const float* x = lg + n * Vp;
    double mx = -INFINITY, s = 0.0;
    for (int j = 0; j < V; j++) mx = fmax(mx, x[j]);
    for (int j = 0; j < V; j++) s += exp(x[j] - mx);
    for (int j = 0; j < V; j++) {
      if (isinf(x[j]) && j != tgt[n]) zeros &= g[n * Vp + j] == 0.0f;
      else e = fmax(e, rel_err(g[n * Vp + j], dloss * (exp(x[j] - mx) / s - (j == tgt[n])), 1e-3));
    }
    if (n == 1) e = fmax(e, rel_err(losses[1], mx + log(s) - x[tgt[1]], 1e-3));
  }
  EXPECT("classifier -inf logits: probability exactly 0, the rest a softmax", zeros && e < 1e-5,
         "zeros %d rel err %.3e", zeros, e);
  EXPECT("classifier -inf target: loss +inf, gradient -dloss", isinf(losses[2]) && losses[2] > 0 &&
         g[2 * Vp + 2] == -dloss, "loss %g gradient %g", losses[2], g[2 * Vp + 2]);
  int ok3 = losses[3] == 0.0f;
  for (int j = 0; j < Vp; j++) ok3 &= g[3 * Vp + j] == 0.0f;
  EXPECT("classifier one finite logit, the target: loss 0, gradient 0", ok3, "loss %g", losses[3]);
  int ok4 = fabs(losses[4] - log(2.0)) < 1e-6 && g[4 * Vp + 1] == 0.5f * dloss && g[4 * Vp + 8] == -0.5f * dloss;
  for (int j = 0; j < Vp; j++) ok4 &= j == 1 || j == 8 || g[4 * Vp + j] == 0.0f;
  EXPECT("classifier two +inf logits share the probability: loss log 2", ok4, "loss %g", losses[4]);
  int ok5 = losses[5] == 0.0f;
  for (int j = 0; j < Vp; j++) ok5 &= g[5 * Vp + j] == 0.0f;
  EXPECT("classifier ignored row of -inf: loss 0, gradient 0", ok5, "loss %g", losses[5]);

  float probs[V];
  softmax_row(NULL, probs, lg + 0 * Vp, V, 0.7f);
  int sm = 1;
  for (int j = 0; j < V; j++) sm &= fabs(probs[j] - 1.0 / V) < 1e-7;
  softmax_row(NULL, probs, lg + 4 * Vp, V, 0.7f);
  for (int j = 0; j < V; j++) sm &= probs[j] == (j == 1 || j == 8 ? 0.5f : 0.0f);
  EXPECT("softmax_row: all -inf is uniform, two +inf get 1/2 each", sm, "wrong probabilities");
  free(lg), free(g), free(losses);
}

// ---- elementwise, optimizer, gradient norm ------------------------------------------

static void test_elementwise(void) {
  const size_t n = 37;
  float *x = falloc(n), *y = falloc(n), *y0 = falloc(n), *z = falloc(n);
  fill_rand(x, n, 1.0f), fill_rand(y, n, 1.0f);
  memcpy(y0, y, n * 4);
  int ok = 1;
  add_inplace(NULL, y, x, n);
  for (size_t i = 0; i < n; i++) ok &= y[i] == y0[i] + x[i];
  memcpy(y, y0, n * 4);
  add_f32(NULL, y, x, n);
  for (size_t i = 0; i < n; i++) ok &= y[i] == y0[i] + x[i];
  memcpy(y, y0, n * 4);
  scale_f32(NULL, y, 0.3f, n);
  for (size_t i = 0; i < n; i++) ok &= y[i] == y0[i] * 0.3f;
  cast_f32_to_act(NULL, z, x, n);
  ok &= !memcmp(z, x, n * 4);
  cast_act_to_f32(NULL, z, y0, n);
  ok &= !memcmp(z, y0, n * 4);
  fill_zero_act(NULL, z, n);
  for (size_t i = 0; i < n; i++) ok &= z[i] == 0.0f;
  fill_zero_f32(NULL, y, n);
  for (size_t i = 0; i < n; i++) ok &= y[i] == 0.0f;
  EXPECT("elementwise helpers", ok, "mismatch");
  free(x), free(y), free(y0), free(z);
}

static void test_adamw(float wd) {
  const size_t n = 6;
  float p[6], m[6] = {0}, v[6] = {0}, g[6], pact[6];
  double pd[6], md[6] = {0}, vd[6] = {0};
  for (size_t i = 0; i < n; i++) p[i] = srand1(), pd[i] = p[i];
  AdamWArgs a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = wd,
                 .grad_scale = 0.5f};
  double worst = 0.0;
  int act_ok = 1;
  for (int step = 1; step <= 4; step++) {
    a.step = step;
    for (size_t i = 0; i < n; i++) g[i] = srand1();
    adamw_update(NULL, p, step % 2 ? pact : NULL, g, m, v, n, a);
    for (size_t i = 0; i < n; i++) {  // the formula of kernels.h, by hand, in double
      double gi = (double)g[i] * a.grad_scale;
      md[i] = a.beta1 * md[i] + (1.0 - a.beta1) * gi;
      vd[i] = a.beta2 * vd[i] + (1.0 - a.beta2) * gi * gi;
      double mhat = md[i] / (1.0 - pow(a.beta1, step)), vhat = vd[i] / (1.0 - pow(a.beta2, step));
      pd[i] -= a.lr * (mhat / (sqrt(vhat) + a.eps) + a.weight_decay * pd[i]);
      worst = fmax(worst, rel_err(p[i], pd[i], 1e-3));
      worst = fmax(worst, rel_err(m[i], md[i], 1e-6));
      worst = fmax(worst, rel_err(v[i], vd[i], 1e-8));
      if (step % 2) act_ok &= pact[i] == p[i];
    }
  }
  EXPECT(wd > 0 ? "adamw_update 4 steps vs double (decay on)" : "adamw_update 4 steps vs double (decay off)",
         worst < 1e-5 && act_ok, "rel err %.3e, p_act %s", worst, act_ok ? "ok" : "differs");
}

// adamw_update_ranges is adamw_update on each range, with or without decay, gaps untouched.
static void test_adamw_ranges(void) {
  const AdamWRange r[3] = {{1, 4, 1}, {4, 6, 0}, {8, 11, 1}};
  float p[12], m[12], v[12], g[12], rp[12], rm[12], rv[12];
  for (int i = 0; i < 12; i++) p[i] = rp[i] = srand1(), m[i] = rm[i] = 0.1f * srand1(), g[i] = srand1();
  for (int i = 0; i < 12; i++) v[i] = rv[i] = 0.01f + 0.01f * fabsf(srand1());
  AdamWArgs a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.5f,
                 .step = 2};
  float pact[12], rpact[12];
  for (int i = 0; i < 12; i++) pact[i] = rpact[i] = -1.0f;  // gaps must keep this
  AdamWStep st = adamw_step_of(a);
  adamw_update_ranges(NULL, p, pact, g, m, v, r, 3, &st);
  for (int k = 0; k < 3; k++) {
    int o = (int)r[k].start;
    adamw_update(NULL, rp + o, rpact + o, g + o, rm + o, rv + o, (size_t)(r[k].end - r[k].start),
                 adamw_range_args(a, &r[k]));
  }
  EXPECT("adamw_update_ranges: adamw_update on each range (with the working copy), the gaps untouched",
         !memcmp(p, rp, sizeof p) && !memcmp(m, rm, sizeof m) && !memcmp(v, rv, sizeof v) && p[0] == rp[0] &&
             !memcmp(pact, rpact, sizeof pact) && pact[0] == -1.0f && pact[6] == -1.0f,
         "differs");
  st.update = 0;  // a step skipped on the device: nothing is written
  adamw_update_ranges(NULL, p, pact, g, m, v, r, 3, &st);
  EXPECT("adamw_update_ranges with update = 0 writes nothing",
         !memcmp(p, rp, sizeof p) && !memcmp(m, rm, sizeof m) && !memcmp(v, rv, sizeof v) &&
             !memcmp(pact, rpact, sizeof pact), "it changed the state");
}

static void test_block_sumsq(void) {
  const size_t nb = 5, n = nb * NORM_BLOCK;
  float* g = falloc(n);
  fill_rand(g, n, 2.0f);
  double bs[5];
  block_sumsq(NULL, bs, g, n);
  int ok = 1;
  for (size_t b = 0; b < nb; b++) {
    double s = 0.0;
    for (size_t i = b * NORM_BLOCK; i < (b + 1) * NORM_BLOCK; i++) s += (double)g[i] * g[i];
    ok &= s == bs[b];
  }
  EXPECT("block_sumsq == double loop in index order", ok, "mismatch");
  free(g);
}

// exact_sum against exact_add one value at a time: the same limbs (after normalizing), the
// overflow count and the non-finite count, with NaN, inf, a value past 2^96 and zeros mixed in.
static void test_exact_sum(void) {
  const size_t n = 1001;
  double* x = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) x[i] = ldexp(0.5 + (rand() % 1000) / 2000.0, rand() % 140 - 100);
  x[3] = 0.0, x[10] = NAN, x[500] = INFINITY, x[777] = 0x1p97;
  int64_t ref[NORM_WORDS] = {0}, w[NORM_WORDS];
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(x[i])) ref[EXACT_WORDS]++;
    exact_add(ref, x[i]);
  }
  exact_sum(NULL, w, x, n);
  exact_normalize(ref), exact_normalize(w);
  EXPECT("exact_sum == exact_add one by one (limbs, overflow and non-finite counts)",
         !memcmp(w, ref, sizeof ref) && w[EXACT_LIMBS] == 3 && w[EXACT_WORDS] == 2, "mismatch (overflow %lld, non-finite %lld)",
         (long long)w[EXACT_LIMBS], (long long)w[EXACT_WORDS]);
  exact_sum(NULL, w, x, 0);
  int zero = 1;
  for (int k = 0; k < NORM_WORDS; k++) zero &= w[k] == 0;
  EXPECT("exact_sum of nothing writes zeros", zero, "nonzero words");
  free(x);
}

// ---- determinism across thread counts ------------------------------------------------

// Every kernel whose work is split among threads, run at 1, 2 and 3 OpenMP threads: the
// outputs must be the same bits. The matmul shapes span several cache blocks and reduction
// chunks (OC > 256, OC > 264 rows), with edge tiles, so every split of the work is exercised.
#define NTHREADS 3
static void test_determinism(void) {
  const int N = 66, C = 96, OC = 300, Vv = 9, T = 11;
  float *inp = falloc(N * C), *w = falloc(OC * C), *dout = falloc(N * OC), *bias = falloc(OC);
  fill_rand(inp, N * C, 1.0f), fill_rand(w, OC * C, 1.0f), fill_rand(dout, N * OC, 1.0f);
  fill_rand(bias, OC, 1.0f);
  float *mean = falloc(N), *rstd = falloc(N), *lnout = falloc(N * C), *lnwt = falloc(C);
  fill_rand(lnwt, C, 1.0f);
  int32_t tok[66];
  for (int n = 0; n < N; n++) tok[n] = irand(Vv);
  layernorm_forward(NULL, lnout, mean, rstd, inp, lnwt, lnwt, N, C, 1e-5f);

  // attention: bidirectional with bias and causal fused, B=2 T=16 H=3 D=8
  const int B = 2, Ta = 16, H = 3, D = 8, Ca = H * D;
  AttnShape sb = {B, Ta, Ta, H, D, 3 * Ca, 3 * Ca, 1.0f, 0, H};
  AttnShape sc = sb;
  sc.causal = 1, sc.scale = 1.0f / sqrtf((float)D);
  AttnShape sg = sc;  // grouped: the three query heads share key/value head 0
  sg.KV = 1;
  size_t nqkv = (size_t)B * Ta * 3 * Ca, nout = (size_t)B * Ta * Ca, nb = (size_t)8 * H;
  float *qkv = falloc(nqkv), *pb = falloc(nb), *ado = falloc(nout);
  fill_rand(qkv, nqkv, 1.0f), fill_rand(pb, nb, 1.0f), fill_rand(ado, nout, 1.0f);
  const AttnBias pos = {.table = pb, .num_buckets = 8, .max_distance = 6, .bidirectional = 1}, none = {0};
  // Small shapes run on one thread (kernels/cpu/parallel.h); main() sets CPU_PARALLEL_MIN_WORK=0
  // so that every kernel here runs in a parallel region of 1, 2 and 3 threads.
  const size_t np = 40000;
  float *g = falloc(np), *g2 = falloc(2 * np);
  fill_rand(g, np, 1.0f), fill_rand(g2, 2 * np, 3.0f);
  const RopeConfig rc = {.theta = 500000.0f, .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                         .original_context = 16};
  AdamWArgs aa = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3};

  // one buffer per output and thread count
  enum { MMF, DINP, DW, DB, AO, ALSE, AO2, ALSE2, DQKV, DPB, DQKV2, DWTE, DWPE, LNO, LNM, LNR, LNX,
         LNW, LNB, GF, GB, AP, APA, AM, AV, SS, AO3, ALSE3, DQKV3, ROPE, ROPEB, SWF, SWB, NOUT };
  const char* names[NOUT] = {"matmul_forward", "matmul_backward dinp", "matmul_backward dweight",
    "matmul_backward dbias", "attention_forward (bias)", "attention_forward lse (bias)",
    "attention_forward (causal)", "attention_forward lse (causal)", "attention_backward (bias)",
    "attention_backward dtable", "attention_backward (causal)", "embedding_backward dwte",
    "embedding_backward dwpe", "layernorm_forward", "layernorm_forward mean",
    "layernorm_forward rstd", "layernorm_backward dx", "layernorm_backward dweight",
    "layernorm_backward dbias", "gelu_forward", "gelu_backward", "adamw_update p",
    "adamw_update p_act", "adamw_update m", "adamw_update v", "block_sumsq", "attention_forward (grouped)",
    "attention_forward lse (grouped)", "attention_backward (grouped)", "rope_forward", "rope_backward",
    "swiglu_forward", "swiglu_backward"};
  size_t len[NOUT] = {N * OC, N * C, OC * C, OC, nout, B * H * Ta, nout, B * H * Ta, nqkv, nb,
                      nqkv, Vv * C, T * C, N * C, N, N, N * C, C, C, np, np, np, np, np,
                      np, 2 * (np / NORM_BLOCK), nout, B * H * Ta, nqkv, np, np, np, 2 * np};
  float* o[NTHREADS][NOUT];
  int threads[NTHREADS] = {1, 2, 3};
  for (int r = 0; r < NTHREADS; r++) {
    for (int k = 0; k < NOUT; k++) o[r][k] = falloc(len[k]);  // zeroed (falloc)
    omp_set_num_threads(threads[r]);
    float** x = o[r];
    matmul_forward(NULL, x[MMF], inp, w, bias, N, C, OC);
    for (int i = 0; i < OC * C; i++) x[DW][i] = 0.01f * (i % 17);  // accumulate onto nonzero
    matmul_backward(NULL, x[DINP], x[DW], x[DB], dout, inp, w, N, C, OC);
    attention_forward(NULL, x[AO], x[ALSE], qkv, qkv + Ca, qkv + 2 * Ca, pos, sb);
    attention_forward(NULL, x[AO2], x[ALSE2], qkv, qkv + Ca, qkv + 2 * Ca, none, sc);
    attention_backward(NULL, x[DQKV], x[DQKV] + Ca, x[DQKV] + 2 * Ca, x[DPB], ado, x[AO], x[ALSE],
                       qkv, qkv + Ca, qkv + 2 * Ca, pos, sb);
    attention_backward(NULL, x[DQKV2], x[DQKV2] + Ca, x[DQKV2] + 2 * Ca, NULL, ado, x[AO2],
                       x[ALSE2], qkv, qkv + Ca, qkv + 2 * Ca, none, sc);
    embedding_backward(NULL, x[DWTE], x[DWPE], inp, tok, N, T, C);
    layernorm_forward(NULL, x[LNO], x[LNM], x[LNR], inp, lnwt, lnwt, N, C, 1e-5f);
    layernorm_backward(NULL, x[LNX], x[LNW], x[LNB], inp, inp, lnwt, mean, rstd, N, C);
    gelu_forward(NULL, x[GF], g, np);
    gelu_backward(NULL, x[GB], g, x[GF], np);
    memcpy(x[AP], g, np * 4), memcpy(x[AM], g, np * 4), memcpy(x[AV], g, np * 4);
    for (size_t i = 0; i < np; i++) x[AV][i] = x[AV][i] * x[AV][i];
    adamw_update(NULL, x[AP], x[APA], g, x[AM], x[AV], np, aa);
    block_sumsq(NULL, (double*)x[SS], g, np / NORM_BLOCK * NORM_BLOCK);
    attention_forward(NULL, x[AO3], x[ALSE3], qkv, qkv + Ca, qkv + 2 * Ca, none, sg);
    attention_backward(NULL, x[DQKV3], x[DQKV3] + Ca, x[DQKV3] + 2 * Ca, NULL, ado, x[AO3], x[ALSE3], qkv, qkv + Ca,
                       qkv + 2 * Ca, none, sg);
    memcpy(x[ROPE], g, np * 4), memcpy(x[ROPEB], g, np * 4);  // 500 rows of 80: 5 heads of 16 turned
    rope_forward(NULL, x[ROPE], rc, 500, 37, 5, 16, 80);
    rope_backward(NULL, x[ROPEB], rc, 500, 37, 5, 16, 80);
    swiglu_forward(NULL, x[SWF], g2, 40, 1000);
    swiglu_backward(NULL, x[SWB], g2, g, 40, 1000);
  }
  omp_set_num_threads(omp_get_num_procs());
  for (int k = 0; k < NOUT; k++) {
    char label[160];
    snprintf(label, sizeof label, "determinism 1 vs 2 vs 3 threads: %s", names[k]);
    int same = 1;
    for (int r = 1; r < NTHREADS; r++) same &= !memcmp(o[0][k], o[r][k], len[k] * 4);
    EXPECT(label, same, "bits differ");
  }
  for (int r = 0; r < NTHREADS; r++)
    for (int k = 0; k < NOUT; k++) free(o[r][k]);
  free(inp), free(w), free(dout), free(bias), free(mean), free(rstd), free(lnout), free(lnwt);
  free(qkv), free(pb), free(ado), free(g), free(g2);
}

// The step's decision (kernels/step_control.h, step_prepare / grad_norm_words / step_decide):
// the norm from the units' exact words, the verdict, the loss scale's policy, AdamW's grad_scale
// and the stop at max_bad_steps, which no later step undoes.
static int64_t g_units[3 * NORM_WORDS], g_total[EXACT_WORDS + 3];
static void norm_of(const double* sumsq_per_unit, int nan_unit) {  // three units' words
  for (int u = 0; u < 3; u++) {
    int64_t* w = g_units + u * NORM_WORDS;
    memset(w, 0, NORM_WORDS * sizeof(int64_t));
    exact_add(w, sumsq_per_unit[u]);
    if (u == nan_unit) w[EXACT_WORDS] = 1;
  }
  grad_norm_words(NULL, g_total, g_units, 3);
}
static void test_step_decide(void) {
  StepControl c;
  memset(&c, 0, sizeof c);
  c.grad_clip = 1.0f, c.dynamic = 1, c.window = 2, c.max_bad_steps = 2;
  c.scale = 1024.0;
  c.in = (StepInputs){.tokens = 100, .lr = 0.01f, .bc1 = 0.1f, .bc2 = 0.05f, .step = 1};
  step_prepare(NULL, &c);
  EXPECT("step_prepare: dloss = scale / tokens, the step's inputs in place",
         c.dloss == (float)(1024.0 / 100) && c.tokens == 100 && c.adamw.lr == 0.01f && c.adamw.step == 1, "dloss %g", c.dloss);
  const double ss[3] = {1024.0 * 1024.0 * 4.0, 1024.0 * 1024.0 * 5.0, 0.0};  // |g|^2 = 9 * S^2: norm 3 unscaled
  norm_of(ss, -1);
  double loss_sum = 250.0;
  step_decide(NULL, &c, &loss_sum, g_total, 3);
  EXPECT("step_decide: a finite step updates, with the loss, the unscaled norm and grad_scale = clip / norm / S",
         c.adamw.update && c.loss == 2.5 && c.norm == 3.0 && c.adamw.grad_scale == (float)(step_control_clip_scale(3.0, 1.0f) / 1024.0) &&
             loss_sum == 0.0 && c.nonfinite_unit == -1 && !c.bad && c.good == 1 && c.scale == 1024.0,
         "update %d loss %g norm %g grad_scale %g", c.adamw.update, c.loss, c.norm, c.adamw.grad_scale);
  loss_sum = 250.0;
  step_decide(NULL, &c, &loss_sum, g_total, 3);
  EXPECT("step_decide: window finite steps double a dynamic scale", c.scale == 2048.0 && c.good == 0, "scale %g", c.scale);
  norm_of(ss, 1);  // a NaN in unit 1 of some rank: an overflow under a dynamic scale
  loss_sum = 250.0;
  step_decide(NULL, &c, &loss_sum, g_total, 3);
  EXPECT("step_decide: a non-finite gradient under a dynamic scale is an overflow: skipped, not bad, the scale halves, "
         "unit 1 named", !c.adamw.update && c.overflow && !c.bad && c.scale == 1024.0 && c.nonfinite_unit == 1 &&
             c.bad_steps == 0, "update %d overflow %d bad %d scale %g unit %d", c.adamw.update, c.overflow, c.bad,
         c.scale, c.nonfinite_unit);
  norm_of(ss, -1);
  loss_sum = NAN;
  step_decide(NULL, &c, &loss_sum, g_total, 3);
  EXPECT("step_decide: a NaN loss is bad and leaves the scale", !c.adamw.update && c.bad && c.bad_steps == 1 &&
             !c.stopped && c.scale == 1024.0, "bad %d bad_steps %d", c.bad, c.bad_steps);
  loss_sum = INFINITY;
  step_decide(NULL, &c, &loss_sum, g_total, 3);
  EXPECT("step_decide: the max_bad_steps-th bad step stops the run", c.bad && c.bad_steps == 2 && c.stopped,
         "bad_steps %d stopped %d", c.bad_steps, c.stopped);
  loss_sum = 250.0;  // a finite step queued after the stop (the host reads the verdict one step later)
  step_decide(NULL, &c, &loss_sum, g_total, 3);
  EXPECT("step_decide: a step after the stop updates nothing and leaves the scaler and the counts",
         !c.adamw.update && c.stopped && c.bad_steps == 2 && c.scale == 1024.0 && c.good == 0, "update %d", c.adamw.update);
  // A static scale at the floor: a non-finite norm is bad, and the scale stays.
  memset(&c, 0, sizeof c);
  c.max_bad_steps = 3, c.scale = 1.0, c.in.tokens = 10;
  step_prepare(NULL, &c);
  norm_of(ss, 0);
  loss_sum = 1.0;
  step_decide(NULL, &c, &loss_sum, g_total, 3);
  EXPECT("step_decide: without a dynamic scale a non-finite norm is bad, not an overflow",
         !c.adamw.update && c.bad && !c.overflow && c.scale == 1.0 && c.bad_steps == 1, "bad %d overflow %d", c.bad,
         c.overflow);
}

int main(void) {
  // every kernel in a parallel region, however small its shape: the thread-count checks and the
  // tiles' splits between threads need them (kernels/cpu/parallel.h)
  setenv("CPU_PARALLEL_MIN_WORK", "0", 1);
  TEST_RUN(test_step_decide());
  TEST_RUN(test_embedding(1));
  TEST_RUN(test_embedding(0));
  TEST_RUN(test_norm(0));
  TEST_RUN(test_norm(1));
  TEST_RUN(test_matmul(7, 13, 5, 1));
  TEST_RUN(test_matmul(7, 13, 5, 0));
  TEST_RUN(test_matmul(9, 20, 70, 1));  // full 4x32 register tiles plus edges
  // full dot tiles (C a multiple of 16) and row tiles (C a multiple of 32), edge rows, and a
  // reduction over OC longer than one cache chunk (the input gradient's k runs over OC)
  TEST_RUN(test_matmul(29, 96, 530, 1));
  TEST_RUN(test_matmul(30, 70, 300, 0));
  // dweight's reduction over more tokens than one chunk (its partial chains kept aside), and
  // more columns than one task's group of column blocks
  TEST_RUN(test_matmul(300, 290, 37, 1));
  TEST_RUN(test_activations());
  TEST_RUN(test_gelu_accuracy());
  TEST_RUN(test_activations_nonfinite());
  TEST_RUN(test_attention("causal self B=2 T=6 H=2 D=4", 2, 6, 6, 2, 4, 1, 0, 0, 0, 2));
  TEST_RUN(test_attention("bidirectional + pos_bias B=2 T=7 H=2 D=4", 2, 7, 7, 2, 4, 0, 1, 0, 0, 2));
  TEST_RUN(test_attention("causal + pos_bias B=2 T=7 H=2 D=4", 2, 7, 7, 2, 4, 1, 1, 0, 0, 2));
  TEST_RUN(test_attention("cross Tq=3 Tk=7 kv_stride padded", 2, 3, 7, 2, 4, 0, 0, 0, 3, 2));
  TEST_RUN(test_attention("fused qkv causal B=2 T=5 H=3 D=8", 2, 5, 5, 3, 8, 1, 0, 1, 0, 3));
  TEST_RUN(test_attention("GQA fused qkv causal H=4 KV=1 B=2 T=5 D=4", 2, 5, 5, 4, 4, 1, 0, 1, 0, 1));
  TEST_RUN(test_attention("GQA fused qkv causal H=6 KV=2 B=1 T=7 D=6", 1, 7, 7, 6, 6, 1, 0, 1, 0, 2));
  TEST_RUN(test_attention("GQA cross H=4 KV=2 Tq=3 Tk=5 kv_stride padded", 2, 3, 5, 4, 4, 0, 0, 0, 2, 2));
  TEST_RUN(test_rope_frequencies());
  RopeConfig plain = {.theta = 10000.0f}, llama31 = {.theta = 500000.0f, .factor = 8.0f, .low_freq_factor = 1.0f,
                                                      .high_freq_factor = 4.0f, .original_context = 8192};
  TEST_RUN(test_rope("theta 1e4, 3 heads of 8 in rows of 30, T=5", plain, 10, 5, 3, 8, 30));
  TEST_RUN(test_rope("Llama 3.1 scaling, 2 heads of 16 in rows of 40, T=7", llama31, 14, 7, 2, 16, 40));
  TEST_RUN(test_silu_accuracy());
  TEST_RUN(test_classifier());
  TEST_RUN(test_classifier_inf());
  TEST_RUN(test_elementwise());
  TEST_RUN(test_adamw(0.0f));
  TEST_RUN(test_adamw(0.1f));
  TEST_RUN(test_adamw_ranges());
  TEST_RUN(test_block_sumsq());
  TEST_RUN(test_exact_sum());
  TEST_RUN(test_determinism());
  return test_summary();
}
