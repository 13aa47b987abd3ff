// schedule.c: when a unit is unsharded and resharded, and when its gradient is reduced.
//
// Four points per unit and pass ("Rethinking FSDP", Rule 2): pre-forward unshard,
// post-forward reshard, pre-backward unshard, post-backward reshard + reduce-scatter. The
// root unit (embeddings, final norm, tied lm_head) is used at both ends of the model, so it
// stays unsharded from the start of forward to the end of backward.
//
// Unsharded parameters live in a fixed pool of slots. A unit borrows a slot when it is
// gathered and returns it when resharded; an all-gather into a slot first waits for the event
// recorded when the slot's previous owner was last read. With K slots at most K units are
// unsharded at once: FSDP's rate limiter (paper section 4.2, "at most two inflight
// AllGathers"), here a sliding window over memory fixed at start-up (IBM T5 post).
//
// Prefetch (paper sections 3.2, 3.3): the unit order is static, so pre-forward of unit i
// issues the all-gather of unit i+1, and pre-backward of unit i issues the all-gather of unit
// i-1, ahead of unit i's reduce-scatter, when a slot is free.
//
// --shard hpz reshards after forward to the node instead of the world (ZeRO++ hpZ; FSDP2's
// reshard_after_forward=int): a unit's training forward keeps this rank's slice of it, and its
// backward unshards from the slices over the node group. Only where the parameters come from
// changes; the slots, the points, prefetch and the rate limiter are the same.
//
// A unit whose shard is the whole unit (F = 1: one rank, NO_SHARD, hybrid:1) has nothing to
// gather: it keeps its 16-bit working copy, which AdamW writes as it updates the master
// (fsdp/optimizer.c), so unsharding it is no cast and no collective; and with one micro-step its
// gradient is accumulated in the gradient shard itself, with no unsharded buffer to zero, reduce
// and add (only the replicas' all-reduce, in place, where there are replicas).
//
// On the CPU backend collectives are synchronous and the stream/event calls are no-ops: the
// program order below is the schedule. The CUDA backend runs the same calls on streams.
#include <string.h>

#include "infra/clock.h"
#include "infra/dist.h"
#include "fsdp/fsdp.h"

// ---- instrumentation ---------------------------------------------------------------------
// Every collective the schedule issues is measured here, around it: its span on the --trace
// track of its stream, the host seconds it took (CommStats.comm_seconds: on the CPU backend,
// where collectives block, all of their time), and with --sim-world the simulated link, which
// holds the stream as long as a ring all-gather or reduce-scatter of ring_bytes would take on
// sim_world ranks at --sim-link GB/s: (W-1)/W of the buffer through each rank's link (0: none).
typedef struct {
  double start;
  int mark;
  TraceTrack track;
} CollectiveSpan;

static CollectiveSpan collective_begin(FSDP* fs, TraceTrack track, double ring_bytes) {
  CollectiveSpan c = {now_seconds(), trace_mark(fs->trace, track), track};
  int W = fs->opt.sim_world;
  if (W > 1 && ring_bytes > 0) {
    double seconds = (double)(W - 1) / W * ring_bytes / (fs->opt.sim_gbps * 1e9);
    device_delay(track == TRACK_ALL_GATHER ? STREAM_ALL_GATHER : STREAM_REDUCE_SCATTER, seconds);
    fs->stats.sim_link_seconds += seconds;
  }
  return c;
}

static void collective_end(FSDP* fs, CollectiveSpan c, const char* what, int unit) {
  fs->stats.comm_seconds += now_seconds() - c.start;
  trace_span(fs->trace, what, unit, c.track, c.mark, trace_mark(fs->trace, c.track));
}

static int free_slot(FSDP* fs) {
  for (int s = 0; s < fs->slots.n; s++)
    if (fs->slots.owner[s] < 0) return s;
  return -1;
}

// ---- secondary shards (--shard hpz) ---------------------------------------------------
// A training forward's all-gather leaves this rank's slice of the unit, node_rank of F2, in its
// secondary shard: the unit's state after its post-forward reshard. The copy runs on the
// all-gather stream right after the gather, after `gathered` is recorded, so compute never
// waits for it, and before any later all-gather can reuse the slot.
static void keep_secondary(FSDP* fs, Unit* U, const act_t* buf) {
  size_t n = (size_t)(U->padded / fs->secondary.F2);
  device_copy_async(U->secondary, buf + (size_t)fs->secondary.node_rank * n, n * sizeof(act_t), STREAM_ALL_GATHER);
  U->secondary_held = 1;
}

