// comm_mpi.c: the CPU implementation of kernels/comm.h over MPI, with deterministic sums.
//
// MPI only moves bytes here; every sum is folded by us in rank order so that a result has
// the same bits whatever MPI's reduction algorithm and whatever the world size (the
// multi-rank equivalence tests compare W ranks against one rank bit for bit).
// Built with -DNO_MPI (no mpicc found) this file provides a single-rank communicator.
//
// Hangs end: every collective is started non-blocking and waited for by wait_collective, a
// watchdog that ends every rank (MPI_Abort) when the collective has not finished within
// --comm-timeout seconds, naming this rank and the collective. A rank that is stopped, killed
// without MPI noticing, or cut off by the network otherwise leaves the others waiting forever.
#include "kernels/comm.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "infra/clock.h"
#include "infra/dist.h"

static double g_timeout_s = 600;

void comm_configure(const char* init_dir, double timeout_s) {
  // --init-dir hands the NCCL id to ranks started without MPI; here mpirun starts the ranks.
  if (init_dir)
    fatal("--init-dir is for the NCCL build (train_gpt) started without MPI; this binary's ranks come from "
          "mpirun (or it runs alone): launch it with mpirun -np N and drop --init-dir");
  g_timeout_s = timeout_s;
}

#ifdef NO_MPI

struct Comm { int unused; };
static struct Comm world_comm;
Comm* comm_world(void) {
  // Several ranks need a communication backend: MPI here (build with mpicc), or NCCL.
  if (dist_world() > 1)
    fatal("the environment describes %d ranks, but this binary was built without MPI or NCCL; "
          "install OpenMPI (mpicc) and rebuild, or run one rank", dist_world());
  return &world_comm;
}
int comm_rank(const Comm* c) { (void)c; return 0; }
int comm_size(const Comm* c) { (void)c; return 1; }
Comm* comm_split(Comm* c, int color, int key) { (void)color; (void)key; return c; }
void comm_free(Comm* c) { (void)c; }
void comm_bind_stream(Comm* c, StreamId s) { (void)c; (void)s; }
void comm_shutdown(void) {}
// With one rank every collective leaves the buffer as it is.
void comm_all_gather(Comm* c, void* buf, size_t count, DType t) {}
void comm_reduce_scatter(Comm* c, void* buf, size_t count, DType t) {}
void comm_all_reduce(Comm* c, void* buf, size_t count, DType t) {}
void comm_broadcast(Comm* c, void* buf, size_t bytes, int root) {}
void comm_barrier(Comm* c) {}
int comm_all_true(Comm* c, int flag) { return flag; }

#else
#include <mpi.h>

struct Comm {
  MPI_Comm mc;
  int rank, size;
  long collectives;  // started on this communicator, for the watchdog's message
};

