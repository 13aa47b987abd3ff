// kernels.h: the one compute API of fsdp.c.
//
// Two backends implement every function declared here:
//   kernels/cpu/*.c   fp32 reference (C11 + OpenMP), built into train_gpt_cpu
//   kernels/cuda/*.cu bf16 (or fp16) storage, fp32 accumulation, built into train_gpt
// The layer code (layers/) and the FSDP runtime (fsdp/) call only this API, so the
// schedule, the model and the training loop are one code path for both backends.
//
// Conventions
// - act_t is the storage type of activations and of unsharded (gathered) parameters:
//   float on the CPU backend, bf16 (fp16) bits on the CUDA backend. Master weights, optimizer
//   state and parameter gradients are always fp32 (float).
// - Linear weights are stored (out_features, in_features), row-major, as in PyTorch.
// - "N" is the number of token rows (batch * sequence). Tensors are row-major.
// - Gradients of parameters ACCUMULATE (+=) so that a parameter used twice (the tied
//   lm_head) sums its contributions; the caller zeroes them before a backward pass.
//   Gradients of activations are overwritten (=) unless a comment says "accumulates".
// - Every function takes the KernelCtx first: on CUDA it holds the stream, the cuBLASLt
//   handle and the workspace; the CPU backend ignores it.
// - On the CPU backend every output element is computed by one thread in a fixed order,
//   so results are bit-identical for any OMP_NUM_THREADS (multi-rank tests rely on it).
#ifndef FSDP_KERNELS_H
#define FSDP_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/precision.h"  // act_t: the 16-bit (CUDA) or fp32 (CPU) element type

