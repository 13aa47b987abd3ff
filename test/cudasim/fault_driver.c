// fault_driver.c: runs one kernel of kernels.h on small random inputs and checks nothing
// itself: test_faults.sh links it against a planted-fault copy of a kernel file and expects
// the simulator to report the fault. Run against the unmodified kernels it must finish
// without a report (the control).
//   fault_driver add | matmul | sumsq | classifier | attention64 | attention128
//   fault_driver stream-race | stream-ordered: a kernel on the compute stream, then a copy into
//   its input on a second stream, without (race) or with (ordered) an event between them.
//   fault_driver host-pointer: a kernel handed host memory instead of device memory.
//   fault_driver host-read-race | host-write-race | host-ordered: the host reads pinned memory a
//   copy is still filling, writes pinned memory a copy is still reading, or reads it after
//   synchronizing with the copy.
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/kernels.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float rnd(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((rng >> 11) % 2000) / 1000.0f - 1.0f + 0.0005f;
}
// n random values uploaded: bf16 bits (act_t) or fp32.
static act_t* dev_act(size_t n) {
  uint16_t* h = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    float f = rnd();
    uint32_t u;
    memcpy(&u, &f, 4);
    h[i] = (uint16_t)(u >> 16);
  }
  act_t* d = NULL;
  if (cudaMalloc((void**)&d, n * 2) != cudaSuccess || cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice) != cudaSuccess)
    exit(2);
  free(h);
  return d;
}
static float* dev_f32(size_t n) {
  float* h = malloc(n * 4);
  for (size_t i = 0; i < n; i++) h[i] = rnd();
  float* d = NULL;
  if (cudaMalloc((void**)&d, n * 4) != cudaSuccess || cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice) != cudaSuccess)
    exit(2);
  free(h);
  return d;
}

