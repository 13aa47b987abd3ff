// schedule_lr.c: the learning-rate schedule and the wall clock.
#include <math.h>
#include <time.h>

#include "train/train.h"

double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Linear warmup to the peak, then cosine decay to lr_final_frac of the peak (GPT-3 paper).
float learning_rate(const Options* o, int step) {
  if (step < o->warmup) return o->lr * (step + 1) / o->warmup;
  int decay_steps = o->steps - o->warmup;
  if (decay_steps <= 1) return o->lr;
  float progress = (float)(step - o->warmup) / (float)(decay_steps - 1);
  float cosine = 0.5f * (1.0f + cosf(3.14159265358979f * progress));
  return o->lr * (o->lr_final_frac + (1.0f - o->lr_final_frac) * cosine);
}

