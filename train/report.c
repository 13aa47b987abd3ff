// report.c: what the trainer tells its user: the start-up table, the memory plan (--plan),
// the device's peak matmul rate (--peak) and the benchmark summary (--bench).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infra/clock.h"
#include "infra/dist.h"
#include "train/train.h"

void print_model_line(const ModelConfig* c) {
  if (c->kind == MODEL_T5)
    log0("fsdp.c | model %s | T5 %s | L=%d+%d C=%d H=%d D=%d F=%d V=%d (padded %d)\n", c->name,
         c->gated ? "v1.1" : "v1.0", c->L, c->Ld, c->C, c->H, c->D, c->F, c->V, c->Vp);
  else if (c->kind == MODEL_LLAMA)
    log0("fsdp.c | model %s | Llama | L=%d C=%d H=%d KV=%d D=%d F=%d V=%d (padded %d) T=%d rope theta %g%s %s\n",
         c->name, c->L, c->C, c->H, c->KV, c->D, c->F, c->V, c->Vp, c->T, c->rope.theta,
         c->rope.factor > 0 ? ", 3.1 scaling" : "", c->tied ? "tied" : "untied");
  else
    log0("fsdp.c | model %s | GPT | L=%d C=%d H=%d V=%d (padded %d) T=%d\n", c->name, c->L, c->C, c->H, c->V, c->Vp, c->T);
}

void print_settings(const Options* o, const Model* m, const FSDP* fs, int A) {
  const ModelConfig* c = &m->cfg;
  int W = fs->world_size, M = W * A;
  char shard[64];
  if (o->fsdp.strategy == SHARD_HPZ)
    snprintf(shard, sizeof shard, "hpz (F=%d, node groups of %d)", fs->F, fs->secondary.F2);
  else
    snprintf(shard, sizeof shard, "%s (F=%d, %d replica%s)", strategy_name(o->fsdp.strategy), fs->F,
             fs->replicas, fs->replicas > 1 ? "s" : "");
  log0("| %-22s | %-30s |\n", "setting", "value");
  log0("| %-22s | %-30d |\n", "ranks", W);
  if (!strcmp(kernels_backend(), "cpu")) log0("| %-22s | %-30d |\n", "OpenMP threads per rank", dist_threads());
  log0("| %-22s | %-30s |\n", "sharding", shard);
  log0("| %-22s | %-30d |\n", "limit all-gathers", o->fsdp.limit_all_gathers);
  if (o->fsdp.sim_world > 1) {
    char sim[64];
    snprintf(sim, sizeof sim, "%d ranks at %g GB/s", o->fsdp.sim_world, o->fsdp.sim_gbps);
    log0("| %-22s | %-30s |\n", "simulated link", sim);
  }
  log0("| %-22s | %-30s |\n", "prefetch", prefetch_name(&o->fsdp));
  log0("| %-22s | %-30s |\n", "recompute", o->fsdp.recompute == RECOMPUTE_BLOCK       ? "block (activation checkpointing)"
                                          : o->fsdp.recompute == RECOMPUTE_SELECTIVE ? "selective (norms, activations)"
                                                                                     : "none");
  char offload[64];
  offload_name(o->fsdp.offload, offload, sizeof offload);
  log0("| %-22s | %-30s |\n", "offload to host", offload);
  log0("| %-22s | %-30s |\n", "wrap", o->fsdp.wrap == WRAP_LINEAR ? "linear (a unit per matmul)" : "block");
  char precision[64], scale[64];
  snprintf(precision, sizeof precision, "%s compute, reduce %s", ACT_NAME, dtype_name(o->fsdp.reduce_dtype));
  log0("| %-22s | %-30s |\n", "precision", precision);
  if (o->loss_scale_dynamic)
    snprintf(scale, sizeof scale, "dynamic %.0f, window %d", o->loss_scale, o->loss_scale_window);
  else
    snprintf(scale, sizeof scale, o->loss_scale == 1.0 ? "none" : "static %.0f", o->loss_scale);
  log0("| %-22s | %-30s |\n", "loss scale", scale);
  log0("| %-22s | %-30s |\n", "gradient accumulation", o->fsdp.sync_accum ? "reduce every micro-step" : "no sync (reduce on last)");
  log0("| %-22s | %-30d |\n", "micro-batch (B)", m->B);
  if (c->kind == MODEL_T5) {
    log0("| %-22s | %-30d |\n", "encoder length", m->Te);
    log0("| %-22s | %-30d |\n", "decoder length", m->T);
  } else {
    log0("| %-22s | %-30d |\n", "sequence (T)", m->T);
  }
  log0("| %-22s | %-30d |\n", "accumulation (A)", A);
  log0("| %-22s | %-30lld |\n", "sequences per step", (long long)M * m->B);
  log0("| %-22s | %-30d |\n", "steps", o->steps);
  log0("| %-22s | %-30g |\n", "learning rate", o->lr);
  log0("| %-22s | %-30d |\n", "warmup", o->warmup);
  log0("| %-22s | %-30g |\n", "weight decay", o->weight_decay);
  log0("| %-22s | %-30g |\n", "grad clip", o->grad_clip);
  log0("| %-22s | %-30llu |\n", "seed", (unsigned long long)o->seed);
  log0("| %-22s | %-30lld |\n", "parameters", (long long)fsdp_num_params(fs));
  log0("| %-22s | %-30lld |\n", "padded flat elements", (long long)fsdp_num_padded(fs));
  log0("| %-22s | %-30d |\n", "units", fs->nunits);
  log0("| %-22s | %-30.4g |\n", "matmul FLOPs per step", M * model_flops(c, m->B, m->T, m->Te));
  if (c->kind == MODEL_T5) log0("| %-22s | %-30.4g |\n", "IBM T5 formula (s=enc)", M * t5_flops_ibm(c, m->B, m->Te));
}

