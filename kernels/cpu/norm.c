// norm.c: LayerNorm and RMSNorm (plain and fused with a residual add), forward and backward.
//
// Precision: every per-row reduction (mean, variance, mean square, and the two row means
// of the backward) is accumulated in double, in DL lanes: lane l sums channels l, l + DL,
// l + 2 DL, ... in increasing order, and the lanes are added in one fixed tree (lanes_total),
// so the result is the same for any thread count and any vector width. Then rounded to
// float. The saved mean/rstd are those float values, and both passes normalize with them,
// so the backward sees exactly the normalization the forward applied.
// The lanes are plain arrays with a loop over them, which the compiler keeps in the target's
// own vector registers (one AVX-512 register, two AVX2 ones, four SSE ones).
// Parameter gradients are column sums over rows: each channel is owned by one thread and
// summed in float in increasing row order into a local, then added to dweight/dbias.
#include <math.h>

#include "kernels/cpu/parallel.h"
#include "kernels/kernels.h"

#define DL 8  // double lanes of a row reduction
// The lanes added in a fixed tree: lanes l and l + h for h = 4, 2, 1.
static inline double lanes_total(double v[DL]) {
  for (int h = DL / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; l++) v[l] += v[l + h];
  return v[0];
}

// Channel block of the parameter-gradient pass: contiguous inner loop, one owner thread.
#define NORM_CBLOCK 64

// ---- LayerNorm --------------------------------------------------------------------

static void layernorm_row(float* o, float* mean_out, float* rstd_out, const float* x,
                          const float* w, const float* b, int C, float eps) {
  double s[DL] = {0}, q[DL] = {0};
  int c = 0, c0;
  for (; c + DL <= C; c += DL)
    for (int l = 0; l < DL; l++) s[l] += x[c + l];
  for (c0 = c; c < C; c++) s[c - c0] += x[c];  // the tail: channel c in lane c - c0
  double m = lanes_total(s) / C;
  for (c = 0; c + DL <= C; c += DL)
    for (int l = 0; l < DL; l++) q[l] += (x[c + l] - m) * (x[c + l] - m);
  for (c0 = c; c < C; c++) q[c - c0] += (x[c] - m) * (x[c] - m);
  double v = lanes_total(q) / C;
  float mf = (float)m;
  float rf = (float)(1.0 / sqrt(v + (double)eps));
  for (int k = 0; k < C; k++) o[k] = (x[k] - mf) * rf * w[k] + b[k];
  *mean_out = mf;
  *rstd_out = rf;
}

void layernorm_forward(KernelCtx* ctx, act_t* out, float* mean, float* rstd, const act_t* x,
                       const act_t* weight, const act_t* bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(4 * (size_t)N * C))
  for (int n = 0; n < N; n++)
    layernorm_row(out + (size_t)n * C, mean + n, rstd + n, x + (size_t)n * C, weight, bias, C,
                  eps);
}

void residual_layernorm_forward(KernelCtx* ctx, act_t* residual, act_t* out, float* mean,
                                float* rstd, const act_t* a, const act_t* b, const act_t* weight,
                                const act_t* bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(4 * (size_t)N * C))
  for (int n = 0; n < N; n++) {
    size_t off = (size_t)n * C;
    float* r = residual + off;
    for (int c = 0; c < C; c++) r[c] = a[off + c] + b[off + c];
    layernorm_row(out + off, mean + n, rstd + n, r, weight, bias, C, eps);
  }
}

// dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
// Rows are independent; dweight/dbias are done in a second pass split by channels.
void layernorm_backward(KernelCtx* ctx, act_t* dx, float* dweight, float* dbias,
                        const act_t* dout, const act_t* x, const act_t* weight,
                        const float* mean, const float* rstd, int N, int C) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(4 * (size_t)N * C))
  for (int n = 0; n < N; n++) {
    const float* xr = x + (size_t)n * C;
    const float* dr = dout + (size_t)n * C;
    float m = mean[n], r = rstd[n];
    double sd[DL] = {0}, sdn[DL] = {0};
    int c = 0;
    for (; c + DL <= C; c += DL)
      for (int l = 0; l < DL; l++) {
        float norm = (xr[c + l] - m) * r, dnorm = dr[c + l] * weight[c + l];
        sd[l] += dnorm;
        sdn[l] += (double)dnorm * norm;
      }
    for (int c0 = c; c < C; c++) {
      float norm = (xr[c] - m) * r, dnorm = dr[c] * weight[c];
      sd[c - c0] += dnorm;
      sdn[c - c0] += (double)dnorm * norm;
    }
    float a = (float)(lanes_total(sd) / C), bb = (float)(lanes_total(sdn) / C);
    float* dxr = dx + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float norm = (xr[c] - m) * r;
      float dnorm = dr[c] * weight[c];
      dxr[c] += r * (dnorm - a - norm * bb);
    }
  }
  int nblocks = (C + NORM_CBLOCK - 1) / NORM_CBLOCK;
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(2 * (size_t)N * C))
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * NORM_CBLOCK;
    int len = c0 + NORM_CBLOCK < C ? NORM_CBLOCK : C - c0;
    float accw[NORM_CBLOCK] = {0}, accb[NORM_CBLOCK] = {0};
    for (int n = 0; n < N; n++) {
      const float* xr = x + (size_t)n * C + c0;
      const float* dr = dout + (size_t)n * C + c0;
      float m = mean[n], r = rstd[n];
      for (int i = 0; i < len; i++) {
        accw[i] += dr[i] * ((xr[i] - m) * r);
        accb[i] += dr[i];
      }
    }
    for (int i = 0; i < len; i++) dweight[c0 + i] += accw[i];
    if (dbias)
      for (int i = 0; i < len; i++) dbias[c0 + i] += accb[i];
  }
}

// ---- RMSNorm ----------------------------------------------------------------------

static void rmsnorm_row(float* o, float* rstd_out, const float* x, const float* w, int C,
                        float eps) {
  double ss[DL] = {0};
  int c = 0;
  for (; c + DL <= C; c += DL)
    for (int l = 0; l < DL; l++) ss[l] += (double)x[c + l] * x[c + l];
  for (int c0 = c; c < C; c++) ss[c - c0] += (double)x[c] * x[c];
  float rf = (float)(1.0 / sqrt(lanes_total(ss) / C + (double)eps));
  for (int k = 0; k < C; k++) o[k] = x[k] * rf * w[k];
  *rstd_out = rf;
}

void rmsnorm_forward(KernelCtx* ctx, act_t* out, float* rstd, const act_t* x,
                     const act_t* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(4 * (size_t)N * C))
  for (int n = 0; n < N; n++)
    rmsnorm_row(out + (size_t)n * C, rstd + n, x + (size_t)n * C, weight, C, eps);
}

void residual_rmsnorm_forward(KernelCtx* ctx, act_t* residual, act_t* out, float* rstd,
                              const act_t* a, const act_t* b, const act_t* weight, int N,
                              int C, float eps) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(4 * (size_t)N * C))
  for (int n = 0; n < N; n++) {
    size_t off = (size_t)n * C;
    float* r = residual + off;
    for (int c = 0; c < C; c++) r[c] = a[off + c] + b[off + c];
    rmsnorm_row(out + off, rstd + n, r, weight, C, eps);
  }
}

// dx = rstd * (dnorm - norm * mean(dnorm * norm)); no mean term because nothing was centered.
void rmsnorm_backward(KernelCtx* ctx, act_t* dx, float* dweight, const act_t* dout,
                      const act_t* x, const act_t* weight, const float* rstd, int N, int C) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(4 * (size_t)N * C))
  for (int n = 0; n < N; n++) {
    const float* xr = x + (size_t)n * C;
    const float* dr = dout + (size_t)n * C;
    float r = rstd[n];
    double sdn[DL] = {0};
    int c = 0;
    for (; c + DL <= C; c += DL)
      for (int l = 0; l < DL; l++) sdn[l] += (double)(dr[c + l] * weight[c + l]) * (xr[c + l] * r);
    for (int c0 = c; c < C; c++) sdn[c - c0] += (double)(dr[c] * weight[c]) * (xr[c] * r);
    float bb = (float)(lanes_total(sdn) / C);
    float* dxr = dx + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float norm = xr[c] * r;
      dxr[c] += r * (dr[c] * weight[c] - norm * bb);
    }
  }
  int nblocks = (C + NORM_CBLOCK - 1) / NORM_CBLOCK;
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(2 * (size_t)N * C))
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * NORM_CBLOCK;
    int len = c0 + NORM_CBLOCK < C ? NORM_CBLOCK : C - c0;
    float accw[NORM_CBLOCK] = {0};
    for (int n = 0; n < N; n++) {
      const float* xr = x + (size_t)n * C + c0;
      const float* dr = dout + (size_t)n * C + c0;
      float r = rstd[n];
      for (int i = 0; i < len; i++) accw[i] += dr[i] * (xr[i] * r);
    }
    for (int i = 0; i < len; i++) dweight[c0 + i] += accw[i];
  }
}
