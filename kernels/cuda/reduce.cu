// reduce.cu: deterministic column sums over rows, shared by the norm backward (dweight,
// dbias) and the matmul backward (dbias).
//
// No float atomics: the order of atomic adds depends on timing, so their sums would change
// bits from run to run. Instead the rows are cut into fixed chunks; one thread owns one
// (chunk, column) and sums its rows in increasing order into the ctx scratch; a second kernel
// adds the chunk partials of each column in increasing chunk order. The chunking depends only
// on the shapes (see common.cuh), so every run produces the same bits.
#include "kernels/cuda/common.cuh"

#define COL_THREADS 256
#define MIN_ROWS_PER_CHUNK 32  // partials add at most 1/32 of the input's size in traffic
#define MAX_CHUNKS 1024        // and the second pass at most 1024 adds per column

RowChunks plan_row_chunks(const KernelCtx* ctx, int N, int C, int vectors) {
  RowChunks rc = {0, 0};
  if (N <= 0 || C <= 0) return rc;
  size_t cap = ctx->scratch_bytes / sizeof(float) / ((size_t)vectors * (size_t)C);
  if (cap < 1) {
    char b[128];
    snprintf(b, sizeof b, "%d columns x %d partial vectors exceed the %zu-byte kernel scratch", C,
             vectors, ctx->scratch_bytes);
    cuda_fail("plan_row_chunks", b, __FILE__, __LINE__);
  }
  size_t chunks = ((size_t)N + MIN_ROWS_PER_CHUNK - 1) / MIN_ROWS_PER_CHUNK;
  if (chunks > MAX_CHUNKS) chunks = MAX_CHUNKS;
  if (chunks > cap) chunks = cap;
  rc.rows = (int)(((size_t)N + chunks - 1) / chunks);
  rc.chunks = (int)(((size_t)N + rc.rows - 1) / rc.rows);  // no empty trailing chunk
  return rc;
}

__global__ void finish_column_sums_kernel(float* out, const float* partials, int chunks, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += partials[(size_t)k * C + c];
  out[c] += s;
}

void finish_column_sums(KernelCtx* ctx, float* out, const float* partials, int chunks, int C) {
  if (chunks <= 0 || C <= 0) return;
  finish_column_sums_kernel<<<ceil_div(C, COL_THREADS), COL_THREADS, 0, ctx->stream>>>(out, partials, chunks, C);
  CUDA_LAUNCH_CHECK();
}

// grid (column tiles, chunks): thread (c, chunk) sums x[n, c] over the chunk's rows in order.
__global__ void column_partials_kernel(float* partials, const act16* x, int N, int C, int rows) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int chunk = blockIdx.y;
  int n0 = chunk * rows, n1 = min(N, n0 + rows);
  float s = 0.0f;
  for (int n = n0; n < n1; n++) s += act2f(x[(size_t)n * C + c]);
  partials[(size_t)chunk * C + c] = s;
}

void column_sums_accumulate(KernelCtx* ctx, float* out, const act16* x, int N, int C) {
  RowChunks rc = plan_row_chunks(ctx, N, C, 1);
  if (rc.chunks == 0) return;
  float* partials = (float*)ctx->scratch;
  dim3 grid(ceil_div(C, COL_THREADS), rc.chunks);
  column_partials_kernel<<<grid, COL_THREADS, 0, ctx->stream>>>(partials, x, N, C, rc.rows);
  CUDA_LAUNCH_CHECK();
  finish_column_sums(ctx, out, partials, rc.chunks, C);
}
