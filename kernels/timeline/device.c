// device.c (timeline): the timeline's device (kernels/device.h): three stream clocks, events that
// carry a clock value, a host clock, and memory that is reserved but never touched.
//
// The host model: the training loop issues every kernel and collective (a few microseconds of
// host time each, catalogue [LAUNCH]); work starts when its stream is free and the host has
// issued it, so a GPU faster than its host waits for it. Copies of tokens in and of the loss out
// are synchronous, as in kernels/cuda/device.c: the host waits for the compute stream there.
//
// SMs: a collective's NCCL kernel holds some of the SMs for as long as it runs (one block per
// channel, never sharing its SM: catalogue.c [CTA]), and a kernel beside it gets the rest. Each
// kernel is placed through the collectives already on the links: where one holds k of the S SMs
// the kernel advances at (S - k) / S of its rate. A collective issued after a kernel that it
// turns out to overlap does not stretch that kernel (its end is already in events and clocks);
// the schedule issues each all-gather before the kernels it hides behind and each
// reduce-scatter after the kernels it waits for, so the kernels it overlaps come after it.
//
// Events: recording one on a stream stamps it with the time that stream reaches it; a wait moves
// the waiting stream's clock up to the stamp. A wait on an event never recorded does nothing, as
// in CUDA. A compute-stream wait measured with device_stream_wait_timed adds its stall to the
// exposed communication.
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/device.h"
#include "infra/dist.h"
#include "kernels/timeline/timeline.h"

#define NSTREAMS DEVICE_STREAMS
#define MAX_REGIONS 64

struct DeviceEvent {
  double t;
  int recorded;
};

static Cluster cluster;
static int configured = 0;
static double clock_of[NSTREAMS], host_clock, net_free, stalled, stalled_read, contention;
// The collectives on this rank's links, in the order they run (so sorted, never overlapping).
static TimelineSMs* busy;
static int nbusy, cap_busy;
static TimelineOp* ops;
static int nops, cap_ops;
static double marks[DEVICE_MAX_MARKS];
static int nmarks;
static struct {
  void* base;
  size_t bytes;
  int host;  // pinned host memory (--offload), not device memory
} regions[MAX_REGIONS];
static int nregions;

void timeline_configure(const Cluster* c) {
  cluster = *c;
  configured = 1;
  timeline_reset();
}

const Cluster* timeline_cluster(void) {
  if (!configured) fatal("the timeline backend runs only under --predict GPU[:NETWORK] --world N");
  return &cluster;
}

void timeline_reset(void) {
  memset(clock_of, 0, sizeof clock_of);
  host_clock = net_free = stalled = stalled_read = contention = 0.0;
  nops = nmarks = nbusy = 0;
}

static double max2(double a, double b) { return a > b ? a : b; }

static void log_op(const char* what, StreamId s, double start, double end) {
  if (nops == cap_ops) {
    cap_ops = cap_ops ? 2 * cap_ops : 4096;
    ops = realloc(ops, (size_t)cap_ops * sizeof(TimelineOp));
    if (!ops) fatal("timeline: out of host memory for the op log (%d operations)", nops);
  }
  ops[nops++] = (TimelineOp){what, s, start, end};
}

// Work starts, and a stream reaches a point (an event, a mark), when the stream's issued work is
// done and the host has issued it.
static double stream_point(StreamId s) { return max2(clock_of[s], host_clock); }

static double place(StreamId s, double start, double end, const char* what) {
  clock_of[s] = end;
  host_clock += timeline_cluster()->host.launch_s;
  log_op(what, s, start, end);
  return start;
}

