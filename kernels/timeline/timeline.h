// timeline.h: the prediction backend. It runs the real training step (layers/, fsdp/schedule.c,
// the optimizer) against a device that computes nothing: every kernel, copy and collective only
// advances the clock of the stream it was issued on, by a modelled duration, and events carry
// clock values between streams exactly as CUDA events carry completion. The step's length on
// those clocks is the predicted step time of one rank of a world of any size, from one process.
//
// Concept -> home:
//   GPU and network catalogue (cited constants)   kernels/timeline/catalogue.c
//   collective cost models (ring, tree, 2 levels) kernels/timeline/collective.c
//   stream clocks, events, the host model, memory kernels/timeline/device.c
//   kernel costs from exact FLOPs and bytes       kernels/timeline/kernels.c
//   communicators of a simulated world            kernels/timeline/comm.c
//   --predict / --predict-sweep: run and report   predict/predict.c, predict/predict_gpt.c
//   re-executing the prediction from a trainer    train/predict_exec.c
//
// It builds on --sim-world (fsdp/schedule.c), which keeps one rank and stretches each collective
// to a ring's duration: here the rank is rank 0 of a symmetric world (every rank runs the same
// schedule on same-sized shards), so its timeline is every rank's, and nothing else needs to run.
#ifndef FSDP_TIMELINE_H
#define FSDP_TIMELINE_H
#include <stddef.h>
#include <stdio.h>

#include "kernels/device.h"

// ---- catalogue (kernels/timeline/catalogue.c) ---------------------------------------------------
typedef struct {
  const char* name;          // a100-40gb, a100-80gb, h100-sxm, h200
  const char* label;         // what kernels_device_name reports
  double peak_flops;         // dense bf16 tensor-core rate, FLOP/s (datasheet)
  double matmul_eff;         // fraction of the peak a large bf16 GEMM reaches (measured)
  double attn_fwd_eff;       // fraction of the peak the fused attention forward reaches (measured)
  double attn_bwd_eff;       // ... its backward (measured)
  double hbm_bytes_s;        // memory bandwidth, bytes/s (datasheet)
  double hbm_eff;            // fraction of it a streaming kernel reaches (measured)
  double memory_bytes;       // device memory a plan may use
  double nvlink_bytes_s;     // per GPU, per direction, bytes/s (datasheet)
  double nvlink_eff;         // fraction of it NCCL reaches inside a node (measured)
  double launch_s;           // device-side gap between dependent kernels
  const char* network;       // its default network
  int sms;                   // streaming multiprocessors (whitepaper)
  int nvlinks;               // NVLink links per GPU (datasheet)
} GpuSpec;

typedef struct {
  const char* name;          // efa400, roce, eth120, ib3200
  int gpus_per_node;
  double node_bytes_s;       // network bandwidth of one node, per direction, bytes/s
  double net_eff;            // fraction of it NCCL's bus bandwidth reaches
  double latency_s;          // one network step of a collective (alpha)
  double intra_latency_s;    // one NVLink step (alpha)
  int nics;                  // network interfaces per node
  double base_latency_s;     // a collective's fixed cost, whatever its steps
} NetSpec;

// The host's cost of issuing work (cudaLaunchKernel, ncclGroupEnd) and of a synchronizing copy.
typedef struct {
  double launch_s;           // host time to issue one kernel or collective
  double sync_copy_s;        // a small synchronous copy (tokens in, loss out), beyond the wait
  double pcie_bytes_s;       // host <-> device copies
  double memory_bytes_s;     // one rank's share of host memory bandwidth (--offload optim)
} HostSpec;

typedef enum {
  ATTENTION_FUSED,          // fsdp.c's kernels/cuda/attention.cu
  ATTENTION_EAGER_MINGPT,   // minGPT's CausalSelfAttention (the FSDP paper's and AWS post's GPT)
  ATTENTION_EAGER_HF_T5,    // Hugging Face's T5Attention (the FSDP paper's and IBM post's T5)
} AttentionImpl;

typedef struct {
  GpuSpec gpu;
  NetSpec net;
  HostSpec host;
  int world;
  // Another framework's allocator, for comparison (--predict-alloc-retry MS): a caching
  // allocator at its memory limit frees its cache (cudaFree synchronizes the device) and calls
  // cudaMalloc before each unit's all-gather. fsdp.c allocates once; 0 models fsdp.c.
  double alloc_retry_s;
  // The attention kernels, for comparison (--predict-attention eager): fsdp.c's fused kernel
  // (FlashAttention-2-style), or the unfused attention the seeds' PyTorch models ran, a kernel
  // per step over the whole score tensor (kernels/timeline/kernels.c says which steps and their bytes).
  AttentionImpl attention;
  // The SMs a collective may hold (--predict-comm-sms N, as NCCL_MAX_CTAS caps them): -1 leaves
  // NCCL's own choice (collective.c); 0 models collectives that take no SMs from the kernels.
  int comm_sms_max;
} Cluster;

