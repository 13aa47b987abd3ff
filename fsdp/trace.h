// trace.h: a per-rank timeline of the FSDP schedule in Chrome's trace format (opens in
// Perfetto or chrome://tracing): each unit's all-gather, forward and backward compute,
// reduce-scatter, and the optimizer step, on three tracks that mirror the three streams.
//
// Spans are read from device marks (kernels/device.h): CUDA timing events recorded on the
// stream that does the work, so a span is when the GPU ran it, not when the host issued it;
// on the CPU backend, the host clock.
#ifndef FSDP_TRACE_H
#define FSDP_TRACE_H
#include <stdio.h>

typedef enum { TRACK_COMPUTE = 0, TRACK_ALL_GATHER = 1, TRACK_REDUCE_SCATTER = 2 } TraceTrack;

typedef struct {
  const char* what;   // "all-gather", "forward", "backward", "reduce-scatter", "optimizer"
  int unit;           // -1 when not about one unit
  TraceTrack track;
  int m0, m1;         // device marks at its start and end
} TraceSpan;

typedef struct Trace {
  FILE* f;                        // NULL: spans are kept for reading, not written
  int rank, first;
  double origin;
  int n, cap;
  TraceSpan* spans;
  const char* const* unit_names;  // for the event names
  // The compute track as the schedule draws it: one non-root unit computes at a time (its span
  // began at unit_start); the root's open span, if any, began at root_start (-1: none).
  int unit_start, unit_busy;
  int root_start;
  const char* root_what;
} Trace;

// Opens path (rank r of W > 1 writes path.rank<r>); a fatal error names the file. With path
// NULL the trace is kept in memory for trace_backward_seconds and written nowhere.
Trace* trace_open(const char* path, int rank, int world, const char* const* unit_names);
// A device mark on the stream of `track` (-1 when tracing is off: t == NULL).
int trace_mark(Trace* t, TraceTrack track);
void trace_span(Trace* t, const char* what, int unit, TraceTrack track, int m0, int m1);
// The compute track, drawn by the schedule at its points (fsdp/schedule.c), so model code draws
// nothing. A unit's pre point closes the root's open span (trace_point) and its compute span
// begins once the unit is ready (trace_compute_begin); the post point ends it. The root's spans:
// from its own pre point, or from the first use of a root parameter or gradient while no other
// unit computes (GPT's final norm and head; T5's norms and embeddings between its stacks), to the
// next point of any unit.
void trace_point(Trace* t);
void trace_compute_begin(Trace* t, int unit, const char* what);
void trace_compute_end(Trace* t, int unit, const char* what);
void trace_root_used(Trace* t, const char* what);
// The backward time of the spans recorded since the last flush: for each micro-step, from the
// end of its last forward span to the end of its last backward span, summed (synchronizes).
double trace_backward_seconds(Trace* t);
// Writes the spans recorded so far: synchronizes the device and reads the marks. Called once
// per step, outside the step's timed part.
void trace_flush(Trace* t);
void trace_close(Trace* t);
#endif
