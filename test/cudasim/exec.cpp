// exec.cpp: the executor. A launch runs its blocks one after the other on the host thread;
// inside a block every CUDA thread is a fiber (fiber.h) with its own stack, its local memory.
// A thread runs until it reaches a point where it must wait for others (__syncthreads, a warp
// collective, __syncwarp) or exits; the scheduler then runs the next runnable thread, in index
// order or, with CUDASIM_SEED set, in a seeded random order per round. The blocks of a launch
// run one at a time, in index order, or with CUDASIM_BLOCK_SEED in a seeded random order (a GPU
// promises none: kernels whose blocks meet through a last arriver or a ticket counter must give
// the same bits). When no thread can run:
// all waiting at a barrier releases it; anything else is a deadlock on a GPU and is reported
// with where each thread waits.
//
// Launch checks: grid and block limits of sm_90, dynamic shared memory within 48 KiB unless
// the kernel opted in (cudaFuncSetAttribute) and never above 227 KiB; violations are launch
// errors returned by cudaGetLastError, as on a GPU, and are also reported.
#include "test/cudasim/exec.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <utility>
#include <vector>

#include "test/cudasim/order.h"
#include "test/cudasim/sim.h"

namespace cudasim {

Exec ex;
thread_local SimThread* g_cur = nullptr;

// For a debugger's breakpoint conditions (plain variables: no function call needed): the CUDA
// thread the device thread runs, as its index in the block, and its block's index in the grid.
extern "C" {
volatile long cudasim_thread = -1;
volatile long cudasim_block = -1;
}

static const size_t kStack = 64 * 1024;  // per CUDA thread, plus a guard page below
static const size_t kGuard = 4096;
static unsigned char* stacks = nullptr;  // 1024 stacks, allocated at the first launch
static Fiber scheduler_fiber;
static SimThread thread_pool[1024];
static SimWarp warp_pool[32];
static unsigned char* dyn_arena = nullptr;  // kSharedPerBlockOptin bytes, reused by every launch
static void (*cur_entry)(void*);
static void* cur_params;

static void alloc_stacks() {
  size_t each = kStack + kGuard, total = each * 1024;
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) fatal("internal", "cannot map the simulated threads' stacks");
  stacks = (unsigned char*)p;
  // A guard page under each stack: an overflow faults instead of corrupting a neighbour.
  for (int i = 0; i < 1024; i++) mprotect(stacks + i * each, kGuard, PROT_NONE);
  dyn_arena = (unsigned char*)aligned_alloc(128, kSharedPerBlockOptin);
}

void describe_thread(char* out, size_t n) {
  if (!g_cur) {
    snprintf(out, n, "host code");
    return;
  }
  snprintf(out, n, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", ex.kernel, ex.block_idx.x, ex.block_idx.y,
           ex.block_idx.z, g_cur->idx.x, g_cur->idx.y, g_cur->idx.z);
}

static void thread_main(void* arg) {
  SimThread* t = (SimThread*)arg;
  cur_entry(cur_params);
  t->state = DONE;
  fiber_switch(&t->fiber, &scheduler_fiber);
  fatal("internal", "a finished simulated thread was resumed");
}

// Back to the scheduler until this thread may run again.
static void yield_thread() {
  SimThread* t = g_cur;
  fiber_switch(&t->fiber, &scheduler_fiber);
}

static void land_copies(SimThread* t, int upto_group);  // ptx glue below

static const char* state_name(ThreadState s) {
  switch (s) {
    case RUNNABLE: return "running";
    case AT_BARRIER: return "waiting at __syncthreads";
    case AT_WARP: return "waiting at a warp collective";
    case DONE: return "exited";
  }
  return "?";
}

// The threads of the block grouped by what they are doing, for a deadlock or divergence report.
static void describe_waits(char* out, size_t n) {
  size_t len = 0;
  out[0] = 0;
  for (int i = 0; i < ex.nthreads && len + 200 < n;) {
    SimThread* t = &ex.threads[i];
    int j = i + 1;
    while (j < ex.nthreads && ex.threads[j].state == t->state && ex.threads[j].wait_file == t->wait_file &&
           ex.threads[j].wait_line == t->wait_line)
      j++;
    len += snprintf(out + len, n - len, "\n    threads %d..%d: %s", i, j - 1, state_name(t->state));
    if (t->state == AT_BARRIER || t->state == AT_WARP)
      len += snprintf(out + len, n - len, " at %s:%d", t->wait_file, t->wait_line);
    i = j;
  }
}

