// device_cpu.c: the CPU "device": host memory, and no-op streams and events (collectives
// complete synchronously on the MPI backend, so program order is already the schedule).
#include <stdlib.h>
#include <string.h>

#include "fsdp/device.h"
#include "fsdp/dist.h"

struct DeviceEvent { int unused; };

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
void device_event_record(DeviceEvent* e, StreamId s) { (void)e; (void)s; }
void device_stream_wait(StreamId s, DeviceEvent* e) { (void)e; (void)s; }
void device_synchronize(void) {}
void device_copy_to_host(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
void device_copy_to_device(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
