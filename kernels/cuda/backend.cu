// backend.cu: the CUDA backend's lifecycle: device selection, the compute stream and the two
// communication streams, the cuBLASLt handle and workspace, the kernel scratch and counters.
//
// Everything is allocated here, once; no kernel of this backend allocates device memory.
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ptx.cuh"

void matmul_cache_create(KernelCtx* ctx);   // matmul.cu
void matmul_cache_destroy(KernelCtx* ctx);  // matmul.cu

// The context kernels_init created last: kernels/cuda/device.c reaches the streams through it
// (kernels_cuda_stream), since device.h's functions take no context.
static KernelCtx* live_ctx = NULL;

void cuda_fail(const char* what, const char* detail, const char* file, int line) {
  fprintf(stderr, "error: CUDA call failed: %s\n  call: %s\n  at %s:%d\n", detail, what, file, line);
  fflush(stderr);
  exit(1);
}

extern "C" KernelCtx* kernels_init(int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    // Without the NVIDIA driver the runtime answers "driver version is insufficient" with driver
    // version 0: that is no driver, not an old one, and the message says so.
    int driver = 0, runtime = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    if (e == cudaErrorInsufficientDriver && driver > 0)
      fprintf(stderr, "error: the NVIDIA driver supports CUDA up to %d.%d, older than the CUDA %d.%d runtime this "
              "train_gpt was built with: update the driver, or build with a CUDA toolkit it supports (nvidia-smi "
              "shows its CUDA version)\n", driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    else if (e == cudaErrorInsufficientDriver || driver == 0)
      fprintf(stderr, "error: no CUDA GPU found: this machine has no NVIDIA driver; run train_gpt_cpu, the CPU "
              "build, instead\n");
    else
      fprintf(stderr, "error: no CUDA GPU found (%s): run train_gpt_cpu, the CPU build, instead\n",
              e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
    exit(1);
  }
  if (device < 0) {
    fprintf(stderr, "error: CUDA device %d requested\n", device);
    exit(1);
  }
  if (device >= count) {
    // More ranks on this node than GPUs: ranks share GPUs round-robin. That is how the tests
    // run several NCCL ranks on one GPU; for training it only makes sense for correctness.
    fprintf(stderr, "note: local rank %d shares GPU %d (this process sees %d GPU%s)\n", device, device % count,
            count, count == 1 ? "" : "s");
    device %= count;
  }
  KernelCtx* ctx = (KernelCtx*)calloc(1, sizeof(KernelCtx));
  if (!ctx) cuda_fail("calloc(KernelCtx)", "out of host memory", __FILE__, __LINE__);
  ctx->device = device;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaGetDeviceProperties(&ctx->prop, device));
  // Blocking streams (the default flag): they also order against the legacy default stream,
  // so a stray cudaMemcpy/cudaMemset without a stream can never race with them.
  CUDA_CHECK(cudaStreamCreate(&ctx->stream));
  CUDA_CHECK(cudaStreamCreate(&ctx->comm_streams[0]));
  CUDA_CHECK(cudaStreamCreate(&ctx->comm_streams[1]));
  CUDA_CHECK(cudaStreamCreate(&ctx->comm_streams[2]));  // the copy stream (--offload activations)
  CUBLAS_CHECK(cublasLtCreate(&ctx->lt));
  ctx->workspace_bytes = CUBLASLT_WORKSPACE_BYTES;
  CUDA_CHECK(cudaMalloc(&ctx->workspace, ctx->workspace_bytes));
  ctx->scratch_bytes = KERNEL_SCRATCH_BYTES;
  CUDA_CHECK(cudaMalloc(&ctx->scratch, ctx->scratch_bytes));
  ctx->ncounters = KERNEL_COUNTERS;
  CUDA_CHECK(cudaMalloc((void**)&ctx->counters, ctx->ncounters * sizeof(unsigned int)));
  CUDA_CHECK(cudaMemset(ctx->counters, 0, ctx->ncounters * sizeof(unsigned int)));
  CUDA_CHECK(cudaDeviceSynchronize());  // the zeroes are visible to every stream
  matmul_cache_create(ctx);
  attention_init(ctx);
  classifier_init(ctx);
  // Views of this context that launch on the communication streams (kernels_stream_ctx): the
  // FSDP runtime casts a shard into its slot on the all-gather stream and accumulates a
  // reduced gradient on the reduce-scatter stream. Elementwise kernels run on them, and on the
  // reduce-scatter stream the exact sum of squares of a gradient shard on its way to host
  // memory (--offload grads), which gets a scratch of its own there. Neither gets the compute
  // stream's workspace or scratch: a kernel that needed them would fail loudly, not race.
  for (int i = 0; i < 2; i++) {
    KernelCtx* v = (KernelCtx*)calloc(1, sizeof(KernelCtx));
    if (!v) cuda_fail("calloc(KernelCtx)", "out of host memory", __FILE__, __LINE__);
    *v = *ctx;
    v->stream = ctx->comm_streams[i];
    v->workspace = v->scratch = NULL;
    v->workspace_bytes = v->scratch_bytes = 0;
    v->counters = NULL, v->ncounters = 0;
    v->matmul_cache = NULL;
    if (i == 1) {
      v->scratch_bytes = REDUCE_STREAM_SCRATCH_BYTES;
      CUDA_CHECK(cudaMalloc(&v->scratch, v->scratch_bytes));
    }
    ctx->views[i] = v;
  }
  live_ctx = ctx;
  return ctx;
}

