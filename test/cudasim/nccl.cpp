// nccl.cpp: NCCL over MPI, so kernels/cuda/comm_nccl.c runs unchanged on the simulator under mpirun.
// A communicator is an MPI communicator of its own (ncclCommInitRank splits MPI_COMM_WORLD
// ordered by NCCL rank; ncclCommSplit is MPI_Comm_split), so collectives on different
// communicators never match each other and progress independently. Each collective is an
// operation on its CUDA stream (stream.cpp) built from non-blocking MPI: it starts when its
// stream reaches it and completes while the other streams run.
//
// Collective order check: before its data moves, every collective exchanges a header (its
// number on the communicator, kind, count, type, operator, root) with the other ranks of the
// communicator. NCCL requires every rank to issue the same collectives in the same order;
// where they differ, NCCL hangs or corrupts data. Here the first difference is reported,
// naming the communicator, the collective's number and what each rank issued.
//
// A collective that some rank never joins is reported after CUDASIM_HANG_SECONDS with what
// every rank has issued and waits in, on every communicator (the hang diagnosis below).
//
// MPI is initialized with MPI_THREAD_MULTIPLE (MPI_Init_thread is wrapped through the PMPI
// profiling interface): the device thread calls MPI for the collectives while the host may
// call it too. Under mpirun the bootstrap id travels as comm_nccl.c sends it (MPI_Bcast); ranks
// started without mpirun (NCCL_COMM_ID or --init-dir) have no MPI world, and their
// communicators run over sockets instead (nccl_socket.cpp), with the same order check.
#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "test/cudasim/device_queue.h"
#include "test/cudasim/include/cuda_bf16.h"
#include "test/cudasim/include/cuda_fp16.h"
#include "test/cudasim/nccl_socket.h"
#include "test/cudasim/sim.h"

struct ncclComm {
  MPI_Comm mc;
  int rank, size;
  int serial;           // creation number on this rank, for messages
  uint64_t issued;      // collectives issued (the header's number)
  std::atomic<int> aborted{0};
  int destroyed = 0;
  cudasim::SockComm* sock = nullptr;  // ranks started without mpirun: the socket transport
};

namespace cudasim {

static int comm_serial = 0;

enum Kind { K_ALLGATHER, K_REDUCESCATTER, K_ALLREDUCE, K_BROADCAST, K_DESTROY };
static const char* kind_name[] = {"AllGather", "ReduceScatter", "AllReduce", "Broadcast", "CommDestroy"};

struct Header {
  uint64_t number;
  int32_t kind, dtype, op, root;
  uint64_t count;
};

static size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}
static const char* type_name(int t) {
  static const char* n[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "fp16", "fp32", "fp64", "bf16"};
  return t >= 0 && t < 10 ? n[t] : "?";
}

// ---- the hang diagnosis ---------------------------------------------------------------------
// A collective some rank never joins hangs NCCL; it can also wait on one communicator while
// the rank it needs waits on another. To turn that into a message, every rank publishes, per
// communicator, how many collectives it issued and which one it waits in, on a board in shared
// memory (/dev/shm, one per run: the simulator's ranks share a machine). A collective whose
// ranks have not all arrived after CUDASIM_HANG_SECONDS (default 30) prints the board: where
// each rank waits, and on which communicator the ranks' counts first differ.
static const int kBoardComms = 16;
struct BoardEntry {
  int64_t issued;         // collectives issued on this communicator (including the one waited in)
  int64_t waiting;        // number of the collective this rank waits in, 0 if none
  int32_t kind, dtype;
  int64_t count;
  int32_t size;           // ranks of the communicator (0: the slot is unused)
};
static BoardEntry* board = nullptr;  // [world ranks][kBoardComms]
static int board_world = 0, board_rank = 0;

static void board_open(const ncclUniqueId& id, int world, int rank) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the id: one board per run
  for (size_t i = 0; i < sizeof id.internal; i++) h = (h ^ (unsigned char)id.internal[i]) * 1099511628211ull;
  char path[96];
  snprintf(path, sizeof path, "/dev/shm/cudasim-nccl-%016llx", (unsigned long long)h);
  size_t bytes = sizeof(BoardEntry) * kBoardComms * world;
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
    if (fd >= 0) close(fd);
    return;  // no diagnosis board: hangs are still ended by --comm-timeout
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return;
  board = (BoardEntry*)p;
  board_world = world, board_rank = rank;
  memset(&board[rank * kBoardComms], 0, sizeof(BoardEntry) * kBoardComms);
  // Every rank has mapped it once the communicator exists (ncclCommInitRank is collective);
  // the name can go (the mappings stay).
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) unlink(path);
}

