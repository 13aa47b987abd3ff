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

#include "fsdp/dist.h"
#include "fsdp/fsdp.h"
#include "kernels/exact_sum.h"

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

const char* fsdp_strategy_name(ShardStrategy s) {
  switch (s) {
    case SHARD_FULL: return "full";
    case SHARD_GRAD_OP: return "grad-op";
    case SHARD_NONE: return "none";
    case SHARD_HYBRID: return "hybrid";
  }
  return "?";
}

int fsdp_parse_strategy(const char* s, FSDPOptions* opt) {
  if (!strcmp(s, "full")) opt->strategy = SHARD_FULL;
  else if (!strcmp(s, "grad-op")) opt->strategy = SHARD_GRAD_OP;
  else if (!strcmp(s, "none")) opt->strategy = SHARD_NONE;
  else if (!strncmp(s, "hybrid:", 7)) {
    char* end;
    long f = strtol(s + 7, &end, 10);
    if (*end || f < 1 || f > 1 << 20) return -1;
    opt->strategy = SHARD_HYBRID;
    opt->hybrid_factor = (int)f;
  } else return -1;
  return 0;
}

static const struct {
  const char* name;
  int bit;
} OFFLOADS[] = {{"params", OFFLOAD_PARAMS}, {"optim", OFFLOAD_OPTIM}, {"grads", OFFLOAD_GRADS},
                {"activations", OFFLOAD_ACTIVATIONS}};
#define NOFFLOADS (int)(sizeof OFFLOADS / sizeof *OFFLOADS)

int fsdp_parse_offload(const char* s, int* bits) {
  *bits = 0;
  if (!strcmp(s, "none")) return 0;
  if (!strcmp(s, "all")) {
    for (int i = 0; i < NOFFLOADS; i++) *bits |= OFFLOADS[i].bit;
    return 0;
  }
  for (const char* p = s;;) {
    size_t n = strcspn(p, ",");
    int found = 0;
    for (int i = 0; i < NOFFLOADS; i++)
      if (n == strlen(OFFLOADS[i].name) && !strncmp(p, OFFLOADS[i].name, n)) *bits |= OFFLOADS[i].bit, found = 1;
    if (!found) return -1;
    if (!p[n]) return 0;
    p += n + 1;
  }
}

void fsdp_offload_name(int bits, char* out, size_t len) {
  size_t used = 0;
  out[0] = 0;
  if (bits == (OFFLOAD_PARAMS | OFFLOAD_OPTIM | OFFLOAD_GRADS | OFFLOAD_ACTIVATIONS)) {
    snprintf(out, len, "all");
    return;
  }
  for (int i = 0; i < NOFFLOADS; i++)
    if (bits & OFFLOADS[i].bit) used += (size_t)snprintf(out + used, used < len ? len - used : 0, "%s%s", used ? "," : "", OFFLOADS[i].name);
  if (!bits) snprintf(out, len, "none");
}

