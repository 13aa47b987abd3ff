// groups.c: the runtime's shape from the sharding strategy (the sharding factor F, replicas,
// resharding after forward), and its process groups: shard groups of F consecutive ranks in
// (node, rank) order, so a hybrid shard group stays inside a host (FSDP paper section 3.2.2),
// the replica group across them, two communicators for the shard group, one per stream (paper
// 3.2), and --shard hpz's node groups (ZeRO++ hpZ).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "fsdp/fsdp.h"

// --shard hpz: node groups of F2 ranks, F2 a divisor of the world other than 1 and W (FSDP2's
// rule for reshard_after_forward=int): with F2 = W the backward all-gather would span the world
// as full sharding's does, and with F2 = 1 every rank would keep whole units after forward,
// --shard grad-op's memory with a copy more. `why` says where F2 came from. Every rank finds the
// same: one message, from rank 0 (fatal_all).
static void set_node_groups(FSDP* fs, int F2, const char* why) {
  int W = fs->world_size;
  if (W == 1) fatal_all("--shard hpz needs ranks on more than one node (this run has one rank); use --shard full");
  if (F2 >= W)
    fatal_all("--shard hpz: %s, so the node group would be the whole world of %d ranks and the backward all-gather as wide "
          "as full sharding's; use --shard full on one node, or --shard hpz:F2 with F2 < %d a divisor of %d", why, W, W, W);
  if (F2 == 1)
    fatal_all("--shard hpz: %s, so every rank would keep whole units from forward to backward: --shard grad-op's memory "
          "with a copy more; use --shard grad-op, or --shard hpz:F2 with 1 < F2 < %d", why, W);
  if (W % F2)
    fatal_all("--shard hpz:%d needs the node group size to divide the world size %d; pick F2 with %d %% F2 == 0 (usually "
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
    fatal_all("--shard hybrid:%d needs the sharding factor to divide the world size %d; pick a "
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
      fatal_all("--shard hpz: the nodes hold different numbers of ranks (%d share rank 0's node, %d rank %d's); give the "
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

