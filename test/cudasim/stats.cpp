// stats.cpp: the per-step counts of a simulated run, the GPU performance facts measurable
// without a GPU. Inside each optimizer step's NVTX range ("step N", which kernels/cuda/device.c
// pushes in device_step_begin and pops in device_step_end, as a profiler sees it), it counts
// kernel launches (the project's own kernels), library calls that launch kernels of their own
// (cuBLASLt products, cub sorts), host-blocking calls (synchronizations), device allocations and frees (the design says none inside the step loop),
// bytes all-gathered and reduce-scattered (per rank), and the longest dependency chain of
// operations each stream ran (stream.cpp). At exit, rank 0 prints a table with one row per
// optimizer step; with CUDASIM_LAUNCHES=1 also the last step's launches and library calls by
// name, and its host-blocking calls by call.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "test/cudasim/device_queue.h"
#include "test/cudasim/sim.h"

namespace cudasim {

static std::atomic<long> launches{0}, library_calls{0}, syncs{0}, allocs{0}, frees{0};
static std::atomic<long long> ag_bytes{0}, rs_bytes{0}, other_bytes{0};
// Per name, inside the open step (CUDASIM_LAUNCHES=1): kernels and library calls, host syncs.
static std::mutex names_mu;
static std::map<std::string, long> step_names, last_step_names;
static int stepping = 0;

static int names_wanted() {
  static int v = -1;
  if (v < 0) {
    const char* e = getenv("CUDASIM_LAUNCHES");
    v = e && !strcmp(e, "1");
  }
  return v;
}

static void count_name(const char* prefix, const char* name) {
  if (!stepping || !names_wanted()) return;
  std::lock_guard<std::mutex> lock(names_mu);
  step_names[std::string(prefix) + name]++;
}

void count_launch(const char* kernel) {
  launches++;
  count_name("kernel ", kernel);
}
void count_library_call(const char* call) {
  library_calls++;
  count_name("library ", call);
}
void count_sync(const char* call) {
  syncs++;
  count_name("sync ", call);
}
void count_allocation(int sign) {
  if (sign > 0) allocs++;
  else frees++;
}
void count_collective(const char* kind, size_t bytes) {
  if (kind[0] == 'A' && kind[3] == 'G') ag_bytes += (long long)bytes;
  else if (kind[0] == 'R') rs_bytes += (long long)bytes;
  else other_bytes += (long long)bytes;
}

struct StepRow {
  int step;
  long launches, library_calls, syncs, allocs, frees;
  long long ag, rs, other;
  long chains[8];
  int nchains;
};
static std::vector<StepRow> rows;
static StepRow open_row;

static void print_table() {
  // The launcher's rank (mpirun, Slurm, torchrun), as infra/launch.c reads it.
  const char* r = getenv("OMPI_COMM_WORLD_RANK");
  if (!r) r = getenv("PMI_RANK");
  if (!r) r = getenv("SLURM_PROCID");
  if (!r) r = getenv("RANK");
  if (r && atoi(r) != 0) return;
  if (rows.empty()) return;
  fprintf(stdout, "\ncudasim: per optimizer step on rank 0 (device work between its first all-gather and the end "
          "of AdamW)\n");
  fprintf(stdout, "  step  launches  library  syncs  allocs  frees  all-gathered  reduce-scattered  other coll.  "
          "longest chain per stream (compute, all-gather, reduce-scatter, ...)\n");
  for (const StepRow& x : rows) {
    fprintf(stdout, "  %4d  %8ld  %7ld  %5ld  %6ld  %5ld  %10lld B  %14lld B  %9lld B ", x.step, x.launches,
            x.library_calls, x.syncs, x.allocs, x.frees, x.ag, x.rs, x.other);
    for (int i = 0; i < x.nchains; i++) fprintf(stdout, " %ld", x.chains[i]);
    fprintf(stdout, "\n");
  }
  if (names_wanted() && !last_step_names.empty()) {
    fprintf(stdout, "cudasim: step %d on rank 0 by name (CUDASIM_LAUNCHES=1)\n", rows.back().step);
    for (const auto& kv : last_step_names) fprintf(stdout, "  %6ld  %s\n", kv.second, kv.first.c_str());
  }
  fflush(stdout);
}

}  // namespace cudasim

using namespace cudasim;

// The step's counts open and close with its NVTX range; other ranges only nest.
static void step_span(int step, int begin) {
  static int registered = 0;
  if (!registered) {
    atexit(print_table);
    registered = 1;
  }
  if (begin) {
    device_synchronize_all();
    reset_chains();
    open_row = StepRow{step, launches, library_calls, syncs, allocs, frees, ag_bytes, rs_bytes, other_bytes, {0}, 0};
    std::lock_guard<std::mutex> lock(names_mu);
    step_names.clear();
    stepping = 1;
    return;
  }
  device_synchronize_all();
  {
    std::lock_guard<std::mutex> lock(names_mu);
    last_step_names.swap(step_names);
    stepping = 0;
  }
  StepRow x = open_row;
  x.launches = launches - x.launches, x.library_calls = library_calls - x.library_calls, x.syncs = syncs - x.syncs;
  x.allocs = allocs - x.allocs, x.frees = frees - x.frees;
  x.ag = ag_bytes - x.ag, x.rs = rs_bytes - x.rs, x.other = other_bytes - x.other;
  chain_lengths(x.chains, 8, &x.nchains);
  rows.push_back(x);
}

// NVTX's push/pop ranges (the subset the project uses): the open ranges' step numbers, -1 for a
// range that is not a step.
static std::vector<int> open_ranges;

extern "C" int nvtxRangePushA(const char* message) {
  int step = -1;
  char tail;
  if (message && sscanf(message, "step %d%c", &step, &tail) != 1) step = -1;
  open_ranges.push_back(step);
  if (step >= 0) step_span(step, 1);
  return (int)open_ranges.size() - 1;
}

extern "C" int nvtxRangePop(void) {
  if (open_ranges.empty()) {
    fprintf(stderr, "cudasim: nvtxRangePop without an open range\n");
    abort();
  }
  int step = open_ranges.back();
  open_ranges.pop_back();
  if (step >= 0) step_span(step, 0);
  return (int)open_ranges.size();
}