// The training step's own regions (train/step.c), as a run plans them.
static void plan_step(MemPlan* p, const ModelConfig* cfg, int B, int T, int Te, int world, int A) {
  if (A < 1) A = 1;
  RunShape s = {.B = B, .T = T, .Te = Te, .W = world, .A = A, .M = world * A};
  StepIO io;
  step_plan(&io, p, &s, cfg->kind == MODEL_T5);
}

// Device bytes per rank of the plan of a `world`-rank run with the FSDP options f (plan only);
// its pinned host bytes into *host when not NULL.
static size_t plan_totals(const ModelConfig* cfg, FSDPOptions f, int B, int T, int Te, int world, size_t* host) {
  FSDP fs;
  fsdp_init_plan(&fs, model_num_units(cfg, f.wrap), f, world);
  Model m;
  model_plan(&m, cfg, &fs, B, T, Te);
  plan_step(&fs.plan, cfg, B, T, Te, world, f.accum_steps);
  if (host) *host = fs.plan.host_total;
  return fs.plan.total;  // (the layout tables are left to the process: planning is short-lived)
}

static size_t plan_total(const ModelConfig* cfg, FSDPOptions f, int B, int T, int Te, int world) {
  return plan_totals(cfg, f, B, T, Te, world, NULL);
}

