// kernels.c (timeline): kernels.h for the timeline: each call computes nothing and adds to its
// stream the time the CUDA kernel would take, from the exact FLOPs and bytes of the call:
//   max(FLOPs / (peak x matmul or attention efficiency), bytes / (HBM x efficiency)) + launch gap
// (a roofline; catalogue.c cites each constant). Bytes are what the CUDA kernels read and write
// once each: bf16 activations and parameters (act_t is bf16 bits in this build, as in
// train_gpt), fp32 gradients, statistics and optimizer state.
#include <stdio.h>
#include <string.h>

#include "kernels/attention_tiles.h"
#include "kernels/exact_sum.h"
#include "kernels/kernels.h"
#include "kernels/position_bucket.h"
#include "kernels/timeline/timeline.h"

struct KernelCtx {
  StreamId stream;
};
static KernelCtx contexts[3] = {{STREAM_COMPUTE}, {STREAM_ALL_GATHER}, {STREAM_REDUCE_SCATTER}};

#define A ((double)sizeof(act_t))

typedef enum { RATE_MATMUL, RATE_ATTN_FWD, RATE_ATTN_BWD } Rate;

// The duration of one kernel on this GPU.
static double kernel_seconds(double flops, Rate rate, double bytes) {
  const GpuSpec* g = &timeline_cluster()->gpu;
  double eff = rate == RATE_MATMUL ? g->matmul_eff : rate == RATE_ATTN_FWD ? g->attn_fwd_eff : g->attn_bwd_eff;
  double compute = flops / (g->peak_flops * eff), memory = bytes / (g->hbm_bytes_s * g->hbm_eff);
  return (compute > memory ? compute : memory) + g->launch_s;
}

static void run(KernelCtx* ctx, const char* what, double seconds) {
  timeline_kernel(ctx ? ctx->stream : STREAM_COMPUTE, seconds, what);
}

// An elementwise or reduction kernel: bound by its bytes.
static void streaming(KernelCtx* ctx, const char* what, double bytes) { run(ctx, what, kernel_seconds(0, RATE_MATMUL, bytes)); }

// The partial sums of a column-sum kernel (kernels/cuda/column_sums.cuh): about 256 chunk
// leaves of `len` fp32 values, written once and read once by the tree that adds them.
static double column_partials_bytes(double len) { return 2.0 * 256 * len * 4; }

KernelCtx* kernels_init(int device) {
  (void)device;
  (void)timeline_cluster();  // refuses to start unconfigured
  return &contexts[0];
}
void kernels_shutdown(KernelCtx* ctx) {
  (void)ctx;
}
KernelCtx* kernels_stream_ctx(KernelCtx* ctx, int stream) {
  (void)ctx;
  return &contexts[stream];
}
const char* kernels_backend(void) {
  return "timeline";
}
void kernels_device_name(KernelCtx* ctx, char* out, size_t len) {
  (void)ctx;
  snprintf(out, len, "%s", timeline_cluster()->gpu.label);
}

void embedding_forward(KernelCtx* ctx, act_t* out, const int32_t* tokens, const act_t* wte, const act_t* wpe,
                       int N, int T, int C) {
  double NC = (double)N * C;
  streaming(ctx, __func__, NC * A * (wpe ? 3 : 2) + 4.0 * N);
}
void embedding_backward(KernelCtx* ctx, float* dwte, float* dwpe, const act_t* dout, const int32_t* tokens, int N,
                        int T, int C) {
  double NC = (double)N * C;
  streaming(ctx, __func__, NC * (A + 8) + (dwpe ? NC * 8 : 0) + 4.0 * N);
}

void layernorm_forward(KernelCtx* ctx, act_t* out, float* mean, float* rstd, const act_t* x, const act_t* weight,
                       const act_t* bias, int N, int C, float eps) {
  streaming(ctx, __func__, 2.0 * N * C * A + 8.0 * N + 2.0 * C * A);
}
void residual_layernorm_forward(KernelCtx* ctx, act_t* residual, act_t* out, float* mean, float* rstd, const act_t* a,
                                const act_t* b, const act_t* weight, const act_t* bias, int N, int C, float eps) {
  streaming(ctx, __func__, 4.0 * N * C * A + 8.0 * N + 2.0 * C * A);
}
// One kernel: dout and x read (their second read, a chunk later, from L2), dx read and written,
// the statistics, the weight, and dweight and dbias through the column sums' partials.
void layernorm_backward(KernelCtx* ctx, act_t* dx, float* dweight, float* dbias, const act_t* dout, const act_t* x,
                        const act_t* weight, const float* mean, const float* rstd, int N, int C) {
  streaming(ctx, __func__, 4.0 * N * C * A + 8.0 * N + C * (A + 16.0) + column_partials_bytes(2.0 * C));
}
void rmsnorm_forward(KernelCtx* ctx, act_t* out, float* rstd, const act_t* x, const act_t* weight, int N, int C,
                     float eps) {
  streaming(ctx, __func__, 2.0 * N * C * A + 4.0 * N + C * A);
}
void residual_rmsnorm_forward(KernelCtx* ctx, act_t* residual, act_t* out, float* rstd, const act_t* a,
                              const act_t* b, const act_t* weight, int N, int C, float eps) {
  streaming(ctx, __func__, 4.0 * N * C * A + 4.0 * N + C * A);
}
void rmsnorm_backward(KernelCtx* ctx, act_t* dx, float* dweight, const act_t* dout, const act_t* x,
                      const act_t* weight, const float* rstd, int N, int C) {
  streaming(ctx, __func__, 4.0 * N * C * A + 4.0 * N + C * (A + 8.0) + column_partials_bytes(C));
}

