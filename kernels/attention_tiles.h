// attention_tiles.h: the tile sizes of the fused attention kernels (kernels/cuda/attention.cu),
// one home for the kernels and for the timeline backend (kernels/timeline/kernels.c), which
// counts the work those tiles do. Plain C, no CUDA.
#ifndef FSDP_ATTENTION_TILES_H
#define FSDP_ATTENTION_TILES_H

// Head sizes up to 128 run the fused kernels, padded to a multiple of 16 (0: the simple path).
#define ATTN_PADDED_HEAD(D) ((D) <= 0 || (D) > 128 ? 0 : ((D) + 15) / 16 * 16)

// Forward: a CTA of 4 warps takes 128 query rows, 32 per warp; it loads keys in tiles of
// ATTN_FWD_KEYS (one cp.async pipeline stage) and runs the online softmax over steps of
// ATTN_FWD_STEP keys (the score registers of a step), for the padded head size dp.
#define ATTN_FWD_ROWS 128
#define ATTN_FWD_WARP_ROWS 32
#define ATTN_FWD_KEYS(dp) ((dp) <= 64 ? 128 : 64)
#define ATTN_FWD_STEP(dp) ((dp) <= 64 ? 64 : 32)

// Backward: a CTA of 8 warps takes 128 keys, 16 per warp, and loops over query tiles of 64 rows.
#define ATTN_BWD_WARPS 8
#define ATTN_BWD_KEYS 128
#define ATTN_BWD_ROWS 64

#endif
