// bench_adamw.c: the host AdamW step of --offload optim (adamw_update_host), timed.
//
//   build/bench/adamw_host N TRIALS
//
// Updates N fp32 elements (p, g, m, v from a fixed generator, not zeros) TRIALS times after one
// untimed step, with OMP_NUM_THREADS threads, and prints one line per trial:
// "seconds <s> elements <N>". scripts/bench_adamw.sh runs it beside PyTorch's CPU AdamW.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: adamw_host N TRIALS\n");
    return 2;
  }
  size_t n = (size_t)strtoull(argv[1], NULL, 10);
  int trials = atoi(argv[2]);
  float* buf = aligned_alloc(64, (4 * n * sizeof(float) + 63) / 64 * 64);
  if (!n || trials < 1 || !buf) {
    fprintf(stderr, "adamw_host: need N >= 1, TRIALS >= 1 and 16 N bytes of memory\n");
    return 2;
  }
  float *p = buf, *g = buf + n, *m = buf + 2 * n, *v = buf + 3 * n;
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < n; i++) {  // xorshift: values in [-1, 1)
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    float r = (float)((x >> 40) * (1.0 / 8388608.0)) - 1.0f;
    p[i] = r, g[i] = 0.01f * r, m[i] = 0.001f * r, v[i] = 1e-6f * r * r;
  }
  AdamWArgs a = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 1.0f, .step = 1};
  adamw_update_host(NULL, p, g, m, v, n, a);  // untimed: first touch of the pages
  for (int t = 0; t < trials; t++) {
    a.step = 2 + t;
    double t0 = now();
    adamw_update_host(NULL, p, g, m, v, n, a);
    printf("seconds %.6f elements %zu\n", now() - t0, n);
  }
  free(buf);
  return 0;
}
