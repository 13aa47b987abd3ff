// train.h: the pieces of the training program around its loop (train_gpt.c): the command
// line, the data of a step, evaluation, and parameter dumps.
#ifndef FSDP_TRAIN_H
#define FSDP_TRAIN_H
#include <stdint.h>

#include "data/shard.h"
#include "data/span_corrupt.h"
#include "fsdp/fsdp.h"
#include "layers/model.h"

// ---- options (train/options.c) -----------------------------------------------------
typedef struct {
  const char* model;
  const char* data;
  const char* val_data;
  const char* log_path;
  const char* eval_prompts;
  int batch, seq, accum, global_batch, steps, warmup, enc_len, dec_len;
  float lr, lr_final_frac, weight_decay, grad_clip, beta1, beta2, adam_eps;
  uint64_t seed;
  int eval_every, eval_batches, sample_every, sample_tokens;
  int digest;
  const char* dump_params;
  int plan, plan_world;             // --plan [--world N]
  double memory_limit_gib;          // --memory-limit: plan against this instead of free memory
  int bench, bench_warmup, peak;    // --bench, --bench-warmup, --peak
  const char* bench_json;
  const char* trace_path;           // --trace FILE
  const char* save_dir;             // --save DIR: checkpoint at the end (and every --save-every)
  int save_every;
  int keep_checkpoints;             // --keep-checkpoints N: DIR/step_NNNNNNNN, the N newest kept
  const char* resume_dir;           // --resume DIR
  int max_bad_steps;                // --max-bad-steps N: stop at the N-th skipped non-finite step
  int inject_step, inject_rank, inject_unit;  // --inject-nonfinite STEP:RANK[:UNIT] (tests)
  int accum_given;                  // --accum was on the command line
  double loss_scale;                // --loss-scale S (1: none) ...
  int loss_scale_dynamic, loss_scale_window;  // ... or dynamic, doubled after the window
  int loss_scale_given;             // S was given (dynamic:S or S): a resume keeps it, not the checkpoint's
  const char* init_from;            // --init-from FILE|DIR: pretrained weights (weights/)
  const char* export_dir;           // --export DIR: a Hugging Face directory at the end
  const char* init_dir;             // --init-dir DIR: NCCL id exchange without MPI
  double comm_timeout;              // --comm-timeout seconds
  const char* plan_backend;         // --plan --backend cuda|cpu (NULL: cuda)
  const char* predict;              // --predict GPU[:NETWORK]: the timeline backend (predict_gpt)
  int predict_sweep;                // --predict-sweep
  double predict_alloc_retry_ms;    // --predict-alloc-retry MS: model another allocator's retries
  const char* predict_attention;    // --predict-attention fused|eager (NULL: not given, fused)
  int predict_comm_sms;             // --predict-comm-sms N: SMs a collective may hold (-1: NCCL's choice)
  FSDPOptions fsdp;
} Options;

// The usage line of the binary that was run ("usage: NAME --model NAME ...").
const char* usage_line(void);
Options parse_options(int argc, char** argv);
// Prints "error: <fmt % arg>" and the usage line on rank 0, and exits 2 on every rank.
void usage_error(const char* fmt, const char* arg) __attribute__((noreturn));

// --predict or --predict-sweep in argv: re-executes predict_gpt (the timeline backend's binary)
// with the same arguments; returns otherwise (train/predict_exec.c).
void predict_exec_if_asked(int argc, char** argv);
// --plan on the CPU binary plans the CUDA backend by default (--backend cuda): its dtypes are
// predict_gpt's, which it re-executes; --backend cpu plans its own fp32 layout.
void plan_exec_if_asked(int argc, char** argv);

// ---- output paths (train/outputs.c) -----------------------------------------------
// Collective, at start-up: every file and directory the run will write can be written (else
// the failing rank names it and every rank exits 2 before the first step).
void check_outputs(const Options* o, Comm* world);

// ---- learning rate and time (train/schedule_lr.c) ------------------------------------
double now_seconds(void);
// Linear warmup to the peak, then cosine decay to lr_final_frac of the peak.
float learning_rate(const Options* o, int step);

// ---- data (train/batch.c) ----------------------------------------------------------
// Opens and validates a glob of shards; a stream shorter than one micro-batch is refused.
void open_stream(TokenStream* ts, const char* glob, const char* what, int vocab, int B, int T);
// One micro-batch on the host: GPT token windows, or T5 span-corrupted examples. The model's
// own token buffers live in its memory plan (device memory on CUDA); batch_to_model copies.
typedef struct {
  int t5, B, T, Te;
  SpanConfig span;
  uint64_t seed;
  int32_t *inputs, *targets, *enc;
} Batch;
void batch_load(Batch* b, const TokenStream* ts, int64_t g);  // global micro-batch number g
int64_t batch_valid_targets(const Batch* b);
void batch_to_model(const Batch* b, Model* m);

// ---- evaluation (train/evaluate.c) -------------------------------------------------
double evaluate(Model* m, Batch* b, const TokenStream* val, int eval_batches);
typedef struct {
  int n, max_answer;
  char** prompt;
  char** answer;
} PromptSet;
PromptSet load_prompts(const char* path, int T, int V);
double exact_match(Model* m, Batch* bt, const PromptSet* ps);
void sample_text(Model* m, Batch* bt, const TokenStream* ts, int ntokens, uint64_t seed);

// ---- reports (train/report.c) -----------------------------------------------------
void print_model_line(const ModelConfig* c);
void print_settings(const Options* o, const Model* m, const FSDP* fs, int A);
void plan_report(const Options* o, const ModelConfig* cfg, int B, int T, int Te, int world);
void check_plan_fits(const Options* o, const ModelConfig* cfg, int B, int T, int Te, const FSDP* fs);
double device_peak_flops(const char* device_name);
double measure_peak_flops(KernelCtx* k);
// This process's resident memory (/proc/self/statm), 0 when unknown.
size_t resident_bytes(void);
void bench_report(const Options* o, const Model* m, const FSDP* fs, int A, const double* ms, const double* comm_ms,
                  int n, double peak, const char* peak_source, const char* device);

// ---- parameter dumps (train/dump.c) ------------------------------------------------
void dump_params(FSDP* fs, const char* path);
#endif