// One GEMM out[M,Nn] = a[M,K] b[K,Nn]: 2MNK FLOPs, each operand read once, the output written.
static double gemm_seconds(double M, double Nn, double K, double a_bytes, double b_bytes, double out_bytes) {
  return kernel_seconds(2 * M * Nn * K, RATE_MATMUL, M * K * a_bytes + K * Nn * b_bytes + M * Nn * out_bytes);
}

void matmul_forward(KernelCtx* ctx, act_t* out, const act_t* inp, const act_t* weight, const act_t* bias, int N,
                    int C, int OC) {
  run(ctx, __func__, gemm_seconds(N, OC, C, A, A, A));
}
void matmul_forward_gelu(KernelCtx* ctx, act_t* out, act_t* pre, const act_t* inp, const act_t* weight,
                         const act_t* bias, int N, int C, int OC) {
  run(ctx, __func__, gemm_seconds(N, OC, C, A, A, 2 * A));  // the epilogue writes pre and out
}
// Up to three kernels, as the CUDA backend launches them: dinp = dout @ weight (when asked;
// through the GELU, the epilogue also reads the GELU's input), dweight += dout^T @ inp (fp32,
// read and written: the op named "matmul_backward"), and the bias gradient's column sums (one
// read of dout).
static void backward(KernelCtx* ctx, int has_dinp, int has_bias, int dgelu, int N, int C, int OC) {
  if (has_dinp)
    run(ctx, dgelu ? "matmul_backward dinp (DGELU epilogue)" : "matmul_backward dinp",
        gemm_seconds(N, C, OC, A, A, dgelu ? 2 * A : A));
  run(ctx, "matmul_backward", gemm_seconds(OC, C, N, A, A, 8.0));
  if (has_bias) streaming(ctx, "bias gradient (column sums)", (double)N * OC * A + column_partials_bytes(OC) + 8.0 * OC);
}
void matmul_backward(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias, const act_t* dout, const act_t* inp,
                     const act_t* weight, int N, int C, int OC) {
  backward(ctx, dinp != NULL, dbias != NULL, 0, N, C, OC);
}
void matmul_backward_gelu(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias, const act_t* dout,
                          const act_t* inp, const act_t* weight, const act_t* pre, int N, int C, int OC) {
  backward(ctx, dinp != NULL, dbias != NULL, 1, N, C, OC);
}

void gelu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n) {
  streaming(ctx, __func__, 2.0 * n * A);
}
void gelu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n) {
  streaming(ctx, __func__, 3.0 * n * A);
}
void relu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n) {
  streaming(ctx, __func__, 2.0 * n * A);
}
void relu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n) {
  streaming(ctx, __func__, 3.0 * n * A);
}
void geglu_forward(KernelCtx* ctx, act_t* out, const act_t* x, int N, int F) {
  streaming(ctx, __func__, 3.0 * N * F * A);
}
void geglu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, int N, int F) {
  streaming(ctx, __func__, 5.0 * N * F * A);
}
void swiglu_forward(KernelCtx* ctx, act_t* out, const act_t* x, int N, int F) {
  streaming(ctx, __func__, 3.0 * N * F * A);
}
void swiglu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, int N, int F) {
  streaming(ctx, __func__, 5.0 * N * F * A);
}
// In place: every turned element read and written once.
void rope_forward(KernelCtx* ctx, act_t* x, RopeConfig r, int N, int T, int heads, int D, int stride) {
  streaming(ctx, __func__, 2.0 * N * heads * D * A);
}
void rope_backward(KernelCtx* ctx, act_t* dx, RopeConfig r, int N, int T, int heads, int D, int stride) {
  streaming(ctx, __func__, 2.0 * N * heads * D * A);
}