extern "C" KernelCtx* kernels_stream_ctx(KernelCtx* ctx, int stream) {
  if (!ctx || stream == 0) return ctx;
  return ctx->views[stream == 1 ? 0 : 1];
}

extern "C" void kernels_shutdown(KernelCtx* ctx) {
  if (!ctx) return;
  CUDA_CHECK(cudaDeviceSynchronize());
  matmul_cache_destroy(ctx);
  CUDA_CHECK(cudaFree(ctx->views[1]->scratch));
  free(ctx->views[0]);
  free(ctx->views[1]);
  CUBLAS_CHECK(cublasLtDestroy(ctx->lt));
  CUDA_CHECK(cudaFree(ctx->workspace));
  CUDA_CHECK(cudaFree(ctx->scratch));
  CUDA_CHECK(cudaFree(ctx->counters));
  CUDA_CHECK(cudaStreamDestroy(ctx->comm_streams[2]));
  CUDA_CHECK(cudaStreamDestroy(ctx->comm_streams[1]));
  CUDA_CHECK(cudaStreamDestroy(ctx->comm_streams[0]));
  CUDA_CHECK(cudaStreamDestroy(ctx->stream));
  if (live_ctx == ctx) live_ctx = NULL;
  free(ctx);
}

extern "C" const char* kernels_backend(void) { return "cuda"; }

extern "C" void kernels_device_name(KernelCtx* ctx, char* out, size_t len) {
  if (!ctx) ctx = live_ctx;
  snprintf(out, len, "%s", ctx ? ctx->prop.name : "cuda (no context)");
}

extern "C" void* kernels_cuda_stream(int which) {
  if (!live_ctx) {
    fprintf(stderr, "error: a device stream was used before kernels_init created the CUDA context\n");
    exit(1);
  }
  if (which == 1) return (void*)live_ctx->comm_streams[0];
  if (which == 2) return (void*)live_ctx->comm_streams[1];
  if (which == 3) return (void*)live_ctx->comm_streams[2];
  return (void*)live_ctx->stream;
}

// One thread that keeps its stream busy until `ns` nanoseconds of the GPU's global timer have
// passed (sleeping between reads, so it takes no issue slots from other work).
__global__ void delay_kernel(unsigned long long ns) {
  const unsigned long long t0 = globaltimer_ns();
  do __nanosleep(1000);
  while (globaltimer_ns() - t0 < ns);
}

extern "C" void kernels_cuda_delay(int which, double seconds) {
  if (!(seconds > 0.0)) return;
  cudaStream_t s = (cudaStream_t)kernels_cuda_stream(which);
  delay_kernel<<<1, 1, 0, s>>>((unsigned long long)(seconds * 1e9));
  CUDA_LAUNCH_CHECK();
}
