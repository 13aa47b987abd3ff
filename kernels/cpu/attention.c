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
// Grouped-query attention: query head h reads key/value head h / G, G = H / KV. The gradient of
// a shared key/value row is each query head's part (scale and all, as for G = 1) added in
// increasing query head, so G = 1 gives the bits of plain multi-head attention.
//
// Position bias (T5, AttnBias): the bucket of every relative position j - i of the call is
// computed once (bucket_rows); a score adds table[bucket, h]. Its gradient is summed in three
// fixed stages: over the batch for each (h, i, j), over the keys j of a row for each bucket
// (in increasing j), then over the rows i (in increasing i) into dtable.
//
// Determinism: every output element is owned by one thread. A call whose multiply-adds
// (attention_work) are too few for a parallel region runs on the calling thread (parallel.h).
//   forward      one (b, h, i) query row per iteration
//   backward A   one (h, i) pair per iteration, looping b in order: writes dq rows and the
//                row's per-bucket sums of the bias gradient
//   backward B   one (b, key/value head, j) key row per iteration, looping the group's query
//                heads in order and within each the queries i in order: dk, dv
// q/k/v (and dq/dk/dv) may be column slices of one fused buffer, so only the columns
// [h*D, (h+1)*D) of a head's rows are ever read or written.
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/kernels.h"

static inline float dot(const float* a, const float* b, int D) { return dot_lanes(a, b, D); }

static inline const float* qrow(const float* q, AttnShape s, int b, int i, int h) {
  return q + ((size_t)b * s.Tq + i) * s.q_stride + (size_t)h * s.D;
}
// Key or value row j of the key/value head query head h reads.
static inline const float* kvrow(const float* k, AttnShape s, int b, int j, int h) {
  int group = s.H / attn_kv_heads(s);
  return k + ((size_t)b * s.Tk + j) * s.kv_stride + (size_t)(h / group) * s.D;
}
// The multiply-adds of a pass over every (query, key) pair, in parallel.h's units (an element
// of the pass, a dot product over D and an exp, about 4 adds per multiply-add).
static inline size_t attention_work(AttnShape s) {
  return 4 * (size_t)s.B * s.H * s.Tq * s.Tk * s.D;
}
// Number of keys query i may attend to (keys 0 .. n-1).
static inline int nkeys(AttnShape s, int i) {
  return (s.causal && i + 1 < s.Tk) ? i + 1 : s.Tk;
}
// Index of the (b, h, i) entry of lse and of the backward's D vector.
static inline size_t lse_idx(AttnShape s, int b, int h, int i) {
  return ((size_t)b * s.H + h) * s.Tq + i;
}

// The bucket of every relative position r = j - i of the call, at index r + Tq - 1 (r from
// -(Tq-1) to Tk-1); NULL without a bias table.
static int* bucket_rows(AttnBias bias, AttnShape s) {
  if (!bias.table) return NULL;
  int n = s.Tq + s.Tk - 1;
  int* bk = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  for (int r = 0; r < n; r++)
    bk[r] = relative_position_bucket(r - (s.Tq - 1), bias.bidirectional, bias.num_buckets, bias.max_distance);
  return bk;
}

// score[j] = scale * q.k_j + pos_bias(h, i, j) for the keys query i may see.
static void scores_row(float* sc, const float* qi, const float* k, AttnBias bias, const int* bk,
                       AttnShape s, int b, int h, int i, int nk) {
  for (int j = 0; j < nk; j++) {
    float v = s.scale * dot(qi, kvrow(k, s, b, j, h), s.D);
    sc[j] = bk ? v + bias.table[(size_t)bk[j - i + s.Tq - 1] * s.H + h] : v;
  }
}

