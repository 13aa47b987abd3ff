// optimizer.c: sharded AdamW, the global gradient norm, whole-model reads of the shards, and the
// loss scaler's host record.
//
// Each rank updates only its shard (ZeRO-3 / FSDP: optimizer state is sharded like the
// parameters); where the shard is the whole unit, also its 16-bit working copy (fsdp/schedule.c). Weight decay follows the parameter table through the shard's decay segments,
// so per-parameter groups survive flattening ("Rethinking FSDP": use_orig_params).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "fsdp/fsdp.h"
#include "kernels/exact_sum.h"
#include "kernels/step_control.h"

// One unit's part of the norm: sums of squares per NORM_BLOCK block of its shard, combined
// exactly into its words (kernels/exact_sum.h).
void fsdp_unit_sumsq(FSDP* fs, KernelCtx* k, int u, const float* g) {
  Unit* U = &fs->units[u];
  block_sumsq(k, fs->norm.blocks, g, U->shard);
  exact_sum(k, fs->norm.words + (size_t)u * NORM_WORDS, fs->norm.blocks, (size_t)U->shard / NORM_BLOCK);
}

// Global L2 norm of the gradient. Sums of squares are taken per NORM_BLOCK block of the flat
// layout (blocks never straddle a shard: shards are multiples of SHARD_ALIGN) and combined
// exactly (kernels/exact_sum.h), so the norm has the same bits for every world size and
// strategy. Replicas hold identical shards, so only the shard group is summed; their non-finite
// flags are summed over the replicas too, since a fault on one replica alone would make the
// ranks decide differently.
void fsdp_norm_words(FSDP* fs) {
  // The gradient shards are complete once every unit's reduction has finished.
  for (int u = 0; u < fs->nunits; u++) device_stream_wait_timed(STREAM_COMPUTE, fs->units[u].grad_reduced);
  // Each unit's exact sum stays where the gradient is. A gradient shard in host memory (--offload
  // grads) was summed on the device as its last reduction sent it there (fsdp/schedule.c), so it
  // does not cross PCIe again here.
  if (!(fs->opt.offload & OFFLOAD_GRADS))
    for (int u = 0; u < fs->nunits; u++) fsdp_unit_sumsq(fs, fs->kctx, u, fs->units[u].grad);
  grad_norm_words(fs->kctx, fs->norm.total, fs->norm.words, fs->nunits);
  // One all-reduce carries the exact sum and, after it, one flag per unit, on the communicators'
  // stream; the compute stream waits for it before the step's decision reads it.
  device_event_record(fs->norm.combined, STREAM_COMPUTE);
  device_stream_wait(STREAM_REDUCE_SCATTER, fs->norm.combined);
  comm_all_reduce(fs->shard_group, fs->norm.total, EXACT_WORDS + (size_t)fs->nunits, DT_I64);
  if (fs->replicas > 1) comm_all_reduce(fs->replica_group, fs->norm.total + EXACT_WORDS, (size_t)fs->nunits, DT_I64);
  device_event_record(fs->norm.reduced, STREAM_REDUCE_SCATTER);
  device_stream_wait(STREAM_COMPUTE, fs->norm.reduced);
}

double fsdp_grad_norm(FSDP* fs) {
  fsdp_norm_words(fs);
  int64_t* words = fs->norm.host;
  device_copy_to_host(words, fs->norm.total, (EXACT_WORDS + (size_t)fs->nunits) * sizeof(int64_t));
  exact_normalize(words);
  return step_control_first_nonfinite(words, fs->nunits) >= 0 ? NAN : sqrt(exact_value(words));
}

// Zeroes unit U's gradient shard where it lives (after device_synchronize when on the host).
static void zero_grad_shard(FSDP* fs, Unit* U) {
  if (fs->opt.offload & OFFLOAD_GRADS) device_host_zero(U->grad, (size_t)U->shard * sizeof(float));
  else fill_zero_f32(fs->kctx, U->grad, U->shard);
}

void fsdp_poison_grad(FSDP* fs, int u) {
  Unit* U = &fs->units[u];
  device_stream_wait(STREAM_COMPUTE, fs->units[u].grad_reduced);
  device_synchronize();
  float nan = NAN;
  device_copy_to_device(U->grad + U->shard / 2, &nan, sizeof nan);
  if (fs->opt.offload & OFFLOAD_GRADS) {  // its sum was taken as it left the device: take it again
    device_copy_to_device(fs->offload.grad_acc, U->grad, (size_t)U->shard * sizeof(float));
    fsdp_unit_sumsq(fs, fs->kctx, u, fs->offload.grad_acc);
    device_synchronize();
  }
}

// Queues unit U's shards that live across PCIe from the step into staging pair k, on the copy
// stream. The pair was last read by the unit two before, whose copy back (or, on the device,
// whose update: step_updated) is ordered before this on the same stream.
static void stage_in(FSDP* fs, const Unit* U, int k, int p_away, int g_away) {
  size_t bytes = (size_t)U->shard * sizeof(float);
  if (p_away) device_copy_async(fs->offload.step_master[k], U->master, bytes, STREAM_COPY);
  if (g_away) device_copy_async(fs->offload.step_grad[k], U->grad, bytes, STREAM_COPY);
  device_event_record(fs->offload.step_in[k], STREAM_COPY);
}

