// options.c: the command line of the trainer: defaults, --help, and strict parsing
// (unknown or malformed options are refused with the usage line).
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/args.h"
#include "infra/dist.h"
#include "train/train.h"

// The usage line names the binary that was run (train_gpt, train_gpt_cpu, train_gpt_sim, or
// predict_gpt, which needs --predict and --world rather than --data); parse_options sets it.
static char usage[256] = "usage: train_gpt_cpu --model NAME --data GLOB [options]   (--help for all options)";
const char* usage_line(void) { return usage; }

static void set_usage(const char* argv0) {
  const char* slash = argv0 ? strrchr(argv0, '/') : NULL;
  const char* name = slash ? slash + 1 : argv0 ? argv0 : "train_gpt_cpu";
  const char* needs = strncmp(name, "predict_gpt", 11) ? "--data GLOB" : "--predict GPU[:NETWORK] --world N";
  snprintf(usage, sizeof usage, "usage: %.64s --model NAME %s [options]   (--help for all options)", name, needs);
}

static void print_help(void) {
  char presets[2048];
  model_list_presets(presets, sizeof presets);
  printf(
      "%s\n\n"
      "model and data\n"
      "  --model NAME          preset or custom shape, e.g. gpt:L=2,C=72,H=3,V=509,T=32\n"
      "  --data GLOB           training token shards (llm.c format)\n"
      "  --val-data GLOB       validation token shards\n"
      "  --batch B             micro-batch per rank, in sequences (default 4)\n"
      "  --seq T               sequence length (default: the model's T)\n"
      "  --enc-len N, --dec-len N   T5 encoder and decoder lengths (default 512, 114)\n"
      "  --accum A             micro-steps per optimizer step on each rank (default 1)\n"
      "  --global-batch G      sequences per optimizer step; sets A = G / (B x ranks)\n"
      "optimization\n"
      "  --steps N             optimizer steps (default 10)\n"
      "  --lr LR               peak learning rate (default 3e-4)\n"
      "  --warmup N            linear warmup steps, then cosine decay (default 0)\n"
      "  --lr-final-frac F     final learning rate as a fraction of the peak (default 0.1)\n"
      "  --weight-decay WD     AdamW decoupled weight decay on matmul weights (default 0.1)\n"
      "  --decay-embeddings    also decay the embeddings\n"
      "  --beta1 B1 --beta2 B2 --adam-eps E   AdamW constants (0.9, 0.95, 1e-8)\n"
      "  --grad-clip C         clip the global gradient norm to C, 0 = off (default 1.0)\n"
      "  --seed S              initialization seed (default 1337)\n"
      "FSDP\n"
      "  --shard S             full (default) | grad-op | none | hybrid:F | hpz[:F2]: full sharding\n"
      "                        that reshards after forward to node groups of F2 ranks (default: the\n"
      "                        ranks per node), so backward all-gathers stay inside a node\n"
      "  --limit-all-gathers K unsharded blocks at most at once, the slot pool (default 2)\n"
      "  --prefetch P          none | forward | backward | both (default both)\n"
      "  --no-sync-accum       keep unsharded gradients, reduce once per optimizer step\n"
      "  --recompute R         none (default) | block: keep only each block's output and re-run\n"
      "                        its forward in backward | selective: keep matmul and attention\n"
      "                        outputs, recompute norms and activation functions\n"
      "  --wrap W              block (default): one unit per transformer block | linear: one\n"
      "                        unit per matmul weight (GPT), norms and biases with their\n"
      "                        neighbour: smaller slots and gradient buffers (the 1T recipe)\n"
      "  --offload LIST        keep in pinned host memory instead of the device (any of, comma\n"
      "                        separated): params (fp32 master shards), optim (AdamW state;\n"
      "                        the step runs on the host), grads (gradient shards),\n"
      "                        activations (block outputs); all | none (default)\n"
      "  --reduce-dtype D      gradient reduction dtype: fp32 (default) | bf16 | fp16 (CUDA only, the\n"
      "                        build's activation type: make train_gpt PRECISION=bf16|fp16)\n"
      "  --init-dir DIR        without MPI: rank 0 publishes the NCCL id in DIR (shared by all)\n"
      "  --comm-timeout S      end every rank when a collective (or a start-up stage: MPI's start,\n"
      "                        the group splits) is unfinished after S seconds, naming the rank\n"
      "                        and the collective or stage (default 600; 0 = never)\n"
      "  --trace FILE          per-rank Chrome trace (Perfetto) of all-gathers, compute and\n"
      "                        reduce-scatters (FILE.rank<r> for each rank of a multi-rank run)\n"
      "evaluation and logs\n"
      "  --eval-every N        validation loss every N steps and at the end (default 0 = end only)\n"
      "  --eval-batches N      validation micro-batches (default 8)\n"
      "  --eval-prompts FILE   lines 'prompt<TAB>answer' (byte tokens): exact-match accuracy of\n"
      "                        greedy answers, reported with each evaluation\n"
      "  --eval-choices FILE   llm.c's multiple-choice evaluation file (HellaSwag, MMLU: magic\n"
      "                        20240522): accuracy by the completions' mean loss per token,\n"
      "                        reported with each evaluation\n"
      "  --sample-every N      print a sampled continuation every N steps (default 0 = off)\n"
      "  --sample-tokens N     tokens per sample, at most --seq - 1 (default 64, or --seq - 1)\n"
      "  --log FILE            one JSON object per step (and per evaluation)\n"
      "  --digest              print params_digest <hex> of the final parameters\n"
      "  --dump-params FILE    write the final parameters (fp32, global order, no padding)\n"
      "checkpoints (any world size can resume any checkpoint)\n"
      "  --save DIR            save parameters and AdamW state at the end\n"
      "  --save-every N        also every N steps (to the same DIR)\n"
      "  --keep-checkpoints N  save to DIR/step_NNNNNNNN instead, keeping this run's N newest\n"
      "                        (rotated before each save when N >= 2: room for N is enough)\n"
      "  --resume DIR          continue from the newest complete checkpoint of DIR (DIR, or the\n"
      "                        DIR.tmp/DIR.old of an interrupted save, or DIR/step_*): its step,\n"
      "                        weights and AdamW state, verified against its checksums, and the\n"
      "                        run's options (model, data, optimizer, ...) not given again; options\n"
      "                        given again must agree, but for those that may change (--steps,\n"
      "                        the batch, the data, FSDP options, evaluation, logs, saving)\n"
      "  --resume-if-present DIR   --resume DIR when DIR holds a checkpoint, else a new run with\n"
      "                        the options given (for job scripts that may be preempted)\n"
      "faults\n"
      "  --max-bad-steps N     a step with a NaN/inf loss or gradient is skipped on every rank;\n"
      "                        stop at the N-th (default 3)\n"
      "  --loss-scale S        multiply the loss gradient by S, a power of two (1 = none), or\n"
      "                        'dynamic[:S]': from S (65536), halved on overflow (the step skipped on\n"
      "                        every rank), doubled after --loss-scale-window steps (2000);\n"
      "                        dynamic is the default of an fp16 build (PRECISION=fp16)\n"
      "  --inject-nonfinite STEP:RANK[:UNIT]   testing: a NaN in RANK's gradient of UNIT\n"
      "                        (default 0) at STEP, to see the guard above work\n"
      "pretrained weights\n"
      "  --init-from PATH      start from an llm.c GPT-2 .bin (fp32/bf16), a Hugging Face\n"
      "                        directory (config.json + model.safetensors or its shards; GPT-2,\n"
      "                        T5 or Llama) or the weights of an fsdp.c checkpoint (a new run:\n"
      "                        step 0, AdamW afresh; --resume continues the run instead); --model\n"
      "                        may then be left out\n"
      "  --export DIR          write DIR/config.json + model.safetensors for transformers at the end\n"
      "planning and benchmarks\n"
      "  --plan                print the per-rank memory plan and exit (no data, no allocation)\n"
      "  --backend B           plan for cuda (default: bf16, from either binary, no GPU needed)\n"
      "                        or cpu (fp32; train_gpt_cpu only)\n"
      "  --world N             plan (or predict) for N ranks (default: the ranks of this run)\n"
      "  --memory-limit GIB    refuse plans above GIB per rank (default: free device memory);\n"
      "                        --plan then exits 1 when the plan does not fit\n"
      "  --bench               time --steps steps after --bench-warmup (default 2) untimed ones;\n"
      "                        prints median, spread, tokens/s, TFLOPS, MFU, exposed communication\n"
      "  --bench-json FILE     write the benchmark results as JSON\n"
      "  --peak                measure this device's achievable matmul rate for MFU\n"
      "  --gelu-epilogue on|off  the GELU in cuBLASLt's epilogue where it has one (default on); off:\n"
      "                        the product, then the GELU kernel (to measure both)\n"
      "  --predict GPU[:NET]   predict step time and TFLOPS per GPU on --world N GPUs without them (no\n"
      "                        --data needed): GPU a100-40gb | a100-80gb | h100-sxm | h200, NET efa400 |\n"
      "                        roce | eth120 | ib3200 (default: the GPU's); --trace FILE writes the timeline;\n"
      "                        --predict list prints every GPU's and network's figures\n"
      "  --predict-sweep       with --predict: rank strategies, limits, prefetch and batch sizes\n"
      "  --predict-alloc-retry MS   with --predict: add a caching allocator's retry (device sync +\n"
      "                        MS of cudaMalloc) before each all-gather, as PyTorch at its memory limit\n"
      "  --predict-attention fused|eager   with --predict: fsdp.c's fused attention (default), or the\n"
      "                        unfused attention of the seeds' PyTorch models (minGPT, Hugging Face T5)\n"
      "  --predict-comm-sms N  with --predict: each collective holds at most N SMs from the kernels beside\n"
      "                        it (as NCCL_MAX_CTAS=N); 0: collectives take no SMs (default: NCCL's choice)\n"
      "  --sim-world W --sim-link GBPS   one rank, but every collective waits as long as a ring\n"
      "                        all-gather / reduce-scatter on W ranks at GBPS GB/s would take\n"
      "  --help                this text\n"
      "environment\n"
      "  FSDP_STEPS_LIMIT=N    train only the first N steps of the run as given (its schedule\n"
      "                        unchanged), then end as at its last step: to try a command out\n\n"
      "models:\n%s",
      usage_line(), presets);
}

