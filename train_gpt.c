// train_gpt.c: the training loop of fsdp.c.
//
//   options -> model + FSDP runtime -> data -> for each step: accumulate micro-batches
//   (forward, backward, gradient reduce-scatter), global-norm clip, sharded AdamW -> logs,
//   evaluation and samples.
//
// The same file builds train_gpt_cpu (fp32 reference, MPI) and train_gpt (CUDA + NCCL).
// Under mpirun every rank runs this loop on its own micro-batches; rank 0 prints and logs.
// The pieces around the loop (options, batches, evaluation) are in train/.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "fsdp/checkpoint.h"
#include "infra/clock.h"
#include "infra/dist.h"
#include "train/train.h"
#include "weights/weights.h"

// What reading a step's outcome needs: the run's settings and the per-step records.
typedef struct {
  const Options* o;
  FSDP* fs;
  StepIO* io;
  LossScaler* scaler;  // the host's record of the loss scale (checkpoints), brought up to date here
  FILE* logf;
  int total_steps, start_step, W, rank, on_cpu;
  double flops_step, recompute_step, peak;
  size_t cpu_plan, resident_before;
  double *step_ms, *comm_ms;
  int failed;  // the --max-bad-steps-th skipped step was read: the run ends with status 1
  double started;      // the host's clock when the first step was queued (progress)
  double tokens_seen;  // target tokens of every step so far (before a resume: its first step's count each)
} Reporter;

// A duration for the progress of the step line: 12.3 s, 4m05s, 2h07m.
static void duration_words(double s, char* out, size_t len) {
  if (s < 59.95) snprintf(out, len, "%.1f s", s);
  else if (s < 3600) snprintf(out, len, "%dm%02ds", (int)s / 60, (int)s % 60);
  else snprintf(out, len, "%dh%02dm", (int)(s / 3600), (int)s % 3600 / 60);
}

