// plan.c: the memory plan of a run before it runs: --plan (the layout and the plan of one rank
// of any world size, from the planner a real run allocates from), the refusal of a plan that does
// not fit, and what to change so that it does (the memory options added one at a time).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/dist.h"
#include "train/train.h"

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
int plan_report(const Options* o, const ModelConfig* cfg, int B, int T, int Te, int world) {
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
  return o->memory_limit_gib > 0 && fs.plan.total > (size_t)(o->memory_limit_gib * 1073741824.0);
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