static BoardEntry* board_slot(const ncclComm* c) {
  if (!board || c->serial > kBoardComms) return nullptr;
  return &board[board_rank * kBoardComms + c->serial - 1];
}

static double hang_seconds() {
  static double s = -1;
  if (s < 0) {
    const char* e = getenv("CUDASIM_HANG_SECONDS");
    s = e && *e ? atof(e) : 30.0;
  }
  return s;
}

static double now_s() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

[[noreturn]] static void report_hang(const ncclComm* c, uint64_t number, double waited) {
  char b[8192];
  size_t n = 0;
  for (int k = 0; k < kBoardComms && n + 400 < sizeof b; k++) {
    int used = 0, differ = 0;
    int64_t first = -1;
    for (int r = 0; r < board_world; r++) {
      const BoardEntry& e = board[r * kBoardComms + k];
      if (!e.size) continue;
      if (!used++) first = e.issued;
      else if (e.issued != first) differ = 1;
    }
    if (!used) continue;
    n += snprintf(b + n, sizeof b - n, "\n  communicator #%d%s:", k + 1, differ ? " (the ranks' counts differ here)" : "");
    for (int r = 0; r < board_world && n + 200 < sizeof b; r++) {
      const BoardEntry& e = board[r * kBoardComms + k];
      if (!e.size) continue;
      n += snprintf(b + n, sizeof b - n, "\n    rank %d: issued %lld collectives", r, (long long)e.issued);
      if (e.waiting)
        n += snprintf(b + n, sizeof b - n, ", waits in #%lld (%s of %lld x %s)", (long long)e.waiting,
                      kind_name[e.kind], (long long)e.count, type_name(e.dtype));
    }
  }
  fatal("nccl", "collective #%llu on communicator #%d has waited %.0f s for ranks that never join it: NCCL would "
        "hang here. What each rank has issued and waits in:%s", (unsigned long long)number, c->serial, waited, b);
}

// bf16 sums: MPI has no bf16, so a user operator adds in fp32 and rounds to nearest even.
static void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = (const uint16_t*)in;
  uint16_t* b = (uint16_t*)inout;
  for (int i = 0; i < *len; i++) b[i] = cudasim_f2bf_bits(cudasim_bf_bits2f(a[i]) + cudasim_bf_bits2f(b[i]));
}
static MPI_Op bf16_sum_op = MPI_OP_NULL;
// fp16 sums, the same way (cuda_fp16.h's round to nearest even; a sum above 65504 becomes inf,
// which is what the loss scaler of an fp16 run must then see).
static void f16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = (const uint16_t*)in;
  uint16_t* b = (uint16_t*)inout;
  for (int i = 0; i < *len; i++) b[i] = cudasim_f2h_bits(cudasim_h_bits2f(a[i]) + cudasim_h_bits2f(b[i]));
}
static MPI_Op f16_sum_op = MPI_OP_NULL;

static MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclFloat16: case ncclBfloat16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}
static MPI_Op mpi_op(ncclRedOp_t op, ncclDataType_t t) {
  if (t == ncclBfloat16) {
    if (op != ncclSum) fatal("unimplemented", "NCCL bf16 reductions other than ncclSum (operator %d)", (int)op);
    if (bf16_sum_op == MPI_OP_NULL) MPI_Op_create(bf16_sum, 1, &bf16_sum_op);
    return bf16_sum_op;
  }
  if (t == ncclFloat16) {
    if (op != ncclSum) fatal("unimplemented", "NCCL fp16 reductions other than ncclSum (operator %d)", (int)op);
    if (f16_sum_op == MPI_OP_NULL) MPI_Op_create(f16_sum, 1, &f16_sum_op);
    return f16_sum_op;
  }
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: fatal("unimplemented", "NCCL reduction operator %d", (int)op);
  }
}

