// sim.h: the simulator's internal interface between its parts (runtime, executor, checkers,
// cuBLASLt, cub). Not for kernels or host code of the project: they see only the CUDA headers
// in include/.
#pragma once
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include <functional>

namespace cudasim {

// ---- reports (report.cpp) ------------------------------------------------------------------
// A simulator finding: prints "cudasim: <kind>: <message>" on stderr and aborts the process
// (exit code 86) unless the fault test harness asked to collect reports instead (expect_reports).
[[noreturn]] void fatal(const char* kind, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void report(const char* kind, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// "file:line (function)" of a code address (a return address inside a kernel), for reports.
void describe_pc(const void* pc, char* out, size_t n);

// ---- device memory (memory.cpp) ------------------------------------------------------------
struct Allocation {
  uintptr_t base;
  size_t bytes;   // as requested
  uint64_t serial;  // allocation number, for messages
};
// The live device allocation that contains address p, or NULL.
const Allocation* find_allocation(const void* p);
// Checks that [p, p + bytes) lies inside one live device allocation; reports otherwise,
// naming `what` (e.g. "cublasLtMatmul operand A") and the nearest allocation.
void check_device_range(const void* p, size_t bytes, const char* what);
// Describes where p lies: inside/after allocation #n of size b at +offset, or no allocation.
void describe_address(const void* p, char* out, size_t n);
// Host memory the simulator hands out as pinned (cudaMallocHost): kernels may not touch it.
int is_pinned_host(const void* p);
// The live cudaMallocHost block that contains address p, or NULL.
const Allocation* find_pinned(const void* p);

// ---- streams (stream.cpp) -----------------------------------------------------------------
// Runs a device operation (a kernel, copy, memset, cuBLASLt product, sort) on stream s after
// the work already queued on it. `what` names it in reports.
// Returns the operation's number on its stream's clock (order.h).
uint32_t stream_op(cudaStream_t s, const char* what, std::function<void()> op);
// A copy as a stream operation; `blocking`: the host waits for it (cudaMemcpy).
void copy_op(cudaStream_t s, const char* what, void* dst, const void* src, size_t bytes, int blocking);
// Waits for all work on every stream (cudaDeviceSynchronize, and what implies it).
void device_synchronize_all();

// ---- per-step counters (stats.cpp) -----------------------------------------------------------
void count_launch(const char* kernel);
void count_library_call(const char* call);  // a cuBLASLt product, a cub sort: kernels of their own
void count_sync(const char* call);   // a host-blocking call
void count_allocation(int sign);     // +1 cudaMalloc, -1 cudaFree
void count_collective(const char* kind, size_t bytes);
// The device's capacity and what cudaMalloc has handed out (memory.cpp).
size_t device_capacity();
size_t device_used();

// ---- the simulated GPU (runtime.cpp) --------------------------------------------------------
// sm_90 limits (H100 SXM): shared memory per block without / with the opt-in attribute.
const size_t kSharedPerBlock = 48 * 1024;
const size_t kSharedPerBlockOptin = 227 * 1024;
// The opt-in limit this device reports and enforces: kSharedPerBlockOptin, or less with
// CUDASIM_SMEM_OPTIN_KIB (163: an A100, 99: sm_86/89), for code that must adapt to smaller GPUs.
size_t smem_optin_limit();
// cudaGetLastError's state: launch-configuration errors are reported there, as on a GPU.
void set_last_error(cudaError_t e);
// The dynamic shared memory size a kernel opted into with cudaFuncSetAttribute (0: none).
size_t kernel_smem_optin(const void* kernel);

}  // namespace cudasim
