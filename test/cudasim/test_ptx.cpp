// test_ptx.cpp: the PTX emulation's tables against the PTX ISA, without the executor.
//   - The mma.m16n8k16 fragment tables (9.7.14.5.8): each of A, B and C covers its matrix
//     exactly once over the 32 lanes, and sample entries read off the ISA's figures match.
//   - The emulated mma equals a plain matrix product on random bf16 values, and on random f16
//     values that bf16 cannot hold (exact: the inputs are chosen so every partial sum is exact
//     in fp32); the same registers read as the other type give another product.
//   - ldmatrix .x4 and .x4.trans (9.7.14.5.15) deliver the elements the ISA's figure shows,
//     and ldmatrix fragments feed mma as the attention kernel uses them (A row-major, B given
//     n-major for the "q.k" form).
//   - ex2.approx.ftz: flushes subnormals, ex2(-inf) = +0.
//   - cuda_fp16.h's conversions against the compiler's IEEE _Float16: every half to float and
//     back, every tie between neighbouring halves (to even), a million floats across the range,
//     and the edges (65504, 65520 to inf, subnormals, -0).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "test/cudasim/include/cuda_bf16.h"
#include "test/cudasim/include/cuda_fp16.h"
#include "test/cudasim/ptx.h"
#include "test/test.h"

using namespace cudasim;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32() {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}
// A small integer times a power of two, never zero: products and sums of 16 of them are exact.
static float small_value() {
  int v = (int)(next_u32() % 15) - 7;
  if (!v) v = 3;
  return (float)v * 0.25f;
}
static uint16_t bf(float f) { return cudasim_f2bf_bits(f); }
// For the .f16 mma: a small_value with 9 significant bits (bf16 keeps 8, so these are f16-only
// values); products and sums of 16 of them still fit fp32's 24 bits.
static float f16_value() { return small_value() * (1.0f + (float)(1 + next_u32() % 3) / 64.0f); }

static void test_tables() {
  struct {
    const char* name;
    RowCol (*f)(int, int);
    int elems, rows, cols;
  } t[] = {{"A", mma_a_elem, 8, 16, 16}, {"B", mma_b_elem, 4, 16, 8}, {"C", mma_c_elem, 4, 16, 8}};
  for (auto& m : t) {
    int seen[16][16] = {{0}}, bad = 0;
    for (int l = 0; l < 32; l++)
      for (int e = 0; e < m.elems; e++) {
        RowCol rc = m.f(l, e);
        if (rc.row < 0 || rc.row >= m.rows || rc.col < 0 || rc.col >= m.cols) bad++;
        else seen[rc.row][rc.col]++;
      }
    for (int r = 0; r < m.rows; r++)
      for (int c = 0; c < m.cols; c++) bad += seen[r][c] != 1;
    char name[96];
    snprintf(name, sizeof name, "mma.m16n8k16 %s fragment covers its %dx%d matrix exactly once", m.name, m.rows, m.cols);
    EXPECT(name, bad == 0, "%d elements missing, doubled or out of range", bad);
  }
  // Entries read off the ISA figures (lane: groupID = lane>>2, threadID_in_group = lane%4).
  RowCol a = mma_a_elem(5, 3);  // lane 5: g=1, t=1; a3 is row g+8, column 2t+1
  EXPECT("A: lane 5, a3 = (row 9, col 3)", a.row == 9 && a.col == 3, "got (%d,%d)", a.row, a.col);
  a = mma_a_elem(30, 6);  // g=7, t=2; a6 is row g+8, column 2t+8
  EXPECT("A: lane 30, a6 = (row 15, col 12) (a0,a1,a4,a5 on row g; a2,a3,a6,a7 on row g+8)",
         a.row == 15 && a.col == 12, "got (%d,%d)", a.row, a.col);
  RowCol b = mma_b_elem(6, 2);  // g=1, t=2; b2 is row (k) 2t+8, column g
  EXPECT("B: lane 6, b2 = (k 12, n 1)", b.row == 12 && b.col == 1, "got (%d,%d)", b.row, b.col);
  RowCol c = mma_c_elem(31, 3);  // g=7, t=3; c3 is row g+8, column 2t+1
  EXPECT("C: lane 31, c3 = (row 15, col 7)", c.row == 15 && c.col == 7, "got (%d,%d)", c.row, c.col);
}