// ---- fused attention (kernels/cuda/attention.cu) ------------------------------------------
// FLOPs: the products over the query-key pairs the attention keeps (the same count as
// layers/config.c's), 2 in the forward (S = Q K^T, O = P V) and FlashAttention-2's 5 in the
// backward, at the catalogue's attention efficiencies (forward and backward), FlashAttention-2's
// measured rates on that same count (its tiles' overhead included). Bytes: every operand once (a tile read again by
// another CTA comes from L2), plus what the kernels' own tiling adds (kernels/attention_tiles.h):
// the backward's dq partial sums (fp32, stored by every key tile of a query tile but the last and
// loaded by all but the first), its D = rowsum(dout * out) and flags, and the position bias
// gradient's per-CTA sums, each in the kernel that moves them.
static int ceil_div_i(int a, int b) { return (a + b - 1) / b; }
static double pairs(AttnShape s) {
  if (!s.causal) return (double)s.Tq * s.Tk;
  double p = 0;
  for (int i = 0; i < s.Tq; i++) p += i + 1 < s.Tk ? i + 1 : s.Tk;
  return p;
}
// Elements of one (batch, head)'s dq that pass through the fp32 partial sums, times the passes:
// a query tile's rows once per key tile that adds to it, but one (causal: the key tiles up to the
// one holding the tile's last row; bidirectional: all).
static double dq_partial_elems(AttnShape s) {
  const int nk = ceil_div_i(s.Tk, ATTN_BWD_KEYS), nq = ceil_div_i(s.Tq, ATTN_BWD_ROWS);
  double n = 0;
  for (int it = 0; it < nq; it++) {
    int adders = 0;
    for (int j = 0; j < nk; j++) adders += !s.causal || j * ATTN_BWD_KEYS / ATTN_BWD_ROWS <= it;
    int rows = s.Tq - it * ATTN_BWD_ROWS < ATTN_BWD_ROWS ? s.Tq - it * ATTN_BWD_ROWS : ATTN_BWD_ROWS;
    n += (adders > 0 ? adders - 1.0 : 0.0) * rows;
  }
  return n * s.D;
}
// Bytes of q, k, v, o: each [rows, H*D] operand read or written once.
static double qkvo_bytes(AttnShape s) {
  return (2.0 * s.B * s.Tq + 2.0 * s.B * s.Tk) * s.H * s.D * A;
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
                       AttnBias bias, AttnShape s) {
  if (eager()) {
    eager_attention_forward(ctx, s);
    return;
  }
  double flops = 4.0 * s.B * s.H * s.D * pairs(s);
  double bytes = qkvo_bytes(s) + 4.0 * s.B * s.H * s.Tq + (bias.table ? (double)bias.num_buckets * s.H * A : 0);
  run(ctx, __func__, kernel_seconds(flops, RATE_ATTN_FWD, bytes));
}
// The backward's kernels: the dq flags cleared, D = rowsum(dout * out), the five products (with
// the ordered dq sums), and with a bias gradient the sums per (position, head) folded into
// buckets.
void attention_backward(KernelCtx* ctx, act_t* dq, act_t* dk, act_t* dv, float* dtable, const act_t* dout,
                        const act_t* out, const float* lse, const act_t* q, const act_t* k, const act_t* v,
                        AttnBias bias, AttnShape s) {
  if (eager()) {
    eager_attention_backward(ctx, s, dtable != NULL);
    return;
  }
  double rows = (double)s.B * s.H * s.Tq, nk = ceil_div_i(s.Tk, ATTN_BWD_KEYS), nq = ceil_div_i(s.Tq, ATTN_BWD_ROWS);
  double positions = dtable && bias.table ? 2.0 * bias.max_distance + 1 : 0;
  streaming(ctx, "attention_backward: dq flags cleared", 4.0 * s.B * s.H * nq + 4.0);
  streaming(ctx, "attention_backward: D = rowsum(dout * out)", 2.0 * rows * s.D * A + 4.0 * rows);
  double flops = 2.5 * 4.0 * s.B * s.H * s.D * pairs(s);
  // q, k, v, dout read; dq, dk, dv written; lse and D; the dq partial sums stored and loaded.
  double bytes = qkvo_bytes(s) + (2.0 * s.B * s.Tk + s.B * s.Tq) * s.H * s.D * A + 8.0 * rows +
                 8.0 * s.B * s.H * dq_partial_elems(s) + 4.0 * s.B * s.H * nk * positions;
  run(ctx, __func__, kernel_seconds(flops, RATE_ATTN_BWD, bytes));
  if (positions > 0)
    streaming(ctx, "attention_backward: position bias gradient", 4.0 * s.B * s.H * nk * positions + 8.0 * bias.num_buckets * s.H);
}

