// step.cu: the step's decisions (kernels/step_control.h) on the device: one thread each, so the
// host queues them with the step's other work and never waits for their values.
#include "kernels/cuda/common.cuh"
#include "kernels/step_control.h"

__global__ void step_prepare_kernel(StepControl* c) { step_control_prepare(c); }

__global__ void grad_norm_words_kernel(int64_t* out, int64_t* unit_words, int nunits) {
  step_control_norm_words(out, unit_words, nunits);
}

__global__ void step_decide_kernel(StepControl* c, double* loss_sum, int64_t* norm_words, int nunits) {
  step_control_decide(c, loss_sum, norm_words, nunits);
}

extern "C" void step_prepare(KernelCtx* ctx, StepControl* c) {
  step_prepare_kernel<<<1, 1, 0, ctx->stream>>>(c);
  CUDA_LAUNCH_CHECK();
}

extern "C" void grad_norm_words(KernelCtx* ctx, int64_t* out, int64_t* unit_words, int nunits) {
  grad_norm_words_kernel<<<1, 1, 0, ctx->stream>>>(out, unit_words, nunits);
  CUDA_LAUNCH_CHECK();
}

extern "C" void step_decide(KernelCtx* ctx, StepControl* c, double* loss_sum, int64_t* norm_words, int nunits) {
  step_decide_kernel<<<1, 1, 0, ctx->stream>>>(c, loss_sum, norm_words, nunits);
  CUDA_LAUNCH_CHECK();
}