void fsdp_adamw_step(FSDP* fs, const AdamWStep* step) {
  int m0 = trace_mark(fs->trace, TRACK_COMPUTE);
  // --offload: the step runs where AdamW's state lives (the host with optim, ZeRO-Offload), and
  // a master or gradient shard kept on the other side crosses PCIe for it. Two units are in
  // flight: while one updates, the next one's shards come over and the last one's master goes
  // back, on the copy stream, so PCIe hides behind the update instead of adding to it.
  int off = fs->opt.offload, on_host = !!(off & OFFLOAD_OPTIM);
  int p_away = !!(off & OFFLOAD_PARAMS) != on_host, g_away = !!(off & OFFLOAD_GRADS) != on_host;
  int staged = p_away || g_away;
  if (off & (OFFLOAD_PARAMS | OFFLOAD_OPTIM | OFFLOAD_GRADS)) device_synchronize();  // host memory is read below
  // The host AdamW needs the step's scalars on the host: decided on the device, read once here.
  AdamWStep host_step = {0};
  if (on_host) device_copy_to_host(&host_step, step, sizeof host_step);
  AdamWArgs args = adamw_step_args(&host_step);
  if (staged) stage_in(fs, &fs->units[0], 0, p_away, g_away);
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    int k = u & 1;
    float *p = U->master, *g = U->grad;
    if (staged) {
      if (u + 1 < fs->nunits) stage_in(fs, &fs->units[u + 1], !k, p_away, g_away);
      if (on_host) device_event_synchronize(fs->offload.step_in[k]);
      else device_stream_wait(STREAM_COMPUTE, fs->offload.step_in[k]);
      if (p_away) p = fs->offload.step_master[k];
      if (g_away) g = fs->offload.step_grad[k];
    }
    if (on_host && host_step.update) {
      for (int s = 0; s < U->nseg; s++) {
        const AdamWRange* r = &U->segs[s];
        size_t o = (size_t)r->start, n = (size_t)(r->end - r->start);
        adamw_update_host(fs->kctx, p + o, g + o, U->m + o, U->v + o, n, adamw_range_args(args, r));
      }
      U->work_stale = 1;  // (a working copy is cast again at its next unshard)
    } else if (!on_host) {
      // The whole unit at once, and its 16-bit working copy (when the shard is the whole unit)
      // written with the master, so the next forward reads it without a cast; nothing when the
      // step was skipped (step->update, read by the kernel).
      adamw_update_ranges(fs->kctx, p, U->work, g, U->m, U->v, U->segs, U->nseg, step);
    }
    if (staged && !on_host) {  // the copy stream may overwrite or send back pair k once it is updated
      device_event_record(fs->offload.step_updated[k], STREAM_COMPUTE);
      device_stream_wait(STREAM_COPY, fs->offload.step_updated[k]);
    }
    if (p_away) device_copy_async(U->master, p, (size_t)U->shard * sizeof(float), STREAM_COPY);
    // A host gradient shard is zeroed by the host: its copy in must have read it.
    if (g_away && !on_host) device_event_synchronize(fs->offload.step_in[k]);
    zero_grad_shard(fs, U);
  }
  if (staged) {  // the next pass reads the masters once the last copy back is done
    device_event_record(fs->offload.step_out, STREAM_COPY);
    device_stream_wait(STREAM_COMPUTE, fs->offload.step_out);
  }
  device_event_record(fs->params_updated, STREAM_COMPUTE);
  trace_span(fs->trace, "optimizer", -1, TRACK_COMPUTE, m0, trace_mark(fs->trace, TRACK_COMPUTE));
}

void fsdp_gather_master(FSDP* fs, int unit, float* out) {
  Unit* U = &fs->units[unit];
  float* full = xmalloc((size_t)U->padded * sizeof(float), "gather staging");
  device_copy_to_host(full + (size_t)fs->shard_rank * U->shard, U->master, (size_t)U->shard * sizeof(float));
  comm_all_gather(fs->shard_group, full, U->shard, DT_F32);
  memcpy(out, full, (size_t)U->numel * sizeof(float));
  free(full);
}

// FNV-1a over the bytes of every live parameter element, units and parameters in order.
uint64_t fsdp_params_digest(FSDP* fs) {
  uint64_t h = 1469598103934665603ULL;
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    float* full = xmalloc((size_t)U->numel * sizeof(float), "digest staging");
    fsdp_gather_master(fs, u, full);
    for (int i = 0; i < U->nparams; i++) {
      const unsigned char* b = (const unsigned char*)(full + U->params[i].offset);
      for (size_t k = 0; k < (size_t)U->params[i].live * sizeof(float); k++) {
        h ^= b[k];
        h *= 1099511628211ULL;
      }
    }
    free(full);
  }
  return h;
}

// ---- the loss scaler ----------------------------------------------------------------------
// The sharded gradient scaler, dynamic loss scaling for 16-bit gradients: the host's record of it.
// The loss gradient is multiplied by the scale S before backward, so that small gradients
// survive a narrow format; the optimizer divides by S again (folded into AdamW's grad_scale,
// beside clipping). Whether a step overflowed is decided the same on every rank, from the
// global gradient norm, whose one all-reduce already spans every shard (fsdp_norm_words). The
// policy (mixed-precision training, Micikevicius et al. 2018, section 3.2; PyTorch's GradScaler)
// runs on the device with the step's other decisions (kernels/step_control.h), so the host never
// waits for a step's verdict; the host keeps this record of S for checkpoints and the step lines,
// brought up to date by each step's outcome (train/step.c).
void scaler_init(LossScaler* s, double scale, int dynamic, int window) {
  s->scale = scale;
  s->dynamic = dynamic;
  s->window = window;
  s->good = 0;
}