// Sizes and groups from the strategy, for a world of W ranks seen from `rank`; no
// communicator is touched, so --plan can lay out any world size from one process.
static void configure(FSDP* fs, int nunits, FSDPOptions opt, int W, int rank, KernelCtx* kctx) {
  memset(fs, 0, sizeof *fs);
  fs->opt = opt;
  fs->kctx = kctx;
  fs->kctx_gather = kernels_stream_ctx(kctx, STREAM_ALL_GATHER);
  fs->kctx_reduce = kernels_stream_ctx(kctx, STREAM_REDUCE_SCATTER);
  fs->world_rank = rank;
  fs->world_size = W;
  // The sharding factor F (FSDP paper section 3.2): W for full and grad-op, 1 for DDP, and
  // F < W for hybrid sharding (section 3.2.2), with W/F replicas of each shard.
  switch (opt.strategy) {
    case SHARD_FULL:
    case SHARD_GRAD_OP: fs->F = W; break;
    case SHARD_NONE: fs->F = 1; break;
    case SHARD_HYBRID: fs->F = opt.hybrid_factor; break;
  }
  if (fs->F < 1 || W % fs->F != 0)
    fatal("--shard hybrid:%d needs the sharding factor to divide the world size %d; pick a "
          "factor F with %d %% F == 0", fs->F, W, W);
  fs->replicas = W / fs->F;
  fs->shard_rank = rank % fs->F;
  fs->reshard_after_forward = opt.strategy == SHARD_FULL || opt.strategy == SHARD_HYBRID;
  if (opt.limit_all_gathers < 1) fatal("--limit-all-gathers must be at least 1 (got %d)", opt.limit_all_gathers);
  fs->nunits = nunits;
  fs->block_units = 1;
  fs->units = xcalloc(nunits, sizeof(Unit), "unit table");
  fs->compute_start = xcalloc(nunits, sizeof(int), "unit table");
  for (int u = 0; u < nunits; u++) {
    fs->units[u].index = u;
    fs->units[u].slot = fs->units[u].grad_slot = -1;
    snprintf(fs->units[u].name, sizeof fs->units[u].name, u ? "unit.%d" : "root", u);
  }
}

void fsdp_group_positions(const int64_t* node_of, int W, int* position) {
  for (int r = 0; r < W; r++) {
    int p = 0;  // ranks before r in (node, rank) order
    for (int q = 0; q < W; q++) p += node_of[q] < node_of[r] || (node_of[q] == node_of[r] && q < r);
    position[r] = p;
  }
}

// Rank 0 says which ranks form each shard group, and whether any group spans hosts.
static void report_groups(const FSDP* fs, const int64_t* node_of, const int* position) {
  int W = fs->world_size, G = W / fs->F, spanning = 0;
  char line[1024] = "";
  size_t used = 0;
#define APPEND(...) used += (size_t)snprintf(line + used, used < sizeof line ? sizeof line - used : 0, __VA_ARGS__)
  for (int g = 0; g < G; g++) {
    int first = -1;
    APPEND(" {");
    for (int p = g * fs->F; p < (g + 1) * fs->F; p++)
      for (int r = 0; r < W; r++)
        if (position[r] == p) {
          APPEND("%s%d", first < 0 ? "" : ",", r);
          if (first < 0) first = r;
          else if (node_of[r] != node_of[first]) spanning = 1;
        }
    APPEND("}");
  }
#undef APPEND
  log0("shard groups (F=%d, ranks that share a host together):%s%s\n", fs->F, line,
       spanning ? "; some groups span hosts (F is larger than the ranks on one host)" : "");
}

void fsdp_init(FSDP* fs, int nunits, FSDPOptions opt, Comm* world, KernelCtx* kctx) {
  configure(fs, nunits, opt, comm_size(world), comm_rank(world), kctx);
  fs->world = world;
  // Shard group: F consecutive positions in (node, rank) order; replica group: the ranks at
  // the same place of every shard group.
  int W = fs->world_size;
  int64_t* node_of = xcalloc(W, sizeof(int64_t), "rank placement");
  int* position = xcalloc(W, sizeof(int), "rank placement");
  node_of[fs->world_rank] = dist_node();
  comm_all_gather(world, node_of, 1, DT_I64);
  fsdp_group_positions(node_of, W, position);
  int p = position[fs->world_rank];
  fs->shard_rank = p % fs->F;
  fs->shard_group = comm_split(world, p / fs->F, p);
  fs->gather_group = comm_split(world, p / fs->F, p);
  fs->replica_group = comm_split(world, p % fs->F, p);
  comm_bind_stream(fs->shard_group, STREAM_REDUCE_SCATTER);
  comm_bind_stream(fs->replica_group, STREAM_REDUCE_SCATTER);
  comm_bind_stream(fs->gather_group, STREAM_ALL_GATHER);
  if (comm_rank(fs->shard_group) != fs->shard_rank) fatal("shard group ranks are not in placement order; this is a bug");
  if (opt.strategy == SHARD_HYBRID) report_groups(fs, node_of, position);
  free(node_of);
  free(position);
}