static void mpi_ok(int rc, const char* what) {
  if (rc != MPI_SUCCESS) fatal("nccl", "%s failed (MPI error %d)", what, rc);
}

// CUDASIM_STALL_AFTER=N on a rank: its device never starts a collective after the N-th on any
// communicator, as on a hung GPU or link, so that rank and every peer waiting for it wait
// forever (the test of --comm-timeout).
static std::atomic<long> collectives_started{0};
static int stalled() {
  static long after = -2;
  if (after == -2) {
    const char* e = getenv("CUDASIM_STALL_AFTER");
    after = e && *e ? atol(e) : -1;
  }
  return after >= 0 && collectives_started > after;
}

static void socket_collective(ncclComm* c, const Header& h, const void* send, void* recv);

// One collective as a stream operation: the header exchange, then the data.
struct NcclCollective : Collective {
  ncclComm* c;
  Header mine;
  std::vector<Header> all;
  const void* send;
  void* recv;
  std::vector<unsigned char> tmp;  // reduce-scatter in place: the result lands here first
  MPI_Request req = MPI_REQUEST_NULL;
  int phase = -1;  // -1 not started, 0 header in flight, 1 data in flight, 2 done
  double started_at = 0;

  std::atomic<int> sock_done{0};

  void start() override {
    collectives_started++;
    if (stalled()) {  // posted nowhere: test() never succeeds
      phase = 3;
      return;
    }
    // Its buffers, as the operation that reads and writes them (the stream-order checker).
    const size_t es = type_size((ncclDataType_t)mine.dtype);
    size_t in = mine.count * es, out = mine.count * es;
    if (mine.kind == K_ALLGATHER) out *= c->size;
    if (mine.kind == K_REDUCESCATTER) in *= c->size;
    if (mine.kind != K_BROADCAST || c->rank == mine.root) order_access(send, in, 0);
    order_access(recv, out, 1);
    started_at = now_s();
    if (BoardEntry* e = board_slot(c)) {
      e->waiting = (int64_t)mine.number, e->kind = mine.kind, e->dtype = mine.dtype, e->count = (int64_t)mine.count;
      e->size = c->size;
    }
    if (c->sock) {  // the worker thread runs it; test() watches sock_done
      ncclComm* comm = c;
      Header h = mine;
      const void* s = send;
      void* r = recv;
      sock_post(c->sock, [comm, h, s, r] { socket_collective(comm, h, s, r); }, &sock_done);
      phase = 1;
      return;
    }
    all.resize(c->size);
    mpi_ok(MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, c->mc, &req),
           "MPI_Iallgather (collective header)");
    phase = 0;
  }
  int started() const override { return phase >= 0; }

  // Whether every rank's header equals this rank's.
  int headers_agree() const {
    for (int r = 0; r < c->size; r++) {
      const Header& h = all[r];
      if (h.number != mine.number || h.kind != mine.kind || h.count != mine.count || h.dtype != mine.dtype ||
          h.op != mine.op || h.root != mine.root)
        return 0;
    }
    return 1;
  }

  // Reports the collective where the ranks' headers differ, with what each rank issued.
  void check_headers() {
    if (headers_agree()) return;
    char b[4096];
    size_t n = 0;
    for (int q = 0; q < c->size && n + 200 < sizeof b; q++) {
      const Header& x = all[q];
      if (x.kind == K_DESTROY)
        n += snprintf(b + n, sizeof b - n, "\n    rank %d: destroys the communicator (it issued no collective #%llu)", q,
                      (unsigned long long)x.number);
      else
        n += snprintf(b + n, sizeof b - n, "\n    rank %d: collective #%llu: %s of %llu x %s%s", q,
                      (unsigned long long)x.number, kind_name[x.kind], (unsigned long long)x.count,
                      type_name(x.dtype), x.kind == K_BROADCAST ? " (root given)" : "");
    }
    fatal("nccl", "ranks issue different collectives on communicator #%d (%d ranks); NCCL would hang or corrupt "
          "data here. Collective #%llu:%s", c->serial, c->size, (unsigned long long)mine.number, b);
  }


  void post_data() {
    const size_t es = type_size((ncclDataType_t)mine.dtype);
    MPI_Datatype t = mpi_type((ncclDataType_t)mine.dtype);
    const int n = (int)mine.count;
    switch (mine.kind) {
      case K_ALLGATHER: {
        const void* s = send == (const char*)recv + (size_t)c->rank * mine.count * es ? MPI_IN_PLACE : send;
        mpi_ok(MPI_Iallgather(s, n, t, recv, n, t, c->mc, &req), "MPI_Iallgather");
        break;
      }
      case K_REDUCESCATTER: {
        MPI_Op op = mpi_op((ncclRedOp_t)mine.op, (ncclDataType_t)mine.dtype);
        void* out = recv;
        if ((const char*)recv >= (const char*)send && (const char*)recv < (const char*)send + mine.count * es * c->size) {
          tmp.resize(mine.count * es);
          out = tmp.data();
        }
        mpi_ok(MPI_Ireduce_scatter_block(send, out, n, t, op, c->mc, &req), "MPI_Ireduce_scatter_block");
        break;
      }
      case K_ALLREDUCE: {
        MPI_Op op = mpi_op((ncclRedOp_t)mine.op, (ncclDataType_t)mine.dtype);
        mpi_ok(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, n, t, op, c->mc, &req), "MPI_Iallreduce");
        break;
      }
      case K_BROADCAST:
        if (c->rank == mine.root && send != recv) memmove(recv, send, mine.count * es);
        mpi_ok(MPI_Ibcast(recv, n, t, mine.root, c->mc, &req), "MPI_Ibcast");
        break;
    }
  }

  int test() override {
    if (c->aborted) return 0;  // an aborted communicator never completes (the watchdog ends the run)
    if (stalled()) return 0;
    if (c->sock) return sock_done.load();
    int flag = 0;
    mpi_ok(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (!flag) {
      if (phase == 0 && board && hang_seconds() > 0) {
        double waited = now_s() - started_at;
        if (waited > hang_seconds()) report_hang(c, mine.number, waited);
      }
      return 0;
    }
    if (phase == 0) {
      if (BoardEntry* e = board_slot(c)) e->waiting = 0;
      check_headers();
      post_data();
      phase = 1;
      return 0;
    }
    phase = 2;
    return 1;
  }

  void finish() override {
    if (!tmp.empty()) memcpy(recv, tmp.data(), tmp.size());
  }
};