static uint64_t rng = 0, block_rng = 0;
static uint64_t xorshift(uint64_t* x) {
  *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
  return *x;
}
static uint64_t next_rand() {
  return xorshift(&rng);
}

static void run_block() {
  shadow_new_block();
  hb_block();
  ex.barrier_epoch = 0;
  for (int w = 0; w < ex.nwarps; w++) {
    SimWarp* wp = &ex.warps[w];
    wp->gen = 0, wp->arrived = 0, wp->sync_epoch = 0, wp->op = nullptr;
  }
  for (int i = 0; i < ex.nthreads; i++) {
    SimThread* t = &ex.threads[i];
    t->linear = i;
    t->idx = uint3{(unsigned)(i % ex.block.x), (unsigned)(i / ex.block.x % ex.block.y),
                   (unsigned)(i / (ex.block.x * ex.block.y))};
    t->lane = i & 31, t->warp = i >> 5;
    t->state = RUNNABLE;
    t->wait_file = nullptr, t->wait_line = 0;
    t->copies.clear();
    t->open_group = 0;
    t->stack_lo = stacks + (size_t)i * (kStack + kGuard) + kGuard;
    t->stack_hi = t->stack_lo + kStack;
    fiber_init(&t->fiber, t->stack_lo, kStack, thread_main, t);
  }
  static int order[1024];
  for (int i = 0; i < ex.nthreads; i++) order[i] = i;
  for (;;) {
    if (rng)  // CUDASIM_SEED: another valid interleaving every round
      for (int i = ex.nthreads - 1; i > 0; i--) {
        int j = (int)(next_rand() % (uint64_t)(i + 1));
        int tmp = order[i];
        order[i] = order[j], order[j] = tmp;
      }
    int ran = 0;
    for (int k = 0; k < ex.nthreads; k++) {
      SimThread* t = &ex.threads[order[k]];
      if (t->state != RUNNABLE) continue;
      g_cur = t;
      cudasim_thread = t->linear, cudasim_block = ex.block_linear;
      fiber_switch(&scheduler_fiber, &t->fiber);
      cudasim_thread = cudasim_block = -1;
      g_cur = nullptr;
      ran = 1;
    }
    if (ran) continue;
    int done = 0, barrier = 0;
    for (int i = 0; i < ex.nthreads; i++) {
      done += ex.threads[i].state == DONE;
      barrier += ex.threads[i].state == AT_BARRIER;
    }
    if (done == ex.nthreads) break;
    char who[4096];
    if (barrier + done == ex.nthreads && done == 0) {  // everyone at the barrier: release it
      ex.barrier_epoch++;
      for (int i = 0; i < ex.nthreads; i++) ex.threads[i].state = RUNNABLE;
      continue;
    }
    describe_waits(who, sizeof who);
    if (barrier + done == ex.nthreads)
      report("divergence", "kernel %s, block (%u,%u,%u): __syncthreads not reached by every thread of the block "
             "(threads that exited never arrive; a GPU hangs or misbehaves):%s", ex.kernel, ex.block_idx.x,
             ex.block_idx.y, ex.block_idx.z, who);
    else
      report("divergence", "kernel %s, block (%u,%u,%u): deadlock, no thread can proceed (a warp collective "
             "waits for lanes that wait elsewhere or exited):%s", ex.kernel, ex.block_idx.x, ex.block_idx.y,
             ex.block_idx.z, who);
    // Keep going (CUDASIM_KEEP_GOING): abandon the block.
    break;
  }
  for (int i = 0; i < ex.nthreads; i++) land_copies(&ex.threads[i], 1 << 30);
}

static int launch_error(const char* what, cudaError_t e, const char* name) {
  report("launch", "kernel %s: %s", name, what);
  set_last_error(e);
  return 0;
}

