// test_timeline.c: the timeline backend's models against times computed by hand, and a toy
// model's predicted step against the timeline drawn by hand for its schedule.
//
// Every case uses a made-up cluster with round numbers (not the catalogue), so the expected
// times below are short hand computations, written out beside each check.
#include <getopt.h>

#include "test/test.h"
#include "predict/predict.h"

// 4 GPUs per node; NVLink 100 GB/s per GPU (4 links), network 40 GB/s per node (2 NICs);
// alphas 10 us (network), 1 us (NVLink); all efficiencies 1; compute 100 TFLOPS, memory 1 TB/s,
// 100 SMs; no launch costs.
static Cluster toy_cluster(int world) {
  Cluster c;
  memset(&c, 0, sizeof c);
  c.gpu = (GpuSpec){"toy", "toy", 100e12, 1.0, 1.0, 1.0, 1e12, 1.0, 1e12, 100e9, 1.0, 0.0, "toy", 100, 4};
  c.net = (NetSpec){"toy", 4, 40e9, 1.0, 10e-6, 1e-6, 2, 0.0};
  c.host = (HostSpec){0.0, 0.0, 1e12, 1e12};
  c.world = world;
  c.comm_sms_max = -1;
  return c;
}

static void expect_time(const char* name, double got, double want) {
  EXPECT(name, rel_err(got, want, 1e-12) < 1e-9, "got %.9g s, want %.9g s", got, want);
}

