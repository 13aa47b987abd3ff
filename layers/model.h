// model.h: model configurations (presets and custom forms) and the model interface the
// training loop uses. A model family is a table of functions (ModelFamily): GPT's in
// layers/gpt.c, T5's in layers/t5.c, Llama's in layers/llama.c; model.c looks the family up
// and runs what is common to all of them (the classifier, the loss, the plan's allocation).
#ifndef FSDP_MODEL_H
#define FSDP_MODEL_H
#include <stddef.h>
#include <stdint.h>

#include "fsdp/fsdp.h"

typedef enum { MODEL_GPT, MODEL_T5, MODEL_LLAMA } ModelKind;

// Llama 3's vocabulary: 128000 byte-pair pieces, then 256 special tokens, <|begin_of_text|>
// (which starts every text) first.
#define LLAMA3_VOCAB 128256
#define LLAMA3_BEGIN_OF_TEXT 128000

typedef struct {
  ModelKind kind;
  char name[128];  // preset name or the custom spec
  int L;           // transformer blocks (T5: encoder blocks)
  int Ld;          // T5: decoder blocks (0 for GPT)
  int C;           // model width (d_model)
  int H;           // attention heads
  int KV;          // Llama: key/value heads (grouped-query attention, KV divides H); else H
  int D;           // head size (GPT, Llama: C/H; T5: d_kv, so H*D may differ from C)
  int F;           // MLP hidden width (GPT: 4C; T5: d_ff; Llama: intermediate_size)
  int V;           // vocabulary (real tokens)
  int Vp;          // vocabulary padded to a multiple of 128 (rows of the embedding / lm_head)
  int T;           // GPT: maximum sequence length (position embedding rows); T5: 0 (relative);
                   // Llama: the longest sequence (max_position_embeddings)
  int gated;       // T5 v1.1: gated-GELU feed-forward (else ReLU)
  int tied;        // lm_head is the token embedding (GPT, T5 v1.0, Llama 3.2 1B and 3B)
  float norm_eps;  // Llama: the RMS norms' epsilon (rms_norm_eps)
  RopeConfig rope; // Llama: rotary embeddings (rope_theta and rope_scaling)
} ModelConfig;

// Parses a preset name ("gpt2-124m", "t5-base", "llama3.1-8b", ...) or a custom spec
// "gpt:L=2,C=72,H=3,V=509,T=32" / "t5:L=2,C=64,H=4,D=16,F=128,V=300" / "t5v1.1:..." /
// "llama:L=2,C=64,H=4,KV=2,F=160,V=300,T=64" (any key may be left out; values are digits only).
// Returns 0, or -1 with a message in err; a model of more than MODEL_MAX_BLOCKS blocks or
// MODEL_MAX_PARAMS parameters is refused (gpt-1t, the largest preset, has 128 blocks and 1e12
// parameters).
#define MODEL_MAX_BLOCKS 4096
#define MODEL_MAX_PARAMS 17592186044416.0  // 2^44
int model_config_parse(const char* spec, ModelConfig* cfg, char* err, size_t errlen);
// Lists the presets, one per line, for --help and error messages.
void model_list_presets(char* out, size_t len);
// Refuses, naming the fix, an FSDP option the model has no policy for (--wrap linear is GPT's
// and Llama's).
void model_check_options(const ModelConfig* cfg, const FSDPOptions* o);
// Units of the model: the root + one per block (--wrap block) or one per matmul weight of a
// block (--wrap linear, GPT and Llama).
int model_num_units(const ModelConfig* cfg, int wrap);

// A model instance bound to an FSDP runtime, with activations for micro-batches of B rows.
typedef struct {
  ModelConfig cfg;
  int B;
  int T;             // tokens per row (GPT) / decoder length (T5)
  int Te;            // T5: encoder length (0 for GPT)
  FSDP* fs;
  void* impl;        // the model's own state (struct GPT / struct T5)
  float* losses;     // per-token losses of the last forward [B*T]
  double* loss_sum;  // the losses of the forwards since the last model_take_loss, summed on the device
  act_t* logits;     // [B*T, Vp]; after a training forward it holds the logit gradients
  int32_t* inputs;   // [B*T] GPT tokens / T5 decoder inputs, written by the caller
  int32_t* targets;  // [B*T] next tokens; < 0 marks positions the loss ignores
  int32_t* enc_inputs;  // [B*Te] T5 encoder inputs
} Model;

