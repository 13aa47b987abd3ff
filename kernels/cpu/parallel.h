// parallel.h: when a CPU kernel's loop is worth an OpenMP parallel region.
//
// Opening a region and joining it at its barrier costs microseconds on an idle machine and a
// scheduler time slice on a busy one, more than an elementwise pass over a few thousand floats
// (a bias, a norm weight, one AdamW decay segment of them). Loops over fewer elements than
// this run on the calling thread: `#pragma omp parallel for if (PARALLEL_WORTH(n))`. Each
// element is still computed the same way, so the bits do not change.
#ifndef FSDP_KERNELS_CPU_PARALLEL_H
#define FSDP_KERNELS_CPU_PARALLEL_H

#define PARALLEL_MIN_ELEMENTS 32768
#define PARALLEL_WORTH(n) ((size_t)(n) >= PARALLEL_MIN_ELEMENTS)

#endif