#define MPI_CHECK(call)                                                   \
  do {                                                                    \
    int rc_ = (call);                                                     \
    if (rc_ != MPI_SUCCESS) {                                             \
      char msg_[MPI_MAX_ERROR_STRING];                                    \
      int len_ = 0;                                                       \
      MPI_Error_string(rc_, msg_, &len_);                                 \
      fatal("MPI call failed: %s (%s:%d: %s)", msg_, __FILE__, __LINE__, #call); \
    }                                                                     \
  } while (0)

// Waits for a started collective. Spins on MPI_Test for the first 10 ms (MPI progresses inside
// it), then tests every 200 us so that a long wait does not burn a core, and ends the job when
// --comm-timeout passes.
static void wait_collective(Comm* c, MPI_Request* req, const char* what, size_t count) {
  double start = now_seconds(), now = start;
  c->collectives++;
  for (long tries = 0;; tries++) {
    int done = 0;
    MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (tries % 256 == 0) now = now_seconds();
    if (now - start > 0.01) nanosleep(&(struct timespec){0, 200000}, NULL);
    if (g_timeout_s > 0 && now - start > g_timeout_s) {
      fflush(stdout);
      fprintf(stderr, "[rank %d] error: %s #%ld (%zu elements, group of %d ranks) did not finish within --comm-timeout "
                      "%g s: another rank is stopped, hung or unreachable. Ending every rank.\n",
              dist_rank(), what, c->collectives, count, c->size, g_timeout_s);
      fflush(stderr);
      // MPI_Abort asks the launcher to end every rank; cut off from it (a network partition), it
      // may never return, so the default action of SIGALRM ends this rank a few seconds later,
      // and the launcher, seeing a rank die, ends the others.
      signal(SIGALRM, SIG_DFL);
      alarm(10);
      MPI_Abort(MPI_COMM_WORLD, 3);
      _exit(3);
    }
  }
}

// Pieces of at most this many elements per collective call: keeps every MPI count far below
// INT_MAX and bounds the temporary buffer of the folds to size * PIECE elements.
#define PIECE ((size_t)1 << 20)

static Comm* comm_wrap(MPI_Comm mc) {
  Comm* c = xcalloc(1, sizeof(Comm), "communicator");
  c->mc = mc;
  MPI_CHECK(MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(mc, &c->rank));
  MPI_CHECK(MPI_Comm_size(mc, &c->size));
  return c;
}

Comm* comm_world(void) {
  static Comm* world = NULL;
  if (!world) world = comm_wrap(MPI_COMM_WORLD);
  return world;
}
int comm_rank(const Comm* c) { return c->rank; }
int comm_size(const Comm* c) { return c->size; }

Comm* comm_split(Comm* c, int color, int key) {
  MPI_Comm sub;
  dist_watch("a process group's split (MPI_Comm_split)");  // blocking: the start-up watchdog's
  MPI_CHECK(MPI_Comm_split(c->mc, color, key, &sub));
  dist_watch(NULL);
  return comm_wrap(sub);
}

void comm_bind_stream(Comm* c, StreamId s) { (void)c; (void)s; }

void comm_shutdown(void) { comm_barrier(comm_world()); }  // MPI_Finalize releases the rest

void comm_free(Comm* c) {
  if (!c || c->mc == MPI_COMM_WORLD) return;
  MPI_Comm_free(&c->mc);
  free(c);
}

static MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DT_F32: return MPI_FLOAT;
    case DT_F64: return MPI_DOUBLE;
    case DT_I64: return MPI_INT64_T;
    case DT_BF16: case DT_F16: return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

// A type of n contiguous elements whose extent is `stride` elements: with it, element block r
// of a collective lands at base + r*stride, which is how the in-place layouts are addressed
// piece by piece.
static MPI_Datatype strided_block(DType t, size_t n, size_t stride) {
  MPI_Datatype block, resized;
  MPI_CHECK(MPI_Type_contiguous((int)n, mpi_type(t), &block));
  MPI_CHECK(MPI_Type_create_resized(block, 0, (MPI_Aint)(stride * dtype_size(t)), &resized));
  MPI_CHECK(MPI_Type_commit(&resized));
  MPI_Type_free(&block);
  return resized;
}

void comm_all_gather(Comm* c, void* buf, size_t count, DType t) {
  if (c->size == 1 || count == 0) return;
  size_t es = dtype_size(t);
  for (size_t off = 0; off < count; off += PIECE) {
    size_t n = count - off < PIECE ? count - off : PIECE;
    MPI_Datatype blk = strided_block(t, n, count);
    MPI_Request req;
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, (char*)buf + off * es, 1, blk, c->mc, &req));
    wait_collective(c, &req, "all-gather", count);
    MPI_Type_free(&blk);
  }
}

