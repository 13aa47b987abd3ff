// stream.cpp: streams and events. Every device operation (kernel, copy, memset, cuBLASLt
// product, sort) is a stream operation. Operations run when they are issued, in issue order,
// which is an order a GPU may also choose; events record the host clock for cudaEventElapsedTime.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test/cudasim/sim.h"

struct CUstream_st {
  unsigned flags;
  int destroyed;
};
struct CUevent_st {
  unsigned flags;
  int recorded;
  double ms;  // host clock at the record, milliseconds
};

namespace cudasim {

static double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void check_stream(cudaStream_t s, const char* call) {
  if (s && s->destroyed) fatal("api", "%s on a destroyed stream", call);
}

void stream_op(cudaStream_t s, const char* what, std::function<void()> op) {
  check_stream(s, what);
  op();
}

void copy_op(cudaStream_t s, const char* what, void* dst, const void* src, size_t bytes, int blocking) {
  (void)blocking;
  stream_op(s, what, [=] { memmove(dst, src, bytes); });
}

void device_synchronize_all() {}

}  // namespace cudasim

using namespace cudasim;

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  if (!s) return cudaErrorInvalidValue;
  *s = (cudaStream_t)calloc(1, sizeof(CUstream_st));
  if (!*s) return cudaErrorMemoryAllocation;
  (*s)->flags = flags;
  return cudaSuccess;
}
extern "C" cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return cudaErrorInvalidResourceHandle;
  check_stream(s, "cudaStreamDestroy");
  s->destroyed = 1;  // kept, so a later use is reported rather than reading freed memory
  return cudaSuccess;
}
extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  check_stream(s, "cudaStreamSynchronize");
  return cudaSuccess;
}
extern "C" cudaError_t cudaStreamQuery(cudaStream_t s) {
  check_stream(s, "cudaStreamQuery");
  return cudaSuccess;
}
extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  check_stream(s, "cudaStreamWaitEvent");
  if (!e) return cudaErrorInvalidResourceHandle;
  return flags ? cudaErrorInvalidValue : cudaSuccess;
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  if (!e) return cudaErrorInvalidValue;
  *e = (cudaEvent_t)calloc(1, sizeof(CUevent_st));
  if (!*e) return cudaErrorMemoryAllocation;
  (*e)->flags = flags;
  return cudaSuccess;
}
extern "C" cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidResourceHandle;
  free(e);
  return cudaSuccess;
}
extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!e) return cudaErrorInvalidResourceHandle;
  check_stream(s, "cudaEventRecord");
  stream_op(s, "cudaEventRecord", [=] {
    e->recorded = 1;
    e->ms = now_ms();
  });
  return cudaSuccess;
}
extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? cudaSuccess : cudaErrorInvalidResourceHandle; }
extern "C" cudaError_t cudaEventQuery(cudaEvent_t e) { return e ? cudaSuccess : cudaErrorInvalidResourceHandle; }
extern "C" cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!ms || !a || !b) return cudaErrorInvalidValue;
  if ((a->flags | b->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
  if (!a->recorded || !b->recorded) return cudaErrorInvalidResourceHandle;
  *ms = (float)(b->ms - a->ms);
  return cudaSuccess;
}
extern "C" cudaError_t cudaDeviceSynchronize(void) {
  device_synchronize_all();
  return cudaSuccess;
}