void usage_error(const char* fmt, const char* arg) {
  char msg[4400];
  snprintf(msg, sizeof msg, fmt, arg);
  if (dist_rank() == 0) fprintf(stderr, "error: %s\n%s\n", msg, usage_line());
  signal(SIGTERM, SIG_IGN), signal(SIGINT, SIG_IGN), signal(SIGUSR1, SIG_IGN);  // (as fatal_all: leaving quietly)
  dist_exit(2, dist_rank() ? msg : NULL);  // another rank says it only when rank 0 did not stop too
}

static long parse_long(const char* opt, const char* s, long lo, long hi) {
  char* end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) {
    char msg[256];
    snprintf(msg, sizeof msg, "option --%s expects an integer in [%ld, %ld], got '%%s'", opt, lo, hi);
    usage_error(msg, s);
  }
  return v;
}

// A number for a float option: the whole argument, in [lo, hi] (or (lo, hi] when lo_open),
// and representable: a value strtof can only round to 0 or to the largest float (1e-50, 1e39)
// is refused rather than trained with as 0 or inf.
static float parse_float_range(const char* opt, const char* s, float lo, float hi, int lo_open) {
  char* end;
  errno = 0;
  float v = strtof(s, &end);
  int range = errno == ERANGE;
  if (!*s || *end || range || !(lo_open ? v > lo : v >= lo) || !(v <= hi)) {
    char msg[320];
    snprintf(msg, sizeof msg, "option --%s expects a number in %c%g, %g], got '%%s'%s", opt, lo_open ? '(' : '[', lo, hi,
             range && *s && !*end ? " (beyond what a float holds: it would be read as 0 or infinity)" : "");
    usage_error(msg, s);
  }
  return v;
}
static float parse_float(const char* opt, const char* s, float lo, float hi) { return parse_float_range(opt, s, lo, hi, 0); }

