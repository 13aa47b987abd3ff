// fsdp.h: the FSDP runtime (ZeRO-3): units, flat layout, shards, the schedule, the optimizer.
//
// Concept -> home:
//   strategy, sharding factor, process groups    fsdp/groups.c
//   unit, parameter table, flat layout, shards,  fsdp/layout.c
//   where a parameter crosses a shard
//   carving the plan, sharded initialization     fsdp/init.c
//   slots, the four unshard/reshard points,      fsdp/schedule.c
//   prefetch, gradient reduction, the
//   collectives' instrumentation
//   secondary shards (--shard hpz)               fsdp/schedule.c; node groups in fsdp/groups.c
//   sharded AdamW, global-norm clipping          fsdp/optimizer.c
//   skipped non-finite steps, loss scaling       kernels/step_control.h (decided on the device),
//                                                fsdp/optimizer.c (the host's record)
//   checkpoints (verified, crash-safe)           fsdp/checkpoint.c, their files fsdp/checkpoint_format.c
//   memory plan (one allocation)                 fsdp/memplan.c
//   CPU offload: shards and AdamW on the host    fsdp/schedule.c, fsdp/optimizer.c
//   CPU offload: block outputs (a device ring)   fsdp/offload.c
//   --trace timeline, drawn at the four points   fsdp/trace.c
//   mixed precision (act_t, DType)               kernels/precision.h
//   memory, streams, events                      kernels/device.h (kernels/{cpu,cuda,timeline}/device.c)
//   communication (MPI / NCCL)                   kernels/comm.h (kernels/cpu/comm_mpi.c, kernels/cuda/comm_nccl.c)
//   the schedule on modelled clocks (--predict)  kernels/timeline/timeline.h, predict/predict.c
//   one optimizer step (the loop body)           train/step.c
//   the --shard, --offload, --prefetch words     train/options.c
// fsdp/README.md explains each concept and the paper section it comes from. What the runtime
// stands on: the backends in kernels/ (the compute API kernels.h, the device API device.h, the
// communication API comm.h; one folder per backend: cpu/, cuda/, timeline/), and infra/:
// processes, ranks and fatal errors (dist.c), starting without mpirun (launch.c), the one strict
// JSON reader (json.c), and the rules of every file read and path written (files.c: regular
// files, size bounds, name lengths, directory locks).
#ifndef FSDP_FSDP_H
#define FSDP_FSDP_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/comm.h"
#include "kernels/device.h"
#include "fsdp/memplan.h"
#include "fsdp/trace.h"
#include "kernels/kernels.h"
#include "kernels/step_control.h"

// Every parameter starts at a multiple of PARAM_ALIGN elements inside its unit; a unit is
// padded to a multiple of F * SHARD_ALIGN elements, so each of the F shards is a whole number
// of SHARD_ALIGN-element blocks (and of NORM_BLOCK blocks for the gradient norm).
#define PARAM_ALIGN 64
#define SHARD_ALIGN 128
#define FSDP_MAX_PARAMS 32
#define FSDP_NAME_LEN 48

typedef enum { INIT_ZERO, INIT_ONE, INIT_NORMAL } InitRule;

// One row of a unit's parameter table.
typedef struct {
  char name[FSDP_NAME_LEN];
  int ndim;
  int64_t shape[4];
  int64_t numel;
  int64_t offset;   // in the unit's flat buffer, a multiple of PARAM_ALIGN
  int64_t live;     // elements [live, numel) are padding (vocabulary rows): zero, never trained
  InitRule init;
  float std;        // for INIT_NORMAL
  int64_t split;    // INIT_NORMAL: elements [split, numel) use std_tail (fused q|k|v weights)
  float std_tail;
  int decay;        // AdamW applies weight decay to it
  // The parameter's identity whatever the wrapping: its unit and index under --wrap block.
  // Initial values and weight-file names are keyed by it, so --wrap linear trains the same model.
  int home_unit, home_param;
} ParamInfo;