// acc op= x elementwise, for the socket transport's hub (rank-order left fold).
static void reduce_into(void* acc, const void* x, size_t n, int dtype, int op) {
  if (op != ncclSum) fatal("unimplemented", "NCCL reductions other than ncclSum over the socket transport");
  switch (dtype) {
    case ncclFloat32: for (size_t i = 0; i < n; i++) ((float*)acc)[i] += ((const float*)x)[i]; break;
    case ncclFloat64: for (size_t i = 0; i < n; i++) ((double*)acc)[i] += ((const double*)x)[i]; break;
    case ncclInt64: for (size_t i = 0; i < n; i++) ((int64_t*)acc)[i] += ((const int64_t*)x)[i]; break;
    case ncclInt32: for (size_t i = 0; i < n; i++) ((int32_t*)acc)[i] += ((const int32_t*)x)[i]; break;
    case ncclBfloat16: case ncclFloat16: {
      int len = (int)n;
      (dtype == ncclFloat16 ? f16_sum : bf16_sum)((void*)x, acc, &len, nullptr);
      break;
    }
    default: fatal("unimplemented", "NCCL reduction of type %s over the socket transport", type_name(dtype));
  }
}

// One collective over the socket transport, on its communicator's worker thread: the header
// check at the hub, then the data through the hub.
static void socket_collective(ncclComm* c, const Header& h, const void* send, void* recv) {
  SockComm* sc = c->sock;
  const int R = c->size, me = c->rank;
  // The hub compares the headers and tells every rank, so that all of them stop on a mismatch.
  NcclCollective hub;
  hub.c = c, hub.mine = h;
  hub.all.resize(R);
  sock_gather(sc, &h, sizeof h, hub.all.data());
  char status = me == 0 && !hub.headers_agree();
  sock_bcast(sc, &status, 1);
  if (status) {
    if (me == 0) hub.check_headers();
    fatal("nccl", "ranks issue different collectives on communicator #%d at collective #%llu (rank 0 of it lists what "
          "each rank issued)", c->serial, (unsigned long long)h.number);
  }
  if (h.kind == K_DESTROY) return;
  const size_t es = type_size((ncclDataType_t)h.dtype), chunk = h.count * es;
  std::vector<unsigned char> tmp;
  switch (h.kind) {
    case K_ALLGATHER:
      if (me == 0) tmp.resize(chunk * R);
      sock_gather(sc, send, chunk, tmp.data());
      if (me == 0) memcpy(recv, tmp.data(), chunk * R);
      sock_bcast(sc, recv, chunk * R);
      break;
    case K_REDUCESCATTER:
    case K_ALLREDUCE: {
      const size_t full = h.kind == K_ALLREDUCE ? chunk : chunk * R;
      if (me == 0) tmp.resize(full * R);
      sock_gather(sc, send, full, tmp.data());
      if (me == 0)
        for (int r = 1; r < R; r++) reduce_into(tmp.data(), tmp.data() + full * r, full / es, h.dtype, h.op);
      if (h.kind == K_ALLREDUCE) {
        if (me == 0) memcpy(recv, tmp.data(), full);
        sock_bcast(sc, recv, full);
      } else {
        sock_scatter(sc, tmp.data(), chunk, recv);
      }
      break;
    }
    case K_BROADCAST:
      if (me == 0) tmp.resize(chunk * R);
      sock_gather(sc, me == h.root ? send : recv, chunk, tmp.data());
      if (me == 0) memcpy(recv, tmp.data() + chunk * h.root, chunk);
      sock_bcast(sc, recv, chunk);
      break;
  }
}