// Declares the units and parameters and plans the activations (nothing is allocated: this is
// what --plan prints). Then model_allocate makes the one allocation and writes the sharded
// initial weights. model_create does both.
void model_plan(Model* m, const ModelConfig* cfg, FSDP* fs, int B, int T, int Te);
void model_allocate(Model* m, uint64_t seed);
void model_create(Model* m, const ModelConfig* cfg, FSDP* fs, int B, int T, int Te, uint64_t seed);
// Forward over the current micro-batch, after fsdp_begin_forward(fs, micro_step, training).
// With use_targets it computes the per-token losses against m->targets and, when training,
// leaves the logit gradients (scaled by *dloss, a float in the backend's memory: the step's loss
// scale is decided on the device; NULL: 0) in m->logits. Returns the sum of this micro-batch's
// losses. A training forward must be followed by model_backward.
double model_forward(Model* m, int use_targets, const float* dloss);
// The same forward with targets, its loss sum left on the device and added to m->loss_sum: the
// training step sums it over the ranks and decides on it there (train/step.c), and the host reads
// it once, with the step's outcome, instead of once per micro-batch.
void model_forward_accumulate(Model* m, const float* dloss);
// The losses summed on the device since the last call (the sum of the micro-batches' sums, in
// order); resets the sum.
double model_take_loss(Model* m);
void model_backward(Model* m);
// Matmul FLOPs of one forward + backward over one micro-batch (2mnk per product; backward
// twice the forward; causal attention counts only the scores it computes).
double model_flops(const ModelConfig* cfg, int B, int T, int Te);
// The matmul FLOPs activation checkpointing adds (--recompute block: one more forward of every
// block), for hardware FLOPs = model_flops + this; MFU stays on model FLOPs.
double model_recompute_flops(const ModelConfig* cfg, int B, int T, int Te, int recompute);

// A model family: what model.c looks up by the configuration's kind.
typedef struct {
  const char* name;
  // The units a block is wrapped into under --wrap (WRAP_BLOCK: 1); 0 when the family has no
  // such policy.
  int (*units_per_block)(int wrap);
  // Declares the units and their parameters (fsdp_add_param), finalizes the layout, and plans
  // the activations in one walk that also places every tensor in its region (memplan_view), so
  // the plan's allocation carves them all.
  void (*plan)(Model* m);
  // Forward of the current micro-batch up to m->logits; backward from the logit gradients the
  // classifier left there. The schedule's points of every unit are the family's to call.
  void (*forward)(Model* m);
  void (*backward)(Model* m);
  // Matmul FLOPs of one forward + backward over B sequences of T tokens (T5: T decoder and Te
  // encoder tokens), as model_flops counts them.
  double (*flops)(const ModelConfig* cfg, int B, int T, int Te);
} ModelFamily;
extern const ModelFamily gpt_family, t5_family, llama_family;

// A decoder block as a fixed sequence of stages (GPT, Llama), each stage's parameters one unit
// under --wrap linear, or the whole block one unit: the schedule's points around the stages are
// written once here (model.c), the stages are the family's.
typedef struct {
  int stages;
  int (*unit)(const Model* m, int l, int s);  // the unit of stage s of block l
  void (*forward)(Model* m, int l, int s, const act_t* x, act_t* out);
  void (*backward)(Model* m, int l, int s, const act_t* x);
} BlockStages;
// Block l's forward from x into out, each unit unsharded before its first stage and resharded
// after its last.
void block_stages_forward(Model* m, const BlockStages* b, int l, const act_t* x, act_t* out);
// Block l's backward; with --recompute block its forward first, into scratch (the block's output
// is not needed again), on parameters gathered for backward.
void block_stages_backward(Model* m, const BlockStages* b, int l, const act_t* x, act_t* scratch);
// The FLOP counts (layers/config.c).
double gpt_flops(const ModelConfig* cfg, int B, int T, int Te);
double llama_flops(const ModelConfig* cfg, int B, int T, int Te);
double t5_flops(const ModelConfig* cfg, int B, int Td, int Te);
// The T5 formula of the IBM post's appendix (Megatron style, with recompute: 4 passes).
double t5_flops_ibm(const ModelConfig* cfg, int B, int s);
#endif
