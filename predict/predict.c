// predict.c: --predict and --predict-sweep: the trainer's step on the timeline backend, and
// what it predicts.
//
// One process is rank 0 of a world of N ranks (--world N). The FSDP runtime is laid out for N
// ranks (fsdp_init_plan, as --plan does) and given the timeline's communicators for its groups;
// the model is planned and "allocated" (address space only, never touched); then the trainer's
// own step runs (train_step, train/step.c): the same micro-batch copies, forward and backward
// through layers/ and fsdp/schedule.c, the loss all-reduce, the gradient norm and the sharded
// AdamW, on placeholder micro-batches. The step is run three times and the last one is measured
// (the first has no previous optimizer step to wait for).
#include "predict/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "kernels/timeline/timeline.h"

#define PREDICT_STEPS 3

// The seeds' own counts. Megatron-LM (Narayanan et al. 2021, eq. 3), which the FSDP paper and
// the AWS post use for GPT: 96 B s l h^2 (1 + s/6h + V/16lh) per step of B sequences, counting
// the recomputed forward of activation checkpointing (4 passes). The IBM post's appendix for T5
// (layers/t5.c: t5_flops_ibm), also with recomputation, at s = the encoder length. torchtitan's
// for Llama (its get_num_flop_per_token): 6 x the parameters but the embedding, plus 12 l h d s
// for attention (every score of the s x s matrix, causal or not) per token, three passes.
double predict_seed_flops(const ModelConfig* c, double sequences, int T, int Te) {
  if (c->kind == MODEL_T5) return t5_flops_ibm(c, (int)sequences, Te);
  if (c->kind == MODEL_LLAMA) {
    double C = c->C, D = c->D, block = C * (c->H + 2.0 * c->KV) * D + c->H * D * C + 3.0 * C * c->F + 2 * C;
    double params = c->L * block + C + (c->tied ? 0.0 : (double)c->V * C);  // the embedding left out
    return sequences * T * (6 * params + 12.0 * c->L * c->H * D * T);
  }
  double s = T, h = c->C, l = c->L;
  return 96.0 * sequences * s * l * h * h * (1 + s / (6 * h) + c->V / (16 * l * h));
}

const char* predict_seed_formula(const ModelConfig* c) {
  return c->kind == MODEL_T5 ? "IBM T5 appendix" : c->kind == MODEL_LLAMA ? "torchtitan" : "Megatron-LM";
}

// fsdp_init's groups for rank 0 (fsdp/layout.c): the shard group is F consecutive ranks (one
// communicator for all-gathers, one for reduce-scatters), the replica group the W/F ranks F apart,
// and hpz's node group F2 consecutive ranks (rank 0 keeps slice 0).
static void bind_groups(FSDP* fs, KernelCtx* k) {
  fs->kctx = k;
  fs->kctx_gather = kernels_stream_ctx(k, STREAM_ALL_GATHER);
  fs->kctx_reduce = kernels_stream_ctx(k, STREAM_REDUCE_SCATTER);
  fs->world = comm_world();
  fs->shard_group = timeline_comm_group(fs->F, 1, STREAM_REDUCE_SCATTER);
  fs->gather_group = timeline_comm_group(fs->F, 1, STREAM_ALL_GATHER);
  fs->replica_group = timeline_comm_group(fs->replicas, fs->F, STREAM_REDUCE_SCATTER);
  if (fs->secondary.F2) fs->node_group = timeline_comm_group(fs->secondary.F2, 1, STREAM_ALL_GATHER);
}

// Below the unit spans of fsdp/trace.c, every kernel, copy and collective of the measured step
// on four more tracks, one per stream, on the same clock, and a counter of the SMs collectives
// held (the kernels beside them ran on the rest).
static void write_kernel_tracks(Trace* t, int first_op) {
  static const char* names[DEVICE_STREAMS] = {"compute kernels", "all-gather stream kernels",
                                              "reduce-scatter stream kernels", "copy stream (--offload activations)"};
  for (int i = 0; i < DEVICE_STREAMS; i++)
    fprintf(t->f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
            3 + i, names[i]);
  for (int i = first_op; i < timeline_nops(); i++) {
    const TimelineOp* op = timeline_op(i);
    fprintf(t->f, ",\n{\"name\": \"%s\", \"cat\": \"kernel\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
                  "\"dur\": %.3f}", op->what, 3 + (int)op->stream, (op->start - t->origin) * 1e6, (op->end - op->start) * 1e6);
  }
  for (int i = 0; i < timeline_nsm_spans(); i++) {
    const TimelineSMs* b = timeline_sm_span(i);
    if (b->end <= t->origin) continue;  // an earlier step's
    double at[2] = {b->start, b->end};
    int sms[2] = {b->sms, 0};
    for (int k = 0; k < 2; k++)
      fprintf(t->f, ",\n{\"name\": \"SMs held by collectives\", \"ph\": \"C\", \"pid\": 0, \"ts\": %.3f, "
                    "\"args\": {\"SMs\": %d}}", (at[k] - t->origin) * 1e6, sms[k]);
  }
}