#ifdef __cplusplus
extern "C" {
#endif

typedef struct KernelCtx KernelCtx;  // backend-private; NULL is valid on the CPU backend

// ---- backend lifecycle ------------------------------------------------------------
// Creates the context of a backend (CUDA: selects `device`, creates the compute stream, the
// cuBLASLt handle and its workspace; CPU: returns NULL). Aborts with a clear message when the
// backend cannot start (e.g. no GPU: the message names the CPU binary).
KernelCtx* kernels_init(int device);
void kernels_shutdown(KernelCtx* ctx);
// The same context launching on another stream (1: all-gather, 2: reduce-scatter; the
// values of kernels/device.h's StreamId), for the elementwise work the FSDP runtime does beside
// its collectives. The CPU backend has one "stream" and returns ctx.
KernelCtx* kernels_stream_ctx(KernelCtx* ctx, int stream);
// The backend's name and its device's name ("cpu", "NVIDIA H100 80GB HBM3", ...).
const char* kernels_backend(void);
void kernels_device_name(KernelCtx* ctx, char* out, size_t len);

// ---- embeddings -------------------------------------------------------------------
// out[n,:] = wte[tokens[n],:] + (wpe ? wpe[n % T,:] : 0). wpe may be NULL (T5).
void embedding_forward(KernelCtx* ctx, act_t* out, const int32_t* tokens, const act_t* wte,
                       const act_t* wpe, int N, int T, int C);
// dwte[tokens[n],:] += dout[n,:]; dwpe[t,:] += sum over rows with n % T == t. Deterministic:
// rows are summed in increasing n for every token id. dwpe may be NULL.
void embedding_backward(KernelCtx* ctx, float* dwte, float* dwpe, const act_t* dout,
                        const int32_t* tokens, int N, int T, int C);

// ---- normalization ----------------------------------------------------------------
// No output of a norm may overlap an input (the CUDA kernels' pointers are __restrict__).
// LayerNorm: out = (x - mean) * rstd * weight + bias, per row of C. Saves mean and rstd.
void layernorm_forward(KernelCtx* ctx, act_t* out, float* mean, float* rstd, const act_t* x,
                       const act_t* weight, const act_t* bias, int N, int C, float eps);
// Fused residual add + LayerNorm: residual = a + b; out = LayerNorm(residual).
void residual_layernorm_forward(KernelCtx* ctx, act_t* residual, act_t* out, float* mean,
                                float* rstd, const act_t* a, const act_t* b, const act_t* weight,
                                const act_t* bias, int N, int C, float eps);
// dx ACCUMULATES (+=): the input of a norm is a residual stream whose gradient also
// arrives through the skip connection. dweight, dbias accumulate. dbias may be NULL.
// dx must not overlap dout, x or weight.
void layernorm_backward(KernelCtx* ctx, act_t* dx, float* dweight, float* dbias,
                        const act_t* dout, const act_t* x, const act_t* weight,
                        const float* mean, const float* rstd, int N, int C);
// RMSNorm (T5): out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps), no mean, no bias.
void rmsnorm_forward(KernelCtx* ctx, act_t* out, float* rstd, const act_t* x,
                     const act_t* weight, int N, int C, float eps);
void residual_rmsnorm_forward(KernelCtx* ctx, act_t* residual, act_t* out, float* rstd,
                              const act_t* a, const act_t* b, const act_t* weight, int N,
                              int C, float eps);
// dx ACCUMULATES (+=), as for layernorm_backward.
void rmsnorm_backward(KernelCtx* ctx, act_t* dx, float* dweight, const act_t* dout,
                      const act_t* x, const act_t* weight, const float* rstd, int N, int C);

// ---- matmul -----------------------------------------------------------------------
// out[N,OC] = inp[N,C] @ weight[OC,C]^T (+ bias[OC]). bias may be NULL.
void matmul_forward(KernelCtx* ctx, act_t* out, const act_t* inp, const act_t* weight,
                    const act_t* bias, int N, int C, int OC);
// matmul_forward followed by GELU (tanh approximation), both kept:
//   pre[N,OC] = inp @ weight^T (+ bias)       (what gelu_backward needs)
//   out[N,OC] = gelu(pre)
// The CPU computes exactly matmul_forward then gelu_forward. CUDA fuses GELU into the cuBLASLt
// epilogue (one kernel less, one read of pre less): out is GELU of the fp32 accumulator, so it
// can differ from gelu_forward(bf16(pre)) in the last bf16 bit; where the epilogue cannot be
// used (OC not a multiple of 8, pre not 16-byte aligned) it runs the two kernels.
void matmul_forward_gelu(KernelCtx* ctx, act_t* out, act_t* pre, const act_t* inp,
                         const act_t* weight, const act_t* bias, int N, int C, int OC);
// dinp[N,C] = dout @ weight (overwritten; skipped when dinp is NULL);
// dweight[OC,C] += dout^T @ inp; dbias[OC] += column sums of dout (skipped when NULL).
void matmul_backward(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias,
                     const act_t* dout, const act_t* inp, const act_t* weight, int N, int C,
                     int OC);
// matmul_backward of a linear layer whose input is inp = gelu(pre) (the MLP's second matmul),
// with the GELU's backward folded in: dinp[N,C] = (dout @ weight) * gelu'(pre), the gradient of
// pre (dinp must not overlap pre). The CPU computes exactly matmul_backward then gelu_backward.
// CUDA applies gelu' in the cuBLASLt epilogue (DGELU: one pass over N x C less) to the fp32
// product, so dinp can differ from gelu_backward(bf16(product)) in the last bf16 bit; where
// the epilogue cannot be used (C not a multiple of 8, pre not 16-byte aligned) it runs the two.
void matmul_backward_gelu(KernelCtx* ctx, act_t* dinp, float* dweight, float* dbias, const act_t* dout,
                          const act_t* inp, const act_t* weight, const act_t* pre, int N, int C, int OC);

// ---- activations ------------------------------------------------------------------
// GELU, tanh approximation (GPT-2). In place is allowed (out == x).
void gelu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n);
// dx = dout * gelu'(x). In place is allowed (dx == dout).
void gelu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n);
void relu_forward(KernelCtx* ctx, act_t* out, const act_t* x, size_t n);
void relu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, size_t n);
// Gated GELU (T5 v1.1): out[n,i] = gelu(gate[n,i]) * up[n,i], where gate and up are the two
// halves of a row of x[N, 2*F] (gate first). dx gets both halves.
void geglu_forward(KernelCtx* ctx, act_t* out, const act_t* x, int N, int F);
void geglu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, int N, int F);
// SwiGLU (Llama; Shazeer 2020, "GLU variants"): out[n,i] = silu(gate[n,i]) * up[n,i],
// silu(g) = g / (1 + e^-g), with gate and up the halves of a row of x[N, 2*F] as for GEGLU.
void swiglu_forward(KernelCtx* ctx, act_t* out, const act_t* x, int N, int F);
void swiglu_backward(KernelCtx* ctx, act_t* dx, const act_t* x, const act_t* dout, int N, int F);

