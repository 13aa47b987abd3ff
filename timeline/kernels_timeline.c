// kernels_timeline.c: kernels.h for the timeline: each call computes nothing and adds to its
// stream the time the CUDA kernel would take, from the exact FLOPs and bytes of the call:
//   max(FLOPs / (peak x matmul or attention efficiency), bytes / (HBM x efficiency)) + launch gap
// (a roofline; catalogue.c cites each constant). Bytes are what the CUDA kernels read and write
// once each: bf16 activations and parameters (act_t is bf16 bits in this build, as in
// train_gpt), fp32 gradients, statistics and optimizer state.
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/position_bucket.h"
#include "timeline/timeline.h"

struct KernelCtx {
  StreamId stream;
};
static KernelCtx contexts[3] = {{STREAM_COMPUTE}, {STREAM_ALL_GATHER}, {STREAM_REDUCE_SCATTER}};

#define A ((double)sizeof(act_t))

typedef enum { RATE_MATMUL, RATE_ATTENTION } Rate;

// The duration of one kernel on this GPU.
static double kernel_seconds(double flops, Rate rate, double bytes) {
  const GpuSpec* g = &timeline_cluster()->gpu;
  double eff = rate == RATE_MATMUL ? g->matmul_eff : g->attention_eff;
  double compute = flops / (g->peak_flops * eff), memory = bytes / (g->hbm_bytes_s * g->hbm_eff);
  return (compute > memory ? compute : memory) + g->launch_s;
}

static void run(KernelCtx* ctx, const char* what, double seconds) {
  timeline_kernel(ctx ? ctx->stream : STREAM_COMPUTE, seconds, what);
}

// An elementwise or reduction kernel: bound by its bytes.
static void streaming(KernelCtx* ctx, const char* what, double bytes) { run(ctx, what, kernel_seconds(0, RATE_MATMUL, bytes)); }

KernelCtx* kernels_init(int device) {
  timeline_call(__func__);
  (void)device;
  (void)timeline_cluster();  // refuses to start unconfigured
  return &contexts[0];
}
void kernels_shutdown(KernelCtx* ctx) {
  timeline_call(__func__);
  (void)ctx;
}
KernelCtx* kernels_stream_ctx(KernelCtx* ctx, int stream) {
  timeline_call(__func__);
  (void)ctx;
  return &contexts[stream];
}
const char* kernels_backend(void) {
  timeline_call(__func__);
  return "timeline";
}
void kernels_device_name(KernelCtx* ctx, char* out, size_t len) {
  timeline_call(__func__);
  (void)ctx;
  snprintf(out, len, "%s", timeline_cluster()->gpu.label);
}

void embedding_forward(KernelCtx* ctx, act_t* out, const int32_t* tokens, const act_t* wte, const act_t* wpe,
                       int N, int T, int C) {
  timeline_call(__func__);
  double NC = (double)N * C;
  streaming(ctx, __func__, NC * A * (wpe ? 3 : 2) + 4.0 * N);
}
void embedding_backward(KernelCtx* ctx, float* dwte, float* dwpe, const act_t* dout, const int32_t* tokens, int N,
                        int T, int C) {
  timeline_call(__func__);
  double NC = (double)N * C;
  streaming(ctx, __func__, NC * (A + 8) + (dwpe ? NC * 8 : 0) + 4.0 * N);
}

