// device.c (CUDA): the CUDA device of the FSDP runtime: device memory, the three streams and
// events between them (kernels/device.h). Host C, built only into the CUDA binary.
//
// Streams: kernels_init (kernels/cuda/backend.cu) creates, at start-up, the compute stream that
// every kernel runs on and two communication streams; StreamId maps onto them in order:
//   STREAM_COMPUTE -> the kernels' stream, STREAM_ALL_GATHER and STREAM_REDUCE_SCATTER -> the
//   two others (separate streams so that NCCL never serializes an all-gather behind a
//   reduce-scatter, as in PyTorch FSDP), and STREAM_COPY -> a fourth, for activation copies.
//   The schedule orders them only through events.
// Copies run on the compute stream, so they are ordered after the kernels that produced their
// source; a copy to the host waits for its completion.
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "infra/dist.h"
#include "kernels/cuda/kernels_cuda.h"

struct DeviceEvent {
  cudaEvent_t e;
};

#define CUDA_OK(call)                                                                       \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) fatal("CUDA call failed: %s (%s at %s:%d)", cudaGetErrorString(e_), #call, __FILE__, __LINE__); \
  } while (0)

static cudaStream_t stream_of(StreamId s) { return (cudaStream_t)kernels_cuda_stream((int)s); }

void* device_alloc_zeroed(size_t bytes, const char* what) {
  void* p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // reset the (non-sticky) error state before the next call
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();  // then 0 of 0 GiB
    fatal("out of GPU memory: cudaMalloc of %zu bytes (%.2f GiB) for %s failed (%s); the GPU has %.2f GiB free "
          "of %.2f GiB. Check the plan with --plan, use a smaller --batch, or use more ranks.",
          bytes, bytes / 1073741824.0, what, cudaGetErrorString(e), free_b / 1073741824.0, total_b / 1073741824.0);
  }
  // The memset runs on the legacy default stream, which the (blocking) streams of kernels_init
  // wait for; the synchronize makes the zeroes visible to any stream. Start-up only.
  CUDA_OK(cudaMemset(p, 0, bytes));
  CUDA_OK(cudaDeviceSynchronize());
  return p;
}

void device_free(void* p) {
  if (p) CUDA_OK(cudaFree(p));
}

DeviceEvent* device_event_create(void) {
  DeviceEvent* ev = xcalloc(1, sizeof(DeviceEvent), "event");
  CUDA_OK(cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming));
  return ev;
}

DeviceEvent* device_event_create_timed(void) {
  DeviceEvent* ev = xcalloc(1, sizeof(DeviceEvent), "event");
  CUDA_OK(cudaEventCreate(&ev->e));
  return ev;
}

double device_event_seconds(DeviceEvent* from, DeviceEvent* to) {
  float ms = 0.0f;
  CUDA_OK(cudaEventElapsedTime(&ms, from->e, to->e));
  return ms / 1e3;
}

void device_event_record(DeviceEvent* e, StreamId s) { CUDA_OK(cudaEventRecord(e->e, stream_of(s))); }

void device_stream_wait(StreamId s, DeviceEvent* e) { CUDA_OK(cudaStreamWaitEvent(stream_of(s), e->e, 0)); }

// Exposed communication: an event pair around each measured wait of a step; the elapsed time
// between them is how long the stream stalled for the other stream's work. The pairs are
// preallocated (timing events), one bank per step parity, so the waits of step s are read while
// step s + 1 records its own: after the step's work is done, without a synchronize.
#define MAX_TIMED_WAITS 4096
typedef struct {
  cudaEvent_t begin[MAX_TIMED_WAITS], end[MAX_TIMED_WAITS];
  int n;
} WaitBank;
static WaitBank banks[2];
static int banks_created = 0, open_bank = -1;  // the bank of the step being queued, -1 between steps

void device_stream_wait_timed(StreamId s, DeviceEvent* e) {
  WaitBank* b = open_bank >= 0 ? &banks[open_bank] : NULL;
  if (!b || b->n == MAX_TIMED_WAITS) {  // outside a step, or more waits in one step than pairs
    device_stream_wait(s, e);
    return;
  }
  CUDA_OK(cudaEventRecord(b->begin[b->n], stream_of(s)));
  device_stream_wait(s, e);
  CUDA_OK(cudaEventRecord(b->end[b->n], stream_of(s)));
  b->n++;
}

double device_step_waited_seconds(int step) {
  WaitBank* b = &banks[step & 1];
  double total = 0.0;
  for (int i = 0; i < b->n; i++) {
    float ms = 0.0f;
    CUDA_OK(cudaEventElapsedTime(&ms, b->begin[i], b->end[i]));
    total += ms;
  }
  return total / 1e3;
}

void device_synchronize(void) { CUDA_OK(cudaDeviceSynchronize()); }

void device_event_synchronize(DeviceEvent* e) { CUDA_OK(cudaEventSynchronize(e->e)); }

