// optimizer.c: sharded AdamW, the global gradient norm, and whole-model reads of the shards.
//
// Each rank updates only its shard (ZeRO-3 / FSDP: optimizer state is sharded like the
// parameters). Weight decay follows the parameter table through the shard's decay segments,
// so per-parameter groups survive flattening ("Rethinking FSDP": use_orig_params).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp/dist.h"
#include "fsdp/fsdp.h"
#include "kernels/exact_sum.h"

// One unit's part of the norm: sums of squares per NORM_BLOCK block of its shard, combined
// exactly into its words (kernels/exact_sum.h).
void fsdp_unit_sumsq(FSDP* fs, KernelCtx* k, int u, const float* g) {
  Unit* U = &fs->units[u];
  block_sumsq(k, fs->norm_blocks, g, U->shard);
  exact_sum(k, fs->norm_words + (size_t)u * NORM_WORDS, fs->norm_blocks, (size_t)U->shard / NORM_BLOCK);
}

// Global L2 norm of the gradient. Sums of squares are taken per NORM_BLOCK block of the flat
// layout (blocks never straddle a shard: shards are multiples of SHARD_ALIGN) and combined
// exactly (kernels/exact_sum.h), so the norm has the same bits for every world size and
// strategy. Replicas hold identical shards, so only the shard group is summed.
double fsdp_grad_norm(FSDP* fs) {
  // The gradient shards are complete once every unit's reduction has finished.
  for (int u = 0; u < fs->nunits; u++) device_stream_wait_timed(STREAM_COMPUTE, fs->grad_reduced[u]);
  // Each unit's exact sum stays where the gradient is until one copy brings them all to the
  // host: no pass over the blocks on the host, one synchronization per step. A gradient shard
  // in host memory (--offload grads) was summed on the device as its last reduction sent it
  // there (fsdp/schedule.c), so it does not cross PCIe again here.
  if (!(fs->opt.offload & OFFLOAD_GRADS))
    for (int u = 0; u < fs->nunits; u++) fsdp_unit_sumsq(fs, fs->kctx, u, fs->units[u].grad);
  device_copy_to_host(fs->norm_host, fs->norm_words, (size_t)fs->nunits * NORM_WORDS * sizeof(int64_t));
  // One all-reduce carries the exact sum and, after it, one flag per unit: was any of this
  // rank's blocks of that unit non-finite (the guard names the first such unit).
  int64_t* words = fs->norm_host + (size_t)fs->nunits * NORM_WORDS;
  int64_t* bad = words + EXACT_WORDS;
  memset(words, 0, (EXACT_WORDS + (size_t)fs->nunits) * sizeof(int64_t));
  for (int u = 0; u < fs->nunits; u++) {
    int64_t* w = fs->norm_host + (size_t)u * NORM_WORDS;
    exact_normalize(w);
    for (int k = 0; k < EXACT_WORDS; k++) words[k] += w[k];
    exact_normalize(words);
    bad[u] = w[EXACT_WORDS] != 0;
  }
  comm_all_reduce(fs->shard_group, words, EXACT_WORDS + (size_t)fs->nunits, DT_I64);
  exact_normalize(words);
  // Replicas hold identical shards, so their norms agree; a fault on one replica alone would
  // not, and every rank must take the same decision on skipping the step.
  if (fs->replicas > 1) comm_all_reduce(fs->replica_group, bad, (size_t)fs->nunits, DT_I64);
  fs->nonfinite_unit = -1;
  for (int u = fs->nunits - 1; u >= 0; u--)
    if (bad[u]) fs->nonfinite_unit = u;
  return fs->nonfinite_unit >= 0 ? NAN : sqrt(exact_value(words));
}

// Zeroes unit U's gradient shard where it lives (after device_synchronize when on the host).
static void zero_grad_shard(FSDP* fs, Unit* U) {
  if (fs->opt.offload & OFFLOAD_GRADS) device_host_zero(U->grad, (size_t)U->shard * sizeof(float));
  else fill_zero_f32(fs->kctx, U->grad, U->shard);
}

void fsdp_skip_step(FSDP* fs) {
  if (fs->opt.offload & OFFLOAD_GRADS) device_synchronize();
  for (int u = 0; u < fs->nunits; u++) zero_grad_shard(fs, &fs->units[u]);
  device_event_record(fs->params_updated, STREAM_COMPUTE);
}

