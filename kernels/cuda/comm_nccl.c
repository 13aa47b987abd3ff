// comm_nccl.c: the GPU implementation of kernels/comm.h over NCCL.
//
// Collectives are issued on the stream their communicator is bound to (comm_bind_stream):
// the shard group's all-gather communicator on the all-gather stream, the reduce-scatter and
// replica communicators on the reduce-scatter stream. Separate communicators let NCCL run an
// all-gather and a reduce-scatter at the same time (FSDP paper 3.2).
//
// Start-up: the unique id of the world communicator travels by MPI when the binary runs under
// mpirun; without MPI every rank derives it from NCCL_COMM_ID, or rank 0 writes it to a file
// in --init-dir that the others wait for (infra/launch.c). Each rank uses GPU local_rank.
//
// Failure handling: every NCCL call is checked; a watchdog thread polls each communicator's
// asynchronous error and the age of the oldest collective still running. A collective that
// has not finished after --comm-timeout seconds aborts every communicator and exits with a
// message that names the rank and the collective, instead of hanging (within a grace period
// when the abort itself blocks).
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifndef NO_MPI
#include <mpi.h>
#endif

#include "kernels/comm.h"
#include "kernels/device.h"
#include "infra/clock.h"
#include "infra/dist.h"
#include "infra/launch.h"

#define NCCL_CHECK(call)                                                                      \
  do {                                                                                        \
    ncclResult_t r_ = (call);                                                                 \
    if (r_ != ncclSuccess) fatal("NCCL call failed: %s (%s:%d: %s)", ncclGetErrorString(r_), __FILE__, __LINE__, #call); \
  } while (0)
#define CUDA_OK(call)                                                                          \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) fatal("CUDA call failed: %s (%s:%d: %s)", cudaGetErrorString(e_), __FILE__, __LINE__, #call); \
  } while (0)

// Host values (a loss, a count, the norm's limbs) are staged through this much device memory,
// allocated with the communicator, never inside a step. Larger host buffers (a whole unit's
// fp32 master parameters in fsdp_gather_master: --digest, --dump-params) only occur outside
// the step loop and get a temporary device buffer.
#define STAGING_BYTES 4096
#define MAX_COMMS 16
#define MAX_PENDING 256

struct Comm {
  ncclComm_t nc;
  int rank, size;
  StreamId stream;
  void* staging;
  const char* name;
};

static ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DT_F32: return ncclFloat32;
    case DT_F64: return ncclFloat64;
    case DT_I64: return ncclInt64;
    case DT_BF16: return ncclBfloat16;
    case DT_F16: return ncclFloat16;
  }
  return ncclFloat32;
}

// ---- the watchdog -------------------------------------------------------------------
// A ring of collectives in flight: an event recorded right after each one on its stream,
// the time it was issued and its name. The watchdog thread retires completed ones in order
// and fails the run when the oldest is older than the timeout.
typedef struct {
  cudaEvent_t done;
  double issued;
  const char* what;
  int size;  // ranks of its communicator (the Comm itself may be freed before it retires)
} Pending;

static struct {
  pthread_mutex_t lock;
  pthread_t thread;
  int running, stopping;
  double timeout_s;
  Pending ring[MAX_PENDING];
  int head, count;
  Comm* comms[MAX_COMMS];
  int ncomms;
  int device;
} watch = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char* g_init_dir = NULL;

// ncclCommAbort can block by itself (once a peer has exited), so it runs on a thread of its own and the process exits after ABORT_GRACE_S whether
// or not it returned: exiting ends the process's kernels with its CUDA context.
#define ABORT_GRACE_S 10
static void* abort_comms(void* arg) {
  (void)arg;
  for (int i = 0; i < watch.ncomms; i++) ncclCommAbort(watch.comms[i]->nc);
  _exit(1);
}