// The pre-backward unshard of hpz: the secondary shard goes back to its place in the slot and
// the node group all-gathers the rest, F2 ranks instead of the world (all on the all-gather
// stream, so a prefetch still never waits behind compute).
static void gather_secondary(FSDP* fs, Unit* U, act_t* buf) {
  size_t n = (size_t)(U->padded / fs->secondary.F2);
  act_t* mine = buf + (size_t)fs->secondary.node_rank * n;
  device_copy_async(mine, U->secondary, n * sizeof(act_t), STREAM_ALL_GATHER);
  comm_all_gather(fs->node_group, buf, n, ACT_DTYPE);
  fs->stats.node_all_gathers++;
}

// Unshard: borrow a slot (the root has its own buffer), cast this rank's fp32 master shard
// straight into its place in the slot (mixed precision: the all-gather sends compute-dtype
// data), and all-gather in place. The cast and the collective both run on the all-gather
// stream, so a prefetch never waits behind compute. With hpz, backward gathers from the
// secondary shards instead (gather_secondary).
static void unshard(FSDP* fs, int u) {
  Unit* U = &fs->units[u];
  if (U->full_params) return;  // already gathered: prefetched, or kept since forward
  act_t* buf;
  // The master shard is read below: the last optimizer step must have written it.
  device_stream_wait(STREAM_ALL_GATHER, fs->params_updated);
  if (fs->working_copy) {  // the shard is the whole unit, and its 16-bit copy is kept
    if (U->work_stale) {
      cast_f32_to_act(fs->kctx_gather, U->work, U->master, U->shard);
      U->work_stale = 0;
    }
    device_event_record(U->gathered, STREAM_ALL_GATHER);
    U->full_params = U->work;
    return;
  }
  if (u == 0) {
    buf = fs->slots.root;
    device_stream_wait(STREAM_ALL_GATHER, fs->slots.root_free);  // its readers of the last pass are done
  } else {
    int s = free_slot(fs);
    if (s < 0) fatal("schedule: no free slot to unshard %s (%d slots); this is a bug", U->name, fs->slots.n);
    fs->slots.owner[s] = u;
    U->slot = s;
    buf = fs->slots.buf[s];
    device_stream_wait(STREAM_ALL_GATHER, fs->slots.free[s]);  // the slot's last reader is done
  }
  int from_node = U->secondary_held && fs->backward;
  CollectiveSpan span = collective_begin(fs, TRACK_ALL_GATHER, from_node ? 0 : (double)U->padded * sizeof(act_t));
  if (from_node) {
    gather_secondary(fs, U, buf);
  } else {
    const float* master = U->master;
    if (fs->opt.offload & OFFLOAD_PARAMS) {  // the master shard is in host memory: copy it in first
      device_copy_async(fs->offload.master_in, U->master, (size_t)U->shard * sizeof(float), STREAM_ALL_GATHER);
      master = fs->offload.master_in;
    }
    cast_f32_to_act(fs->kctx_gather, buf + (size_t)fs->shard_rank * U->shard, master, U->shard);
    comm_all_gather(fs->gather_group, buf, U->shard, ACT_DTYPE);
  }
  collective_end(fs, span, from_node ? "all-gather (node)" : "all-gather", u);
  device_event_record(fs->units[u].gathered, STREAM_ALL_GATHER);
  if (U->secondary && !from_node && fs->training && !fs->backward) keep_secondary(fs, U, buf);
  U->full_params = buf;
  fs->stats.all_gathers++;
}

// Reshard: the parameter views become invalid and the slot returns to the pool once the
// compute stream has finished reading it.
static void reshard(FSDP* fs, int u) {
  Unit* U = &fs->units[u];
  if (!U->full_params) return;
  if (fs->working_copy) {  // no slot: the copy stays, and only AdamW writes it, on the compute stream
    U->full_params = NULL;
    return;
  }
  if (u == 0) {
    device_event_record(fs->slots.root_free, STREAM_COMPUTE);
  } else {
    device_event_record(fs->slots.free[U->slot], STREAM_COMPUTE);
    fs->slots.owner[U->slot] = -1;
    U->slot = -1;
  }
  U->full_params = NULL;
}