void layernorm_forward(KernelCtx* ctx, act_t* out, float* mean, float* rstd, const act_t* x, const act_t* weight,
                       const act_t* bias, int N, int C, float eps) {
  timeline_call(__func__);
  streaming(ctx, __func__, 2.0 * N * C * A + 8.0 * N + 2.0 * C * A);
}
void residual_layernorm_forward(KernelCtx* ctx, act_t* residual, act_t* out, float* mean, float* rstd, const act_t* a,
                                const act_t* b, const act_t* weight, const act_t* bias, int N, int C, float eps) {
  timeline_call(__func__);
  streaming(ctx, __func__, 4.0 * N * C * A + 8.0 * N + 2.0 * C * A);
}
void layernorm_backward(KernelCtx* ctx, act_t* dx, float* dweight, float* dbias, const act_t* dout, const act_t* x,
                        const act_t* weight, const float* mean, const float* rstd, int N, int C) {
  timeline_call(__func__);
  streaming(ctx, __func__, 4.0 * N * C * A + 8.0 * N + C * (A + 16.0));
}
void rmsnorm_forward(KernelCtx* ctx, act_t* out, float* rstd, const act_t* x, const act_t* weight, int N, int C,
                     float eps) {
  timeline_call(__func__);
  streaming(ctx, __func__, 2.0 * N * C * A + 4.0 * N + C * A);
}
void residual_rmsnorm_forward(KernelCtx* ctx, act_t* residual, act_t* out, float* rstd, const act_t* a,
                              const act_t* b, const act_t* weight, int N, int C, float eps) {
  timeline_call(__func__);
  streaming(ctx, __func__, 4.0 * N * C * A + 4.0 * N + C * A);
}
void rmsnorm_backward(KernelCtx* ctx, act_t* dx, float* dweight, const act_t* dout, const act_t* x,
                      const act_t* weight, const float* rstd, int N, int C) {
  timeline_call(__func__);
  streaming(ctx, __func__, 4.0 * N * C * A + 4.0 * N + C * (A + 8.0));
}

// One GEMM out[M,Nn] = a[M,K] b[K,Nn]: 2MNK FLOPs, each operand read once, the output written.
static double gemm_seconds(double M, double Nn, double K, double a_bytes, double b_bytes, double out_bytes) {
  return kernel_seconds(2 * M * Nn * K, RATE_MATMUL, M * K * a_bytes + K * Nn * b_bytes + M * Nn * out_bytes);
}

void matmul_forward(KernelCtx* ctx, act_t* out, const act_t* inp, const act_t* weight, const act_t* bias, int N,
                    int C, int OC) {
  timeline_call(__func__);
  run(ctx, __func__, gemm_seconds(N, OC, C, A, A, A));
}
void matmul_forward_gelu(KernelCtx* ctx, act_t* out, act_t* pre, const act_t* inp, const act_t* weight,
                         const act_t* bias, int N, int C, int OC) {
  timeline_call(__func__);
  run(ctx, __func__, gemm_seconds(N, OC, C, A, A, 2 * A));  // the epilogue writes pre and out
}
// Two GEMMs: dinp = dout @ weight (when asked) and dweight += dout^T @ inp (fp32, read and
// written), plus the bias gradient's column sums.
void matmul_backward(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias, const act_t* dout, const act_t* inp,
                     const act_t* weight, int N, int C, int OC) {
  timeline_call(__func__);
  double t = gemm_seconds(OC, C, N, A, A, 8.0);
  if (dinp) t += gemm_seconds(N, C, OC, A, A, A);
  if (dbias) t += kernel_seconds(0, RATE_MATMUL, (double)N * OC * A + 8.0 * OC);
  run(ctx, __func__, t);
}

void gelu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 2.0 * n * A);
}
void gelu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 3.0 * n * A);
}
void relu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 2.0 * n * A);
}
void relu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 3.0 * n * A);
}
void geglu_forward(KernelCtx* ctx, act_t* out, const act_t* x, int N, int F) {
  timeline_call(__func__);
  streaming(ctx, __func__, 3.0 * N * F * A);
}
void geglu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, int N, int F) {
  timeline_call(__func__);
  streaming(ctx, __func__, 5.0 * N * F * A);
}

