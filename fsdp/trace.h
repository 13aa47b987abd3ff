// trace.h: a per-rank timeline of the FSDP schedule in Chrome's trace format (opens in
// Perfetto or chrome://tracing): each unit's all-gather, forward and backward compute,
// reduce-scatter, and the optimizer step, on three tracks that mirror the three streams.
//
// Spans are read from device marks (fsdp/device.h): CUDA timing events recorded on the
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
  FILE* f;
  int rank, first;
  double origin;
  int n, cap;
  TraceSpan* spans;
  const char* const* unit_names;  // for the event names
} Trace;

// Opens path (rank r of W > 1 writes path.rank<r>); returns NULL and leaves no file on error.
Trace* trace_open(const char* path, int rank, int world, const char* const* unit_names);
// A device mark on the stream of `track` (-1 when tracing is off: t == NULL).
int trace_mark(Trace* t, TraceTrack track);
void trace_span(Trace* t, const char* what, int unit, TraceTrack track, int m0, int m1);
// Writes the spans recorded so far: synchronizes the device and reads the marks. Called once
// per step, outside the step's timed part.
void trace_flush(Trace* t);
void trace_close(Trace* t);
double trace_now(void);
#endif