// Issues the all-gather of unit u ahead of its use, if it is a block and a slot is free.
static void prefetch(FSDP* fs, int u) {
  if (u < 1 || u >= fs->nunits || fs->units[u].full_params || fs->working_copy) return;
  if (free_slot(fs) < 0) return;  // the rate limiter: no more than K units unsharded
  unshard(fs, u);
}

void fsdp_begin_step(FSDP* fs, int accum_steps) {
  if (fs->direct_grads && accum_steps != 1)
    fatal("schedule: %d micro-steps in a step planned for one (gradients straight into their shards); this is a bug",
          accum_steps);
  fs->accum_steps = accum_steps;
}

void fsdp_masters_changed(FSDP* fs) {
  for (int u = 0; u < fs->nunits; u++) fs->units[u].work_stale = 1;
}

void fsdp_begin_forward(FSDP* fs, int micro_step, int training) {
  fs->micro_step = micro_step;
  fs->training = training;
  fs->backward = 0;
}

void fsdp_pre_forward(FSDP* fs, int u) {
  trace_point(fs->trace);
  unshard(fs, u);
  device_stream_wait_timed(STREAM_COMPUTE, fs->units[u].gathered);  // exposed all-gather time
  if (fs->opt.prefetch_forward) prefetch(fs, u + 1);
  trace_compute_begin(fs->trace, u, "forward");
}

void fsdp_post_forward(FSDP* fs, int u) {
  trace_compute_end(fs->trace, u, "forward");
  if (u == 0) return;  // the root stays unsharded until the end of backward (or of evaluation)
  // grad-op and none keep the unit unsharded for backward: no second all-gather.
  if (fs->training && !fs->reshard_after_forward) return;
  reshard(fs, u);
}

void fsdp_end_forward(FSDP* fs) {
  trace_point(fs->trace);
  if (fs->training) return;
  for (int u = 0; u < fs->nunits; u++) reshard(fs, u);
}

// The unsharded gradient buffer of unit u: the root's own, a pooled one when every micro-step
// reduces, or one kept per block across micro-steps without synchronization. Compute zeroes it
// only after the reduction that last read it (on the reduce-scatter stream) is done.
static void borrow_grad_buffer(FSDP* fs, int u) {
  Unit* U = &fs->units[u];
  if (fs->direct_grads) {  // the gradient shard itself, zeroed by the last optimizer step (compute stream)
    U->full_grads = U->grad;
    return;
  }
  int fresh = fs->opt.sync_accum || fs->micro_step == 0;
  int last_reader = u;  // the root and the no-sync buffers only ever hold their own unit
  if (u == 0) {
    U->full_grads = fs->grads.root;
  } else if (!fs->opt.sync_accum) {
    U->grad_slot = u - 1;
    U->full_grads = fs->grads.buf[u - 1];
  } else {
    // Round robin from the buffer after the last one borrowed: the buffer the previous unit
    // just returned is still being read by its reduce-scatter, and taking it would make this
    // unit's backward wait for that reduction (one buffer in effect).
    int s = -1;
    for (int i = 0; i < fs->grads.n && s < 0; i++) {
      int c = (fs->grads.next + i) % fs->grads.n;
      if (fs->grads.owner[c] < 0) s = c;
    }
    if (s < 0) fatal("schedule: no free gradient buffer for %s; this is a bug", U->name);
    fs->grads.next = (s + 1) % fs->grads.n;
    fs->grads.owner[s] = u;
    last_reader = fs->grads.last_reader[s];
    fs->grads.last_reader[s] = u;
    U->grad_slot = s;
    U->full_grads = fs->grads.buf[s];
  }
  if (last_reader >= 0) device_stream_wait_timed(STREAM_COMPUTE, fs->units[last_reader].grad_reduced);
  if (fresh) fill_zero_f32(fs->kctx, U->full_grads, U->padded);
}

