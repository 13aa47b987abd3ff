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

// Happens-before between the blocks of one launch (the blocks' checker, order.cpp). A block
// sees another block's global writes of the same launch only through a release that it
// acquired: a flag's red.release and ld.acquire (ptx.cuh), or an atomic (each an acquire and a
// release of its word). Each block counts its releases; a write carries the count its block had
// made (its epoch), a release publishes on its word the releaser's count and every count the
// releaser had acquired, and an acquire takes those in. A global word read or written by a
// block other than the one that last wrote it in this launch, whose epoch that block has not
// acquired, is reported (racecheck): on a GPU the blocks run at once, in no promised order. A
// block's own threads are not told apart (the shared-memory racecheck orders them), nor is a
// write after another block's read checked. Tracked per 2-byte half of a word.
void hb_launch();  // a kernel launch starts
void hb_block();   // one of its blocks starts
void hb_acquire(const void* word);
// An acquire load issued early (ptx.cuh flag_load_acquire): on a GPU it may run before the
// word's latest release, so it takes in only what the releases before that one published, and
// returns 1 with that release's amount in *delta (the value it reads is the word's less delta);
// 0 when the word had no release in this launch.
int hb_acquire_early(const void* word, int* delta);
void hb_release(const void* word, int delta);
// Set around the access of a flag or an atomic to its own word: a synchronization, not a race.
extern int hb_sync_access;

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
