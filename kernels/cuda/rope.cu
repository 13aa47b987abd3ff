// rope.cu: rotary position embeddings (Llama), forward and backward, in place on 16-bit rows.
// The host takes a head's D/2 frequencies from kernels/rope.h, the same table the CPU backend
// uses, and passes them by value; a thread turns one pair (a, b) of one head of one row at the
// angle position x frequency (rounded to fp32 as on the CPU), reading and writing only that
// pair, so the call is deterministic and a row's other columns are left alone.
#include "kernels/cuda/common.cuh"
#include "kernels/rope.h"

#define ROPE_THREADS 256

struct RopeFreqs {
  float f[ROPE_MAX_HEAD / 2];
};

// Pair i of head h of row n: columns h*D + i and h*D + i + D/2; sign -1 turns back (backward).
__global__ void rope_kernel(act16* x, RopeFreqs fr, int N, int T, int heads, int D, int stride, float sign) {
  int half = D / 2;
  size_t total = (size_t)N * heads * half;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
    int i = (int)(e % half);
    size_t nh = e / half;
    int h = (int)(nh % heads), n = (int)(nh / heads);
    float angle = (float)(n % T) * fr.f[i], s, c;
    sincosf(angle, &s, &c);
    s *= sign;
    act16* a = x + (size_t)n * stride + (size_t)h * D + i;
    float av = act2f(a[0]), bv = act2f(a[half]);
    a[0] = f2act(av * c - bv * s);
    a[half] = f2act(bv * c + av * s);
  }
}

static void rotate(KernelCtx* ctx, act_t* x, RopeConfig r, int N, int T, int heads, int D, int stride, float sign) {
  if (D % 2 || D > ROPE_MAX_HEAD) {
    fprintf(stderr, "error: rope: head size %d must be even and at most %d\n", D, ROPE_MAX_HEAD);
    exit(1);
  }
  size_t total = (size_t)N * heads * (D / 2);
  if (!total) return;
  RopeFreqs fr;
  rope_frequencies(r, D, fr.f);
  rope_kernel<<<grid_for(total, ROPE_THREADS), ROPE_THREADS, 0, ctx->stream>>>(as_act16(x), fr, N, T, heads, D, stride, sign);
  CUDA_LAUNCH_CHECK();
}

extern "C" void rope_forward(KernelCtx* ctx, act_t* x, RopeConfig r, int N, int T, int heads, int D, int stride) {
  rotate(ctx, x, r, N, T, heads, D, stride, 1.0f);
}

// The rotation is orthogonal: its gradient is the rotation by the opposite angle.
extern "C" void rope_backward(KernelCtx* ctx, act_t* dx, RopeConfig r, int N, int T, int heads, int D, int stride) {
  rotate(ctx, dx, r, N, T, heads, D, stride, -1.0f);
}