void attention_forward(KernelCtx* ctx, act_t* out, float* lse, const act_t* q, const act_t* k,
                       const act_t* v, AttnBias bias, AttnShape s) {
  const int C = s.H * s.D;
  const long rows = (long)s.B * s.H * s.Tq;
  int* bk = bucket_rows(bias, s);
#pragma omp parallel if (PARALLEL_WORTH(attention_work(s)))
  {
    float* sc = malloc(sizeof(float) * (size_t)(s.Tk > 0 ? s.Tk : 1));
    float* acc = malloc(sizeof(float) * (size_t)s.D);
#pragma omp for schedule(static)
    for (long r = 0; r < rows; r++) {
      int i = (int)(r % s.Tq), h = (int)((r / s.Tq) % s.H), b = (int)(r / ((long)s.Tq * s.H));
      int nk = nkeys(s, i);
      scores_row(sc, qrow(q, s, b, i, h), k, bias, bk, s, b, h, i, nk);
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
  free(bk);
}

// With P = softmax row, dP_ij = dout_i . v_j and D_i = dout_i . out_i (= sum_j P_ij dP_ij):
//   dS_ij = P_ij (dP_ij - D_i),  dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,
//   dv_j = sum_i P_ij dout_i,    dtable[bucket(j - i), h] += sum_b dS_ij.
void attention_backward(KernelCtx* ctx, act_t* dq, act_t* dk, act_t* dv, float* dtable,
                        const act_t* dout, const act_t* out, const float* lse, const act_t* q,
                        const act_t* k, const act_t* v, AttnBias bias, AttnShape s) {
  const int C = s.H * s.D;
  float* Dv = malloc(sizeof(float) * ((size_t)s.B * s.H * s.Tq + 1));
  int* bk = bucket_rows(bias, s);
  if (!bk) dtable = NULL;  // no bias, no bias gradient
  const int NB = dtable ? bias.num_buckets : 0;
  // rowsum[(h * Tq + i) * NB + bucket]: a row's bias gradient summed per bucket (pass A)
  float* rowsum = dtable ? calloc((size_t)s.H * s.Tq * NB + 1, sizeof(float)) : NULL;

  // Pass A: dq and the bias gradient's row sums, one (h, i) per iteration, batches in order.
  const long hrows = (long)s.H * s.Tq;
#pragma omp parallel if (PARALLEL_WORTH(attention_work(s)))
  {
    float* ds = malloc(sizeof(float) * (size_t)(s.Tk > 0 ? s.Tk : 1));
    float* dsum = malloc(sizeof(float) * (size_t)(s.Tk > 0 ? s.Tk : 1));  // dS summed over b
    float* acc = malloc(sizeof(float) * (size_t)s.D);
#pragma omp for schedule(static)
    for (long r = 0; r < hrows; r++) {
      int i = (int)(r % s.Tq), h = (int)(r / s.Tq);
      int nk = nkeys(s, i);
      for (int b = 0; b < s.B; b++) {
        const float* qi = qrow(q, s, b, i, h);
        const float* doi = dout + ((size_t)b * s.Tq + i) * C + (size_t)h * s.D;
        const float* oi = out + ((size_t)b * s.Tq + i) * C + (size_t)h * s.D;
        float Di = dot(doi, oi, s.D);
        float l = lse[lse_idx(s, b, h, i)];
        Dv[lse_idx(s, b, h, i)] = Di;
        scores_row(ds, qi, k, bias, bk, s, b, h, i, nk);
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
        if (rowsum)
          for (int j = 0; j < nk; j++) dsum[j] = b == 0 ? ds[j] : dsum[j] + ds[j];
      }
      if (rowsum) {
        float* rs = rowsum + ((size_t)h * s.Tq + i) * NB;
        for (int j = 0; j < nk; j++) rs[bk[j - i + s.Tq - 1]] += dsum[j];
      }
    }
    free(ds);
    free(dsum);
    free(acc);
  }
  if (rowsum) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH((size_t)s.H * s.Tq * NB))
    for (int h = 0; h < s.H; h++)
      for (int n = 0; n < NB; n++) {
        float t = 0.0f;
        for (int i = 0; i < s.Tq; i++) t += rowsum[((size_t)h * s.Tq + i) * NB + n];
        dtable[(size_t)n * s.H + h] += t;
      }
  }

  // Pass B: dk and dv, one key row per iteration, queries in increasing order. It
  // recomputes P and dS rather than storing them, trading flops for O(Tq*Tk) memory.
  const int KV = attn_kv_heads(s), G = s.H / KV;
  const long krows = (long)s.B * KV * s.Tk;
#pragma omp parallel if (PARALLEL_WORTH(attention_work(s)))
  {
    float* acck = malloc(sizeof(float) * (size_t)s.D);
    float* accv = malloc(sizeof(float) * (size_t)s.D);
#pragma omp for schedule(static)
    for (long r = 0; r < krows; r++) {
      int j = (int)(r % s.Tk), kvh = (int)((r / s.Tk) % KV), b = (int)(r / ((long)s.Tk * KV));
      const float* kj = kvrow(k, s, b, j, kvh * G);
      const float* vj = kvrow(v, s, b, j, kvh * G);
      float* dkj = dk + ((size_t)b * s.Tk + j) * s.kv_stride + (size_t)kvh * s.D;
      float* dvj = dv + ((size_t)b * s.Tk + j) * s.kv_stride + (size_t)kvh * s.D;
      for (int h = kvh * G; h < (kvh + 1) * G; h++) {  // the query heads sharing this row
        for (int d = 0; d < s.D; d++) acck[d] = accv[d] = 0.0f;
        for (int i = s.causal ? j : 0; i < s.Tq; i++) {
          const float* qi = qrow(q, s, b, i, h);
          const float* doi = dout + ((size_t)b * s.Tq + i) * C + (size_t)h * s.D;
          float sc = s.scale * dot(qi, kj, s.D);
          if (bk) sc += bias.table[(size_t)bk[j - i + s.Tq - 1] * s.H + h];
          float p = expf(sc - lse[lse_idx(s, b, h, i)]);
          float dp = dot(doi, vj, s.D);
          float g = p * (dp - Dv[lse_idx(s, b, h, i)]);
          for (int d = 0; d < s.D; d++) {
            acck[d] = fmaf(g, qi[d], acck[d]);
            accv[d] = fmaf(p, doi[d], accv[d]);
          }
        }
        int first = h == kvh * G;  // the group's first head writes, the others add
        for (int d = 0; d < s.D; d++) {
          dkj[d] = first ? s.scale * acck[d] : dkj[d] + s.scale * acck[d];
          dvj[d] = first ? accv[d] : dvj[d] + accv[d];
        }
      }
    }
    free(acck);
    free(accv);
  }
  free(Dv);
  free(bk);
  free(rowsum);
}
