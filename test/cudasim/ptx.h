// ptx.h: the PTX instructions the kernels use, as pure functions of a whole warp's registers
// (ptx.cpp), each from the PTX ISA section kernels/cuda/ptx.cuh cites. The executor glue in
// ptx.cpp gathers the lanes' registers with a warp exchange and applies these; the unit test
// (test_ptx.cpp) checks the fragment tables against the ISA's figures.
#pragma once
#include <stdint.h>

namespace cudasim {

struct RowCol {
  int row, col;
};

// mma.m16n8k16 with .bf16 or .f16 inputs and .f32 accumulators (PTX ISA 9.7.14.5.8, "Matrix Fragments
// for mma.m16n8k16 with floating point type"). Element e of a lane's fragment:
//   A (16x16): e = 0..7, two per b32 register a0..a3 (register e/2, lower half first)
//   B (16x8, k x n): e = 0..3, registers b0, b1
//   C/D (16x8): e = 0..3, one f32 each
RowCol mma_a_elem(int lane, int e);
RowCol mma_b_elem(int lane, int e);
RowCol mma_c_elem(int lane, int e);

// The 16-bit input type of an mma: .bf16 or .f16 (the same fragment layout).
enum MmaType { MMA_BF16, MMA_F16 };
// d = a b + c for a warp: a[lane][4], b[lane][2] (pairs of `type`), c/d[lane][4]. Each output
// is c plus the 16 products, accumulated in fp32 in k order (the tensor core's internal order
// and rounding are not specified; the products of bf16 or of f16 values are exact in fp32:
// 8 + 8 and 11 + 11 significant bits fit in fp32's 24).
void mma_m16n8k16(MmaType type, const uint32_t a[32][4], const uint32_t b[32][2], const float c[32][4],
                  float d[32][4]);

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (PTX ISA 9.7.14.5.15): lane l gives the
// address of row (l % 8) of matrix (l / 8); register i of lane l receives elements (l/4,
// 2(l%4)) and (l/4, 2(l%4)+1) of matrix i, or with .trans, (2(l%4), l/4) and (2(l%4)+1, l/4).
// `row[m][r]` is the 8-element row r of matrix m, as read from the addresses.
void ldmatrix_x4(const uint16_t row[4][8][8], int trans, uint32_t out[32][4]);

// ex2.approx.ftz.f32 (PTX ISA 9.7.3.22): 2^x with subnormal inputs and results flushed to zero.
float ex2_approx_ftz(float x);

}  // namespace cudasim