static void abort_all_and_exit(const char* msg) {
  fprintf(stderr, "[rank %d] error: %s; aborting the NCCL communicators\n", dist_rank(), msg);
  fflush(stderr);
  pthread_t t;
  if (pthread_create(&t, NULL, abort_comms, NULL) != 0) {
    fprintf(stderr, "[rank %d] could not start a thread for ncclCommAbort; exiting without it\n", dist_rank());
    _exit(1);
  }
  sleep(ABORT_GRACE_S);  // abort_comms exits the process as soon as the aborts return
  fprintf(stderr, "[rank %d] ncclCommAbort did not return within %d s; exiting without it\n", dist_rank(),
          ABORT_GRACE_S);
  _exit(1);
}

static void* watchdog(void* arg) {
  (void)arg;
  cudaSetDevice(watch.device);
  while (1) {
    usleep(100 * 1000);
    pthread_mutex_lock(&watch.lock);
    if (watch.stopping) {  // comm_shutdown: the run is over, peers may leave
      pthread_mutex_unlock(&watch.lock);
      return NULL;
    }
    while (watch.count > 0) {
      Pending* p = &watch.ring[watch.head];
      cudaError_t q = cudaEventQuery(p->done);
      if (q == cudaErrorNotReady) {
        if (watch.timeout_s > 0 && now_seconds() - p->issued > watch.timeout_s) {
          char msg[512];
          snprintf(msg, sizeof msg, "%s on a communicator of %d ranks did not finish within %.0f s (--comm-timeout)",
                   p->what, p->size, watch.timeout_s);
          pthread_mutex_unlock(&watch.lock);
          abort_all_and_exit(msg);
        }
        break;
      }
      watch.head = (watch.head + 1) % MAX_PENDING;
      watch.count--;
    }
    for (int i = 0; i < watch.ncomms; i++) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(watch.comms[i]->nc, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        char msg[512];
        snprintf(msg, sizeof msg, "NCCL reported an asynchronous error: %s", ncclGetErrorString(async));
        pthread_mutex_unlock(&watch.lock);
        abort_all_and_exit(msg);
      }
    }
    pthread_mutex_unlock(&watch.lock);
  }
  return NULL;
}

static void watch_comm(Comm* c) {
  pthread_mutex_lock(&watch.lock);
  if (watch.ncomms == MAX_COMMS) fatal("more than %d NCCL communicators", MAX_COMMS);
  watch.comms[watch.ncomms++] = c;
  pthread_mutex_unlock(&watch.lock);
}

// Before the communicator is destroyed: the watchdog must not poll it any more.
static void unwatch_comm(Comm* c) {
  pthread_mutex_lock(&watch.lock);
  for (int i = 0; i < watch.ncomms; i++)
    if (watch.comms[i] == c) {
      watch.comms[i] = watch.comms[--watch.ncomms];
      break;
    }
  pthread_mutex_unlock(&watch.lock);
}

// Called after a collective was issued: records its completion event for the watchdog.
static void track(const Comm* c, const char* what, cudaStream_t s) {
  if (!watch.running) return;
  pthread_mutex_lock(&watch.lock);
  while (watch.count == MAX_PENDING) {  // the ring is full: wait for the oldest to retire
    int h = watch.head;
    cudaEvent_t oldest = watch.ring[h].done;
    pthread_mutex_unlock(&watch.lock);
    cudaEventSynchronize(oldest);
    pthread_mutex_lock(&watch.lock);
    // Only this thread adds entries: if the watchdog has not retired it meanwhile, we do.
    if (watch.count == MAX_PENDING && watch.head == h) {
      watch.head = (h + 1) % MAX_PENDING;
      watch.count--;
    }
  }
  Pending* p = &watch.ring[(watch.head + watch.count) % MAX_PENDING];
  CUDA_OK(cudaEventRecord(p->done, s));
  p->issued = now_seconds();
  p->what = what;
  p->size = c->size;
  watch.count++;
  pthread_mutex_unlock(&watch.lock);
}

void comm_configure(const char* init_dir, double timeout_s) {
  g_init_dir = init_dir;
  watch.timeout_s = timeout_s;
}