// The memory-saving options, in the order a recommendation adds them: recompute (FLOPs, no
// memory traffic), full sharding, per-linear units (smaller collectives), then offload by what
// it saves per byte over PCIe (AdamW state, block outputs, then shards copied at every gather
// and reduction), then one unsharded unit at a time. Each sets its option in g and returns 1,
// or 0 when g has it already or the model has no such policy (per-linear units are GPT's and
// Llama's).
typedef struct {
  const char* flag;
  int (*add)(FSDPOptions* g, int gpt);
} MemoryOption;
static int add_selective(FSDPOptions* g, int gpt) {
  return g->recompute == RECOMPUTE_NONE ? (g->recompute = RECOMPUTE_SELECTIVE, 1) : 0;
}
static int add_block(FSDPOptions* g, int gpt) {
  return g->recompute != RECOMPUTE_BLOCK ? (g->recompute = RECOMPUTE_BLOCK, 1) : 0;
}
static int add_full(FSDPOptions* g, int gpt) { return g->strategy != SHARD_FULL ? (g->strategy = SHARD_FULL, 1) : 0; }
static int add_linear(FSDPOptions* g, int gpt) { return gpt && g->wrap != WRAP_LINEAR ? (g->wrap = WRAP_LINEAR, 1) : 0; }
static int add_offload(FSDPOptions* g, int bit) { return !(g->offload & bit) ? (g->offload |= bit, 1) : 0; }
static int add_optim(FSDPOptions* g, int gpt) { return add_offload(g, OFFLOAD_OPTIM); }
static int add_acts(FSDPOptions* g, int gpt) { return add_offload(g, OFFLOAD_ACTIVATIONS); }
static int add_params(FSDPOptions* g, int gpt) { return add_offload(g, OFFLOAD_PARAMS); }
static int add_grads(FSDPOptions* g, int gpt) { return add_offload(g, OFFLOAD_GRADS); }
static int add_limit1(FSDPOptions* g, int gpt) {
  return g->limit_all_gathers > 1 ? (g->limit_all_gathers = 1, 1) : 0;
}
static const MemoryOption memory_options[] = {
    {"--recompute selective", add_selective}, {"--recompute block", add_block},
    {"--shard full", add_full},               {"--wrap linear", add_linear},
    {"--offload optim", add_optim},           {"--offload activations", add_acts},
    {"--offload params", add_params},         {"--offload grads", add_grads},
    {"--limit-all-gathers 1", add_limit1},
};
#define NUM_MEMORY_OPTIONS ((int)(sizeof memory_options / sizeof memory_options[0]))

// What each memory option the run does not use would change, added alone to its options.
static void print_savings(const Options* o, const ModelConfig* cfg, int B, int T, int Te, int world, const MemPlan* plan) {
  int gpt = model_num_units(cfg, WRAP_LINEAR) > model_num_units(cfg, WRAP_BLOCK);  // a per-linear policy (GPT, Llama)
  log0("what each memory option would save per rank, added alone to this run's:\n");
  for (int i = 0; i < NUM_MEMORY_OPTIONS; i++) {
    FSDPOptions g = o->fsdp;
    if (!memory_options[i].add(&g, gpt)) continue;
    size_t host = 0, dev = plan_totals(cfg, g, B, T, Te, world, &host);
    log0("  %-24s %+9.2f GiB device", memory_options[i].flag, ((double)dev - (double)plan->total) / 1073741824.0);
    if (host != plan->host_total) log0(", %+9.2f GiB pinned host", ((double)host - (double)plan->host_total) / 1073741824.0);
    log0("\n");
  }
}

// The options of g that differ from the run's own f, as flags (for a recommendation).
static void added_flags(const FSDPOptions* f, const FSDPOptions* g, char* out, size_t len) {
  static const char* rc[] = {"none", "block", "selective"};
  size_t used = 0;
  out[0] = 0;
#define ADD(...) used += (size_t)snprintf(out + used, used < len ? len - used : 0, __VA_ARGS__)
  if (g->recompute != f->recompute) ADD("%s--recompute %s", used ? " " : "", rc[g->recompute]);
  if (g->strategy != f->strategy) ADD("%s--shard %s", used ? " " : "", strategy_name(g->strategy));
  if (g->offload != f->offload) {
    char names[64];
    offload_name(g->offload, names, sizeof names);
    ADD("%s--offload %s", used ? " " : "", names);
  }
  if (g->wrap != f->wrap) ADD("%s--wrap linear", used ? " " : "");
  if (g->limit_all_gathers != f->limit_all_gathers) ADD("%s--limit-all-gathers %d", used ? " " : "", g->limit_all_gathers);
#undef ADD
}

