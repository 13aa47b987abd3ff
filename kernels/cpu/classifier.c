// classifier.c: fused softmax + cross-entropy over a padded vocabulary, and host sampling
// probabilities, fp32 CPU.
//
// Stability: logits are shifted by their row max before exp. Each exp is taken in float,
// the row sum of exps accumulates in double (a 50k-entry float sum of positive terms loses
// ~1e-4 relative), and the loss max + log(sum) - logit[target] is formed in double.
//
// Infinite logits. A logit equal to the row max contributes exp(0) = 1 to the sum, also when
// the max is infinite: the softmax depends only on differences of logits, and the difference
// of two equal logits is 0 (IEEE's -inf - -inf = NaN would make the whole row NaN). So
//   some logits -inf: they get probability exactly 0 (exp(-inf) = 0) and the others are
//       unaffected; if the target is one of them its loss is +inf (log of probability 0) and its
//       gradient -dloss; nothing is NaN;
//   all logits -inf: all are equal, so the softmax is uniform: loss log(V), gradient
//       dloss * (1/V - onehot), as for any row of equal logits;
//   +inf logits: they share the probability equally, the others get 0.
// NaN logits still give NaN. The CUDA kernel follows the same rule.
#include <math.h>

#include "kernels/cpu/parallel.h"
#include "kernels/kernels.h"
#include "kernels/loss_sum.h"

void classifier_forward_backward(KernelCtx* ctx, float* losses, act_t* logits,
                                 const int32_t* targets, int N, int V, int Vp, const float* dloss_at) {
  float dloss = dloss_at ? *dloss_at : 0.0f;
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(16 * (size_t)N * V))
  for (int n = 0; n < N; n++) {
    float* row = logits + (size_t)n * Vp;
    int t = targets[n];
    if (t < 0) {  // ignored position: no loss, no gradient
      if (losses) losses[n] = 0.0f;
      for (int j = 0; j < Vp; j++) row[j] = 0.0f;
      continue;
    }
    float mx = -INFINITY;
    for (int j = 0; j < V; j++) mx = row[j] > mx ? row[j] : mx;
    float lt = row[t];
    // The row is reused to hold exp(logit - max) between the two passes. sum >= 1: the max
    // contributes 1.
    double sum = 0.0;
    for (int j = 0; j < V; j++) {
      float e = row[j] == mx ? 1.0f : expf(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    if (losses) losses[n] = (float)(lt == mx ? log(sum) : (double)mx + log(sum) - (double)lt);
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < V; j++) row[j] = dloss * (row[j] * inv - (j == t ? 1.0f : 0.0f));
    for (int j = V; j < Vp; j++) row[j] = 0.0f;
  }
}

void softmax_row(KernelCtx* ctx, float* probs, const act_t* logits_row, int V, float temperature) {
  float invt = 1.0f / temperature;
  float mx = -INFINITY;
  for (int j = 0; j < V; j++) {
    float x = logits_row[j] * invt;
    mx = x > mx ? x : mx;
  }
  double sum = 0.0;  // >= 1: the max contributes 1 (infinite logits as in the classifier above)
  for (int j = 0; j < V; j++) {
    float x = logits_row[j] * invt;
    probs[j] = x == mx ? 1.0f : expf(x - mx);
    sum += probs[j];
  }
  float inv = (float)(1.0 / sum);
  for (int j = 0; j < V; j++) probs[j] *= inv;
}

// In loss_sum.h's fixed order, which the CUDA kernel shares: the same bits on both backends.
void loss_accumulate(KernelCtx* ctx, double* acc, const float* losses, int N) {
  (void)ctx;
  acc[0] += loss_sum_fixed_order(losses, N);
}
