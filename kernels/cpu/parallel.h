// parallel.h: when a CPU kernel's loop is worth an OpenMP parallel region.
//
// Opening a region and joining it at its barrier costs microseconds on an idle machine whose
// threads spin, tens of microseconds where they sleep between regions (backend.c: the CPU
// binaries' default), and a scheduler time slice on a busy machine. That is more than an
// elementwise pass over a few hundred thousand floats, and than many of a small model's
// kernels (make run's layer norms, embeddings, bias sums, AdamW on its units). Kernels whose
// work is below PARALLEL_MIN_WORK run on the calling thread:
// `#pragma omp parallel for if (PARALLEL_WORTH(work))`. Work is counted in elements of an
// elementwise add, the cheapest pass; a kernel scales its own count by what an element costs
// it (a GELU or a layer-norm element about 4 adds, a matmul's multiply-add about 1). Each
// element is still computed the same way, so the bits do not change.
// CPU_PARALLEL_MIN_WORK in the environment replaces the threshold (0: every kernel in parallel,
// as test_kernels' thread-count checks need).
#ifndef FSDP_KERNELS_CPU_PARALLEL_H
#define FSDP_KERNELS_CPU_PARALLEL_H
#include <stddef.h>
#include <stdlib.h>

#define PARALLEL_MIN_WORK ((size_t)1 << 20)

// Read once per file, at its first kernel call (on the calling thread, before any region).
static inline size_t parallel_min_work(void) {
  static size_t min_work = (size_t)-1;
  if (min_work == (size_t)-1) {
    const char* e = getenv("CPU_PARALLEL_MIN_WORK");
    min_work = e && *e ? (size_t)strtoull(e, NULL, 10) : PARALLEL_MIN_WORK;
  }
  return min_work;
}
#define PARALLEL_WORTH(work) ((size_t)(work) >= parallel_min_work())

#endif
