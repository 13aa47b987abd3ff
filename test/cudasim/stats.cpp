// stats.cpp: the per-step counters of a simulated run: kernel launches, host-blocking calls,
// device allocations and frees, bytes all-gathered and reduce-scattered.
#include <atomic>

#include "test/cudasim/sim.h"

namespace cudasim {

static std::atomic<long> launches{0}, syncs{0}, allocs{0}, frees{0};
static std::atomic<long long> ag_bytes{0}, rs_bytes{0}, other_bytes{0};

void count_launch() { launches++; }
void count_sync(const char*) { syncs++; }
void count_allocation(int sign) {
  if (sign > 0) allocs++;
  else frees++;
}
void count_collective(const char* kind, size_t bytes) {
  if (kind[0] == 'A' && kind[3] == 'G') ag_bytes += (long long)bytes;
  else if (kind[0] == 'R') rs_bytes += (long long)bytes;
  else other_bytes += (long long)bytes;
}

}  // namespace cudasim