// ---- the command line's words for the FSDP options ------------------------------------
const char* strategy_name(ShardStrategy s) {
  switch (s) {
    case SHARD_FULL: return "full";
    case SHARD_GRAD_OP: return "grad-op";
    case SHARD_NONE: return "none";
    case SHARD_HYBRID: return "hybrid";
    case SHARD_HPZ: return "hpz";
  }
  return "?";
}

int parse_strategy(const char* s, FSDPOptions* opt) {
  if (!strcmp(s, "full")) opt->strategy = SHARD_FULL;
  else if (!strcmp(s, "grad-op")) opt->strategy = SHARD_GRAD_OP;
  else if (!strcmp(s, "none")) opt->strategy = SHARD_NONE;
  else if (!strncmp(s, "hybrid:", 7)) {
    char* end;
    long f = strtol(s + 7, &end, 10);
    if (*end || f < 1 || f > 1 << 20) return -1;
    opt->strategy = SHARD_HYBRID;
    opt->hybrid_factor = (int)f;
  } else if (!strcmp(s, "hpz")) {
    opt->strategy = SHARD_HPZ;
    opt->hpz_factor = 0;  // the ranks per node, found at start-up
  } else if (!strncmp(s, "hpz:", 4)) {
    char* end;
    long f = strtol(s + 4, &end, 10);
    if (*end || f < 1 || f > 1 << 20) return -1;
    opt->strategy = SHARD_HPZ;
    opt->hpz_factor = (int)f;
  } else return -1;
  return 0;
}

static const struct {
  const char* name;
  int bit;
} OFFLOADS[] = {{"params", OFFLOAD_PARAMS}, {"optim", OFFLOAD_OPTIM}, {"grads", OFFLOAD_GRADS},
                {"activations", OFFLOAD_ACTIVATIONS}};
#define NOFFLOADS (int)(sizeof OFFLOADS / sizeof *OFFLOADS)

int parse_offload(const char* s, int* bits) {
  *bits = 0;
  if (!strcmp(s, "none")) return 0;
  if (!strcmp(s, "all")) {
    for (int i = 0; i < NOFFLOADS; i++) *bits |= OFFLOADS[i].bit;
    return 0;
  }
  for (const char* p = s;;) {
    size_t n = strcspn(p, ",");
    int found = 0;
    for (int i = 0; i < NOFFLOADS; i++)
      if (n == strlen(OFFLOADS[i].name) && !strncmp(p, OFFLOADS[i].name, n)) *bits |= OFFLOADS[i].bit, found = 1;
    if (!found) return -1;
    if (!p[n]) return 0;
    p += n + 1;
  }
}

void shard_option(const FSDPOptions* f, char* out, size_t len) {
  if (f->strategy == SHARD_HYBRID) snprintf(out, len, "hybrid:%d", f->hybrid_factor);
  else if (f->strategy == SHARD_HPZ) snprintf(out, len, "hpz:%d", f->hpz_factor);
  else snprintf(out, len, "%s", strategy_name(f->strategy));
}

const char* prefetch_name(const FSDPOptions* f) {
  if (f->prefetch_forward) return f->prefetch_backward ? "both" : "forward";
  return f->prefetch_backward ? "backward" : "none";
}

void offload_name(int bits, char* out, size_t len) {
  size_t used = 0;
  out[0] = 0;
  if (bits == (OFFLOAD_PARAMS | OFFLOAD_OPTIM | OFFLOAD_GRADS | OFFLOAD_ACTIVATIONS)) {
    snprintf(out, len, "all");
    return;
  }
  for (int i = 0; i < NOFFLOADS; i++)
    if (bits & OFFLOADS[i].bit) used += (size_t)snprintf(out + used, used < len ? len - used : 0, "%s%s", used ? "," : "", OFFLOADS[i].name);
  if (!bits) snprintf(out, len, "none");
}