// The step's decisions (kernels/step_control.h): one thread each, a launch and a few words.
void step_prepare(KernelCtx* ctx, StepControl* c) {
  streaming(ctx, __func__, 64.0);
}
void grad_norm_words(KernelCtx* ctx, int64_t* out, int64_t* unit_words, int nunits) {
  streaming(ctx, __func__, 8.0 * (NORM_WORDS + EXACT_WORDS + 1) * nunits);
}
void step_decide(KernelCtx* ctx, StepControl* c, double* loss_sum, int64_t* norm_words, int nunits) {
  streaming(ctx, __func__, 256.0 + 8.0 * (EXACT_WORDS + nunits));
}
void classifier_forward_backward(KernelCtx* ctx, float* losses, act_t* logits, const int32_t* targets, int N, int V,
                                 int Vp, const float* dloss) {
  streaming(ctx, __func__, 2.0 * N * Vp * A + 8.0 * N);
}
void softmax_row(KernelCtx* ctx, float* probs, const act_t* logits_row, int V, float temperature) {
  memset(probs, 0, (size_t)V * sizeof(float));  // a host output: uniform zeros, nothing computed
  streaming(ctx, __func__, (double)V * (A + 4));
}
void loss_accumulate(KernelCtx* ctx, double* acc, const float* losses, int N) {
  streaming(ctx, __func__, 4.0 * N + 16);
}

int relative_position_bucket(int relative_position, int bidirectional, int num_buckets, int max_distance) {
  return position_bucket(relative_position, bidirectional, num_buckets, max_distance);
}
void add_inplace(KernelCtx* ctx, act_t* y, const act_t* x, size_t n) {
  streaming(ctx, __func__, 3.0 * n * A);
}
void scale_act(KernelCtx* ctx, act_t* x, float s, size_t n) {
  streaming(ctx, __func__, 2.0 * n * A);
}
void fill_zero_act(KernelCtx* ctx, act_t* x, size_t n) {
  streaming(ctx, __func__, n * A);
}
void fill_zero_f32(KernelCtx* ctx, float* x, size_t n) {
  streaming(ctx, __func__, 4.0 * n);
}
void scale_f32(KernelCtx* ctx, float* x, float s, size_t n) {
  streaming(ctx, __func__, 8.0 * n);
}
void add_f32(KernelCtx* ctx, float* y, const float* x, size_t n) {
  streaming(ctx, __func__, 12.0 * n);
}
void cast_f32_to_act(KernelCtx* ctx, act_t* out, const float* in, size_t n) {
  streaming(ctx, __func__, n * (4 + A));
}
void cast_act_to_f32(KernelCtx* ctx, float* out, const act_t* in, size_t n) {
  streaming(ctx, __func__, n * (4 + A));
}
// The head block, then one launch per range [a, 2a) above it, as kernels/cuda/elementwise.cu.
void narrow_f32_to_act(KernelCtx* ctx, float* buf, size_t n) {
  size_t head = n < NARROW_HEAD ? n : NARROW_HEAD;
  streaming(ctx, __func__, head * (4 + A));
  for (size_t a = NARROW_HEAD; a < n; a *= 2) streaming(ctx, __func__, ((a * 2 < n ? a * 2 : n) - a) * (4 + A));
}

void block_sumsq(KernelCtx* ctx, double* block_sums, const float* g, size_t n) {
  streaming(ctx, __func__, 4.0 * n + 8.0 * (n / NORM_BLOCK));
}
// Two launches: the partials read the block sums, one block adds the partials (64 of them:
// EXACT_GRID of kernels/cuda/adamw.cu).
void exact_sum(KernelCtx* ctx, int64_t* words, const double* x, size_t n) {
  streaming(ctx, __func__, 8.0 * n);
  streaming(ctx, __func__, 8.0 * 64 * NORM_WORDS);
}
// --offload optim: the same 28 bytes per element through host memory, on the host's clock.
void adamw_update_host(KernelCtx* ctx, float* p, const float* g, float* m, float* v, size_t n, AdamWArgs a) {
  timeline_host_wait(28.0 * n / timeline_cluster()->host.memory_bytes_s);
}
// AdamW reads p, g, m, v and writes p, m, v (fp32), and the bf16 copy when asked.
void adamw_update(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v, size_t n,
                  AdamWArgs a) {
  streaming(ctx, __func__, n * (28.0 + (p_act ? A : 0)));
}
// One kernel over a unit's ranges: the same 28 bytes per element.
void adamw_update_ranges(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v,
                         const AdamWRange* r, int nr, const AdamWStep* s) {
  double n = 0;
  for (int k = 0; k < nr; k++) n += (double)(r[k].end - r[k].start);
  if (nr > 0) streaming(ctx, __func__, (28.0 + (p_act ? A : 0)) * n);  // (and the 16-bit working copy)
}