// The FSDP unit: FlatParameter of the FSDP paper (section 3.2.1).
typedef struct {
  char name[32];
  int index;                       // position in the unit list (0 = root)
  int nparams;
  ParamInfo params[FSDP_MAX_PARAMS];
  int64_t numel;                   // end of the last parameter: the unpadded flat size
  int64_t padded;                  // numel rounded up to F * SHARD_ALIGN
  int64_t shard;                   // padded / F: elements owned by each rank of a shard group
  // This rank's shard [shard_rank*shard, (shard_rank+1)*shard): fp32 master, gradient, AdamW m, v.
  float *master, *grad, *m, *v;
  // The parameters this shard holds, cut to it, with their weight-decay flags: AdamW's ranges
  // (kernels.h), so a unit's update is one call.
  int nseg;
  AdamWRange* segs;
  // A unit whose shard is the whole unit (F = 1) keeps its 16-bit working copy: AdamW writes it
  // as it updates the master, so an unshard is no cast and no collective (fsdp/schedule.c).
  act_t* work;                     // NULL unless FSDP.working_copy
  int work_stale;                  // the master changed since (initialization, a load, a host step)
  // Unsharded state: set between an unshard and the matching reshard.
  act_t* full_params;              // gathered parameters (a slot, the root buffer, or the working copy)
  float* full_grads;               // unsharded gradient buffer
  int slot, grad_slot;             // indices in the pools, -1 when none
  // The unit's events: its all-gather completed; its unsharded gradient is written; its
  // gradient reduction has read the buffer (and written the gradient shard).
  DeviceEvent *gathered, *grad_ready, *grad_reduced;
  // --shard hpz: this rank's secondary shard of the unit's 16-bit parameters (padded / F2
  // elements of the plan's "secondary" region; NULL for the root and other strategies), and
  // whether it holds the parameters of the current forward (set by the forward's unshard,
  // cleared at the unit's post-backward).
  act_t* secondary;
  int secondary_held;
} Unit;

#define ACT_RING 3  // --offload activations: block outputs on the device (fsdp/offload.c)

typedef enum { SHARD_FULL, SHARD_GRAD_OP, SHARD_NONE, SHARD_HYBRID, SHARD_HPZ } ShardStrategy;

typedef struct {
  ShardStrategy strategy;
  int hybrid_factor;       // F for SHARD_HYBRID
  int hpz_factor;          // F2 for SHARD_HPZ: ranks of a node group (0: the ranks per node)
  int limit_all_gathers;   // K: the slot pool size for strategies that reshard after forward
  int sync_accum;          // reduce-scatter every micro-step (1) or only on the last (0)
  int accum_steps;         // micro-steps per optimizer step (the plan keeps no unsharded gradient
                           // buffers when each goes straight into its shard: F = 1 and one micro-step)
  int prefetch_forward, prefetch_backward;
  int decay_embeddings;    // also decay embeddings (default: only matmul weights decay)
  DType reduce_dtype;      // dtype of the gradient collectives (DT_F32 by default)
  // Simulated link (--sim-world W --sim-link GBps): keep the one-rank arithmetic, but replace
  // each collective by a wait as long as a ring all-gather / reduce-scatter of that size
  // would take on sim_world ranks at sim_gbps GB/s per rank.
  int sim_world;
  double sim_gbps;
  // Activation checkpointing (--recompute; FSDP paper section 7, the 175B/1T posts): with
  // RECOMPUTE_BLOCK a block keeps only its output, and its backward first re-runs its forward
  // (the unit is already unsharded for backward, so no extra collective); with
  // RECOMPUTE_SELECTIVE it keeps the matmul and attention outputs and recomputes the cheap
  // parts (norms and their statistics, activation functions) before its backward.
  int recompute;
  // Wrapping policy (--wrap; FSDP paper section 3.2.1, the AWS post's 1T recipe): WRAP_BLOCK
  // makes each transformer block one unit; WRAP_LINEAR makes each matmul weight of a block its
  // own unit (norms and biases with their neighbour), so the slots and gradient buffers shrink
  // to the largest matmul and collectives overlap at a finer grain.
  int wrap;
  // CPU offload (--offload; FSDP paper section 3.1 and 7, ZeRO-Offload): OFFLOAD_* bits of
  // what lives in pinned host memory instead of the device. PARAMS: the fp32 master shards
  // (copied in before each unshard); GRADS: the fp32 gradient shards (each reduced chunk is
  // accumulated on the device and copied back); OPTIM: AdamW m and v, and the optimizer step
  // runs on the host; ACTIVATIONS: each block's output, copied out in forward and back in
  // before its backward on the copy stream.
  int offload;
} FSDPOptions;
enum { OFFLOAD_PARAMS = 1, OFFLOAD_OPTIM = 2, OFFLOAD_GRADS = 4, OFFLOAD_ACTIVATIONS = 8 };
enum { RECOMPUTE_NONE, RECOMPUTE_BLOCK, RECOMPUTE_SELECTIVE };
enum { WRAP_BLOCK, WRAP_LINEAR };