static void test_collectives(void) {
  Cluster c = toy_cluster(16);
  // All-gather of 400 MB inside one node (4 ranks): 3/4 x 400e6 / 100e9 = 3 ms, + 3 x 1 us.
  CollCost r = collective_cost(&c, COLL_ALL_GATHER, 400e6, (Group){4, 1});
  expect_time("ring all-gather, 4 ranks on one node", r.seconds, 3e-3 + 3e-6);
  EXPECT("  ... spans 1 node, 4 ranks on it", r.nodes == 1 && r.per_node == 4, "nodes %d per node %d", r.nodes, r.per_node);
  // 16 ranks on 4 nodes: NVLink 15/16 x 400e6/100e9 = 3.75 ms; network 3/4 x 400e6 / 40e9 =
  // 7.5 ms (one group per node: all 40 GB/s); the slower, + 3 steps across nodes of 10 us and
  // 12 inside them of 1 us.
  r = collective_cost(&c, COLL_REDUCE_SCATTER, 400e6, (Group){16, 1});
  expect_time("ring reduce-scatter, 16 ranks on 4 nodes", r.seconds, 7.5e-3 + 3 * 10e-6 + 12 * 1e-6);
  // A replica group (stride 4 = one rank per node, 4 nodes): the 4 groups of a node share its
  // network, 10 GB/s each. All-reduce of 100 MB: ring 2 x (3/4 x 100e6/10e9 + 3 x 10 us) =
  // 15.06 ms; tree: the same 15 ms of bandwidth + 2 x (log2(4) x 10 us) = 15.04 ms: the tree.
  r = collective_cost(&c, COLL_ALL_REDUCE, 100e6, (Group){4, 4});
  expect_time("all-reduce across nodes: tree", r.seconds, 15e-3 + 40e-6);
  EXPECT("  ... picks the tree", !strcmp(r.algorithm, "tree"), "picked %s", r.algorithm);
  // A 4 KB all-reduce on 16 ranks (4 nodes): bandwidth 2 x 3/4 x 4096/40e9; ring latency
  // 2 x (3 x 10 us + 12 x 1 us) = 84 us, tree 2 x (2 x 10 us + 3 x 1 us) = 46 us.
  r = collective_cost(&c, COLL_ALL_REDUCE, 4096, (Group){16, 1});
  expect_time("all-reduce, small, 16 ranks: tree latency", r.seconds, 2 * 0.75 * 4096 / 40e9 + 2 * (2 * 10e-6 + 3 * 1e-6));
  // Hybrid shard group of 2 (stride 1): one node, NVLink only: 1/2 x 1e6 / 100e9 + 1 us.
  r = collective_cost(&c, COLL_ALL_GATHER, 1e6, (Group){2, 1});
  expect_time("all-gather, hybrid group of 2 inside a node", r.seconds, 0.5e6 / 100e9 + 1e-6);
  // Inside one node the two tie (2 x (3/4 x 400e6/100e9 + 3 x 1 us) = 6.006 ms): the ring.
  r = collective_cost(&c, COLL_ALL_REDUCE, 400e6, (Group){4, 1});
  expect_time("all-reduce inside a node", r.seconds, 6e-3 + 6e-6);
  EXPECT("  ... picks the ring", !strcmp(r.algorithm, "ring"), "picked %s", r.algorithm);
  // A fixed cost per collective (NCCL's baseLat), once even for an all-reduce's two passes.
  c.net.base_latency_s = 5e-6;
  r = collective_cost(&c, COLL_ALL_REDUCE, 400e6, (Group){4, 1});
  expect_time("a collective's fixed cost is paid once", r.seconds, 6e-3 + 6e-6 + 5e-6);
  r = collective_cost(&c, COLL_ALL_GATHER, 1e6, (Group){1, 1});
  EXPECT("a group of one rank takes no time", r.seconds == 0 && !strcmp(r.algorithm, "none") && r.sms == 0,
         "%g s, %s, %d SMs", r.seconds, r.algorithm, r.sms);
  // The SMs each holds: two channels per NVLink inside a node (2 x 4), two per NIC across nodes
  // (2 x 2), a replica group (one rank of a node's 4) drives its share of the NICs, at least one.
  int inside = collective_cost(&c, COLL_ALL_GATHER, 1e6, (Group){4, 1}).sms;
  int across = collective_cost(&c, COLL_REDUCE_SCATTER, 1e6, (Group){16, 1}).sms;
  int replica = collective_cost(&c, COLL_ALL_REDUCE, 1e6, (Group){4, 4}).sms;
  EXPECT("SMs held: 8 inside a node, 4 across nodes, 2 for a replica group", inside == 8 && across == 4 && replica == 2,
         "%d, %d, %d", inside, across, replica);
  c.gpu.nvlinks = 18;
  EXPECT("SMs held: at most NCCL's 32 channels", collective_cost(&c, COLL_ALL_GATHER, 1e6, (Group){4, 1}).sms == 32, "%d",
         collective_cost(&c, COLL_ALL_GATHER, 1e6, (Group){4, 1}).sms);
  c.comm_sms_max = 3;
  EXPECT("SMs held: --predict-comm-sms 3 caps them", collective_cost(&c, COLL_ALL_GATHER, 1e6, (Group){16, 1}).sms == 3,
         "%d", collective_cost(&c, COLL_ALL_GATHER, 1e6, (Group){16, 1}).sms);
}

