// embedding.c: token (+ optional position) embedding lookup and its backward, fp32 CPU.
#include "kernels/cpu/parallel.h"
#include "kernels/kernels.h"

// Channels are handed out in blocks of this many so the backward's inner loop is a
// contiguous, vectorizable run while each channel still belongs to exactly one thread.
#define EMB_CBLOCK 64

void embedding_forward(KernelCtx* ctx, act_t* out, const int32_t* tokens, const act_t* wte,
                       const act_t* wpe, int N, int T, int C) {
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH((size_t)N * C))
  for (int n = 0; n < N; n++) {
    const float* te = wte + (size_t)tokens[n] * C;
    float* o = out + (size_t)n * C;
    if (wpe) {
      const float* pe = wpe + (size_t)(n % T) * C;
      for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
    } else {
      for (int c = 0; c < C; c++) o[c] = te[c];
    }
  }
}

// Two rows may share a token id, so rows cannot be split across threads without a race.
// Instead each thread owns a block of channels and walks every row in increasing n: the
// summation order of each dwte/dwpe element is then fixed whatever the thread count.
void embedding_backward(KernelCtx* ctx, float* dwte, float* dwpe, const act_t* dout,
                        const int32_t* tokens, int N, int T, int C) {
  int nblocks = (C + EMB_CBLOCK - 1) / EMB_CBLOCK;
#pragma omp parallel for schedule(static) if (PARALLEL_WORTH((size_t)N * C))
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * EMB_CBLOCK;
    int c1 = c0 + EMB_CBLOCK < C ? c0 + EMB_CBLOCK : C;
    for (int n = 0; n < N; n++) {
      const float* d = dout + (size_t)n * C;
      float* tw = dwte + (size_t)tokens[n] * C;
      for (int c = c0; c < c1; c++) tw[c] += d[c];
      if (dwpe) {
        float* pw = dwpe + (size_t)(n % T) * C;
        for (int c = c0; c < c1; c++) pw[c] += d[c];
      }
    }
  }
}
