// loss_sum.h: the fixed order in which a micro-batch's per-token losses are summed
// (loss_accumulate), the same on both backends, every run and every rank count:
//   LOSS_LANES partial sums in double, lane l adding losses l, l + LOSS_LANES, l + 2 LOSS_LANES,
//   ... in increasing order; then the partials folded in halves, x[l] += x[l + s] for s =
//   LOSS_LANES / 2, ..., 2, 1 (a fixed tree); the sum is x[0].
// The CPU runs it as written (loss_sum_fixed_order); the CUDA kernel runs the lanes as threads
// of one block, each reading its losses 256 apart (coalesced), and the tree in shared memory and
// warp shuffles, with the same additions in the same order: the same bits.
#ifndef FSDP_LOSS_SUM_H
#define FSDP_LOSS_SUM_H

#define LOSS_LANES 256

// The CPU form (kernels/cpu/classifier.c; the GPU test's reference).
static inline double loss_sum_fixed_order(const float* losses, int N) {
  double x[LOSS_LANES];
  for (int l = 0; l < LOSS_LANES; l++) x[l] = 0.0;
  for (int i = 0; i < N; i++) x[i % LOSS_LANES] += (double)losses[i];
  for (int s = LOSS_LANES / 2; s > 0; s /= 2)
    for (int l = 0; l < s; l++) x[l] += x[l + s];
  return x[0];
}
#endif
