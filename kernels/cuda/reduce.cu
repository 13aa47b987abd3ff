// reduce.cu: deterministic column sums over rows, shared by the norm backward (dweight,
// dbias) and the matmul backward (dbias).
//
// No float atomics: the order of atomic adds depends on timing, so their sums would change
// bits from run to run. Instead the rows are cut into fixed chunks; one thread owns one
// (chunk, column) and sums its rows in increasing order into the ctx scratch; a second kernel
// adds the chunk partials of each column in a fixed order (FINISH_GROUPS interleaved runs over
// the chunks, then the runs in order). The chunking depends only on the shapes (see
// common.cuh), so every run produces the same bits.
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

// Block (FINISH_COLS, FINISH_GROUPS): thread (x, y) adds the partials of column
// c = blockIdx.x * FINISH_COLS + x over chunks y, y + FINISH_GROUPS, ... in increasing order;
// then thread (x, 0) adds the FINISH_GROUPS runs in order y = 0, 1, ... A column's chunks are
// spread over FINISH_GROUPS threads because a few thousand columns give too few threads to
// cover memory latency with one dependent add per chunk (one thread per column took 8 us on
// an H100 for gpt2-124m's 256 chunks of 768 columns). A warp reads 32 consecutive columns.
#define FINISH_COLS 32
#define FINISH_GROUPS 16
__global__ void finish_column_sums_kernel(float* out, const float* partials, int chunks, int C) {
  __shared__ float runs[FINISH_GROUPS][FINISH_COLS];
  int x = threadIdx.x, y = threadIdx.y, c = blockIdx.x * FINISH_COLS + x;
  float s = 0.0f;
  if (c < C)
    for (int k = y; k < chunks; k += FINISH_GROUPS) s += partials[(size_t)k * C + c];
  runs[y][x] = s;
  __syncthreads();
  if (y == 0 && c < C) {
    float t = runs[0][x];
    for (int g = 1; g < FINISH_GROUPS; g++) t += runs[g][x];
    out[c] += t;
  }
}

void finish_column_sums(KernelCtx* ctx, float* out, const float* partials, int chunks, int C) {
  if (chunks <= 0 || C <= 0) return;
  dim3 block(FINISH_COLS, FINISH_GROUPS);
  finish_column_sums_kernel<<<ceil_div(C, FINISH_COLS), block, 0, ctx->stream>>>(out, partials, chunks, C);
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
