// ptx.cpp: PTX emulation. The pure functions of ptx.h (fragment tables, the mma product,
// ldmatrix's distribution of rows to lanes, ex2) and the glue that runs them as warp
// collectives in the executor: every lane contributes its registers or row address, and
// after the exchange each lane computes its own result registers.
#include "test/cudasim/ptx.h"

#include <math.h>
#include <string.h>

#include "test/cudasim/exec.h"
#include "test/cudasim/order.h"
#include "test/cudasim/include/cuda_bf16.h"
#include "test/cudasim/include/cuda_fp16.h"
#include "test/cudasim/sim.h"

namespace cudasim {

// groupID = lane / 4, threadID_in_group = lane % 4 (the ISA's names).
RowCol mma_a_elem(int lane, int e) {
  const int g = lane >> 2, t = lane & 3;
  return RowCol{g + ((e & 2) ? 8 : 0), 2 * t + (e & 1) + ((e & 4) ? 8 : 0)};
}
RowCol mma_b_elem(int lane, int e) {
  const int g = lane >> 2, t = lane & 3;
  return RowCol{2 * t + (e & 1) + ((e & 2) ? 8 : 0), g};
}
RowCol mma_c_elem(int lane, int e) {
  const int g = lane >> 2, t = lane & 3;
  return RowCol{g + ((e & 2) ? 8 : 0), 2 * t + (e & 1)};
}

static float half_of(MmaType type, uint32_t reg, int hi) {
  const uint16_t bits = (uint16_t)(hi ? reg >> 16 : reg & 0xffff);
  return type == MMA_F16 ? cudasim_h_bits2f(bits) : cudasim_bf_bits2f(bits);
}

// The product's outputs for one lane (the executor computes only the running lane's).
static void mma_lane(MmaType type, const uint32_t a[32][4], const uint32_t b[32][2], int lane, const float c[4], float d[4]) {
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    for (int e = 0; e < 8; e++) {
      RowCol rc = mma_a_elem(l, e);
      A[rc.row][rc.col] = half_of(type, a[l][e >> 1], e & 1);
    }
    for (int e = 0; e < 4; e++) {
      RowCol rc = mma_b_elem(l, e);
      B[rc.row][rc.col] = half_of(type, b[l][e >> 1], e & 1);
    }
  }
  for (int e = 0; e < 4; e++) {
    RowCol rc = mma_c_elem(lane, e);
    float acc = c[e];
    for (int k = 0; k < 16; k++) acc += A[rc.row][k] * B[k][rc.col];
    d[e] = acc;
  }
}

void mma_m16n8k16(MmaType type, const uint32_t a[32][4], const uint32_t b[32][2], const float c[32][4],
                  float d[32][4]) {
  for (int l = 0; l < 32; l++) mma_lane(type, a, b, l, c[l], d[l]);
}

void ldmatrix_x4(const uint16_t row[4][8][8], int trans, uint32_t out[32][4]) {
  for (int l = 0; l < 32; l++)
    for (int m = 0; m < 4; m++) {
      const int r = l >> 2, c = 2 * (l & 3);
      uint16_t lo = trans ? row[m][c][r] : row[m][r][c];
      uint16_t hi = trans ? row[m][c + 1][r] : row[m][r][c + 1];
      out[l][m] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}

float ex2_approx_ftz(float x) {
  if (fpclassify(x) == FP_SUBNORMAL) x = copysignf(0.0f, x);
  float y = exp2f(x);
  if (fpclassify(y) == FP_SUBNORMAL) y = 0.0f;
  return y;
}

}  // namespace cudasim

using namespace cudasim;

extern "C" void cudasim_ldmatrix_x4(uint32_t r[4], const void* p, int trans, const char* file, int line) {
  SimThread* t = g_cur;
  if (!t) fatal("api", "ldmatrix called from host code");
  char who[256], wd[256];
  if ((uintptr_t)p & 15) {
    describe_thread(who, sizeof who);
    report("misaligned", "ldmatrix at %s:%d: %s gives row address %p, which is not 16-byte aligned", file, line, who,
           p);
  }
  if (!is_shared(p, 16)) {
    describe_thread(who, sizeof who);
    describe_address(p, wd, sizeof wd);
    report("memcheck", "ldmatrix at %s:%d: %s gives row address %s, not 16 bytes of shared memory", file, line, who,
           wd);
  }
  // This lane's row is read by this lane (for the race and init checks) when it arrives.
  device_access(p, 16, 0, __builtin_return_address(0));
  const void* addrs[32];
  cudasim_warp_exchange(0xffffffffu, &p, addrs, sizeof p, trans ? "ldmatrix.x4.trans" : "ldmatrix.x4", file, line);
  uint16_t rows[4][8][8];
  for (int m = 0; m < 4; m++)
    for (int rr = 0; rr < 8; rr++) memcpy(rows[m][rr], addrs[m * 8 + rr], 16);
  uint32_t out[32][4];
  ldmatrix_x4(rows, trans, out);
  memcpy(r, out[t->lane], sizeof out[0]);
}