static int check_config(const char* name, const void* kernel, const LaunchConfig& c) {
  char b[256];
  unsigned long long nt = (unsigned long long)c.block.x * c.block.y * c.block.z;
  if (!c.block.x || !c.block.y || !c.block.z || !c.grid.x || !c.grid.y || !c.grid.z) {
    snprintf(b, sizeof b, "a zero grid or block dimension: grid (%u,%u,%u), block (%u,%u,%u)", c.grid.x, c.grid.y,
             c.grid.z, c.block.x, c.block.y, c.block.z);
    return launch_error(b, cudaErrorInvalidConfiguration, name);
  }
  if (c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64 || nt > 1024) {
    snprintf(b, sizeof b, "block (%u,%u,%u) exceeds sm_90's limits (x,y <= 1024, z <= 64, 1024 threads)", c.block.x,
             c.block.y, c.block.z);
    return launch_error(b, cudaErrorInvalidConfiguration, name);
  }
  if (c.grid.x > 2147483647u || c.grid.y > 65535 || c.grid.z > 65535) {
    snprintf(b, sizeof b, "grid (%u,%u,%u) exceeds sm_90's limits (x < 2^31, y,z <= 65535)", c.grid.x, c.grid.y,
             c.grid.z);
    return launch_error(b, cudaErrorInvalidConfiguration, name);
  }
  if (c.smem > kSharedPerBlock) {
    size_t optin = kernel_smem_optin(kernel);
    if (c.smem > smem_optin_limit()) {
      snprintf(b, sizeof b, "%zu bytes of dynamic shared memory, above the device's %zu KiB per block", c.smem,
               smem_optin_limit() / 1024);
      return launch_error(b, cudaErrorInvalidValue, name);
    }
    if (c.smem > optin) {
      snprintf(b, sizeof b, "%zu bytes of dynamic shared memory, above the default 48 KiB without the opt-in "
               "(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, %zu))%s", c.smem, c.smem,
               optin ? " for that many bytes" : "");
      return launch_error(b, cudaErrorInvalidValue, name);
    }
  }
  return 1;
}

static int seeded = 0;

void launch_kernel(const void* kernel, const char* name, const LaunchConfig& cfg, void (*entry)(void*), void* params,
                   size_t params_bytes, void (*destroy)(void*)) {
  if (!stacks) alloc_stacks();
  if (!seeded) {
    const char* s = getenv("CUDASIM_SEED");
    rng = s && *s ? strtoull(s, nullptr, 0) * 0x9E3779B97F4A7C15ull + 1 : 0;
    const char* bs = getenv("CUDASIM_BLOCK_SEED");
    block_rng = bs && *bs ? strtoull(bs, nullptr, 0) * 0x9E3779B97F4A7C15ull + 1 : 0;
    seeded = 1;
  }
  if (!check_config(name, kernel, cfg)) {
    destroy(params);
    return;
  }
  count_launch(name);
  stream_op((cudaStream_t)cfg.stream, name, [=] {
    ex.kernel = name;
    ex.grid = cfg.grid, ex.block = cfg.block;
    ex.nthreads = (int)(cfg.block.x * cfg.block.y * cfg.block.z);
    ex.nwarps = (ex.nthreads + 31) / 32;
    ex.threads = thread_pool, ex.warps = warp_pool;
    ex.dyn_smem = dyn_arena, ex.dyn_bytes = cfg.smem;
    ex.params = (const unsigned char*)params, ex.params_bytes = params_bytes;
    cur_entry = entry, cur_params = params;
    hb_launch();
    long nblocks = (long)cfg.grid.x * cfg.grid.y * cfg.grid.z;
    // Blocks run one at a time, in index order, or with CUDASIM_BLOCK_SEED in a seeded random
    // order: a GPU promises no order of arrival, so a kernel whose blocks meet through global
    // memory (the last block to arrive finishing a sum, kernels/cuda/column_sums.cuh; blocks
    // taking their work from a ticket counter, the attention backward) must give the same bits
    // whichever block comes last.
    std::vector<long> block_order((size_t)nblocks);
    for (long b = 0; b < nblocks; b++) block_order[(size_t)b] = b;
    if (block_rng)
      for (long i = nblocks - 1; i > 0; i--)
        std::swap(block_order[(size_t)i], block_order[xorshift(&block_rng) % (uint64_t)(i + 1)]);
    for (long b : block_order) {
      ex.block_linear = b;
      ex.block_idx = uint3{(unsigned)(b % cfg.grid.x), (unsigned)(b / cfg.grid.x % cfg.grid.y),
                           (unsigned)(b / ((long)cfg.grid.x * cfg.grid.y))};
      // Shared memory holds garbage when a block starts: fill it so a stale value never looks right.
      memset(ex.dyn_smem, 0xA5, ex.dyn_bytes);
      run_block();
    }
    ex.params = nullptr, ex.params_bytes = 0;
    destroy(params);
  });
}

