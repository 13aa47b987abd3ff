// train.h: the pieces of the training program around its loop (train_gpt.c): the command
// line, the data of a step, evaluation, and parameter dumps.
#ifndef FSDP_TRAIN_H
#define FSDP_TRAIN_H
#include <stdint.h>

#include "data/choices.h"
#include "data/shard.h"
#include "data/span_corrupt.h"
#include "fsdp/fsdp.h"
#include "layers/model.h"

// ---- options (train/options.c) -----------------------------------------------------
// What predict_gpt (predict/) reads: a trainer hands --predict over to it before it parses.
typedef struct {
  const char* cluster;              // --predict GPU[:NETWORK] (NULL: no prediction; "list": the catalogue)
  int sweep;                        // --predict-sweep
  double alloc_retry_ms;            // --predict-alloc-retry MS: model another allocator's retries
  const char* attention;            // --predict-attention fused|eager (NULL: not given, fused)
  int comm_sms;                     // --predict-comm-sms N: SMs a collective may hold (-1: NCCL's choice)
} PredictOptions;

#define OPTIONS_MAX 96  // long options of the trainer, at most
typedef struct {
  const char* model;
  const char* data;
  const char* val_data;
  const char* log_path;
  const char* eval_prompts;
  const char* eval_choices;         // --eval-choices FILE: llm.c's multiple-choice evaluation file
  int batch, seq, accum, global_batch, steps, warmup, enc_len, dec_len;
  float lr, lr_final_frac, weight_decay, grad_clip, beta1, beta2, adam_eps;
  uint64_t seed;
  int eval_every, eval_batches, sample_every, sample_tokens;
  int digest;
  const char* dump_params;
  int plan, plan_world;             // --plan [--world N]
  double memory_limit_gib;          // --memory-limit: plan against this instead of free memory
  int bench, bench_warmup, peak;    // --bench, --bench-warmup, --peak
  int gelu_epilogue;                // --gelu-epilogue on|off (the CUDA matmuls' GELU epilogue)
  const char* bench_json;
  const char* trace_path;           // --trace FILE
  const char* save_dir;             // --save DIR: checkpoint at the end (and every --save-every)
  int save_every;
  int keep_checkpoints;             // --keep-checkpoints N: DIR/step_NNNNNNNN, the N newest kept
  const char* resume_dir;           // --resume DIR, or --resume-if-present DIR ...
  int resume_optional;              // ... which starts a new run when DIR holds no checkpoint
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
  PredictOptions predict;           // --predict ...: the timeline backend (predict_gpt)
  FSDPOptions fsdp;
  unsigned char given[OPTIONS_MAX]; // the long options on the command line (option_given)
} Options;

// The command line's words for the FSDP options: parse_strategy takes "full", "grad-op",
// "none", "hybrid:F", "hpz", "hpz:F2"; parse_offload "params,optim,grads,activations" (any
// subset, any order), "all" or "none" as OFFLOAD_* bits; each returns 0 or -1. strategy_name
// and offload_name write them back; shard_option writes the --shard value with its factor
// (hybrid:F, hpz:F2), prefetch_name the --prefetch value.
int parse_strategy(const char* s, FSDPOptions* opt);
int parse_offload(const char* s, int* bits);
const char* strategy_name(ShardStrategy s);
void offload_name(int bits, char* out, size_t len);
void shard_option(const FSDPOptions* f, char* out, size_t len);
const char* prefetch_name(const FSDPOptions* f);
// The shape of a run, derived once from the options for the trainer, --plan and --predict.
typedef struct {
  int B;   // sequences per micro-batch (--batch)
  int T;   // tokens per sequence (GPT: --seq or the model's; T5: the decoder length)
  int Te;  // T5: the encoder length (0 for GPT)
  int W;   // ranks
  int A;   // micro-steps per optimizer step (--accum, or --global-batch / (B x W))
  int M;   // micro-batches per optimizer step over all ranks: W x A
} RunShape;
// Returns 0, or -1 with the reason in err (a --seq beyond the model, a --global-batch that does
// not split into micro-batches).
int run_shape(const Options* o, const ModelConfig* cfg, int world, RunShape* s, char* err, size_t len);
// The options a run on `world` ranks derives and checks once the model is known, before any
// data is read: its shape (run_shape; --accum and the FSDP options' micro-steps set from it),
// the model's policies (model_check_options), and what this binary can run (--plan --backend,
// --reduce-dtype, fp16's static loss scale, --sim-world, --inject-nonfinite). A combination it
// cannot run is a usage error on every rank. A plan (--plan) is checked for its shape alone.
RunShape resolve_options(Options* o, const ModelConfig* cfg, int world);
// The usage line of the binary that was run ("usage: NAME --model NAME ...").
const char* usage_line(void);
// The command line as given (options refused as parse_options says, none of its combination
// checks or the checkpoint's settings); parse_options reads it, then --resume's settings.
Options parse_command_line(int argc, char** argv);
Options parse_options(int argc, char** argv);
// Whether --NAME was on the command line (or was taken from a checkpoint by --resume).
int option_given(const Options* o, const char* name);
// Prints "error: <fmt % arg>" and the usage line on rank 0, and exits 2 on every rank.
void usage_error(const char* fmt, const char* arg) __attribute__((noreturn));

