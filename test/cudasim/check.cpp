// check.cpp: the memory checkers. The kernel files are compiled with GCC's thread-sanitizer
// instrumentation (-fsanitize=thread, without its runtime library), which turns every load and
// store that may be visible to another thread (globals, shared memory, anything through a
// pointer) into a call __tsan_{read,write}{1,2,4,8,16}(addr) before it happens. This file
// implements those calls, so every such access of device code is seen with its address and
// size (the simulator's own files are not instrumented):
//   memcheck    the address must be the thread's own stack (local memory), shared memory of
//               the block (static, or the launch's dynamic bytes), a live device allocation, or
//               (reads only) the launch's parameters; anything else is reported, as is host
//               code touching device memory.
//   misaligned  a 2-, 4-, 8- or 16-byte access must be naturally aligned, as on a GPU.
//   racecheck   shared memory: two threads touch the same byte, at least one writing, with no
//               __syncthreads between them (or __syncwarp, for two lanes of one warp).
//   initcheck   shared memory read before any thread of the block wrote it.
// Shared-memory shadow state lives beside each byte and is valid only for the block that
// wrote it (block_serial), so a new block starts clean without clearing anything.
#include <stdlib.h>
#include <string.h>

#include "test/cudasim/exec.h"
#include "test/cudasim/order.h"
#include "test/cudasim/sim.h"

extern "C" {
// The static __shared__ variables of every kernel (cuda_runtime.h puts them in this section).
extern unsigned char __start_cudasim_shared[] __attribute__((weak));
extern unsigned char __stop_cudasim_shared[] __attribute__((weak));
}