// ---- communicators --------------------------------------------------------------------
static Comm* wrap(ncclComm_t nc, const char* name) {
  Comm* c = xcalloc(1, sizeof(Comm), "communicator");
  c->nc = nc;
  c->name = name;
  c->stream = STREAM_COMPUTE;
  NCCL_CHECK(ncclCommUserRank(nc, &c->rank));
  NCCL_CHECK(ncclCommCount(nc, &c->size));
  CUDA_OK(cudaMalloc(&c->staging, STAGING_BYTES));
  watch_comm(c);
  return c;
}

// The world's unique id: by MPI, from NCCL_COMM_ID, or through a file in --init-dir.
static void world_id(ncclUniqueId* id, int rank, int world) {
#ifndef NO_MPI
  // MPI carries the id when it started the ranks; a launcher without MPI leaves every process
  // an MPI singleton whose rank comes from the environment (infra/dist.c): no Bcast there.
  int mpi_world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_world);
  if (mpi_world == world) {
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(id));
    if (MPI_Bcast(id, sizeof *id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) fatal("MPI_Bcast of the NCCL id failed");
    return;
  }
#endif
  if (world == 1 || getenv("NCCL_COMM_ID")) {
    // With NCCL_COMM_ID every rank's id names the same bootstrap address (rank 0 listens).
    NCCL_CHECK(ncclGetUniqueId(id));
    return;
  }
  if (!g_init_dir)
    fatal("%d ranks started without MPI: set NCCL_COMM_ID=<host of rank 0>:<port>, or pass --init-dir DIR "
          "(a directory every rank can read) so rank 0 can publish the NCCL id there", world);
  char run_id[160], err[1024];
  if (launch_run_id(run_id, sizeof run_id, world, err, sizeof err)) fatal("%s", err);
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(id));
  double timeout = watch.timeout_s > 0 ? watch.timeout_s : 300.0;
  if (launch_exchange_id(g_init_dir, run_id, rank, (unsigned char*)id, sizeof *id, timeout, err, sizeof err))
    fatal("%s", err);
}

Comm* comm_world(void) {
  static Comm* world = NULL;
  if (world) return world;
  int rank = dist_rank(), W = dist_world();
  CUDA_OK(cudaGetDevice(&watch.device));  // kernels_init chose it from the local rank
  for (int i = 0; i < MAX_PENDING; i++) CUDA_OK(cudaEventCreateWithFlags(&watch.ring[i].done, cudaEventDisableTiming));
  ncclUniqueId id;
  // Blocking until every rank takes part, before the collectives' watchdog runs: the start-up one.
  dist_watch("the NCCL id exchange and the world communicator's set-up (ncclCommInitRank)");
  world_id(&id, rank, W);
  ncclComm_t nc;
  NCCL_CHECK(ncclCommInitRank(&nc, W, id, rank));
  dist_watch(NULL);
  world = wrap(nc, "world");
  if (rank == 0 && g_init_dir && W > 1) {
    char run_id[160], err[1024];
    if (!launch_run_id(run_id, sizeof run_id, W, err, sizeof err)) launch_id_cleanup(g_init_dir, run_id, err, sizeof err);
  }
  // Always on: with --comm-timeout 0 it still turns NCCL's asynchronous errors (a rank that
  // died) into an exit instead of a hang; only the age check is off then.
  if (!watch.running) {
    if (pthread_create(&watch.thread, NULL, watchdog, NULL)) fatal("cannot start the communication watchdog thread");
    pthread_detach(watch.thread);
    watch.running = 1;
  }
  return world;
}

int comm_rank(const Comm* c) { return c->rank; }
int comm_size(const Comm* c) { return c->size; }

Comm* comm_split(Comm* c, int color, int key) {
  ncclComm_t sub;
  dist_watch("a process group's split (ncclCommSplit)");
  NCCL_CHECK(ncclCommSplit(c->nc, color, key, &sub, NULL));
  dist_watch(NULL);
  return wrap(sub, "group");
}

void comm_free(Comm* c) {
  if (!c) return;
  unwatch_comm(c);
  NCCL_CHECK(ncclCommDestroy(c->nc));
  cudaFree(c->staging);
  free(c);
}

