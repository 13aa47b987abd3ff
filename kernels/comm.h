// comm.h: the communication interface of the FSDP runtime, with NCCL's semantics.
//
// Implementations: kernels/cpu/comm_mpi.c (CPU, MPI; a single-rank build without MPI) and, for the
// CUDA build, kernels/cuda/comm_nccl.c. The schedule (fsdp/schedule.c) calls only these functions.
//
// Buffer conventions follow NCCL's in-place forms, so the flat unit buffers are passed to the
// collectives as they are, without copies (FSDP paper, section 3.2.1: the FlatParameter has
// "the exact data layout expected by AllGather and ReduceScatter"):
//   all-gather:     buf holds size*count elements; this rank's input is at buf + rank*count.
//   reduce-scatter: buf holds size*count elements from every rank; the sum of chunk `rank` is
//                   left at buf + rank*count (the rest of buf is unspecified afterwards).
//   all-reduce:     buf holds count elements; every rank gets the sum.
// Sums are deterministic on the MPI backend: each output element is folded in rank order,
// ((x_0 + x_1) + x_2) + ..., whatever algorithm MPI would choose, so results do not depend on
// the world size's reduction tree. Counts are size_t; counts beyond INT_MAX are chunked.
#ifndef FSDP_COMM_H
#define FSDP_COMM_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/device.h"
#include "kernels/precision.h"  // DType

typedef struct Comm Comm;

// Start-up settings, before the first comm_world(): the directory where rank 0 publishes the
// NCCL id when there is no MPI (--init-dir; refused by the MPI build, whose ranks come from
// mpirun), and the seconds after which a collective that has not finished ends every rank
// (--comm-timeout, 0 = never), naming the rank and the collective.
void comm_configure(const char* init_dir, double timeout_s);
// The world communicator (MPI_COMM_WORLD, NCCL's world, or a single rank).
Comm* comm_world(void);
int comm_rank(const Comm* c);
int comm_size(const Comm* c);
// Ranks with the same color form a sub-group, ordered by key (as MPI_Comm_split/ncclCommSplit).
Comm* comm_split(Comm* c, int color, int key);
void comm_free(Comm* c);
// The end of a run, on every rank before exit: waits for all ranks and releases the
// communicators (NCCL: stops the watchdog first, so peers exiting are not errors).
void comm_shutdown(void);
// The stream this communicator's collectives are issued on (NCCL); a no-op on MPI, whose
// collectives complete before they return. The world communicator uses the compute stream.
void comm_bind_stream(Comm* c, StreamId s);

void comm_all_gather(Comm* c, void* buf, size_t count, DType t);
void comm_reduce_scatter(Comm* c, void* buf, size_t count, DType t);
void comm_all_reduce(Comm* c, void* buf, size_t count, DType t);
void comm_broadcast(Comm* c, void* buf, size_t bytes, int root);
void comm_barrier(Comm* c);
// Logical AND of a flag over all ranks (used to agree on errors before anyone proceeds).
int comm_all_true(Comm* c, int flag);
#endif