// --predict or --predict-sweep in argv: re-executes predict_gpt (the timeline backend's binary)
// with the same arguments; returns otherwise (train/predict_exec.c).
void predict_exec_if_asked(int argc, char** argv);
// --plan on the CPU binary plans the CUDA backend by default (--backend cuda): its dtypes are
// predict_gpt's, which it re-executes; --backend cpu plans its own fp32 layout.
void plan_exec_if_asked(int argc, char** argv);

// ---- a run's settings in its checkpoints (train/resume.c) ---------------------------
// The options that define a run of `world` ranks, as a JSON object of option names and their
// values as command-line words ({"lr": "0.003", ...}), which checkpoint_save writes into
// meta.json. A malloc'd string.
char* run_settings_json(const Options* o, const ModelConfig* cfg, int world);
// --resume DIR (o as given on the command line argv): the checkpoint's settings for every
// option not given again; an option given again that must agree with the checkpoint and does
// not is refused by name, one that may change (--steps, the batch, the data, the FSDP options,
// evaluation and logs) is named with both values. --resume-if-present DIR without a checkpoint
// there: o as given, a new run. Returns the options to run with.
Options resume_settings(const Options* o, int argc, char** argv);

// ---- output paths (train/outputs.c) -----------------------------------------------
// Collective, at start-up: every file and directory the run will write can be written (else
// the failing rank names it and every rank exits 2 before the first step).
void check_outputs(const Options* o, Comm* world);

// ---- stopping on a signal (train/signals.c) ------------------------------------------
// The exit status of a run stopped by SIGTERM, SIGINT or SIGUSR1 (sysexits' EX_TEMPFAIL: it
// may be resumed).
#define EXIT_STOPPED 75
// Installs the handlers: the first signal asks the run to stop after its current step; a
// second ends the process at once.
void stop_signals_install(void);
// This rank's stop signal as a word to be summed over the ranks (a 16-bit count per signal; 0:
// none), which each step carries in its inputs; the name of the first signal a summed word holds.
int64_t stop_signal_word(void);
const char* stop_signal_name(int64_t word);

// ---- learning rate (train/schedule_lr.c) ---------------------------------------------
// Linear warmup to the peak, then cosine decay to lr_final_frac of the peak.
float learning_rate(const Options* o, int step);

// ---- data (train/batch.c) ----------------------------------------------------------
// Opens and validates a glob of shards; a stream shorter than one micro-batch is refused.
void open_stream(TokenStream* ts, const char* glob, const char* what, int vocab, int B, int T);
// One micro-batch on the host: GPT token windows, or T5 span-corrupted examples, in the step's
// pinned micro-batch buffers (step_batch). The model's own token buffers live in its memory plan
// (device memory on CUDA); batch_to_model copies.
typedef struct {
  int t5, B, T, Te;
  SpanConfig span;
  uint64_t seed;
  int32_t *inputs, *targets, *enc;
} Batch;
void batch_load(Batch* b, const TokenStream* ts, int64_t g);  // global micro-batch number g
int64_t batch_valid_targets(const Batch* b);
void batch_to_model(const Batch* b, Model* m);