// The slot pool (fsdp/schedule.c): unsharded parameter buffers, FSDP's rate limiter (paper
// section 4.2) as a sliding window over memory fixed at start-up. The root has its own buffer,
// kept unsharded from the start of forward to the end of backward.
typedef struct {
  int n;                    // K slots: at most K units unsharded at once
  act_t** buf;
  int* owner;               // unit holding each slot, -1 when free
  DeviceEvent** free;       // recorded when the slot's last reader is done
  act_t* root;              // the root's buffer
  DeviceEvent* root_free;   // the root buffer's readers of the last pass are done
  act_t* region;            // the plan's region the slots are carved from
} SlotPool;

// Unsharded gradient buffers (fsdp/schedule.c): a pool (one written, one being reduced) when
// every micro-step reduces, or one per unit kept across micro-steps (paper section 3.4).
typedef struct {
  int n;
  float** buf;
  int* owner;               // unit writing each buffer, -1 when free
  int* last_reader;         // the unit whose reduction last read each buffer (-1: none)
  int next;                 // where the round-robin search for a free buffer starts
  float* root;              // the root's own
  act_t* reduce_staging;    // --reduce-dtype 16-bit, unsharded units: the 16-bit copy
  float* region;
} GradBuffers;

// --offload staging (the schedule and the optimizer step; FSDP paper sections 3.1 and 7): a
// master shard copied in for its unshard (params), a gradient shard copied in to accumulate into
// (grads), and the optimizer step's copies of the master and gradient shards when they live on
// the other side of the step (host step: optim). The step stages two units, so one crosses PCIe
// while the other updates (fsdp/optimizer.c); on the device its first pair is master_in and
// grad_acc.
typedef struct {
  float *master_in, *grad_acc;
  float *step_master[2], *step_grad[2];
  DeviceEvent *step_in[2], *step_updated[2], *step_out;
} OffloadStaging;

// Block outputs kept for backward (fsdp/offload.c): L slices on the device, or on the host with
// a device ring of ACT_RING slots (--offload activations).
typedef struct {
  int blocks;
  size_t* offset;           // per block, and one past the last: elements before it
  size_t slot;              // elements of the largest block output (a ring slot)
  act_t *device, *host;
  int holder[ACT_RING], released[ACT_RING];  // per ring slot: whose output, read for the last time
  DeviceEvent *compute_done[ACT_RING], *copy_done[ACT_RING];
} BlockOutputs;

// The global gradient norm (fsdp/optimizer.c): exact per-unit sums of squares, combined in one
// all-reduce that also carries a non-finite flag per unit.
typedef struct {
  double* blocks;           // workspace: per-block sums of squares of one shard
  int64_t* words;           // workspace: each unit's exact sum of squares (NORM_WORDS)
  int64_t* total;           // workspace: their total and each unit's flag (EXACT_WORDS + nunits),
                            // summed over the ranks
  int64_t* host;            // host copy of the total (fsdp_grad_norm)
  DeviceEvent *combined, *reduced;  // the total is made (compute stream), summed (reduce-scatter stream)
} NormState;

