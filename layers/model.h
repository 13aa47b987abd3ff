// model.h: model configurations (presets and the custom form) and the model interface the
// training loop uses. GPT lives in layers/gpt.c; T5 is added beside it with the same interface.
#ifndef FSDP_MODEL_H
#define FSDP_MODEL_H
#include <stddef.h>
#include <stdint.h>

#include "fsdp/fsdp.h"

typedef enum { MODEL_GPT, MODEL_T5 } ModelKind;

typedef struct {
  ModelKind kind;
  char name[64];   // preset name or the custom spec
  int L;           // transformer blocks
  int C;           // model width
  int H;           // attention heads
  int V;           // vocabulary (real tokens)
  int Vp;          // vocabulary padded to a multiple of 128 (rows of the embedding / lm_head)
  int T;           // maximum sequence length (position embedding rows)
} ModelConfig;

// Parses a preset name ("gpt2-124m", ...) or a custom spec "gpt:L=2,C=72,H=3,V=509,T=32"
// (any key may be left out). Returns 0, or -1 with a message in err.
int model_config_parse(const char* spec, ModelConfig* cfg, char* err, size_t errlen);
// Lists the presets, one per line, for --help and error messages.
void model_list_presets(char* out, size_t len);

typedef struct GPT GPT;

// A model instance bound to an FSDP runtime, with activations for micro-batches of B x T.
typedef struct {
  ModelConfig cfg;
  int B, T;
  FSDP* fs;
  GPT* gpt;
  float* losses;     // per-token losses of the last forward [B*T]
  act_t* logits;     // [B*T, Vp]; after a training forward it holds the logit gradients
  int32_t* inputs;   // [B*T] the current micro-batch, written by the caller
  int32_t* targets;  // [B*T]
} Model;

// Declares the units and parameters (GPT-2 initialization), plans activations, allocates the
// one memory plan and writes the sharded initial weights.
void model_create(Model* m, const ModelConfig* cfg, FSDP* fs, int B, int T, uint64_t seed);
// Forward over m->inputs, after fsdp_begin_forward(fs, micro_step, training). With use_targets
// it computes the per-token losses against m->targets and, when training, leaves the logit
// gradients (scaled by dloss) in m->logits. Returns the sum of this micro-batch's losses.
// A training forward must be followed by model_backward.
double model_forward(Model* m, int use_targets, float dloss);
void model_backward(Model* m);
// Matmul FLOPs of one forward + backward over B*T tokens (2mnk per product, backward 2x).
double model_flops_per_step(const ModelConfig* cfg, int B, int T);
#endif