// ---- rotary position embeddings (Llama) -------------------------------------------
// RoPE (RoFormer, Su et al. 2021): each head's columns turn in pairs by position x frequency,
// so q.k depends on the distance between the two positions only. The pairs are the halves of a
// head, column i with column i + D/2 (transformers' rotate_half; Meta's Llama code pairs 2i with
// 2i+1, and transformers' checkpoints hold the q and k rows permuted to halves for it,
// weights/names.c). The frequencies: kernels/rope.h.
typedef struct {
  float theta;              // base: 10000 (RoFormer), 500000 (Llama 3)
  float factor;             // Llama 3.1's frequency scaling (0: none), with the next three
  float low_freq_factor, high_freq_factor;
  int original_context;     // the context the frequencies were trained at (8192)
} RopeConfig;
// In place on x: N rows of `stride` elements, row n at position n % T; `heads` heads of D
// columns from column 0 of each row are rotated (q's then k's heads in a fused qkv row), the
// other columns are left alone. For pair (a, b) at angle t: a' = a cos t - b sin t,
// b' = b cos t + a sin t. D is even and at most ROPE_MAX_HEAD.
void rope_forward(KernelCtx* ctx, act_t* x, RopeConfig r, int N, int T, int heads, int D, int stride);
// Its backward, in place on the gradient: the rotation by -t (the transpose).
void rope_backward(KernelCtx* ctx, act_t* dx, RopeConfig r, int N, int T, int heads, int D, int stride);

// ---- attention --------------------------------------------------------------------
// Multi-head scaled dot-product attention with H query heads of size D, sharing KV key/value
// heads (grouped-query attention, Ainslie et al. 2023: query head h reads key/value head
// h / (H / KV); KV = H is plain multi-head attention).
//   q: rows of length q_stride, head h at columns [h*D, (h+1)*D), for B*Tq rows
//   k, v: rows of length kv_stride, KV heads in the same layout, for B*Tk rows
//   out: [B*Tq, H*D]
//   scores = scale * q.k + pos_bias(h, i, j), causal masks j > i
//   (aligned at the top-left, i.e. query i and key i are the same position)
// lse[B,H,Tq] saves the row log-sum-exp of the scores so the backward can recompute
// probabilities without a stored Tq x Tk matrix (flash-attention style).
// This one signature covers GPT (causal self-attention on a fused qkv buffer), the T5
// encoder (bidirectional + bias), the T5 decoder (causal + bias) and cross-attention
// (Tq != Tk, no bias).
typedef struct {
  int B, Tq, Tk, H, D;
  int q_stride, kv_stride;  // row lengths (elements) of q and of k/v
  float scale;              // 1/sqrt(D) for GPT, 1 for T5
  int causal;
  int KV;                   // key/value heads, dividing H; 0: H (no grouping)
} AttnShape;
static inline int attn_kv_heads(AttnShape s) { return s.KV ? s.KV : s.H; }
// T5's relative position bias (the T5 paper, section 2.1), which the attention computes from
// its table for every score instead of reading a materialized [H, Tq, Tk] tensor:
//   pos_bias(h, i, j) = table[relative_position_bucket(j - i, bidirectional, num_buckets,
//                                                      max_distance), h]
// table is [num_buckets, H] (the model's relative_attention_bias); NULL: no bias (GPT,
// cross-attention). num_buckets is at most 256.
typedef struct {
  const act_t* table;
  int num_buckets, max_distance, bidirectional;
} AttnBias;
void attention_forward(KernelCtx* ctx, act_t* out, float* lse, const act_t* q, const act_t* k,
                       const act_t* v, AttnBias bias, AttnShape s);
// dq, dk, dv use the same strides as q, k, v and are overwritten (in a fused qkv buffer
// they interleave exactly as the inputs do). dtable[num_buckets, H] ACCUMULATES the bias
// gradient, the score gradients summed per (bucket, head) in a fixed order; may be NULL.
// A key/value head shared by H/KV query heads gets the sum of their gradients in a fixed
// order: each query head's part (the whole gradient when KV = H), added in increasing head.
void attention_backward(KernelCtx* ctx, act_t* dq, act_t* dk, act_t* dv, float* dtable,
                        const act_t* dout, const act_t* out, const float* lse, const act_t* q,
                        const act_t* k, const act_t* v, AttnBias bias, AttnShape s);

