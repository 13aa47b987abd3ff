// position.cu: T5's relative position bucket on the host of the CUDA backend (the attention
// kernels evaluate the same kernels/position_bucket.h on the device, attention.cu).
#include "kernels/cuda/common.cuh"
#include "kernels/position_bucket.h"

extern "C" int relative_position_bucket(int relative_position, int bidirectional, int num_buckets,
                                        int max_distance) {
  return position_bucket(relative_position, bidirectional, num_buckets, max_distance);
}
