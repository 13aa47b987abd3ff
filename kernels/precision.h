// precision.h: the mixed-precision policy, in one place (FSDP paper section 3.4, "mixed
// precision"). The build chooses the 16-bit type the CUDA backend computes in, gathers parameters
// in and keeps activations in (act_t): bf16, or IEEE fp16 with `make PRECISION=fp16`
// (-DFSDP_FP16); the CPU backend is fp32 throughout. Master weights, gradient shards and AdamW
// state are fp32 in every build. fp16's narrow range is why that build starts with a dynamic loss
// scale (ACT_WANTS_LOSS_SCALE); the CUDA kernels' own switch is kernels/cuda/common.cuh's act16.
#ifndef FSDP_PRECISION_H
#define FSDP_PRECISION_H
#include <stddef.h>
#include <stdint.h>

// The element types of buffers and collectives.
typedef enum { DT_F32, DT_F64, DT_I64, DT_BF16, DT_F16 } DType;
static inline const char* dtype_name(DType t) {
  return t == DT_F32 ? "fp32" : t == DT_F64 ? "fp64" : t == DT_I64 ? "int64" : t == DT_BF16 ? "bf16" : "fp16";
}
static inline size_t dtype_size(DType t) { return t == DT_BF16 || t == DT_F16 ? 2 : t == DT_F32 ? 4 : 8; }

#if defined(FSDP_CUDA) && defined(FSDP_FP16)
typedef uint16_t act_t;  // fp16 bits; kernels reinterpret as __half
#define ACT_NAME "fp16"
#define ACT_DTYPE DT_F16
#define ACT_WANTS_LOSS_SCALE 1
#elif defined(FSDP_CUDA)
typedef uint16_t act_t;  // bf16 bits; kernels reinterpret as __nv_bfloat16
#define ACT_NAME "bf16"
#define ACT_DTYPE DT_BF16
#define ACT_WANTS_LOSS_SCALE 0
#else
typedef float act_t;
#define ACT_NAME "fp32"
#define ACT_DTYPE DT_F32
#define ACT_WANTS_LOSS_SCALE 0
#endif
#endif