// ---- device-side entry points --------------------------------------------------------------

static void need_device(const char* what) {
  if (!g_cur) fatal("api", "%s called from host code", what);
}

static void warp_arrive(unsigned mask, const void* mine, void* all, size_t bytes, const char* op, const char* file,
                        int line);

}  // namespace cudasim

using namespace cudasim;

extern "C" uint3 cudasim_thread_idx(void) {
  need_device("threadIdx");
  return g_cur->idx;
}
extern "C" uint3 cudasim_block_idx(void) {
  need_device("blockIdx");
  return ex.block_idx;
}
extern "C" dim3 cudasim_block_dim(void) { return ex.block; }
extern "C" dim3 cudasim_grid_dim(void) { return ex.grid; }
extern "C" int cudasim_lane(void) { return g_cur ? g_cur->lane : -1; }
extern "C" unsigned char* cudasim_dynamic_smem(void) {
  need_device("dynamic shared memory");
  return ex.dyn_smem;
}

extern "C" void cudasim_syncthreads(const char* file, int line) {
  need_device("__syncthreads");
  SimThread* t = g_cur;
  t->state = AT_BARRIER;
  t->wait_file = file, t->wait_line = line;
  yield_thread();
  t->wait_file = nullptr;
}

extern "C" void cudasim_syncwarp(unsigned int mask, const char* file, int line) {
  need_device("__syncwarp");
  warp_arrive(mask, nullptr, nullptr, 0, "__syncwarp", file, line);
}

extern "C" void cudasim_warp_exchange(unsigned int mask, const void* mine, void* all, size_t bytes, const char* op,
                                      const char* file, int line) {
  need_device(op);
  warp_arrive(mask, mine, all, bytes, op, file, line);
}

// atomicAdd (cuda_runtime.h): the access is checked as the kernel's, and it both acquires and
// releases its word (order.h); on the host it is plain host code.
template <class T>
static T atomic_add(T* p, T v, const void* pc) {
  if (g_cur) {
    hb_sync_access = 1;
    device_access(p, sizeof(T), 0, pc);
    device_access(p, sizeof(T), 1, pc);
    hb_sync_access = 0;
    hb_acquire(p);
    hb_release(p, 0);
  }
  T old = *p;
  *p = old + v;
  return old;
}
extern "C" unsigned int cudasim_atomic_add_u32(unsigned int* p, unsigned int v, const void* pc) {
  return atomic_add(p, v, pc);
}
extern "C" unsigned long long cudasim_atomic_add_u64(unsigned long long* p, unsigned long long v, const void* pc) {
  return atomic_add(p, v, pc);
}

extern "C" void cudasim_nanosleep(unsigned int ns) {
  (void)ns;
  // Let the other threads run, as a sleeping warp would.
  if (g_cur) yield_thread();
}