const GpuSpec* catalogue_gpu(const char* name);
const NetSpec* catalogue_net(const char* name);
// "GPU[:NETWORK]" -> cluster of `world` ranks; -1 with a message naming the choices.
int catalogue_cluster(const char* spec, int world, Cluster* out, char* err, size_t errlen);
// --predict list: every GPU and network with the figures a prediction uses.
void catalogue_print(FILE* f);

// ---- collectives (kernels/timeline/collective.c) ------------------------------------------------
typedef enum { COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_ALL_REDUCE, COLL_BROADCAST } CollKind;
// A communicator of n ranks, `stride` apart in world rank order (a shard group: stride 1; a
// replica group: stride F), on nodes of gpus_per_node consecutive ranks.
typedef struct {
  int n, stride;
} Group;
typedef struct {
  double seconds;
  const char* algorithm;     // "ring", "tree" or "none"
  int nodes;                 // nodes the group spans
  int per_node;              // its ranks per node
  int sms;                   // SMs its kernel holds while it runs (one per NCCL channel)
} CollCost;
// bytes: the whole buffer (all-gather / reduce-scatter: n x the per-rank chunk; all-reduce and
// broadcast: the buffer every rank holds).
CollCost collective_cost(const Cluster* c, CollKind kind, double bytes, Group g);

// ---- device, clocks and the op log (kernels/timeline/device.c) ---------------------------
void timeline_configure(const Cluster* c);
const Cluster* timeline_cluster(void);
// Clears the clocks, the op log and the counters (before a new prediction in the same process).
void timeline_reset(void);
// Work on stream s, issued by the host now: it starts when both the stream and the host have
// reached it. Each returns the start time.
//   kernel: `seconds` on the whole GPU; while a collective holds some of the SMs, it runs at the
//           rate of the SMs left, so it takes longer.
//   collective: `seconds` on this rank's links (collectives share them, one after the other),
//           holding `sms` SMs from the kernels beside it while it runs.
//   copy: `seconds` on a copy engine or the host (PCIe copies, delays): no SMs, no links.
double timeline_kernel(StreamId s, double seconds, const char* what);
double timeline_collective(StreamId s, double seconds, int sms, const char* what);
double timeline_copy(StreamId s, double seconds, const char* what);
double timeline_stream_clock(StreamId s);
// The host waits for every stream (device_synchronize without the call log).
void timeline_synchronize(void);
// The host is busy for `seconds` (a blocking call of another framework: cudaMalloc).
void timeline_host_wait(double seconds);
double timeline_host_clock(void);
// Exposed waiting of the compute stream since timeline_reset.
double timeline_compute_stalled(void);
// Time kernels lost to the SMs collectives held (their stretch), since timeline_reset.
double timeline_sm_contention(void);
// Is p inside the (reserved, untouched) device memory?
int timeline_is_device(const void* p);

// ---- kernels (kernels/timeline/kernels.c) ---------------------------------------------
// The eager attention's memory (--predict-attention eager), per score element: the bytes
// PyTorch's autograd keeps of one attention for its backward, and the most that attention's
// backward holds on top of them. predict.c counts the attentions alive at once.
typedef struct {
  double saved, transient;
} EagerScoreBytes;
EagerScoreBytes timeline_eager_score_bytes(void);

// ---- communicators (kernels/timeline/comm.c) -------------------------------------------
// A communicator of rank 0's groups: n ranks `stride` apart, issuing on stream s. comm_split
// cannot build these (rank 0 alone does not know the other ranks' colors), so the prediction
// makes the FSDP groups from the strategy, as fsdp_init's splits would.
struct Comm* timeline_comm_group(int n, int stride, StreamId s);

// Every operation, in issue order (tests draw the timeline from it).
typedef struct {
  const char* what;  // kernel or collective name
  StreamId stream;
  double start, end;
} TimelineOp;
int timeline_nops(void);
const TimelineOp* timeline_op(int i);
// The SMs collectives held, one span per collective, in the order they ran (the trace draws
// them as a counter).
typedef struct {
  double start, end;
  int sms;
} TimelineSMs;
int timeline_nsm_spans(void);
const TimelineSMs* timeline_sm_span(int i);
#endif
