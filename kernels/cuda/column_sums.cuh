// column_sums.cuh: deterministic column sums finished inside the kernel that reads the data.
//
// A parameter gradient that is a sum over the N token rows (a bias, a norm's weight) is taken by
// the kernel that already reads those rows (norm.cu's backward; reduce.cu's bias sums): the
// rows are cut into chunks of consecutive rows, one block per chunk (per column tile), and each
// block writes its chunk's partial sums, each the same fixed-order sum on every run, into the
// kernel scratch. Then, without a second launch, the blocks meet in a tree of arrivals: the
// chunks are grouped COLSUM_FANIN at a time, and the block that arrives last at its group's
// counter sums the group's partials in chunk order into the group's node of the next level; the
// last to arrive at the root adds the root (the total) to the fp32 output. Which block arrives
// last varies from run to run, but every node is the sum of its children in index order, so the
// bits do not: the result depends only on the chunking, which depends only on the shapes (never
// on the GPU or its number of SMs). No float atomics anywhere; the counters are integers, and
// each is reset to 0 by the block that completes it, ready for the next launch.
//
// A tree instead of one last block summing every chunk: that block would read chunks x C
// partials alone, a serial tail of microseconds on one SM while the rest of the GPU idles; with a
// fan-in of 16 each node sums at most 16 rows of partials.
#pragma once
#include "kernels/cuda/common.cuh"

#define COLSUM_FANIN 16

// Nodes of a tree over n leaves (the leaves included) and its counters (one per inner node).
static __host__ __device__ inline int colsum_tree_nodes(int n) {
  int total = n;
  while (n > 1) n = (n + COLSUM_FANIN - 1) / COLSUM_FANIN, total += n;
  return total;
}
static __host__ __device__ inline int colsum_tree_counters(int n) { return colsum_tree_nodes(n) - n; }

// Called by every thread of a block once the block has written leaf `leaf` of a tree of `leaves`
// leaves: nodes[leaf * len, (leaf + 1) * len) (and made its writes visible: the __syncthreads
// and __threadfence below). Inner nodes are stored after the leaves, level by level. Returns
// the root node to every thread of the block that completes the tree, NULL to the others (the
// same to all threads of a block). `flag` is one word of the block's shared memory.
static __device__ __forceinline__ const float* colsum_arrive(float* nodes, unsigned int* counters, int leaf,
                                                             int leaves, int len, unsigned int* flag) {
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int nthreads = blockDim.x * blockDim.y * blockDim.z;
  float* level = nodes;
  int n = leaves, idx = leaf;
  while (n > 1) {
    int parent = idx / COLSUM_FANIN, first = parent * COLSUM_FANIN;
    int children = min(COLSUM_FANIN, n - first);
    __threadfence();  // this block's node is visible before its arrival is counted
    __syncthreads();
    if (tid == 0) {
      unsigned int arrived = atomicAdd(&counters[parent], 1u);
      *flag = arrived == (unsigned int)children - 1;
      if (*flag) counters[parent] = 0u;  // every child has arrived: no one else touches it now
    }
    __syncthreads();
    if (!*flag) return NULL;
    __threadfence();  // the siblings' nodes, seen through L2 (__ldcg) after their arrivals
    float* up = level + (size_t)n * len;
    for (int i = tid; i < len; i += nthreads) {
      const float* c = level + (size_t)first * len + i;
      float s = __ldcg(c);
      for (int k = 1; k < children; k++) s += __ldcg(c + (size_t)k * len);
      up[(size_t)parent * len + i] = s;
    }
    counters += (n + COLSUM_FANIN - 1) / COLSUM_FANIN;
    level = up;
    idx = parent;
    n = (n + COLSUM_FANIN - 1) / COLSUM_FANIN;
  }
  __threadfence();
  __syncthreads();
  return level;
}

// The chunking of one column-sum kernel: `chunks` leaves of `rows` rows (the last may be
// shorter) per tree, `trees` trees (column tiles) of `len` floats per node.
typedef struct {
  int rows, chunks, trees, len;
} ColumnSumPlan;
// Rows per chunk: at least min_rows and a multiple of `multiple`, as few as give about
// target_chunks chunks, and enough that every node of every tree fits the kernel scratch and the
// counters fit theirs (else the call fails, naming the shape). Depends only on the shapes.
ColumnSumPlan plan_column_sums(const KernelCtx* ctx, const char* what, int N, int trees, int len, int min_rows,
                               int max_rows, int multiple, int target_chunks);
