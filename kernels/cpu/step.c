// step.c: the step's decisions (kernels/step_control.h) on the CPU backend, where the
// backend's memory is the host's: the arithmetic of step_control.h, called directly.
#include "kernels/kernels.h"
#include "kernels/step_control.h"

void step_prepare(KernelCtx* ctx, StepControl* c) {
  (void)ctx;
  step_control_prepare(c);
}

void grad_norm_words(KernelCtx* ctx, int64_t* out, int64_t* unit_words, int nunits) {
  (void)ctx;
  step_control_norm_words(out, unit_words, nunits);
}

void step_decide(KernelCtx* ctx, StepControl* c, double* loss_sum, int64_t* norm_words, int nunits) {
  (void)ctx;
  step_control_decide(c, loss_sum, norm_words, nunits);
}
