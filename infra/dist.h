// dist.h: process start-up and error handling across ranks.
//
// Under mpirun the binary initializes MPI and learns its rank and world size; run with no
// launcher it is one rank. Only rank 0 prints and writes logs. fatal() on any rank prints the
// message with the rank's number and takes every rank down at once (MPI_Abort), so a bad
// file on one rank never leaves the others waiting in a collective.
#ifndef FSDP_DIST_H
#define FSDP_DIST_H
#include <stdio.h>

void dist_init(int* argc, char*** argv);
void dist_finalize(void);
int dist_rank(void);
int dist_world(void);
int dist_local_rank(void);  // rank on this node: selects the GPU
// An id of this rank's node, the same for every rank on it (the world rank of its local rank 0,
// or this rank's entry of FSDP_NODE_MAP).
int dist_node(void);
// OpenMP threads of this rank: OMP_NUM_THREADS, or this node's cores shared among its ranks.
int dist_threads(void);
// printf on rank 0 only.
void log0(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Prints "[rank r] error: <message>" to stderr and aborts all ranks.
void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// For an error every rank finds alike (a setting that cannot work on this world): every rank
// calls it, rank 0 prints "error: <message>", and all exit 1 together, without an abort.
void fatal_all(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// Allocation that aborts (with the size and what it was for) instead of returning NULL.
void* xmalloc(size_t bytes, const char* what);
void* xcalloc(size_t n, size_t size, const char* what);
#endif
