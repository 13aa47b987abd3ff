// device_cuda.c: the CUDA device of the FSDP runtime: device memory, the three streams and
// events between them (fsdp/device.h). Host C, built only into the CUDA binary.
//
// Streams: kernels_init (kernels/cuda/backend.cu) creates, at start-up, the compute stream that
// every kernel runs on and two communication streams; StreamId maps onto them in order:
//   STREAM_COMPUTE -> the kernels' stream, STREAM_ALL_GATHER and STREAM_REDUCE_SCATTER -> the
//   two others (separate streams so that NCCL never serializes an all-gather behind a
//   reduce-scatter, as in PyTorch FSDP). The schedule orders them only through events.
// Copies run on the compute stream, so they are ordered after the kernels that produced their
// source; a copy to the host waits for its completion.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "fsdp/device.h"
#include "fsdp/dist.h"
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
    cudaMemGetInfo(&free_b, &total_b);
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

void device_event_record(DeviceEvent* e, StreamId s) { CUDA_OK(cudaEventRecord(e->e, stream_of(s))); }

void device_stream_wait(StreamId s, DeviceEvent* e) { CUDA_OK(cudaStreamWaitEvent(stream_of(s), e->e, 0)); }

void device_synchronize(void) { CUDA_OK(cudaDeviceSynchronize()); }

// The stream stays busy on the GPU (the host does not wait), as a real collective would.
void device_delay(StreamId s, double seconds) { kernels_cuda_delay((int)s, seconds); }

void* device_stream(StreamId s) { return kernels_cuda_stream((int)s); }

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

// Ordered on the compute stream. From pageable host memory (malloc) the call returns once the
// source has been staged, so the caller may reuse its buffer at once; from pinned host memory
// the copy would still be reading it, so then the call waits for the copy.
void device_copy_to_device(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  cudaStream_t s = stream_of(STREAM_COMPUTE);
  CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, src) == cudaSuccess && a.type == cudaMemoryTypeHost)
    CUDA_OK(cudaStreamSynchronize(s));
  (void)cudaGetLastError();
}