// Secondary shards (--shard hpz; ZeRO++'s hpZ, Wang et al. 2023; FSDP2's
// reshard_after_forward=int): full sharding whose post-forward reshard goes to the node instead
// of the world. The forward's all-gather spans the world as full sharding's does, and each rank
// keeps slice node_rank of the gathered unit, 1/F2 of its 16-bit parameters; the pre-backward
// unshard all-gathers those slices inside the node group. Gradients are still reduce-scattered
// over the world, and the fp32 master, gradient and AdamW state stay sharded over it (F = W).
typedef struct {
  int F2;                   // ranks in a node group: F2 consecutive placement positions (0: off)
  int node_rank;            // this rank's place in its node group: the slice it keeps
  act_t* region;            // the plan's region, carved into one secondary shard per block
} SecondaryShards;

// What the schedule counts, for tests, reports and traces.
typedef struct {
  int64_t all_gathers, reduce_scatters;
  int64_t node_all_gathers; // of the all-gathers, those from secondary shards in a node group
  double comm_seconds;      // host time spent in collectives (all of it exposed on CPU; on a
                            // GPU device_step_waited_seconds() adds the compute stalls)
  double sim_link_seconds;  // --sim-world: the modelled link time the collectives were held for
} CommStats;

typedef struct {
  // configuration
  FSDPOptions opt;
  int world_rank, world_size;
  int F;                            // sharding factor: ranks a unit is sharded over
  int shard_rank;                   // rank inside the shard group
  int replicas;                     // world_size / F
  int reshard_after_forward;
  // Units whose shard is the whole unit (F = 1: one rank, NO_SHARD, hybrid:1) need no cast and no
  // collective to unshard and no second fp32 copy of their gradient (fsdp/schedule.c):
  int working_copy;                 // each unit keeps its 16-bit copy (not with --offload params)
  int direct_grads;                 // backward accumulates into the gradient shard itself (one
                                    // micro-step per optimizer step, not with --offload grads)
  // Communicators. The shard group has two: one for all-gathers and one for reduce-scatters,
  // bound to their own streams, so the backend never serializes the two (FSDP paper 3.2 notes
  // that one process group forces the reduce-scatter and the next all-gather into one queue).
  // The node group (--shard hpz) gathers secondary shards, on the all-gather stream.
  Comm *world, *shard_group, *gather_group, *replica_group, *node_group;
  KernelCtx* kctx;                  // compute stream
  KernelCtx *kctx_gather, *kctx_reduce;  // the same kernels on the all-gather / reduce-scatter streams
  // units: 0 is the root, then the model's units in forward order
  int nunits;
  Unit* units;
  int64_t max_padded;               // largest non-root unit: the slot size
  int block_units;                  // units per transformer block (the model's wrapping policy)
  MemPlan plan;                     // the one allocation, and its regions:
  float *region_master, *region_grad, *region_m, *region_v;  // the shards, carved per unit
  act_t* region_work;               // the working copies (working_copy), carved per unit
  SlotPool slots;
  SecondaryShards secondary;
  GradBuffers grads;
  OffloadStaging offload;
  BlockOutputs acts;
  NormState norm;
  DeviceEvent* params_updated;      // recorded after the optimizer step wrote the master shards
  // the current step
  int training;                     // forward will be followed by backward
  int backward;                     // between the root's pre-backward and post-backward points
  int micro_step, accum_steps;      // current micro-step of the optimizer step, and their number
  CommStats stats;
  Trace* trace;                     // --trace timeline (fsdp/trace.c), NULL when off
} FSDP;

