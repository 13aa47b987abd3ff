// position.c: T5's relative position bias, fp32 CPU.
#include <math.h>

#include "kernels/kernels.h"

// The bucket of a relative position (key minus query). Half the buckets (or all, one-
// directional) hold exact small distances, the rest log-spaced distances up to max_distance.
// The log is taken in fp32 and truncated, as T5's reference implementation does, so the
// buckets agree at every boundary.
int relative_position_bucket(int relative_position, int bidirectional, int num_buckets, int max_distance) {
  int bucket = 0, n;
  if (bidirectional) {
    num_buckets /= 2;
    if (relative_position > 0) bucket += num_buckets;
    n = relative_position < 0 ? -relative_position : relative_position;
  } else {
    n = relative_position < 0 ? -relative_position : 0;  // only keys before the query count
  }
  int max_exact = num_buckets / 2;
  if (n < max_exact) return bucket + n;
  float scaled = logf((float)n / (float)max_exact) / (float)log((double)max_distance / max_exact) *
                 (float)(num_buckets - max_exact);
  int large = max_exact + (int)scaled;
  if (large > num_buckets - 1) large = num_buckets - 1;
  return bucket + large;
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