// Kernels beside a collective run on the SMs it leaves, drawn by hand on the toy GPU (100 SMs):
//   links    |coll 20 SMs, 0-1 ms|      |coll 50 SMs, 1.5-2 ms|
//   compute  |kernel A: 1 ms of work at 80%, then 0.2 ms at 100%: ends at 1.2 ms|
//            kernel B from 1.2 ms, 0.5 ms of work: 0.3 ms to 1.5 ms, then 0.2 ms of work at
//            50% over 0.4 ms: ends at 1.9 ms
//            kernel C, 1 ms of work: 0.05 ms of it at 50% to 2 ms, then free: ends at 2.95 ms
static void test_sm_contention(void) {
  Cluster c = toy_cluster(8);
  timeline_configure(&c);
  timeline_collective(STREAM_ALL_GATHER, 1e-3, 20, "all-gather");
  timeline_collective(STREAM_REDUCE_SCATTER, 0.5e-3, 50, "reduce-scatter");  // queues behind it on the links
  expect_time("SMs: the second collective queues on the links", timeline_stream_clock(STREAM_REDUCE_SCATTER), 1.5e-3);
  // Its start (1 ms) is not what was drawn (1.5 ms): move it by a delay on its stream first.
  timeline_reset();
  timeline_collective(STREAM_ALL_GATHER, 1e-3, 20, "all-gather");
  timeline_copy(STREAM_REDUCE_SCATTER, 1.5e-3, "delay");
  timeline_collective(STREAM_REDUCE_SCATTER, 0.5e-3, 50, "reduce-scatter");
  timeline_kernel(STREAM_COMPUTE, 1e-3, "A");
  expect_time("SMs: kernel A beside 20 of 100 SMs held", timeline_stream_clock(STREAM_COMPUTE), 1.2e-3);
  timeline_kernel(STREAM_COMPUTE, 0.5e-3, "B");
  expect_time("SMs: kernel B runs free, then beside 50 of 100", timeline_stream_clock(STREAM_COMPUTE), 1.9e-3);
  expect_time("SMs: the stretch is counted (0.2 + 0.2 ms)", timeline_sm_contention(), 0.4e-3);
  timeline_kernel(STREAM_COMPUTE, 1e-3, "C");
  expect_time("SMs: kernel C, through the end of the second collective", timeline_stream_clock(STREAM_COMPUTE), 2.95e-3);
  // A collective holding no SMs (--predict-comm-sms 0), 3-4 ms, beside kernel D (2.95-3.95 ms).
  timeline_copy(STREAM_ALL_GATHER, 2e-3, "delay");
  timeline_collective(STREAM_ALL_GATHER, 1e-3, 0, "all-gather");
  timeline_kernel(STREAM_COMPUTE, 1e-3, "D");
  expect_time("SMs: a collective holding none slows nothing", timeline_stream_clock(STREAM_COMPUTE), 3.95e-3);
}

static void test_catalogue(void) {
  Cluster c;
  char err[512];
  EXPECT("catalogue: a100-80gb defaults to the FSDP paper's RoCE",
         !catalogue_cluster("a100-80gb", 8, &c, err, sizeof err) && !strcmp(c.net.name, "roce"), "%s", err);
  EXPECT("catalogue: h100-sxm:eth120 picks the named network",
         !catalogue_cluster("h100-sxm:eth120", 8, &c, err, sizeof err) && !strcmp(c.net.name, "eth120") && c.gpu.peak_flops == 989e12,
         "%s", err);
  EXPECT("catalogue: an unknown GPU is refused, naming the choices",
         catalogue_cluster("v100", 8, &c, err, sizeof err) && strstr(err, "a100-40gb"), "%s", err);
  EXPECT("catalogue: an unknown network is refused, naming the choices",
         catalogue_cluster("h200:slingshot", 8, &c, err, sizeof err) && strstr(err, "ib3200"), "%s", err);
}

static Options options(const char* extra) {
  static char buf[512];
  static char* argv[32];
  snprintf(buf, sizeof buf, "test --model gpt:L=2,C=64,H=4,V=256,T=16 --batch 2 --seq 16 --predict toy --world 8 %s", extra);
  int argc = 0;
  for (char* t = strtok(buf, " "); t && argc < 31; t = strtok(NULL, " ")) argv[argc++] = t;
  argv[argc] = NULL;
  optind = 0;  // parse_options is called once per case
  return parse_options(argc, argv);
}

// The measured step's ops of one stream and name, in issue order.
static int find(const Prediction* p, StreamId s, const char* what, const TimelineOp** out, int max) {
  int n = 0;
  for (int i = p->first_op; i < timeline_nops() && n < max; i++) {
    const TimelineOp* op = timeline_op(i);
    if (op->stream == s && !strcmp(op->what, what)) out[n++] = op;
  }
  return n;
}

static int overlaps(const TimelineOp* a, const TimelineOp* b) { return a->start < b->end && b->start < a->end; }