extern "C" void cudasim_mma_m16n8k16(int f16, float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1,
                                     const char* file, int line) {
  SimThread* t = g_cur;
  if (!t) fatal("api", "mma called from host code");
  struct Frag {
    uint32_t a[4], b[2];
    float c[4];
  } mine, all[32];
  memcpy(mine.a, a, sizeof mine.a);
  mine.b[0] = b0, mine.b[1] = b1;
  memcpy(mine.c, c, sizeof mine.c);
  cudasim_warp_exchange(0xffffffffu, &mine, all, sizeof mine, "mma.m16n8k16", file, line);
  uint32_t A[32][4], B[32][2];
  for (int l = 0; l < 32; l++) {
    memcpy(A[l], all[l].a, sizeof A[l]);
    memcpy(B[l], all[l].b, sizeof B[l]);
  }
  float d[4];
  mma_lane(f16 ? MMA_F16 : MMA_BF16, A, B, t->lane, mine.c, d);
  memcpy(c, d, sizeof d);
}

extern "C" float cudasim_ex2_approx_ftz(float x) { return ex2_approx_ftz(x); }

// ld.acquire / red.release on a global flag (ptx.cuh flag_load_acquire, flag_wait_eq,
// flag_release_add). Blocks run one at a time, so every block a wait may depend on on a GPU (one
// that started before it) has finished here: the flag already holds its final value for this
// wait, and any other value is a wait that would hang (a missing release, a wrong count, or a
// release due from a block that started later, which a GPU need not run while this one spins).
// The acquire and the release are the blocks' happens-before edges (order.h hb_acquire,
// hb_release); the flag word itself is a synchronizing access, not checked as a race.
static void flag_access(const int* flag, int is_write, const char* op, const char* file, int line) {
  SimThread* t = g_cur;
  if (!t) fatal("api", "%s called from host code", op);
  char who[256], wd[256];
  if ((uintptr_t)flag & 3) {
    describe_thread(who, sizeof who);
    report("misaligned", "%s at %s:%d: %s gives flag address %p, not 4-byte aligned", op, file, line, who,
           (const void*)flag);
  }
  if (is_shared(flag, 4) || !find_allocation(flag)) {
    describe_thread(who, sizeof who);
    describe_address(flag, wd, sizeof wd);
    report("memcheck", "%s at %s:%d: %s: flag %s is not global memory", op, file, line, who, wd);
  }
  hb_sync_access = 1;
  device_access(flag, 4, is_write, __builtin_return_address(0));
  hb_sync_access = 0;
}

// An acquire load issued ahead of its check: it reads the flag as it was before its latest
// release, which a GPU may not have made yet when the load ran (so the kernel's own wait must
// follow, and is exercised here).
extern "C" int cudasim_flag_load_acquire(const int* flag, const char* file, int line) {
  flag_access(flag, 0, "ld.acquire.gpu (flag load)", file, line);
  int delta;
  hb_acquire_early(flag, &delta);
  return *flag - delta;
}

extern "C" void cudasim_flag_wait_eq(const int* flag, int value, const char* file, int line) {
  flag_access(flag, 0, "ld.acquire.gpu (flag wait)", file, line);
  hb_acquire(flag);
  if (*flag == value) return;
  char who[256];
  describe_thread(who, sizeof who);
  report("divergence", "deadlock at %s:%d: %s waits for its flag to reach %d, but it holds %d after every block "
         "launched before this one has finished (a missing or miscounted release, or one due from a later block)",
         file, line, who, value, *flag);
}

extern "C" void cudasim_flag_release_add(int* flag, int v, const char* file, int line) {
  flag_access(flag, 1, "red.release.gpu (flag release)", file, line);
  hb_release(flag, v);
  *flag += v;
}
