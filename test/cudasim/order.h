// order.h: the stream-order checker (order.cpp). Every device operation runs with a vector
// clock: what it is ordered after, per stream, through stream order, event waits and the
// host's synchronizations. Each 4-byte word of device memory (and of pinned host memory, which
// copies reach) remembers the operation that last wrote it and one that last read it; an
// access by an operation not ordered after them (a copy
// racing a kernel, a kernel reading a buffer another stream is still writing) is reported,
// naming both operations and their streams.
#pragma once
#include <stddef.h>
#include <stdint.h>

namespace cudasim {

const int kClockStreams = 16;  // stream 0 is the legacy default stream
struct Clock {
  uint32_t t[kClockStreams];
};
void clock_join(Clock* a, const Clock& b);

// The operation the device thread is running (NULL between operations): set by stream.cpp.
struct RunningOp {
  int stream;
  uint32_t seq;  // its number on its stream
  Clock clock;
  const char* what;
};
extern RunningOp* running_op;

// An access of the running operation to device or pinned host memory: from the instrumented
// kernels (one load or store), or a whole range (copies, memsets, cuBLASLt operands, collective
// buffers). Other host memory is ignored.
void order_access(const void* p, size_t n, int is_write);
// Names an operation (stream, seq) for reports; kept for the last 4096 operations of a stream.
void order_name(int stream, uint32_t seq, const char* what);
// Forgets the shadow of an allocation (cudaFree).
void order_forget(uintptr_t base);

// The host's accesses to pinned memory (hostcheck.cpp). Pinned blocks are mapped twice: the
// host's view, whose pages are protected while copies are pending on them, and the device
// thread's, which copies use.
void* pinned_map(size_t bytes);               // NULL when out of memory
void pinned_unmap(void* host, size_t bytes);
void* pinned_device_view(const void* p);      // p itself when not pinned
// A copy issued as operation `seq` of `stream` reads (device_writes 0) or writes [p, p+bytes)
// of a pinned block: the host may not write, or touch, those pages until it has seen the copy
// complete.
void hostcheck_copy(const void* p, size_t bytes, int device_writes, int stream, uint32_t seq, const char* what);
// The host's clock moved (a synchronization): copies it has now seen complete are released.
void hostcheck_synced(const Clock& host);

}  // namespace cudasim
