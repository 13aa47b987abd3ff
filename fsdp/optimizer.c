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

// Global L2 norm of the gradient. Sums of squares are taken per NORM_BLOCK block of the flat
// layout (blocks never straddle a shard: shards are multiples of SHARD_ALIGN) and combined
// exactly (kernels/exact_sum.h), so the norm has the same bits for every world size and
// strategy. Replicas hold identical shards, so only the shard group is summed.
double fsdp_grad_norm(FSDP* fs) {
  // The gradient shards are complete once every unit's reduction has finished.
  for (int u = 0; u < fs->nunits; u++) device_stream_wait_timed(STREAM_COMPUTE, fs->grad_reduced[u]);
  // One all-reduce carries the exact sum and, after it, one flag per unit: was any of this
  // rank's blocks of that unit non-finite (the guard names the first such unit).
  int64_t* words = xcalloc(EXACT_WORDS + (size_t)fs->nunits, sizeof(int64_t), "gradient norm");
  int64_t* bad = words + EXACT_WORDS;
  double* host = fs->norm_host;
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    size_t nb = U->shard / NORM_BLOCK;
    block_sumsq(fs->kctx, fs->norm_blocks, U->grad, U->shard);
    device_copy_to_host(host, fs->norm_blocks, nb * sizeof(double));
    for (size_t b = 0; b < nb; b++) {
      if (!isfinite(host[b])) bad[u] = 1;
      exact_add(words, host[b]);
    }
    exact_normalize(words);
  }
  comm_all_reduce(fs->shard_group, words, EXACT_WORDS + (size_t)fs->nunits, DT_I64);
  exact_normalize(words);
  // Replicas hold identical shards, so their norms agree; a fault on one replica alone would
  // not, and every rank must take the same decision on skipping the step.
  if (fs->replicas > 1) comm_all_reduce(fs->replica_group, bad, (size_t)fs->nunits, DT_I64);
  fs->nonfinite_unit = -1;
  for (int u = fs->nunits - 1; u >= 0; u--)
    if (bad[u]) fs->nonfinite_unit = u;
  double norm = fs->nonfinite_unit >= 0 ? NAN : sqrt(exact_value(words));
  free(words);
  return norm;
}

void fsdp_skip_step(FSDP* fs) {
  for (int u = 0; u < fs->nunits; u++) fill_zero_f32(fs->kctx, fs->units[u].grad, fs->units[u].shard);
  device_event_record(fs->params_updated, STREAM_COMPUTE);
}

void fsdp_poison_grad(FSDP* fs, int u) {
  Unit* U = &fs->units[u];
  device_stream_wait(STREAM_COMPUTE, fs->grad_reduced[u]);
  device_synchronize();
  float nan = NAN;
  device_copy_to_device(U->grad + U->shard / 2, &nan, sizeof nan);
}

float fsdp_clip_scale(double norm, float clip) {
  return clip > 0 && norm + 1e-6 > clip ? (float)(clip / (norm + 1e-6)) : 1.0f;
}

void fsdp_adamw_step(FSDP* fs, AdamWArgs args) {
  int m0 = trace_mark(fs->trace, TRACK_COMPUTE);
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    for (int s = 0; s < U->nseg; s++) {
      const DecaySegment* seg = &U->segs[s];
      AdamWArgs a = args;
      if (!seg->decay) a.weight_decay = 0.0f;
      size_t o = (size_t)seg->start, n = (size_t)(seg->end - seg->start);
      adamw_update(fs->kctx, U->master + o, NULL, U->grad + o, U->m + o, U->v + o, n, a);
    }
    fill_zero_f32(fs->kctx, U->grad, U->shard);
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
