// dist.c: start-up, rank-0 printing and fatal errors that bring every rank down.
#include "infra/dist.h"

#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
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
static int g_rank_known = 0;  // g_rank is this rank's (MPI, or the launcher's variables, said it)
#ifndef NO_MPI
static int g_mpi = 0;
#endif
static const char* rank_text(void) {
  static char text[16];
  snprintf(text, sizeof text, "%d", g_rank);
  return text;
}

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
  g_rank_known = 1;
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

// ---- the start-up watchdog ------------------------------------------------------------------
// The collectives have their watchdog (kernels/comm.h); what blocks before them (MPI's start,
// the node split, the process groups' splits, the NCCL id exchange) has this one, with the same
// --comm-timeout, read from the command line before MPI starts. An expired stage writes its
// message (prepared when it was armed: only write and _exit run in the handler) and ends this
// rank; the launcher, seeing a rank end, ends the others.
static double g_watch_s = 600;
static char g_watch_msg[640];
static size_t g_watch_len;
static volatile sig_atomic_t g_exit_status;

static void stage_expired(int sig) {
  (void)sig;
  ssize_t w = write(2, g_watch_msg, g_watch_len);
  (void)w;
  _exit(3);
}

// --comm-timeout S (or --comm-timeout=S) from argv; the option parser checks it strictly later.
static void watch_timeout_from(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    const char* v = !strcmp(argv[i], "--comm-timeout") && i + 1 < argc ? argv[i + 1]
                    : !strncmp(argv[i], "--comm-timeout=", 15) ? argv[i] + 15 : NULL;
    char* end;
    double t = v ? strtod(v, &end) : -1;
    if (v && *v && !*end && t >= 0 && t <= 1e7) g_watch_s = t;
  }
}

void dist_watch(const char* stage) {
  struct itimerval t = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &t, NULL);
  if (!stage || g_watch_s <= 0) return;
  const char* env_rank = getenv("OMPI_COMM_WORLD_RANK");  // MPI may not have said it yet
  int n = snprintf(g_watch_msg, sizeof g_watch_msg, "[rank %s] error: %s did not finish within --comm-timeout %g s: "
                   "another rank is stopped, hung or unreachable (at start-up). Ending this rank, and with it the job.\n",
                   g_rank_known ? rank_text() : env_rank ? env_rank : "?", stage, g_watch_s);
  g_watch_len = n > 0 && (size_t)n < sizeof g_watch_msg ? (size_t)n : sizeof g_watch_msg - 1;
  signal(SIGALRM, stage_expired);
  t.it_value.tv_sec = (time_t)g_watch_s;
  t.it_value.tv_usec = (suseconds_t)((g_watch_s - (double)(time_t)g_watch_s) * 1e6);
  setitimer(ITIMER_REAL, &t, NULL);
}

static char g_alone_msg[2048];
static size_t g_alone_len;
static void exit_now(int sig) {
  (void)sig;
  ssize_t w = write(2, g_alone_msg, g_alone_len);
  (void)w;
  _exit(g_exit_status);
}

void dist_exit(int status, const char* alone) {
  // A rank that stops here alone (its own usage error) may find MPI_Finalize waiting for ranks
  // that wait in a collective for it: it exits after a few seconds regardless, saying why, and
  // the launcher ends the others. When every rank stops here, they finalize together at once.
  fflush(stdout);
  fflush(stderr);
  g_exit_status = status;
  int n = alone ? snprintf(g_alone_msg, sizeof g_alone_msg, "[rank %d] error: %s (this rank alone: the others were "
                           "started otherwise)\n", g_rank, alone) : 0;
  g_alone_len = n > 0 && (size_t)n < sizeof g_alone_msg ? (size_t)n : n > 0 ? sizeof g_alone_msg - 1 : 0;
  struct itimerval t = {{0, 0}, {5, 0}};
  signal(SIGALRM, exit_now);
  setitimer(ITIMER_REAL, &t, NULL);
  dist_finalize();
  exit(status);
}

void dist_init(int* argc, char*** argv) {
  watch_timeout_from(*argc, *argv);
#ifndef NO_MPI
  // Without a launcher OpenMPI starts as a singleton: one rank, no mpirun needed. Only the
  // main thread calls MPI (OpenMP workers and the NCCL watchdog never do): FUNNELED.
  int provided = 0;
  dist_watch("MPI's start-up (MPI_Init_thread)");
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "error: MPI_Init failed\n");
    exit(1);
  }
  g_mpi = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  g_rank_known = 1;
  // The rank on this node (it picks the GPU): ranks that share memory form one node.
  dist_watch("the node discovery (MPI_Comm_split_type and a broadcast over the node)");
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
  int local_world = 1;
  MPI_Comm_rank(node, &g_local_rank);
  MPI_Comm_size(node, &local_world);
  g_node = g_rank;
  MPI_Bcast(&g_node, 1, MPI_INT, 0, node);
  MPI_Comm_free(&node);
  dist_watch(NULL);
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
