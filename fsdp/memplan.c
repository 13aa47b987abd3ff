// memplan.c: the region table and the single allocation (see memplan.h).
#include "fsdp/memplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "infra/dist.h"

static void add(MemPlan* p, const char* group, const char* name, size_t bytes, void** target, int host) {
  if (p->n == MEMPLAN_MAX_REGIONS) fatal("memory plan: more than %d regions", MEMPLAN_MAX_REGIONS);
  MemRegion* r = &p->r[p->n++];
  snprintf(r->name, sizeof r->name, "%s", name);
  snprintf(r->group, sizeof r->group, "%s", group);
  r->bytes = bytes;
  size_t* total = host ? &p->host_total : &p->total;
  r->offset = (*total + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
  r->target = target;
  r->host = host;
  *total = r->offset + bytes;
}

void memplan_add(MemPlan* p, const char* group, const char* name, size_t bytes, void** target) {
  add(p, group, name, bytes, target, 0);
}

void memplan_add_array(MemPlan* p, const char* group, const char* name, size_t n, size_t size, void** target) {
  add(p, group, name, n * size, target, 0);
}

void memplan_add_host(MemPlan* p, const char* group, const char* name, size_t bytes, void** target) {
  add(p, group, name, bytes, target, 1);
}

void memplan_view(MemPlan* p, void** base, size_t offset, void** target) {
  if (p->nviews == p->views_cap) {
    p->views_cap = p->views_cap ? 2 * p->views_cap : 64;
    p->views = realloc(p->views, (size_t)p->views_cap * sizeof(MemView));
    if (!p->views) fatal("memory plan: out of host memory for %d views", p->views_cap);
  }
  p->views[p->nviews++] = (MemView){base, offset, target};
}

void memplan_allocate(MemPlan* p) {
  p->base = device_alloc_zeroed(p->total, "the memory plan");
  if (p->host_total) p->host_base = device_host_alloc_zeroed(p->host_total, "the memory plan's pinned host part");
  for (int i = 0; i < p->n; i++)
    if (p->r[i].target)
      *p->r[i].target = p->r[i].bytes ? (char*)(p->r[i].host ? p->host_base : p->base) + p->r[i].offset : NULL;
  for (int i = 0; i < p->nviews; i++) {
    const MemView* v = &p->views[i];
    *v->target = *v->base ? (char*)*v->base + v->offset : NULL;
  }
}

void memplan_free(MemPlan* p) {
  device_free(p->base);
  if (p->host_base) device_host_free(p->host_base);
  p->base = p->host_base = NULL;
  free(p->views);
  p->views = NULL;
  p->nviews = p->views_cap = 0;
}

static size_t group_bytes(const MemPlan* p, const char* group, int host) {
  size_t s = 0;
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->r[i].group, group) && p->r[i].host == host) s += p->r[i].bytes;
  return s;
}

size_t memplan_group_bytes(const MemPlan* p, const char* group) { return group_bytes(p, group, 0); }

static void print_bytes(size_t b) {
  if (b >= ((size_t)1 << 30)) log0("%10.2f GiB", b / 1073741824.0);
  else log0("%10.2f MiB", b / 1048576.0);
}

static void print_part(const MemPlan* p, int host) {
  static const char* groups[] = {"shards", "optimizer", "slots", "secondary", "grad buffers", "activations", "workspace"};
  for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
    size_t gb = group_bytes(p, groups[g], host);
    if (!gb) continue;
    log0("  %-14s", groups[g]);
    print_bytes(gb);
    log0("\n");
    for (int i = 0; i < p->n; i++) {
      if (strcmp(p->r[i].group, groups[g]) || !p->r[i].bytes || p->r[i].host != host) continue;
      log0("    %-28s", p->r[i].name);
      print_bytes(p->r[i].bytes);
      log0("\n");
    }
  }
  log0("  %-14s", "total");
  print_bytes(host ? p->host_total : p->total);
  log0("\n");
}

void memplan_print(const MemPlan* p) {
  log0("memory plan (per rank, one allocation of %zu bytes):\n", p->total);
  print_part(p, 0);
  if (!p->host_total) return;
  log0("pinned host memory (per rank, one allocation of %zu bytes: the step's own buffers, and what --offload "
       "moves):\n", p->host_total);
  print_part(p, 1);
}