// What would make a plan fit in `limit` bytes per rank: the memory options added one at a time
// to the run's own, in memory_options' order, the first set whose plan fits; else the fewest
// ranks with all of them. Into out.
static void recommend(const Options* o, const ModelConfig* cfg, int B, int T, int Te, int world, size_t limit,
                      char* out, size_t len) {
  int gpt = model_num_units(cfg, WRAP_LINEAR) > model_num_units(cfg, WRAP_BLOCK);  // a per-linear policy (GPT, Llama)
  FSDPOptions f = o->fsdp, g = f;
  char flags[256];
  for (int i = 0; i < NUM_MEMORY_OPTIONS; i++) {
    if (!memory_options[i].add(&g, gpt)) continue;
    size_t need = plan_total(cfg, g, B, T, Te, world);
    if (need <= limit) {
      added_flags(&f, &g, flags, sizeof flags);
      snprintf(out, len, "recommendation: add %s to fit on %d rank%s (%.2f GiB per rank)", flags, world,
               world > 1 ? "s" : "", need / 1073741824.0);
      return;
    }
  }
  added_flags(&f, &g, flags, sizeof flags);
  for (int w = world * 2; w <= (1 << 20); w *= 2) {
    if (g.strategy == SHARD_HYBRID && w % g.hybrid_factor) continue;
    size_t need = plan_total(cfg, g, B, T, Te, w);
    if (need <= limit) {
      snprintf(out, len, "recommendation: %s fits from --world %d (%.2f GiB per rank); or lower --batch", flags, w,
               need / 1073741824.0);
      return;
    }
  }
  snprintf(out, len, "recommendation: none of %s or more ranks fits this in %.2f GiB per rank; lower --batch or --seq",
           flags, limit / 1073741824.0);
}

// --plan: the layout and the memory plan of one rank of a `world`-rank run, from the same
// planner a real run allocates from, and the FSDP paper's formula beside it.
void plan_report(const Options* o, const ModelConfig* cfg, int B, int T, int Te, int world) {
  FSDP fs;
  fsdp_init_plan(&fs, model_num_units(cfg, o->fsdp.wrap), o->fsdp, world);
  Model m;
  model_plan(&m, cfg, &fs, B, T, Te);
  plan_step(&fs.plan, cfg, B, T, Te, world, o->accum);
  print_model_line(cfg);
#ifdef FSDP_CUDA
  log0("plan for the cuda backend: 16-bit activations and unsharded parameters (bf16 or fp16: the same bytes), fp32 "
       "shards and AdamW state\n");
#else
  log0("plan for the cpu backend: fp32 throughout\n");
#endif
  print_settings(o, &m, &fs, o->accum);
  log0("units (elements: unpadded -> padded, per-rank shard):\n");
  int64_t padded_total = 0;
  for (int u = 0; u < fs.nunits; u++) {
    const Unit* U = &fs.units[u];
    padded_total += U->padded;
    if (u < 3 || u == fs.nunits - 1)
      log0("  %-12s %14lld -> %14lld  shard %14lld\n", U->name, (long long)U->numel, (long long)U->padded, (long long)U->shard);
    else if (u == 3)
      log0("  ... (%d more units of the same shapes)\n", fs.nunits - 4);
  }
  memplan_print(&fs.plan);
  // FSDP paper, section 3.2.1: peak parameter memory is O(sum_i psi_i / F + max_i psi_i).
  double shard_elems = (double)padded_total / fs.F, largest = (double)fs.max_padded;
  log0("FSDP paper formula (3.2.1): sum psi / F + max psi = %.4g + %.4g = %.4g elements\n", shard_elems, largest,
       shard_elems + largest);
  log0("  as bytes: 16 B x %.4g (fp32 master, gradient, adam m, v; --offload moves them to the host) + %d slot%s x %zu B x %.4g = %.4g GiB\n",
       shard_elems, fs.slots.n, fs.slots.n == 1 ? "" : "s", sizeof(act_t), largest,
       (16.0 * shard_elems + fs.slots.n * sizeof(act_t) * largest) / 1073741824.0);
  if (fs.secondary.F2) {  // ZeRO++ hpZ: a secondary shard of every unit but the root, over the node group
    double secondary = (double)(padded_total - fs.units[0].padded) / fs.secondary.F2;
    log0("  + secondary shards (--shard hpz): sum psi / F2 over the blocks = %.4g elements x %zu B = %.4g GiB\n", secondary,
         sizeof(act_t), secondary * sizeof(act_t) / 1073741824.0);
  }
  print_savings(o, cfg, B, T, Te, world, &fs.plan);
  if (o->memory_limit_gib > 0) {  // planning for a device of that size: does it fit, and if not, what would
    size_t limit = (size_t)(o->memory_limit_gib * 1073741824.0);
    char rec[512] = "";
    if (fs.plan.total > limit) recommend(o, cfg, B, T, Te, world, limit, rec, sizeof rec);
    log0("%s %.2f GiB per rank in --memory-limit %.2f GiB%s%s\n", fs.plan.total > limit ? "does not fit:" : "fits:",
         fs.plan.total / 1073741824.0, o->memory_limit_gib, rec[0] ? "; " : "", rec);
  }
  log0("plan_bytes_per_rank %zu\n", fs.plan.total);
  log0("plan_host_bytes_per_rank %zu\n", fs.plan.host_total);
}