// out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + ... for the `size` rows of `in` (n apart).
static void fold_rows(void* out, const void* in, size_t n, int size, DType t) {
  if (t == DT_F32) {
    const float* x = in;
    float* y = out;
    for (size_t i = 0; i < n; i++) {
      float s = x[i];
      for (int r = 1; r < size; r++) s += x[(size_t)r * n + i];
      y[i] = s;
    }
  } else if (t == DT_F64) {
    const double* x = in;
    double* y = out;
    for (size_t i = 0; i < n; i++) {
      double s = x[i];
      for (int r = 1; r < size; r++) s += x[(size_t)r * n + i];
      y[i] = s;
    }
  } else if (t == DT_I64) {
    const int64_t* x = in;
    int64_t* y = out;
    for (size_t i = 0; i < n; i++) {
      int64_t s = x[i];
      for (int r = 1; r < size; r++) s += x[(size_t)r * n + i];
      y[i] = s;
    }
  } else {
    fatal("the MPI backend does not reduce 16-bit floats; use --reduce-dtype fp32");
  }
}

void comm_reduce_scatter(Comm* c, void* buf, size_t count, DType t) {
  if (c->size == 1 || count == 0) return;
  size_t es = dtype_size(t), piece = count < PIECE ? count : PIECE;
  char* tmp = xmalloc((size_t)c->size * piece * es, "reduce-scatter staging");
  for (size_t off = 0; off < count; off += PIECE) {
    size_t n = count - off < PIECE ? count - off : PIECE;
    // Every rank sends piece `off` of chunk d to rank d and receives its own chunk's piece from
    // every rank, rank-ordered in tmp; then it folds them in rank order.
    MPI_Datatype send = strided_block(t, n, count);
    MPI_Datatype recv = strided_block(t, n, n);
    MPI_Request req;
    MPI_CHECK(MPI_Ialltoall((char*)buf + off * es, 1, send, tmp, 1, recv, c->mc, &req));
    wait_collective(c, &req, "reduce-scatter", count);
    MPI_Type_free(&send);
    MPI_Type_free(&recv);
    fold_rows((char*)buf + ((size_t)c->rank * count + off) * es, tmp, n, c->size, t);
  }
  free(tmp);
}

void comm_all_reduce(Comm* c, void* buf, size_t count, DType t) {
  if (c->size == 1 || count == 0) return;
  size_t es = dtype_size(t), piece = count < PIECE ? count : PIECE;
  char* tmp = xmalloc((size_t)c->size * piece * es, "all-reduce staging");
  for (size_t off = 0; off < count; off += PIECE) {
    size_t n = count - off < PIECE ? count - off : PIECE;
    // Every rank gathers every rank's piece and folds the same rows in the same order, so all
    // replicas end with identical bits.
    MPI_Request req;
    MPI_CHECK(MPI_Iallgather((char*)buf + off * es, (int)n, mpi_type(t), tmp, (int)n, mpi_type(t), c->mc, &req));
    wait_collective(c, &req, "all-reduce", count);
    fold_rows((char*)buf + off * es, tmp, n, c->size, t);
  }
  free(tmp);
}

void comm_broadcast(Comm* c, void* buf, size_t bytes, int root) {
  if (c->size == 1) return;
  for (size_t off = 0; off < bytes; off += (size_t)INT_MAX / 2) {
    size_t n = bytes - off < (size_t)INT_MAX / 2 ? bytes - off : (size_t)INT_MAX / 2;
    MPI_Request req;
    MPI_CHECK(MPI_Ibcast((char*)buf + off, (int)n, MPI_BYTE, root, c->mc, &req));
    wait_collective(c, &req, "broadcast", bytes);
  }
}

void comm_barrier(Comm* c) {
  if (c->size == 1) return;
  MPI_Request req;
  MPI_CHECK(MPI_Ibarrier(c->mc, &req));
  wait_collective(c, &req, "barrier", 0);
}

int comm_all_true(Comm* c, int flag) {
  if (c->size == 1) return flag;
  int out = 0;
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(&flag, &out, 1, MPI_INT, MPI_LAND, c->mc, &req));
  wait_collective(c, &req, "agreement (all-reduce of a flag)", 1);
  return out;
}
#endif
