// kernels_cuda.h: the CUDA backend's few entry points beyond kernels.h, for host C code of
// the CUDA build (kernels/cuda/device.c, test/gpu/). Plain C: no CUDA headers needed.
#ifndef FSDP_KERNELS_CUDA_H
#define FSDP_KERNELS_CUDA_H
#include <stddef.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

// The streams of the live context (the one kernels_init created), as cudaStream_t:
//   0 compute (every kernel of kernels.h), 1 all-gather, 2 reduce-scatter
// (the values of kernels/device.h's StreamId). kernels_init creates all three at start-up, so
// the FSDP runtime's streams exist before its first event. Aborts with a message when called
// before kernels_init.
void* kernels_cuda_stream(int which);
// Keeps stream `which` busy for `seconds` (a one-thread kernel that waits on the GPU timer):
// kernels/cuda/device.c's device_delay, the simulated link's stand-in for a collective.
void kernels_cuda_delay(int which, double seconds);

// attention.cu and classifier.cu: opt their kernels into the shared memory they launch with, up
// to what ctx's device allows a block (kernels_init calls them once, so no launch sets
// attributes).
void attention_init(const KernelCtx* ctx);
void classifier_init(const KernelCtx* ctx);
// The fused attention kernels as the kernel report lists them: up to `max` entries of name
// ("attn_fwd_kernel<64, true>", the template arguments as c++filt prints them), threads per
// block and dynamic shared memory, the bias variants at the given max_distance. No CUDA call.
int attention_kernel_table(char (*names)[48], int* threads, size_t* smem, int max, int max_distance);

// matmul.cu: the GELU epilogue (matmul_forward_gelu, matmul_backward_gelu) on or off (on by
// default; off, the plain product and the GELU kernel, as where cuBLASLt has no algorithm for
// it), and whether the GELU products of a layer of N rows, C -> OC fuse it here, forward and
// backward (1 fused, 0 not: no algorithm, -1 not: turned off), for the start-up table.
void matmul_gelu_epilogue(int on);
void matmul_gelu_fuses(KernelCtx* ctx, int N, int C, int OC, int has_bias, int* forward_fuses, int* backward_fuses);

#ifdef __cplusplus
}
#endif
#endif