// Causal attention over 150 positions: the forward's partial query and key tiles, and two key
// tiles of the backward, the second adding to the last query tile's dq after the first.
static void attention(KernelCtx* K, int D) {
  int B = 1, T = 150, H = 1, C = H * D;
  AttnShape s = {.B = B, .Tq = T, .Tk = T, .H = H, .D = D, .q_stride = 3 * C, .kv_stride = 3 * C,
                 .scale = 0.125f, .causal = 1};
  act_t* qkv = dev_act((size_t)B * T * 3 * C);
  act_t* out = dev_act((size_t)B * T * C);
  float* lse = dev_f32((size_t)B * H * T);
  attention_forward(K, out, lse, qkv, qkv + C, qkv + 2 * C, (AttnBias){0}, s);
  act_t* dout = dev_act((size_t)B * T * C);
  act_t* dqkv = dev_act((size_t)B * T * 3 * C);
  attention_backward(K, dqkv, dqkv + C, dqkv + 2 * C, NULL, dout, out, lse, qkv, qkv + C, qkv + 2 * C, (AttnBias){0}, s);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fault_driver add|matmul|sumsq|classifier|attention64|attention128|stream-race|"
            "stream-ordered|pinned-race|pinned-ordered|host-pointer|host-read-race|host-write-race|host-ordered\n");
    return 2;
  }
  const char* c = argv[1];
  KernelCtx* K = kernels_init(0);
  if (!strcmp(c, "add")) {
    size_t n = 1000;
    add_inplace(K, dev_act(n), dev_act(n), n);
  } else if (!strcmp(c, "matmul")) {  // odd sizes: cuBLASLt has no algorithm, the fallback kernel runs
    int N = 7, Cc = 33, OC = 5;
    act_t* inp = dev_act((size_t)N * Cc);
    act_t* w = dev_act((size_t)OC * Cc);
    act_t* out = dev_act((size_t)N * OC);
    matmul_forward(K, out, inp, w, NULL, N, Cc, OC);
    matmul_backward(K, dev_act((size_t)N * Cc), dev_f32((size_t)OC * Cc), NULL, out, inp, w, N, Cc, OC);
  } else if (!strcmp(c, "sumsq")) {
    size_t n = 128 * 9;
    double* sums = NULL;
    if (cudaMalloc((void**)&sums, 9 * sizeof(double)) != cudaSuccess) return 2;
    block_sumsq(K, sums, dev_f32(n), n);
  } else if (!strcmp(c, "classifier")) {
    int N = 3, V = 100, Vp = 128;
    int32_t targets[3] = {5, 99, 0}, *dt = NULL;
    if (cudaMalloc((void**)&dt, sizeof targets) != cudaSuccess ||
        cudaMemcpy(dt, targets, sizeof targets, cudaMemcpyHostToDevice) != cudaSuccess)
      return 2;
    float dloss = 1.0f / N, *ddloss = dev_f32(1);
    if (cudaMemcpy(ddloss, &dloss, sizeof dloss, cudaMemcpyHostToDevice) != cudaSuccess) return 2;
    classifier_forward_backward(K, dev_f32(N), dev_act((size_t)N * Vp), dt, N, V, Vp, ddloss);
  } else if (!strcmp(c, "stream-race") || !strcmp(c, "stream-ordered")) {
    size_t n = 4096;
    act_t *y = dev_act(n), *x = dev_act(n), *src = dev_act(n);
    cudaStream_t other;
    cudaEvent_t done;
    if (cudaStreamCreate(&other) != cudaSuccess || cudaEventCreate(&done) != cudaSuccess) return 2;
    add_inplace(K, y, x, n);  // reads x on the compute stream
    if (!strcmp(c, "stream-ordered")) {
      if (cudaEventRecord(done, (cudaStream_t)kernels_cuda_stream(0)) != cudaSuccess ||
          cudaStreamWaitEvent(other, done, 0) != cudaSuccess)
        return 2;
    }
    if (cudaMemcpyAsync(x, src, n * 2, cudaMemcpyDeviceToDevice, other) != cudaSuccess) return 2;
  } else if (!strcmp(c, "pinned-race") || !strcmp(c, "pinned-ordered")) {
    // --offload's pattern: a copy to pinned host memory on one stream, read back on another.
    size_t n = 4096;
    act_t *d = dev_act(n), *back = dev_act(n), *pinned = NULL;
    cudaStream_t other;
    cudaEvent_t done;
    if (cudaMallocHost((void**)&pinned, n * sizeof(act_t)) != cudaSuccess || cudaStreamCreate(&other) != cudaSuccess ||
        cudaEventCreate(&done) != cudaSuccess)
      return 2;
    cudaStream_t compute = (cudaStream_t)kernels_cuda_stream(0);
    if (cudaMemcpyAsync(pinned, d, n * sizeof(act_t), cudaMemcpyDeviceToHost, compute) != cudaSuccess) return 2;
    if (!strcmp(c, "pinned-ordered")) {
      if (cudaEventRecord(done, compute) != cudaSuccess || cudaStreamWaitEvent(other, done, 0) != cudaSuccess) return 2;
    }
    if (cudaMemcpyAsync(back, pinned, n * sizeof(act_t), cudaMemcpyHostToDevice, other) != cudaSuccess) return 2;
  } else if (!strcmp(c, "host-read-race") || !strcmp(c, "host-write-race") || !strcmp(c, "host-ordered")) {
    // --offload optim's pattern: a shard copied into pinned memory, then the host's own loop on it.
    size_t n = 4096;
    act_t *d = dev_act(n), *pinned = NULL;
    if (cudaMallocHost((void**)&pinned, n * sizeof(act_t)) != cudaSuccess) return 2;
    cudaStream_t compute = (cudaStream_t)kernels_cuda_stream(0);
    int writes = !strcmp(c, "host-write-race");
    if (cudaMemcpyAsync(writes ? (void*)d : (void*)pinned, writes ? (void*)pinned : (void*)d, n * sizeof(act_t),
                        writes ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, compute) != cudaSuccess)
      return 2;
    if (!strcmp(c, "host-ordered") && cudaStreamSynchronize(compute) != cudaSuccess) return 2;
    volatile act_t* h = pinned;
    if (writes) h[3000] = 1;
    else printf("fault_driver: pinned[3000] = %d\n", (int)h[3000]);
  } else if (!strcmp(c, "host-pointer")) {
    size_t n = 1000;
    act_t* host = calloc(n, sizeof(act_t));
    add_inplace(K, dev_act(n), host, n);
  } else if (!strcmp(c, "attention64")) {
    attention(K, 64);
  } else if (!strcmp(c, "attention128")) {
    attention(K, 128);
  } else {
    fprintf(stderr, "fault_driver: unknown case %s\n", c);
    return 2;
  }
  if (cudaDeviceSynchronize() != cudaSuccess) return 3;
  kernels_shutdown(K);
  printf("fault_driver %s: finished\n", c);
  return 0;
}
