// stall_shim.c: a rank stopped during start-up, on demand, for the tests (LD_PRELOAD). On the
// OpenMPI rank STALL_RANK, the call named by STALL_AT (MPI_Init_thread, MPI_Comm_split_type or
// MPI_Comm_split: the process groups) first stops the process with SIGSTOP, as a rank frozen by
// a debugger, a swapped-out node or a job-control accident would be; the other ranks then wait
// for it inside that call.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef void* Any;  // MPI handles pass through untouched: no mpi.h needed

static void maybe_stop(const char* call) {
  const char *at = getenv("STALL_AT"), *rank = getenv("STALL_RANK"), *mine = getenv("OMPI_COMM_WORLD_RANK");
  if (at && !strcmp(at, call) && rank && mine && !strcmp(rank, mine)) raise(SIGSTOP);
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  maybe_stop("MPI_Init_thread");
  int (*real)(int*, char***, int, int*) = (int (*)(int*, char***, int, int*))dlsym(RTLD_NEXT, "MPI_Init_thread");
  return real(argc, argv, required, provided);
}

int MPI_Comm_split_type(Any comm, int type, int key, Any info, Any* out) {
  maybe_stop("MPI_Comm_split_type");
  int (*real)(Any, int, int, Any, Any*) = (int (*)(Any, int, int, Any, Any*))dlsym(RTLD_NEXT, "MPI_Comm_split_type");
  return real(comm, type, key, info, out);
}

int MPI_Comm_split(Any comm, int color, int key, Any* out) {
  maybe_stop("MPI_Comm_split");
  int (*real)(Any, int, int, Any*) = (int (*)(Any, int, int, Any*))dlsym(RTLD_NEXT, "MPI_Comm_split");
  return real(comm, color, key, out);
}