// The options as given, each with the last value it was given (the one that counts): what every
// rank compares with rank 0's at start-up (train/agreement.c).
typedef struct {
  const char* name;
  char* line;  // "--name value" or "--name"
} GivenOption;
static GivenOption* given;
static int ngiven;
static void record_option(const char* name, const char* value) {
  char* line = xmalloc(strlen(name) + (value ? strlen(value) : 0) + 4, "the options");
  sprintf(line, "--%s%s%s", name, value ? " " : "", value ? value : "");
  for (int i = 0; i < ngiven; i++)
    if (!strcmp(given[i].name, name)) {
      free(given[i].line);
      given[i].line = line;
      return;
    }
  if (!(given = realloc(given, (size_t)(ngiven + 1) * sizeof *given))) fatal("out of host memory for the options");
  given[ngiven++] = (GivenOption){name, line};
}
static int by_name(const void* a, const void* b) { return strcmp(((const GivenOption*)a)->name, ((const GivenOption*)b)->name); }
const char* options_given(void) {
  static char* text;
  size_t len = 1;
  qsort(given, (size_t)ngiven, sizeof *given, by_name);
  for (int i = 0; i < ngiven; i++) len += strlen(given[i].line) + 1;
  free(text);
  text = xmalloc(len, "the options");
  text[0] = 0;
  for (int i = 0, at = 0; i < ngiven; i++) at += sprintf(text + at, "%s\n", given[i].line);
  return text;
}

// Options without a one-letter code of their own (getopt_long returns these values).
enum { OPT_PREDICT_SWEEP = 256, OPT_PREDICT_ALLOC_RETRY, OPT_PREDICT_ATTENTION, OPT_PREDICT_COMM_SMS, OPT_LOSS_SCALE, OPT_LOSS_SCALE_WINDOW,
       OPT_INIT_FROM, OPT_EXPORT, OPT_BACKEND, OPT_WRAP, OPT_OFFLOAD, OPT_GELU_EPILOGUE,
       OPT_RESUME_IF_PRESENT, OPT_EVAL_CHOICES };

// The long options (file scope: option_given looks them up by name).
static const struct option longopts[] = {
    {"model", required_argument, 0, 'm'},       {"data", required_argument, 0, 'd'},
    {"val-data", required_argument, 0, 'V'},    {"batch", required_argument, 0, 'b'},
    {"seq", required_argument, 0, 't'},         {"accum", required_argument, 0, 'a'},
    {"global-batch", required_argument, 0, 'G'},{"steps", required_argument, 0, 'n'},
    {"lr", required_argument, 0, 'l'},          {"warmup", required_argument, 0, 'w'},
    {"lr-final-frac", required_argument, 0, 'f'},{"weight-decay", required_argument, 0, 'D'},
    {"decay-embeddings", no_argument, 0, 'E'},  {"beta1", required_argument, 0, '1'},
    {"beta2", required_argument, 0, '2'},       {"adam-eps", required_argument, 0, 'e'},
    {"grad-clip", required_argument, 0, 'c'},   {"seed", required_argument, 0, 's'},
    {"shard", required_argument, 0, 'S'},       {"limit-all-gathers", required_argument, 0, 'K'},
    {"prefetch", required_argument, 0, 'p'},    {"no-sync-accum", no_argument, 0, 'N'},
    {"eval-every", required_argument, 0, 'v'},  {"eval-batches", required_argument, 0, 'B'},
    {"eval-prompts", required_argument, 0, 'P'},{"sample-every", required_argument, 0, 'x'},
    {"sample-tokens", required_argument, 0, 'X'},{"log", required_argument, 0, 'L'},
    {"digest", no_argument, 0, 'H'},            {"dump-params", required_argument, 0, 'Q'},
    {"enc-len", required_argument, 0, 'j'},     {"dec-len", required_argument, 0, 'k'},
    {"plan", no_argument, 0, 'y'},              {"world", required_argument, 0, 'Y'},
    {"memory-limit", required_argument, 0, 'z'},{"bench", no_argument, 0, 'q'},
    {"bench-warmup", required_argument, 0, 'u'},{"bench-json", required_argument, 0, 'J'},
    {"peak", no_argument, 0, 'Z'},             {"sim-world", required_argument, 0, 'W'},
    {"sim-link", required_argument, 0, 'U'},             {"trace", required_argument, 0, 'T'},
    {"reduce-dtype", required_argument, 0, 'R'},{"init-dir", required_argument, 0, 'I'},
    {"comm-timeout", required_argument, 0, 'O'},{"save", required_argument, 0, 'o'},
    {"save-every", required_argument, 0, 'i'},  {"resume", required_argument, 0, 'r'},
    {"keep-checkpoints", required_argument, 0, 'C'}, {"max-bad-steps", required_argument, 0, 'M'},
    {"inject-nonfinite", required_argument, 0, 'F'}, {"recompute", required_argument, 0, 'A'},
    {"predict", required_argument, 0, 'g'},     {"predict-sweep", no_argument, 0, OPT_PREDICT_SWEEP},
    {"predict-alloc-retry", required_argument, 0, OPT_PREDICT_ALLOC_RETRY},
    {"predict-attention", required_argument, 0, OPT_PREDICT_ATTENTION},
    {"predict-comm-sms", required_argument, 0, OPT_PREDICT_COMM_SMS},
    {"loss-scale", required_argument, 0, OPT_LOSS_SCALE}, {"loss-scale-window", required_argument, 0, OPT_LOSS_SCALE_WINDOW},
    {"init-from", required_argument, 0, OPT_INIT_FROM}, {"export", required_argument, 0, OPT_EXPORT},
    {"backend", required_argument, 0, OPT_BACKEND}, {"wrap", required_argument, 0, OPT_WRAP},
    {"offload", required_argument, 0, OPT_OFFLOAD},
    {"resume-if-present", required_argument, 0, OPT_RESUME_IF_PRESENT},
    {"eval-choices", required_argument, 0, OPT_EVAL_CHOICES},
    {"gelu-epilogue", required_argument, 0, OPT_GELU_EPILOGUE},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0}};
