// schedule_lr.c: the learning-rate schedule.
#include <math.h>

#include "train/train.h"

// Linear warmup to the peak, then cosine decay to lr_final_frac of the peak (GPT-3 paper).
float learning_rate(const Options* o, int step) {
  if (step < o->warmup) return o->lr * (step + 1) / o->warmup;
  int decay_steps = o->steps - o->warmup;
  if (decay_steps <= 1) return o->lr;
  float progress = (float)(step - o->warmup) / (float)(decay_steps - 1);
  float cosine = 0.5f * (1.0f + cosf(3.14159265358979f * progress));
  return o->lr * (o->lr_final_frac + (1.0f - o->lr_final_frac) * cosine);
}