// ---- the step's decisions on the device (kernels/step_control.h) ---------------------
// One-thread kernels on CUDA, host calls on the CPU, with the arithmetic of step_control.h.
// A StepControl lives where the backend keeps its data.
typedef struct StepControl StepControl;
// Before the step's first forward: dloss = S / tokens.
void step_prepare(KernelCtx* ctx, StepControl* c);
// The global norm's words (EXACT_WORDS + nunits int64) from each unit's exact sum of squares
// (nunits x NORM_WORDS, normalized in place): step_control_norm_words.
void grad_norm_words(KernelCtx* ctx, int64_t* out, int64_t* unit_words, int nunits);
// After the loss sum and the norm's words are summed over the ranks: the step's verdict
// (step_control_decide). norm_words is normalized in place, and loss_sum, once read, set to 0 for
// the next step's micro-batches (loss_accumulate).
void step_decide(KernelCtx* ctx, StepControl* c, double* loss_sum, int64_t* norm_words, int nunits);

// ---- classifier -------------------------------------------------------------------
// Fused softmax + cross-entropy over a padded vocabulary. logits are [N, Vp]; only the first
// V columns are real, padding columns never contribute. For every row with target >= 0:
//   losses[n] = logsumexp(logits[n, :V]) - logits[n, target]
//   logits[n, :V] is overwritten by dloss * (softmax - onehot), logits[n, V:] by 0.
// Rows with target < 0 (ignored positions) get loss 0 and zero gradient.
// Infinite logits never give NaN: a logit equal to the row max counts exp(0) = 1, also when
// the max is infinite. So -inf logits get probability exactly 0 (a -inf target: loss +inf), a
// row of only -inf logits is uniform (loss log V), and +inf logits share the probability.
// dloss is read where the backend keeps its data (device memory on CUDA: the step's loss scale
// is decided there, step_control.h); NULL means 0 (an evaluation, whose gradient is not used).
void classifier_forward_backward(KernelCtx* ctx, float* losses, act_t* logits,
                                 const int32_t* targets, int N, int V, int Vp, const float* dloss);
// Probabilities for sampling: probs[:V] = softmax(logits[row, :V] / temperature), fp32, host
// (infinite logits as above).
void softmax_row(KernelCtx* ctx, float* probs, const act_t* logits_row, int V, float temperature);
// acc[0] += (losses[0] + losses[1] + ... + losses[N-1]), summed in double in the fixed order of
// kernels/loss_sum.h on both backends (the same bits): a step's loss stays on the device until
// the step reads it once (no host copy per micro-batch).
void loss_accumulate(KernelCtx* ctx, double* acc, const float* losses, int N);

// ---- relative position bias (T5) ---------------------------------------------------
// T5's bucketed relative positions: bucket of (key j - query i) with num_buckets buckets and
// max_distance, bidirectional (encoder) or one-directional (decoder), as in the T5 paper
// (section 2.1) and its reference implementation (log-spaced buckets computed in fp32). The
// attention (AttnBias) evaluates it per score; this is the same function on the host.
int relative_position_bucket(int relative_position, int bidirectional, int num_buckets, int max_distance);

// ---- elementwise helpers ----------------------------------------------------------
void add_inplace(KernelCtx* ctx, act_t* y, const act_t* x, size_t n);   // y += x
void scale_act(KernelCtx* ctx, act_t* x, float s, size_t n);            // x *= s
void fill_zero_act(KernelCtx* ctx, act_t* x, size_t n);
void fill_zero_f32(KernelCtx* ctx, float* x, size_t n);
void scale_f32(KernelCtx* ctx, float* x, float s, size_t n);           // x *= s
void add_f32(KernelCtx* ctx, float* y, const float* x, size_t n);       // y += x
void cast_f32_to_act(KernelCtx* ctx, act_t* out, const float* in, size_t n);
void cast_act_to_f32(KernelCtx* ctx, float* out, const act_t* in, size_t n);
// In place: buf's n fp32 values become n act_t values in its first n * sizeof(act_t) bytes
// (the 16-bit gradient reduction needs no staging buffer; on the CPU backend act_t is fp32 and
// nothing moves). CUDA converts the first NARROW_HEAD elements in one block, then each range
// [a, 2a) above it in one launch (kernels/cuda/elementwise.cu says why).
#define NARROW_HEAD 4096
void narrow_f32_to_act(KernelCtx* ctx, float* buf, size_t n);

