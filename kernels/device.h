// device.h: the little the FSDP schedule needs from a device: memory, streams and events.
//
// The schedule is written once, for both backends. It records an event when a slot's last
// reader is done and makes the next all-gather into that slot wait on it; it makes the
// compute stream wait for a unit's all-gather before using the unit. On the CPU backend
// collectives complete synchronously, so streams and events are no-ops and the calls only
// document the order; the CUDA backend maps them to cudaStream/cudaEvent.
#ifndef FSDP_DEVICE_H
#define FSDP_DEVICE_H
#include <stddef.h>

// STREAM_COPY carries the activation copies of --offload activations (device <-> host), so
// they overlap compute without queueing behind collectives.
typedef enum { STREAM_COMPUTE = 0, STREAM_ALL_GATHER = 1, STREAM_REDUCE_SCATTER = 2, STREAM_COPY = 3 } StreamId;
#define DEVICE_STREAMS 4
typedef struct DeviceEvent DeviceEvent;

void* device_alloc_zeroed(size_t bytes, const char* what);
void device_free(void* p);
DeviceEvent* device_event_create(void);
void device_event_record(DeviceEvent* e, StreamId s);
void device_stream_wait(StreamId s, DeviceEvent* e);
// The same wait, measured: how long stream s stalls on e (the compute stream waiting for a
// collective is the exposed communication time), when it is queued inside an optimizer step
// (between device_step_begin and device_step_end; elsewhere it is a plain wait).
// device_step_waited_seconds returns the stalls of step `step`'s waits once that step's work is
// done (the caller has waited for it: it does not synchronize, so reading one step while the next
// runs keeps the queue full). The CPU backend's collectives block the host instead, so there
// this measures nothing and returns 0.
void device_stream_wait_timed(StreamId s, DeviceEvent* e);
double device_step_waited_seconds(int step);
void device_synchronize(void);
// The host waits until the work queued before e's last record is done (no-op if never recorded).
void device_event_synchronize(DeviceEvent* e);
// An event that also keeps its time (a CUDA timing event), and the seconds from one's last record
// to another's, once both are done (the caller has waited for the later one). The CPU backend
// records the host's clock (its work is done when it is issued).
DeviceEvent* device_event_create_timed(void);
double device_event_seconds(DeviceEvent* from, DeviceEvent* to);
// The span of one optimizer step, from its first all-gather to the end of its AdamW, for tools
// that count per step. The CPU backend ignores it; the CUDA backend hands it to the CUDA
// simulator when the binary runs on it (train_gpt_sim prints its per-step counts from it).
void device_step_begin(int step);
void device_step_end(int step);
// Timeline marks for --trace: a point in a stream's execution (a timing event on CUDA, the
// host clock on the CPU, where work runs when it is issued). device_mark_seconds reads a mark
// after device_synchronize, in seconds on one clock; device_marks_release lets the slots be
// reused. Returns -1 when all DEVICE_MAX_MARKS are in use (the span is then left out).
#define DEVICE_MAX_MARKS 32768
int device_mark(StreamId s);
double device_mark_seconds(int mark);
void device_marks_release(void);
// Holds stream s busy for `seconds` (the simulated link: a collective replaced by the time it
// would take). CPU: the host sleeps, as a synchronous collective would block it.
void device_delay(StreamId s, double seconds);
// The backend's handle of a stream (cudaStream_t on CUDA, NULL on the CPU).
void* device_stream(StreamId s);
// Memory the plan may use on this device: free GPU memory, or the host's available memory.
size_t device_free_bytes(void);
// Whether the device's memory holds values: 1 on the CPU and CUDA backends; 0 on the timeline
// backend, whose memory is address space that nothing reads or writes (so the sharded
// initialization has nothing to write there).
int device_holds_values(void);
void device_copy_to_host(void* dst, const void* src, size_t bytes);
void device_copy_to_device(void* dst, const void* src, size_t bytes);
// Pinned host memory (--offload): what the GPU copies to and from asynchronously. The CPU
// backend allocates ordinary memory.
void* device_host_alloc_zeroed(size_t bytes, const char* what);
void device_host_free(void* p);
// Zeroes pinned host memory on the host (the timeline backend models the time instead).
void device_host_zero(void* p, size_t bytes);
// A copy between device and pinned host memory (either direction, or within one) queued on
// stream s: it runs after the work queued there before it; wait on an event recorded after it
// before reading dst. The CPU backend copies at once.
void device_copy_async(void* dst, const void* src, size_t bytes, StreamId s);

// The GELU epilogue of the linear layers' products (--gelu-epilogue): on, cuBLASLt's GELU_AUX
// and DGELU epilogues where it has an algorithm for them, else the plain product and the GELU
// kernel; off, always the latter. A backend without epilogues (the CPU's) has nothing to turn.
struct KernelCtx;
void device_gelu_epilogue(struct KernelCtx* ctx, int on);
// For the start-up table: how the GELU products of a linear layer of N rows, C -> OC (bias)
// run here, forward and backward, in a few words.
void device_describe_gelu(struct KernelCtx* ctx, int N, int C, int OC, char* out, size_t n);
#endif
