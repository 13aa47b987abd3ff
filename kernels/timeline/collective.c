// collective.c: how long a collective takes on a two-level topology (alpha-beta models).
//
// A group of n ranks, `stride` apart, on nodes of G GPUs: it has p = min(n, max(1, G/stride))
// ranks per node on N = ceil(n/p) nodes. Every rank of every node runs the same collective at
// once (the schedule is symmetric), so the G/p groups that share a node share its network
// links: a group gets node_bw x p/G of them. Each rank has its own NVLink port.
//
// Latencies are NCCL's own model's (catalogue.c [LAT]): a fixed cost per collective, and per
// ring step one of NVLink or of the network, for the Simple protocol NCCL picks for large
// messages. Small collectives (the loss, a norm) would run its LL protocol, faster to start;
// the model charges them the Simple latencies (a few per step).
//
// Ring (NCCL's algorithm for all-gather and reduce-scatter; Thakur et al. 2005): n-1 steps,
// each rank sends (n-1)/n of the buffer through its NVLink port, and the data of the other
// N-1 nodes, (N-1)/N of the buffer, enters each node through the group's share of the
// network. The two pipelines run at once, so the slower one sets the time; every step pays one
// latency of its slowest hop. All-reduce is a reduce-scatter followed by an all-gather.
//
// Tree (NCCL's double binary tree for all-reduce across nodes; Sanders et al. 2009): NCCL
// reports it at the full bandwidth of the ring (Jeaugey, "Massively Scale Your Deep Learning
// Training with NCCL 2.4", NVIDIA blog 2019) with a latency logarithmic in the nodes: the ring's
// bandwidth term plus 2 x (log2 N network + (p-1) NVLink steps) for the way up and down. NCCL's
// tuner picks the faster; on a tie (one node) the ring.
//
// SMs: NCCL runs a collective as one block per channel, each holding an SM of its own for the
// whole collective (catalogue.c [CTA]). It opens two channels per network interface across
// nodes and two per NVLink inside one, at most MAXCHANNELS (32). A group that gets a share of
// the node's interfaces (a replica group, one rank per node) drives its share, at least one.
#include <math.h>

#include "kernels/timeline/timeline.h"

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

// One ring pass without its latency: the bandwidth term.
static double ring_volume(const Placement* pl, int n, double bytes) {
  double intra = (double)(n - 1) / n * bytes / pl->nvlink;
  double inter = pl->nodes > 1 ? (double)(pl->nodes - 1) / pl->nodes * bytes / pl->net : 0.0;
  return intra > inter ? intra : inter;
}

static double tree_all_reduce(const Cluster* c, const Placement* pl, int n, double bytes) {
  double depth = pl->nodes > 1 ? ceil(log2((double)pl->nodes)) : 0.0;
  return 2 * ring_volume(pl, n, bytes) + 2 * (depth * c->net.latency_s + (pl->per_node - 1) * c->net.intra_latency_s);
}

static int collective_sms(const Cluster* c, const Placement* pl) {
  int sms;
  if (pl->nodes > 1) {
    int nics = c->net.nics * pl->per_node / c->net.gpus_per_node;
    sms = 2 * (nics > 1 ? nics : 1);
  } else {
    sms = 2 * c->gpu.nvlinks;
  }
  if (sms > 32) sms = 32;
  if (c->comm_sms_max >= 0 && sms > c->comm_sms_max) sms = c->comm_sms_max;
  return sms;
}

// One ring pass (all-gather or reduce-scatter) of `bytes`.
// Of its n-1 steps, the N-1 that cross to the next node pay the network's latency and the rest
// NVLink's (NCCL's own latency model, src/graph/tuning.cc: inter-node steps apart).
static double ring_pass(const Cluster* c, const Placement* pl, int n, double bytes) {
  int inter = pl->nodes - 1, intra = n - 1 - inter;
  return ring_volume(pl, n, bytes) + inter * c->net.latency_s + intra * c->net.intra_latency_s;
}

CollCost collective_cost(const Cluster* c, CollKind kind, double bytes, Group g) {
  Placement pl = place(c, g);
  CollCost r = {0.0, "none", pl.nodes, pl.per_node, 0};
  if (g.n <= 1 || bytes <= 0) return r;
  r.algorithm = "ring";
  r.sms = collective_sms(c, &pl);
  switch (kind) {
    case COLL_ALL_GATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_BROADCAST:  // pipelined along the ring: about the volume per link of one pass
      r.seconds = ring_pass(c, &pl, g.n, bytes);
      break;
    case COLL_ALL_REDUCE: {
      double ring = 2 * ring_pass(c, &pl, g.n, bytes), tree = tree_all_reduce(c, &pl, g.n, bytes);
      r.seconds = ring;
      if (tree < ring) r.seconds = tree, r.algorithm = "tree";
      break;
    }
  }
  r.seconds += c->net.base_latency_s;  // once per collective (NCCL's baseLat)
  return r;
}