// ---- optimizer and gradient norm --------------------------------------------------
// Sum of squares of g in consecutive blocks of NORM_BLOCK elements: block_sums[i] is the sum,
// in double and in index order, of g[i*NORM_BLOCK .. (i+1)*NORM_BLOCK). n must be a multiple of
// NORM_BLOCK. Blocks are fixed in the global flat layout, so the same block gives the same bits
// on any rank and any world size.
#define NORM_BLOCK 128
void block_sumsq(KernelCtx* ctx, double* block_sums, const float* g, size_t n);
// words = the exact sum (kernels/exact_sum.h) of x[0 .. n) (block_sumsq's output), and
// words[EXACT_WORDS] = how many x were not finite: NORM_WORDS int64, where the backend keeps
// its data (device memory on CUDA). The limbs are left unnormalized (exact_normalize gives the
// canonical value); integer addition is associative, so the result does not depend on how the
// backend splits x, and summing it on the device spares the host a pass over every block.
#define NORM_WORDS 10  // EXACT_WORDS + the non-finite count
void exact_sum(KernelCtx* ctx, int64_t* words, const double* x, size_t n);
// AdamW on one contiguous range of a shard (one weight-decay segment):
//   m = b1 m + (1-b1) g*gscale; v = b2 v + (1-b2) (g*gscale)^2
//   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p)
// and writes p (cast to act_t) to p_act when p_act is not NULL (the compute copy the next
// all-gather sends). step is 1-based for the bias correction.
typedef struct {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  int step;
} AdamWArgs;
void adamw_update(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v,
                  size_t n, AdamWArgs a);
// A range of a shard that AdamW updates with its weight decay (decay) or none: a parameter, or
// the part of one a shard holds. Ranges are ascending and do not overlap; gaps between them
// (alignment padding) are left alone.
typedef struct {
  int64_t start, end;  // element indices into the shard
  int decay;
} AdamWRange;
// AdamW's bias correction 1 - beta^step, in double and rounded to float once (powf of a number
// near 1 at a large step loses digits): the one home of it for every AdamW.
static inline float adamw_bias_correction(float beta, int step) { return (float)(1.0 - pow((double)beta, step)); }
// AdamW's scalars for one step where the backend keeps its data (device memory on CUDA). The host
// fills the learning rate, the constants, the step and its bias corrections; the step's decision
// (kernels/step_control.h) fills grad_scale and update on the device, so AdamW reads them where
// they are made and the host never waits for them.
typedef struct {
  float lr, beta1, beta2, eps, weight_decay;
  float grad_scale;   // clipping and 1 / loss scale
  float bc1, bc2;     // adamw_bias_correction(beta1, step), (beta2, step)
  int step;           // 1-based
  int update;         // 0: the step is skipped: p, m, v and the working copy stay as they are
} AdamWStep;
// The by-value arguments of the same step (the host AdamW of --offload optim).
static inline AdamWArgs adamw_step_args(const AdamWStep* s) {
  AdamWArgs a = {.lr = s->lr, .beta1 = s->beta1, .beta2 = s->beta2, .eps = s->eps, .weight_decay = s->weight_decay,
                 .grad_scale = s->grad_scale, .step = s->step};
  return a;
}
// adamw_update over every range of one shard (a unit's parameters) in one call, with the
// scalars of s (in the backend's memory): range k with s->weight_decay if r[k].decay, else 0.
// The same bits as one adamw_update per range; on the GPU, one launch instead of one per
// parameter (most of a unit's parameters are small: biases, norm weights). Nothing is written
// when s->update is 0. p_act (or NULL) receives the updated values cast to act_t at the same
// indices: the 16-bit working copy of a unit whose shard is the whole unit, which the next forward
// then reads without a cast of its own.
void adamw_update_ranges(KernelCtx* ctx, float* p, act_t* p_act, const float* g, float* m, float* v,
                         const AdamWRange* r, int nr, const AdamWStep* s);
// The arguments range r is updated with: a, without weight decay unless r->decay.
static inline AdamWArgs adamw_range_args(AdamWArgs a, const AdamWRange* r) {
  if (!r->decay) a.weight_decay = 0.0f;
  return a;
}
// The same update on the host, on host memory (--offload optim: the shards and AdamW state in
// pinned host memory), with OpenMP threads; the call returns when it is done. The CPU backend's
// adamw_update gives the same bits.
void adamw_update_host(KernelCtx* ctx, float* p, const float* g, float* m, float* v, size_t n, AdamWArgs a);

#ifdef __cplusplus
}
#endif
#endif
