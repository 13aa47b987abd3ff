// memory.cpp: device memory. An allocation is host memory the simulator tracks by address, so
// kernels, copies and cuBLASLt can be checked against the live allocations: an access outside
// every one of them is an error. Each allocation is followed by a 256-byte red zone that no
// other allocation can occupy, so small overruns land in no allocation and are caught. The
// device has a fixed capacity (CUDASIM_MEMORY_GIB, default 80) that cudaMemGetInfo reports.
#include <stdlib.h>
#include <string.h>

#include <map>

#include "test/cudasim/order.h"
#include "test/cudasim/sim.h"

// The program's static data (.data and .bss), from the linker: where a kernel's static
// __shared__ variable lands when g++ ignores its section (see describe_address).
extern "C" char __data_start[] __attribute__((weak));
extern "C" char _end[] __attribute__((weak));

namespace cudasim {

static const size_t kRedZone = 256;
static std::map<uintptr_t, Allocation> live;  // by base address
static std::map<uintptr_t, Allocation> pinned;  // cudaMallocHost blocks (serials of their own)
static uint64_t next_serial = 1;
static size_t used_bytes = 0;
// A per-thread cache of the last allocation found (host and device threads both look up),
// valid while no allocation was made or freed since (map_version).
static uint64_t map_version = 0;
static thread_local const Allocation* last_hit = nullptr;
static thread_local uint64_t last_hit_version = 0;

size_t device_capacity() {
  static size_t cap = 0;
  if (!cap) {
    const char* e = getenv("CUDASIM_MEMORY_GIB");
    double gib = e ? atof(e) : 80.0;
    if (!(gib > 0)) gib = 80.0;
    cap = (size_t)(gib * 1073741824.0);
  }
  return cap;
}
size_t device_used() { return used_bytes; }

const Allocation* find_allocation(const void* p) {
  uintptr_t a = (uintptr_t)p;
  if (last_hit && last_hit_version == map_version && a - last_hit->base < last_hit->bytes) return last_hit;
  auto it = live.upper_bound(a);
  if (it == live.begin()) return nullptr;
  --it;
  if (a - it->second.base < it->second.bytes) {
    last_hit_version = map_version;
    return last_hit = &it->second;
  }
  return nullptr;
}

void describe_address(const void* p, char* out, size_t n) {
  uintptr_t a = (uintptr_t)p;
  auto it = live.upper_bound(a);
  if (it != live.begin()) {
    --it;
    const Allocation& al = it->second;
    if (a - al.base < al.bytes) {
      snprintf(out, n, "%p: byte %zu of device allocation #%llu (%zu bytes)", p, (size_t)(a - al.base),
               (unsigned long long)al.serial, al.bytes);
      return;
    }
    if (a - al.base < al.bytes + kRedZone) {
      snprintf(out, n, "%p: %zu bytes past the end of device allocation #%llu (%zu bytes)", p,
               (size_t)(a - al.base - al.bytes), (unsigned long long)al.serial, al.bytes);
      return;
    }
  }
  if (is_pinned_host(p)) {
    snprintf(out, n, "%p: pinned host memory (cudaMallocHost)", p);
    return;
  }
  if (__data_start && _end && a >= (uintptr_t)__data_start && a < (uintptr_t)_end) {
    // g++ ignores the section attribute of a static local in a template (it goes to a COMDAT
    // section of its own), so a template kernel's __shared__ variable is ordinary static data.
    snprintf(out, n,
             "%p: a static variable of the program, not device memory (a __shared__ variable of a "
             "template kernel? the simulator cannot place those: test/cudasim/README.md)", p);
    return;
  }
  snprintf(out, n, "%p: in no device allocation (host memory or freed)", p);
}

void check_device_range(const void* p, size_t bytes, const char* what) {
  if (!bytes) return;
  const Allocation* a = find_allocation(p);
  if (a && (uintptr_t)p + bytes <= a->base + a->bytes) return;
  char where[256];
  describe_address(a ? (const void*)((uintptr_t)p + bytes - 1) : p, where, sizeof where);
  report("memcheck", "%s: %zu bytes at %p are not inside one live device allocation (%s%s)", what, bytes, p,
         a ? "the last byte is at " : "", where);
}

const Allocation* find_pinned(const void* p) {
  uintptr_t a = (uintptr_t)p;
  auto it = pinned.upper_bound(a);
  if (it == pinned.begin()) return nullptr;
  --it;
  return a - it->first < it->second.bytes ? &it->second : nullptr;
}

int is_pinned_host(const void* p) { return find_pinned(p) != nullptr; }

}  // namespace cudasim

using namespace cudasim;