// Query-key pairs a (causal) attention computes: the same count as layers/config.c's FLOPs.
static double pairs(AttnShape s) {
  if (!s.causal) return (double)s.Tq * s.Tk;
  double p = 0;
  for (int i = 0; i < s.Tq; i++) p += i + 1 < s.Tk ? i + 1 : s.Tk;
  return p;
}
// Forward: scores and weighted values, 2 products of 2 x pairs x D per head. Backward
// (FlashAttention-2): the scores again, then dV, dP, dQ, dK: 5 products, 2.5x the forward.
static double attention_io(AttnShape s, int has_bias) {
  double q = (double)s.B * s.Tq * s.H * s.D, kv = (double)s.B * s.Tk * s.H * s.D;
  return (2 * q + 2 * kv) * A + 4.0 * s.B * s.H * s.Tq + (has_bias ? (double)s.H * s.Tq * s.Tk * A : 0);
}
// ---- eager attention (--predict-attention eager) -----------------------------------------
// The attention of the seeds' PyTorch models, for comparing like with like: each operator is its
// own kernel over the B x H x Tq x Tk score tensor, which it reads from memory and writes back.
// The models run under FSDP's native mixed precision (FSDP paper, section 4, "Native Mixed
// Precision": parameters cast to 16 bits, no autocast), so every tensor is 16-bit unless the
// code casts it. The two products are batched GEMMs over every query-key pair (the causal mask
// is applied to their output, so nothing is skipped).
//   minGPT, CausalSelfAttention.forward:
//     att = q @ k^T; att = att * scale; att = att.masked_fill(mask, -inf); softmax; dropout; att @ v
//   Hugging Face T5, T5Attention.forward (cross-attention adds a zero bias carrying the mask):
//     scores = q @ k^T; scores += position_bias; softmax(scores.float()).type_as(scores);
//     dropout; attn @ v
// Bytes per score element of each elementwise step: its input and output once, 2 in 16 bits,
// 4 in fp32, and dropout's 1-byte mask (written forward, read backward). Backward runs the
// steps in reverse: softmax's gradient reads its output and the incoming gradient and writes
// one; a cast's gradient is the opposite cast; the bias gradient sums the scores' over the batch.
typedef struct {
  const char* what;
  double bytes_per_score;
} EagerStep;
static const EagerStep mingpt_forward[] = {
    {"eager attention: * scale", 2 + 2},      // read, write
    {"eager attention: masked_fill", 2 + 2},  // (the mask is one T x T tensor for the batch)
    {"eager attention: softmax", 2 + 2},
    {"eager attention: dropout", 2 + 2 + 1},  // and its mask
};
static const EagerStep mingpt_backward[] = {
    {"eager attention: dropout backward", 2 + 1 + 2},     // gradient, mask -> gradient
    {"eager attention: softmax backward", 2 + 2 + 2},     // output, gradient -> gradient
    {"eager attention: masked_fill backward", 2 + 2},
    {"eager attention: * scale backward", 2 + 2},
};
static const EagerStep t5_forward[] = {
    {"eager attention: + position_bias", 2 + 2 + 2},  // scores, the bias -> scores
    {"eager attention: .float()", 2 + 4},
    {"eager attention: softmax (fp32)", 4 + 4},
    {"eager attention: .type_as()", 4 + 2},
    {"eager attention: dropout", 2 + 2 + 1},
};
static const EagerStep t5_backward[] = {
    {"eager attention: dropout backward", 2 + 1 + 2},
    {"eager attention: .type_as() backward", 2 + 4},
    {"eager attention: softmax backward (fp32)", 4 + 4 + 4},
    {"eager attention: .float() backward", 4 + 2},
};

static void eager_steps(KernelCtx* ctx, const EagerStep* steps, int n, double scores) {
  for (int i = 0; i < n; i++) streaming(ctx, steps[i].what, steps[i].bytes_per_score * scores);
}
// The sizes every eager kernel works on: the score tensor's elements, and the bytes of the
// [B*T, H*D] operands (q over Tq rows, k and v over Tk) a batched GEMM pairs it with.
typedef struct {
  double scores, operands;
} EagerSizes;
static EagerSizes eager_sizes(AttnShape s) {
  double q = (double)s.B * s.Tq * s.H * s.D * A, kv = (double)s.B * s.Tk * s.H * s.D * A;
  return (EagerSizes){(double)s.B * s.H * s.Tq * s.Tk, q + kv};
}
// One batched GEMM of the eager attention: 2 x D FLOPs per score, with the 16-bit score tensor
// read or written once and its operands.
static void eager_gemm(KernelCtx* ctx, const char* what, AttnShape s, EagerSizes z) {
  run(ctx, what, kernel_seconds(2.0 * s.D * z.scores, RATE_MATMUL, 2.0 * z.scores + z.operands));
}
static int eager(void) { return timeline_cluster()->attention != ATTENTION_FUSED; }
static int eager_t5(void) { return timeline_cluster()->attention == ATTENTION_EAGER_HF_T5; }
#define EAGER_STEPS(table) table, (int)(sizeof table / sizeof *table)