// Reads step `step`'s outcome (waiting for its work) and reports it: the step line, the JSON log,
// a skipped step's reason, and the stop at --max-bad-steps (rp->failed). A step's time is the
// compute stream's, from the step's first operation to its outcome (on the CPU backend, the
// host's time for it). Returns the stop signals the ranks had seen when the step began
// (train/signals.c; 0: none).
static int64_t report_step(Reporter* rp, int step) {
  const Options* o = rp->o;
  StepResult r = train_step_result(rp->io, step);
  double loss = r.loss, norm = r.norm, ms = r.seconds * 1e3;
  rp->step_ms[step] = ms;
  rp->comm_ms[step] += device_step_waited_seconds(step + 1) * 1e3;
  rp->scaler->scale = r.next_scale, rp->scaler->good = r.good;
  double tok_s = r.tokens / (ms / 1e3);
  double tflops = rp->flops_step / rp->W / (ms / 1e3) / 1e12;  // per rank
  log0("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | comm %.1f ms | %.0f tok/s | %.3g TFLOPS", step + 1,
       rp->total_steps, loss, r.lr, norm, ms, rp->comm_ms[step], tok_s, tflops);
  if (rp->recompute_step > 0) log0(" | hw %.3g TFLOPS", (rp->flops_step + rp->recompute_step) / rp->W / (ms / 1e3) / 1e12);
  if (rp->peak > 0) log0(" | MFU %.1f%%", 100 * tflops * 1e12 / rp->peak);
  if (!r.update) log0(" | SKIPPED");
  if (rp->scaler->dynamic && r.update && r.next_scale != r.scale) log0(" | loss scale %.0f -> %.0f", r.scale, r.next_scale);
  // Progress: wall time since the first step (evaluation, saves and samples included), the time
  // the remaining steps would take at that pace, and the tokens trained on.
  if (step == rp->start_step) rp->tokens_seen = (double)rp->start_step * r.tokens;
  rp->tokens_seen += r.tokens;
  double elapsed = now_seconds() - rp->started;
  double eta = elapsed / (step + 1 - rp->start_step) * (rp->total_steps - step - 1);
  char el[32], left[32];
  duration_words(elapsed, el, sizeof el);
  duration_words(eta, left, sizeof left);
  double t = rp->tokens_seen;
  log0(" | %s, ETA %s | %.3g%s tokens seen", el, left, t >= 1e9 ? t / 1e9 : t >= 1e6 ? t / 1e6 : t >= 1e3 ? t / 1e3 : t,
       t >= 1e9 ? "G" : t >= 1e6 ? "M" : t >= 1e3 ? "k" : "");
  log0("\n");
  if (rp->on_cpu && step == rp->start_step) {
    size_t now_b = resident_bytes();
    log0("memory: plan %zu bytes, measured %zu bytes (resident growth from the allocation to the end of the first step)\n",
         rp->cpu_plan, now_b > rp->resident_before ? now_b - rp->resident_before : 0);
  }
  if (rp->logf) {
    // JSON has no NaN or Infinity: a non-finite loss or norm (a skipped step) is null.
    char loss_s[32] = "null", norm_s[32] = "null";
    if (isfinite(loss)) snprintf(loss_s, sizeof loss_s, "%.17g", loss);
    if (isfinite(norm)) snprintf(norm_s, sizeof norm_s, "%.17g", norm);
    fprintf(rp->logf, "{\"step\": %d, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, \"ms\": %.3f, "
                      "\"tokens_per_s\": %.1f, \"tflops\": %.6g, \"mfu\": ", step + 1, loss_s, r.lr, norm_s, ms, tok_s, tflops);
    if (rp->peak > 0) fprintf(rp->logf, "%.6g", tflops * 1e12 / rp->peak);
    else fprintf(rp->logf, "null");
    fprintf(rp->logf, ", \"exposed_comm_ms\": %.3f, \"memory_bytes\": %zu, \"loss_scale\": %.17g, \"elapsed_s\": %.3f, "
            "\"tokens_seen\": %.0f%s}\n", rp->comm_ms[step], rp->fs->plan.total, r.scale, elapsed, rp->tokens_seen,
            r.update ? "" : ", \"skipped\": true");
    if (fflush(rp->logf) != 0 || ferror(rp->logf)) fatal("--log %s: writing failed: %s", o->log_path, strerror(errno));
  }
  trace_flush(rp->fs->trace);
  if (r.update) return r.stop_signals;
  char where[160] = "";
  if (r.nonfinite_unit >= 0)
    snprintf(where, sizeof where, "; the first unit whose gradient shard was non-finite: %s", rp->fs->units[r.nonfinite_unit].name);
  if (r.overflow)
    log0("step %5d | gradient overflow at loss scale %.0f%s: the update was skipped on every rank; the scale is now %.0f\n",
         step + 1, r.scale, where, r.next_scale);
  else
    log0("step %5d | non-finite %s%s: the update was skipped on every rank (%d of --max-bad-steps %d)\n", step + 1,
         isfinite(loss) ? "gradient norm" : "loss", where, r.bad_steps, o->max_bad_steps);
  if (r.stopped) {
    // The device stopped updating at this step: the step queued after it (if any) changed nothing.
    if (rp->rank == 0)
      fprintf(stderr, "error: stopping at step %d after %d steps with a non-finite loss or gradient%s; the "
                      "parameters are those of the last good step. Lower --lr, check the data, or resume from "
                      "a checkpoint\n", step + 1, r.bad_steps, where);
    rp->failed = 1;
  }
  return r.stop_signals;
}