// An unshard as the schedule issues it on the all-gather stream: the cast of the shard into the
// slot, then the all-gather; its span covers both (as --trace draws it).
static TimelineOp unshard_span(const Prediction* p, int k) {
  const TimelineOp *cast[8], *ag[8];
  int nc = find(p, STREAM_ALL_GATHER, "cast_f32_to_act", cast, 8), na = find(p, STREAM_ALL_GATHER, "all-gather", ag, 8);
  if (k >= nc || k >= na) return (TimelineOp){"missing", STREAM_ALL_GATHER, -1, -1};
  return (TimelineOp){"unshard", STREAM_ALL_GATHER, cast[k]->start, ag[k]->end};
}

// Does any compute-stream op of the measured step overlap op c?
static int any_compute_overlap_from(const Prediction* p, const TimelineOp* c, const TimelineOp* from) {
  int started = from == NULL;
  for (int i = p->first_op; i < timeline_nops(); i++) {
    const TimelineOp* op = timeline_op(i);
    if (op == from) started = 1;
    if (started && op->stream == STREAM_COMPUTE && op->end > op->start && overlaps(op, c)) return 1;
  }
  return 0;
}
static int any_compute_overlap(const Prediction* p, const TimelineOp* c) { return any_compute_overlap_from(p, c, NULL); }