// The score tensors of the seeds' eager attention (--predict-attention eager), which fsdp.c's
// plan does not hold: what autograd keeps for every attention whose backward is still to come,
// and one attention's backward on top. With --recompute block only the block being recomputed
// keeps any (the checkpointed forward keeps none); without it, and with selective recompute
// (which keeps attention outputs), every layer's are kept from its forward to its backward.
static double eager_attention_bytes(const ModelConfig* cfg, int B, int T, int Te, int recompute) {
  EagerScoreBytes per = timeline_eager_score_bytes();
  double h = (double)B * cfg->H, self = h * T * T, enc = h * Te * Te, cross = h * T * Te;
  double largest, kept;
  if (cfg->kind == MODEL_T5) {  // encoder blocks: self-attention; decoder blocks: self and cross
    double enc_block = enc, dec_block = self + cross;
    largest = fmax(enc, fmax(self, cross));
    kept = recompute == RECOMPUTE_BLOCK ? fmax(enc_block, dec_block)
                                        : cfg->L * enc_block + cfg->Ld * dec_block;
  } else {
    largest = self;
    kept = recompute == RECOMPUTE_BLOCK ? self : cfg->L * self;
  }
  return kept * per.saved + largest * per.transient;
}

int predict_run(const Options* o, const Cluster* c, const ModelConfig* cfg, const char* trace_path, Prediction* p) {
  memset(p, 0, sizeof *p);
  timeline_configure(c);
  int W = c->world, t5 = cfg->kind == MODEL_T5;
  RunShape shape;
  char err[512];
  if (run_shape(o, cfg, W, &shape, err, sizeof err)) return -1;
  int B = shape.B, T = shape.T, Te = shape.Te, A = shape.A;
  KernelCtx* k = kernels_init(0);
  FSDP* fs = xcalloc(1, sizeof(FSDP), "prediction");
  FSDPOptions fo = o->fsdp;
  fo.accum_steps = A;
  fsdp_init_plan(fs, model_num_units(cfg, fo.wrap), fo, W);
  bind_groups(fs, k);
  Model model;
  model_plan(&model, cfg, fs, B, T, Te);
  StepIO io;
  step_plan(&io, &fs->plan, &shape, t5);
  p->plan_bytes = (double)fs->plan.total;
  if (c->attention != ATTENTION_FUSED) p->eager_bytes = eager_attention_bytes(cfg, B, T, Te, o->fsdp.recompute);
  p->fits = p->plan_bytes + p->eager_bytes <= c->gpu.memory_bytes;
  model_allocate(&model, o->seed);

  Batch batch = {.t5 = t5, .B = B, .T = T, .Te = Te};  // its buffers: the step's pinned micro-batches
  const char** unit_names = xcalloc(fs->nunits, sizeof(char*), "unit names");
  for (int u = 0; u < fs->nunits; u++) unit_names[u] = fs->units[u].name;
  // The trainer's own step (train/step.c) on placeholder micro-batches; the in-memory trace
  // gives the backward's share, the file trace (--trace) draws the measured step.
  StepData data = {.batch = &batch, .stream = NULL};
  LossScaler scaler;
  scaler_init(&scaler, o->loss_scale, o->loss_scale_dynamic, o->loss_scale_window);
  step_start(&io, o, &scaler);
  // As the trainer's loop runs them: step s + 1 is queued before step s's outcome is read, so the
  // host's issuing overlaps the device's work; the measured (last) step's time is the time between
  // the previous step's end and its own on the compute stream (what a steady loop achieves).
  // The earlier steps' spans are kept apart from the measured step's, which give its backward share
  // (read once everything has run: reading waits for the device).
  Trace* spans = trace_open(NULL, 0, 1, unit_names);
  Trace* measured = trace_open(trace_path, 0, 1, unit_names);
  double step_start = 0;
  for (int s = 0; s < PREDICT_STEPS; s++) {
    int last = s == PREDICT_STEPS - 1;
    fs->trace = last ? measured : spans;
    double t0 = timeline_host_clock(), compute = 0, comm = 0, contention0 = timeline_sm_contention();
    int op0 = timeline_nops();
    train_step(fs, &model, &data, &shape, s, o->lr, o, &io);
    if (s > 0) (void)train_step_result(&io, s - 1);
    if (last) {  // the spacing of the last two steps' ends on the compute stream
      (void)train_step_result(&io, s);
      p->step_s = device_event_seconds(io.done[(s - 1) & 1], io.done[s & 1]);
    }
    p->exposed_comm_s = device_step_waited_seconds(s + 1);
    p->contention_s = timeline_sm_contention() - contention0;
    p->comm_sms = 0;
    for (int i = 0; i < timeline_nsm_spans(); i++)
      if (timeline_sm_span(i)->end > t0 && timeline_sm_span(i)->sms > p->comm_sms) p->comm_sms = timeline_sm_span(i)->sms;
    for (int i = op0; i < timeline_nops(); i++) {
      const TimelineOp* op = timeline_op(i);
      if (op->stream == STREAM_COMPUTE) compute += op->end - op->start;
      else comm += op->end - op->start;
    }
    p->compute_s = compute;
    p->comm_s = comm;
    p->first_op = op0;
    step_start = t0;
  }
  p->backward_s = trace_backward_seconds(measured);
  if (trace_path) {
    measured->origin = step_start;  // time 0: the start of the measured step
    trace_flush(measured);
    write_kernel_tracks(measured, p->first_op);
  }
  trace_close(measured);
  trace_close(spans);
  fs->trace = NULL;

  double M = (double)W * A, sequences = M * B;
  p->accum = A;
  p->tokens_per_s = sequences * T / p->step_s;
  p->model_tflops = M * model_flops(cfg, B, T, Te) / W / p->step_s / 1e12;
  p->mfu = p->model_tflops * 1e12 / c->gpu.peak_flops;
  p->seed_tflops = predict_seed_flops(cfg, sequences, T, Te) / W / p->step_s / 1e12;
  memplan_free(&fs->plan);
  free(unit_names);
  return 0;
}