#define NUM_LONGOPTS ((int)(sizeof longopts / sizeof *longopts) - 1)
_Static_assert(NUM_LONGOPTS <= OPTIONS_MAX, "Options.given has a flag per long option");

int option_given(const Options* o, const char* name) {
  for (int i = 0; i < NUM_LONGOPTS; i++)
    if (!strcmp(longopts[i].name, name)) return o->given[i];
  return 0;
}

Options parse_command_line(int argc, char** argv) {
  Options o = {.batch = 4, .accum = 1, .enc_len = 512, .dec_len = 114, .bench_warmup = 2, .gelu_epilogue = 1, .comm_timeout = 600, .steps = 10, .max_bad_steps = 3, .inject_step = -1, .predict = {.comm_sms = -1}, .loss_scale = 1.0, .loss_scale_window = 2000, .lr = 3e-4f, .lr_final_frac = 0.1f,
               .weight_decay = 0.1f, .grad_clip = 1.0f, .beta1 = 0.9f, .beta2 = 0.95f,
               .adam_eps = 1e-8f, .seed = 1337, .eval_batches = 8, .sample_tokens = 64,
               .fsdp = {.strategy = SHARD_FULL, .limit_all_gathers = 2, .sync_accum = 1,
                        .prefetch_forward = 1, .prefetch_backward = 1, .reduce_dtype = DT_F32}};
  if (ACT_WANTS_LOSS_SCALE) o.loss_scale_dynamic = 1, o.loss_scale = LOSS_SCALE_DYNAMIC_INIT;  // --loss-scale 1: off
  char err[1024];
  if (long_options_exact(argc, argv, longopts, err, sizeof err)) usage_error("%s", err);
  optind = 0;  // getopt starts afresh: --resume reads a second command line (train/resume.c)
  opterr = 0;
  int c, idx;
  // A leading ':' makes getopt tell a missing value (':') from an unknown option ('?').
  while ((idx = -1, c = getopt_long(argc, argv, ":", longopts, &idx)) != -1) {
    const char* name = idx >= 0 ? longopts[idx].name : "";
    if (idx >= 0) o.given[idx] = 1, record_option(name, longopts[idx].has_arg ? optarg : NULL);
    switch (c) {
      case 'm': o.model = optarg; break;
      case 'd': o.data = optarg; break;
      case 'V': o.val_data = optarg; break;
      case 'b': o.batch = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 't': o.seq = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 'a': o.accum = (int)parse_long(name, optarg, 1, 1 << 20), o.accum_given = 1; break;
      case 'G': o.global_batch = (int)parse_long(name, optarg, 1, 1 << 30); break;
      case 'n': o.steps = (int)parse_long(name, optarg, 0, 1 << 30); break;
      case 'l': o.lr = parse_float(name, optarg, 0.0f, 10.0f); break;
      case 'w': o.warmup = (int)parse_long(name, optarg, 0, 1 << 30); break;
      case 'f': o.lr_final_frac = parse_float(name, optarg, 0.0f, 1.0f); break;
      case 'D': o.weight_decay = parse_float(name, optarg, 0.0f, 10.0f); break;
      case 'E': o.fsdp.decay_embeddings = 1; break;
      case '1': o.beta1 = parse_float(name, optarg, 0.0f, 0.999999f); break;
      case '2': o.beta2 = parse_float(name, optarg, 0.0f, 0.999999f); break;
      case 'e': o.adam_eps = parse_float_range(name, optarg, 0.0f, 1.0f, 1); break;  // eps 0 divides by 0 where v is 0
      case 'c': o.grad_clip = parse_float(name, optarg, 0.0f, 1e30f); break;
      case 's': o.seed = (uint64_t)parse_long(name, optarg, 0, 0x7fffffffffffffffL); break;
      case 'S':
        if (parse_strategy(optarg, &o.fsdp))
          usage_error("--shard expects full, grad-op, none, hybrid:F or hpz[:F2], got '%s'", optarg);
        break;
      case 'K': o.fsdp.limit_all_gathers = (int)parse_long(name, optarg, 1, 1024); break;
      case 'p':
        if (!strcmp(optarg, "none")) o.fsdp.prefetch_forward = o.fsdp.prefetch_backward = 0;
        else if (!strcmp(optarg, "forward")) o.fsdp.prefetch_forward = 1, o.fsdp.prefetch_backward = 0;
        else if (!strcmp(optarg, "backward")) o.fsdp.prefetch_forward = 0, o.fsdp.prefetch_backward = 1;
        else if (!strcmp(optarg, "both")) o.fsdp.prefetch_forward = o.fsdp.prefetch_backward = 1;
        else usage_error("--prefetch expects none, forward, backward or both, got '%s'", optarg);
        break;
      case 'N': o.fsdp.sync_accum = 0; break;
      case 'A':
        if (!strcmp(optarg, "none")) o.fsdp.recompute = RECOMPUTE_NONE;
        else if (!strcmp(optarg, "block")) o.fsdp.recompute = RECOMPUTE_BLOCK;
        else if (!strcmp(optarg, "selective")) o.fsdp.recompute = RECOMPUTE_SELECTIVE;
        else usage_error("--recompute expects none, block or selective, got '%s'", optarg);
        break;
      case OPT_OFFLOAD:
        if (parse_offload(optarg, &o.fsdp.offload))
          usage_error("--offload expects a comma-separated list of params, optim, grads, activations (or all, none), got '%s'", optarg);
        break;
      case OPT_GELU_EPILOGUE:
        if (!strcmp(optarg, "on")) o.gelu_epilogue = 1;
        else if (!strcmp(optarg, "off")) o.gelu_epilogue = 0;
        else usage_error("--gelu-epilogue expects on or off, got '%s'", optarg);
        break;
      case OPT_WRAP:
        if (!strcmp(optarg, "block")) o.fsdp.wrap = WRAP_BLOCK;
        else if (!strcmp(optarg, "linear")) o.fsdp.wrap = WRAP_LINEAR;
        else usage_error("--wrap expects block or linear, got '%s'", optarg);
        break;
      case 'v': o.eval_every = (int)parse_long(name, optarg, 0, 1 << 30); break;
      case 'B': o.eval_batches = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 'P': o.eval_prompts = optarg; break;
      case OPT_EVAL_CHOICES: o.eval_choices = optarg; break;
      case 'x': o.sample_every = (int)parse_long(name, optarg, 0, 1 << 30); break;
      case 'X': o.sample_tokens = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 'L': o.log_path = optarg; break;
      case 'H': o.digest = 1; break;
      case 'Q': o.dump_params = optarg; break;
      case 'y': o.plan = 1; break;
      case 'T': o.trace_path = optarg; break;
      case 'I': o.init_dir = optarg; break;
      case 'o': o.save_dir = optarg; break;
      case 'i': o.save_every = (int)parse_long(name, optarg, 1, 1 << 30); break;
      case 'r': o.resume_dir = optarg, o.resume_optional = 0; break;
      case OPT_RESUME_IF_PRESENT: o.resume_dir = optarg, o.resume_optional = 1; break;
      case 'C': o.keep_checkpoints = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 'M': o.max_bad_steps = (int)parse_long(name, optarg, 1, 1 << 30); break;
      case 'F': {
        int used = 0;
        o.inject_unit = 0;
        if (sscanf(optarg, "%d:%d%n:%d%n", &o.inject_step, &o.inject_rank, &used, &o.inject_unit, &used) < 2 ||
            optarg[used] || o.inject_step < 1 || o.inject_rank < 0 || o.inject_unit < 0)
          usage_error("--inject-nonfinite expects STEP:RANK[:UNIT] (STEP >= 1), got '%s'", optarg);
        break;
      }
      case OPT_INIT_FROM: o.init_from = optarg; break;
      case OPT_EXPORT: o.export_dir = optarg; break;
      case OPT_BACKEND:
        if (strcmp(optarg, "cuda") && strcmp(optarg, "cpu")) usage_error("--backend expects cuda or cpu, got '%s'", optarg);
        o.plan_backend = optarg;
        break;
      case 'O': o.comm_timeout = parse_float(name, optarg, 0.0f, 1e7f); break;
      case 'R':
        if (!strcmp(optarg, "fp32")) o.fsdp.reduce_dtype = DT_F32;
        else if (!strcmp(optarg, "bf16")) o.fsdp.reduce_dtype = DT_BF16;
        else if (!strcmp(optarg, "fp16")) o.fsdp.reduce_dtype = DT_F16;
        else usage_error("--reduce-dtype expects fp32, bf16 or fp16, got '%s'", optarg);
        break;
      case 'Y': o.plan_world = (int)parse_long(name, optarg, 1, 1 << 24); break;
      case 'z': o.memory_limit_gib = parse_float(name, optarg, 1e-6f, 1e9f); break;
      case 'q': o.bench = 1; break;
      case 'g': o.predict.cluster = optarg; break;
      case OPT_PREDICT_SWEEP: o.predict.sweep = 1; break;
      case OPT_LOSS_SCALE: {
        // 'dynamic', 'dynamic:S' (S the starting scale) or a static S.
        const char* num = optarg;
        o.loss_scale_given = 0;
        o.loss_scale_dynamic = !strncmp(optarg, "dynamic", 7);
        if (o.loss_scale_dynamic) {
          o.loss_scale = LOSS_SCALE_DYNAMIC_INIT;
          if (!optarg[7]) break;
          if (optarg[7] != ':') num = "";  // "dynamicX": refused below
          else num = optarg + 8;
        }
        char* end;
        double v = strtod(num, &end);
        int e;
        // A power of two keeps scaling exact; above 2^24 the first step's gradients would
        // overflow (bf16 and fp32 keep 2^127 of range; gradients of large models reach 2^100).
        if (!*num || *end || !(v >= LOSS_SCALE_MIN && v <= LOSS_SCALE_MAX) || frexp(v, &e) != 0.5)
          usage_error("--loss-scale expects 'dynamic', 'dynamic:S' or S, with S a power of two from 1 to 16777216 "
                      "(2^24; larger scales would overflow the gradients on the first step), got '%s'", optarg);
        o.loss_scale = v;
        o.loss_scale_given = 1;
        break;
      }
      case OPT_LOSS_SCALE_WINDOW: o.loss_scale_window = (int)parse_long(name, optarg, 1, 1 << 30); break;
      case OPT_PREDICT_ALLOC_RETRY: o.predict.alloc_retry_ms = parse_float(name, optarg, 0.0f, 1e6f); break;
      case OPT_PREDICT_ATTENTION:
        if (strcmp(optarg, "fused") && strcmp(optarg, "eager"))
          usage_error("--predict-attention must be fused (fsdp.c's kernel) or eager (the seeds' PyTorch attention), "
                      "not '%s'", optarg);
        o.predict.attention = optarg;
        break;
      case OPT_PREDICT_COMM_SMS: o.predict.comm_sms = (int)parse_long(name, optarg, 0, 1024); break;
      case 'u': o.bench_warmup = (int)parse_long(name, optarg, 0, 1 << 20); break;
      case 'J': o.bench_json = optarg; break;
      case 'Z': o.peak = 1; break;
      case 'W': o.fsdp.sim_world = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 'U': o.fsdp.sim_gbps = parse_float(name, optarg, 1e-6f, 1e6f); break;
      case 'j': o.enc_len = (int)parse_long(name, optarg, 2, 1 << 20); break;
      case 'k': o.dec_len = (int)parse_long(name, optarg, 2, 1 << 20); break;
      case 'h':
        if (dist_rank() == 0) print_help();
        dist_finalize();
        exit(0);
      case ':': usage_error("option %s needs a value", argv[optind - 1]); break;
      default: usage_error("unknown option '%s'", argv[optind - 1]); break;
    }
  }
  if (optind < argc) usage_error("unexpected argument '%s'", argv[optind]);
  if (option_given(&o, "resume") && option_given(&o, "resume-if-present"))
    usage_error("%s", "--resume DIR and --resume-if-present DIR both name the checkpoint to continue: give one");
  return o;
}

