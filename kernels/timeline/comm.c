// comm.c (timeline): kernels/comm.h for the timeline: a collective moves nothing and takes the
// modelled time of its size on its group (kernels/timeline/collective.c), on the stream its
// communicator is bound to. It needs this rank's links, so collectives on the all-gather and
// reduce-scatter streams share them one after the other (their bandwidths add up to the link's).
// A collective on host values (the loss, a token count) is synchronous, as comm_nccl.c's host
// staging is: the host waits for it.
#include <stdlib.h>

#include "kernels/comm.h"
#include "infra/dist.h"
#include "kernels/timeline/timeline.h"

struct Comm {
  Group group;
  StreamId stream;
};

void comm_configure(const char* init_dir, double timeout_s) {
  (void)init_dir;
  (void)timeout_s;
}

Comm* timeline_comm_group(int n, int stride, StreamId s) {
  Comm* c = xcalloc(1, sizeof(Comm), "communicator");
  c->group = (Group){n, stride};
  c->stream = s;
  return c;
}

Comm* comm_world(void) {
  static Comm* world = NULL;
  if (!world) world = timeline_comm_group(timeline_cluster()->world, 1, STREAM_COMPUTE);
  world->group.n = timeline_cluster()->world;
  return world;
}

int comm_rank(const Comm* c) {
  (void)c;
  return 0;
}
int comm_size(const Comm* c) {
  return c->group.n;
}

Comm* comm_split(Comm* c, int color, int key) {
  (void)c, (void)color, (void)key;
  fatal("the timeline backend cannot split a communicator (one rank does not know the others' colors); "
        "the prediction builds its groups with timeline_comm_group");
}

void comm_free(Comm* c) {
  (void)c;
}
void comm_shutdown(void) { }
void comm_bind_stream(Comm* c, StreamId s) {
  c->stream = s;
}

static void collective(Comm* c, CollKind kind, const void* buf, double bytes, const char* what) {
  CollCost cost = collective_cost(timeline_cluster(), kind, bytes, c->group);
  if (timeline_is_device(buf)) {
    timeline_collective(c->stream, cost.seconds, cost.sms, what);
    return;
  }
  // Host values: staged through the device on the communicator's stream; the host waits.
  timeline_synchronize();
  timeline_collective(c->stream, cost.seconds, cost.sms, what);
  timeline_synchronize();
}

void comm_all_gather(Comm* c, void* buf, size_t count, DType t) {
  const Cluster* cl = timeline_cluster();
  if (cl->alloc_retry_s > 0 && timeline_is_device(buf)) {
    // The allocator's retry before the unsharded buffer exists: cudaFree of the cache waits
    // for the device, then cudaMalloc holds the host (FSDP paper section 4; the AWS post's
    // Trace3 measured single cudaMalloc calls of hundreds of milliseconds).
    timeline_synchronize();
    timeline_host_wait(cl->alloc_retry_s);
  }
  collective(c, COLL_ALL_GATHER, buf, (double)c->group.n * count * dtype_size(t), "all-gather");
}
void comm_reduce_scatter(Comm* c, void* buf, size_t count, DType t) {
  collective(c, COLL_REDUCE_SCATTER, buf, (double)c->group.n * count * dtype_size(t), "reduce-scatter");
}
void comm_all_reduce(Comm* c, void* buf, size_t count, DType t) {
  collective(c, COLL_ALL_REDUCE, buf, (double)count * dtype_size(t), "all-reduce");
}
void comm_broadcast(Comm* c, void* buf, size_t bytes, int root) {
  (void)root;
  collective(c, COLL_BROADCAST, buf, (double)bytes, "broadcast");
}
void comm_barrier(Comm* c) {
  static int token;
  collective(c, COLL_ALL_REDUCE, &token, 4, "barrier");
}
int comm_all_true(Comm* c, int flag) {
  static int token;
  collective(c, COLL_ALL_REDUCE, &token, 4, "all-true");
  return flag;
}
