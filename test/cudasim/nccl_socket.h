// nccl_socket.h: the simulated NCCL's second transport, for ranks started without mpirun (the
// NCCL_COMM_ID and --init-dir bootstraps of kernels/cuda/comm_nccl.c): TCP sockets through a hub. The
// unique id carries the hub's address, as NCCL's does: NCCL_COMM_ID names it, or rank 0's
// ncclGetUniqueId opens a port on the loopback interface that the id file then carries. Every
// rank connects to the communicator's rank 0, which gathers, reduces in rank order and sends
// back; each communicator has its own connections and a worker thread that runs its
// collectives one at a time, so different communicators progress at once.
#pragma once
#include <nccl.h>

#include <atomic>
#include <functional>
#include <vector>

namespace cudasim {

struct SockComm;

// The id rank 0 hands out: NCCL_COMM_ID's address when set, else a fresh loopback port.
void sock_unique_id(ncclUniqueId* id);
// Joins the communicator of nranks ranks that id names (blocks until every rank has joined).
SockComm* sock_init(int nranks, const ncclUniqueId& id, int rank);
// ncclCommSplit over parent (collective over it, with its worker idle): NULL for color < 0.
SockComm* sock_split(SockComm* parent, int color, int key, int* new_rank, int* new_size);
void sock_destroy(SockComm* c);
// Runs job on the communicator's worker thread; *done becomes 1 when it has finished.
void sock_post(SockComm* c, std::function<void()> job, std::atomic<int>* done);

// Blocking exchanges through the hub, for the worker thread (and the host at split/destroy).
// gather: every rank's `bytes` at `mine` end up at the hub's `all` (rank order); others' all unused.
void sock_gather(SockComm* c, const void* mine, size_t bytes, void* all);
// scatter: the hub sends rank r the `bytes` at its `all + r * bytes`; every rank gets them at `mine`.
void sock_scatter(SockComm* c, const void* all, size_t bytes, void* mine);
// The hub sends its `bytes` at buf to every rank, into buf.
void sock_bcast(SockComm* c, void* buf, size_t bytes);
int sock_rank(const SockComm* c);
int sock_size(const SockComm* c);

}  // namespace cudasim