// Memory: what PyTorch's autograd keeps of each eager attention for its backward, per score
// element (its derivatives.yaml: softmax saves its result, dropout its mask, a matmul both
// operands; a scalar multiply, masked_fill with a shared mask, the bias add and the casts save
// nothing): minGPT keeps softmax's output (2), dropout's mask (1) and output, att @ v's operand
// (2); T5 the fp32 softmax output (4), dropout's mask (1) and output (2). While one attention
// runs backward it also holds the gradient into and out of its widest step: 2 + 2 bytes in
// minGPT, 4 + 4 for T5's fp32 softmax.
EagerScoreBytes timeline_eager_score_bytes(void) {
  return eager_t5() ? (EagerScoreBytes){4 + 1 + 2, 4 + 4} : (EagerScoreBytes){2 + 1 + 2, 2 + 2};
}

static void eager_attention_forward(KernelCtx* ctx, AttnShape s) {
  EagerSizes z = eager_sizes(s);
  eager_gemm(ctx, "eager attention: q @ k^T", s, z);
  if (eager_t5())
    eager_steps(ctx, EAGER_STEPS(t5_forward), z.scores);
  else
    eager_steps(ctx, EAGER_STEPS(mingpt_forward), z.scores);
  eager_gemm(ctx, "eager attention: att @ v", s, z);
}
static void eager_attention_backward(KernelCtx* ctx, AttnShape s, int bias_grad) {
  EagerSizes z = eager_sizes(s);
  eager_gemm(ctx, "eager attention: d(att) = dy @ v^T", s, z);
  eager_gemm(ctx, "eager attention: dv = att^T @ dy", s, z);
  if (eager_t5()) {
    eager_steps(ctx, EAGER_STEPS(t5_backward), z.scores);
    // the scores' gradient summed over the batch into the [H, Tq, Tk] bias gradient
    if (bias_grad) streaming(ctx, "eager attention: position_bias gradient", 2.0 * z.scores + (double)s.H * s.Tq * s.Tk * A);
  } else {
    eager_steps(ctx, EAGER_STEPS(mingpt_backward), z.scores);
  }
  eager_gemm(ctx, "eager attention: dq = d(att) @ k", s, z);
  eager_gemm(ctx, "eager attention: dk = d(att)^T @ q", s, z);
}

void attention_forward(KernelCtx* ctx, act_t* out, float* lse, const act_t* q, const act_t* k, const act_t* v,
                       const act_t* pos_bias, AttnShape s) {
  timeline_call(__func__);
  if (eager()) {
    eager_attention_forward(ctx, s);
    return;
  }
  double flops = 4.0 * s.B * s.H * s.D * pairs(s);
  run(ctx, __func__, kernel_seconds(flops, RATE_ATTENTION, attention_io(s, pos_bias != NULL)));
}
void attention_backward(KernelCtx* ctx, act_t* dq, act_t* dk, act_t* dv, float* dpos_bias, const act_t* dout,
                        const act_t* out, const float* lse, const act_t* q, const act_t* k, const act_t* v,
                        const act_t* pos_bias, AttnShape s) {
  timeline_call(__func__);
  if (eager()) {
    eager_attention_backward(ctx, s, dpos_bias != NULL);
    return;
  }
  double flops = 2.5 * 4.0 * s.B * s.H * s.D * pairs(s);
  double bytes = 2 * attention_io(s, pos_bias != NULL) + (dpos_bias ? 8.0 * s.H * s.Tq * s.Tk : 0);
  run(ctx, __func__, kernel_seconds(flops, RATE_ATTENTION, bytes));
}

void classifier_forward_backward(KernelCtx* ctx, float* losses, act_t* logits, const int32_t* targets, int N, int V,
                                 int Vp, float dloss) {
  timeline_call(__func__);
  streaming(ctx, __func__, 2.0 * N * Vp * A + 8.0 * N);
}
void softmax_row(KernelCtx* ctx, float* probs, const act_t* logits_row, int V, float temperature) {
  timeline_call(__func__);
  memset(probs, 0, (size_t)V * sizeof(float));  // a host output: uniform zeros, nothing computed
  streaming(ctx, __func__, (double)V * (A + 4));
}
void loss_accumulate(KernelCtx* ctx, double* acc, const float* losses, int N) {
  timeline_call(__func__);
  streaming(ctx, __func__, 4.0 * N + 16);
}