// The first collective still running at time t (binary search: busy[] is sorted).
static int first_busy_after(double t) {
  int lo = 0, hi = nbusy;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (busy[mid].end <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// When a kernel of `seconds` (on every SM) that starts at t ends, through the collectives'
// SMs: full rate between them, (S - k) / S of it beside one holding k.
static double kernel_end(double t, double seconds) {
  int S = cluster.gpu.sms;
  double left = seconds;
  for (int i = first_busy_after(t); i < nbusy && left > 0; i++) {
    if (busy[i].start > t) {
      if (busy[i].start - t >= left) break;
      left -= busy[i].start - t;
      t = busy[i].start;
    }
    double rate = (double)(S - busy[i].sms) / S, span = busy[i].end - t;
    if (span * rate >= left) return t + left / rate;
    left -= span * rate;
    t = busy[i].end;
  }
  return t + left;
}

double timeline_kernel(StreamId s, double seconds, const char* what) {
  double start = stream_point(s), end = kernel_end(start, seconds);
  if (end > start + seconds) contention += end - (start + seconds);
  return place(s, start, end, what);
}

double timeline_collective(StreamId s, double seconds, int sms, const char* what) {
  double start = stream_point(s);
  if (seconds <= 0) return place(s, start, start, what);  // a group of one rank: nothing moves
  start = max2(start, net_free);
  double end = net_free = start + seconds;
  if (sms > 0 && cluster.gpu.sms > sms) {
    if (nbusy == cap_busy) {
      cap_busy = cap_busy ? 2 * cap_busy : 1024;
      busy = realloc(busy, (size_t)cap_busy * sizeof(TimelineSMs));
      if (!busy) fatal("timeline: out of host memory for the collectives' spans (%d)", nbusy);
    }
    busy[nbusy++] = (TimelineSMs){start, end, sms};
  }
  return place(s, start, end, what);
}

double timeline_copy(StreamId s, double seconds, const char* what) {
  double start = stream_point(s);
  return place(s, start, start + seconds, what);
}

double timeline_stream_clock(StreamId s) { return clock_of[s]; }
void timeline_host_wait(double seconds) { host_clock += seconds; }
double timeline_host_clock(void) { return host_clock; }
double timeline_compute_stalled(void) { return stalled; }
double timeline_sm_contention(void) { return contention; }
int timeline_nops(void) { return nops; }
int timeline_nsm_spans(void) { return nbusy; }
const TimelineSMs* timeline_sm_span(int i) { return &busy[i]; }
const TimelineOp* timeline_op(int i) { return &ops[i]; }

// Reserved address space for the plan: layers/ and fsdp/ carve pointers from it, and nothing
// reads or writes it (kernels compute nothing, copies move nothing, the shards are not
// initialized), so no page is ever committed, whatever the model's size.
static void* reserve(size_t bytes, const char* what, int host) {
  size_t len = bytes ? bytes : 1;
  void* p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) fatal("timeline: cannot reserve %zu bytes of address space for %s", bytes, what);
  if (nregions == MAX_REGIONS) fatal("timeline: more than %d device allocations", MAX_REGIONS);
  regions[nregions].base = p;
  regions[nregions].host = host;
  regions[nregions++].bytes = len;
  return p;
}

void* device_alloc_zeroed(size_t bytes, const char* what) {
  return reserve(bytes, what, 0);
}

void device_free(void* p) {
  for (int i = 0; i < nregions; i++)
    if (regions[i].base == p) {
      munmap(p, regions[i].bytes);
      regions[i] = regions[--nregions];
      return;
    }
}

// Pinned host memory (--offload) is reserved the same way: the host-side optimizer and copies
// are modelled, never run.
void* device_host_alloc_zeroed(size_t bytes, const char* what) {
  return reserve(bytes, what, 1);
}

void device_host_free(void* p) {
  device_free(p);
}

void device_host_zero(void* p, size_t bytes) {
  (void)p;
  timeline_host_wait((double)bytes / timeline_cluster()->host.memory_bytes_s);
}

// Is p inside the reserved device memory (not its pinned host part)? (Collectives on host
// values are synchronous.)
int timeline_is_device(const void* p) {
  for (int i = 0; i < nregions; i++)
    if ((const char*)p >= (const char*)regions[i].base && (const char*)p < (const char*)regions[i].base + regions[i].bytes)
      return !regions[i].host;
  return 0;
}

// An asynchronous copy queued on its stream like a kernel: across PCIe between the host and the
// device (--offload); within device memory (hpz's secondary shards) it reads and writes HBM once,
// as a streaming kernel of twice its bytes.
void device_copy_async(void* dst, const void* src, size_t bytes, StreamId s) {
  const Cluster* c = timeline_cluster();
  if (timeline_is_device(dst) && timeline_is_device(src))
    timeline_kernel(s, 2.0 * bytes / (c->gpu.hbm_bytes_s * c->gpu.hbm_eff) + c->gpu.launch_s, "device copy");
  else
    timeline_copy(s, (double)bytes / c->host.pcie_bytes_s, "host copy");
}

// The sharded initialization writes values; here the shards hold none (nothing is computed).
int device_holds_values(void) { return 0; }

DeviceEvent* device_event_create(void) {
  return xcalloc(1, sizeof(DeviceEvent), "event");
}
DeviceEvent* device_event_create_timed(void) {
  return device_event_create();
}
double device_event_seconds(DeviceEvent* from, DeviceEvent* to) {
  return to->t - from->t;
}

void device_event_record(DeviceEvent* e, StreamId s) {
  e->t = stream_point(s);
  e->recorded = 1;
}

static double wait(StreamId s, const DeviceEvent* e) {
  if (!e->recorded) return 0.0;
  double from = stream_point(s);
  if (e->t <= from) return 0.0;
  clock_of[s] = e->t;
  return e->t - from;
}

void device_stream_wait(StreamId s, DeviceEvent* e) {
  wait(s, e);
}

void device_stream_wait_timed(StreamId s, DeviceEvent* e) {
  double w = wait(s, e);
  if (s == STREAM_COMPUTE) stalled += w;
}

// A step's stalls: the compute stream's modelled waits between its begin and end (known at issue).
static double step_stalled[2];
double device_step_waited_seconds(int step) { return step_stalled[step & 1]; }

void timeline_synchronize(void) {
  for (int s = 0; s < NSTREAMS; s++) host_clock = max2(host_clock, clock_of[s]);
}

void device_synchronize(void) {
  timeline_synchronize();
}

void device_event_synchronize(DeviceEvent* e) {
  if (e->recorded) host_clock = max2(host_clock, e->t);
}

void device_step_begin(int step) {
  stalled_read = stalled;
  step_stalled[step & 1] = 0.0;
}
void device_step_end(int step) {
  step_stalled[step & 1] = stalled - stalled_read;
  stalled_read = stalled;
}

int device_mark(StreamId s) {
  if (nmarks == DEVICE_MAX_MARKS) return -1;
  marks[nmarks] = stream_point(s);
  return nmarks++;
}
double device_mark_seconds(int mark) {
  return marks[mark];
}
void device_marks_release(void) {
  nmarks = 0;
}

// The timeline counts matmul_forward_gelu and the DGELU backward as one product each.
void device_gelu_epilogue(struct KernelCtx* ctx, int on) { (void)ctx, (void)on; }

void device_describe_gelu(struct KernelCtx* ctx, int N, int C, int OC, char* out, size_t n) {
  (void)ctx, (void)N, (void)C, (void)OC;
  snprintf(out, n, "fused (as predicted)");
}

void device_delay(StreamId s, double seconds) {
  timeline_copy(s, seconds > 0 ? seconds : 0.0, "delay");
}

void* device_stream(StreamId s) {
  (void)s;
  return NULL;
}

size_t device_free_bytes(void) {
  return (size_t)timeline_cluster()->gpu.memory_bytes;
}

// A synchronous copy on the compute stream (kernels/cuda/device.c): after the stream's work, and the
// host waits for it. Only host memory is written (zeros: nothing was computed).
static void sync_copy(size_t bytes, const char* what) {
  const Cluster* c = timeline_cluster();
  double start = stream_point(STREAM_COMPUTE);
  double end = start + c->host.sync_copy_s + (double)bytes / c->host.pcie_bytes_s;
  log_op(what, STREAM_COMPUTE, start, end);
  clock_of[STREAM_COMPUTE] = host_clock = end;
}

void device_copy_to_host(void* dst, const void* src, size_t bytes) {
  (void)src;
  if (!timeline_is_device(dst)) memset(dst, 0, bytes);
  sync_copy(bytes, "copy to host");
}

void device_copy_to_device(void* dst, const void* src, size_t bytes) {
  (void)dst;
  (void)src;
  sync_copy(bytes, "copy to device");
}