// ---- one optimizer step (train/step.c) ---------------------------------------------
// Where a step's micro-batches come from: `stream` (the training data), loaded into `batch`; with
// stream NULL the batch is used as it is (the timeline backend, which computes nothing).
typedef struct {
  Batch* batch;
  const TokenStream* stream;
} StepData;
// A step's two sides: its control values on the device (kernels/step_control.h) and pinned host
// buffers, two of each by step parity, so the host fills step s + 1's while step s may still read
// its own: the step's inputs, its outcome (copied back after AdamW), and its micro-batches (the
// copies into the model's token buffers read them asynchronously).
#define STEP_CONTROL_BYTES 512  // the plan's room for one StepControl (and one StepInputs)
typedef struct {
  StepControl* ctl;        // device: the plan's "step control"
  StepInputs* in[2];       // pinned host, by step parity
  StepControl* out[2];     // pinned host: the outcome of the last step of that parity
  DeviceEvent* begun[2];   // timing events: recorded as the step starts on the compute stream ...
  DeviceEvent* done[2];    // ... and after its outcome's copy
  int32_t* batches[2];     // pinned host: A micro-batches each
  size_t batch_ints;       // int32 per micro-batch: inputs, targets (and T5's encoder inputs)
  int A;
  void *host_control, *host_batches;  // the plan's regions, carved by step_start
} StepIO;
// Adds the step's regions to a plan (before memplan_allocate).
void step_plan(StepIO* io, MemPlan* p, const RunShape* s, int t5);
// After the allocation: the buffers and events, and on the device the run's constants and the
// loss scaler's state (a synchronous copy at start-up, before the first step).
void step_start(StepIO* io, const Options* o, const LossScaler* scaler);
// Points b at micro-batch j of the pinned set of step `step`'s parity: the step's micro-batches
// are the only memory a Batch has (train_step points it at each of its own in turn).
void step_batch(const StepIO* io, Batch* b, int step, int j);
typedef struct {
  int step;                // 1-based
  double loss;             // mean loss per target token, over all ranks
  double norm;             // global norm of the unscaled gradient (NaN or inf: not finite)
  double tokens;           // target tokens of the step over all ranks
  double scale;            // the loss scale the step ran with ...
  double next_scale;       // ... and after it (a dynamic scale halves on overflow, doubles after its window)
  int good;                // the dynamic scale's finite steps in a row
  float lr;
  int update;              // the parameters were updated (else the step was skipped on every rank)
  int overflow, bad;       // a dynamic scale's overflow; a skip counted toward --max-bad-steps
  int bad_steps, stopped;  // bad steps so far; the --max-bad-steps-th happened (this step, or before)
  int nonfinite_unit;      // the first unit whose gradient was not finite (-1: none)
  int64_t stop_signals;    // the stop signals the ranks had seen when it was queued (0: none)
  double seconds;          // the step on the compute stream, from its first operation to its outcome
} StepResult;
// Queues optimizer step `step` (0-based): every micro-batch's forward and backward, the loss and
// the gradient norm summed over the ranks, the step's verdict, AdamW (or a skip) and the copy of
// its outcome, all decided on the device: the host never waits inside a step (--offload, whose host
// side must wait for its copies, and --inject-nonfinite aside).
void train_step(FSDP* fs, Model* m, const StepData* d, const RunShape* s, int step, float lr, const Options* o,
                StepIO* io);
// The outcome of step `step` once its work is done: the one wait for it (the trainer reads step s
// while step s + 1 runs).
StepResult train_step_result(StepIO* io, int step);

// ---- evaluation (train/evaluate.c) -------------------------------------------------
double evaluate(Model* m, Batch* b, const TokenStream* val, int eval_batches);
typedef struct {
  int n, max_answer;
  char** prompt;
  char** answer;
} PromptSet;
PromptSet load_prompts(const char* path, int T, int V);
double exact_match(Model* m, Batch* bt, const PromptSet* ps);
// --eval-choices: the accuracy on llm.c's multiple-choice evaluation file (data/choices.h), by
// the completions' mean loss per token; collective, each rank on its share of the examples.
double choice_accuracy(Model* m, Batch* bt, const ChoiceSet* cs);
void sample_text(Model* m, Batch* bt, const TokenStream* ts, int ntokens, uint64_t seed);

// ---- the start-up table (train/settings.c) ------------------------------------------
void print_model_line(const ModelConfig* c);
void print_settings(const Options* o, const Model* m, const FSDP* fs, int A);

// ---- memory plans (train/plan.c) ---------------------------------------------------
// --plan: the layout and the memory plan of one rank of a `world`-rank run, allocating nothing.
// Returns the exit status of --plan: 1 when the plan does not fit --memory-limit, else 0.
int plan_report(const Options* o, const ModelConfig* cfg, int B, int T, int Te, int world);
// Refuses a plan that does not fit this device (or --memory-limit) before anything is allocated,
// and says what to change.
void check_plan_fits(const Options* o, const ModelConfig* cfg, int B, int T, int Te, const FSDP* fs);

// ---- speed (train/bench.c) ---------------------------------------------------------
double device_peak_flops(const char* device_name);
double measure_peak_flops(KernelCtx* k);
// This process's resident memory (/proc/self/statm), 0 when unknown.
size_t resident_bytes(void);
void bench_report(const Options* o, const Model* m, const FSDP* fs, int A, const double* ms, const double* comm_ms,
                  int n, double peak, const char* peak_source, const char* device);

// ---- parameter dumps (train/dump.c) ------------------------------------------------
void dump_params(FSDP* fs, const char* path);
#endif