void predict_print(const Options* o, const Cluster* c, const ModelConfig* cfg, const Prediction* p) {
  char strat[32];
  shard_option(&o->fsdp, strat, sizeof strat);
  int t5 = cfg->kind == MODEL_T5;
  printf("predict | %s | %d x %s | network %s (%d GPUs per node, %.0f GB/s per node) | %s | batch %d", cfg->name,
         c->world, c->gpu.name, c->net.name, c->net.gpus_per_node, c->net.node_bytes_s / 1e9, strat, o->batch);
  if (t5) printf(" | encoder %d decoder %d", o->enc_len, o->dec_len);
  else printf(" | seq %d", o->seq ? o->seq : cfg->T);
  printf(" | accum %d\n", p->accum);
  printf("| %-40s | %14s |\n", "predicted", "value");
  printf("| %-40s | %14.2f |\n", "step time (ms)", p->step_s * 1e3);
  printf("| %-40s | %14.0f |\n", "tokens/s (all GPUs)", p->tokens_per_s);
  printf("| %-40s | %14.2f |\n", "model TFLOPS per GPU (trainer's count)", p->model_tflops);
  printf("| %-40s | %13.1f%% |\n", "MFU (dense bf16 peak)", 100 * p->mfu);
  printf("| %-40s | %14.2f |\n", "exposed communication (ms)", p->exposed_comm_s * 1e3);
  printf("| %-40s | %13.1f%% |\n", "backward share of the step", 100 * p->backward_s / p->step_s);
  printf("| %-40s | %14.2f |\n", "compute stream busy (ms)", p->compute_s * 1e3);
  printf("| %-40s | %14.2f |\n", "collectives, all streams (ms)", p->comm_s * 1e3);
  char held[64];
  snprintf(held, sizeof held, "SMs a collective holds (of %d)", c->gpu.sms);
  printf("| %-40s | %14d |\n", held, p->comm_sms);
  printf("| %-40s | %14.2f |\n", "kernels slowed by collectives' SMs (ms)", p->contention_s * 1e3);
  printf("| %-40s | %14.2f |\n", "memory plan per GPU (GiB)", p->plan_bytes / 1073741824.0);
  if (c->attention != ATTENTION_FUSED)
    printf("| %-40s | %14.2f |\n", "eager attention's score tensors (GiB)", p->eager_bytes / 1073741824.0);
  printf("| %-40s | %14s |\n", "fits the GPU's memory", p->fits ? "yes" : "NO");
  char label[64];
  snprintf(label, sizeof label, "TFLOPS per GPU (%s formula)", predict_seed_formula(cfg));
  printf("| %-40s | %14.2f |\n", label, p->seed_tflops);
  if (cfg->kind == MODEL_T5)
    printf("note: the IBM formula takes every matmul as h = d_model wide over one sequence length (the encoder's); "
           "for %s it gives %.2fx the trainer's count: compare it with the IBM post's figures only\n",
           cfg->name, p->seed_tflops / p->model_tflops);
  if (c->alloc_retry_s > 0)
    printf("note: with an allocator retry of %.0f ms before each all-gather (not fsdp.c's allocator)\n", c->alloc_retry_s * 1e3);
  if (c->comm_sms_max >= 0)
    printf("note: each collective holds at most %d SMs (--predict-comm-sms)\n", c->comm_sms_max);
  if (c->attention != ATTENTION_FUSED)
    printf("note: with %s's unfused attention (not fsdp.c's fused kernel)\n",
           c->attention == ATTENTION_EAGER_HF_T5 ? "Hugging Face T5" : "minGPT");
  if (!p->fits)
    printf("note: the plan%s needs %.2f GiB per GPU, more than the %s's %.0f GiB: the run would not start (the time is "
           "predicted as if it did)\n", p->eager_bytes > 0 ? " with the eager attention's score tensors" : "",
           (p->plan_bytes + p->eager_bytes) / 1073741824.0, c->gpu.name, c->gpu.memory_bytes / 1073741824.0);
  if (o->trace_path) printf("trace: %s (the measured step, modelled times)\n", o->trace_path);
  printf("predict_tflops_per_gpu %.2f\n", p->seed_tflops);  // the last line, for scripts
}