namespace cudasim {

// What the last write and the last reads of one shared byte were.
struct Shadow {
  uint32_t block_serial;  // the block these fields belong to (else: never touched)
  uint32_t w_bar, w_wsync, r_bar, r_wsync;
  int16_t w_tid, r_tid;  // -1: none
  uint8_t r_multi;       // more than one unordered reader since the last ordering point
  uint8_t r_one_warp;    // ... all of them in one warp
  const void* w_pc;
  const void* r_pc;
};

static Shadow* shadow_static = nullptr;
static Shadow* shadow_dyn = nullptr;
static uint32_t serial = 0;

static size_t static_bytes() {
  return __start_cudasim_shared ? (size_t)(__stop_cudasim_shared - __start_cudasim_shared) : 0;
}

void shadow_new_block() {
  if (!shadow_dyn) {
    shadow_dyn = (Shadow*)calloc(kSharedPerBlockOptin, sizeof(Shadow));
    shadow_static = (Shadow*)calloc(static_bytes() + 1, sizeof(Shadow));
    if (!shadow_dyn || !shadow_static) fatal("internal", "no memory for the shared-memory shadow");
  }
  ex.block_serial = ++serial;
}

static int in_static(uintptr_t a, size_t n) {
  return __start_cudasim_shared && a >= (uintptr_t)__start_cudasim_shared && a + n <= (uintptr_t)__stop_cudasim_shared;
}

int is_shared(const void* p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  if (in_static(a, n)) return 1;
  return a >= (uintptr_t)ex.dyn_smem && a + n <= (uintptr_t)ex.dyn_smem + ex.dyn_bytes;
}

// Whether an earlier access (tid, barrier epoch, warp sync epoch) is ordered before one by the
// running thread: same thread, a __syncthreads since, or a __syncwarp since within one warp.
static int ordered(int tid, uint32_t bar, uint32_t wsync) {
  const SimThread* t = g_cur;
  if (tid == t->linear || bar != ex.barrier_epoch) return 1;
  return (tid >> 5) == t->warp && wsync != ex.warps[t->warp].sync_epoch;
}

static void where_in_shared(const void* p, char* out, size_t n) {
  uintptr_t a = (uintptr_t)p;
  if (in_static(a, 1))
    snprintf(out, n, "static shared memory %p", p);
  else
    snprintf(out, n, "dynamic shared memory byte %zu (of %zu)", (size_t)(a - (uintptr_t)ex.dyn_smem), ex.dyn_bytes);
}

static void race(const char* kind, const void* p, int other, const void* other_pc, const void* pc) {
  char who[256], loc[160], here[512], there[512];
  describe_thread(who, sizeof who);
  where_in_shared(p, loc, sizeof loc);
  describe_pc(pc, here, sizeof here);
  describe_pc(other_pc, there, sizeof there);
  const SimThread* o = &ex.threads[other];
  report("racecheck", "%s hazard on %s: %s at %s, and thread (%u,%u,%u) at %s, with no __syncthreads%s between them",
         kind, loc, who, here, o->idx.x, o->idx.y, o->idx.z, there,
         (other >> 5) == g_cur->warp ? " or __syncwarp" : "");
}

static void shared_access(Shadow* sh, const unsigned char* p, size_t n, int is_write, const void* pc) {
  const SimThread* t = g_cur;
  const int me = t->linear;
  for (size_t i = 0; i < n; i++) {
    Shadow* s = &sh[i];
    if (s->block_serial != ex.block_serial) {
      memset(s, 0, sizeof *s);
      s->block_serial = ex.block_serial;
      s->w_tid = s->r_tid = -1;
    }
    if (!is_write) {
      if (s->w_tid < 0) {
        char who[256], loc[160], here[512];
        describe_thread(who, sizeof who);
        where_in_shared(p + i, loc, sizeof loc);
        describe_pc(pc, here, sizeof here);
        report("initcheck", "%s reads %s at %s before any thread of the block wrote it", who, loc, here);
        s->w_tid = (int16_t)me;  // report a location once
      } else if (!ordered(s->w_tid, s->w_bar, s->w_wsync)) {
        race("read-after-write", p + i, s->w_tid, s->w_pc, pc);
      }
      if (s->r_tid < 0 || ordered(s->r_tid, s->r_bar, s->r_wsync)) {
        s->r_tid = (int16_t)me, s->r_multi = 0, s->r_one_warp = 1;
      } else if (s->r_tid != me) {
        if ((s->r_tid >> 5) != t->warp) s->r_one_warp = 0;
        s->r_multi = 1;
      }
      s->r_bar = ex.barrier_epoch, s->r_wsync = ex.warps[t->warp].sync_epoch, s->r_pc = pc;
    } else {
      if (s->w_tid >= 0 && !ordered(s->w_tid, s->w_bar, s->w_wsync))
        race("write-after-write", p + i, s->w_tid, s->w_pc, pc);
      if (s->r_tid >= 0 && !ordered(s->r_tid, s->r_bar, s->r_wsync))
        race("write-after-read", p + i, s->r_tid, s->r_pc, pc);
      else if (s->r_multi && s->r_bar == ex.barrier_epoch &&
               !(s->r_one_warp && (s->r_tid >> 5) == t->warp && s->r_wsync != ex.warps[t->warp].sync_epoch))
        race("write-after-read", p + i, s->r_tid, s->r_pc, pc);
      s->w_tid = (int16_t)me, s->w_bar = ex.barrier_epoch, s->w_wsync = ex.warps[t->warp].sync_epoch, s->w_pc = pc;
      s->r_tid = -1, s->r_multi = 0;
    }
  }
}

void device_access(const void* p, size_t n, int is_write, const void* pc) { device_access_sized(p, n, is_write, pc, 1); }

void device_access_sized(const void* p, size_t n, int is_write, const void* pc, int one_access) {
  const SimThread* t = g_cur;
  uintptr_t a = (uintptr_t)p;
  if (a >= (uintptr_t)t->stack_lo && a + n <= (uintptr_t)t->stack_hi) return;  // local memory
  char who[256], where[256], here[512];
  if (one_access && (n == 2 || n == 4 || n == 8 || n == 16) && (a & (n - 1))) {
    describe_thread(who, sizeof who);
    describe_pc(pc, here, sizeof here);
    report("misaligned", "%s %s %zu bytes at %p (not %zu-byte aligned) at %s", who, is_write ? "writes" : "reads", n,
           p, n, here);
  }
  if (in_static(a, n)) {
    shared_access(shadow_static + (a - (uintptr_t)__start_cudasim_shared), (const unsigned char*)p, n, is_write, pc);
    return;
  }
  uintptr_t d = (uintptr_t)ex.dyn_smem;
  if (a >= d && a < d + kSharedPerBlockOptin) {
    if (a + n > d + ex.dyn_bytes) {
      describe_thread(who, sizeof who);
      describe_pc(pc, here, sizeof here);
      report("memcheck", "%s %s %zu bytes at dynamic shared memory byte %zu, past the %zu bytes of the launch, at %s",
             who, is_write ? "writes" : "reads", n, (size_t)(a - d), ex.dyn_bytes, here);
      return;
    }
    shared_access(shadow_dyn + (a - d), (const unsigned char*)p, n, is_write, pc);
    return;
  }
  const Allocation* al = find_allocation(p);
  if (al && a + n <= al->base + al->bytes) {  // global memory
    order_access(p, n, is_write);
    return;
  }
  if (!is_write && a >= (uintptr_t)ex.params && a + n <= (uintptr_t)ex.params + ex.params_bytes) return;
  describe_thread(who, sizeof who);
  describe_address(al ? (const void*)(al->base + al->bytes) : p, where, sizeof where);
  describe_pc(pc, here, sizeof here);
  report("memcheck", "%s %s %zu bytes at %p at %s: %s%s", who, is_write ? "writes" : "reads", n, p, here,
         al ? "the access runs past the end of an allocation, " : "", where);
}

void host_access(const void* p, size_t n, int is_write, const void* pc) {
  const Allocation* al = find_allocation(p);
  if (!al) return;
  char where[256], here[512];
  describe_address(p, where, sizeof where);
  describe_pc(pc, here, sizeof here);
  report("memcheck", "host code %s %zu bytes of device memory (%s) at %s: device memory is only reachable by kernels "
         "and cudaMemcpy", is_write ? "writes" : "reads", n, where, here);
}

// one_access: a single load or store of n bytes (alignment applies), not a block copy.
static inline void access(const void* p, size_t n, int is_write, const void* pc, int one_access = 1) {
  if (g_cur)
    device_access_sized(p, n, is_write, pc, one_access);
  else
    host_access(p, n, is_write, pc);
}

}  // namespace cudasim

