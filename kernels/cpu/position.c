// position.c: T5's relative position bias, fp32 CPU.
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/position_bucket.h"

// The body lives in kernels/position_bucket.h, shared with the CUDA kernels.
int relative_position_bucket(int relative_position, int bidirectional, int num_buckets, int max_distance) {
  return position_bucket(relative_position, bidirectional, num_buckets, max_distance);
}

void relative_bias_forward(KernelCtx* ctx, act_t* bias, const act_t* table, int H, int Tq, int Tk,
                           int bidirectional, int num_buckets, int max_distance) {
  (void)ctx;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < Tq; i++)
    for (int j = 0; j < Tk; j++) {
      int b = relative_position_bucket(j - i, bidirectional, num_buckets, max_distance);
      for (int h = 0; h < H; h++) bias[((size_t)h * Tq + i) * Tk + j] = table[(size_t)b * H + h];
    }
}

// One thread per head: it walks (i, j) in order, so each bucket's sum has a fixed order.
void relative_bias_backward(KernelCtx* ctx, float* dtable, const float* dbias, int H, int Tq, int Tk,
                            int bidirectional, int num_buckets, int max_distance) {
  (void)ctx;
#pragma omp parallel for schedule(static)
  for (int h = 0; h < H; h++) {
    float acc[256] = {0};  // num_buckets is at most 256 (T5 uses 32)
    for (int i = 0; i < Tq; i++)
      for (int j = 0; j < Tk; j++)
        acc[relative_position_bucket(j - i, bidirectional, num_buckets, max_distance)] +=
            dbias[((size_t)h * Tq + i) * Tk + j];
    for (int b = 0; b < num_buckets && b < 256; b++) dtable[(size_t)b * H + h] += acc[b];
  }
}