extern "C" unsigned long long cudasim_globaltimer(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

namespace cudasim {

// A warp collective: the lanes of mask meet. The last to arrive releases the others; each
// then copies every lane's contribution out of the generation's buffer.
static void warp_arrive(unsigned mask, const void* mine, void* all, size_t bytes, const char* op, const char* file,
                        int line) {
  SimThread* t = g_cur;
  SimWarp* w = &ex.warps[t->warp];
  char who[256];
  if (bytes > sizeof w->buf[0][0]) fatal("internal", "warp collective %s of %zu bytes", op, bytes);
  if (!(mask >> t->lane & 1u)) {
    describe_thread(who, sizeof who);
    report("divergence", "%s at %s:%d: %s calls it with mask 0x%08x, which does not include its own lane %d", op, file,
           line, who, mask, t->lane);
  }
  int lanes_here = ex.nthreads - t->warp * 32 < 32 ? ex.nthreads - t->warp * 32 : 32;
  unsigned existing = lanes_here == 32 ? 0xffffffffu : (1u << lanes_here) - 1;
  if (mask & ~existing) {
    describe_thread(who, sizeof who);
    report("divergence", "%s at %s:%d: %s names lanes 0x%08x that do not exist (the warp has %d threads)", op, file,
           line, who, mask & ~existing, lanes_here);
    mask &= existing;
  }
  for (int l = 0; l < 32; l++) {
    if (!(mask >> l & 1u)) continue;
    SimThread* o = &ex.threads[t->warp * 32 + l];
    if (o->state == DONE) {
      describe_thread(who, sizeof who);
      report("divergence", "%s at %s:%d (%s) waits for lane %d of its warp, which has exited", op, file, line, who, l);
    }
  }
  if (w->arrived == 0) {
    w->mask = mask, w->op = op, w->bytes = bytes, w->file = file, w->line = line;
  } else if (w->mask != mask || strcmp(w->op, op) != 0 || w->bytes != bytes) {
    describe_thread(who, sizeof who);
    report("divergence", "warp collectives differ within a warp: %s reaches %s (mask 0x%08x) at %s:%d while other "
           "lanes wait at %s (mask 0x%08x) at %s:%d", who, op, mask, file, line, w->op, w->mask, w->file, w->line);
  }
  uint64_t gen = w->gen;
  if (bytes) memcpy(w->buf[gen & 1][t->lane], mine, bytes);
  w->arrived |= 1u << t->lane;
  if ((w->arrived & w->mask) == w->mask) {
    w->gen++;
    w->arrived = 0;
    if (!strcmp(op, "__syncwarp")) w->sync_epoch++;
    for (int l = 0; l < 32; l++)
      if (mask >> l & 1u) {
        SimThread* o = &ex.threads[t->warp * 32 + l];
        if (o != t && o->state == AT_WARP) o->state = RUNNABLE;
      }
  } else {
    t->state = AT_WARP;
    t->wait_file = file, t->wait_line = line, t->wait_gen = gen;
    yield_thread();
    t->wait_file = nullptr;
  }
  if (bytes && all)
    for (int l = 0; l < 32; l++)
      if (mask >> l & 1u) memcpy((unsigned char*)all + l * bytes, w->buf[gen & 1][l], bytes);
}

// ---- cp.async (PTX 9.7.9.25-27): copies land at the wait that covers their group ----------

static void land_copies(SimThread* t, int upto_group) {
  size_t keep = 0;
  SimThread* saved = g_cur;
  g_cur = t;
  for (size_t i = 0; i < t->copies.size(); i++) {
    PendingCopy& c = t->copies[i];
    if (c.group < upto_group) {
      device_access(c.dst, (size_t)c.bytes, 1, nullptr);  // the write happens now, by this thread
      memcpy(c.dst, c.data, (size_t)c.bytes);
    } else {
      t->copies[keep++] = c;
    }
  }
  t->copies.resize(keep);
  g_cur = saved;
}

}  // namespace cudasim

// cp.async of n = 16 (.cg) or 4 (.ca) bytes: both addresses n-byte aligned.
extern "C" void cudasim_cp_async(void* dst, const void* src, int n, const char* file, int line) {
  need_device("cp.async");
  char who[256], wd[256];
  if (((uintptr_t)dst | (uintptr_t)src) & (uintptr_t)(n - 1)) {
    describe_thread(who, sizeof who);
    report("misaligned", "cp.async %d at %s:%d: %s gives destination %p and source %p; both must be %d-byte "
           "aligned", n, file, line, who, dst, src, n);
  }
  if (!is_shared(dst, (size_t)n)) {
    describe_thread(who, sizeof who);
    describe_address(dst, wd, sizeof wd);
    report("memcheck", "cp.async at %s:%d: %s: destination %s is not shared memory", file, line, who, wd);
  }
  if (is_shared(src, (size_t)n) || !find_allocation(src)) {
    describe_thread(who, sizeof who);
    describe_address(src, wd, sizeof wd);
    report("memcheck", "cp.async at %s:%d: %s: source %s is not global memory", file, line, who, wd);
  }
  device_access(src, (size_t)n, 0, __builtin_return_address(0));
  PendingCopy c;
  c.dst = (unsigned char*)dst;
  c.bytes = n;
  memcpy(c.data, src, (size_t)n);
  c.group = g_cur->open_group;
  g_cur->copies.push_back(c);
}

extern "C" void cudasim_cp_async_commit(void) {
  need_device("cp.async.commit_group");
  g_cur->open_group++;
}

extern "C" void cudasim_cp_async_wait(int n) {
  need_device("cp.async.wait_group");
  // Groups 0 .. open_group-1 are committed; all but the newest n of them must be complete.
  land_copies(g_cur, g_cur->open_group - n);
}