// The unit backward gathers after unit u: the reverse of forward (after the root, lm_head,
// comes the last block), except that with --recompute block and several units per block the
// block's re-run forward starts from its first unit.
static int backward_next(const FSDP* fs, int u) {
  int recompute_units = fs->opt.recompute == RECOMPUTE_BLOCK && fs->block_units > 1;
  if (u == 0) return recompute_units ? fs->nunits - fs->block_units : fs->nunits - 1;
  if (recompute_units && (u - 1) % fs->block_units == 0) return u - fs->block_units;
  return u - 1;
}

void fsdp_pre_backward(FSDP* fs, int u) {
  trace_point(fs->trace);
  if (u == 0) fs->backward = 1;
  unshard(fs, u);
  device_stream_wait_timed(STREAM_COMPUTE, fs->units[u].gathered);
  borrow_grad_buffer(fs, u);
  if (fs->opt.prefetch_backward) prefetch(fs, backward_next(fs, u));
  trace_compute_begin(fs->trace, u, "backward");
}

// The last unit of its block: the first one backward needs after the block's recomputation.
static int last_of_block(const FSDP* fs, int u) { return (u - 1) % fs->block_units == fs->block_units - 1; }

void fsdp_pre_recompute(FSDP* fs, int u) {
  trace_point(fs->trace);
  unshard(fs, u);
  device_stream_wait_timed(STREAM_COMPUTE, fs->units[u].gathered);
  // Prefetch what comes next: the block's next unit, or after its last the unit before it,
  // which backward takes after this one.
  if (fs->opt.prefetch_backward) prefetch(fs, last_of_block(fs, u) ? u - 1 : u + 1);
  trace_compute_begin(fs->trace, u, "recompute");
}

void fsdp_post_recompute(FSDP* fs, int u) {
  trace_compute_end(fs->trace, u, "recompute");
  // Memory over traffic: a unit is gathered once more for its backward rather than holding all
  // of a block's units (--wrap linear) at once. The block's last unit is needed next: kept.
  if (!last_of_block(fs, u) && fs->reshard_after_forward) reshard(fs, u);
}

// Reduce-scatter the unsharded gradient inside the shard group, all-reduce the shard across
// replicas (hybrid sharding, paper section 3.2.2; DDP when F = 1), and accumulate it into the
// fp32 gradient shard, all on the reduce-scatter stream. Loss gradients are already scaled by
// 1/(global tokens), so sums are all that is needed.
// The gradient already in its shard (direct_grads): the replicas' all-reduce, in place, or nothing.
static void reduce_in_shard(FSDP* fs, Unit* U) {
  if (fs->replicas == 1) return;
  CollectiveSpan span = collective_begin(fs, TRACK_REDUCE_SCATTER, 0);
  if (fs->opt.reduce_dtype != DT_F32) {  // 16 bits on the wire, through the staging copy
    cast_f32_to_act(fs->kctx_reduce, fs->grads.reduce_staging, U->grad, U->shard);
    comm_all_reduce(fs->replica_group, fs->grads.reduce_staging, U->shard, fs->opt.reduce_dtype);
    cast_act_to_f32(fs->kctx_reduce, U->grad, fs->grads.reduce_staging, U->shard);
  } else {
    comm_all_reduce(fs->replica_group, U->grad, U->shard, DT_F32);
  }
  collective_end(fs, span, "all-reduce", U->index);
  fs->stats.reduce_scatters++;
}

