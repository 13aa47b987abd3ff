// trace.c: the Chrome-trace timeline (see trace.h).
#include "fsdp/trace.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fsdp/dist.h"

double trace_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

Trace* trace_open(const char* path, int rank, int world, const char* const* unit_names) {
  char name[4096];
  if (world > 1) snprintf(name, sizeof name, "%s.rank%d", path, rank);
  else snprintf(name, sizeof name, "%s", path);
  Trace* t = xcalloc(1, sizeof(Trace), "trace");
  t->f = fopen(name, "w");
  if (!t->f) fatal("--trace: cannot open '%s' for writing", name);
  t->rank = rank;
  t->first = 1;
  t->origin = trace_now();
  t->cap = 4096;
  t->spans = xcalloc(t->cap, sizeof(TraceSpan), "trace spans");
  t->unit_names = unit_names;
  static const char* tracks[] = {"compute", "all-gather", "reduce-scatter"};
  fprintf(t->f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  fprintf(t->f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}", rank, rank);
  for (int i = 0; i < 3; i++)
    fprintf(t->f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
            rank, i, tracks[i]);
  t->first = 0;
  return t;
}

void trace_span(Trace* t, const char* what, int unit, TraceTrack track, double t0, double t1) {
  if (!t) return;
  if (t->n == t->cap) trace_flush(t);  // never drops a span; flushing early only costs time
  t->spans[t->n++] = (TraceSpan){what, unit, track, t0, t1};
}

void trace_flush(Trace* t) {
  if (!t) return;
  for (int i = 0; i < t->n; i++) {
    const TraceSpan* s = &t->spans[i];
    fprintf(t->f, ",\n{\"name\": \"%s%s%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                  "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"unit\": %d}}",
            s->what, s->unit >= 0 ? " " : "", s->unit >= 0 ? t->unit_names[s->unit] : "", s->what, t->rank,
            (int)s->track, (s->t0 - t->origin) * 1e6, (s->t1 - s->t0) * 1e6, s->unit);
  }
  t->n = 0;
  fflush(t->f);
}

void trace_close(Trace* t) {
  if (!t) return;
  trace_flush(t);
  fprintf(t->f, "\n]}\n");
  fclose(t->f);
  free(t->spans);
  free(t);
}
