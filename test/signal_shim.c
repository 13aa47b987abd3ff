// signal_shim.c: a signal in the middle of a checkpoint save, on demand, for the tests
// (LD_PRELOAD). The fsync() of a file whose path holds SIGNAL_FSYNC_PATH that comes after
// SIGNAL_SKIP such calls (only that one) first raises SIGTERM SIGNAL_TIMES times (default
// once) in this process; with SIGNAL_RANK set, only on that OpenMPI rank. The save is then
// still writing its arrays.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fsync(int fd) {
  static int (*real)(int);
  static int seen;
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  const char* want = getenv("SIGNAL_FSYNC_PATH");
  const char *rank = getenv("SIGNAL_RANK"), *mine = getenv("OMPI_COMM_WORLD_RANK");
  if (want && (!rank || (mine && !strcmp(rank, mine)))) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n > 0) {
      path[n] = 0;
      const char *skip = getenv("SIGNAL_SKIP"), *times = getenv("SIGNAL_TIMES");
      if (strstr(path, want) && seen++ == (skip ? atoi(skip) : 0))
        for (int i = 0; i < (times ? atoi(times) : 1); i++) raise(SIGTERM);
    }
  }
  return real(fd);
}