// Refuses a plan that does not fit before anything is allocated, and says what to change.
void check_plan_fits(const Options* o, const ModelConfig* cfg, int B, int T, int Te, const FSDP* fs) {
  size_t limit = o->memory_limit_gib > 0 ? (size_t)(o->memory_limit_gib * 1073741824.0) : device_free_bytes();
  if (fs->plan.total <= limit) return;
  char rec[512];
  recommend(o, cfg, B, T, Te, fs->world_size, limit, rec, sizeof rec);
  fatal("the memory plan needs %.2f GiB per rank but %s %.2f GiB; %s (compare options with --plan --world N "
        "--memory-limit GIB)", fs->plan.total / 1073741824.0,
        o->memory_limit_gib > 0 ? "--memory-limit allows" : "this device has", limit / 1073741824.0, rec);
}

// Dense bf16 peak of known GPUs (H100/H200 SXM 989 TFLOPS, A100 312); 0 when unknown.
double device_peak_flops(const char* device_name) {
  if (strstr(device_name, "H100") || strstr(device_name, "H200")) return 989e12;
  if (strstr(device_name, "A100")) return 312e12;
  return 0.0;
}

// --peak: the rate of this backend's own matmul on a large square-ish product, the best of a
// few timed repetitions (what the chip delivers to our kernels, not its datasheet).
// Operands in [-1, 1), from a fixed-seed generator: tensor cores multiplying zeros draw less
// power and run faster than on real data, which would overstate the peak.
static void fill_random(KernelCtx* k, act_t* x, size_t n, uint64_t state) {
  const size_t chunk = (size_t)1 << 20;
  float* host = xmalloc(chunk * sizeof(float), "--peak operands");
  float* dev = device_alloc_zeroed(chunk * sizeof(float), "--peak operands");
  for (size_t i = 0; i < n; i += chunk) {
    size_t m = n - i < chunk ? n - i : chunk;
    for (size_t j = 0; j < m; j++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      host[j] = (float)((double)(state >> 40) * 0x1p-23 - 1.0);
    }
    device_copy_to_device(dev, host, m * sizeof(float));
    cast_f32_to_act(k, x + i, dev, m);
    device_synchronize();  // before the next chunk overwrites dev
  }
  device_free(dev);
  free(host);
}

double measure_peak_flops(KernelCtx* k) {
  int n = strcmp(kernels_backend(), "cpu") ? 8192 : 768;
  size_t elems = (size_t)n * n;
  act_t* a = device_alloc_zeroed(elems * sizeof(act_t), "--peak operands");
  act_t* b = device_alloc_zeroed(elems * sizeof(act_t), "--peak operands");
  act_t* c = device_alloc_zeroed(elems * sizeof(act_t), "--peak operands");
  fill_random(k, a, elems, 1);
  fill_random(k, b, elems, 2);
  matmul_forward(k, c, a, b, NULL, n, n, n);  // warm-up: algorithm choice, caches
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    device_synchronize();
    double t0 = now_seconds();
    matmul_forward(k, c, a, b, NULL, n, n, n);
    device_synchronize();
    double dt = now_seconds() - t0;
    if (dt < best) best = dt;
  }
  device_free(a);
  device_free(b);
  device_free(c);
  return 2.0 * n * (double)n * n / best;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// --bench: median and spread over the measured steps (the warm-up steps are not in ms[]).
