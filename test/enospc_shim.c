// enospc_shim.c: a full disk on demand, for the tests (LD_PRELOAD). pwrite() succeeds until
// ENOSPC_AFTER_BYTES bytes have been written through it, then writes what still fits and fails
// with ENOSPC, as a file system that has just run out of space does.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

static long long written;

ssize_t pwrite(int fd, const void* buf, size_t n, off_t at) {
  static ssize_t (*real)(int, const void*, size_t, off_t);
  if (!real) real = (ssize_t(*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
  const char* limit_s = getenv("ENOSPC_AFTER_BYTES");
  long long limit = limit_s ? atoll(limit_s) : -1;
  if (limit >= 0 && written + (long long)n > limit) {
    if (written >= limit) {
      errno = ENOSPC;
      return -1;
    }
    n = (size_t)(limit - written);  // a short write first, as the disk fills
  }
  ssize_t w = real(fd, buf, n, at);
  if (w > 0) written += w;
  return w;
}
ssize_t pwrite64(int fd, const void* buf, size_t n, off_t at) { return pwrite(fd, buf, n, at); }
