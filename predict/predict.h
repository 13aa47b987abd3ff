// predict.h: --predict and --predict-sweep (predict/predict.c).
#ifndef FSDP_PREDICT_H
#define FSDP_PREDICT_H
#include "kernels/timeline/timeline.h"
#include "train/train.h"

typedef struct {
  double step_s;          // one optimizer step, host clock to host clock
  double exposed_comm_s;  // compute-stream stalls on collectives (as the trainer reports)
  double backward_s;      // compute stream, last forward kernel to last backward kernel
  double compute_s;       // kernels and copies on the compute stream
  double comm_s;          // collectives and their kernels on the two communication streams
  double contention_s;    // kernels' stretch beside collectives holding SMs (all streams)
  int comm_sms;           // the most SMs a collective of the step held
  double tokens_per_s;    // all GPUs
  double model_tflops;    // per GPU, the trainer's exact matmul count (model_flops)
  double mfu;             // model_tflops against the dense bf16 peak
  double seed_tflops;     // per GPU, the seeds' formula (Megatron-LM for GPT, IBM for T5)
  double plan_bytes;      // the memory plan of one GPU
  double eager_bytes;     // --predict-attention eager: the score tensors PyTorch keeps, beside the plan
  int fits;               // plan_bytes + eager_bytes within the GPU's memory
  int accum;              // micro-steps per optimizer step
  int first_op;           // the measured step's first entry in the op log (timeline_op)
} Prediction;

// Runs the trainer's step on the timeline for cluster c; -1 when --global-batch does not split.
// trace_path: the measured step as a Chrome trace (NULL: none).
int predict_run(const Options* o, const Cluster* c, const ModelConfig* cfg, const char* trace_path, Prediction* p);
void predict_print(const Options* o, const Cluster* c, const ModelConfig* cfg, const Prediction* p);
// Predicts the options a user tunes and prints the best `show`, ranked; -1 when none ran.
int predict_sweep(const Options* o, const Cluster* c, const ModelConfig* cfg, int show);
// The sharding strategies the sweep ranks on a world of W GPUs, G per node, with the run's other
// options: full, grad-op, none, hybrid:F for F = G, 2G, ... below W dividing it, and hpz:G
// (backward all-gathers inside the node) when there are several nodes. Returns how many.
#define PREDICT_MAX_STRATEGIES 16
int predict_sweep_strategies(const FSDPOptions* run, int W, int G, FSDPOptions* out);
// FLOPs of one step of `sequences` sequences by the seeds' formulas, and the formula's name.
double predict_seed_flops(const ModelConfig* c, double sequences, int T, int Te);
const char* predict_seed_formula(const ModelConfig* c);
#endif