Options parse_options(int argc, char** argv) {
  set_usage(argc > 0 ? argv[0] : NULL);
  Options o = parse_command_line(argc, argv);
  // The run's settings recorded in the checkpoint, for the options not given again (train/resume.c).
  if (o.resume_dir) o = resume_settings(&o, argc, argv);
  int listing = o.predict.cluster && !strcmp(o.predict.cluster, "list");  // --predict list: the catalogue, no model
  if (!o.model && !o.init_from && !listing) usage_error("%s", "--model is required (or --init-from weights that say it)");
  if (o.init_from && o.resume_dir) usage_error("%s", "--init-from and --resume both set the weights: give one");
  if (!o.data && !o.plan && !o.predict.cluster) usage_error("%s", "--data is required");
  if (o.plan_world && !o.plan && !o.predict.cluster) usage_error("%s", "--world is for --plan and --predict");
  if (o.predict.alloc_retry_ms > 0 && !o.predict.cluster) usage_error("%s", "--predict-alloc-retry is for --predict");
  if (o.predict.attention && !o.predict.cluster) usage_error("%s", "--predict-attention is for --predict");
  if (o.predict.comm_sms >= 0 && !o.predict.cluster) usage_error("%s", "--predict-comm-sms is for --predict");
  if (o.predict.sweep && !o.predict.cluster) usage_error("%s", "--predict-sweep needs --predict GPU[:NETWORK] --world N");
  if (o.predict.cluster && !o.plan_world && !listing) usage_error("%s", "--predict needs --world N, the number of GPUs to predict for");
  if (o.save_every && !o.save_dir) usage_error("%s", "--save-every needs --save DIR");
  if (o.plan_backend && !o.plan) usage_error("%s", "--backend is for --plan (a run uses the backend it was built with)");
  if (o.keep_checkpoints && !o.save_dir) usage_error("%s", "--keep-checkpoints needs --save DIR");
  if (o.global_batch && o.accum_given)
    usage_error("%s", "--global-batch sets the accumulation (A = G / (batch x ranks)); give --accum or --global-batch, not both");
  if ((o.fsdp.sim_world > 1) != (o.fsdp.sim_gbps > 0)) usage_error("%s", "--sim-world W and --sim-link GBPS go together");
  if (o.bench && (int64_t)o.steps + o.bench_warmup > BENCH_MAX_STEPS)
    usage_error("--bench times every step it runs: at most %s steps (with --bench-warmup); lower --steps", "1048576");
  return o;
}

