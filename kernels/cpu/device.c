// device.c (CPU): the CPU "device": host memory, and no-op streams and events (collectives
// complete synchronously on the MPI backend, so program order is already the schedule).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/device.h"
#include "infra/clock.h"
#include "infra/dist.h"

struct DeviceEvent {
  double t;  // the host's clock at the last record
};

void* device_alloc_zeroed(size_t bytes, const char* what) {
  // 64-byte alignment for vector loads; the size is rounded up as aligned_alloc requires.
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = aligned_alloc(64, rounded ? rounded : 64);
  if (!p) fatal("out of host memory: %zu bytes for %s (see --plan, reduce --batch or use more ranks)", bytes, what);
  memset(p, 0, rounded);
  return p;
}
void device_free(void* p) { free(p); }
DeviceEvent* device_event_create(void) { return xcalloc(1, sizeof(DeviceEvent), "event"); }
DeviceEvent* device_event_create_timed(void) { return device_event_create(); }
void device_event_record(DeviceEvent* e, StreamId s) {
  (void)s;
  e->t = now_seconds();
}
double device_event_seconds(DeviceEvent* from, DeviceEvent* to) { return to->t - from->t; }
void device_stream_wait(StreamId s, DeviceEvent* e) { (void)e; (void)s; }
static double marks[DEVICE_MAX_MARKS];
static int nmarks = 0;

int device_mark(StreamId s) {
  (void)s;
  if (nmarks == DEVICE_MAX_MARKS) return -1;
  marks[nmarks] = now_seconds();
  return nmarks++;
}
double device_mark_seconds(int mark) { return marks[mark]; }
void device_marks_release(void) { nmarks = 0; }

void device_stream_wait_timed(StreamId s, DeviceEvent* e) { device_stream_wait(s, e); }
double device_step_waited_seconds(int step) {
  (void)step;
  return 0.0;
}
void device_synchronize(void) {}
void device_event_synchronize(DeviceEvent* e) { (void)e; }

void device_step_begin(int step) { (void)step; }
void device_step_end(int step) { (void)step; }
void device_gelu_epilogue(struct KernelCtx* ctx, int on) { (void)ctx, (void)on; }

void device_describe_gelu(struct KernelCtx* ctx, int N, int C, int OC, char* out, size_t n) {
  (void)ctx, (void)N, (void)C, (void)OC;
  snprintf(out, n, "none (CPU: a GELU kernel)");
}

void device_delay(StreamId s, double seconds) {
  (void)s;
  if (seconds <= 0) return;
  struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

void* device_stream(StreamId s) {
  (void)s;
  return NULL;
}

int device_holds_values(void) { return 1; }

// MemAvailable of /proc/meminfo, shared by the ranks of this host (OpenMPI tells how many).
size_t device_free_bytes(void) {
  FILE* f = fopen("/proc/meminfo", "r");
  size_t kb = 0;
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
  if (f) fclose(f);
  const char* local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  size_t ranks = local && atoi(local) > 0 ? (size_t)atoi(local) : 1;
  return kb ? kb * 1024 / ranks : (size_t)-1;
}
void device_copy_to_host(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
void device_copy_to_device(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
void* device_host_alloc_zeroed(size_t bytes, const char* what) { return device_alloc_zeroed(bytes, what); }
void device_host_free(void* p) { free(p); }
void device_copy_async(void* dst, const void* src, size_t bytes, StreamId s) {
  (void)s;
  memcpy(dst, src, bytes);
}
void device_host_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
