// scaler.c: the sharded gradient scaler, dynamic loss scaling for 16-bit gradients.
//
// The loss gradient is multiplied by the scale S before backward, so that small gradients
// survive a narrow format; the optimizer divides by S again (folded into AdamW's grad_scale,
// beside clipping). Whether a step overflowed is decided the same on every rank, from the
// global gradient norm, whose one all-reduce already spans every shard (fsdp_grad_norm): a
// non-finite norm skips the step everywhere and halves S; `window` finite steps in a row double
// it (mixed-precision training, Micikevicius et al. 2018, section 3.2; the policy of PyTorch's
// GradScaler). With S a power of two, scaling is exact: a run without overflow has the same bits
// as one without a scaler.
#include "fsdp/fsdp.h"

void scaler_init(LossScaler* s, double scale, int dynamic, int window) {
  s->scale = scale;
  s->dynamic = dynamic;
  s->window = window;
  s->good = 0;
}

int scaler_update(LossScaler* s, int finite) {
  if (!s->dynamic) return finite;
  if (!finite) {
    s->scale = s->scale / 2 > LOSS_SCALE_MIN ? s->scale / 2 : LOSS_SCALE_MIN;
    s->good = 0;
    return 0;
  }
  if (++s->good >= s->window) {
    s->scale = s->scale * 2 < LOSS_SCALE_MAX ? s->scale * 2 : LOSS_SCALE_MAX;
    s->good = 0;
  }
  return 1;
}
