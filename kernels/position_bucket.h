// position_bucket.h: T5's relative position bucket, one body for both backends.
//
// kernels/cpu/position.c and kernels/cuda/position.cu both include this header, so the host
// function relative_position_bucket (kernels.h) and the buckets the CUDA kernels compute on
// the device are the same source, operation for operation.
//
// The bucket of a relative position (key minus query). Half the buckets (or all, one-
// directional) hold exact small distances, the rest log-spaced distances up to max_distance.
// The log is taken in fp32 and truncated, as T5's reference implementation does, so the
// buckets agree at every boundary.
#ifndef FSDP_POSITION_BUCKET_H
#define FSDP_POSITION_BUCKET_H
#include <math.h>

#ifdef __CUDACC__
#define POSITION_FN static __host__ __device__ inline
#else
#define POSITION_FN static inline
#endif

POSITION_FN int position_bucket(int relative_position, int bidirectional, int num_buckets, int max_distance) {
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
#endif
