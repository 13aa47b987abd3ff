// adamw.c: AdamW update of one shard range and the blockwise gradient sum of squares with its
// exact total, fp32 CPU.
#include <math.h>

#include "kernels/adamw_host.h"
#include "kernels/cpu/parallel.h"
#include "kernels/exact_sum.h"
#include "kernels/kernels.h"

// Each block is summed by one thread, in double, in index order: a block's value depends
// only on its 128 gradients, never on the thread count, the rank or the world size.
void block_sumsq(KernelCtx* ctx, double* block_sums, const float* g, size_t n) {
  size_t nb = n / NORM_BLOCK;
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH(2 * n))
  for (size_t b = 0; b < nb; b++) {
    const float* x = g + b * NORM_BLOCK;
    double s = 0.0;
    for (int i = 0; i < NORM_BLOCK; i++) s += (double)x[i] * x[i];
    block_sums[b] = s;
  }
}

_Static_assert(NORM_WORDS == EXACT_WORDS + 1, "NORM_WORDS: the limbs, the overflow count, the non-finite count");

void exact_sum(KernelCtx* ctx, int64_t* words, const double* x, size_t n) {
  for (int k = 0; k < NORM_WORDS; k++) words[k] = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(x[i])) words[EXACT_WORDS]++;
    exact_add(words, x[i]);
  }
}

// The update: the host loop of kernels/adamw_host.h (act_t is float on the CPU backend).
void adamw_update(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v,
                  size_t n, AdamWArgs a) {
  adamw_host_loop(p, p_act, g, m, v, n, a);
}

void adamw_update_ranges(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v,
                         const AdamWRange* r, int nr, const AdamWStep* s) {
  if (!s->update) return;
  AdamWArgs a = adamw_step_args(s);
  for (int k = 0; k < nr; k++) {
    size_t o = (size_t)r[k].start;
    adamw_host_loop(p + o, p_act ? p_act + o : NULL, g + o, m + o, v + o, (size_t)(r[k].end - r[k].start),
                    adamw_range_args(a, &r[k]));
  }
}

// --offload optim: on the CPU backend every shard is already in host memory.
void adamw_update_host(KernelCtx* ctx, float* p, const float* g, float* m, float* v, size_t n, AdamWArgs a) {
  adamw_host_loop(p, NULL, g, m, v, n, a);
}