static ncclResult_t issue(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t dtype, ncclRedOp_t op,
                          int root, ncclComm_t comm, cudaStream_t stream) {
  if (!comm || comm->destroyed) return ncclInvalidArgument;
  size_t es = type_size(dtype);
  if (!es) return ncclInvalidArgument;
  if (count > 0x7fffffff) fatal("unimplemented", "a %s of %zu elements (MPI counts are int)", kind_name[kind], count);
  size_t in = count * es, out = count * es;
  if (kind == K_ALLGATHER) out *= comm->size;
  if (kind == K_REDUCESCATTER) in *= comm->size;
  // NCCL needs device memory for both buffers.
  if (kind != K_BROADCAST || comm->rank == root) check_device_range(send, in, kind_name[kind]);
  check_device_range(recv, out, kind_name[kind]);
  NcclCollective* c = new NcclCollective();
  c->c = comm;
  c->mine = Header{++comm->issued, (int32_t)kind, (int32_t)dtype, (int32_t)op, (int32_t)root, (uint64_t)count};
  if (BoardEntry* e = board_slot(comm)) {
    e->issued = (int64_t)comm->issued;
    e->size = comm->size;
  }
  c->send = send, c->recv = recv;
  count_collective(kind_name[kind], kind == K_REDUCESCATTER ? in : out);
  collective_op(stream, kind_name[kind], c);
  return ncclSuccess;
}

}  // namespace cudasim

using namespace cudasim;

// The PMPI wrappers: MPI with full thread support, whatever the program asks for.
extern "C" int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  (void)required;
  int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, provided);
  if (rc == MPI_SUCCESS && *provided < MPI_THREAD_MULTIPLE)
    fatal("nccl", "the MPI library gives thread level %d, the simulated NCCL needs MPI_THREAD_MULTIPLE", *provided);
  return rc;
}
extern "C" int MPI_Init(int* argc, char*** argv) {
  int provided;
  return MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
}

