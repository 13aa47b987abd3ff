// kernels_cuda.h: the CUDA backend's few entry points beyond kernels.h, for host C code of
// the CUDA build (fsdp/device_cuda.c, test/gpu/). Plain C: no CUDA headers needed.
#ifndef FSDP_KERNELS_CUDA_H
#define FSDP_KERNELS_CUDA_H
#include <stddef.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

// The streams of the live context (the one kernels_init created), as cudaStream_t:
//   0 compute (every kernel of kernels.h), 1 all-gather, 2 reduce-scatter
// (the values of fsdp/device.h's StreamId). kernels_init creates all three at start-up, so
// the FSDP runtime's streams exist before its first event. Aborts with a message when called
// before kernels_init.
void* kernels_cuda_stream(int which);
// Keeps stream `which` busy for `seconds` (a one-thread kernel that waits on the GPU timer):
// fsdp/device_cuda.c's device_delay, the simulated link's stand-in for a collective.
void kernels_cuda_delay(int which, double seconds);

// (matmul_forward_gelu, with GELU in the cuBLASLt epilogue, is in kernels.h.)

#ifdef __cplusplus
}
#endif
#endif
