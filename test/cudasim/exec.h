// exec.h: the executor's state, shared by exec.cpp (blocks, fibers, barriers, warp
// collectives), check.cpp (the memory checkers) and ptx.cpp's glue (cp.async, ldmatrix, mma).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <vector>

#include "test/cudasim/fiber.h"
#include "test/cudasim/include/cudasim/device.h"

namespace cudasim {

enum ThreadState { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

// A cp.async copy issued but not yet landed: its 4 or 16 source bytes were read at issue.
struct PendingCopy {
  unsigned char* dst;
  unsigned char data[16];
  int bytes;
  int group;
};

struct SimThread {
  Fiber fiber;
  unsigned char* stack_lo;  // the fiber's stack: the thread's local memory
  unsigned char* stack_hi;
  uint3 idx;
  int linear, lane, warp;
  ThreadState state;
  const char* wait_file;  // where it waits (barrier or warp collective)
  int wait_line;
  uint64_t wait_gen;  // the warp collective generation it waits for
  std::vector<PendingCopy> copies;
  int open_group;  // cp.async: the group new copies join; commit closes it
};

// One warp's collective in progress: lanes deposit their values in buf[gen & 1].
struct SimWarp {
  uint64_t gen;
  unsigned arrived;  // lanes of the mask that have arrived
  unsigned mask;
  const char* op;
  const char* file;
  int line;
  size_t bytes;
  uint32_t sync_epoch;  // __syncwarp count: orders this warp's shared accesses
  unsigned char buf[2][32][64];
};

struct Exec {
  // The kernel being run.
  const char* kernel;
  dim3 grid, block;
  uint3 block_idx;
  long block_linear;
  int nthreads, nwarps;
  SimThread* threads;  // [nthreads]
  SimWarp* warps;      // [nwarps]
  uint32_t barrier_epoch;  // __syncthreads passed by this block
  uint32_t block_serial;   // distinct for every block ever run: shadow entries of older blocks are stale
  unsigned char* dyn_smem;  // dynamic shared memory of the launch
  size_t dyn_bytes;
  const unsigned char* params;  // the launch's parameter pack: device code may read it
  size_t params_bytes;
};
extern Exec ex;
// The CUDA thread the calling host thread is running, NULL on the host's own threads (kernels
// run on the simulator's device thread; host code of kernel files runs on the host thread).
extern thread_local SimThread* g_cur;

// Whether [p, p+n) is shared memory (static or the launch's dynamic), and which.
int is_shared(const void* p, size_t n);
// Checks one device-side access of the running thread (also used for the PTX emulation's
// explicit accesses: cp.async, ldmatrix); `pc` is where it happened, for the report.
void device_access(const void* p, size_t n, int is_write, const void* pc);
// The same, where one_access = 0 marks a block copy (memcpy) that need not be aligned as a unit.
void device_access_sized(const void* p, size_t n, int is_write, const void* pc, int one_access);
// Resets the shadow of shared memory for a new block (a serial bump; no clearing).
void shadow_new_block();
// Host side of an access in an instrumented file: host code must not touch device memory.
void host_access(const void* p, size_t n, int is_write, const void* pc);
// Describes the running thread: "kernel K block (x,y,z) thread (x,y,z)".
void describe_thread(char* out, size_t n);

}  // namespace cudasim