// The toy GPT (2 blocks, C=64), full shard over 8 ranks on 2 nodes of 4, drawn by hand:
//
//   all-gather  | root |block.0|block.1|          |block.1|block.0|
//   compute     |  wait|embed  |block.0 fwd|block.1 fwd|head bwd|block.1 bwd|block.0 bwd|embed bwd|wait|norm, adamw
//   reduce-scat |                                                |block.1     |block.0    |root|
//
// forward: block.0's all-gather is prefetched at the root's pre-forward (it runs beside the
// embedding), block.1's beside block.0's first kernels; backward: block.1's all-gather beside the
// lm_head's backward, block.0's issued before block.1's reduce-scatter, so the network carries
// it first and the reduce-scatter follows it at once; block.1's reduce-scatter runs beside
// block.0's backward; the root's reduce-scatter overlaps no kernel (the norm waits for it).
// Without backward prefetch, block.0's all-gather is issued after block.1's reduce-scatter and
// queues behind it on the network.
static void test_toy_timeline(void) {
  ModelConfig cfg;
  char err[256];
  Options o = options("");
  if (model_config_parse(o.model, &cfg, err, sizeof err)) {
    EXPECT("toy model parses", 0, "%s", err);
    return;
  }
  Cluster c = toy_cluster(8);
  Prediction p;
  predict_run(&o, &c, &cfg, NULL, &p);
  const TimelineOp *ag[8], *rs[8], *embed[2], *ln[8], *mmb[16], *sumsq[4], *add[8];
  int nag = find(&p, STREAM_ALL_GATHER, "all-gather", ag, 8), nrs = find(&p, STREAM_REDUCE_SCATTER, "reduce-scatter", rs, 8);
  EXPECT("toy: 5 all-gathers (root, block.0, block.1; block.1, block.0) and 3 reduce-scatters", nag == 5 && nrs == 3,
         "%d all-gathers, %d reduce-scatters", nag, nrs);
  if (nag != 5 || nrs != 3) return;
  find(&p, STREAM_COMPUTE, "embedding_forward", embed, 2);
  find(&p, STREAM_COMPUTE, "layernorm_forward", ln, 8);
  int nmmb = find(&p, STREAM_COMPUTE, "matmul_backward", mmb, 16);
  find(&p, STREAM_COMPUTE, "block_sumsq", sumsq, 4);
  find(&p, STREAM_REDUCE_SCATTER, "add_f32", add, 8);
  // A block of C=64 holds 49,984 elements, padded to 50,176 (a multiple of 8 x 128): 100,352
  // bf16 bytes. Ring on 8 ranks, 2 nodes: NVLink 7/8 x 100352/100e9 = 0.878 us, network
  // 1/2 x 100352/40e9 = 1.2544 us; + 1 step across nodes (10 us) + 6 inside them (1 us).
  expect_time("toy: block.0's all-gather takes the hand-computed ring time", ag[1]->end - ag[1]->start,
              0.5 * 100352 / 40e9 + 10e-6 + 6e-6);
  EXPECT("toy: root's all-gather overlaps no kernel of the forward (compute waits for it; only the step's own "
         "preparation runs beside it: its inputs summed over the ranks, the micro-batch's upload)",
         !any_compute_overlap_from(&p, ag[0], embed[0]), "it does");
  TimelineOp u1 = unshard_span(&p, 1), u2 = unshard_span(&p, 2);
  EXPECT("toy: block.0's unshard (cast + all-gather) overlaps the embedding", overlaps(&u1, embed[0]), "it does not");
  EXPECT("toy: block.1's unshard overlaps block.0's first layernorm", overlaps(&u2, ln[0]), "it does not");
  EXPECT("toy: block.1's backward all-gather overlaps the lm_head's matmul_backward", nmmb == 9 && overlaps(ag[3], mmb[0]),
         "%d matmul_backward", nmmb);
  EXPECT("toy: block.0's backward all-gather goes first; block.1's reduce-scatter follows it on the network",
         ag[4]->start < rs[0]->start && fabs(rs[0]->start - ag[4]->end) < 1e-15, "all-gather [%g, %g], reduce-scatter from %g",
         ag[4]->start, ag[4]->end, rs[0]->start);
  EXPECT("toy: block.1's reduce-scatter overlaps block.0's first matmul_backward", nmmb == 9 && overlaps(rs[0], mmb[5]),
         "it does not");
  EXPECT("toy: root's reduce-scatter overlaps no kernel; the norm starts after its accumulation",
         !any_compute_overlap(&p, rs[2]) && sumsq[0]->start >= add[2]->end, "norm at %g, accumulation ends %g",
         sumsq[0]->start, add[2]->end);
  // The backward share: from the forward's last compute kernel (the loss accumulation after the
  // fused classifier) to the backward's last (the embedding's); the backward's first kernel zeroes
  // the lm_head's gradient buffer.
  const TimelineOp *emb_b[2], *loss_acc[2];
  int nemb_b = find(&p, STREAM_COMPUTE, "embedding_backward", emb_b, 2);
  int nloss = find(&p, STREAM_COMPUTE, "loss_accumulate", loss_acc, 2);
  if (nemb_b == 1 && nloss == 1)
    expect_time("toy: backward time = loss_accumulate's end to embedding_backward's end", p.backward_s,
                emb_b[0]->end - loss_acc[0]->end);
  else
    EXPECT("toy: one loss_accumulate and one embedding_backward", 0, "%d, %d", nloss, nemb_b);
  double step_prefetch = p.step_s;

  o = options("--prefetch forward");
  predict_run(&o, &c, &cfg, NULL, &p);
  nag = find(&p, STREAM_ALL_GATHER, "all-gather", ag, 8);
  nrs = find(&p, STREAM_REDUCE_SCATTER, "reduce-scatter", rs, 8);
  EXPECT("toy, no backward prefetch: block.0's all-gather queues behind block.1's reduce-scatter",
         nag == 5 && nrs == 3 && fabs(ag[4]->start - rs[0]->end) < 1e-15, "all-gather from %g, reduce-scatter ends %g",
         nag == 5 ? ag[4]->start : -1, nrs == 3 ? rs[0]->end : -1);
  EXPECT("toy, no backward prefetch: the step is longer", p.step_s > step_prefetch, "%g s against %g s", p.step_s,
         step_prefetch);

  // Another allocator's retry (1 ms, after a device synchronization) before each of the step's
  // 5 all-gathers: the host, and so every stream, loses at least 5 ms.
  o = options("");
  c.alloc_retry_s = 1e-3;
  predict_run(&o, &c, &cfg, NULL, &p);
  EXPECT("toy, allocator retries: the step is longer by at least 5 x 1 ms", p.step_s >= step_prefetch + 5e-3,
         "%g s against %g s", p.step_s, step_prefetch);

  // The collectives' SMs: the lm_head's matmul_backward runs beside block.1's all-gather (above)
  // and is stretched by it; with collectives that hold none, it is not.
  c.alloc_retry_s = 0;
  predict_run(&o, &c, &cfg, NULL, &p);
  double contention = p.contention_s, held = -1, free = -2;
  if (find(&p, STREAM_COMPUTE, "matmul_backward", mmb, 16) == 9) held = mmb[0]->end - mmb[0]->start;
  c.comm_sms_max = 0;
  predict_run(&o, &c, &cfg, NULL, &p);
  if (find(&p, STREAM_COMPUTE, "matmul_backward", mmb, 16) == 9) free = mmb[0]->end - mmb[0]->start;
  EXPECT("toy: the lm_head's matmul_backward is longer beside the all-gather's SMs", held > free && free > 0,
         "%g s against %g s", held, free);
  EXPECT("toy: the step's stretch is positive, and none with --predict-comm-sms 0", contention > 0 && p.contention_s == 0,
         "%g s, then %g s", contention, p.contention_s);

  // --offload grads with 2 micro-steps: each of the 6 reductions (3 units, 2 micro-steps) brings
  // its host shard in and sends it back on the reduce-scatter stream (12 copies); the second
  // micro-step's also takes the shard's sum of squares there (3), so the norm runs no sum on the
  // compute stream and copies no gradient in over PCIe: the compute stream's copies to the device
  // are the tokens', as many as without offload.
  c.comm_sms_max = -1;
  o = options("--accum 2");
  predict_run(&o, &c, &cfg, NULL, &p);
  const TimelineOp* ops[16];
  int tokens_in = find(&p, STREAM_COMPUTE, "host copy", ops, 16);
  o = options("--offload grads --accum 2");
  predict_run(&o, &c, &cfg, NULL, &p);
  int copies_rs = find(&p, STREAM_REDUCE_SCATTER, "host copy", ops, 16);
  int sums_rs = find(&p, STREAM_REDUCE_SCATTER, "block_sumsq", ops, 16);
  int sums_c = find(&p, STREAM_COMPUTE, "block_sumsq", ops, 16);
  int in_c = find(&p, STREAM_COMPUTE, "host copy", ops, 16);
  EXPECT("toy, --offload grads: 12 shard copies and 3 sums on the reduce-scatter stream; on compute no sum, only the "
         "step's own copies (its inputs, tokens, outcome)",
         copies_rs == 12 && sums_rs == 3 && sums_c == 0 && in_c == tokens_in && tokens_in > 0,
         "%d copies, %d sums there; %d sums, %d copies in on compute (%d without offload)", copies_rs, sums_rs, sums_c, in_c,
         tokens_in);
}

