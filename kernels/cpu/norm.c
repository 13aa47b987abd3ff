// norm.c: LayerNorm and RMSNorm (plain and fused with a residual add), forward and backward.
//
// Precision: every per-row reduction (mean, variance, mean square, and the two row means
// of the backward) is accumulated in double in increasing channel order, then rounded to
// float. The saved mean/rstd are those float values, and both passes normalize with them,
// so the backward sees exactly the normalization the forward applied.
// Parameter gradients are column sums over rows: each channel is owned by one thread and
// summed in float in increasing row order into a local, then added to dweight/dbias.
#include <math.h>

#include "kernels/kernels.h"

// Channel block of the parameter-gradient pass: contiguous inner loop, one owner thread.
#define NORM_CBLOCK 64

// ---- LayerNorm --------------------------------------------------------------------

static void layernorm_row(float* o, float* mean_out, float* rstd_out, const float* x,
                          const float* w, const float* b, int C, float eps) {
  double s = 0.0;
  for (int c = 0; c < C; c++) s += x[c];
  double m = s / C;
  double v = 0.0;
  for (int c = 0; c < C; c++) {
    double d = x[c] - m;
    v += d * d;
  }
  v /= C;
  float mf = (float)m;
  float rf = (float)(1.0 / sqrt(v + (double)eps));
  for (int c = 0; c < C; c++) o[c] = (x[c] - mf) * rf * w[c] + b[c];
  *mean_out = mf;
  *rstd_out = rf;
}

void layernorm_forward(KernelCtx* ctx, act_t* out, float* mean, float* rstd, const act_t* x,
                       const act_t* weight, const act_t* bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    layernorm_row(out + (size_t)n * C, mean + n, rstd + n, x + (size_t)n * C, weight, bias, C,
                  eps);
}

void residual_layernorm_forward(KernelCtx* ctx, act_t* residual, act_t* out, float* mean,
                                float* rstd, const act_t* a, const act_t* b, const act_t* weight,
                                const act_t* bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
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
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* xr = x + (size_t)n * C;
    const float* dr = dout + (size_t)n * C;
    float m = mean[n], r = rstd[n];
    double sd = 0.0, sdn = 0.0;
    for (int c = 0; c < C; c++) {
      float norm = (xr[c] - m) * r;
      float dnorm = dr[c] * weight[c];
      sd += dnorm;
      sdn += (double)dnorm * norm;
    }
    float a = (float)(sd / C), bb = (float)(sdn / C);
    float* dxr = dx + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float norm = (xr[c] - m) * r;
      float dnorm = dr[c] * weight[c];
      dxr[c] += r * (dnorm - a - norm * bb);
    }
  }
  int nblocks = (C + NORM_CBLOCK - 1) / NORM_CBLOCK;
#pragma omp parallel for schedule(static)
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
  double ss = 0.0;
  for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
  float rf = (float)(1.0 / sqrt(ss / C + (double)eps));
  for (int c = 0; c < C; c++) o[c] = x[c] * rf * w[c];
  *rstd_out = rf;
}

void rmsnorm_forward(KernelCtx* ctx, act_t* out, float* rstd, const act_t* x,
                     const act_t* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    rmsnorm_row(out + (size_t)n * C, rstd + n, x + (size_t)n * C, weight, C, eps);
}

void residual_rmsnorm_forward(KernelCtx* ctx, act_t* residual, act_t* out, float* rstd,
                              const act_t* a, const act_t* b, const act_t* weight, int N,
                              int C, float eps) {
#pragma omp parallel for schedule(static)
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
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* xr = x + (size_t)n * C;
    const float* dr = dout + (size_t)n * C;
    float r = rstd[n];
    double sdn = 0.0;
    for (int c = 0; c < C; c++) sdn += (double)(dr[c] * weight[c]) * (xr[c] * r);
    float bb = (float)(sdn / C);
    float* dxr = dx + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float norm = xr[c] * r;
      dxr[c] += r * (dr[c] * weight[c] - norm * bb);
    }
  }
  int nblocks = (C + NORM_CBLOCK - 1) / NORM_CBLOCK;
#pragma omp parallel for schedule(static)
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