typedef struct {
  FSDPOptions fsdp;
  int batch;
  Prediction p;
} SweepRow;

static int by_tflops(const void* a, const void* b) {
  const SweepRow *x = a, *y = b;
  if (x->p.fits != y->p.fits) return y->p.fits - x->p.fits;
  return (x->p.seed_tflops < y->p.seed_tflops) - (x->p.seed_tflops > y->p.seed_tflops);
}

// Predicts option set v at micro-batches 1, 2, 4, ... while they fit; appends the rows.
static void sweep_batches(const Options* o, FSDPOptions f, const Cluster* c, const ModelConfig* cfg, SweepRow* rows,
                          int* n, int cap) {
  for (int b = 1; b <= 2048 && *n < cap; b *= 2) {
    Options v = *o;
    v.fsdp = f;
    v.batch = b;
    v.global_batch = 0;
    SweepRow* r = &rows[*n];
    if (predict_run(&v, c, cfg, NULL, &r->p)) continue;
    r->fsdp = v.fsdp;
    r->batch = b;
    (*n)++;
    if (!r->p.fits) break;  // larger batches fit even less
  }
}

int predict_sweep_strategies(const FSDPOptions* run, int W, int G, FSDPOptions* out) {
  int ns = 0;
  FSDPOptions base = *run;
  base.strategy = SHARD_FULL;
  out[ns++] = base;
  base.strategy = SHARD_GRAD_OP;
  out[ns++] = base;
  base.strategy = SHARD_NONE;
  out[ns++] = base;
  for (int f = G; f < W && ns < PREDICT_MAX_STRATEGIES - 1; f *= 2)
    if (W % f == 0) {
      base.strategy = SHARD_HYBRID;
      base.hybrid_factor = f;
      out[ns++] = base;
    }
  if (G > 1 && G < W && W % G == 0) {  // full sharding resharded to the node after forward
    base.strategy = SHARD_HPZ;
    base.hpz_factor = G;
    out[ns++] = base;
  }
  return ns;
}

