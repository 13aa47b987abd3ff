// step_control.h: what a training step decides on the device, so the host never waits inside
// a step (train/step.c): the step's loss and global gradient norm, whether it may update the
// parameters (a non-finite loss or norm skips it on every rank), the loss scale's next value,
// the clip scale, and the stop after --max-bad-steps bad steps. The host fills the step's inputs
// (learning rate, bias corrections, token count) through an asynchronous copy and reads the
// outcome once, one step later. The functions below are the one home of that arithmetic: the
// CPU backend calls them on the host, the CUDA backend from one-thread kernels
// (kernels/cuda/step.cu), with the same double-precision operations, so both decide alike.
//
// Loss scaling (mixed-precision training, Micikevicius et al. 2018, section 3.2; the policy of
// PyTorch's GradScaler): the loss gradient is multiplied by the scale S before backward and
// AdamW divides by it again (folded into grad_scale, beside clipping). A non-finite gradient
// norm under a dynamic scale is an overflow: the step is skipped and S halves; `window` finite
// steps in a row double it. With S a power of two, scaling is exact: a run without overflow has
// the same bits as one without a scaler.
#ifndef FSDP_KERNELS_STEP_CONTROL_H
#define FSDP_KERNELS_STEP_CONTROL_H
#include <math.h>
#include <stdint.h>

#include "kernels/exact_sum.h"
#include "kernels/kernels.h"

#define LOSS_SCALE_MIN 1.0
#define LOSS_SCALE_MAX 16777216.0        // 2^24
#define LOSS_SCALE_DYNAMIC_INIT 65536.0  // 2^16, where a dynamic scale starts (as PyTorch's GradScaler)

#ifdef __CUDACC__
#define STEP_FN static __host__ __device__ inline
#else
#define STEP_FN static inline
#endif

// What the host knows of a step before it runs, copied to the device with the step's work.
typedef struct {
  // Summed over the ranks on the device before step_prepare, in one all-reduce: this rank's
  // target tokens (T5: its valid ones), and the stop signals it had seen when the step was queued
  // (train/signals.c), so that every rank learns of them with the step's outcome.
  int64_t tokens, stop_signals;
  float lr, bc1, bc2;      // the learning rate; AdamW's bias corrections for this step
  int step;                // 1-based
} StepInputs;

// One step's control values, where the backend keeps its data (device memory on CUDA).
struct StepControl {
  // Constants of the run.
  float grad_clip;         // global-norm clipping (0: none)
  int dynamic, window;     // the loss scale is dynamic; finite steps in a row before it doubles
  int max_bad_steps;       // the run stops at this many bad steps
  StepInputs in;           // this step's, from the host
  int64_t tokens;          // in.tokens, once summed
  AdamWStep adamw;         // AdamW's constants (from the host, once), this step's lr, step and bias
                           // corrections (step_prepare), grad_scale and update (step_control_decide)
  // The loss scaler's state, kept on the device from step to step.
  double scale;            // the loss scale S
  int good;                // finite steps in a row toward doubling S
  int bad_steps;           // bad steps so far (counted toward max_bad_steps)
  int stopped;             // the max_bad_steps-th bad step happened: no later step changes anything
  // Set by step_prepare: the loss gradient of one target token, S / tokens.
  float dloss;
  // The decision (step_decide).
  double loss, norm;       // mean loss per target token; global L2 norm of the unscaled gradient
  double step_scale;       // the S this step ran with
  int overflow, bad;       // a dynamic scale's overflow; a skipped step that counts toward the stop
  int nonfinite_unit;      // the first unit whose gradient held a NaN or inf on any rank, -1
};

// Before the step's first forward: its inputs in place, and the loss gradient of one token.
STEP_FN void step_control_prepare(StepControl* c) {
  c->tokens = c->in.tokens;
  c->adamw.lr = c->in.lr, c->adamw.bc1 = c->in.bc1, c->adamw.bc2 = c->in.bc2, c->adamw.step = c->in.step;
  c->dloss = (float)(c->scale / (double)c->tokens);
}

// The global norm's words, from each unit's exact sum of squares (NORM_WORDS each, exact_sum's
// output): out[0, EXACT_WORDS) their total (normalized), out[EXACT_WORDS + u] 1 when unit u held a
// non-finite value. These are then summed over the ranks (integer sums: any order, the same bits)
// before step_control_decide reads them.
STEP_FN void step_control_norm_words(int64_t* out, int64_t* unit_words, int nunits) {
  int64_t* total = out;
  int64_t* bad = out + EXACT_WORDS;
  for (int k = 0; k < EXACT_WORDS; k++) total[k] = 0;
  for (int u = 0; u < nunits; u++) {
    int64_t* w = unit_words + (int64_t)u * NORM_WORDS;
    exact_normalize(w);
    for (int k = 0; k < EXACT_WORDS; k++) total[k] += w[k];
    exact_normalize(total);
    bad[u] = w[EXACT_WORDS] != 0;
  }
}

// The gradient scale of global-norm clipping, as torch.nn.utils.clip_grad_norm_:
// clip / (norm + 1e-6) when that is below 1, else 1 (and 1 when clip <= 0: no clipping).
STEP_FN float step_control_clip_scale(double norm, float clip) {
  return clip > 0 && norm + 1e-6 > clip ? (float)(clip / (norm + 1e-6)) : 1.0f;
}

// The first unit whose non-finite flag (after the exact words) is set, -1 when none.
STEP_FN int step_control_first_nonfinite(const int64_t* norm_words, int nunits) {
  for (int u = 0; u < nunits; u++)
    if (norm_words[EXACT_WORDS + u]) return u;
  return -1;
}

// The step's verdict from its loss sum over all ranks and the norm's words over all ranks (the
// same values on every rank, so every rank decides alike): the loss and the unscaled norm, update
// or skip, the loss scale's next value, AdamW's grad_scale, and the stop. The loss sum, once
// read, is set to 0 for the next step's micro-batches to add into.
STEP_FN void step_control_decide(StepControl* c, double* loss_sum, int64_t* norm_words, int nunits) {
  exact_normalize(norm_words);
  c->nonfinite_unit = step_control_first_nonfinite(norm_words, nunits);
  double scale = c->scale;
  c->step_scale = scale;
  c->loss = *loss_sum / (double)c->tokens;
  *loss_sum = 0.0;
  c->norm = (c->nonfinite_unit >= 0 ? NAN : sqrt(exact_value(norm_words))) / scale;  // exact for powers of two
  int finite_loss = isfinite(c->loss), finite = finite_loss && isfinite(c->norm);
  c->adamw.update = finite && !c->stopped;
  c->overflow = c->dynamic && finite_loss && !isfinite(c->norm);
  // Overflows are how a dynamic scale finds its level; they count only once it is at its floor.
  c->bad = !finite && (!c->overflow || scale <= LOSS_SCALE_MIN);
  c->adamw.grad_scale = finite ? (float)(step_control_clip_scale(c->norm, c->grad_clip) / scale) : 0.0f;
  if (c->stopped) return;  // a step queued after the stop: the scaler and the counts stay
  if (c->dynamic && finite_loss) {
    if (!finite) {
      c->scale = scale / 2 > LOSS_SCALE_MIN ? scale / 2 : LOSS_SCALE_MIN;
      c->good = 0;
    } else if (++c->good >= c->window) {
      c->scale = scale * 2 < LOSS_SCALE_MAX ? scale * 2 : LOSS_SCALE_MAX;
      c->good = 0;
    }
  }
  if (c->bad && ++c->bad_steps >= c->max_bad_steps) c->stopped = 1;
}
#endif