using cudasim::access;

// The instrumentation's entry points (GCC's -fsanitize=thread ABI: every load and store of
// the instrumented files, globals included, calls one of these first).
#define HOOKS(n)                                                                                               \
  extern "C" void __tsan_read##n(void* p) { access(p, n, 0, __builtin_return_address(0)); }                  \
  extern "C" void __tsan_write##n(void* p) { access(p, n, 1, __builtin_return_address(0)); }                 \
  extern "C" void __tsan_unaligned_read##n(void* p) { access(p, n, 0, __builtin_return_address(0)); }        \
  extern "C" void __tsan_unaligned_write##n(void* p) { access(p, n, 1, __builtin_return_address(0)); }       \
  extern "C" void __tsan_volatile_read##n(void* p) { access(p, n, 0, __builtin_return_address(0)); }         \
  extern "C" void __tsan_volatile_write##n(void* p) { access(p, n, 1, __builtin_return_address(0)); }
HOOKS(1)
HOOKS(2)
HOOKS(4)
HOOKS(8)
HOOKS(16)
extern "C" void __tsan_read_range(void* p, size_t n) { access(p, n, 0, __builtin_return_address(0), 0); }
extern "C" void __tsan_write_range(void* p, size_t n) { access(p, n, 1, __builtin_return_address(0), 0); }
extern "C" void __tsan_init(void) {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit(void) {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}