void fsdp_init_plan(FSDP* fs, int nunits, FSDPOptions opt, int world_size) {
  configure(fs, nunits, opt, world_size, 0, NULL);
}

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

// The decay flags of the parameters cut by this rank's shard, as shard-local ranges.
static void build_decay_segments(FSDP* fs, Unit* U) {
  int64_t lo = (int64_t)fs->shard_rank * U->shard, hi = lo + U->shard;
  U->segs = xcalloc(U->nparams, sizeof(AdamWRange), "decay segments");
  U->nseg = 0;
  for (int i = 0; i < U->nparams; i++) {
    const ParamInfo* p = &U->params[i];
    int64_t a = p->offset > lo ? p->offset : lo;
    int64_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    if (a >= b) continue;
    U->segs[U->nseg++] = (AdamWRange){a - lo, b - lo, p->decay};
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
  // others keep every block unsharded from its forward to its backward.
  fs->nslots = fs->reshard_after_forward ? fs->opt.limit_all_gathers : blocks;
  if (fs->nslots > blocks) fs->nslots = blocks;
  // Gradient buffers: two (one being written, one being reduced) when every micro-step
  // reduces, one with --limit-all-gathers 1 (the least memory: a unit's backward then waits for
  // the previous unit's reduction); one per unit when accumulation keeps unsharded gradients
  // (paper section 3.4).
  int two = fs->opt.limit_all_gathers < 2 ? 1 : 2;
  fs->ngrad_slots = fs->opt.sync_accum ? (blocks < two ? blocks : two) : blocks;

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
  memplan_add(p, "slots", "root params (unsharded)", (size_t)fs->units[0].padded * sizeof(act_t),
              (void**)&fs->root_params);
  char name[48];
  snprintf(name, sizeof name, "param slots (%d x %lld)", fs->nslots, (long long)max_padded);
  memplan_add(p, "slots", name, (size_t)fs->nslots * max_padded * sizeof(act_t), (void**)&fs->region_slots);
  memplan_add(p, "grad buffers", "root grads (unsharded)", (size_t)fs->units[0].padded * sizeof(float),
              (void**)&fs->root_grads);
  snprintf(name, sizeof name, "grad buffers (%d x %lld)", fs->ngrad_slots, (long long)max_padded);
  memplan_add(p, "grad buffers", name, (size_t)fs->ngrad_slots * max_padded * sizeof(float),
              (void**)&fs->region_grad_slots);
  // A 16-bit reduction narrows the gradient in its own buffer when the unit is sharded
  // (fsdp/schedule.c); unsharded (F = 1: DDP, hybrid:1) the whole reduced buffer comes back as
  // fp32, which needs the 16-bit copy apart.
  if (fs->opt.reduce_dtype != DT_F32 && fs->F == 1) {
    int64_t largest = fs->units[0].padded > max_padded ? fs->units[0].padded : max_padded;
    memplan_add(p, "grad buffers", "16-bit reduce staging", (size_t)largest * sizeof(act_t), (void**)&fs->reduce_staging);
  }
  int64_t max_shard = 0;
  for (int u = 0; u < fs->nunits; u++)
    if (fs->units[u].shard > max_shard) max_shard = fs->units[u].shard;
  memplan_add(p, "workspace", "gradient norm blocks", (size_t)(max_shard / NORM_BLOCK) * sizeof(double),
              (void**)&fs->norm_blocks);
  memplan_add(p, "workspace", "gradient norm words", (size_t)fs->nunits * NORM_WORDS * sizeof(int64_t),
              (void**)&fs->norm_words);
  // Staging for what lives on the host: one shard at a time crosses PCIe. The optimizer step
  // runs where AdamW's state is (the host with optim) and copies a master or gradient shard kept
  // on the other side over and back, two units in flight (fsdp/optimizer.c); on the device its
  // first pair is the two device staging buffers above.
  size_t one = (size_t)max_shard * sizeof(float);
  if (off & OFFLOAD_PARAMS) memplan_add(p, "workspace", "offload: master shard in", one, (void**)&fs->offload_master_in);
  if (off & OFFLOAD_GRADS) memplan_add(p, "workspace", "offload: gradient shard in", one, (void**)&fs->offload_grad_acc);
  if (off & OFFLOAD_OPTIM) {
    for (int k = 0; k < 2; k++) {
      if (!(off & OFFLOAD_PARAMS)) memplan_add_host(p, "workspace", "host step: master shard", one, (void**)&fs->step_master[k]);
      if (!(off & OFFLOAD_GRADS)) memplan_add_host(p, "workspace", "host step: gradient shard", one, (void**)&fs->step_grad[k]);
    }
  } else {
    if (off & OFFLOAD_PARAMS) memplan_add(p, "workspace", "device step: second master shard", one, (void**)&fs->step_master[1]);
    if (off & OFFLOAD_GRADS) memplan_add(p, "workspace", "device step: second gradient shard", one, (void**)&fs->step_grad[1]);
  }
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
  fs->slots = xcalloc(fs->nslots, sizeof(act_t*), "slot table");
  fs->slot_owner = xcalloc(fs->nslots, sizeof(int), "slot table");
  fs->slot_free = xcalloc(fs->nslots, sizeof(DeviceEvent*), "slot events");
  for (int s = 0; s < fs->nslots; s++) {
    fs->slots[s] = fs->region_slots + (size_t)s * fs->max_padded;
    fs->slot_owner[s] = -1;
    fs->slot_free[s] = device_event_create();
  }
  fs->grad_slots = xcalloc(fs->ngrad_slots, sizeof(float*), "gradient buffer table");
  fs->grad_slot_owner = xcalloc(fs->ngrad_slots, sizeof(int), "gradient buffer table");
  fs->grad_slot_last = xcalloc(fs->ngrad_slots, sizeof(int), "gradient buffer table");
  for (int s = 0; s < fs->ngrad_slots; s++) {
    fs->grad_slots[s] = fs->region_grad_slots + (size_t)s * fs->max_padded;
    fs->grad_slot_owner[s] = fs->grad_slot_last[s] = -1;
  }
  fs->gathered = xcalloc(fs->nunits, sizeof(DeviceEvent*), "unit events");
  fs->grad_ready = xcalloc(fs->nunits, sizeof(DeviceEvent*), "unit events");
  fs->grad_reduced = xcalloc(fs->nunits, sizeof(DeviceEvent*), "unit events");
  int64_t max_shard = 0;
  for (int u = 0; u < fs->nunits; u++) {
    fs->gathered[u] = device_event_create();
    fs->grad_ready[u] = device_event_create();
    fs->grad_reduced[u] = device_event_create();
    if (fs->units[u].shard > max_shard) max_shard = fs->units[u].shard;
  }
  fs->params_updated = device_event_create();
  fs->root_free = device_event_create();
  if (!(fs->opt.offload & OFFLOAD_OPTIM)) fs->step_master[0] = fs->offload_master_in, fs->step_grad[0] = fs->offload_grad_acc;
  for (int k = 0; k < 2; k++) fs->step_in[k] = device_event_create(), fs->step_updated[k] = device_event_create();
  fs->step_out = device_event_create();
  for (int s = 0; s < ACT_RING; s++) {
    fs->act_compute_done[s] = device_event_create();
    fs->act_copy_done[s] = device_event_create();
  }
  fs->norm_host = xmalloc(((size_t)fs->nunits * NORM_WORDS + EXACT_WORDS + (size_t)fs->nunits) * sizeof(int64_t),
                          "gradient norm words");
  fsdp_init_shards(fs, seed);
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