extern "C" cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (!ptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (bytes > device_capacity() - used_bytes) return cudaErrorMemoryAllocation;
  // The device thread looks allocations up while kernels run: change the table only while it
  // is idle (cudaMalloc may synchronize on a GPU too; inside a step it is counted as a finding).
  device_synchronize_all();
  count_allocation(+1);
  size_t total = (bytes + kRedZone + 255) / 256 * 256;
  void* p = aligned_alloc(256, total);  // cudaMalloc's alignment
  if (!p) return cudaErrorMemoryAllocation;
  // New device memory holds garbage on a GPU; here a pattern that reads as NaN in bf16/fp32.
  memset(p, 0xA5, total);
  Allocation a = {(uintptr_t)p, bytes, next_serial++};
  live[a.base] = a;
  map_version++;
  used_bytes += bytes;
  *ptr = p;
  return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  device_synchronize_all();
  auto it = live.find((uintptr_t)ptr);
  if (it == live.end()) {
    char where[256];
    describe_address(ptr, where, sizeof where);
    report("memcheck", "cudaFree of %p, which is not the start of a live device allocation (%s)", ptr, where);
    return cudaErrorInvalidDevicePointer;
  }
  count_allocation(-1);
  order_forget(it->second.base);
  used_bytes -= it->second.bytes;
  live.erase(it);
  map_version++;
  free(ptr);
  return cudaSuccess;
}

extern "C" cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  if (!ptr) return cudaErrorInvalidValue;
  static uint64_t next_pinned = 1;
  // The device thread looks pinned blocks up for its copies (the stream-order checker): change
  // the table only while it is idle, as cudaMalloc does.
  device_synchronize_all();
  *ptr = pinned_map(bytes);  // two views of one memory (hostcheck.cpp)
  if (!*ptr) return cudaErrorMemoryAllocation;
  pinned[(uintptr_t)*ptr] = Allocation{(uintptr_t)*ptr, bytes ? bytes : 1, next_pinned++};
  return cudaSuccess;
}

extern "C" cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  auto it = pinned.find((uintptr_t)ptr);
  if (it == pinned.end()) {
    report("api", "cudaFreeHost of %p, which cudaMallocHost did not return", ptr);
    return cudaErrorInvalidValue;
  }
  device_synchronize_all();
  order_forget(it->first);
  size_t bytes = it->second.bytes;
  pinned.erase(it);
  pinned_unmap(ptr, bytes);
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  count_sync("cudaMemGetInfo");
  device_synchronize_all();  // a host-blocking call on a GPU too
  if (free_bytes) *free_bytes = device_capacity() - used_bytes;
  if (total_bytes) *total_bytes = device_capacity();
  return cudaSuccess;
}

extern "C" cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attr, const void* ptr) {
  if (!attr) return cudaErrorInvalidValue;
  memset(attr, 0, sizeof *attr);
  if (find_allocation(ptr)) {
    attr->type = cudaMemoryTypeDevice;
    attr->devicePointer = (void*)ptr;
  } else if (is_pinned_host(ptr)) {
    attr->type = cudaMemoryTypeHost;
    attr->hostPointer = (void*)ptr;
    attr->devicePointer = (void*)ptr;
  } else {
    attr->type = cudaMemoryTypeUnregistered;
    attr->hostPointer = (void*)ptr;
  }
  return cudaSuccess;
}

// ---- copies and memsets: stream operations ------------------------------------------------

// Whether [p, p+n) is device memory: inside a live allocation (checked), or host memory.
static int is_device(const void* p) { return find_allocation(p) != nullptr; }

static cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* call) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  int dd = is_device(dst), sd = is_device(src);
  if (kind == cudaMemcpyDefault) kind = (cudaMemcpyKind)((sd ? 2 : 0) | (dd ? 1 : 0));
  static const char* names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice"};
  int want_d = kind & 1, want_s = (kind >> 1) & 1;
  if (want_d != dd || want_s != sd) {
    char wd[256], ws[256];
    describe_address(dst, wd, sizeof wd);
    describe_address(src, ws, sizeof ws);
    report("api", "%s(cudaMemcpy%s) of %zu bytes: destination %s, source %s", call, names[kind], bytes, wd, ws);
    return cudaErrorInvalidValue;
  }
  if (dd) check_device_range(dst, bytes, call);
  if (sd) check_device_range(src, bytes, call);
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  if (!bytes) return cudaSuccess;
  cudaError_t e = check_copy(dst, src, bytes, kind, "cudaMemcpyAsync");
  if (e != cudaSuccess) return e;
  copy_op(s, "cudaMemcpyAsync", dst, src, bytes, 0);
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (!bytes) return cudaSuccess;
  cudaError_t e = check_copy(dst, src, bytes, kind, "cudaMemcpy");
  if (e != cudaSuccess) return e;
  // On the legacy default stream, and the host waits for it.
  copy_op(nullptr, "cudaMemcpy", dst, src, bytes, 1);
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t s) {
  if (!bytes) return cudaSuccess;
  check_device_range(ptr, bytes, "cudaMemsetAsync");
  stream_op(s, "cudaMemsetAsync", [=] {
    order_access(ptr, bytes, 1);
    memset(ptr, value, bytes);
  });
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (!bytes) return cudaSuccess;
  check_device_range(ptr, bytes, "cudaMemset");
  stream_op(nullptr, "cudaMemset", [=] {
    order_access(ptr, bytes, 1);
    memset(ptr, value, bytes);
  });
  return cudaSuccess;
}