// --predict-sweep: the options a user tunes, each predicted, ranked by TFLOPS per GPU among the
// plans that fit. First the schedule (strategy and hybrid factor, the all-gather limit,
// prefetch) with the run's memory options, over micro-batches within the memory plan; then, for
// the best schedule found, the memory options (recompute, wrapping, offload), which trade
// FLOPs, collectives and PCIe traffic for a larger micro-batch.
int predict_sweep(const Options* o, const Cluster* c, const ModelConfig* cfg, int show) {
  FSDPOptions strategies[PREDICT_MAX_STRATEGIES];
  int ns = predict_sweep_strategies(&o->fsdp, c->world, c->net.gpus_per_node, strategies), W = c->world;
  static const int limits[] = {1, 2, 4};
  static const int prefetch[][2] = {{1, 1}, {1, 0}, {0, 1}, {0, 0}};
  int cap = ns * 3 * 4 * 12 + 3 * 2 * 4 * 12, n = 0;
  SweepRow* rows = xcalloc(cap, sizeof(SweepRow), "sweep");
  for (int s = 0; s < ns; s++)
    for (int l = 0; l < 3; l++) {
      int reshards = strategies[s].strategy != SHARD_GRAD_OP && strategies[s].strategy != SHARD_NONE;
      if (!reshards && l > 0) continue;  // the slot pool holds every block anyway
      for (int pf = 0; pf < 4; pf++) {
        FSDPOptions f = strategies[s];
        f.limit_all_gathers = limits[l];
        f.prefetch_forward = prefetch[pf][0];
        f.prefetch_backward = prefetch[pf][1];
        sweep_batches(o, f, c, cfg, rows, &n, cap);
      }
    }
  qsort(rows, n, sizeof *rows, by_tflops);
  if (n > 0) {
    static const int recompute[] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_BLOCK};
    static const int offload[] = {0, OFFLOAD_OPTIM, OFFLOAD_OPTIM | OFFLOAD_ACTIVATIONS,
                                  OFFLOAD_PARAMS | OFFLOAD_OPTIM | OFFLOAD_GRADS | OFFLOAD_ACTIVATIONS};
    int gpt = model_num_units(cfg, WRAP_LINEAR) > model_num_units(cfg, WRAP_BLOCK);  // a per-linear policy
    FSDPOptions best = rows[0].fsdp;
    for (int r = 0; r < 3; r++)
      for (int w = 0; w < (gpt ? 2 : 1); w++)
        for (int off = 0; off < 4; off++) {
          FSDPOptions f = best;
          f.recompute = recompute[r];
          f.wrap = w ? WRAP_LINEAR : WRAP_BLOCK;
          f.offload = offload[off];
          if (f.recompute == best.recompute && f.wrap == best.wrap && f.offload == best.offload) continue;
          sweep_batches(o, f, c, cfg, rows, &n, cap);
        }
  }
  qsort(rows, n, sizeof *rows, by_tflops);
  printf("predict-sweep | %s | %d x %s on %s | %d configurations, ranked by TFLOPS per GPU (%s formula)\n", cfg->name, W,
         c->gpu.name, c->net.name, n, predict_seed_formula(cfg));
  printf("| %4s | %-10s | %5s | %-8s | %-9s | %-6s | %-18s | %5s | %10s | %9s | %9s | %8s | %9s |\n", "rank", "shard",
         "limit", "prefetch", "recompute", "wrap", "offload", "batch", "step (ms)", "exposed", "TFLOPS", "MFU", "mem GiB");
  static const char* rc_names[] = {"none", "block", "selective"};
  for (int i = 0; i < n && i < show; i++) {
    char strat[32], off[64];
    shard_option(&rows[i].fsdp, strat, sizeof strat);
    offload_name(rows[i].fsdp.offload, off, sizeof off);
    const Prediction* p = &rows[i].p;
    printf("| %4d | %-10s | %5d | %-8s | %-9s | %-6s | %-18s | %5d | %10.1f | %9.1f | %9.2f | %7.1f%% | %8.2f%s |\n", i + 1,
           strat, rows[i].fsdp.limit_all_gathers, prefetch_name(&rows[i].fsdp), rc_names[rows[i].fsdp.recompute],
           rows[i].fsdp.wrap == WRAP_LINEAR ? "linear" : "block", off, rows[i].batch, p->step_s * 1e3, p->exposed_comm_s * 1e3,
           p->seed_tflops, 100 * p->mfu, (p->plan_bytes + p->eager_bytes) / 1073741824.0, p->fits ? "" : " (too big)");
  }
  // The seeds' formulas count a recomputed forward whatever --recompute is (and IBM's counts the
  // T5 decoder at the encoder's length), so their TFLOPS can pass what the GPU reaches; ranked by
  // them is ranked by tokens/s. Say so beside the table.
  if (n > 0) {
    printf("TFLOPS: the %s formula, which counts %s whatever --recompute is%s;\n"
           "the ranking is by tokens/s. MFU: the trainer's count of the passes that run, over the dense bf16 peak.\n",
           predict_seed_formula(cfg), cfg->kind == MODEL_LLAMA ? "3 passes and every attention score" : "a recomputed forward (4 passes)",
           cfg->kind == MODEL_T5 ? ", and the decoder at the encoder's length" : "");
    printf("predict_tflops_per_gpu %.2f\n", rows[0].p.seed_tflops);
  }
  free(rows);
  return n > 0 ? 0 : -1;
}
