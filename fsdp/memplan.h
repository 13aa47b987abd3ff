// memplan.h: one allocation, carved into named regions.
//
// Everything the runtime and the model need (shards, optimizer state, slots, gradient
// buffers, activations, workspaces) is first *planned* as a list of named regions, then
// allocated once and carved. Nothing is allocated inside the training loop: the AWS post and
// the FSDP paper (section 4) name allocator retries and fragmentation as a main bottleneck,
// and a plan that can be printed without allocating tells a user before launch whether a
// configuration fits (--plan).
#ifndef FSDP_MEMPLAN_H
#define FSDP_MEMPLAN_H
#include <stddef.h>
#include <stdint.h>

#define MEMPLAN_MAX_REGIONS 96
#define MEMPLAN_ALIGN 256  // bytes; every region starts aligned (vector loads, cuBLASLt)

typedef struct {
  char name[48];
  char group[24];   // "shards", "optimizer", "slots", "secondary" (hpz), "grad buffers", "activations",
                    // "workspace"
  size_t bytes;
  size_t offset;
  void** target;    // where the carved pointer is stored after allocation
  int host;         // in pinned host memory (the step's buffers, --offload), not device memory
} MemRegion;

// A pointer into a region, set when the plan is allocated: *target = *base + offset bytes
// (base: a region's target, or an earlier view's).
typedef struct {
  void** base;
  size_t offset;
  void** target;
} MemView;

typedef struct {
  int n;
  MemRegion r[MEMPLAN_MAX_REGIONS];
  MemView* views;     // in the order they were added
  int nviews, views_cap;
  size_t total;       // device bytes: plan_bytes_per_rank
  size_t host_total;  // pinned host bytes: plan_host_bytes_per_rank
  void* base;         // the one device allocation (NULL until memplan_allocate)
  void* host_base;    // the one pinned host allocation, when there are host regions
} MemPlan;

// Adds a region; *target receives its address when the plan is allocated.
void memplan_add(MemPlan* p, const char* group, const char* name, size_t bytes, void** target);
// The same for an array of n elements of `size` bytes (the models' activations).
void memplan_add_array(MemPlan* p, const char* group, const char* name, size_t n, size_t size, void** target);
// The same in pinned host memory (what --offload moves off the device, the step's host buffers).
void memplan_add_host(MemPlan* p, const char* group, const char* name, size_t bytes, void** target);
// A tensor inside a region: when the plan is allocated, *target = *base + offset bytes (NULL
// when *base is: an empty region). base is the target of a region, added before or after the
// view, or of an earlier view; so a model plans its regions and, in the same walk, where every
// tensor lies in them, and the allocation carves them all.
void memplan_view(MemPlan* p, void** base, size_t offset, void** target);
// Allocates the whole plan at once (host memory on the CPU backend, device memory on CUDA;
// host regions in one pinned host allocation) and fills every target, then every view's.
// Zero-fills the memory.
void memplan_allocate(MemPlan* p);
void memplan_free(MemPlan* p);
// Prints the table of regions and the per-group totals, device then pinned host (rank 0 only).
void memplan_print(const MemPlan* p);
// Device bytes of a group (host regions are not counted).
size_t memplan_group_bytes(const MemPlan* p, const char* group);
#endif
