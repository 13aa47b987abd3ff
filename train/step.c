// step.c: one optimizer step, the one home of its sequence. train_gpt.c's loop and the
// timeline backend (predict/predict.c) both call train_step, so --predict models the calls a
// real step makes.
//
//   the step's inputs (learning rate, bias corrections, tokens, stop signals) copied to the device; per
//   micro-step: load the micro-batch into pinned memory, copy it to the model, forward (unshard,
//   compute, loss), backward (unshard, compute, reduce-scatter); then the loss sum and the gradient
//   norm's words summed over the ranks, the step's verdict, AdamW on every shard (or a skip on
//   every rank), and the copy of its outcome to pinned memory.
//
// The host never waits inside a step: every value the step decides on (the loss, the norm,
// whether to update, the clip and loss scales, AdamW's scalars) is made and read on the device
// (kernels/step_control.h), and the micro-batches upload asynchronously from pinned buffers, one
// set per step parity. The host reads a step's outcome once, after it has queued the next step
// (train_step_result): the queue never drains between steps. The set of parity p was last read by
// step s - 2, whose outcome the host read before it queued step s - 1, so the host never writes a
// buffer a copy may still be reading.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "infra/dist.h"
#include "train/train.h"

// Micro-batch j of this step on this rank is the step's micro-batch number j*W + rank, so rank
// r reads micro-batches r, r+W, ... and W ranks see what one rank with W*A micro-steps sees.
static void load_micro_batch(const StepData* d, const RunShape* s, int step, int j, int rank) {
  if (d->stream) batch_load(d->batch, d->stream, (int64_t)step * s->M + (int64_t)j * s->W + rank);
}

void step_batch(const StepIO* io, Batch* b, int step, int j) {
  int32_t* at = io->batches[step & 1] + (size_t)j * io->batch_ints;
  size_t n = (size_t)b->B * b->T;
  b->inputs = at, b->targets = at + n, b->enc = at + 2 * n;
}

void step_plan(StepIO* io, MemPlan* p, const RunShape* s, int t5) {
  memset(io, 0, sizeof *io);
  io->A = s->A;
  io->batch_ints = (size_t)s->B * s->T * 2 + (t5 ? (size_t)s->B * s->Te : 0);
  memplan_add(p, "workspace", "step control", STEP_CONTROL_BYTES, (void**)&io->ctl);
  memplan_add_host(p, "workspace", "step inputs and outcomes (2 x 2)", 4 * STEP_CONTROL_BYTES, &io->host_control);
  char name[48];
  snprintf(name, sizeof name, "micro-batches (2 x %d)", s->A);
  memplan_add_host(p, "workspace", name, 2 * (size_t)s->A * io->batch_ints * sizeof(int32_t), &io->host_batches);
}

_Static_assert(sizeof(StepControl) <= STEP_CONTROL_BYTES && sizeof(StepInputs) <= STEP_CONTROL_BYTES,
               "STEP_CONTROL_BYTES: room for a StepControl and a StepInputs");

void step_start(StepIO* io, const Options* o, const LossScaler* scaler) {
  for (int k = 0; k < 2; k++) {
    io->in[k] = (StepInputs*)((char*)io->host_control + (2 * k) * STEP_CONTROL_BYTES);
    io->out[k] = (StepControl*)((char*)io->host_control + (2 * k + 1) * STEP_CONTROL_BYTES);
    io->batches[k] = (int32_t*)io->host_batches + (size_t)k * io->A * io->batch_ints;
    io->begun[k] = device_event_create_timed();
    io->done[k] = device_event_create_timed();
  }
  StepControl c;
  memset(&c, 0, sizeof c);
  c.grad_clip = o->grad_clip;
  c.dynamic = scaler->dynamic, c.window = scaler->window;
  c.max_bad_steps = o->max_bad_steps;
  c.adamw = (AdamWStep){.beta1 = o->beta1, .beta2 = o->beta2, .eps = o->adam_eps, .weight_decay = o->weight_decay};
  c.scale = scaler->scale, c.good = scaler->good;
  c.nonfinite_unit = -1;
  device_copy_to_device(io->ctl, &c, sizeof c);
}

void train_step(FSDP* fs, Model* m, const StepData* d, const RunShape* s, int step, float lr, const Options* o,
                StepIO* io) {
  int rank = fs->world_rank, t5 = d->batch->t5, parity = step & 1;
  Batch* b = d->batch;
  device_step_begin(step + 1);
  device_event_record(io->begun[parity], STREAM_COMPUTE);
  fsdp_begin_step(fs, s->A);
  // The step's inputs. Loss gradients are scaled by 1 / (the step's valid target tokens over all
  // ranks); with T5's padded targets that count varies, so it is summed over the ranks on the
  // device before any backward (the micro-batches load first, into this step's pinned set).
  StepInputs* in = io->in[parity];
  in->step = step + 1;
  in->lr = lr;
  in->bc1 = adamw_bias_correction(o->beta1, step + 1), in->bc2 = adamw_bias_correction(o->beta2, step + 1);
  in->tokens = (int64_t)s->A * s->B * s->T;
  if (t5) {
    in->tokens = 0;
    for (int j = 0; j < s->A; j++) {
      step_batch(io, b, step, j);
      load_micro_batch(d, s, step, j, rank);
      in->tokens += batch_valid_targets(b);
    }
  }
  in->stop_signals = stop_signal_word();
  device_copy_async(&io->ctl->in, in, sizeof *in, STREAM_COMPUTE);
  comm_all_reduce(fs->world, &io->ctl->in.tokens, 2, DT_I64);  // tokens and stop signals, over the ranks
  step_prepare(fs->kctx, io->ctl);
  for (int j = 0; j < s->A; j++) {
    step_batch(io, b, step, j);
    if (!t5) load_micro_batch(d, s, step, j, rank);
    batch_to_model(b, m);
    fsdp_begin_forward(fs, j, 1);
    model_forward_accumulate(m, &io->ctl->dloss);
    model_backward(m);
  }
  // The guard: the loss and the norm are summed over the ranks, so every rank decides alike, and
  // a step with a NaN or inf skips its update on every rank before it can reach the shards (and
  // from them a checkpoint).
  comm_all_reduce(fs->world, m->loss_sum, 1, DT_F64);
  if (step + 1 == o->inject_step && rank == o->inject_rank) fsdp_poison_grad(fs, o->inject_unit);
  fsdp_norm_words(fs);
  step_decide(fs->kctx, io->ctl, m->loss_sum, fs->norm.total, fs->nunits);
  fsdp_adamw_step(fs, &io->ctl->adamw);
  device_copy_async(io->out[parity], io->ctl, sizeof(StepControl), STREAM_COMPUTE);
  device_event_record(io->done[parity], STREAM_COMPUTE);
  device_step_end(step + 1);
}

StepResult train_step_result(StepIO* io, int step) {
  device_event_synchronize(io->done[step & 1]);
  const StepControl* c = io->out[step & 1];
  StepResult r = {.step = c->in.step, .loss = c->loss, .norm = c->norm, .tokens = (double)c->tokens,
                  .scale = c->step_scale, .next_scale = c->scale, .good = c->good, .lr = c->in.lr,
                  .update = c->adamw.update, .overflow = c->overflow, .bad = c->bad, .bad_steps = c->bad_steps,
                  .stopped = c->stopped, .nonfinite_unit = c->nonfinite_unit, .stop_signals = c->in.stop_signals,
                  .seconds = device_event_seconds(io->begun[step & 1], io->done[step & 1])};
  return r;
}
