// device_queue.h: what a stream's queue holds (stream.cpp) and the interface a collective
// implements to run as a stream operation (nccl.cpp).
#pragma once
#include <stdint.h>

#include <deque>
#include <functional>
#include <memory>

#include "test/cudasim/sim.h"

namespace cudasim {

// A collective in flight: start() posts it (non-blocking MPI), test() says whether it has
// completed (called repeatedly, with the device lock held: it must not block), finish() runs
// once after completion (copies out, checks). Deleted after finish().
struct Collective {
  virtual ~Collective() {}
  virtual void start() = 0;
  virtual int started() const = 0;
  virtual int test() = 0;
  virtual void finish() = 0;
};

struct Op {
  enum Kind { WORK, RECORD, WAIT, COLLECTIVE } kind = WORK;
  const char* what = "";
  std::function<void()> fn;          // WORK
  struct CUevent_st* event = nullptr;  // RECORD, WAIT
  uint64_t gen = 0;                  // RECORD: the record it completes; WAIT: the record it needs
  Collective* coll = nullptr;        // COLLECTIVE
};

// Queues a collective on stream s (nccl.cpp).
void collective_op(cudaStream_t s, const char* what, Collective* c);

}  // namespace cudasim

struct CUstream_st {
  unsigned flags = 0;
  int id = 0;
  int destroyed = 0;
  int running = 0;  // an operation of this stream is executing (or a collective is starting)
  std::deque<cudasim::Op> q;
};

struct CUevent_st {
  unsigned flags = 0;
  int destroyed = 0;
  uint64_t recorded = 0;   // records issued
  uint64_t completed = 0;  // the last record the device has passed
  double ms = 0;
};
