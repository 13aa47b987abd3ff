// position.c: T5's relative position bucket on the CPU backend (the attention adds the bias
// itself, kernels/cpu/attention.c).
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/position_bucket.h"

// The body lives in kernels/position_bucket.h, shared with the CUDA kernels.
int relative_position_bucket(int relative_position, int bidirectional, int num_buckets, int max_distance) {
  return position_bucket(relative_position, bidirectional, num_buckets, max_distance);
}
