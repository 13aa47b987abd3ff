// sass_planted.cu: kernels for test_kernel_report.sh's check of the kernel report's machine-code
// analysis (scripts/kernel_report.py, "SASS"). Never part of a build of the trainer.
//   planted_chain_fence: the pattern the report must flag, in one loop: each global load's
//     address comes from the load before it (a dependent chain: the warp waits a round trip for
//     each), and a __threadfence (MEMBAR.SC) before a flag is counted.
//   clean_stream: a loop whose loads are all issued before their values are used (one round trip
//     an iteration) and no fence: not flagged.
__global__ void planted_chain_fence(float* acc, const int* next, const float* x, unsigned int* flag, int n) {
  int i = threadIdx.x;
  for (int it = 0; it < n; ++it) {
    i = next[i];
    i = next[i];
    acc[i] += x[i];
    __threadfence();
    if (threadIdx.x == 0) atomicAdd(flag, 1u);
  }
}

__global__ void clean_stream(float* out, const float* x, const float* y, int n) {
  float s = 0.0f;
  for (int it = 0; it < n; ++it) s += x[it * 256 + threadIdx.x] * y[it * 256 + threadIdx.x];
  out[threadIdx.x] = s;
}
