// runtime.cpp: the simulated device itself: one sm_90 GPU (H100 SXM limits), its properties,
// the error state and per-kernel attributes.
#include <stdio.h>
#include <string.h>

#include <map>

#include "test/cudasim/sim.h"

namespace cudasim {

static cudaError_t last_error = cudaSuccess;
static std::map<const void*, size_t> smem_optin;
static int current_device = 0;

void set_last_error(cudaError_t e) {
  if (last_error == cudaSuccess) last_error = e;
}

size_t kernel_smem_optin(const void* kernel) {
  auto it = smem_optin.find(kernel);
  return it == smem_optin.end() ? 0 : it->second;
}

}  // namespace cudasim

using namespace cudasim;

extern "C" const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define E(x) \
  case x:    \
    return #x;
    E(cudaSuccess) E(cudaErrorInvalidValue) E(cudaErrorMemoryAllocation) E(cudaErrorInitializationError)
    E(cudaErrorInvalidConfiguration) E(cudaErrorInvalidDevicePointer) E(cudaErrorInvalidMemcpyDirection)
    E(cudaErrorInvalidResourceHandle) E(cudaErrorNotReady) E(cudaErrorIllegalAddress)
    E(cudaErrorLaunchOutOfResources) E(cudaErrorMisalignedAddress) E(cudaErrorNoDevice) E(cudaErrorInvalidDevice)
    E(cudaErrorLaunchFailure) E(cudaErrorInsufficientDriver)
#undef E
  }
  return "cudaErrorUnknown";
}

extern "C" const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    default: return cudaGetErrorName(e);
  }
}

extern "C" cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
extern "C" cudaError_t cudaPeekAtLastError(void) { return last_error; }

// CUDASIM_DRIVER: "none" answers as CUDA's runtime does on a machine without the NVIDIA driver
// (cudaErrorInsufficientDriver, driver version 0), "old" as with a driver older than the
// runtime, "no-device" as a driver that sees no GPU; unset, one simulated device.
static const char* driver_mode(void) {
  const char* e = getenv("CUDASIM_DRIVER");
  return e ? e : "";
}
extern "C" cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return cudaErrorInvalidValue;
  const char* mode = driver_mode();
  *count = 0;
  if (!strcmp(mode, "none") || !strcmp(mode, "old")) return cudaErrorInsufficientDriver;
  if (!strcmp(mode, "no-device")) return cudaErrorNoDevice;
  *count = 1;
  return cudaSuccess;
}
extern "C" cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return cudaErrorInvalidValue;
  const char* mode = driver_mode();
  *version = !strcmp(mode, "none") ? 0 : !strcmp(mode, "old") ? 12020 : CUDART_VERSION;
  return cudaSuccess;
}
extern "C" cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return cudaErrorInvalidValue;
  *version = CUDART_VERSION;
  return cudaSuccess;
}
extern "C" cudaError_t cudaSetDevice(int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  current_device = device;
  return cudaSuccess;
}
extern "C" cudaError_t cudaGetDevice(int* device) {
  if (!device) return cudaErrorInvalidValue;
  *device = current_device;
  return cudaSuccess;
}
extern "C" cudaError_t cudaDeviceReset(void) {
  device_synchronize_all();
  return cudaSuccess;
}

size_t cudasim::smem_optin_limit() {
  static size_t limit = 0;
  if (!limit) {
    const char* e = getenv("CUDASIM_SMEM_OPTIN_KIB");
    double kib = e ? atof(e) : 0.0;
    limit = kib * 1024 >= kSharedPerBlock && kib * 1024 <= kSharedPerBlockOptin ? (size_t)(kib * 1024) : kSharedPerBlockOptin;
  }
  return limit;
}

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* p, int device) {
  if (!p) return cudaErrorInvalidValue;
  if (device != 0) return cudaErrorInvalidDevice;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "cudasim (sm_90 simulated on the CPU)");
  p->totalGlobalMem = device_capacity();
  p->sharedMemPerBlock = kSharedPerBlock;
  p->sharedMemPerBlockOptin = smem_optin_limit();
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->multiProcessorCount = 132;
  p->maxThreadsPerMultiProcessor = 2048;
  p->major = 9, p->minor = 0;
  p->clockRate = 1980000;
  p->l2CacheSize = 50 * 1024 * 1024;
  return cudaSuccess;
}

extern "C" cudaError_t cudasim_func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || (size_t)value > smem_optin_limit()) return cudaErrorInvalidValue;
    smem_optin[kernel] = (size_t)value;
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return cudaErrorInvalidValue;
}