int run_shape(const Options* o, const ModelConfig* cfg, int world, RunShape* s, char* err, size_t len) {
  int t5 = cfg->kind == MODEL_T5;
  s->B = o->batch;
  // Llama's default length is the context its frequencies were trained at (8192), not the 131072
  // positions the 3.1 scaling reaches.
  int default_T = cfg->kind == MODEL_LLAMA && cfg->rope.original_context && cfg->rope.original_context < cfg->T
                      ? cfg->rope.original_context : cfg->T;
  s->T = t5 ? o->dec_len : (o->seq ? o->seq : default_T);
  s->Te = t5 ? o->enc_len : 0;
  s->W = world;
  s->A = o->accum;
  if (!t5 && s->T > cfg->T) {
    snprintf(err, len, "--seq %d exceeds the model's maximum sequence length %d (%s)", s->T, cfg->T, cfg->name);
    return -1;
  }
  // Products of sizes in 64 bits, bounded before anything is planned: every count the run derives
  // from them (sequences and tokens per step, a micro-batch's tokens) fits an int.
  int64_t per_micro = (int64_t)s->B * world;  // B <= 2^20, world <= 2^24
  if (o->global_batch) {
    if (o->global_batch % per_micro) {
      snprintf(err, len, "--global-batch %d cannot be split into micro-batches of --batch %d on %d ranks: it must be "
               "a multiple of batch x ranks = %lld", o->global_batch, s->B, world, (long long)per_micro);
      return -1;
    }
    s->A = (int)(o->global_batch / per_micro);
  }
  // per_micro < 2^44 and A <= 2^20: their product is exact in 64 bits.
  int64_t tokens = (int64_t)s->B * (s->T > s->Te ? s->T : s->Te), sequences = per_micro * s->A;
  if (tokens > RUN_MAX_COUNT || sequences > RUN_MAX_COUNT) {
    snprintf(err, len, "--batch %d x %d tokens on %d ranks x %d micro-steps is %lld tokens per micro-batch and %lld "
             "sequences per step; at most %d of each: lower --batch, --accum or the ranks", s->B, s->T > s->Te ? s->T : s->Te,
             world, s->A, (long long)tokens, (long long)sequences, RUN_MAX_COUNT);
    return -1;
  }
  s->M = world * s->A;
  return 0;
}

