// dist.c: start-up, rank-0 printing and fatal errors that bring every rank down.
#include "infra/dist.h"

#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifndef NO_MPI
#include <mpi.h>
#endif

#include "infra/launch.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static int g_rank = 0, g_world = 1, g_local_rank = 0;
static int g_node = 0;  // the world rank of this node's local rank 0: an id of the node
#ifndef NO_MPI
static int g_mpi = 0;
#endif

#if defined(NO_MPI) || defined(FSDP_CUDA)
// Rank, world size and local rank from the launcher's variables (OpenMPI, Slurm, torchrun);
// none of them: the only rank.
static void ranks_from_environment(void) {
  LaunchEnv env;
  char err[1024];
  if (launch_env_detect(&env, err, sizeof err)) {
    fprintf(stderr, "error: %s\n", err);
    exit(2);
  }
  g_rank = env.rank;
  g_world = env.world;
  g_local_rank = env.local_rank;
  g_node = env.rank - env.local_rank;  // launchers number a node's ranks consecutively
}
#endif

#ifndef NO_MPI
// MPI's world must be the one the launcher describes. Started by srun without PMI support or
// by torchrun, every process is an MPI singleton and would train alone, all writing the same
// outputs: refuse, and say how to launch.
static void check_launcher_matches_mpi(void) {
  LaunchEnv env;
  char err[1024];
  if (launch_env_detect(&env, err, sizeof err)) {
    fprintf(stderr, "error: %s\n", err);
    exit(2);
  }
  if (!strcmp(env.source, "none") || env.world == g_world) return;
  if (g_rank == 0)
    fprintf(stderr,
            "error: the %s environment describes %d ranks, but MPI started %d; this binary's ranks must come "
            "from MPI: launch with mpirun -np %d (Slurm: srun --mpi=pmix, or mpirun inside the allocation)%s\n",
            env.source, env.world, g_world, env.world,
#ifdef FSDP_CUDA
            ", or start every process without MPI support (see --init-dir)"
#else
            ""
#endif
    );
  MPI_Finalize();
  exit(2);
}
#endif

#ifndef NO_MPI
// Ranks sharing a node share its cores: without OMP_NUM_THREADS, each rank takes its share
// (at least one thread) instead of every rank starting one thread per core.
static void share_cores(int local_world) {
#ifdef _OPENMP
  if (local_world > 1 && !getenv("OMP_NUM_THREADS")) {
    int share = omp_get_num_procs() / local_world;
    omp_set_num_threads(share > 0 ? share : 1);
  }
#else
  (void)local_world;
#endif
}
#endif

// FSDP_NODE_MAP=n0,n1,...: the node of each world rank, in place of the one MPI or the launcher
// reports, for the placement of shard and node groups (fsdp_group_positions): how the tests lay
// several nodes out on one host, and a way to describe a cluster whose shared-memory detection
// is wrong (containers that each hide the others).
static void node_from_map(void) {
  const char* map = getenv("FSDP_NODE_MAP");
  if (!map) return;
  const char* p = map;
  int n = 0;
  for (;;) {
    char* end;
    long id = strtol(p, &end, 10);
    if (end == p || id < 0 || id > 1 << 30 || (*end && *end != ',')) n = -1;
    if (n < 0) break;
    if (n == g_rank) g_node = (int)id;
    n++;
    if (!*end) break;
    p = end + 1;
  }
  if (n != g_world)
    fatal("FSDP_NODE_MAP='%s' must list the node of every rank as integers >= 0 separated by commas, %d of them for "
          "this run (e.g. 0,0,1,1 for two nodes of two ranks)", map, g_world);
}

int dist_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void dist_init(int* argc, char*** argv) {
#ifndef NO_MPI
  // Without a launcher OpenMPI starts as a singleton: one rank, no mpirun needed. Only the
  // main thread calls MPI (OpenMP workers and the NCCL watchdog never do): FUNNELED.
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "error: MPI_Init failed\n");
    exit(1);
  }
  g_mpi = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  // The rank on this node (it picks the GPU): ranks that share memory form one node.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
  int local_world = 1;
  MPI_Comm_rank(node, &g_local_rank);
  MPI_Comm_size(node, &local_world);
  g_node = g_rank;
  MPI_Bcast(&g_node, 1, MPI_INT, 0, node);
  MPI_Comm_free(&node);
#ifdef FSDP_CUDA
  if (g_world == 1) {
    // A launcher without MPI (torchrun, srun without PMI support) starts every process as an
    // MPI singleton; its environment then says who we are, as in a build without MPI, and
    // NCCL gets its id from NCCL_COMM_ID or --init-dir (comm_nccl.c). Otherwise each process
    // would train alone on GPU 0.
    ranks_from_environment();
  } else {
    check_launcher_matches_mpi();
  }
#else
  check_launcher_matches_mpi();
#endif
  share_cores(local_world);
#else
  (void)argc;
  (void)argv;
  // Without MPI the launcher's environment (OpenMPI, Slurm or torchrun variables) says who
  // we are; with none of them this is the only rank.
  ranks_from_environment();
#endif
  node_from_map();
}

int dist_local_rank(void) { return g_local_rank; }
int dist_node(void) { return g_node; }

void dist_finalize(void) {
#ifndef NO_MPI
  if (g_mpi) MPI_Finalize();
  g_mpi = 0;
#endif
}

int dist_rank(void) { return g_rank; }
int dist_world(void) { return g_world; }

void log0(const char* fmt, ...) {
  if (g_rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
}

void fatal(const char* fmt, ...) {
  fflush(stdout);
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g_world > 1) fprintf(stderr, "[rank %d] error: %s\n", g_rank, msg);
  else fprintf(stderr, "error: %s\n", msg);
  fflush(stderr);
#ifndef NO_MPI
  // MPI_Abort ends every rank, also those blocked in a collective waiting for this one. Should
  // it never return (the launcher unreachable), SIGALRM's default action ends this rank.
  if (g_mpi && g_world > 1) {
    signal(SIGALRM, SIG_DFL);
    alarm(10);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
#endif
  exit(1);
}

void fatal_all(const char* fmt, ...) {
  fflush(stdout);
  if (g_rank == 0) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "error: %s\n", msg);
    fflush(stderr);
  }
  // mpirun ends the ranks still running when the first exits with 1: they are leaving too, and
  // quietly (not as a run told to stop after its step).
  signal(SIGTERM, SIG_IGN), signal(SIGINT, SIG_IGN), signal(SIGUSR1, SIG_IGN);
  dist_finalize();
  exit(1);
}

void* xmalloc(size_t bytes, const char* what) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) fatal("out of host memory allocating %zu bytes for %s", bytes, what);
  return p;
}

void* xcalloc(size_t n, size_t size, const char* what) {
  void* p = calloc(n ? n : 1, size ? size : 1);
  if (!p) fatal("out of host memory allocating %zu x %zu bytes for %s", n, size, what);
  return p;
}
