// init.c: the runtime brought to life once the plan is allocated: its pointers carved from the
// plan's regions, its events, and the sharded initialization from a counter-based generator.
//
// Every element's initial value is a pure function of (seed, unit, parameter, element), so a
// rank computes exactly the elements of its own shard, the full model is never materialized
// anywhere, and any world size starts from identical weights. Unit and parameter are the
// parameter's home (its place under --wrap block), so any wrapping starts from them too. (The FSDP paper, section 3.1,
// needs deferred initialization on a fake device because user init code is arbitrary; ours
// is a fixed rule, so each rank can simply evaluate it for its range.)
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "fsdp/fsdp.h"
#include "kernels/exact_sum.h"

// splitmix64's finalizer: a bijective mix of 64 bits, good enough to turn counters into
// independent-looking uniform bits.
static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1]: 53 random bits, never 0 so the logarithm below is finite.
static double uniform01(uint64_t key, uint64_t counter) {
  uint64_t bits = mix64(key ^ mix64(counter));
  return ((bits >> 11) + 1) * (1.0 / 9007199254740992.0);
}

float fsdp_init_value(uint64_t seed, int unit, int param, int64_t element, InitRule rule, float std) {
  switch (rule) {
    case INIT_ZERO: return 0.0f;
    case INIT_ONE: return 1.0f;
    case INIT_NORMAL: {
      uint64_t key = mix64(seed ^ mix64(((uint64_t)(uint32_t)unit << 32) | (uint32_t)param));
      // Box-Muller on the counters 2e and 2e+1.
      double u1 = uniform01(key, 2 * (uint64_t)element), u2 = uniform01(key, 2 * (uint64_t)element + 1);
      double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
      return (float)(z * std);
    }
  }
  return 0.0f;
}

void fsdp_materialize(FSDP* fs, uint64_t seed) {
  if (!fs->plan.base) fatal("fsdp_materialize before memplan_allocate");
  int64_t off = 0;
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    U->master = fs->region_master + off;
    U->grad = fs->region_grad + off;
    U->m = fs->region_m + off;
    U->v = fs->region_v + off;
    off += U->shard;
  }
  int64_t secondary_off = 0;
  for (int u = 1; u < fs->nunits && fs->secondary.F2; u++) {
    fs->units[u].secondary = fs->secondary.region + secondary_off;
    secondary_off += fs->units[u].padded / fs->secondary.F2;
  }
  if (fs->working_copy) {  // F = 1: a unit's shard is the unit, padding included
    int64_t at = 0;
    for (int u = 0; u < fs->nunits; u++) {
      fs->units[u].work = fs->region_work + at;
      at += fs->units[u].padded;
    }
  }
  fs->slots.buf = xcalloc(fs->slots.n, sizeof(act_t*), "slot table");
  fs->slots.owner = xcalloc(fs->slots.n, sizeof(int), "slot table");
  fs->slots.free = xcalloc(fs->slots.n, sizeof(DeviceEvent*), "slot events");
  for (int s = 0; s < fs->slots.n; s++) {
    fs->slots.buf[s] = fs->slots.region + (size_t)s * fs->max_padded;
    fs->slots.owner[s] = -1;
    fs->slots.free[s] = device_event_create();
  }
  fs->grads.buf = xcalloc(fs->grads.n, sizeof(float*), "gradient buffer table");
  fs->grads.owner = xcalloc(fs->grads.n, sizeof(int), "gradient buffer table");
  fs->grads.last_reader = xcalloc(fs->grads.n, sizeof(int), "gradient buffer table");
  for (int s = 0; s < fs->grads.n; s++) {
    fs->grads.buf[s] = fs->grads.region + (size_t)s * fs->max_padded;
    fs->grads.owner[s] = fs->grads.last_reader[s] = -1;
  }
  int64_t max_shard = 0;
  for (int u = 0; u < fs->nunits; u++) {
    fs->units[u].gathered = device_event_create();
    fs->units[u].grad_ready = device_event_create();
    fs->units[u].grad_reduced = device_event_create();
    if (fs->units[u].shard > max_shard) max_shard = fs->units[u].shard;
  }
  fs->params_updated = device_event_create();
  fs->slots.root_free = device_event_create();
  if (!(fs->opt.offload & OFFLOAD_OPTIM)) fs->offload.step_master[0] = fs->offload.master_in, fs->offload.step_grad[0] = fs->offload.grad_acc;
  for (int k = 0; k < 2; k++) fs->offload.step_in[k] = device_event_create(), fs->offload.step_updated[k] = device_event_create();
  fs->offload.step_out = device_event_create();
  for (int s = 0; s < ACT_RING; s++) {
    fs->acts.compute_done[s] = device_event_create();
    fs->acts.copy_done[s] = device_event_create();
  }
  fs->norm.host = xmalloc((EXACT_WORDS + (size_t)fs->nunits) * sizeof(int64_t), "gradient norm words");
  fs->norm.combined = device_event_create();
  fs->norm.reduced = device_event_create();
  fsdp_init_shards(fs, seed);
  fsdp_masters_changed(fs);
}

void fsdp_init_shards(FSDP* fs, uint64_t seed) {
  if (!device_holds_values()) return;  // the timeline backend: no values to write
  int64_t max_shard = 0;
  for (int u = 0; u < fs->nunits; u++)
    if (fs->units[u].shard > max_shard) max_shard = fs->units[u].shard;
  float* host = xmalloc((size_t)max_shard * sizeof(float), "initialization staging");
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    memset(host, 0, (size_t)U->shard * sizeof(float));  // alignment gaps and padding stay zero
    for (int i = 0; i < U->nparams; i++) {
      const ParamInfo* p = &U->params[i];
      ShardPart s;
      if (!fsdp_shard_part(fs, U, p, p->numel, &s)) continue;
#pragma omp parallel for schedule(static)
      for (int64_t e = s.first; e < s.end; e++) {
        float std = e < p->split ? p->std : p->std_tail;
        host[s.local + (e - s.first)] = e < p->live ? fsdp_init_value(seed, p->home_unit, p->home_param, e, p->init, std) : 0.0f;
      }
    }
    device_copy_to_device(U->master, host, (size_t)U->shard * sizeof(float));
  }
  free(host);
}
