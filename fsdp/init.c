// init.c: sharded initialization from a counter-based generator.
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
