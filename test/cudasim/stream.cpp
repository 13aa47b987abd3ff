// stream.cpp: streams, events and the device thread. As on a GPU, the host only queues work:
// every device operation (kernel, copy, memset, cuBLASLt product, sort, collective) goes to
// its stream's queue, and one device thread, started with the first operation, runs queued
// operations while the host goes on. An operation runs only when everything before it on its
// stream has finished and the events it waits for have completed; among the streams that can
// run, the device thread picks in a seeded pseudo-random order (CUDASIM_SEED, default 1), not
// in program order, so a missing cudaStreamWaitEvent or event record changes what a kernel
// reads. Collectives (nccl.cpp) are operations that start, then progress until complete while
// other streams run.
//
// Host-blocking calls wait for exactly what they must: cudaStreamSynchronize for its stream,
// cudaEventSynchronize for the event's last record, cudaDeviceSynchronize and cudaMalloc/Free
// for everything, a blocking cudaMemcpy for its own copy (on the legacy default stream, which
// also waits for all earlier work, as the streams kernels_init creates are blocking streams).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <deque>
#include <vector>

#include "test/cudasim/device_queue.h"
#include "test/cudasim/sim.h"

namespace cudasim {

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t device_wake = PTHREAD_COND_INITIALIZER;  // work queued
static pthread_cond_t host_wake = PTHREAD_COND_INITIALIZER;    // work finished
static pthread_t device_thread;
static int device_started = 0;
static std::vector<CUstream_st*> streams;  // every stream ever created (destroyed ones stay, marked)
static CUstream_st legacy_stream;          // the NULL stream
static std::vector<CUevent_st*> events;    // every event ever created
static uint64_t rng = 0;
static Clock host_clock = {};  // the operations the host has seen complete (order.h)

// The stream-order clock of stream s as operation `op` starts on it: the host's view at issue
// joins in; work counts one more operation on the stream.
static uint32_t advance_clock(CUstream_st* s, const Op& op, int counts) {
  clock_join(&s->clock, op.host);
  if (!counts || s->id >= kClockStreams) return 0;
  uint32_t seq = ++s->clock.t[s->id];
  order_name(s->id, seq, op.what);
  return seq;
}

static double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static uint64_t next_rand() {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

static CUstream_st* resolve(cudaStream_t s) { return s ? s : &legacy_stream; }

static int stream_idle(const CUstream_st* s) { return s->q.empty() && !s->running; }

static int all_idle() {
  if (!stream_idle(&legacy_stream)) return 0;
  for (CUstream_st* s : streams)
    if (!stream_idle(s)) return 0;
  return 1;
}

// Whether the head operation of s may start now (the lock is held).
static int head_ready(CUstream_st* s) {
  if (s->running || s->q.empty()) return 0;
  const Op& op = s->q.front();
  if (op.kind == Op::WAIT) return op.event->completed >= op.gen;
  if (op.kind == Op::COLLECTIVE) return !op.coll->started() || op.coll->test();
  return 1;
}

static void* device_main(void*) {
  pthread_mutex_lock(&mu);
  std::vector<CUstream_st*> ready;
  for (;;) {
    ready.clear();
    int in_flight = 0;
    if (head_ready(&legacy_stream)) ready.push_back(&legacy_stream);
    for (CUstream_st* s : streams) {
      if (head_ready(s)) ready.push_back(s);
      else if (!s->q.empty() && s->q.front().kind == Op::COLLECTIVE && s->q.front().coll->started()) in_flight = 1;
    }
    if (ready.empty()) {
      if (in_flight) {  // collectives progress through their tests: poll, briefly unlocked
        pthread_mutex_unlock(&mu);
        struct timespec ts = {0, 20000};
        nanosleep(&ts, nullptr);
        pthread_mutex_lock(&mu);
      } else {
        pthread_cond_wait(&device_wake, &mu);
      }
      continue;
    }
    CUstream_st* s = ready[ready.size() == 1 ? 0 : next_rand() % ready.size()];
    Op& op = s->q.front();
    if (op.kind == Op::COLLECTIVE && !op.coll->started()) {
      // Starting a collective may block briefly in MPI; the stream stays busy until it completes.
      s->running = 1;
      RunningOp ro = {s->id, advance_clock(s, op, 1), s->clock, op.what};
      pthread_mutex_unlock(&mu);
      running_op = &ro;
      op.coll->start();
      running_op = nullptr;
      pthread_mutex_lock(&mu);
      s->running = 0;
      continue;
    }
    Op cur = std::move(op);
    s->q.pop_front();
    if (cur.kind == Op::RECORD) {
      advance_clock(s, cur, 0);
      cur.event->completed = cur.gen;
      cur.event->ms = now_ms();
      cur.event->chain = s->chain;
      cur.event->clock = s->clock;
    } else if (cur.kind == Op::WAIT) {
      advance_clock(s, cur, 0);
      clock_join(&s->clock, cur.event->clock);
      if (cur.event->chain > s->chain) s->chain = cur.event->chain;
    } else if (cur.kind == Op::WORK) {
      s->chain++;
      s->running = 1;
      RunningOp ro = {s->id, advance_clock(s, cur, 1), s->clock, cur.what};
      pthread_mutex_unlock(&mu);
      running_op = &ro;
      cur.fn();
      running_op = nullptr;
      pthread_mutex_lock(&mu);
      s->running = 0;
    } else if (cur.kind == Op::COLLECTIVE) {
      s->chain++;
      RunningOp ro = {s->id, s->id < kClockStreams ? s->clock.t[s->id] : 0, s->clock, cur.what};
      pthread_mutex_unlock(&mu);
      running_op = &ro;
      cur.coll->finish();
      running_op = nullptr;
      delete cur.coll;
      pthread_mutex_lock(&mu);
    }
    pthread_cond_broadcast(&host_wake);
  }
  return nullptr;
}

static void start_device() {
  if (device_started) return;
  const char* seed = getenv("CUDASIM_SEED");
  rng = (seed && *seed ? strtoull(seed, nullptr, 0) : 1) * 0x9E3779B97F4A7C15ull + 1;
  if (pthread_create(&device_thread, nullptr, device_main, nullptr)) fatal("internal", "cannot start the device thread");
  pthread_detach(device_thread);
  device_started = 1;
}

static void check_stream(CUstream_st* s, const char* call) {
  if (s->destroyed) fatal("api", "%s on a destroyed stream", call);
}

// Queues op on s; returns the number it will have on s's clock (0 for records and waits, which
// do not count), as advance_clock will give it: the queue runs in order.
static uint32_t enqueue(CUstream_st* s, Op&& op) {
  pthread_mutex_lock(&mu);
  start_device();
  check_stream(s, op.what);
  op.host = host_clock;
  uint32_t seq = 0;
  if ((op.kind == Op::WORK || op.kind == Op::COLLECTIVE) && s->id < kClockStreams) seq = ++s->issued;
  s->q.push_back(std::move(op));
  pthread_cond_signal(&device_wake);
  pthread_mutex_unlock(&mu);
  return seq;
}

// The host's clock moved: hostcheck releases the pinned pages of the copies it now has seen
// complete (called without the lock).
static void host_clock_moved() {
  pthread_mutex_lock(&mu);
  Clock c = host_clock;
  pthread_mutex_unlock(&mu);
  hostcheck_synced(c);
}

// The host has seen stream s finish everything issued to it so far.
static void host_saw(CUstream_st* s) {
  pthread_mutex_lock(&mu);
  clock_join(&host_clock, s->clock);
  pthread_mutex_unlock(&mu);
  host_clock_moved();
}

// Blocks the host until done() holds (evaluated with the lock held).
template <class F>
static void host_wait(F done) {
  pthread_mutex_lock(&mu);
  while (!done()) pthread_cond_wait(&host_wake, &mu);
  pthread_mutex_unlock(&mu);
}

// The legacy default stream waits for all earlier work of the blocking streams, and they for
// it: an operation on it runs alone, after everything queued before it.
// (The host waits for it too, so that later work on the blocking streams cannot pass it.)
static void legacy_op(Op&& op) {
  device_synchronize_all();
  enqueue(&legacy_stream, std::move(op));
  host_wait([] { return stream_idle(&legacy_stream); });
  host_saw(&legacy_stream);
}

uint32_t stream_op(cudaStream_t s, const char* what, std::function<void()> fn) {
  Op op;
  op.kind = Op::WORK, op.what = what, op.fn = std::move(fn);
  if (!s) {
    legacy_op(std::move(op));  // done when it returns
    return 0;
  }
  return enqueue(s, std::move(op));
}

void collective_op(cudaStream_t s, const char* what, Collective* c) {
  Op op;
  op.kind = Op::COLLECTIVE, op.what = what, op.coll = c;
  if (!s) legacy_op(std::move(op));
  else enqueue(s, std::move(op));
}

void copy_op(cudaStream_t s, const char* what, void* dst, const void* src, size_t bytes, int blocking) {
  int src_host = !find_allocation(src), dst_host = !find_allocation(dst);
  if (src_host && !is_pinned_host(src)) {
    // From pageable host memory the data is staged at the call, so the host may reuse its
    // buffer at once (CUDA's documented behaviour for pageable sources).
    std::shared_ptr<std::vector<unsigned char>> staged(new std::vector<unsigned char>((const unsigned char*)src,
                                                                                       (const unsigned char*)src + bytes));
    uint32_t seq = stream_op(s, what, [=] {
      order_access(dst, bytes, 1);  // device or pinned host memory (order.cpp ignores the rest)
      memcpy(pinned_device_view(dst), staged->data(), bytes);
    });
    if (s) hostcheck_copy(dst, bytes, 1, resolve(s)->id, seq, what);
  } else {
    uint32_t seq = stream_op(s, what, [=] {
      order_access(src, bytes, 0);
      order_access(dst, bytes, 1);
      memmove(pinned_device_view(dst), pinned_device_view(src), bytes);
    });
    if (s) {  // pinned host memory it reads or writes is the copy's until the host syncs with it
      hostcheck_copy(src, bytes, 0, resolve(s)->id, seq, what);
      hostcheck_copy(dst, bytes, 1, resolve(s)->id, seq, what);
    }
  }
  // To pageable host memory the call returns only when the copy is done.
  if (blocking || (dst_host && !is_pinned_host(dst))) {
    count_sync(what);
    CUstream_st* st = resolve(s);
    host_wait([st] { return stream_idle(st); });
    host_saw(st);
  }
}

void reset_chains() {
  pthread_mutex_lock(&mu);
  legacy_stream.chain = 0;
  for (CUstream_st* s : streams) s->chain = 0;
  for (CUevent_st* e : events) e->chain = 0;
  pthread_mutex_unlock(&mu);
}

void chain_lengths(long* out, int max, int* n) {
  pthread_mutex_lock(&mu);
  *n = 0;
  for (CUstream_st* s : streams)
    if (*n < max) out[(*n)++] = s->chain;
  pthread_mutex_unlock(&mu);
}

void device_synchronize_all() {
  if (!device_started) return;
  host_wait(all_idle);
  pthread_mutex_lock(&mu);
  clock_join(&host_clock, legacy_stream.clock);
  for (CUstream_st* s : streams) clock_join(&host_clock, s->clock);
  pthread_mutex_unlock(&mu);
  host_clock_moved();
}

}  // namespace cudasim

using namespace cudasim;

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  if (!s) return cudaErrorInvalidValue;
  CUstream_st* st = new CUstream_st();
  st->flags = flags;
  pthread_mutex_lock(&mu);
  st->id = (int)streams.size() + 1;
  streams.push_back(st);
  pthread_mutex_unlock(&mu);
  *s = st;
  return cudaSuccess;
}
extern "C" cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return cudaErrorInvalidResourceHandle;
  check_stream(s, "cudaStreamDestroy");
  // Work already queued still runs (as on a GPU); the handle is dead for new work.
  host_wait([s] { return stream_idle(s); });
  s->destroyed = 1;  // kept, so a later use is reported rather than reading freed memory
  return cudaSuccess;
}
extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  CUstream_st* st = resolve(s);
  check_stream(st, "cudaStreamSynchronize");
  count_sync("cudaStreamSynchronize");
  if (!s) device_synchronize_all();
  else host_wait([st] { return stream_idle(st); });
  host_saw(st);
  return cudaSuccess;
}
extern "C" cudaError_t cudaStreamQuery(cudaStream_t s) {
  CUstream_st* st = resolve(s);
  check_stream(st, "cudaStreamQuery");
  pthread_mutex_lock(&mu);
  int idle = stream_idle(st);
  if (idle) clock_join(&host_clock, st->clock);  // the host has seen it complete
  pthread_mutex_unlock(&mu);
  if (idle) host_clock_moved();
  return idle ? cudaSuccess : cudaErrorNotReady;
}
extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  if (!e) return cudaErrorInvalidResourceHandle;
  if (flags) return cudaErrorInvalidValue;
  CUstream_st* st = resolve(s);
  check_stream(st, "cudaStreamWaitEvent");
  Op op;
  op.kind = Op::WAIT, op.what = "cudaStreamWaitEvent", op.event = e;
  pthread_mutex_lock(&mu);
  op.gen = e->recorded;  // the record captured now; 0 (never recorded) is complete at once
  pthread_mutex_unlock(&mu);
  if (!s) legacy_op(std::move(op));
  else enqueue(st, std::move(op));
  return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  if (!e) return cudaErrorInvalidValue;
  *e = new CUevent_st();
  (*e)->flags = flags;
  pthread_mutex_lock(&mu);
  events.push_back(*e);
  pthread_mutex_unlock(&mu);
  return cudaSuccess;
}
extern "C" cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidResourceHandle;
  // A queued record or wait may still name it: keep the object (a GPU defers the release too).
  e->destroyed = 1;
  return cudaSuccess;
}
extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!e) return cudaErrorInvalidResourceHandle;
  if (e->destroyed) fatal("api", "cudaEventRecord of a destroyed event");
  CUstream_st* st = resolve(s);
  check_stream(st, "cudaEventRecord");
  Op op;
  op.kind = Op::RECORD, op.what = "cudaEventRecord", op.event = e;
  pthread_mutex_lock(&mu);
  op.gen = ++e->recorded;
  pthread_mutex_unlock(&mu);
  if (!s) legacy_op(std::move(op));
  else enqueue(st, std::move(op));
  return cudaSuccess;
}
extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidResourceHandle;
  count_sync("cudaEventSynchronize");
  pthread_mutex_lock(&mu);
  uint64_t want = e->recorded;
  pthread_mutex_unlock(&mu);
  host_wait([e, want] { return e->completed >= want; });
  pthread_mutex_lock(&mu);
  clock_join(&host_clock, e->clock);
  pthread_mutex_unlock(&mu);
  host_clock_moved();
  return cudaSuccess;
}
extern "C" cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidResourceHandle;
  pthread_mutex_lock(&mu);
  int done = e->completed >= e->recorded;
  pthread_mutex_unlock(&mu);
  return done ? cudaSuccess : cudaErrorNotReady;
}
extern "C" cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!ms || !a || !b) return cudaErrorInvalidValue;
  if ((a->flags | b->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
  pthread_mutex_lock(&mu);
  int ok = a->recorded && b->recorded && a->completed >= a->recorded && b->completed >= b->recorded;
  double d = b->ms - a->ms;
  pthread_mutex_unlock(&mu);
  if (!ok) return a->recorded && b->recorded ? cudaErrorNotReady : cudaErrorInvalidResourceHandle;
  *ms = (float)d;
  return cudaSuccess;
}
extern "C" cudaError_t cudaDeviceSynchronize(void) {
  count_sync("cudaDeviceSynchronize");
  device_synchronize_all();
  return cudaSuccess;
}