static void reduce_gradient(FSDP* fs, Unit* U) {
  float* g = U->full_grads;
  float* chunk = g + (size_t)fs->shard_rank * U->shard;
  // Start once compute has written the gradient, and (for the accumulation into the shard)
  // once the last optimizer step has zeroed the gradient shard.
  device_event_record(fs->units[U->index].grad_ready, STREAM_COMPUTE);
  device_stream_wait(STREAM_REDUCE_SCATTER, fs->units[U->index].grad_ready);
  device_stream_wait(STREAM_REDUCE_SCATTER, fs->params_updated);
  if (fs->direct_grads) {
    reduce_in_shard(fs, U);
    device_event_record(fs->units[U->index].grad_reduced, STREAM_REDUCE_SCATTER);
    return;
  }
  CollectiveSpan span = collective_begin(fs, TRACK_REDUCE_SCATTER, (double)U->padded * sizeof(float));
  if (fs->opt.reduce_dtype != DT_F32) {
    // Reduce in the 16-bit activation type (half the bytes on the wire, FSDP's reduce_dtype),
    // accumulate in fp32. A sharded unit's gradient is narrowed in place into the first half of
    // its own buffer, and the reduced chunk widens into the second half (a shard is at most half
    // the unit), so no staging buffer of the largest unit is needed (it would put the 1T model's
    // plan over 40 GB). Unsharded, the 16-bit copy goes to a staging buffer. (fp16 sums can
    // overflow: the loss scaler's norm check sees the inf and skips the step.)
    act_t* g16 = fs->grads.reduce_staging;
    if (fs->F > 1) {
      narrow_f32_to_act(fs->kctx_reduce, g, U->padded);
      g16 = (act_t*)g;
      chunk = g + U->padded / 2;
    } else {
      cast_f32_to_act(fs->kctx_reduce, g16, g, U->padded);
    }
    comm_reduce_scatter(fs->shard_group, g16, U->shard, fs->opt.reduce_dtype);
    comm_all_reduce(fs->replica_group, g16 + (size_t)fs->shard_rank * U->shard, U->shard, fs->opt.reduce_dtype);
    cast_act_to_f32(fs->kctx_reduce, chunk, g16 + (size_t)fs->shard_rank * U->shard, U->shard);
  } else {
    comm_reduce_scatter(fs->shard_group, g, U->shard, DT_F32);
    comm_all_reduce(fs->replica_group, chunk, U->shard, DT_F32);
  }
  collective_end(fs, span, "reduce-scatter", U->index);
  if (fs->opt.offload & OFFLOAD_GRADS) {
    // The gradient shard is in host memory: bring it in, accumulate on the device, send it back
    // (all on this stream, so the staging buffer is reused in order). The step's last reduction
    // also takes the shard's sum of squares for the gradient norm while it is here, so the norm
    // does not bring it back over PCIe (fsdp/optimizer.c).
    size_t bytes = (size_t)U->shard * sizeof(float);
    device_copy_async(fs->offload.grad_acc, U->grad, bytes, STREAM_REDUCE_SCATTER);
    add_f32(fs->kctx_reduce, fs->offload.grad_acc, chunk, U->shard);
    if (fs->micro_step == fs->accum_steps - 1) fsdp_unit_sumsq(fs, fs->kctx_reduce, U->index, fs->offload.grad_acc);
    device_copy_async(U->grad, fs->offload.grad_acc, bytes, STREAM_REDUCE_SCATTER);
  } else {
    add_f32(fs->kctx_reduce, U->grad, chunk, U->shard);
  }
  // Compute waits on this before it reuses the buffer or reads the gradient shard.
  device_event_record(fs->units[U->index].grad_reduced, STREAM_REDUCE_SCATTER);
  fs->stats.reduce_scatters++;
}

void fsdp_post_backward(FSDP* fs, int u) {
  Unit* U = &fs->units[u];
  trace_compute_end(fs->trace, u, "backward");
  if (u == 0) fs->backward = 0;
  // Gradient accumulation without communication (paper section 3.4) reduces only on the
  // last micro-step; until then the unsharded gradient stays in its buffer.
  int reduce = fs->opt.sync_accum || fs->micro_step == fs->accum_steps - 1;
  if (reduce) reduce_gradient(fs, U);
  reshard(fs, u);
  U->secondary_held = 0;  // hpz: the next forward keeps a new one
  if (u != 0 && fs->opt.sync_accum && U->grad_slot >= 0) {
    fs->grads.owner[U->grad_slot] = -1;
    U->grad_slot = -1;
  }
  U->full_grads = NULL;
}

act_t* fsdp_param(FSDP* fs, int unit, int param) {
  Unit* U = &fs->units[unit];
  if (!U->full_params)
    fatal("schedule: parameter %s of %s used while sharded; this is a bug", U->params[param].name, U->name);
  if (unit == 0) trace_root_used(fs->trace, fs->backward ? "backward" : "forward");
  return U->full_params + U->params[param].offset;
}

float* fsdp_grad(FSDP* fs, int unit, int param) {
  Unit* U = &fs->units[unit];
  if (!U->full_grads)
    fatal("schedule: gradient of %s of %s used outside backward; this is a bug", U->params[param].name, U->name);
  if (unit == 0) trace_root_used(fs->trace, "backward");
  return U->full_grads + U->params[param].offset;
}
