// memplan.c: the region table and the single allocation (see memplan.h).
#include "fsdp/memplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp/device.h"
#include "fsdp/dist.h"

void memplan_add(MemPlan* p, const char* group, const char* name, size_t bytes, void** target) {
  if (p->n == MEMPLAN_MAX_REGIONS) fatal("memory plan: more than %d regions", MEMPLAN_MAX_REGIONS);
  MemRegion* r = &p->r[p->n++];
  snprintf(r->name, sizeof r->name, "%s", name);
  snprintf(r->group, sizeof r->group, "%s", group);
  r->bytes = bytes;
  r->offset = (p->total + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
  r->target = target;
  p->total = r->offset + bytes;
}

void memplan_allocate(MemPlan* p) {
  p->base = device_alloc_zeroed(p->total, "the memory plan");
  for (int i = 0; i < p->n; i++)
    if (p->r[i].target) *p->r[i].target = p->r[i].bytes ? (char*)p->base + p->r[i].offset : NULL;
}

void memplan_free(MemPlan* p) {
  device_free(p->base);
  p->base = NULL;
}

size_t memplan_group_bytes(const MemPlan* p, const char* group) {
  size_t s = 0;
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->r[i].group, group)) s += p->r[i].bytes;
  return s;
}

static void print_bytes(size_t b) {
  if (b >= ((size_t)1 << 30)) log0("%10.2f GiB", b / 1073741824.0);
  else log0("%10.2f MiB", b / 1048576.0);
}

void memplan_print(const MemPlan* p) {
  static const char* groups[] = {"shards", "optimizer", "slots", "grad buffers", "activations", "workspace"};
  log0("memory plan (per rank, one allocation of %zu bytes):\n", p->total);
  for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
    size_t gb = memplan_group_bytes(p, groups[g]);
    if (!gb) continue;
    log0("  %-14s", groups[g]);
    print_bytes(gb);
    log0("\n");
    for (int i = 0; i < p->n; i++) {
      if (strcmp(p->r[i].group, groups[g]) || !p->r[i].bytes) continue;
      log0("    %-28s", p->r[i].name);
      print_bytes(p->r[i].bytes);
      log0("\n");
    }
  }
  log0("  %-14s", "total");
  print_bytes(p->total);
  log0("\n");
}
