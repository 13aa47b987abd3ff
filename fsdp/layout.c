// layout.c: units, the parameter table, the flat layout and the shards.
//
// A unit's parameters are concatenated into one flat buffer (the FlatParameter, FSDP paper
// section 3.2.1): each parameter starts at a multiple of PARAM_ALIGN, the total is padded to a
// multiple of F * SHARD_ALIGN and cut into F equal shards, so the sharded and unsharded buffers
// have exactly the layout all-gather and reduce-scatter expect. Rank r of a shard group owns
// elements [r*S, (r+1)*S), S = padded / F.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "fsdp/fsdp.h"
#include "kernels/exact_sum.h"

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

void fsdp_unit_name(FSDP* fs, int unit, const char* name) {
  snprintf(fs->units[unit].name, sizeof fs->units[unit].name, "%s", name);
}

int fsdp_add_param(FSDP* fs, int unit, const char* name, int ndim, const int64_t* shape,
                   InitRule init, float std, int decay) {
  Unit* U = &fs->units[unit];
  if (U->nparams == FSDP_MAX_PARAMS) fatal("unit %s: more than %d parameters", U->name, FSDP_MAX_PARAMS);
  ParamInfo* p = &U->params[U->nparams];
  snprintf(p->name, sizeof p->name, "%s", name);
  p->ndim = ndim;
  p->numel = 1;
  for (int i = 0; i < ndim; i++) {
    p->shape[i] = shape[i];
    p->numel *= shape[i];
  }
  p->live = p->numel;
  p->split = p->numel;
  p->offset = round_up(U->numel, PARAM_ALIGN);
  p->init = init;
  p->std = std;
  p->decay = decay;
  p->home_unit = unit;
  p->home_param = U->nparams;
  U->numel = p->offset + p->numel;
  return U->nparams++;
}

void fsdp_set_home(FSDP* fs, int unit, int param, int home_unit, int home_param) {
  fs->units[unit].params[param].home_unit = home_unit;
  fs->units[unit].params[param].home_param = home_param;
}

void fsdp_set_live(FSDP* fs, int unit, int param, int64_t live) {
  fs->units[unit].params[param].live = live;
}

void fsdp_set_init_split(FSDP* fs, int unit, int param, int64_t split, float std_tail) {
  fs->units[unit].params[param].split = split;
  fs->units[unit].params[param].std_tail = std_tail;
}

int fsdp_shard_part(const FSDP* fs, const Unit* U, const ParamInfo* p, int64_t count, ShardPart* part) {
  int64_t lo = (int64_t)fs->shard_rank * U->shard, hi = lo + U->shard;  // in the unit's flat buffer
  int64_t a = p->offset > lo ? p->offset : lo;
  int64_t b = p->offset + count < hi ? p->offset + count : hi;
  *part = (ShardPart){.first = a - p->offset, .end = b - p->offset, .local = a - lo};
  return a < b;
}

// The decay flags of the parameters cut by this rank's shard, as shard-local ranges.
static void build_decay_segments(FSDP* fs, Unit* U) {
  U->segs = xcalloc(U->nparams, sizeof(AdamWRange), "decay segments");
  U->nseg = 0;
  for (int i = 0; i < U->nparams; i++) {
    const ParamInfo* p = &U->params[i];
    ShardPart s;
    if (!fsdp_shard_part(fs, U, p, p->numel, &s)) continue;
    U->segs[U->nseg++] = (AdamWRange){s.local, s.local + (s.end - s.first), p->decay};
  }
}