// ---- the strategy and the process groups (fsdp/groups.c) ---------------------------
// Creates the runtime for `nunits` units (unit 0 is the root); names are given to units by
// the model with fsdp_unit_name. Sets up communicators from the strategy.
void fsdp_init(FSDP* fs, int nunits, FSDPOptions opt, Comm* world, KernelCtx* kctx);
// The same layout for a world of world_size ranks, without communicators or memory: for
// planning (--plan --world N). Only fsdp_add_param, fsdp_finalize_layout and the plan work.
// A plan does not know the nodes: --shard hpz needs its F2 given (opt.hpz_factor).
void fsdp_init_plan(FSDP* fs, int nunits, FSDPOptions opt, int world_size);
// Where each rank sits among the shard groups: ranks are ordered by (node, rank) and cut into
// groups of F consecutive positions, so with hybrid sharding a shard group is made of ranks that
// share a host (HSDP: all-gathers and reduce-scatters inside a node, only the replica
// all-reduce across nodes; FSDP paper section 3.2.2), whatever order the launcher numbered them
// in; --shard hpz cuts its node groups of F2 from the same positions. node_of[r]: any id equal
// for ranks on the same node (dist_node, or FSDP_NODE_MAP). position[r] in [0, W).
void fsdp_group_positions(const int64_t* node_of, int W, int* position);

// ---- layout (fsdp/layout.c) --------------------------------------------------------
void fsdp_unit_name(FSDP* fs, int unit, const char* name);
// Appends a parameter to a unit's table; returns its index in the unit.
int fsdp_add_param(FSDP* fs, int unit, const char* name, int ndim, const int64_t* shape,
                   InitRule init, float std, int decay);
// Gives a parameter the identity it has under --wrap block (its home unit and index there).
void fsdp_set_home(FSDP* fs, int unit, int param, int home_unit, int home_param);
// Marks elements [live, numel) of a parameter as padding (zero-initialized, left out of the
// digest): the rows of a vocabulary padded to a multiple of 128.
void fsdp_set_live(FSDP* fs, int unit, int param, int64_t live);
// Gives elements [split, numel) of a normal-initialized parameter another std: one fused
// weight whose row blocks are initialized as separate matrices (T5's q versus k and v).
void fsdp_set_init_split(FSDP* fs, int unit, int param, int64_t split, float std_tail);
// Computes padding, shard sizes and decay segments once every parameter is added, and adds
// the runtime's regions (shards, optimizer state, slots, gradient buffers) to fs->plan.
void fsdp_finalize_layout(FSDP* fs);
// Where a parameter crosses this rank's shard of its unit: elements [first, end) of parameter p
// of unit U lie in the shard, from shard element `local` on (the shard starts at the unit's
// element shard_rank * shard). Only p's first `count` elements are considered: p->numel, or
// p->live to leave out the vocabulary padding. Returns 0 when the shard holds none of them.
// Initialization, the decay segments, checkpoints and weight files all cut parameters by it.
typedef struct {
  int64_t first, end, local;
} ShardPart;
int fsdp_shard_part(const FSDP* fs, const Unit* U, const ParamInfo* p, int64_t count, ShardPart* part);
// Counts of parameters (unpadded elements) and of padded elements.
int64_t fsdp_num_params(const FSDP* fs);
int64_t fsdp_num_padded(const FSDP* fs);

// ---- initialization (fsdp/init.c) --------------------------------------------------
// After memplan_allocate: carves the shards, pools and staging buffers from the plan's regions,
// creates the events, and writes the sharded initial values.
void fsdp_materialize(FSDP* fs, uint64_t seed);
// The initial value of element e of parameter p of unit u: a pure function of its arguments
// (counter-based generator), so any rank can compute any element and every world size gets
// the same model.
float fsdp_init_value(uint64_t seed, int unit, int param, int64_t element, InitRule rule, float std);
// Writes the initial values of this rank's shard of every unit.
void fsdp_init_shards(FSDP* fs, uint64_t seed);

