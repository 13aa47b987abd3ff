// trace.c: the Chrome-trace timeline (see trace.h).
#include "fsdp/trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "infra/dist.h"

Trace* trace_open(const char* path, int rank, int world, const char* const* unit_names) {
  char name[4096] = "";
  if (path && world > 1) snprintf(name, sizeof name, "%s.rank%d", path, rank);
  else if (path) snprintf(name, sizeof name, "%s", path);
  Trace* t = xcalloc(1, sizeof(Trace), "trace");
  t->rank = rank;
  t->first = 1;
  t->origin = -1.0;  // the first span's start, once read
  t->cap = 4096;
  t->spans = xcalloc(t->cap, sizeof(TraceSpan), "trace spans");
  t->unit_names = unit_names;
  t->unit_start = t->root_start = -1;
  if (!path) return t;
  t->f = fopen(name, "w");
  if (!t->f) fatal("--trace: cannot open '%s' for writing: %s", name, strerror(errno));
  static const char* tracks[] = {"compute", "all-gather", "reduce-scatter"};
  fprintf(t->f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  fprintf(t->f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}", rank, rank);
  for (int i = 0; i < 3; i++)
    fprintf(t->f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
            rank, i, tracks[i]);
  t->first = 0;
  return t;
}

int trace_mark(Trace* t, TraceTrack track) {
  if (!t) return -1;
  return device_mark((StreamId)track);  // tracks are numbered as the streams
}

void trace_span(Trace* t, const char* what, int unit, TraceTrack track, int m0, int m1) {
  if (!t || m0 < 0 || m1 < 0) return;
  if (t->n == t->cap) {  // more spans in one step than ever before: grow (tracing only)
    t->cap *= 2;
    t->spans = realloc(t->spans, (size_t)t->cap * sizeof(TraceSpan));
    if (!t->spans) fatal("out of host memory for --trace spans");
  }
  t->spans[t->n++] = (TraceSpan){what, unit, track, m0, m1};
}

static void close_root(Trace* t) {
  if (t->root_start < 0) return;
  trace_span(t, t->root_what, 0, TRACK_COMPUTE, t->root_start, trace_mark(t, TRACK_COMPUTE));
  t->root_start = -1;
}

void trace_point(Trace* t) {
  if (t) close_root(t);
}

void trace_compute_begin(Trace* t, int unit, const char* what) {
  if (!t) return;
  if (unit == 0) {
    close_root(t);
    t->root_start = trace_mark(t, TRACK_COMPUTE), t->root_what = what;
  } else {
    t->unit_start = trace_mark(t, TRACK_COMPUTE), t->unit_busy = 1;
  }
}

void trace_compute_end(Trace* t, int unit, const char* what) {
  if (!t) return;
  if (unit == 0) {
    close_root(t);
  } else {
    trace_span(t, what, unit, TRACK_COMPUTE, t->unit_start, trace_mark(t, TRACK_COMPUTE));
    t->unit_busy = 0;
  }
}

void trace_root_used(Trace* t, const char* what) {
  if (!t || t->unit_busy || t->root_start >= 0) return;
  t->root_start = trace_mark(t, TRACK_COMPUTE), t->root_what = what;
}

double trace_backward_seconds(Trace* t) {
  if (!t) return 0.0;
  device_synchronize();
  double total = 0.0, forward_end = 0.0, backward_end = -1.0;
  for (int i = 0; i < t->n; i++) {
    const TraceSpan* s = &t->spans[i];
    if (s->track != TRACK_COMPUTE) continue;
    int forward = !strcmp(s->what, "forward"), backward = !strcmp(s->what, "backward");
    if (forward && backward_end >= 0) total += backward_end - forward_end, backward_end = -1.0;  // the next micro-step
    if (forward) forward_end = device_mark_seconds(s->m1);
    if (backward) backward_end = device_mark_seconds(s->m1);
  }
  if (backward_end >= 0) total += backward_end - forward_end;
  return total;
}

void trace_flush(Trace* t) {
  if (!t) return;
  device_synchronize();
  if (!t->f) {  // kept in memory only
    t->n = 0;
    device_marks_release();
    return;
  }
  if (t->origin < 0 && t->n > 0) {  // time 0: the earliest start of the first flush
    double first = device_mark_seconds(t->spans[0].m0);
    for (int j = 1; j < t->n; j++)
      if (device_mark_seconds(t->spans[j].m0) < first) first = device_mark_seconds(t->spans[j].m0);
    t->origin = first;
  }
  for (int i = 0; i < t->n; i++) {
    const TraceSpan* s = &t->spans[i];
    double t0 = device_mark_seconds(s->m0), t1 = device_mark_seconds(s->m1);
    fprintf(t->f, ",\n{\"name\": \"%s%s%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                  "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"unit\": %d}}",
            s->what, s->unit >= 0 ? " " : "", s->unit >= 0 ? t->unit_names[s->unit] : "", s->what, t->rank,
            (int)s->track, (t0 - t->origin) * 1e6, (t1 - t0) * 1e6, s->unit);
  }
  t->n = 0;
  device_marks_release();
  if (fflush(t->f) != 0 || ferror(t->f)) fatal("--trace: writing failed: %s", strerror(errno));
}

void trace_close(Trace* t) {
  if (!t) return;
  trace_flush(t);
  if (t->f) {
    fprintf(t->f, "\n]}\n");
    if (fclose(t->f) != 0) fatal("--trace: writing failed: %s", strerror(errno));
  }
  free(t->spans);
  free(t);
}
