// trace.h: a per-rank timeline of the FSDP schedule in Chrome's trace format (opens in
// Perfetto or chrome://tracing): each unit's all-gather, forward and backward compute,
// reduce-scatter, and the optimizer step, on three tracks that mirror the three streams.
//
// On the CPU backend spans are host wall-clock intervals (collectives are synchronous, so
// that is when they ran). The CUDA backend records the same spans from CUDA events.
#ifndef FSDP_TRACE_H
#define FSDP_TRACE_H
#include <stdio.h>

typedef enum { TRACK_COMPUTE = 0, TRACK_ALL_GATHER = 1, TRACK_REDUCE_SCATTER = 2 } TraceTrack;

typedef struct {
  const char* what;   // "all-gather", "forward", "backward", "reduce-scatter", "optimizer"
  int unit;           // -1 when not about one unit
  TraceTrack track;
  double t0, t1;      // seconds
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
void trace_span(Trace* t, const char* what, int unit, TraceTrack track, double t0, double t1);
// Writes the spans recorded so far (called once per step, outside the step's timed part).
void trace_flush(Trace* t);
void trace_close(Trace* t);
double trace_now(void);
#endif
