// device_queue.h: what a stream's queue holds (stream.cpp) and the interface a collective
// implements to run as a stream operation (nccl.cpp).
#pragma once
#include <stdint.h>

#include <deque>
#include <functional>
#include <memory>

#include "test/cudasim/order.h"
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
  Clock host = {};                   // what the host had seen complete when it issued this
};

// Queues a collective on stream s (nccl.cpp).
void collective_op(cudaStream_t s, const char* what, Collective* c);

// Dependency chains (stats.cpp): every operation extends its stream's chain by one; waiting
// for an event continues the longer of the stream's chain and the recording stream's chain
// at the record. reset_chains starts new chains (at a step's start); chain_lengths gives, per
// stream in creation order, the longest chain that ended on it since.
void reset_chains();
void chain_lengths(long* out, int max, int* n);

}  // namespace cudasim

struct CUstream_st {
  unsigned flags = 0;
  int id = 0;
  int destroyed = 0;
  int running = 0;  // an operation of this stream is executing (or a collective is starting)
  long chain = 0;   // the longest chain of operations ending at this stream's last one
  uint32_t issued = 0;  // operations issued that count on its clock: the next one's number is issued + 1
  cudasim::Clock clock = {};  // what this stream's operations are ordered after (order.h)
  std::deque<cudasim::Op> q;
};

struct CUevent_st {
  unsigned flags = 0;
  int destroyed = 0;
  uint64_t recorded = 0;   // records issued
  uint64_t completed = 0;  // the last record the device has passed
  double ms = 0;
  long chain = 0;  // the recording stream's chain at the last record
  cudasim::Clock clock = {};  // the recording stream's clock at the last record
};