RunShape resolve_options(Options* o, const ModelConfig* cfg, int world) {
  char err[2048];
  int t5 = cfg->kind == MODEL_T5;
  if (t5 && (o->eval_prompts || o->eval_choices || o->sample_every))
    usage_error("%s", "--eval-prompts, --eval-choices and --sample-every are for GPT models");
  RunShape s;
  if (run_shape(o, cfg, world, &s, err, sizeof err)) usage_error("%s", err);
  o->accum = s.A;
  o->fsdp.accum_steps = s.A;  // the plan keeps no unsharded gradient buffers when each unit's goes into its shard
  model_check_options(cfg, &o->fsdp);
  if (o->plan && o->plan_backend && strcmp(o->plan_backend, kernels_backend()))
    usage_error("--plan --backend %s: this binary plans its own backend (cuda); use train_gpt_cpu --plan --backend cpu",
                o->plan_backend);
  if (o->plan) return s;
  // A sample continues the first token inside one sequence: T - 1 new tokens at most.
  if (o->sample_every && o->sample_tokens > s.T - 1) {
    if (option_given(o, "sample-tokens")) {
      snprintf(err, sizeof err, "--sample-tokens %d: a sample continues its first token within one sequence of %d tokens "
               "(--seq), so it has at most %d new tokens; lower --sample-tokens or raise --seq", o->sample_tokens, s.T,
               s.T - 1);
      usage_error("%s", err);
    }
    o->sample_tokens = s.T - 1;  // the default, 64, where it fits
  }
  if (o->fsdp.reduce_dtype != DT_F32 && !strcmp(kernels_backend(), "cpu"))
    usage_error("--reduce-dtype %s needs the CUDA build (train_gpt); the CPU backend reduces in fp32",
                dtype_name(o->fsdp.reduce_dtype));
  if (o->fsdp.reduce_dtype != DT_F32 && o->fsdp.reduce_dtype != ACT_DTYPE) {  // the staging buffer is act_t
    snprintf(err, sizeof err, "this train_gpt was built for " ACT_NAME " activations and reduces in " ACT_NAME
             " or fp32; for %s, build with `make train_gpt PRECISION=%s`", dtype_name(o->fsdp.reduce_dtype),
             dtype_name(o->fsdp.reduce_dtype));
    usage_error("--reduce-dtype: %s", err);
  }
  // A static scale whose loss gradient of one token, S / tokens per step (the target logit's,
  // about -S / tokens from the start), is beyond fp16's 65504 overflows on every step.
  if (ACT_DTYPE == DT_F16 && !o->loss_scale_dynamic && o->loss_scale / ((double)s.M * s.B * s.T) > 65504.0) {
    snprintf(err, sizeof err, "%.0f / %lld tokens per step puts a token's loss gradient beyond fp16's 65504, so "
             "every step would overflow; use --loss-scale dynamic, which finds the largest scale that does not",
             o->loss_scale, (long long)s.M * s.B * s.T);
    usage_error("--loss-scale: %s", err);
  }
  if (o->fsdp.sim_world > 1 && world > 1) usage_error("%s", "--sim-world simulates several ranks from one: run it without mpirun");
  if (o->inject_step > 0 && (o->inject_rank >= world || o->inject_unit >= model_num_units(cfg, o->fsdp.wrap)))
    usage_error("%s", "--inject-nonfinite names a rank or unit this run does not have");
  return s;
}