// Each optimizer step is an NVTX range named "step N" on the host thread that queues it, so a
// profiler can select one step's kernels (ncu --nvtx --nvtx-include "step 4/") and nsys shows
// the steps; the CUDA simulator counts its per-step figures from the same ranges. Without a
// tool attached NVTX calls return at once.
void device_step_begin(int step) {
  if (!banks_created) {  // before the first step
    for (int k = 0; k < 2; k++)
      for (int i = 0; i < MAX_TIMED_WAITS; i++) {
        CUDA_OK(cudaEventCreate(&banks[k].begin[i]));
        CUDA_OK(cudaEventCreate(&banks[k].end[i]));
      }
    banks_created = 1;
  }
  char name[32];
  snprintf(name, sizeof name, "step %d", step);
  nvtxRangePushA(name);
  open_bank = step & 1;
  banks[open_bank].n = 0;
}
void device_step_end(int step) {
  open_bank = -1;
  nvtxRangePop();
}

// Timeline marks: timing events, read relative to the first mark ever taken (the origin).
static cudaEvent_t mark_events[DEVICE_MAX_MARKS];
static int nmarks = 0, marks_created = 0, origin = -1;
static cudaEvent_t origin_event;

int device_mark(StreamId s) {
  if (nmarks == DEVICE_MAX_MARKS) return -1;
  if (nmarks == marks_created) CUDA_OK(cudaEventCreate(&mark_events[marks_created++]));  // first use only
  if (origin < 0) {
    CUDA_OK(cudaEventCreate(&origin_event));
    CUDA_OK(cudaEventRecord(origin_event, stream_of(STREAM_COMPUTE)));
    origin = 0;
  }
  CUDA_OK(cudaEventRecord(mark_events[nmarks], stream_of(s)));
  return nmarks++;
}

double device_mark_seconds(int mark) {
  float ms = 0.0f;
  CUDA_OK(cudaEventElapsedTime(&ms, origin_event, mark_events[mark]));
  return ms / 1e3;
}

void device_marks_release(void) { nmarks = 0; }

// The stream stays busy on the GPU (the host does not wait), as a real collective would.
void device_delay(StreamId s, double seconds) { kernels_cuda_delay((int)s, seconds); }

void device_gelu_epilogue(struct KernelCtx* ctx, int on) {
  (void)ctx;
  matmul_gelu_epilogue(on);
}

void device_describe_gelu(struct KernelCtx* ctx, int N, int C, int OC, char* out, size_t n) {
  int fwd, bwd;
  matmul_gelu_fuses(ctx, N, C, OC, 1, &fwd, &bwd);
  if (fwd < 0) snprintf(out, n, "off: product, then GELU kernel");
  else if (fwd && bwd) snprintf(out, n, "fused (cuBLASLt epilogues)");
  else if (!fwd && !bwd) snprintf(out, n, "no algorithm: product + GELU");
  else snprintf(out, n, "fused in the %s only", fwd ? "forward" : "backward");
}

void* device_stream(StreamId s) { return kernels_cuda_stream((int)s); }

int device_holds_values(void) { return 1; }

// Without a usable GPU (e.g. --plan on a machine without one) the limit is unknown: no limit.
size_t device_free_bytes(void) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return (size_t)-1;
  }
  return free_b;
}

// cudaMemcpyDefault: the direction follows from the pointers (unified addressing), so these
// also work for device-to-device and host-to-host copies.
void device_copy_to_host(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  cudaStream_t s = stream_of(STREAM_COMPUTE);
  CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  CUDA_OK(cudaStreamSynchronize(s));
}

// Ordered on the compute stream. A copy from host memory (pageable or pinned) has completed
// when the call returns, as on the CPU backend: the caller may reuse its buffer at once, and the
// data is on the device for work on every stream. That matters: fsdp_init_shards uploads the
// master shards here, and the first all-gathers cast them on the all-gather stream with no
// event in between (params_updated is not recorded before the first optimizer step, and waiting
// on an event never recorded is a no-op). A pageable cudaMemcpyAsync may return while its last
// staged chunk is still in flight, so a stream synchronize is needed in both host cases.
// Device-to-device copies stay asynchronous on the compute stream.
void device_copy_to_device(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  cudaStream_t s = stream_of(STREAM_COMPUTE);
  CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  struct cudaPointerAttributes a;
  int from_device = cudaPointerGetAttributes(&a, src) == cudaSuccess &&
                    (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged);
  (void)cudaGetLastError();  // a host pointer unknown to CUDA is not an error here
  if (!from_device) CUDA_OK(cudaStreamSynchronize(s));
}

void* device_host_alloc_zeroed(size_t bytes, const char* what) {
  void* p = NULL;
  cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fatal("out of pinned host memory: cudaMallocHost of %zu bytes (%.2f GiB) for %s failed (%s); see the "
          "pinned host part of --plan, offload less (--offload) or use more ranks", bytes, bytes / 1073741824.0, what,
          cudaGetErrorString(e));
  }
  memset(p, 0, bytes);
  return p;
}

void device_host_free(void* p) {
  if (p) CUDA_OK(cudaFreeHost(p));
}

// Pinned host memory makes the copy truly asynchronous (a pageable one would stage on the host).
void device_copy_async(void* dst, const void* src, size_t bytes, StreamId s) {
  if (bytes) CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_of(s)));
}

void device_host_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