int main(int argc, char** argv) {
  predict_exec_if_asked(argc, argv);  // --predict: the timeline backend's binary (predict/)
  plan_exec_if_asked(argc, argv);     // --plan for the CUDA dtypes from the CPU binary: the same
  dist_init(&argc, &argv);
  Options o = parse_options(argc, argv);
  stop_signals_install();  // SIGTERM, SIGINT, SIGUSR1: save and stop after the current step
  int W = dist_world(), rank = dist_rank();
  char err[2048];
  ModelConfig cfg;
  if (weights_resolve_model(o.model, o.init_from, &cfg, err, sizeof err)) usage_error("%s", err);
  int t5 = cfg.kind == MODEL_T5;
  RunShape shape = resolve_options(&o, &cfg, o.plan && o.plan_world ? o.plan_world : W);  // train/options.c
  int B = shape.B, T = shape.T, Te = shape.Te, A = shape.A, M = shape.M;
  char* settings = run_settings_json(&o, &cfg, W);  // what its checkpoints record for --resume (train/resume.c)
  if (o.plan) {  // --plan: lay out and plan, allocate nothing
    int rc = plan_report(&o, &cfg, B, T, Te, shape.W);  // 1: it does not fit --memory-limit
    dist_finalize();
    return rc;
  }

  // Data first: a bad path on any rank stops every rank before the model is built.
  Batch batch = {.t5 = t5, .B = B, .T = T, .Te = Te, .seed = o.seed};
  int data_vocab = cfg.V, window_tokens = T;
  if (t5) {
    // Span corruption (T5 paper 3.1.4): sentinels count down from the top of the vocabulary,
    // so data tokens must stay below the lowest sentinel an example can use.
    int raw_len, target_len, noise, spans;
    if (span_config_init(&batch.span, Te, T, cfg.V, 1, err, sizeof err) ||
        span_raw_length(&batch.span, &raw_len, &target_len, err, sizeof err))
      usage_error("%s", err);
    span_counts(&batch.span, raw_len, &noise, &spans);
    data_vocab = batch.span.sentinel_top - spans + 1;
    window_tokens = raw_len;
  }
  TokenStream train, val;
  char what_train[160] = "--data", what_val[160] = "--val-data";
  if (t5) {
    snprintf(what_train, sizeof what_train, "--data (T5: ids %d..%d are span-corruption sentinels)", data_vocab, batch.span.sentinel_top);
    snprintf(what_val, sizeof what_val, "--val-data (T5: ids %d..%d are span-corruption sentinels)", data_vocab, batch.span.sentinel_top);
  }
  open_stream(&train, o.data, what_train, data_vocab, t5 ? 1 : B, window_tokens);
  if (o.val_data) open_stream(&val, o.val_data, what_val, data_vocab, t5 ? 1 : B, window_tokens);
  PromptSet prompts = {0};
  if (o.eval_prompts) prompts = load_prompts(o.eval_prompts, T, cfg.V);
  ChoiceSet choices = {0};
  if (o.eval_choices && choices_load(o.eval_choices, cfg.V, T, &choices, err, sizeof err)) fatal("--eval-choices: %s", err);

  // Model and FSDP runtime: plan, check the plan fits, allocate once, initialize the shards.
  KernelCtx* kctx = kernels_init(dist_local_rank());  // each rank uses the GPU of its local rank
  device_gelu_epilogue(kctx, o.gelu_epilogue);
  char device[128];
  kernels_device_name(kctx, device, sizeof device);
  comm_configure(o.init_dir, o.comm_timeout);
  check_outputs(&o, comm_world());  // a typo in an output path must not cost a finished run
  FSDP fs;
  fsdp_init(&fs, model_num_units(&cfg, o.fsdp.wrap), o.fsdp, comm_world(), kctx);
  Model model;
  model_plan(&model, &cfg, &fs, B, T, Te);
  StepIO io;  // the step's control values on the device and its pinned host buffers (train/step.c)
  step_plan(&io, &fs.plan, &shape, t5);
  check_plan_fits(&o, &cfg, B, T, Te, &fs);
  size_t free_before = device_free_bytes(), resident_before = resident_bytes();
  model_allocate(&model, o.seed);
  // What the one allocation really took from the device (on a GPU: cudaMemGetInfo), beside
  // what the plan said it would.
  size_t free_after = device_free_bytes();
  double measured = free_before >= free_after ? (double)(free_before - free_after) : 0.0;
  print_model_line(&cfg);
  print_settings(&o, &model, &fs, A);
  log0("| %-22s | %-30lld |\n", "train tokens", (long long)train.total);
  if (o.val_data) log0("| %-22s | %-30lld |\n", "val tokens", (long long)val.total);
  log0("| %-22s | %-30s |\n", "device", device);
  if (!t5) {  // GPT's MLP: fc (C -> 4C) with the GELU, then its projection
    char gelu[64];
    device_describe_gelu(kctx, B * T, cfg.C, 4 * cfg.C, gelu, sizeof gelu);
    log0("| %-22s | %-30s |\n", "GELU epilogue", gelu);
  }
  memplan_print(&fs.plan);
  int on_cpu = !strcmp(kernels_backend(), "cpu");
  // On the CPU backend the plan's pinned host part (--offload) is host memory like the rest.
  size_t cpu_plan = fs.plan.total + fs.plan.host_total;
  if (on_cpu)  // host pages are committed when first touched: measured after the first step
    log0("memory: plan %zu bytes; the resident growth is measured after the first step\n", cpu_plan);
  else
    log0("memory: plan %zu bytes, measured %.0f bytes (device free memory before and after the allocation)%s\n",
         fs.plan.total, measured, fs.plan.host_total ? "; the pinned host part is in the plan's second table" : "");

  // Model FLOPs utilization against the dense peak of the device, or a measured one.
  double flops_step = M * model_flops(&cfg, B, T, Te);
  double recompute_step = M * model_recompute_flops(&cfg, B, T, Te, o.fsdp.recompute);  // hardware extra
  double peak = device_peak_flops(device);
  const char* peak_source = "datasheet dense bf16";
  if (o.peak) {
    peak = measure_peak_flops(kctx);
    peak_source = "measured with --peak";
    log0("peak: %.4g TFLOPS measured on this %s matmul\n", peak / 1e12, kernels_backend());
  }

  const char** unit_names = xcalloc(fs.nunits, sizeof(char*), "unit names");
  for (int u = 0; u < fs.nunits; u++) unit_names[u] = fs.units[u].name;
  if (o.trace_path) fs.trace = trace_open(o.trace_path, rank, W, unit_names);
  // Resuming: the weights, the AdamW state and the step; the data continues from that step, so
  // a run with the same global batch sees the same micro-batches as one that never stopped.
  int start_step = 0;
  int total_steps = o.steps + (o.bench ? o.bench_warmup : 0);
  LossScaler scaler;  // --loss-scale: 1 and static unless asked or an fp16 build (fp32 and bf16 need none)
  scaler_init(&scaler, o.loss_scale, o.loss_scale_dynamic, o.loss_scale_window);
  if (o.resume_dir) {
    char used[4300];
    LossScaler saved;
    start_step = checkpoint_load(&fs, o.resume_dir, cfg.name, used, sizeof used, &saved);
    log0("resumed from %s after step %d\n", used, start_step);
    // A dynamic scale goes on from where it was, as a GradScaler's state_dict would, unless
    // this run names its own starting scale.
    if (scaler.dynamic && saved.dynamic && !o.loss_scale_given) {
      scaler.scale = saved.scale, scaler.good = saved.good;
      log0("resumed the loss scale at %.0f (%d of %d finite steps toward doubling it)\n", scaler.scale, scaler.good,
           scaler.window);
    } else if (scaler.dynamic && saved.dynamic) {
      log0("note: the loss scale starts at %.0f as --loss-scale says, not at the checkpoint's %.0f\n", scaler.scale,
           saved.scale);
    }
    if (start_step >= total_steps)
      log0("note: the checkpoint is already at step %d and --steps is %d: no step to train%s\n", start_step,
           total_steps, o.save_dir ? ", and no new checkpoint is saved" : "");
  }
  if (o.init_from) model_source_load(&fs, &cfg, o.init_from), log0("initialized from %s\n", o.init_from);
  FILE* logf = NULL;
  if (o.log_path && rank == 0) {
    logf = fopen(o.log_path, o.resume_dir ? "a" : "w");  // a resumed run's steps follow the earlier ones
    if (!logf) fatal("--log: cannot open '%s' for writing: %s", o.log_path, strerror(errno));
  }
  if (o.save_dir && total_steps == 0) {  // --steps 0 --save: the initialized model, said so
    checkpoint_save(&fs, o.save_dir, o.keep_checkpoints, cfg.name, 0, o.seed, &scaler, settings);
    log0("step     0 | saved %s (the initial parameters: --steps 0 trains nothing)\n", o.save_dir);
  }
  Options schedule = o;  // the learning-rate schedule spans the warm-up steps of --bench too
  schedule.steps = total_steps;
  // FSDP_STEPS_LIMIT=N: this process trains at most N steps, the first N of the run as given
  // (its schedule unchanged), then ends as at the last step: for trying commands out (the
  // suite runs the README's this way).
  const char* limit_env = getenv("FSDP_STEPS_LIMIT");
  if (limit_env) {
    char* end;
    long limit = strtol(limit_env, &end, 10);
    if (!*limit_env || *end || limit < 0 || limit > 1 << 30)
      usage_error("FSDP_STEPS_LIMIT='%s' must be a whole number of steps (0 or more)", limit_env);
    if (start_step + limit < total_steps) {
      log0("note: FSDP_STEPS_LIMIT=%ld: steps %d to %ld of the run's %d, then the run ends as at its last step\n", limit,
           start_step + 1, start_step + limit, total_steps);
      total_steps = start_step + (int)limit;
    }
  }
  double* step_ms = xcalloc(schedule.steps, sizeof(double), "step times");
  double* comm_ms = xcalloc(schedule.steps, sizeof(double), "step times");
  StepData data = {.batch = &batch, .stream = &train};
  step_start(&io, &o, &scaler);
  // The batch's memory is the step's pinned micro-batches: each step points it at its own, and
  // evaluation and samples, which run between steps, read through the last one (train/batch.c).
  step_batch(&io, &batch, start_step, 0);
  Reporter rep = {.o = &o, .fs = &fs, .io = &io, .scaler = &scaler, .logf = logf, .total_steps = total_steps,
                  .start_step = start_step, .W = W, .rank = rank, .flops_step = flops_step,
                  .recompute_step = recompute_step, .peak = peak, .on_cpu = on_cpu, .cpu_plan = cpu_plan,
                  .resident_before = resident_before, .step_ms = step_ms, .comm_ms = comm_ms};
  // The loop queues step s + 1 before it reads step s's outcome, so the device never waits for the
  // host between steps (train/step.c). A step that host work follows (evaluation, a save, a sample,
  // a trace, the last step) is read at once instead, and the host work sees its parameters. A stop
  // signal (train/signals.c) reaches every rank with the outcome of the step it came before: the
  // ranks then finish the step in flight, save it (with --save) and stop.
  rep.started = now_seconds();
  int pending = -1;  // a queued step whose outcome is not read yet
  const char* stopped_by = NULL;
  for (int step = start_step; step < total_steps; step++) {
    CommStats before = fs.stats;
    train_step(&fs, &model, &data, &shape, step, learning_rate(&schedule, step), &o, &io);
    comm_ms[step] = (fs.stats.comm_seconds - before.comm_seconds) * 1e3;  // the host's own time in collectives (CPU)
    if (step == start_step) {  // the schedule's collectives, the same every step
      log0("collectives per step: %lld all-gathers (%lld of them over node groups), %lld reduce-scatters",
           (long long)(fs.stats.all_gathers - before.all_gathers),
           (long long)(fs.stats.node_all_gathers - before.node_all_gathers),
           (long long)(fs.stats.reduce_scatters - before.reduce_scatters));
      if (o.fsdp.sim_world > 1) log0(", %.3f ms of simulated link", (fs.stats.sim_link_seconds - before.sim_link_seconds) * 1e3);
      log0("\n");
    }
    int64_t signals = pending >= 0 ? report_step(&rep, pending) : 0;
    if (rep.failed) break;
    pending = step;
    int last = step + 1 == total_steps;
    int eval_now = (o.eval_every && (step + 1) % o.eval_every == 0) || last;
    int save_now = o.save_dir && ((o.save_every && (step + 1) % o.save_every == 0) || last);
    int sample_now = o.sample_every && (step + 1) % o.sample_every == 0;
    if (!(signals || eval_now || save_now || sample_now || fs.trace)) continue;
    signals |= report_step(&rep, step);
    pending = -1;
    if (rep.failed) break;
    if (signals && !last) {
      stopped_by = stop_signal_name(signals);
      if (o.save_dir) {
        checkpoint_save(&fs, o.save_dir, o.keep_checkpoints, cfg.name, step + 1, o.seed, &scaler, settings);
        log0("step %5d | saved %s\n", step + 1, o.save_dir);
      }
      log0("step %5d | stopped by %s: %s; exiting with status %d\n", step + 1, stopped_by,
           o.save_dir ? "the checkpoint above continues with --resume" : "nothing saved (no --save)", EXIT_STOPPED);
      break;
    }
    if (eval_now && o.val_data) {
      double vl = evaluate(&model, &batch, &val, o.eval_batches);
      log0("step %5d | val loss %.6f\n", step + 1, vl);
      if (logf) fprintf(logf, "{\"step\": %d, \"val_loss\": %.17g}\n", step + 1, vl);
    }
    if (eval_now && o.eval_prompts) {
      double acc = exact_match(&model, &batch, &prompts);
      log0("step %5d | exact-match accuracy %.2f%% on %d held-out prompts\n", step + 1, 100.0 * acc, prompts.n);
      if (logf) fprintf(logf, "{\"step\": %d, \"exact_match\": %.17g}\n", step + 1, acc);
    }
    if (eval_now && o.eval_choices) {
      double acc = choice_accuracy(&model, &batch, &choices);
      log0("step %5d | multiple-choice accuracy %.2f%% on %d examples of %s\n", step + 1, 100.0 * acc, choices.n,
           o.eval_choices);
      if (logf) fprintf(logf, "{\"step\": %d, \"choice_accuracy\": %.17g}\n", step + 1, acc);
    }
    if (save_now) {
      checkpoint_save(&fs, o.save_dir, o.keep_checkpoints, cfg.name, step + 1, o.seed, &scaler, settings);
      log0("step %5d | saved %s\n", step + 1, o.save_dir);
    }
    if (sample_now) sample_text(&model, &batch, o.val_data ? &val : &train, o.sample_tokens, o.seed + step);
  }
  if (rep.failed) {  // --max-bad-steps: nothing after the last good step is saved or written
    device_synchronize();
    if (logf) fclose(logf);
    dist_finalize();
    return 1;
  }
  if (o.bench && start_step == 0 && !stopped_by && total_steps == schedule.steps)  // (not cut by FSDP_STEPS_LIMIT)
    bench_report(&o, &model, &fs, A, step_ms + o.bench_warmup, comm_ms + o.bench_warmup, o.steps, peak, peak_source, device);
  if (o.digest) {
    uint64_t d = fsdp_params_digest(&fs);
    log0("params_digest %016llx\n", (unsigned long long)d);
  }
  if (o.dump_params && !stopped_by) dump_params(&fs, o.dump_params);
  if (o.export_dir && !stopped_by) {  // with the tokenizer beside the training data, when it has one
    char tokenizer_dir[4200];
    tokenizer_dir_of(o.data, tokenizer_dir, sizeof tokenizer_dir);
    weights_export(&fs, &cfg, o.export_dir, tokenizer_dir);
    log0("exported %s\n", o.export_dir);
  }
  if (logf) fclose(logf);
  trace_close(fs.trace);
  comm_shutdown();
  kernels_shutdown(kctx);
  dist_finalize();
  return stopped_by ? EXIT_STOPPED : 0;
}