// The emulated mma of the fragments against the plain product of the matrices they hold:
// the number of output elements that differ.
// The emulated mma of the fragments against the plain product of the matrices they hold:
// the number of output elements that differ.
static int mma_errors(MmaType type, const uint32_t a[32][4], const uint32_t b[32][2], const float c[32][4],
                      const float A[16][16], const float B[16][8], const float C[16][8]) {
  float d[32][4];
  mma_m16n8k16(type, a, b, c, d);
  int bad = 0;
  for (int l = 0; l < 32; l++)
    for (int e = 0; e < 4; e++) {
      RowCol rc = mma_c_elem(l, e);
      float want = C[rc.row][rc.col];
      for (int k = 0; k < 16; k++) want += A[rc.row][k] * B[k][rc.col];
      bad += d[l][e] != want;
    }
  return bad;
}

static void test_mma(MmaType type) {
  const char* tn = type == MMA_F16 ? ".f16" : ".bf16";
  float (*value)() = type == MMA_F16 ? f16_value : small_value;
  auto bits = [type](float f) { return type == MMA_F16 ? cudasim_f2h_bits(f) : bf(f); };
  float A[16][16], B[16][8], C[16][8];
  for (int r = 0; r < 16; r++)
    for (int k = 0; k < 16; k++) A[r][k] = value();
  for (int k = 0; k < 16; k++)
    for (int n = 0; n < 8; n++) B[k][n] = value();
  for (int r = 0; r < 16; r++)
    for (int n = 0; n < 8; n++) C[r][n] = value();
  uint32_t a[32][4] = {{0}}, b[32][2] = {{0}};
  float c[32][4];
  for (int l = 0; l < 32; l++) {
    for (int e = 0; e < 8; e++) {
      RowCol rc = mma_a_elem(l, e);
      a[l][e >> 1] |= (uint32_t)bits(A[rc.row][rc.col]) << (16 * (e & 1));
    }
    for (int e = 0; e < 4; e++) {
      RowCol rc = mma_b_elem(l, e);
      b[l][e >> 1] |= (uint32_t)bits(B[rc.row][rc.col]) << (16 * (e & 1));
      RowCol cc = mma_c_elem(l, e);
      c[l][e] = C[cc.row][cc.col];
    }
  }
  int bad = mma_errors(type, a, b, c, A, B, C);
  EXPECT(type == MMA_F16 ? "mma.m16n8k16.f16: D = A B + C for every output element (9-bit values)"
                         : "mma.m16n8k16.bf16: D = A B + C for every output element",
         bad == 0, "%d of 128 elements differ", bad);
  // The same registers read as the other type give another product: the type is honoured.
  bad = mma_errors(type == MMA_F16 ? MMA_BF16 : MMA_F16, a, b, c, A, B, C);
  char name[128];
  snprintf(name, sizeof name, "mma.m16n8k16 of %s registers read as the other type differs (the check can fail)", tn);
  EXPECT(name, bad > 0, "the wrong type went unnoticed");
  // A fault the table test must see: b0/b1 swapped changes the product.
  for (int l = 0; l < 32; l++) {
    uint32_t tmp = b[l][0];
    b[l][0] = b[l][1], b[l][1] = tmp;
  }
  bad = mma_errors(type, a, b, c, A, B, C);
  snprintf(name, sizeof name, "mma.m16n8k16%s with b0/b1 swapped gives a different product (the check can fail)", tn);
  EXPECT(name, bad > 0, "the swap went unnoticed");
}

