// hostcheck.cpp: the host's own reads and writes of pinned memory, against the copies still
// pending on it. An asynchronous copy to or from a cudaMallocHost block may run at any time until
// the host synchronizes with it (its stream, an event recorded after it, the device): a host
// that reads a block a device-to-host copy is still filling, or writes one a host-to-device copy
// is still reading, races the copy engine. Host code is not instrumented, so the pages do the
// watching: while a copy that writes a range is pending, its pages are inaccessible to the host;
// while one that reads it is pending, read-only. A host access then faults, and the handler
// reports it (kind "hostcheck") naming the block, the byte, the copy and its stream.
//
// The device thread runs the copies through a second mapping of the same memory that is never
// protected (pinned blocks are memfd-backed, mapped twice), so only the host's accesses fault.
// Protection covers the whole pages inside a copy's range: bytes sharing a page with other data
// are not watched, so nothing is reported that is not a race. A copy stops being pending when
// the host's clock (stream.cpp: what the host has seen complete) reaches its number on its
// stream.
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <vector>

#include "test/cudasim/order.h"
#include "test/cudasim/sim.h"

namespace cudasim {

struct View {
  uintptr_t host, device;
  size_t len;  // mapped bytes (whole pages)
};
struct Pending {
  uintptr_t lo, hi;  // the whole pages inside the copy's range, host addresses
  int stream;
  uint32_t seq;
  int device_writes;  // the copy writes the range (device to host): the host may not even read it
  const char* what;
  uint64_t serial;    // the block, for messages
  uintptr_t base;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static std::vector<View> views;
static std::vector<Pending> pending;
static size_t page_size;

static const View* view_of(uintptr_t a) {
  for (const View& v : views)
    if (a >= v.host && a < v.host + v.len) return &v;
  return nullptr;
}

// Sets every watched page's protection from the pending copies: none for a pending write, read
// for a pending read, read-write once nothing is pending on it (the lock is held).
static void protect(uintptr_t lo, uintptr_t hi) {
  if (lo < hi) mprotect((void*)lo, hi - lo, PROT_READ | PROT_WRITE);
  for (int pass = 0; pass < 2; pass++)  // reads first, so a pending write wins
    for (const Pending& p : pending)
      if (p.device_writes == pass && p.hi > lo && p.lo < hi) {
        uintptr_t a = p.lo > lo ? p.lo : lo, b = p.hi < hi ? p.hi : hi;
        mprotect((void*)a, b - a, pass ? PROT_NONE : PROT_READ);
      }
}

static void on_fault(int sig, siginfo_t* si, void* ctx) {
  uintptr_t a = (uintptr_t)si->si_addr;
  const Pending* hit = nullptr;
  for (const Pending& p : pending)  // no lock: the host thread holding it may be the one faulting
    if (a >= p.lo && a < p.hi) hit = &p;
  if (!hit) {  // not ours: the default action (a real segmentation fault)
    signal(sig, SIG_DFL);
    return;
  }
  const char* access = "accessed";
#if defined(__x86_64__)
  access = ((ucontext_t*)ctx)->uc_mcontext.gregs[REG_ERR] & 2 ? "wrote" : "read";
#else
  (void)ctx;
#endif
  report("hostcheck", "the host %s pinned host block #%llu at byte %zu while %s on stream %d, which %s it, may "
         "still be running: synchronize with it first (its stream, an event recorded after it, or the device)",
         access, (unsigned long long)hit->serial, (size_t)(a - hit->base), hit->what, hit->stream,
         hit->device_writes ? "writes" : "reads");
  // CUDASIM_KEEP_GOING: stop watching those pages, so the access can complete.
  uintptr_t lo = hit->lo, hi = hit->hi;
  for (size_t i = 0; i < pending.size(); i++)
    if (pending[i].hi > lo && pending[i].lo < hi) pending.erase(pending.begin() + i--);
  mprotect((void*)lo, hi - lo, PROT_READ | PROT_WRITE);
}

void* pinned_map(size_t bytes) {
  pthread_mutex_lock(&mu);
  if (!page_size) {
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa = {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
  }
  size_t len = (bytes + page_size - 1) / page_size * page_size;
  if (!len) len = page_size;
  void* host = MAP_FAILED;
  void* device = MAP_FAILED;
  int fd = memfd_create("cudasim-pinned", 0);
  if (fd >= 0 && ftruncate(fd, (off_t)len) == 0) {
    host = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    device = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (fd >= 0) close(fd);
  if (host == MAP_FAILED || device == MAP_FAILED) {
    // No second mapping (no memfd here): one anonymous mapping, not watched.
    if (host != MAP_FAILED) munmap(host, len);
    if (device != MAP_FAILED) munmap(device, len);
    host = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_mutex_unlock(&mu);
    if (host == MAP_FAILED) return nullptr;
    static int warned = 0;
    if (!warned++) fprintf(stderr, "cudasim: note: pinned memory cannot be mapped twice here (memfd_create); hostcheck is off\n");
    return host;
  }
  views.push_back(View{(uintptr_t)host, (uintptr_t)device, len});
  pthread_mutex_unlock(&mu);
  return host;
}

void pinned_unmap(void* host, size_t bytes) {
  pthread_mutex_lock(&mu);
  int found = 0;
  for (size_t i = 0; i < views.size() && !found; i++)
    if (views[i].host == (uintptr_t)host) {
      uintptr_t lo = views[i].host, hi = lo + views[i].len;
      for (size_t k = 0; k < pending.size(); k++)
        if (pending[k].lo >= lo && pending[k].hi <= hi) pending.erase(pending.begin() + k--);
      munmap((void*)views[i].host, views[i].len);
      munmap((void*)views[i].device, views[i].len);
      views.erase(views.begin() + i);
      found = 1;
    }
  if (!found) munmap(host, bytes ? (bytes + page_size - 1) / page_size * page_size : page_size);  // the fallback
  pthread_mutex_unlock(&mu);
}

void* pinned_device_view(const void* p) {
  pthread_mutex_lock(&mu);
  const View* v = view_of((uintptr_t)p);
  void* r = v ? (void*)((uintptr_t)p - v->host + v->device) : (void*)p;
  pthread_mutex_unlock(&mu);
  return r;
}

void hostcheck_copy(const void* p, size_t bytes, int device_writes, int stream, uint32_t seq, const char* what) {
  const Allocation* al = find_pinned(p);
  if (!al || !seq || stream >= kClockStreams) return;
  pthread_mutex_lock(&mu);
  if (!view_of((uintptr_t)p)) {  // not mapped twice (the fallback): the device thread uses these pages too
    pthread_mutex_unlock(&mu);
    return;
  }
  uintptr_t lo = ((uintptr_t)p + page_size - 1) / page_size * page_size;
  uintptr_t hi = ((uintptr_t)p + bytes) / page_size * page_size;
  if (lo < hi) {
    pending.push_back(Pending{lo, hi, stream, seq, device_writes, what, al->serial, al->base});
    protect(lo, hi);
  }
  pthread_mutex_unlock(&mu);
}

void hostcheck_synced(const Clock& host) {
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < pending.size(); i++) {
    const Pending& p = pending[i];
    if (host.t[p.stream] < p.seq) continue;
    uintptr_t lo = p.lo, hi = p.hi;
    pending.erase(pending.begin() + i--);
    protect(lo, hi);
  }
  pthread_mutex_unlock(&mu);
}

}  // namespace cudasim
