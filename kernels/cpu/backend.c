// backend.c: the CPU backend has no context to create: kernels run on the calling thread's
// OpenMP team and write host memory. What it does set up is how that team waits.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/cpu/vec.h"
#include "kernels/kernels.h"

// How the OpenMP threads wait between parallel regions. GCC's runtime spins 300,000 rounds of
// a pause instruction before it sleeps (milliseconds on AMD cores). On a machine whose cores are
// shared, a spinning thread holds the core its descheduled teammate needs, and every region then
// ends by waiting for that teammate: with other work on the machine, make run's model took 4 to
// 10 times longer per step with 2 spinning threads than with short spinning or none, and longer
// than with 1 thread (docs/performance.md, "Threads"). So the CPU binaries spin briefly, then
// sleep: GOMP_SPINCOUNT=1000 (tens of microseconds, longer than the gaps between one step's
// kernels, so an idle machine keeps its speed), and OMP_WAIT_POLICY=passive for other OpenMP
// runtimes, unless the user chose any of these. The runtime reads its environment before main,
// in a constructor that runs before this one; so this one sets the variables and starts the
// program again, once (set, they stop it from doing so twice). Where that fails (no /proc), the
// program goes on with the runtime's default.
static const char* const WAIT_CHOICES[] = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"};

__attribute__((constructor)) static void wait_briefly(int argc, char** argv, char** envp) {
  (void)argc, (void)envp;
  for (size_t i = 0; i < sizeof WAIT_CHOICES / sizeof WAIT_CHOICES[0]; i++)
    if (getenv(WAIT_CHOICES[i])) return;
  if (!argv || !argv[0] || setenv("GOMP_SPINCOUNT", "1000", 0) || setenv("OMP_WAIT_POLICY", "passive", 0)) return;
  execv("/proc/self/exe", argv);
}

KernelCtx* kernels_init(int device) {
  (void)device;
  return NULL;
}
void kernels_shutdown(KernelCtx* ctx) { (void)ctx; }
KernelCtx* kernels_stream_ctx(KernelCtx* ctx, int stream) {
  (void)stream;
  return ctx;
}
const char* kernels_backend(void) { return "cpu"; }
void kernels_device_name(KernelCtx* ctx, char* out, size_t len) {
  (void)ctx;
  snprintf(out, len, "cpu (%s vectors)", VEC_TARGET);
}
