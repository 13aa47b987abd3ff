// offload.c: block outputs in host memory (--offload activations), copied by the schedule.
//
// With activation checkpointing a block keeps only its output for backward (FSDP paper section
// 7; the AWS post's 1T recipe offloads these "outer" activations too). --offload activations
// keeps those L outputs in pinned host memory and only a ring of ACT_RING of them on the device:
//   forward   block l writes its output into ring slot l % ACT_RING; once written, the copy
//             stream sends it to the host, and block l + ACT_RING waits for that copy before it
//             overwrites the slot;
//   backward  block l reads the output of block l-1 (its input); the copy stream brings it back
//             into its slot once the slot's last reader is done, one block ahead of its use.
// The last ACT_RING outputs of forward are still on the device when backward starts, so the
// first blocks of backward copy nothing in. Events order everything: compute never waits on
// the copy stream except for a slot it is about to write or read. Without the option the same
// calls hand out the block's own slice of one device region and copy nothing.
#include <stdlib.h>

#include "infra/dist.h"
#include "fsdp/fsdp.h"

static int offloaded(const FSDP* fs) { return (fs->opt.offload & OFFLOAD_ACTIVATIONS) != 0; }

void fsdp_plan_block_outputs(FSDP* fs, int blocks, const size_t* elems) {
  fs->acts.blocks = blocks;
  free(fs->acts.offset);
  fs->acts.offset = xcalloc((size_t)blocks + 1, sizeof(size_t), "block outputs");
  fs->acts.slot = 0;
  for (int l = 0; l < blocks; l++) {
    fs->acts.offset[l + 1] = fs->acts.offset[l] + elems[l];
    if (elems[l] > fs->acts.slot) fs->acts.slot = elems[l];
  }
  size_t all = fs->acts.offset[blocks] * sizeof(act_t);
  MemPlan* p = &fs->plan;
  if (!offloaded(fs)) {
    memplan_add(p, "activations", "block out (L x N x C)", all, (void**)&fs->acts.device);
    return;
  }
  memplan_add_host(p, "activations", "block out (L x N x C)", all, (void**)&fs->acts.host);
  char name[48];
  snprintf(name, sizeof name, "block out ring (%d x N x C)", ACT_RING);
  memplan_add(p, "activations", name, (size_t)ACT_RING * fs->acts.slot * sizeof(act_t), (void**)&fs->acts.device);
  for (int s = 0; s < ACT_RING; s++) fs->acts.holder[s] = -1;  // events: fsdp_materialize
}

static act_t* slot_of(const FSDP* fs, int l) {
  return fs->acts.device + (offloaded(fs) ? (size_t)(l % ACT_RING) * fs->acts.slot : fs->acts.offset[l]);
}
static act_t* host_of(const FSDP* fs, int l) { return fs->acts.host + fs->acts.offset[l]; }
static size_t bytes_of(const FSDP* fs, int l) { return (fs->acts.offset[l + 1] - fs->acts.offset[l]) * sizeof(act_t); }

act_t* fsdp_act_out(FSDP* fs, int l) {
  if (offloaded(fs)) device_stream_wait_timed(STREAM_COMPUTE, fs->acts.copy_done[l % ACT_RING]);
  return slot_of(fs, l);
}

void fsdp_act_written(FSDP* fs, int l) {
  if (!offloaded(fs)) return;
  int s = l % ACT_RING;
  fs->acts.holder[s] = l;
  fs->acts.released[s] = 0;
  if (!fs->training) return;  // evaluation: no backward will read it
  device_event_record(fs->acts.compute_done[s], STREAM_COMPUTE);
  device_stream_wait(STREAM_COPY, fs->acts.compute_done[s]);
  device_copy_async(host_of(fs, l), slot_of(fs, l), bytes_of(fs, l), STREAM_COPY);
  device_event_record(fs->acts.copy_done[s], STREAM_COPY);
}

// Copies block l's output back into its slot once the slot's last reader is done.
static void bring_back(FSDP* fs, int l) {
  int s = l % ACT_RING;
  if (fs->acts.holder[s] == l) return;
  if (!fs->acts.released[s]) fatal("activation offload: slot %d still holds block %d's output; this is a bug", s, fs->acts.holder[s]);
  device_stream_wait(STREAM_COPY, fs->acts.compute_done[s]);
  device_copy_async(slot_of(fs, l), host_of(fs, l), bytes_of(fs, l), STREAM_COPY);
  device_event_record(fs->acts.copy_done[s], STREAM_COPY);
  fs->acts.holder[s] = l;
  fs->acts.released[s] = 0;
}

const act_t* fsdp_act_in(FSDP* fs, int l) {
  if (!offloaded(fs)) return slot_of(fs, l);
  bring_back(fs, l);
  device_stream_wait_timed(STREAM_COMPUTE, fs->acts.copy_done[l % ACT_RING]);
  // Prefetch: the output backward reads next, if its slot's reader is done.
  int next = l - 1, s = next % ACT_RING;
  if (next >= 0 && fs->acts.holder[s] != next && fs->acts.released[s]) bring_back(fs, next);
  return slot_of(fs, l);
}

void fsdp_act_release(FSDP* fs, int l) {
  if (!offloaded(fs)) return;
  int s = l % ACT_RING;
  device_event_record(fs->acts.compute_done[s], STREAM_COMPUTE);
  fs->acts.released[s] = 1;
}