int relative_position_bucket(int relative_position, int bidirectional, int num_buckets, int max_distance) {
  timeline_call(__func__);
  return position_bucket(relative_position, bidirectional, num_buckets, max_distance);
}
void relative_bias_forward(KernelCtx* ctx, act_t* bias, const act_t* table, int H, int Tq, int Tk, int bidirectional,
                           int num_buckets, int max_distance) {
  timeline_call(__func__);
  streaming(ctx, __func__, (double)H * Tq * Tk * A);
}
void relative_bias_backward(KernelCtx* ctx, float* dtable, const float* dbias, int H, int Tq, int Tk,
                            int bidirectional, int num_buckets, int max_distance) {
  timeline_call(__func__);
  streaming(ctx, __func__, (double)H * Tq * Tk * 4);
}

void add_inplace(KernelCtx* ctx, act_t* y, const act_t* x, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 3.0 * n * A);
}
void scale_act(KernelCtx* ctx, act_t* x, float s, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 2.0 * n * A);
}
void fill_zero_act(KernelCtx* ctx, act_t* x, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, n * A);
}
void fill_zero_f32(KernelCtx* ctx, float* x, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 4.0 * n);
}
void scale_f32(KernelCtx* ctx, float* x, float s, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 8.0 * n);
}
void add_f32(KernelCtx* ctx, float* y, const float* x, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 12.0 * n);
}
void cast_f32_to_act(KernelCtx* ctx, act_t* out, const float* in, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, n * (4 + A));
}
void cast_act_to_f32(KernelCtx* ctx, float* out, const act_t* in, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, n * (4 + A));
}
// The head block, then one launch per range [a, 2a) above it, as kernels/cuda/elementwise.cu.
void narrow_f32_to_act(KernelCtx* ctx, float* buf, size_t n) {
  timeline_call(__func__);
  size_t head = n < NARROW_HEAD ? n : NARROW_HEAD;
  streaming(ctx, __func__, head * (4 + A));
  for (size_t a = NARROW_HEAD; a < n; a *= 2) streaming(ctx, __func__, ((a * 2 < n ? a * 2 : n) - a) * (4 + A));
}

void block_sumsq(KernelCtx* ctx, double* block_sums, const float* g, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 4.0 * n + 8.0 * (n / NORM_BLOCK));
}
// Two launches: the partials read the block sums, one block adds the partials (64 of them:
// EXACT_GRID of kernels/cuda/adamw.cu).
void exact_sum(KernelCtx* ctx, int64_t* words, const double* x, size_t n) {
  timeline_call(__func__);
  streaming(ctx, __func__, 8.0 * n);
  streaming(ctx, __func__, 8.0 * 64 * NORM_WORDS);
}
// --offload optim: the same 28 bytes per element through host memory, on the host's clock.
void adamw_update_host(KernelCtx* ctx, float* p, const float* g, float* m, float* v, size_t n, AdamWArgs a) {
  timeline_call(__func__);
  timeline_host_wait(28.0 * n / timeline_cluster()->host.memory_bytes_s);
}
// AdamW reads p, g, m, v and writes p, m, v (fp32), and the bf16 copy when asked.
void adamw_update(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v, size_t n,
                  AdamWArgs a) {
  timeline_call(__func__);
  streaming(ctx, __func__, n * (28.0 + (p_act ? A : 0)));
}
// One kernel over a unit's ranges: the same 28 bytes per element.
void adamw_update_ranges(KernelCtx* ctx, float* p, const float* g, float* m, float* v, const AdamWRange* r, int nr,
                         AdamWArgs a) {
  timeline_call(__func__);
  double n = 0;
  for (int k = 0; k < nr; k++) n += (double)(r[k].end - r[k].start);
  if (nr > 0) streaming(ctx, __func__, 28.0 * n);
}
