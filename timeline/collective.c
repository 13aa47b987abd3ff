// collective.c: how long a collective takes on a two-level topology (alpha-beta models).
//
// A group of n ranks, `stride` apart, on nodes of G GPUs: it has p = min(n, max(1, G/stride))
// ranks per node on N = ceil(n/p) nodes. Every rank of every node runs the same collective at
// once (the schedule is symmetric), so the G/p groups that share a node share its network
// links: a group gets node_bw x p/G of them. Each rank has its own NVLink port.
//
// Ring (NCCL's algorithm for all-gather and reduce-scatter; Thakur et al. 2005): n-1 steps,
// each rank sends (n-1)/n of the buffer through its NVLink port, and the data of the other
// N-1 nodes, (N-1)/N of the buffer, enters each node through the group's share of the
// network. The two pipelines run at once, so the slower one sets the time; every step pays one
// latency of its slowest hop. All-reduce is a reduce-scatter followed by an all-gather.
//
// Tree (NCCL's double binary tree for all-reduce across nodes; Sanders et al. 2009): the
// buffer goes up and down trees of depth log2(N) across nodes and a chain inside each node;
// each link carries the whole buffer once per direction, so time = bytes / slowest link plus
// 2 x (log2 N network + (p-1) NVLink) latencies. All-reduce takes the faster of the two, as
// NCCL's tuner picks.
#include <math.h>

#include "timeline/timeline.h"

typedef struct {
  int per_node, nodes;
  double nvlink, net;  // bytes/s this group gets per rank (NVLink) and per node (network)
} Placement;

static Placement place(const Cluster* c, Group g) {
  int G = c->net.gpus_per_node;
  int p = g.stride >= G ? 1 : G / g.stride;
  if (p > g.n) p = g.n;
  if (p < 1) p = 1;
  Placement pl = {p, (g.n + p - 1) / p, c->gpu.nvlink_bytes_s * c->gpu.nvlink_eff,
                  c->net.node_bytes_s * c->net.net_eff * p / G};
  return pl;
}

// One ring pass (all-gather or reduce-scatter) of `bytes`.
static double ring_pass(const Cluster* c, const Placement* pl, int n, double bytes) {
  double intra = (double)(n - 1) / n * bytes / pl->nvlink;
  double inter = pl->nodes > 1 ? (double)(pl->nodes - 1) / pl->nodes * bytes / pl->net : 0.0;
  double alpha = pl->nodes > 1 ? c->net.latency_s : c->net.intra_latency_s;
  return (intra > inter ? intra : inter) + (n - 1) * alpha;
}

static double tree_all_reduce(const Cluster* c, const Placement* pl, double bytes) {
  double t = bytes / pl->nvlink;
  if (pl->nodes > 1 && bytes / pl->net > t) t = bytes / pl->net;
  double depth = pl->nodes > 1 ? ceil(log2((double)pl->nodes)) : 0.0;
  return t + 2 * (depth * c->net.latency_s + (pl->per_node - 1) * c->net.intra_latency_s);
}

CollCost collective_cost(const Cluster* c, CollKind kind, double bytes, Group g) {
  Placement pl = place(c, g);
  CollCost r = {0.0, "none", pl.nodes, pl.per_node};
  if (g.n <= 1 || bytes <= 0) return r;
  r.algorithm = "ring";
  switch (kind) {
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_BROADCAST:  // pipelined along the ring: about the volume per link of one pass
      r.seconds = ring_pass(c, &pl, g.n, bytes);
      break;
    case COLL_ALL_REDUCE: {
      double ring = 2 * ring_pass(c, &pl, g.n, bytes), tree = tree_all_reduce(c, &pl, bytes);
      r.seconds = ring;
      if (tree < ring) r.seconds = tree, r.algorithm = "tree";
      break;
    }
  }
  return r;
}
