// reduce.cu: the chunking of the deterministic column sums (column_sums.cuh) and the bias
// gradient of a linear layer, out[c] += sum over rows of x[n, c], in one launch.
//
// The bias sum reads its input once with 16-byte loads where the row allows (its memory floor:
// N x C 16-bit values; the partials add 1/rows of that), and finishes in the same launch
// through column_sums.cuh's tree of arrivals, one tree per column tile.
#include "kernels/cuda/column_sums.cuh"

ColumnSumPlan plan_column_sums(const KernelCtx* ctx, const char* what, int N, int trees, int len, int min_rows,
                               int max_rows, int multiple, int target_chunks) {
  ColumnSumPlan p = {0, 0, trees, len};
  if (N <= 0 || trees <= 0 || len <= 0) return p;
  char b[256];
  if (!ctx->counters) {
    snprintf(b, sizeof b, "%s: column sums need the compute stream's context (its scratch and counters)", what);
    cuda_fail("plan_column_sums", b, __FILE__, __LINE__);
  }
  int rows = (N + target_chunks - 1) / target_chunks;
  if (rows < min_rows) rows = min_rows;
  rows = (rows + multiple - 1) / multiple * multiple;
  for (;;) {
    int chunks = (N + rows - 1) / rows;
    size_t nodes = (size_t)colsum_tree_nodes(chunks) * trees * len, counters = (size_t)colsum_tree_counters(chunks) * trees;
    if (nodes * sizeof(float) <= ctx->scratch_bytes && counters <= ctx->ncounters) {
      p.rows = rows, p.chunks = chunks;
      return p;
    }
    if (rows >= max_rows || chunks == 1) {
      snprintf(b, sizeof b, "%s: %d rows x %d trees of %d partial sums exceed the %zu-byte kernel scratch or its %zu "
               "counters", what, N, trees, len, ctx->scratch_bytes, ctx->ncounters);
      cuda_fail("plan_column_sums", b, __FILE__, __LINE__);
    }
    rows = rows * 2 < max_rows ? rows * 2 : max_rows;
  }
}

// Block (32, BIAS_ROW_LANES): thread (x, y) sums pack x (W columns) of the block's column tile
// over rows y, y + BIAS_ROW_LANES, ... of its chunk, in order; the row lanes' sums are then added
// in order y = 0, 1, ... (a fixed tree), giving the chunk's leaf. Grid (column tiles, chunks);
// each column tile is one tree of column_sums.cuh.
#define BIAS_ROW_LANES 8
#define BIAS_TILE_PACKS 32
__global__ void bias_sums_kernel(float* __restrict__ out, float* __restrict__ nodes, unsigned int* counters,
                                 const act16* __restrict__ x, int N, int C, int rows, int chunks, int wide) {
  __shared__ float lanes[BIAS_ROW_LANES][BIAS_TILE_PACKS * 8];
  __shared__ unsigned int flag;
  const int W = wide ? 8 : 1, len = BIAS_TILE_PACKS * W;
  int px = threadIdx.x, y = threadIdx.y, tid = y * BIAS_TILE_PACKS + px;
  int tile = blockIdx.x, chunk = blockIdx.y;
  int c0 = tile * len + px * W;
  int n0 = chunk * rows, n1 = min(N, n0 + rows);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (c0 < C) {
    if (wide) {
      for (int n = n0 + y; n < n1; n += BIAS_ROW_LANES) {
        ActPack<8> v = load_pack<8>(x + (size_t)n * C + c0);
#pragma unroll
        for (int j = 0; j < 8; j++) acc[j] += act2f(v.v[j]);
      }
    } else {
      for (int n = n0 + y; n < n1; n += BIAS_ROW_LANES) acc[0] += act2f(x[(size_t)n * C + c0]);
    }
  }
  for (int j = 0; j < W; j++) lanes[y][px * W + j] = acc[j];
  __syncthreads();
  // The chunk's leaf of this tile's tree: the row lanes added in order.
  float* leaf = nodes + ((size_t)tile * colsum_tree_nodes(chunks) + chunk) * len;
  for (int i = tid; i < len; i += BIAS_ROW_LANES * BIAS_TILE_PACKS) {
    float s = lanes[0][i];
    for (int k = 1; k < BIAS_ROW_LANES; k++) s += lanes[k][i];
    leaf[i] = s;
  }
  const float* root = colsum_arrive(nodes + (size_t)tile * colsum_tree_nodes(chunks) * len,
                                    counters + (size_t)tile * colsum_tree_counters(chunks), chunk, chunks, len, &flag);
  if (!root) return;
  for (int i = tid; i < len; i += BIAS_ROW_LANES * BIAS_TILE_PACKS)
    if (tile * len + i < C) out[tile * len + i] += __ldcg(root + i);
}

void column_sums_accumulate(KernelCtx* ctx, float* out, const act16* x, int N, int C) {
  if (N <= 0 || C <= 0) return;
  int wide = pack_width(C, x) == 8;
  int len = BIAS_TILE_PACKS * (wide ? 8 : 1), tiles = ceil_div(C, len);
  // About 256 chunks of at least 16 rows: 2 bytes x 16 rows of input per 4-byte partial.
  ColumnSumPlan p = plan_column_sums(ctx, "bias gradient", N, tiles, len, 16, 1 << 20, BIAS_ROW_LANES, 256);
  dim3 grid(tiles, p.chunks), block(BIAS_TILE_PACKS, BIAS_ROW_LANES);
  bias_sums_kernel<<<grid, block, 0, ctx->stream>>>(out, (float*)ctx->scratch, ctx->counters, x, N, C, p.rows,
                                                     p.chunks, wide);
  CUDA_LAUNCH_CHECK();
}
