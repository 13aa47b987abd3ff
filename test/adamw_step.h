// adamw_step.h: an AdamWStep (kernels/kernels.h) from by-value arguments, an update with its
// bias corrections, as the tests write an optimizer step.
#ifndef FSDP_TEST_ADAMW_STEP_H
#define FSDP_TEST_ADAMW_STEP_H
#include "kernels/kernels.h"

static inline AdamWStep adamw_step_of(AdamWArgs a) {
  AdamWStep s = {.lr = a.lr, .beta1 = a.beta1, .beta2 = a.beta2, .eps = a.eps, .weight_decay = a.weight_decay,
                 .grad_scale = a.grad_scale, .bc1 = adamw_bias_correction(a.beta1, a.step),
                 .bc2 = adamw_bias_correction(a.beta2, a.step), .step = a.step, .update = 1};
  return s;
}
#endif