void comm_bind_stream(Comm* c, StreamId s) { c->stream = s; }

// Host pointers (loss sums, counts, norm limbs, whole-unit reads) go through device staging and
// return synchronously; device pointers (unit buffers) stay asynchronous on the bound stream.
static int is_host(const void* p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
}

typedef enum { OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_REDUCE, OP_BROADCAST } Op;

static void collective(Comm* c, Op op, void* buf, size_t count, DType t, int root, const char* what) {
  cudaStream_t s = (cudaStream_t)device_stream(c->stream);
  size_t es = op == OP_BROADCAST ? 1 : dtype_size(t), total = (op == OP_ALL_GATHER || op == OP_REDUCE_SCATTER ? (size_t)c->size : 1) * count * es;
  int host = is_host(buf);
  char* d = buf;
  if (host) {
    d = c->staging;
    if (total > STAGING_BYTES && cudaMalloc((void**)&d, total) != cudaSuccess) {
      (void)cudaGetLastError();
      fatal("%s of %zu host bytes: no device memory to stage them (outside the memory plan)", what, total);
    }
    CUDA_OK(cudaMemcpyAsync(d, buf, total, cudaMemcpyHostToDevice, s));
  }
  ncclDataType_t nt = op == OP_BROADCAST ? ncclUint8 : nccl_type(t);  // broadcast counts bytes
  switch (op) {
    case OP_ALL_GATHER:  // in place: this rank's input already sits at d + rank*count
      NCCL_CHECK(ncclAllGather(d + (size_t)c->rank * count * es, d, count, nt, c->nc, s));
      break;
    case OP_REDUCE_SCATTER:
      NCCL_CHECK(ncclReduceScatter(d, d + (size_t)c->rank * count * es, count, nt, ncclSum, c->nc, s));
      break;
    case OP_ALL_REDUCE: NCCL_CHECK(ncclAllReduce(d, d, count, nt, ncclSum, c->nc, s)); break;
    case OP_BROADCAST: NCCL_CHECK(ncclBroadcast(d, d, count, nt, root, c->nc, s)); break;
  }
  track(c, what, s);
  if (host) {
    CUDA_OK(cudaMemcpyAsync(buf, d, total, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    if (d != c->staging) CUDA_OK(cudaFree(d));
  }
}

void comm_all_gather(Comm* c, void* buf, size_t count, DType t) {
  if (c->size > 1 && count) collective(c, OP_ALL_GATHER, buf, count, t, 0, "all-gather");
}
void comm_reduce_scatter(Comm* c, void* buf, size_t count, DType t) {
  if (c->size > 1 && count) collective(c, OP_REDUCE_SCATTER, buf, count, t, 0, "reduce-scatter");
}
void comm_all_reduce(Comm* c, void* buf, size_t count, DType t) {
  if (c->size > 1 && count) collective(c, OP_ALL_REDUCE, buf, count, t, 0, "all-reduce");
}
void comm_broadcast(Comm* c, void* buf, size_t bytes, int root) {
  if (c->size > 1 && bytes) collective(c, OP_BROADCAST, buf, bytes, DT_F32 /* unused: bytes */, root, "broadcast");
}

void comm_barrier(Comm* c) {
  int64_t one = 1;
  comm_all_reduce(c, &one, 1, DT_I64);
}

int comm_all_true(Comm* c, int flag) {
  int64_t v = flag ? 0 : 1;  // count the ranks that say no
  comm_all_reduce(c, &v, 1, DT_I64);
  return v == 0;
}

// The end of a run: every rank has arrived (barrier), then the watchdog stops before peers
// start to exit, so a peer leaving is not reported as an error, and the communicators are
// destroyed.
void comm_shutdown(void) {
  if (watch.ncomms == 0) return;
  comm_barrier(watch.comms[0]);
  CUDA_OK(cudaDeviceSynchronize());
  pthread_mutex_lock(&watch.lock);
  watch.stopping = 1;
  pthread_mutex_unlock(&watch.lock);
  while (watch.ncomms > 0) comm_free(watch.comms[watch.ncomms - 1]);
}