void fsdp_poison_grad(FSDP* fs, int u) {
  Unit* U = &fs->units[u];
  device_stream_wait(STREAM_COMPUTE, fs->grad_reduced[u]);
  device_synchronize();
  float nan = NAN;
  device_copy_to_device(U->grad + U->shard / 2, &nan, sizeof nan);
  if (fs->opt.offload & OFFLOAD_GRADS) {  // its sum was taken as it left the device: take it again
    device_copy_to_device(fs->offload_grad_acc, U->grad, (size_t)U->shard * sizeof(float));
    fsdp_unit_sumsq(fs, fs->kctx, u, fs->offload_grad_acc);
    device_synchronize();
  }
}

float fsdp_clip_scale(double norm, float clip) {
  return clip > 0 && norm + 1e-6 > clip ? (float)(clip / (norm + 1e-6)) : 1.0f;
}

// Queues unit U's shards that live across PCIe from the step into staging pair k, on the copy
// stream. The pair was last read by the unit two before, whose copy back (or, on the device,
// whose update: step_updated) is ordered before this on the same stream.
static void stage_in(FSDP* fs, const Unit* U, int k, int p_away, int g_away) {
  size_t bytes = (size_t)U->shard * sizeof(float);
  if (p_away) device_copy_async(fs->step_master[k], U->master, bytes, STREAM_COPY);
  if (g_away) device_copy_async(fs->step_grad[k], U->grad, bytes, STREAM_COPY);
  device_event_record(fs->step_in[k], STREAM_COPY);
}

void fsdp_adamw_step(FSDP* fs, AdamWArgs args) {
  int m0 = trace_mark(fs->trace, TRACK_COMPUTE);
  // --offload: the step runs where AdamW's state lives (the host with optim, ZeRO-Offload), and
  // a master or gradient shard kept on the other side crosses PCIe for it. Two units are in
  // flight: while one updates, the next one's shards come over and the last one's master goes
  // back, on the copy stream, so PCIe hides behind the update instead of adding to it.
  int off = fs->opt.offload, on_host = !!(off & OFFLOAD_OPTIM);
  int p_away = !!(off & OFFLOAD_PARAMS) != on_host, g_away = !!(off & OFFLOAD_GRADS) != on_host;
  int staged = p_away || g_away;
  if (off & (OFFLOAD_PARAMS | OFFLOAD_OPTIM | OFFLOAD_GRADS)) device_synchronize();  // host memory is read below
  if (staged) stage_in(fs, &fs->units[0], 0, p_away, g_away);
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    int k = u & 1;
    float *p = U->master, *g = U->grad;
    if (staged) {
      if (u + 1 < fs->nunits) stage_in(fs, &fs->units[u + 1], !k, p_away, g_away);
      if (on_host) device_event_synchronize(fs->step_in[k]);
      else device_stream_wait(STREAM_COMPUTE, fs->step_in[k]);
      if (p_away) p = fs->step_master[k];
      if (g_away) g = fs->step_grad[k];
    }
    if (on_host) {
      for (int s = 0; s < U->nseg; s++) {
        const AdamWRange* r = &U->segs[s];
        size_t o = (size_t)r->start, n = (size_t)(r->end - r->start);
        adamw_update_host(fs->kctx, p + o, g + o, U->m + o, U->v + o, n, adamw_range_args(args, r));
      }
    } else {
      adamw_update_ranges(fs->kctx, p, g, U->m, U->v, U->segs, U->nseg, args);  // the whole unit at once
    }
    if (staged && !on_host) {  // the copy stream may overwrite or send back pair k once it is updated
      device_event_record(fs->step_updated[k], STREAM_COMPUTE);
      device_stream_wait(STREAM_COPY, fs->step_updated[k]);
    }
    if (p_away) device_copy_async(U->master, p, (size_t)U->shard * sizeof(float), STREAM_COPY);
    // A host gradient shard is zeroed by the host: its copy in must have read it.
    if (g_away && !on_host) device_event_synchronize(fs->step_in[k]);
    zero_grad_shard(fs, U);
  }
  if (staged) {  // the next pass reads the masters once the last copy back is done
    device_event_record(fs->step_out, STREAM_COPY);
    device_stream_wait(STREAM_COMPUTE, fs->step_out);
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