static void test_ldmatrix() {
  uint16_t rows[4][8][8];
  for (int m = 0; m < 4; m++)
    for (int r = 0; r < 8; r++)
      for (int c = 0; c < 8; c++) rows[m][r][c] = (uint16_t)(m * 64 + r * 8 + c);  // element id
  uint32_t out[32][4], outt[32][4];
  ldmatrix_x4(rows, 0, out);
  ldmatrix_x4(rows, 1, outt);
  int bad = 0, badt = 0;
  for (int l = 0; l < 32; l++)
    for (int m = 0; m < 4; m++) {
      // 9.7.14.5.15: lane l holds row l/4, columns 2(l%4), 2(l%4)+1 of matrix m.
      uint32_t want = (uint32_t)(m * 64 + (l >> 2) * 8 + 2 * (l & 3)) |
                      ((uint32_t)(m * 64 + (l >> 2) * 8 + 2 * (l & 3) + 1) << 16);
      bad += out[l][m] != want;
      uint32_t wantt = (uint32_t)(m * 64 + (2 * (l & 3)) * 8 + (l >> 2)) |
                       ((uint32_t)(m * 64 + (2 * (l & 3) + 1) * 8 + (l >> 2)) << 16);
      badt += outt[l][m] != wantt;
    }
  EXPECT("ldmatrix.x4: lane l gets row l/4, columns 2(l%4)..+1 of each matrix", bad == 0, "%d registers differ", bad);
  EXPECT("ldmatrix.x4.trans: lane l gets rows 2(l%4)..+1 of column l/4", badt == 0, "%d registers differ", badt);

  // ldmatrix composed with mma as mma_rows_nk does (S = Q K^T): A rows from a row-major
  // 16x16 tile, B from a K tile stored [n][k]; matrix m of the x4 load of B covers n rows
  // 8*(m>>1).., k columns 8*(m&1)..; its registers 0/1 are b0/b1 of the n-tile 0.
  float Q[16][16], K[8][16];
  for (int r = 0; r < 16; r++)
    for (int k = 0; k < 16; k++) Q[r][k] = small_value();
  for (int n = 0; n < 8; n++)
    for (int k = 0; k < 16; k++) K[n][k] = small_value();
  uint16_t qa[4][8][8], kb[4][8][8];
  for (int m = 0; m < 4; m++)
    for (int r = 0; r < 8; r++)
      for (int c = 0; c < 8; c++) {
        // A via ldsm_x4(a_rows + (lane & 15) * LD + (lane >> 4) * 8): lanes 0-15 give rows
        // 0-15 at column 0, lanes 16-31 rows 0-15 at column 8; matrix m = lanes 8m..8m+7.
        int lane = m * 8 + r;
        qa[m][r][c] = bf(Q[lane & 15][(lane >> 4) * 8 + c]);
        // B via ldsm_x4(b_nk + ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8):
        // n row (lane & 7) + 8 (lane >> 4) (only n < 8 used here: matrices 0 and 1).
        int n = (lane & 7) + ((lane >> 4) << 3), k0 = ((lane >> 3) & 1) * 8;
        kb[m][r][c] = n < 8 ? bf(K[n][k0 + c]) : 0;
      }
  uint32_t af[32][4], bfr[32][4], b2[32][2];
  ldmatrix_x4(qa, 0, af);
  ldmatrix_x4(kb, 0, bfr);
  float zero[32][4] = {{0}}, d[32][4];
  for (int l = 0; l < 32; l++) b2[l][0] = bfr[l][0], b2[l][1] = bfr[l][1];
  mma_m16n8k16(MMA_BF16, af, b2, zero, d);
  bad = 0;
  for (int l = 0; l < 32; l++)
    for (int e = 0; e < 4; e++) {
      RowCol rc = mma_c_elem(l, e);
      float want = 0;
      for (int k = 0; k < 16; k++) want += Q[rc.row][k] * K[rc.col][k];
      bad += d[l][e] != want;
    }
  EXPECT("ldmatrix + mma as the attention kernel uses them compute Q K^T", bad == 0, "%d of 128 differ", bad);
}

static void test_ex2() {
  EXPECT("ex2(-inf) = +0", ex2_approx_ftz(-INFINITY) == 0.0f && !signbit(ex2_approx_ftz(-INFINITY)), "%g", ex2_approx_ftz(-INFINITY));
  EXPECT("ex2(3) = 8", ex2_approx_ftz(3.0f) == 8.0f, "%g", ex2_approx_ftz(3.0f));
  EXPECT("ex2 flushes a subnormal result to 0 (-130)", ex2_approx_ftz(-130.0f) == 0.0f, "%g",
         ex2_approx_ftz(-130.0f));
  EXPECT("ex2 flushes a subnormal input: ex2(1e-40) = 1", ex2_approx_ftz(1e-40f) == 1.0f, "%g",
         ex2_approx_ftz(1e-40f));
  float x = 0.3f, y = ex2_approx_ftz(x);
  EXPECT("ex2(0.3) within 2^-22 relative", fabs((double)y - pow(2.0, 0.3)) <= pow(2.0, 0.3) * 2.4e-7, "%.9g", y);
}

