// backend.c: the CPU backend has no context to create: kernels run on the calling thread's
// OpenMP team and write host memory. What it does set up is how that team waits.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/vec.h"
#include "kernels/kernels.h"

// How the OpenMP threads wait between parallel regions. GCC's runtime spins 300,000 rounds of
// a pause instruction before it sleeps (milliseconds on AMD cores). On a machine whose cores are
// shared, a spinning thread holds the core its descheduled teammate needs, and every region then
// ends by waiting for that teammate: with other work on the machine, make run's model took 4 to
// 10 times longer with 2 spinning threads than with 2 that sleep at once, and longer than with 1
// thread; on an idle machine sleeping costs a wake-up per region, about a third of that model's
// step (docs/performance.md, "The CPU backend: vectors and threads"; the kernels too small to
// gain from a second thread run on one, parallel.h). So the CPU binaries wait passively
// (OMP_WAIT_POLICY=passive) unless the user chose a policy (OMP_WAIT_POLICY, GOMP_SPINCOUNT or
// KMP_BLOCKTIME). The runtime reads its environment before main, in a constructor that runs
// before this one; so this one sets the variable and starts the program again, once (set, it
// stops it from doing so twice). Where that fails (no /proc), the program goes on spinning.
// With OMP_NUM_THREADS=1 no thread ever waits, and nothing is done.
static const char* const WAIT_CHOICES[] = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"};

__attribute__((constructor)) static void wait_passively(int argc, char** argv, char** envp) {
  (void)argc, (void)envp;
  for (size_t i = 0; i < sizeof WAIT_CHOICES / sizeof WAIT_CHOICES[0]; i++)
    if (getenv(WAIT_CHOICES[i])) return;
  const char* threads = getenv("OMP_NUM_THREADS");
  if (threads && !strcmp(threads, "1")) return;
  if (!argv || !argv[0] || setenv("OMP_WAIT_POLICY", "passive", 0)) return;
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