// ---- schedule (fsdp/schedule.c): the four points per unit and pass -----------------
// One optimizer step is accum_steps micro-steps of forward + backward.
void fsdp_begin_step(FSDP* fs, int accum_steps);
// Starts a forward pass: unshards the root. training=0 for evaluation (no backward follows).
void fsdp_begin_forward(FSDP* fs, int micro_step, int training);
void fsdp_pre_forward(FSDP* fs, int unit);    // unshard (wait for prefetch) + prefetch next
void fsdp_post_forward(FSDP* fs, int unit);   // reshard, unless kept for backward
void fsdp_end_forward(FSDP* fs);              // evaluation: reshard everything still unsharded
void fsdp_pre_backward(FSDP* fs, int unit);   // unshard + gradient buffer + prefetch previous
// --recompute block, before a block's backward, around the re-run forward of each of its units:
// unshard (no new all-gather for a unit still gathered) and reshard all but the block's last
// unit, whose backward comes next; fsdp_pre_backward of each unit follows.
void fsdp_pre_recompute(FSDP* fs, int unit);
void fsdp_post_recompute(FSDP* fs, int unit);
void fsdp_post_backward(FSDP* fs, int unit);  // reduce-scatter gradient, reshard
// Marks every unit's 16-bit working copy stale after its master shards were written outside
// AdamW (initialization, a checkpoint or weights loaded): the next unshard casts it again.
void fsdp_masters_changed(FSDP* fs);
// Parameter and gradient views into the unsharded buffers (valid between the points). A root
// parameter or gradient taken while no other unit computes starts a span of the root's compute
// in --trace (fsdp/trace.h), so model code draws nothing.
act_t* fsdp_param(FSDP* fs, int unit, int param);
float* fsdp_grad(FSDP* fs, int unit, int param);
const ParamInfo* fsdp_param_info(const FSDP* fs, int unit, int param);

// ---- block outputs (fsdp/offload.c) ---------------------------------------------------
// The outputs of the model's `blocks` blocks (elems[l] act_t for block l), kept for backward:
// planned on the device, or on the host with --offload activations. Blocks are numbered in
// forward order (T5: the encoder's, then the decoder's), and backward asks for them in reverse.
// Forward: block l writes its output to fsdp_act_out(l), then calls fsdp_act_written(l).
// Backward: fsdp_act_in(l) is block l's output on the device (copied back if needed, and the
// previous one prefetched); fsdp_act_release(l) after its last reader.
void fsdp_plan_block_outputs(FSDP* fs, int blocks, const size_t* elems);
act_t* fsdp_act_out(FSDP* fs, int l);
void fsdp_act_written(FSDP* fs, int l);
const act_t* fsdp_act_in(FSDP* fs, int l);
void fsdp_act_release(FSDP* fs, int l);

// ---- optimizer (fsdp/optimizer.c) ---------------------------------------------------
// Queues the global gradient norm's words without waiting for them: each unit's exact sum of
// squares, combined (grad_norm_words) into fs->norm.total and summed over the shard group, the
// non-finite flags also over the replicas, so every rank ends with the same words (the same bits
// for any world size); step_decide reads them (kernels/step_control.h).
void fsdp_norm_words(FSDP* fs);
// The same norm on the host, waiting for it (tests and tools): NaN when any rank's gradient shard
// holds a non-finite value.
double fsdp_grad_norm(FSDP* fs);
// Unit u's exact sum of squares (and non-finite flag) from g, its gradient shard on the device,
// into its words of norm_words, on k's stream; fsdp_norm_words combines the units'.
void fsdp_unit_sumsq(FSDP* fs, KernelCtx* k, int u, const float* g);
// Fault injection for tests of the step's guard: one NaN in this rank's gradient shard of unit u.
void fsdp_poison_grad(FSDP* fs, int u);
// Sharded AdamW on every unit's shard with the step's scalars s, where the backend keeps its data
// (decided on the device: s->update 0 leaves parameters and AdamW state as they were, and skips the
// step on every rank); the gradient shards are zeroed either way.
void fsdp_adamw_step(FSDP* fs, const AdamWStep* s);
// A 64-bit digest of all parameters (unpadded fp32 values in global order), equal on all ranks.
uint64_t fsdp_params_digest(FSDP* fs);
// Gathers unit u's fp32 master parameters, unpadded, into out[numel] on every rank.
void fsdp_gather_master(FSDP* fs, int unit, float* out);
// Loss scaling (the policy: kernels/step_control.h, decided on the device). The host's record of the loss scale, for checkpoints and the step lines: the device keeps the
// live one (StepControl) and each step's outcome brings it back.
typedef struct {
  double scale;
  int dynamic, window, good;
} LossScaler;
void scaler_init(LossScaler* s, double scale, int dynamic, int window);
#endif