static uint16_t ref_f2h(float f) {  // the compiler's IEEE conversion (round to nearest even)
  _Float16 h = (_Float16)f;
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}
static float bits_f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void test_half() {
  int bad = 0, first = -1;
  for (uint32_t h = 0; h < 65536; h++) {  // half -> float exact, and back unchanged
    float f = cudasim_h_bits2f((uint16_t)h);
    _Float16 r;
    uint16_t hb = (uint16_t)h;
    memcpy(&r, &hb, 2);
    int nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
    int ok = nan ? (isnan(f) && isnan((float)r) && (cudasim_f2h_bits(f) & 0x7e00) == 0x7e00)
                 : (f == (float)r && signbit(f) == signbit((float)r) && cudasim_f2h_bits(f) == h);
    if (!ok && !bad++) first = (int)h;
  }
  EXPECT("every half -> float is exact and converts back to itself (NaNs stay quiet NaNs)", !bad, "%d bad, first 0x%04x", bad, first);
  bad = 0;
  for (uint32_t h = 0; h < 0x7bff; h++) {  // the float halfway between two neighbours: to even
    float lo = cudasim_h_bits2f((uint16_t)h), hi = cudasim_h_bits2f((uint16_t)(h + 1));
    float mid = lo + (hi - lo) / 2;  // exact: halves have 11 significant bits
    uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    if (cudasim_f2h_bits(mid) != want || ref_f2h(mid) != want || cudasim_f2h_bits(-mid) != (want | 0x8000) ||
        cudasim_f2h_bits(nextafterf(mid, 0)) != h || cudasim_f2h_bits(nextafterf(mid, INFINITY)) != h + 1)
      if (!bad++) first = (int)h;
  }
  EXPECT("every tie between neighbouring halves rounds to even, and a float ulp off it to the nearer", !bad, "%d bad, first 0x%04x", bad, first);
  bad = 0;
  uint32_t worst = 0;
  for (uint64_t u = 0; u < 0x100000000ull; u += 4093) {  // a million floats over every exponent
    float f = bits_f((uint32_t)u);
    uint16_t got = cudasim_f2h_bits(f), want = ref_f2h(f);
    if (isnan(f) ? (got & 0x7e00) != 0x7e00 : got != want)
      if (!bad++) worst = (uint32_t)u;
  }
  EXPECT("a million floats across the range convert as IEEE _Float16 does", !bad, "%d bad, first 0x%08x", bad, worst);
  EXPECT("65504 is the largest half (0x7bff)", cudasim_f2h_bits(65504.0f) == 0x7bff, "0x%04x", cudasim_f2h_bits(65504.0f));
  EXPECT("65519.996 rounds down to 65504", cudasim_f2h_bits(nextafterf(65520.0f, 0)) == 0x7bff, "0x%04x",
         cudasim_f2h_bits(nextafterf(65520.0f, 0)));
  EXPECT("65520 (the tie with 65536) rounds to inf", cudasim_f2h_bits(65520.0f) == 0x7c00 && cudasim_f2h_bits(-1e9f) == 0xfc00,
         "0x%04x", cudasim_f2h_bits(65520.0f));
  EXPECT("2^-24 is the smallest subnormal; 2^-25 ties to 0; 1.5 x 2^-25 rounds up to it",
         cudasim_f2h_bits(ldexpf(1, -24)) == 1 && cudasim_f2h_bits(ldexpf(1, -25)) == 0 && cudasim_f2h_bits(ldexpf(1.5f, -25)) == 1,
         "0x%04x 0x%04x", cudasim_f2h_bits(ldexpf(1, -24)), cudasim_f2h_bits(ldexpf(1, -25)));
  EXPECT("-0 stays -0, and a subnormal sum rounds into the smallest normal", cudasim_f2h_bits(-0.0f) == 0x8000 &&
         cudasim_f2h_bits(ldexpf(1023.75f, -24)) == 0x0400, "0x%04x", cudasim_f2h_bits(ldexpf(1023.75f, -24)));
  __half2 v = __floats2half2_rn(1.5f, -2.25f);
  EXPECT("__half2 holds both halves", __low2float(v) == 1.5f && __high2float(v) == -2.25f, "%g %g", __low2float(v), __high2float(v));
}

int main() {
  test_half();
  test_tables();
  test_mma(MMA_BF16);
  test_mma(MMA_F16);
  test_ldmatrix();
  test_ex2();
  return test_summary();
}
