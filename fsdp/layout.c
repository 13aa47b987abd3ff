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

const char* fsdp_strategy_name(ShardStrategy s) {
  switch (s) {
    case SHARD_FULL: return "full";
    case SHARD_GRAD_OP: return "grad-op";
    case SHARD_NONE: return "none";
    case SHARD_HYBRID: return "hybrid";
    case SHARD_HPZ: return "hpz";
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
  } else if (!strcmp(s, "hpz")) {
    opt->strategy = SHARD_HPZ;
    opt->hpz_factor = 0;  // the ranks per node, found at start-up
  } else if (!strncmp(s, "hpz:", 4)) {
    char* end;
    long f = strtol(s + 4, &end, 10);
    if (*end || f < 1 || f > 1 << 20) return -1;
    opt->strategy = SHARD_HPZ;
    opt->hpz_factor = (int)f;
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

// --shard hpz: node groups of F2 ranks, F2 a divisor of the world other than 1 and W (FSDP2's
// rule for reshard_after_forward=int): with F2 = W the backward all-gather would span the world
// as full sharding's does, and with F2 = 1 every rank would keep whole units after forward,
// --shard grad-op's memory with a copy more. `why` says where F2 came from.
static void set_node_groups(FSDP* fs, int F2, const char* why) {
  int W = fs->world_size;
  if (W == 1) fatal("--shard hpz needs ranks on more than one node (this run has one rank); use --shard full");
  if (F2 >= W)
    fatal("--shard hpz: %s, so the node group would be the whole world of %d ranks and the backward all-gather as wide "
          "as full sharding's; use --shard full on one node, or --shard hpz:F2 with F2 < %d a divisor of %d", why, W, W, W);
  if (F2 == 1)
    fatal("--shard hpz: %s, so every rank would keep whole units from forward to backward: --shard grad-op's memory "
          "with a copy more; use --shard grad-op, or --shard hpz:F2 with 1 < F2 < %d", why, W);
  if (W % F2)
    fatal("--shard hpz:%d needs the node group size to divide the world size %d; pick F2 with %d %% F2 == 0 (usually "
          "the ranks per node)", F2, W, W);
  fs->secondary.F2 = F2;
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
  // The sharding factor F (FSDP paper section 3.2): W for full, grad-op and hpz, 1 for DDP,
  // and F < W for hybrid sharding (section 3.2.2), with W/F replicas of each shard.
  switch (opt.strategy) {
    case SHARD_FULL:
    case SHARD_GRAD_OP:
    case SHARD_HPZ: fs->F = W; break;
    case SHARD_NONE: fs->F = 1; break;
    case SHARD_HYBRID: fs->F = opt.hybrid_factor; break;
  }
  if (fs->F < 1 || W % fs->F != 0)
    fatal("--shard hybrid:%d needs the sharding factor to divide the world size %d; pick a "
          "factor F with %d %% F == 0", fs->F, W, W);
  fs->replicas = W / fs->F;
  fs->shard_rank = rank % fs->F;
  fs->reshard_after_forward = opt.strategy == SHARD_FULL || opt.strategy == SHARD_HYBRID || opt.strategy == SHARD_HPZ;
  if (opt.strategy == SHARD_HPZ && opt.hpz_factor > 0) {
    char why[64];
    snprintf(why, sizeof why, "hpz:%d makes node groups of %d rank%s", opt.hpz_factor, opt.hpz_factor,
             opt.hpz_factor == 1 ? "" : "s");
    set_node_groups(fs, opt.hpz_factor, why);
  }
  // A shard that is the whole unit: its 16-bit copy can live on with it (AdamW writes both), and
  // with one micro-step its gradient can be accumulated in place (fsdp/schedule.c). Offloaded
  // shards keep the general path (their master or gradient is not on the device), and so does
  // --sim-world, whose one rank stands in for the collectives of many.
  int whole = fs->F == 1 && opt.sim_world <= 1;
  fs->working_copy = whole && !(opt.offload & OFFLOAD_PARAMS);
  fs->direct_grads = whole && opt.accum_steps == 1 && !(opt.offload & OFFLOAD_GRADS);
  if (opt.limit_all_gathers < 1) fatal("--limit-all-gathers must be at least 1 (got %d)", opt.limit_all_gathers);
  fs->nunits = nunits;
  fs->block_units = 1;
  fs->units = xcalloc(nunits, sizeof(Unit), "unit table");
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

// Rank 0 says which ranks form each group of `size` consecutive positions (shard groups, or
// hpz's node groups), and whether any group spans hosts.
static void report_groups(const FSDP* fs, const int64_t* node_of, const int* position, int size, const char* what) {
  int W = fs->world_size, G = W / size, spanning = 0;
  char line[1024] = "";
  size_t used = 0;
#define APPEND(...) used += (size_t)snprintf(line + used, used < sizeof line ? sizeof line - used : 0, __VA_ARGS__)
  for (int g = 0; g < G; g++) {
    int first = -1;
    APPEND(" {");
    for (int p = g * size; p < (g + 1) * size; p++)
      for (int r = 0; r < W; r++)
        if (position[r] == p) {
          APPEND("%s%d", first < 0 ? "" : ",", r);
          if (first < 0) first = r;
          else if (node_of[r] != node_of[first]) spanning = 1;
        }
    APPEND("}");
  }
#undef APPEND
  log0("%s:%s%s\n", what, line, spanning ? "; some groups span hosts (larger than the ranks on one host)" : "");
}

// The ranks on each node, when every node holds as many (the default node group of --shard
// hpz); else a fatal error that asks for F2.
static int ranks_per_node(const int64_t* node_of, int W) {
  int per = 0;
  for (int r = 0; r < W; r++) {
    int n = 0;
    for (int q = 0; q < W; q++) n += node_of[q] == node_of[r];
    if (r == 0) per = n;
    else if (n != per)
      fatal("--shard hpz: the nodes hold different numbers of ranks (%d share rank 0's node, %d rank %d's); give the "
            "node group size with --shard hpz:F2", per, n, r);
  }
  return per;
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
  char what[96];
  if (opt.strategy == SHARD_HYBRID) {
    snprintf(what, sizeof what, "shard groups (F=%d, ranks that share a host together)", fs->F);
    report_groups(fs, node_of, position, fs->F, what);
  }
  if (opt.strategy == SHARD_HPZ) {
    // Node groups: F2 consecutive positions, the ranks of one node when F2 is the ranks per node.
    if (!fs->secondary.F2) {
      int per = ranks_per_node(node_of, W);
      char why[64];
      if (per == W) snprintf(why, sizeof why, "all %d ranks share one node", W);
      else snprintf(why, sizeof why, "each node holds %d rank%s", per, per == 1 ? "" : "s");
      set_node_groups(fs, per, why);
    }
    int F2 = fs->secondary.F2;
    fs->secondary.node_rank = p % F2;
    fs->node_group = comm_split(world, p / F2, p);
    comm_bind_stream(fs->node_group, STREAM_ALL_GATHER);
    if (comm_rank(fs->node_group) != fs->secondary.node_rank) fatal("node group ranks are not in placement order; this is a bug");
    snprintf(what, sizeof what, "node groups (F2=%d: backward all-gathers of secondary shards)", F2);
    report_groups(fs, node_of, position, F2, what);
  }
  free(node_of);
  free(position);
}

void fsdp_init_plan(FSDP* fs, int nunits, FSDPOptions opt, int world_size) {
  if (opt.strategy == SHARD_HPZ && opt.hpz_factor == 0)
    fatal("--shard hpz: a plan does not know how many ranks share a node; give the node group size with --shard "
          "hpz:F2 (F2 = GPUs per node, e.g. hpz:8)");
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
  if (fs->working_copy) {  // every unit's 16-bit copy, in place of the root buffer and the slots
    memplan_add(p, "slots", "working copies (16-bit)", (size_t)fsdp_num_padded(fs) * sizeof(act_t),
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
