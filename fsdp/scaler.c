// scaler.c: the sharded gradient scaler, dynamic loss scaling for 16-bit gradients: the host's
// record of it.
//
// The loss gradient is multiplied by the scale S before backward, so that small gradients
// survive a narrow format; the optimizer divides by S again (folded into AdamW's grad_scale,
// beside clipping). Whether a step overflowed is decided the same on every rank, from the
// global gradient norm, whose one all-reduce already spans every shard (fsdp_norm_words). The
// policy (mixed-precision training, Micikevicius et al. 2018, section 3.2; PyTorch's GradScaler)
// runs on the device with the step's other decisions (kernels/step_control.h), so the host never
// waits for a step's verdict; the host keeps this record of S for checkpoints and the step lines,
// brought up to date by each step's outcome (train/step.c).
#include "fsdp/fsdp.h"

void scaler_init(LossScaler* s, double scale, int dynamic, int window) {
  s->scale = scale;
  s->dynamic = dynamic;
  s->window = window;
  s->good = 0;
}