void fsdp_finalize_layout(FSDP* fs) {
  int64_t shard_total = 0, max_padded = 0;
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    U->padded = round_up(U->numel > 0 ? U->numel : 1, (int64_t)fs->F * SHARD_ALIGN);
    U->shard = U->padded / fs->F;
    shard_total += U->shard;
    if (u > 0 && U->padded > max_padded) max_padded = U->padded;
    build_decay_segments(fs, U);
  }
  fs->max_padded = max_padded;
  int blocks = fs->nunits - 1;
  // Slots: strategies that reshard after forward need only the K-slot sliding window; the
  // others keep every block unsharded from its forward to its backward. With working copies
  // there is nothing to gather into.
  fs->slots.n = fs->reshard_after_forward ? fs->opt.limit_all_gathers : blocks;
  if (fs->slots.n > blocks) fs->slots.n = blocks;
  if (fs->working_copy) fs->slots.n = 0;
  // Gradient buffers: two (one being written, one being reduced) when every micro-step
  // reduces, one with --limit-all-gathers 1 (the least memory: a unit's backward then waits for
  // the previous unit's reduction); one per unit when accumulation keeps unsharded gradients
  // (paper section 3.4); none when gradients go straight into their shards.
  int two = fs->opt.limit_all_gathers < 2 ? 1 : 2;
  fs->grads.n = fs->opt.sync_accum ? (blocks < two ? blocks : two) : blocks;
  if (fs->direct_grads) fs->grads.n = 0;

  MemPlan* p = &fs->plan;
  size_t sb = (size_t)shard_total * sizeof(float);
  // --offload moves the sharded state to pinned host memory: the same regions, on the host.
  int off = fs->opt.offload;
  void (*params_at)(MemPlan*, const char*, const char*, size_t, void**) = off & OFFLOAD_PARAMS ? memplan_add_host : memplan_add;
  void (*grads_at)(MemPlan*, const char*, const char*, size_t, void**) = off & OFFLOAD_GRADS ? memplan_add_host : memplan_add;
  void (*optim_at)(MemPlan*, const char*, const char*, size_t, void**) = off & OFFLOAD_OPTIM ? memplan_add_host : memplan_add;
  params_at(p, "shards", "master params (fp32)", sb, (void**)&fs->region_master);
  grads_at(p, "shards", "gradient (fp32)", sb, (void**)&fs->region_grad);
  optim_at(p, "optimizer", "adamw m (fp32)", sb, (void**)&fs->region_m);
  optim_at(p, "optimizer", "adamw v (fp32)", sb, (void**)&fs->region_v);
  char name[64];
  if (fs->working_copy) {  // every unit's copy in the activation type, in place of the root buffer and the slots
    memplan_add(p, "slots", "working copies (" ACT_NAME ")", (size_t)fsdp_num_padded(fs) * sizeof(act_t),
                (void**)&fs->region_work);
  } else {
    memplan_add(p, "slots", "root params (unsharded)", (size_t)fs->units[0].padded * sizeof(act_t),
                (void**)&fs->slots.root);
    snprintf(name, sizeof name, "param slots (%d x %lld)", fs->slots.n, (long long)max_padded);
    memplan_add(p, "slots", name, (size_t)fs->slots.n * max_padded * sizeof(act_t), (void**)&fs->slots.region);
  }
  if (fs->secondary.F2) {  // --shard hpz: 1/F2 of every unit but the root (which stays unsharded)
    int64_t elems = 0;
    for (int u = 1; u < fs->nunits; u++) elems += fs->units[u].padded / fs->secondary.F2;
    snprintf(name, sizeof name, "secondary shards (1/%d of each unit)", fs->secondary.F2);
    memplan_add(p, "secondary", name, (size_t)elems * sizeof(act_t), (void**)&fs->secondary.region);
  }
  if (!fs->direct_grads) {  // (direct: the gradient shards above are the unsharded gradients)
    memplan_add(p, "grad buffers", "root grads (unsharded)", (size_t)fs->units[0].padded * sizeof(float),
                (void**)&fs->grads.root);
    snprintf(name, sizeof name, "grad buffers (%d x %lld)", fs->grads.n, (long long)max_padded);
    memplan_add(p, "grad buffers", name, (size_t)fs->grads.n * max_padded * sizeof(float),
                (void**)&fs->grads.region);
  }
  // A 16-bit reduction narrows the gradient in its own buffer when the unit is sharded
  // (fsdp/schedule.c); unsharded (F = 1: DDP, hybrid:1) the whole reduced buffer comes back as
  // fp32, which needs the 16-bit copy apart (and nothing is reduced without replicas).
  if (fs->opt.reduce_dtype != DT_F32 && fs->F == 1 && fs->replicas > 1) {
    int64_t largest = fs->units[0].padded > max_padded ? fs->units[0].padded : max_padded;
    memplan_add(p, "grad buffers", "16-bit reduce staging", (size_t)largest * sizeof(act_t), (void**)&fs->grads.reduce_staging);
  }
  int64_t max_shard = 0;
  for (int u = 0; u < fs->nunits; u++)
    if (fs->units[u].shard > max_shard) max_shard = fs->units[u].shard;
  memplan_add(p, "workspace", "gradient norm blocks", (size_t)(max_shard / NORM_BLOCK) * sizeof(double),
              (void**)&fs->norm.blocks);
  memplan_add(p, "workspace", "gradient norm words", (size_t)fs->nunits * NORM_WORDS * sizeof(int64_t),
              (void**)&fs->norm.words);
  memplan_add(p, "workspace", "gradient norm total", (EXACT_WORDS + (size_t)fs->nunits) * sizeof(int64_t),
              (void**)&fs->norm.total);
  // Staging for what lives on the host: one shard at a time crosses PCIe. The optimizer step
  // runs where AdamW's state is (the host with optim) and copies a master or gradient shard kept
  // on the other side over and back, two units in flight (fsdp/optimizer.c); on the device its
  // first pair is the two device staging buffers above.
  size_t one = (size_t)max_shard * sizeof(float);
  if (off & OFFLOAD_PARAMS) memplan_add(p, "workspace", "offload: master shard in", one, (void**)&fs->offload.master_in);
  if (off & OFFLOAD_GRADS) memplan_add(p, "workspace", "offload: gradient shard in", one, (void**)&fs->offload.grad_acc);
  if (off & OFFLOAD_OPTIM) {
    for (int k = 0; k < 2; k++) {
      if (!(off & OFFLOAD_PARAMS)) memplan_add_host(p, "workspace", "host step: master shard", one, (void**)&fs->offload.step_master[k]);
      if (!(off & OFFLOAD_GRADS)) memplan_add_host(p, "workspace", "host step: gradient shard", one, (void**)&fs->offload.step_grad[k]);
    }
  } else {
    if (off & OFFLOAD_PARAMS) memplan_add(p, "workspace", "device step: second master shard", one, (void**)&fs->offload.step_master[1]);
    if (off & OFFLOAD_GRADS) memplan_add(p, "workspace", "device step: second gradient shard", one, (void**)&fs->offload.step_grad[1]);
  }
}

int64_t fsdp_num_params(const FSDP* fs) {
  int64_t n = 0;
  for (int u = 0; u < fs->nunits; u++)
    for (int i = 0; i < fs->units[u].nparams; i++) n += fs->units[u].params[i].live;
  return n;
}

int64_t fsdp_num_padded(const FSDP* fs) {
  int64_t n = 0;
  for (int u = 0; u < fs->nunits; u++) n += fs->units[u].padded;
  return n;
}

const ParamInfo* fsdp_param_info(const FSDP* fs, int unit, int param) {
  return &fs->units[unit].params[param];
}
