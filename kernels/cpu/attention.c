// attention.c: multi-head scaled dot-product attention, flash-attention semantics, fp32 CPU.
//
// The forward keeps only the row log-sum-exp (lse) of the scores; the backward recomputes
// P = exp(score - lse) from q, k and lse instead of reading a stored Tq x Tk matrix, so the
// memory footprint is the same as the CUDA flash kernels and the two backends agree on what
// is saved. Dot products over a head's D columns are vec.h's dot_lanes (16 lanes, fused
// multiply-adds, a fixed lane tree); sums over keys or queries accumulate in float,
// sequentially in index order, one fused multiply-add per term.
//
// Masking: with causal set, query i sees keys j <= i (the layout of self-attention, where
// Tq == Tk). Masked keys are skipped entirely, so they add nothing to lse or to gradients.
//
// Determinism: every output element is owned by one thread.
//   forward      one (b, h, i) query row per iteration
//   backward A   one (h, i) pair per iteration, looping b in order: writes dq rows and is the
//                only writer of dpos_bias[h, i, :], which sums over b in increasing order
//   backward B   one (b, h, j) key row per iteration, looping queries i in order: dk, dv
// q/k/v (and dq/dk/dv) may be column slices of one fused buffer, so only the columns
// [h*D, (h+1)*D) of a head's rows are ever read or written.
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/vec.h"
#include "kernels/kernels.h"

static inline float dot(const float* a, const float* b, int D) { return dot_lanes(a, b, D); }

static inline const float* qrow(const float* q, AttnShape s, int b, int i, int h) {
  return q + ((size_t)b * s.Tq + i) * s.q_stride + (size_t)h * s.D;
}
static inline const float* kvrow(const float* k, AttnShape s, int b, int j, int h) {
  return k + ((size_t)b * s.Tk + j) * s.kv_stride + (size_t)h * s.D;
}
// Number of keys query i may attend to (keys 0 .. n-1).
static inline int nkeys(AttnShape s, int i) {
  return (s.causal && i + 1 < s.Tk) ? i + 1 : s.Tk;
}
// Index of the (b, h, i) entry of lse and of the backward's D vector.
static inline size_t lse_idx(AttnShape s, int b, int h, int i) {
  return ((size_t)b * s.H + h) * s.Tq + i;
}

// score[j] = scale * q.k_j + bias[h, i, j] for the keys query i may see.
static void scores_row(float* sc, const float* qi, const float* k, const float* pos_bias,
                       AttnShape s, int b, int h, int i, int nk) {
  const float* brow = pos_bias ? pos_bias + ((size_t)h * s.Tq + i) * s.Tk : NULL;
  for (int j = 0; j < nk; j++) {
    float v = s.scale * dot(qi, kvrow(k, s, b, j, h), s.D);
    sc[j] = brow ? v + brow[j] : v;
  }
}

void attention_forward(KernelCtx* ctx, act_t* out, float* lse, const act_t* q, const act_t* k,
                       const act_t* v, const act_t* pos_bias, AttnShape s) {
  const int C = s.H * s.D;
  const long rows = (long)s.B * s.H * s.Tq;
#pragma omp parallel
  {
    float* sc = malloc(sizeof(float) * (size_t)(s.Tk > 0 ? s.Tk : 1));
    float* acc = malloc(sizeof(float) * (size_t)s.D);
#pragma omp for schedule(static)
    for (long r = 0; r < rows; r++) {
      int i = (int)(r % s.Tq), h = (int)((r / s.Tq) % s.H), b = (int)(r / ((long)s.Tq * s.H));
      int nk = nkeys(s, i);
      scores_row(sc, qrow(q, s, b, i, h), k, pos_bias, s, b, h, i, nk);
      float mx = -INFINITY;
      for (int j = 0; j < nk; j++) mx = sc[j] > mx ? sc[j] : mx;
      float sum = 0.0f;
      for (int d = 0; d < s.D; d++) acc[d] = 0.0f;
      for (int j = 0; j < nk; j++) {
        float e = expf(sc[j] - mx);
        sum += e;
        const float* vj = kvrow(v, s, b, j, h);
        for (int d = 0; d < s.D; d++) acc[d] = fmaf(e, vj[d], acc[d]);
      }
      float inv = 1.0f / sum;
      float* o = out + ((size_t)b * s.Tq + i) * C + (size_t)h * s.D;
      for (int d = 0; d < s.D; d++) o[d] = acc[d] * inv;
      lse[lse_idx(s, b, h, i)] = mx + logf(sum);
    }
    free(sc);
    free(acc);
  }
}