// The same toy step with --shard hpz:4, node groups of 4 = the two nodes, drawn by hand: the
// forward's three all-gathers span the world as full sharding's (block.0's: 1.2544 us + 16 us);
// backward gathers block.1 and block.0 inside the node, NVLink only: 3/4 x 100352/100e9 + 3 x
// 1 us = 3.75264 us each. Each block's slice, 100352/4 = 25088 bytes, is copied out of the slot
// after its forward gather and back before its backward one: 4 device copies on the all-gather
// stream, reading and writing 25088 bytes at 1 TB/s, 50.176 ns each. The plan holds the two
// slices beside full sharding's.
static void test_toy_hpz(void) {
  ModelConfig cfg;
  char err[256];
  Options o = options("");
  if (model_config_parse(o.model, &cfg, err, sizeof err)) return;
  Cluster c = toy_cluster(8);
  Prediction full, p;
  predict_run(&o, &c, &cfg, NULL, &full);
  o = options("--shard hpz:4");
  predict_run(&o, &c, &cfg, NULL, &p);
  const TimelineOp *ag[8], *copies[8];
  int nag = find(&p, STREAM_ALL_GATHER, "all-gather", ag, 8), ncp = find(&p, STREAM_ALL_GATHER, "device copy", copies, 8);
  EXPECT("toy hpz:4: 5 all-gathers and 4 device copies on the all-gather stream", nag == 5 && ncp == 4,
         "%d all-gathers, %d copies", nag, ncp);
  if (nag != 5 || ncp != 4) return;
  expect_time("toy hpz:4: block.0's forward all-gather spans both nodes, as full sharding's", ag[1]->end - ag[1]->start,
              0.5 * 100352 / 40e9 + 10e-6 + 6e-6);
  expect_time("toy hpz:4: block.1's backward all-gather stays inside the node", ag[3]->end - ag[3]->start,
              0.75 * 100352 / 100e9 + 3e-6);
  expect_time("toy hpz:4: so does block.0's", ag[4]->end - ag[4]->start, 0.75 * 100352 / 100e9 + 3e-6);
  expect_time("toy hpz:4: a slice's copy reads and writes it once", copies[0]->end - copies[0]->start, 2 * 25088 / 1e12);
  EXPECT("toy hpz:4: each forward copy follows its block's all-gather, each backward one precedes it",
         copies[0]->start >= ag[1]->end && copies[1]->start >= ag[2]->end && copies[2]->end <= ag[3]->start &&
             copies[3]->end <= ag[4]->start, "copies at %g %g %g %g", copies[0]->start, copies[1]->start, copies[2]->start,
         copies[3]->start);
  EXPECT("toy hpz:4: the plan holds 2 x 25088 bytes of secondary shards more", p.plan_bytes - full.plan_bytes == 2 * 25088,
         "%.0f bytes more", p.plan_bytes - full.plan_bytes);
  EXPECT("toy hpz:4: the step is shorter than full sharding's", p.step_s < full.step_s, "%g s against %g s", p.step_s,
         full.step_s);
}

