// cpu_ref_check.c: compile-time check that test/gpu/cpu_ref.h declares exactly the functions of
// kernels.h with act_t = float. Built by the Makefile before the GPU test; any mismatch is a
// "conflicting types" error. The object contains nothing.
#include "kernels/kernels.h"  // built without FSDP_CUDA: act_t is float
#define CPU_REF_CHECK
#include "test/gpu/cpu_ref.h"

typedef char act_t_is_float[sizeof(act_t) == sizeof(float) ? 1 : -1];