void bench_report(const Options* o, const Model* m, const FSDP* fs, int A, const double* ms, const double* comm_ms,
                  int n, double peak, const char* peak_source, const char* device) {
  if (n < 1) return;
  double* sorted = xmalloc((size_t)n * sizeof(double), "bench");
  memcpy(sorted, ms, (size_t)n * sizeof(double));
  qsort(sorted, n, sizeof(double), cmp_double);
  double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  double lo = sorted[0], hi = sorted[n - 1];
  memcpy(sorted, comm_ms, (size_t)n * sizeof(double));
  qsort(sorted, n, sizeof(double), cmp_double);
  double comm = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  free(sorted);
  int W = fs->world_size;
  double tokens = (double)W * A * m->B * (m->cfg.kind == MODEL_T5 ? m->Te + m->T : m->T);
  double flops = W * A * model_flops(&m->cfg, m->B, m->T, m->Te);
  double tflops = flops / W / (median / 1e3) / 1e12;  // per rank, model FLOPs (MFU counts these)
  double hw_flops = flops + W * A * model_recompute_flops(&m->cfg, m->B, m->T, m->Te, o->fsdp.recompute);
  double hw_tflops = hw_flops / W / (median / 1e3) / 1e12;
  double mfu = peak > 0 ? tflops * 1e12 / peak : NAN;
  log0("bench | %s | %s | %d rank%s | %s | median of %d steps\n", m->cfg.name, device, W, W > 1 ? "s" : "",
       strategy_name(o->fsdp.strategy), n);
  log0("| %-28s | %14s |\n", "metric", "value");
  log0("| %-28s | %14.2f |\n", "step time median (ms)", median);
  log0("| %-28s | %14.2f |\n", "step time min (ms)", lo);
  log0("| %-28s | %14.2f |\n", "step time max (ms)", hi);
  log0("| %-28s | %14.0f |\n", "tokens/s per rank", tokens / W / (median / 1e3));
  log0("| %-28s | %14.4f |\n", "model TFLOPS per rank", tflops);
  log0("| %-28s | %14.4f |\n", "hardware TFLOPS per rank", hw_tflops);
  if (peak > 0) log0("| %-28s | %13.2f%% |\n", "MFU", 100 * mfu);
  else log0("| %-28s | %14s |\n", "MFU", "n/a (--peak)");
  log0("| %-28s | %14.2f |\n", "exposed comm median (ms)", comm);
  log0("| %-28s | %14.2f |\n", "memory per rank (GiB)", fs->plan.total / 1073741824.0);
  if (peak > 0) log0("MFU against %.4g TFLOPS (%s)\n", peak / 1e12, peak_source);
  if (o->bench_json && fs->world_rank == 0) {
    FILE* f = fopen(o->bench_json, "w");
    if (!f) fatal("--bench-json: cannot open '%s': %s", o->bench_json, strerror(errno));
    char mfu_s[32];
    if (peak > 0) snprintf(mfu_s, sizeof mfu_s, "%.6g", mfu);
    else snprintf(mfu_s, sizeof mfu_s, "null");
    fprintf(f, "{\"model\": \"%s\", \"device\": \"%s\", \"backend\": \"%s\", \"ranks\": %d, \"shard\": \"%s\", "
               "\"batch\": %d, \"seq\": %d, \"enc_len\": %d, \"accum\": %d, \"steps\": %d, "
               "\"step_ms_median\": %.6g, \"step_ms_min\": %.6g, \"step_ms_max\": %.6g, "
               "\"tokens_per_s_per_rank\": %.6g, \"model_tflops_per_rank\": %.6g, \"hardware_tflops_per_rank\": %.6g, "
               "\"mfu\": %s, \"peak_tflops\": %.6g, \"peak_source\": \"%s\", \"exposed_comm_ms_median\": %.6g, "
               "\"memory_bytes_per_rank\": %zu}\n",
            m->cfg.name, device, kernels_backend(), W, strategy_name(o->fsdp.strategy), m->B, m->T, m->Te, A, n,
            median, lo, hi, tokens / W / (median / 1e3), tflops, hw_tflops, mfu_s, peak / 1e12, peak_source, comm,
            fs->plan.total);
    if (fflush(f) != 0 || ferror(f)) fatal("--bench-json %s: writing failed: %s", o->bench_json, strerror(errno));
    if (fclose(f) != 0) fatal("--bench-json %s: writing failed: %s", o->bench_json, strerror(errno));
  }
}

size_t resident_bytes(void) {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  fclose(f);
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}