// --predict-sweep's strategies: hpz at the node size, and hybrid at multiples of it, only where
// there are several nodes.
static void test_sweep_strategies(void) {
  FSDPOptions run, s[PREDICT_MAX_STRATEGIES];
  memset(&run, 0, sizeof run);
  int n = predict_sweep_strategies(&run, 64, 8, s), hpz = 0, hybrid = 0, fixed = 0;
  for (int i = 0; i < n; i++) {
    hpz += s[i].strategy == SHARD_HPZ && s[i].hpz_factor == 8;
    hybrid += s[i].strategy == SHARD_HYBRID && s[i].hybrid_factor % 8 == 0 && s[i].hybrid_factor < 64;
    fixed += s[i].strategy == SHARD_FULL || s[i].strategy == SHARD_GRAD_OP || s[i].strategy == SHARD_NONE;
  }
  EXPECT("sweep on 64 GPUs, 8 per node: full, grad-op, none, hybrid:8,16,32 and hpz:8",
         n == 7 && hpz == 1 && hybrid == 3 && fixed == 3, "%d strategies: %d hpz:8, %d hybrid, %d others", n, hpz, hybrid, fixed);
  n = predict_sweep_strategies(&run, 8, 8, s);
  EXPECT("sweep on one node of 8: full, grad-op and none only (hpz would gather over the world)", n == 3, "%d strategies", n);
}

