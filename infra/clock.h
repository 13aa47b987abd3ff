// clock.h: seconds on the monotonic clock, for every host-side duration: step times, the time
// spent in collectives, timeouts, trace marks on the CPU.
#ifndef FSDP_CLOCK_H
#define FSDP_CLOCK_H
#include <time.h>

static inline double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
#endif
