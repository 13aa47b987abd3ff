// cpu_ref.h: the CPU reference kernels inside the GPU test binary.
//
// test_kernels_gpu links the CUDA kernels (kernels.h with act_t = bf16 bits) and the CPU
// kernels (kernels/cpu/*.c compiled as C with act_t = float) into one program. The CPU objects'
// kernels.h symbols are renamed by objcopy (name -> cpu_name, list generated from kernels.h by
// the Makefile), and declared here with float activations.
//
// These prototypes must stay kernels.h's with act_t = float: cpu_ref_check.c compiles this
// header with CPU(f) = f after kernels.h (CPU build), so any difference is a compile error.
// Include after kernels/kernels.h (for KernelCtx, AttnShape, AdamWArgs).
#ifndef FSDP_TEST_CPU_REF_H
#define FSDP_TEST_CPU_REF_H
#include <stddef.h>
#include <stdint.h>

#ifdef CPU_REF_CHECK
#define CPU(f) f
#else
#define CPU(f) cpu_##f
#endif

KernelCtx* CPU(kernels_init)(int device);
void CPU(kernels_shutdown)(KernelCtx* ctx);
KernelCtx* CPU(kernels_stream_ctx)(KernelCtx* ctx, int stream);
const char* CPU(kernels_backend)(void);
void CPU(kernels_device_name)(KernelCtx* ctx, char* out, size_t len);

void CPU(embedding_forward)(KernelCtx* ctx, float* out, const int32_t* tokens, const float* wte,
                            const float* wpe, int N, int T, int C);
void CPU(embedding_backward)(KernelCtx* ctx, float* dwte, float* dwpe, const float* dout,
                             const int32_t* tokens, int N, int T, int C);

void CPU(layernorm_forward)(KernelCtx* ctx, float* out, float* mean, float* rstd, const float* x,
                            const float* weight, const float* bias, int N, int C, float eps);
void CPU(residual_layernorm_forward)(KernelCtx* ctx, float* residual, float* out, float* mean,
                                     float* rstd, const float* a, const float* b, const float* weight,
                                     const float* bias, int N, int C, float eps);
void CPU(layernorm_backward)(KernelCtx* ctx, float* dx, float* dweight, float* dbias,
                             const float* dout, const float* x, const float* weight,
                             const float* mean, const float* rstd, int N, int C);
void CPU(rmsnorm_forward)(KernelCtx* ctx, float* out, float* rstd, const float* x,
                          const float* weight, int N, int C, float eps);
void CPU(residual_rmsnorm_forward)(KernelCtx* ctx, float* residual, float* out, float* rstd,
                                   const float* a, const float* b, const float* weight, int N,
                                   int C, float eps);
void CPU(rmsnorm_backward)(KernelCtx* ctx, float* dx, float* dweight, const float* dout,
                           const float* x, const float* weight, const float* rstd, int N, int C);

void CPU(matmul_forward)(KernelCtx* ctx, float* out, const float* inp, const float* weight,
                         const float* bias, int N, int C, int OC);
void CPU(matmul_backward)(KernelCtx* ctx, float* dinp, float* dweight, float* dbias,
                          const float* dout, const float* inp, const float* weight, int N, int C,
                          int OC);

void CPU(matmul_backward_gelu)(KernelCtx* ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* pre, int N, int C, int OC);

void CPU(step_prepare)(KernelCtx* ctx, StepControl* c);
void CPU(grad_norm_words)(KernelCtx* ctx, int64_t* out, int64_t* unit_words, int nunits);
void CPU(step_decide)(KernelCtx* ctx, StepControl* c, double* loss_sum, int64_t* norm_words, int nunits);

void CPU(gelu_forward)(KernelCtx* ctx, float* out, const float* x, size_t n);
void CPU(gelu_backward)(KernelCtx* ctx, float* dx, const float* x, const float* dout, size_t n);
void CPU(relu_forward)(KernelCtx* ctx, float* out, const float* x, size_t n);
void CPU(relu_backward)(KernelCtx* ctx, float* dx, const float* x, const float* dout, size_t n);
void CPU(geglu_forward)(KernelCtx* ctx, float* out, const float* x, int N, int F);
void CPU(geglu_backward)(KernelCtx* ctx, float* dx, const float* x, const float* dout, int N, int F);
void CPU(swiglu_forward)(KernelCtx* ctx, float* out, const float* x, int N, int F);
void CPU(swiglu_backward)(KernelCtx* ctx, float* dx, const float* x, const float* dout, int N, int F);
void CPU(rope_forward)(KernelCtx* ctx, float* x, RopeConfig r, int N, int T, int heads, int D, int stride);
void CPU(rope_backward)(KernelCtx* ctx, float* dx, RopeConfig r, int N, int T, int heads, int D, int stride);

// kernels.h's AttnBias with act_t = float (the same layout: a table pointer and three ints).
#ifdef CPU_REF_CHECK
typedef AttnBias CpuAttnBias;
#else
typedef struct {
  const float* table;
  int num_buckets, max_distance, bidirectional;
} CpuAttnBias;
#endif
void CPU(attention_forward)(KernelCtx* ctx, float* out, float* lse, const float* q, const float* k,
                            const float* v, CpuAttnBias bias, AttnShape s);
void CPU(attention_backward)(KernelCtx* ctx, float* dq, float* dk, float* dv, float* dtable,
                             const float* dout, const float* out, const float* lse, const float* q,
                             const float* k, const float* v, CpuAttnBias bias, AttnShape s);

void CPU(loss_accumulate)(KernelCtx* ctx, double* acc, const float* losses, int N);
void CPU(classifier_forward_backward)(KernelCtx* ctx, float* losses, float* logits,
                                      const int32_t* targets, int N, int V, int Vp, const float* dloss);
void CPU(softmax_row)(KernelCtx* ctx, float* probs, const float* logits_row, int V, float temperature);

int CPU(relative_position_bucket)(int relative_position, int bidirectional, int num_buckets, int max_distance);

void CPU(add_inplace)(KernelCtx* ctx, float* y, const float* x, size_t n);
void CPU(scale_act)(KernelCtx* ctx, float* x, float s, size_t n);
void CPU(fill_zero_act)(KernelCtx* ctx, float* x, size_t n);
void CPU(fill_zero_f32)(KernelCtx* ctx, float* x, size_t n);
void CPU(scale_f32)(KernelCtx* ctx, float* x, float s, size_t n);
void CPU(add_f32)(KernelCtx* ctx, float* y, const float* x, size_t n);
void CPU(cast_f32_to_act)(KernelCtx* ctx, float* out, const float* in, size_t n);
void CPU(cast_act_to_f32)(KernelCtx* ctx, float* out, const float* in, size_t n);

void CPU(block_sumsq)(KernelCtx* ctx, double* block_sums, const float* g, size_t n);
void CPU(exact_sum)(KernelCtx* ctx, int64_t* words, const double* x, size_t n);
void CPU(adamw_update)(KernelCtx* ctx, float* p, float* p_act, const float* g, float* m, float* v,
                       size_t n, AdamWArgs a);
#endif