// The time attention_forward or attention_backward adds to the compute stream, from a fresh clock.
static double attention_seconds(const Cluster* c, int backward, int with_bias, AttnShape s, int* nops) {
  timeline_configure(c);
  timeline_reset();
  KernelCtx* k = kernels_init(0);
  AttnBias bias = {.table = with_bias ? (const act_t*)1 : NULL, .num_buckets = 32, .max_distance = 128, .bidirectional = 1};
  if (backward)
    attention_backward(k, NULL, NULL, NULL, with_bias ? (float*)1 : NULL, NULL, NULL, NULL, NULL, NULL, NULL, bias, s);
  else
    attention_forward(k, NULL, NULL, NULL, NULL, NULL, bias, s);
  *nops = timeline_nops();
  return timeline_stream_clock(STREAM_COMPUTE);
}

// --predict-attention eager: the seeds' unfused attention, a kernel per step, against the steps
// and bytes written out by hand. One head of 200, 1024 x 1024 scores (S = 1,048,576), on the toy
// GPU (100 TFLOPS, 1 TB/s): each batched GEMM does 2 x 200 x S = 4.194e8 FLOPs = 4.194 us and
// moves 2 x S + 2 x (1024 x 200 x 2) bytes = 2.92 us, so it is compute-bound at 4.194304 us.
static void test_eager_attention(void) {
  Cluster c = toy_cluster(8);
  AttnShape s = {1, 1024, 1024, 1, 200, 200, 200, 1.0f / sqrtf(200.0f), 1};
  const double S = 1048576, gemm = 2 * 200 * S / 100e12, byte = 1 / 1e12;
  int n;
  double fused_fwd = attention_seconds(&c, 0, 0, s, &n);
  c.attention = ATTENTION_EAGER_MINGPT;
  // minGPT forward: q @ k^T; * scale (4 bytes per score), masked_fill (4), softmax (4), dropout
  // (5: its mask too); att @ v.
  expect_time("eager minGPT attention forward: 2 GEMMs + 4 + 4 + 4 + 5 bytes per score",
              attention_seconds(&c, 0, 0, s, &n), 2 * gemm + 17 * S * byte);
  EXPECT("  ... as 6 kernels", n == 6, "%d", n);
  EXPECT("  ... longer than the fused kernel", attention_seconds(&c, 0, 0, s, &n) > fused_fwd, "it is not");
  // Backward: d(att) and dv; dropout (5), softmax (6), masked_fill (4), scale (4); dq and dk.
  expect_time("eager minGPT attention backward: 4 GEMMs + 5 + 6 + 4 + 4 bytes per score",
              attention_seconds(&c, 1, 0, s, &n), 4 * gemm + 19 * S * byte);
  EXPECT("  ... as 8 kernels", n == 8, "%d", n);
  // Hugging Face T5 (no scale, no causal mask): + position_bias (6), .float() (6), softmax in
  // fp32 (8), .type_as() (6), dropout (5).
  s.scale = 1.0f;
  s.causal = 0;
  c.attention = ATTENTION_EAGER_HF_T5;
  expect_time("eager T5 attention forward: 2 GEMMs + 6 + 6 + 8 + 6 + 5 bytes per score",
              attention_seconds(&c, 0, 1, s, &n), 2 * gemm + 31 * S * byte);
  EXPECT("  ... as 7 kernels", n == 7, "%d", n);
  // Backward: dropout (5), .type_as() (6), softmax in fp32 (12), .float() (6), and the bias
  // gradient: the scores' gradient read once (2) and the [1, 1024, 1024] bias written (2 bytes).
  expect_time("eager T5 attention backward with a bias gradient: 4 GEMMs + 29 bytes per score + the bias's",
              attention_seconds(&c, 1, 1, s, &n), 4 * gemm + 29 * S * byte + (2 * S + 2 * S) * byte);
  EXPECT("  ... as 9 kernels", n == 9, "%d", n);
  expect_time("eager T5 cross-attention backward (no bias gradient)", attention_seconds(&c, 1, 0, s, &n),
              4 * gemm + 29 * S * byte);
}

int main(void) {
  test_collectives();
  test_catalogue();
  test_sm_contention();
  test_toy_timeline();
  test_toy_hpz();
  test_sweep_strategies();
  test_eager_attention();
  return test_summary();
}