// With P = softmax row, dP_ij = dout_i . v_j and D_i = dout_i . out_i (= sum_j P_ij dP_ij):
//   dS_ij = P_ij (dP_ij - D_i),  dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,
//   dv_j = sum_i P_ij dout_i,    dpos_bias[h,i,j] += sum_b dS_ij.
void attention_backward(KernelCtx* ctx, act_t* dq, act_t* dk, act_t* dv, float* dpos_bias,
                        const act_t* dout, const act_t* out, const float* lse, const act_t* q,
                        const act_t* k, const act_t* v, const act_t* pos_bias, AttnShape s) {
  const int C = s.H * s.D;
  float* Dv = malloc(sizeof(float) * ((size_t)s.B * s.H * s.Tq + 1));

  // Pass A: dq and dpos_bias, one (h, i) per iteration, batches in order.
  const long hrows = (long)s.H * s.Tq;
#pragma omp parallel
  {
    float* ds = malloc(sizeof(float) * (size_t)(s.Tk > 0 ? s.Tk : 1));
    float* acc = malloc(sizeof(float) * (size_t)s.D);
#pragma omp for schedule(static)
    for (long r = 0; r < hrows; r++) {
      int i = (int)(r % s.Tq), h = (int)(r / s.Tq);
      int nk = nkeys(s, i);
      float* dbrow = dpos_bias ? dpos_bias + ((size_t)h * s.Tq + i) * s.Tk : NULL;
      for (int b = 0; b < s.B; b++) {
        const float* qi = qrow(q, s, b, i, h);
        const float* doi = dout + ((size_t)b * s.Tq + i) * C + (size_t)h * s.D;
        const float* oi = out + ((size_t)b * s.Tq + i) * C + (size_t)h * s.D;
        float Di = dot(doi, oi, s.D);
        float l = lse[lse_idx(s, b, h, i)];
        Dv[lse_idx(s, b, h, i)] = Di;
        scores_row(ds, qi, k, pos_bias, s, b, h, i, nk);
        for (int d = 0; d < s.D; d++) acc[d] = 0.0f;
        for (int j = 0; j < nk; j++) {
          float p = expf(ds[j] - l);
          float dp = dot(doi, kvrow(v, s, b, j, h), s.D);
          float g = p * (dp - Di);
          ds[j] = g;
          const float* kj = kvrow(k, s, b, j, h);
          for (int d = 0; d < s.D; d++) acc[d] = fmaf(g, kj[d], acc[d]);
        }
        float* dqi = dq + ((size_t)b * s.Tq + i) * s.q_stride + (size_t)h * s.D;
        for (int d = 0; d < s.D; d++) dqi[d] = s.scale * acc[d];
        if (dbrow)
          for (int j = 0; j < nk; j++) dbrow[j] += ds[j];
      }
    }
    free(ds);
    free(acc);
  }

  // Pass B: dk and dv, one key row per iteration, queries in increasing order. It
  // recomputes P and dS rather than storing them, trading flops for O(Tq*Tk) memory.
  const long krows = (long)s.B * s.H * s.Tk;
#pragma omp parallel
  {
    float* acck = malloc(sizeof(float) * (size_t)s.D);
    float* accv = malloc(sizeof(float) * (size_t)s.D);
#pragma omp for schedule(static)
    for (long r = 0; r < krows; r++) {
      int j = (int)(r % s.Tk), h = (int)((r / s.Tk) % s.H), b = (int)(r / ((long)s.Tk * s.H));
      const float* kj = kvrow(k, s, b, j, h);
      const float* vj = kvrow(v, s, b, j, h);
      for (int d = 0; d < s.D; d++) acck[d] = accv[d] = 0.0f;
      for (int i = s.causal ? j : 0; i < s.Tq; i++) {
        const float* qi = qrow(q, s, b, i, h);
        const float* doi = dout + ((size_t)b * s.Tq + i) * C + (size_t)h * s.D;
        float sc = s.scale * dot(qi, kj, s.D);
        if (pos_bias) sc += pos_bias[((size_t)h * s.Tq + i) * s.Tk + j];
        float p = expf(sc - lse[lse_idx(s, b, h, i)]);
        float dp = dot(doi, vj, s.D);
        float g = p * (dp - Dv[lse_idx(s, b, h, i)]);
        for (int d = 0; d < s.D; d++) {
          acck[d] = fmaf(g, qi[d], acck[d]);
          accv[d] = fmaf(p, doi[d], accv[d]);
        }
      }
      float* dkj = dk + ((size_t)b * s.Tk + j) * s.kv_stride + (size_t)h * s.D;
      float* dvj = dv + ((size_t)b * s.Tk + j) * s.kv_stride + (size_t)h * s.D;
      for (int d = 0; d < s.D; d++) {
        dkj[d] = s.scale * acck[d];
        dvj[d] = accv[d];
      }
    }
    free(acck);
    free(accv);
  }
  free(Dv);
}