extern "C" const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
extern "C" ncclResult_t ncclGetVersion(int* v) {
  if (!v) return ncclInvalidArgument;
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}
extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  // The socket transport's id (the hub's address); under mpirun the same bytes name the run.
  sock_unique_id(id);
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  int inited = 0, world = 0;
  MPI_Initialized(&inited);
  if (inited) MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != nranks) {  // not started by mpirun: the socket transport, through the id's hub
    ncclComm* c = new ncclComm();
    c->sock = sock_init(nranks, id, rank);
    c->rank = rank, c->size = nranks;
    c->serial = ++comm_serial;
    *comm = c;
    return ncclSuccess;
  }
  ncclComm* c = new ncclComm();
  mpi_ok(MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &c->mc), "MPI_Comm_split (ncclCommInitRank)");
  MPI_Comm_rank(c->mc, &c->rank);
  MPI_Comm_size(c->mc, &c->size);
  // Every rank must have joined with the same id (it names one communicator).
  std::vector<ncclUniqueId> ids(c->size);
  mpi_ok(MPI_Allgather(&id, sizeof id, MPI_BYTE, ids.data(), sizeof id, MPI_BYTE, c->mc), "MPI_Allgather (id)");
  for (int r = 0; r < c->size; r++)
    if (memcmp(&ids[r], &id, sizeof id))
      fatal("nccl", "ncclCommInitRank: rank %d joined with a different unique id than rank %d", r, rank);
  c->serial = ++comm_serial;
  if (c->serial == 1) board_open(id, c->size, c->rank);
  *comm = c;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  (void)config;
  if (!comm || !newcomm) return ncclInvalidArgument;
  device_synchronize_all();  // a host-blocking call: the collectives before it complete first
  if (comm->sock) {
    int r = 0, n = 0;
    SockComm* sc = sock_split(comm->sock, color, key, &r, &n);
    if (!sc) {
      *newcomm = nullptr;
      return ncclSuccess;
    }
    ncclComm* c = new ncclComm();
    c->sock = sc, c->rank = r, c->size = n;
    c->serial = ++comm_serial;
    *newcomm = c;
    return ncclSuccess;
  }
  ncclComm* c = new ncclComm();
  mpi_ok(MPI_Comm_split(comm->mc, color < 0 ? MPI_UNDEFINED : color, key, &c->mc), "MPI_Comm_split (ncclCommSplit)");
  if (c->mc == MPI_COMM_NULL) {
    delete c;
    *newcomm = nullptr;
    return ncclSuccess;
  }
  MPI_Comm_rank(c->mc, &c->rank);
  MPI_Comm_size(c->mc, &c->size);
  c->serial = ++comm_serial;
  *newcomm = c;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  device_synchronize_all();
  if (comm->sock) {  // the last header, checked at the hub; then the connections close
    socket_collective(comm, Header{++comm->issued, K_DESTROY, 0, 0, 0, 0}, nullptr, nullptr);
    sock_destroy(comm->sock);
    comm->destroyed = 1;
    return ncclSuccess;
  }
  // The last header: a rank that issued a collective the others did not is named here.
  NcclCollective d;
  d.c = comm;
  d.mine = Header{++comm->issued, K_DESTROY, 0, 0, 0, 0};
  d.start();
  MPI_Wait(&d.req, MPI_STATUS_IGNORE);
  d.check_headers();
  comm->destroyed = 1;
  MPI_Comm_free(&comm->mc);
  return ncclSuccess;
}

// CUDASIM_ABORT_HANGS=1: ncclCommAbort never returns, as a real one can when a peer is gone
// (the test of the watchdog's grace period).
extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  comm->aborted = 1;  // from any thread: in-flight collectives stop progressing
  const char* hang = getenv("CUDASIM_ABORT_HANGS");
  while (hang && !strcmp(hang, "1")) pause();
  return ncclSuccess;
}
extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* e) {
  if (!comm || !e) return ncclInvalidArgument;
  *e = comm->aborted ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}
extern "C" ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = comm->size;
  return ncclSuccess;
}
extern "C" ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                                      cudaStream_t s) {
  return issue(K_ALLGATHER, send, recv, count, t, ncclSum, 0, comm, s);
}
extern "C" ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                          ncclComm_t comm, cudaStream_t s) {
  return issue(K_REDUCESCATTER, send, recv, count, t, op, 0, comm, s);
}
extern "C" ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t s) {
  return issue(K_ALLREDUCE, send, recv, count, t, op, 0, comm, s);
}
extern "C" ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                                      ncclComm_t comm, cudaStream_t s) {
  if (!comm || root < 0 || root >= comm->size) return ncclInvalidArgument;
  return issue(K_BROADCAST, send, recv, count, t, ncclSum, root, comm, s);
}
extern "C" ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
extern "C" ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
