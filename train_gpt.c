// train_gpt.c: the training loop of fsdp.c.
//
//   options -> model + FSDP runtime -> data -> for each step: accumulate micro-batches
//   (forward, backward, gradient reduce-scatter), global-norm clip, sharded AdamW -> logs,
//   evaluation and samples.
//
// The same file builds train_gpt_cpu (fp32 reference, MPI) and train_gpt (CUDA + NCCL).
// Under mpirun every rank runs this loop on its own micro-batches; rank 0 prints and logs.
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/shard.h"
#include "data/span_corrupt.h"
#include "fsdp/dist.h"
#include "fsdp/fsdp.h"
#include "layers/model.h"

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
  FSDPOptions fsdp;
} Options;

static const char* USAGE =
    "usage: train_gpt_cpu --model NAME --data GLOB [options]   (--help for all options)";

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
      "  --shard S             full (default) | grad-op | none | hybrid:F\n"
      "  --limit-all-gathers K unsharded blocks at most at once, the slot pool (default 2)\n"
      "  --prefetch P          none | forward | backward | both (default both)\n"
      "  --no-sync-accum       keep unsharded gradients, reduce once per optimizer step\n"
      "evaluation and logs\n"
      "  --eval-every N        validation loss every N steps and at the end (default 0 = end only)\n"
      "  --eval-batches N      validation micro-batches (default 8)\n"
      "  --eval-prompts FILE   lines 'prompt<TAB>answer' (byte tokens): exact-match accuracy of\n"
      "                        greedy answers, reported with each evaluation\n"
      "  --sample-every N      print a sampled continuation every N steps (default 0 = off)\n"
      "  --sample-tokens N     tokens per sample (default 64)\n"
      "  --log FILE            one JSON object per step (and per evaluation)\n"
      "  --digest              print params_digest <hex> of the final parameters\n"
      "  --dump-params FILE    write the final parameters (fp32, global order, no padding)\n"
      "  --help                this text\n\n"
      "models:\n%s",
      USAGE, presets);
}

static void usage_error(const char* fmt, const char* arg) {
  if (dist_rank() == 0) {
    fprintf(stderr, "error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s\n", USAGE);
  }
  dist_finalize();
  exit(2);
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

static float parse_float(const char* opt, const char* s, float lo, float hi) {
  char* end;
  float v = strtof(s, &end);
  if (!*s || *end || !(v >= lo && v <= hi)) {
    char msg[256];
    snprintf(msg, sizeof msg, "option --%s expects a number in [%g, %g], got '%%s'", opt, lo, hi);
    usage_error(msg, s);
  }
  return v;
}

static Options parse_options(int argc, char** argv) {
  Options o = {.batch = 4, .accum = 1, .enc_len = 512, .dec_len = 114, .steps = 10, .lr = 3e-4f, .lr_final_frac = 0.1f,
               .weight_decay = 0.1f, .grad_clip = 1.0f, .beta1 = 0.9f, .beta2 = 0.95f,
               .adam_eps = 1e-8f, .seed = 1337, .eval_batches = 8, .sample_tokens = 64,
               .fsdp = {.strategy = SHARD_FULL, .limit_all_gathers = 2, .sync_accum = 1,
                        .prefetch_forward = 1, .prefetch_backward = 1, .reduce_dtype = DT_F32}};
  static struct option longopts[] = {
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
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  opterr = 0;
  int c, idx;
  while ((c = getopt_long(argc, argv, "", longopts, &idx)) != -1) {
    const char* name = longopts[idx].name;
    switch (c) {
      case 'm': o.model = optarg; break;
      case 'd': o.data = optarg; break;
      case 'V': o.val_data = optarg; break;
      case 'b': o.batch = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 't': o.seq = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 'a': o.accum = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 'G': o.global_batch = (int)parse_long(name, optarg, 1, 1 << 30); break;
      case 'n': o.steps = (int)parse_long(name, optarg, 0, 1 << 30); break;
      case 'l': o.lr = parse_float(name, optarg, 0.0f, 10.0f); break;
      case 'w': o.warmup = (int)parse_long(name, optarg, 0, 1 << 30); break;
      case 'f': o.lr_final_frac = parse_float(name, optarg, 0.0f, 1.0f); break;
      case 'D': o.weight_decay = parse_float(name, optarg, 0.0f, 10.0f); break;
      case 'E': o.fsdp.decay_embeddings = 1; break;
      case '1': o.beta1 = parse_float(name, optarg, 0.0f, 0.999999f); break;
      case '2': o.beta2 = parse_float(name, optarg, 0.0f, 0.999999f); break;
      case 'e': o.adam_eps = parse_float(name, optarg, 0.0f, 1.0f); break;
      case 'c': o.grad_clip = parse_float(name, optarg, 0.0f, 1e30f); break;
      case 's': o.seed = (uint64_t)parse_long(name, optarg, 0, 0x7fffffffffffffffL); break;
      case 'S':
        if (fsdp_parse_strategy(optarg, &o.fsdp)) usage_error("--shard expects full, grad-op, none or hybrid:F, got '%s'", optarg);
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
      case 'v': o.eval_every = (int)parse_long(name, optarg, 0, 1 << 30); break;
      case 'B': o.eval_batches = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 'P': o.eval_prompts = optarg; break;
      case 'x': o.sample_every = (int)parse_long(name, optarg, 0, 1 << 30); break;
      case 'X': o.sample_tokens = (int)parse_long(name, optarg, 1, 1 << 20); break;
      case 'L': o.log_path = optarg; break;
      case 'H': o.digest = 1; break;
      case 'Q': o.dump_params = optarg; break;
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
  if (!o.model) usage_error("%s", "--model is required");
  if (!o.data) usage_error("%s", "--data is required");
  return o;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Linear warmup to the peak, then cosine decay to lr_final_frac of the peak (GPT-3 paper).
static float learning_rate(const Options* o, int step) {
  if (step < o->warmup) return o->lr * (step + 1) / o->warmup;
  int decay_steps = o->steps - o->warmup;
  if (decay_steps <= 1) return o->lr;
  float progress = (float)(step - o->warmup) / (float)(decay_steps - 1);
  float cosine = 0.5f * (1.0f + cosf(3.14159265358979f * progress));
  return o->lr * (o->lr_final_frac + (1.0f - o->lr_final_frac) * cosine);
}

static void open_stream(TokenStream* ts, const char* glob, const char* what, int vocab, int B, int T) {
  char err[1024];
  if (token_stream_open(ts, glob, vocab, err, sizeof err)) fatal("%s: %s", what, err);
  if (sampler_windows(ts, B, T) < 1)
    fatal("%s '%s' has %lld tokens, fewer than one micro-batch of B*T+1 = %lld; lower --batch or --seq",
          what, glob, (long long)ts->total, (long long)B * T + 1);
}

// One micro-batch on the host: GPT token windows, or T5 span-corrupted examples. The model's
// own token buffers live in its memory plan (device memory on CUDA); batch_to_model copies.
typedef struct {
  int t5, B, T, Te;
  SpanConfig span;
  uint64_t seed;
  int32_t *inputs, *targets, *enc;
} Batch;

static void batch_load(Batch* b, const TokenStream* ts, int64_t g) {
  char err[1024];
  int rc = b->t5 ? span_micro_batch(ts, &b->span, b->seed, g, b->B, b->enc, b->inputs, b->targets, err, sizeof err)
                 : sampler_micro_batch(ts, g, b->B, b->T, b->inputs, b->targets, err, sizeof err);
  if (rc) fatal("%s", err);
}

static int64_t batch_valid_targets(const Batch* b) {
  int64_t n = 0;
  for (int i = 0; i < b->B * b->T; i++) n += b->targets[i] >= 0;
  return n;
}

static void batch_to_model(const Batch* b, Model* m) {
  size_t n = (size_t)b->B * b->T * sizeof(int32_t);
  device_copy_to_device(m->inputs, b->inputs, n);
  device_copy_to_device(m->targets, b->targets, n);
  if (b->t5) device_copy_to_device(m->enc_inputs, b->enc, (size_t)b->B * b->Te * sizeof(int32_t));
}

// Validation loss over eval_batches micro-batches, spread over ranks like training batches
// (every rank runs the same number of forwards: the collectives must match).
static double evaluate(Model* m, Batch* b, const TokenStream* val, int eval_batches) {
  FSDP* fs = m->fs;
  int W = fs->world_size, rounds = (eval_batches + W - 1) / W;
  double sums[2] = {0, 0};  // loss sum, token count
  for (int i = 0; i < rounds; i++) {
    int64_t g = (int64_t)i * W + fs->world_rank;
    batch_load(b, val, g % eval_batches);
    batch_to_model(b, m);
    fsdp_begin_forward(fs, 0, 0);
    double s = model_forward(m, 1, 0.0f);
    if (g < eval_batches) sums[0] += s, sums[1] += (double)batch_valid_targets(b);
  }
  comm_all_reduce(fs->world, sums, 2, DT_F64);
  return sums[0] / sums[1];
}

// Greedy decoding from each row's cursor; rows advance in lock step over `steps` tokens.
static void greedy_extend(Model* m, Batch* bt, int* cursor, int steps) {
  int T = m->T, Vp = m->cfg.Vp, V = m->cfg.V;
  act_t* row = xmalloc((size_t)V * sizeof(act_t), "logits row");
  float* probs = xmalloc((size_t)V * sizeof(float), "probabilities");
  for (int s = 0; s < steps; s++) {
    batch_to_model(bt, m);
    fsdp_begin_forward(m->fs, 0, 0);
    model_forward(m, 0, 0.0f);
    for (int b = 0; b < m->B; b++) {
      if (cursor[b] >= T) continue;
      device_copy_to_host(row, m->logits + ((size_t)b * T + cursor[b] - 1) * Vp, (size_t)V * sizeof(act_t));
      softmax_row(NULL, probs, row, V, 1.0f);  // fp32 on both backends
      int best = 0;
      for (int v = 1; v < V; v++)
        if (probs[v] > probs[best]) best = v;
      bt->inputs[(size_t)b * T + cursor[b]] = best;
      cursor[b]++;
    }
  }
  free(row);
  free(probs);
}

typedef struct {
  int n, max_answer;
  char** prompt;
  char** answer;
} PromptSet;

static PromptSet load_prompts(const char* path, int T, int V) {
  PromptSet ps = {0};
  FILE* f = fopen(path, "r");
  if (!f) fatal("--eval-prompts: cannot open '%s'", path);
  char line[4096];
  int cap = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (!*line) continue;
    char* tab = strchr(line, '\t');
    if (!tab) fatal("--eval-prompts %s: line %d has no TAB between prompt and answer", path, ps.n + 1);
    *tab = 0;
    if ((int)(strlen(line) + strlen(tab + 1)) + 1 > T)
      fatal("--eval-prompts %s: line %d does not fit in a sequence of %d tokens", path, ps.n + 1, T);
    for (const unsigned char* c = (const unsigned char*)line; *c; c++)
      if (*c >= V) fatal("--eval-prompts %s: byte %d is not a token of a vocabulary of %d", path, *c, V);
    if (ps.n == cap) {
      cap = cap ? 2 * cap : 256;
      ps.prompt = realloc(ps.prompt, cap * sizeof(char*));
      ps.answer = realloc(ps.answer, cap * sizeof(char*));
      if (!ps.prompt || !ps.answer) fatal("out of memory reading %s", path);
    }
    ps.prompt[ps.n] = strdup(line);
    ps.answer[ps.n] = strdup(tab + 1);
    if ((int)strlen(tab + 1) > ps.max_answer) ps.max_answer = (int)strlen(tab + 1);
    ps.n++;
  }
  fclose(f);
  if (!ps.n) fatal("--eval-prompts %s: no prompts", path);
  return ps;
}

// Exact-match accuracy: each prompt starts a sequence (position 0) and is extended greedily by
// as many tokens as the longest answer; its answer must match byte for byte. Chunks of B prompts are spread over ranks; every rank decodes the same number of
// rounds and steps, since the forwards are collective.
static double exact_match(Model* m, Batch* bt, const PromptSet* ps) {
  FSDP* fs = m->fs;
  int B = m->B, T = m->T, W = fs->world_size;
  int chunks = (ps->n + B - 1) / B, rounds = (chunks + W - 1) / W;
  int* cursor = xmalloc((size_t)B * sizeof(int), "cursors");
  int* start = xmalloc((size_t)B * sizeof(int), "cursors");
  double counts[2] = {0, 0};  // correct, total
  for (int r = 0; r < rounds; r++) {
    int chunk = r * W + fs->world_rank;
    for (int b = 0; b < B; b++) {
      int i = chunk * B + b;
      int32_t* row = bt->inputs + (size_t)b * T;
      for (int t = 0; t < T; t++) row[t] = '\n';
      int len = 0;
      if (i < ps->n)
        for (const char* c = ps->prompt[i]; *c; c++) row[len++] = (unsigned char)*c;
      cursor[b] = start[b] = len;
    }
    greedy_extend(m, bt, cursor, ps->max_answer);
    for (int b = 0; b < B; b++) {
      int i = chunk * B + b;
      if (i >= ps->n) continue;
      int ok = 1;
      for (int t = 0; ps->answer[i][t]; t++)
        if (bt->inputs[(size_t)b * T + start[b] + t] != (unsigned char)ps->answer[i][t]) ok = 0;
      counts[0] += ok;
      counts[1] += 1;
    }
  }
  free(cursor);
  free(start);
  comm_all_reduce(fs->world, counts, 2, DT_F64);
  return counts[1] > 0 ? counts[0] / counts[1] : 0.0;
}

// Samples a continuation of the first token of `ts` with a fixed-seed generator (the same on
// all ranks, so the collective forwards stay in step) and prints it on rank 0.
static void sample_text(Model* m, Batch* bt, const TokenStream* ts, int ntokens, uint64_t seed) {
  int T = m->T, V = m->cfg.V, Vp = m->cfg.Vp;
  int32_t first;
  char err[256];
  if (token_stream_read(ts, 0, 1, &first, err, sizeof err)) fatal("%s", err);
  for (int i = 0; i < m->B * T; i++) bt->inputs[i] = first;
  int n = ntokens < T - 1 ? ntokens : T - 1;
  act_t* row = xmalloc((size_t)V * sizeof(act_t), "logits row");
  float* probs = xmalloc((size_t)V * sizeof(float), "probabilities");
  uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (int t = 1; t <= n; t++) {
    batch_to_model(bt, m);
    fsdp_begin_forward(m->fs, 0, 0);
    model_forward(m, 0, 0.0f);
    device_copy_to_host(row, m->logits + (size_t)(t - 1) * Vp, (size_t)V * sizeof(act_t));
    softmax_row(NULL, probs, row, V, 1.0f);
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;  // xorshift64
    double u = (state >> 11) * (1.0 / 9007199254740992.0), acc = 0.0;
    int next = V - 1;
    for (int v = 0; v < V; v++)
      if ((acc += probs[v]) > u) {
        next = v;
        break;
      }
    bt->inputs[t] = next;
  }
  log0("sample: ");
  for (int t = 0; t <= n; t++) {
    int tok = bt->inputs[t];
    if (V <= 256) log0("%c", (tok >= 32 && tok < 127) || tok == '\n' ? tok : '?');
    else log0("%d ", tok);
  }
  log0("\n");
  free(row);
  free(probs);
}

// Writes every parameter's live fp32 values in global order (units, then table order) to
// path, and the table (unit, name, shape, count) to path.json, from rank 0, through temporary
// names so a crash never leaves a partial file.
static void dump_params(FSDP* fs, const char* path) {
  char tmp[4096], meta[4096], meta_tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  snprintf(meta, sizeof meta, "%s.json", path);
  snprintf(meta_tmp, sizeof meta_tmp, "%s.tmp", meta);
  FILE *f = NULL, *j = NULL;
  if (fs->world_rank == 0 && (!(f = fopen(tmp, "wb")) || !(j = fopen(meta_tmp, "w"))))
    fatal("--dump-params: cannot open '%s' for writing", path);
  if (j) fprintf(j, "[");
  for (int u = 0; u < fs->nunits; u++) {
    Unit* U = &fs->units[u];
    float* full = xmalloc((size_t)U->numel * sizeof(float), "parameter dump");
    fsdp_gather_master(fs, u, full);
    for (int i = 0; i < U->nparams && f; i++) {
      const ParamInfo* p = &U->params[i];
      if (fwrite(full + p->offset, sizeof(float), p->live, f) != (size_t)p->live)
        fatal("--dump-params: write to '%s' failed", tmp);
      fprintf(j, "%s{\"unit\": \"%s\", \"name\": \"%s\", \"shape\": [", u || i ? ", " : "", U->name, p->name);
      for (int d = 0; d < p->ndim; d++) fprintf(j, "%s%lld", d ? ", " : "", (long long)p->shape[d]);
      fprintf(j, "], \"count\": %lld}", (long long)p->live);
    }
    free(full);
  }
  if (j) fprintf(j, "]\n");
  if (f && (fclose(f) || fclose(j) || rename(tmp, path) || rename(meta_tmp, meta)))
    fatal("--dump-params: cannot finish '%s'", path);
}

int main(int argc, char** argv) {
  dist_init(&argc, &argv);
  Options o = parse_options(argc, argv);
  int W = dist_world(), rank = dist_rank();
  char err[2048];
  ModelConfig cfg;
  if (model_config_parse(o.model, &cfg, err, sizeof err)) usage_error("%s", err);
  int t5 = cfg.kind == MODEL_T5;
  int B = o.batch, T = t5 ? o.dec_len : (o.seq ? o.seq : cfg.T), Te = t5 ? o.enc_len : 0;
  if (!t5 && T > cfg.T) usage_error("--seq exceeds the model's maximum sequence length (%s)", o.model);
  if (t5 && (o.eval_prompts || o.sample_every)) usage_error("%s", "--eval-prompts and --sample-every are for GPT models");
  if (o.global_batch) {
    if (o.global_batch % (B * W)) {
      if (rank == 0)
        fprintf(stderr, "error: --global-batch %d cannot be split into micro-batches of --batch %d on %d ranks: "
                        "it must be a multiple of batch x ranks = %d\n%s\n", o.global_batch, B, W, B * W, USAGE);
      dist_finalize();
      exit(2);
    }
    o.accum = o.global_batch / (B * W);
  }
  if (o.fsdp.reduce_dtype != DT_F32) fatal("the CPU backend reduces gradients in fp32 only");
  int A = o.accum, M = W * A;  // micro-batches per optimizer step, over all ranks

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
  batch.inputs = xmalloc((size_t)B * T * sizeof(int32_t), "batch");
  batch.targets = xmalloc((size_t)B * T * sizeof(int32_t), "batch");
  batch.enc = xmalloc((size_t)B * (Te ? Te : 1) * sizeof(int32_t), "batch");
  TokenStream train, val;
  open_stream(&train, o.data, "--data", data_vocab, t5 ? 1 : B, window_tokens);
  if (o.val_data) open_stream(&val, o.val_data, "--val-data", data_vocab, t5 ? 1 : B, window_tokens);
  PromptSet prompts = {0};
  if (o.eval_prompts) prompts = load_prompts(o.eval_prompts, T, cfg.V);

  FSDP fs;
  fsdp_init(&fs, model_num_units(&cfg), o.fsdp, comm_world(), NULL);
  Model model;
  model_create(&model, &cfg, &fs, B, T, Te, o.seed);

  if (t5)
    log0("fsdp.c | model %s | T5 %s | L=%d+%d C=%d H=%d D=%d F=%d V=%d (padded %d)\n", cfg.name,
         cfg.gated ? "v1.1" : "v1.0", cfg.L, cfg.Ld, cfg.C, cfg.H, cfg.D, cfg.F, cfg.V, cfg.Vp);
  else
    log0("fsdp.c | model %s | GPT | L=%d C=%d H=%d V=%d (padded %d) T=%d\n", cfg.name, cfg.L, cfg.C, cfg.H, cfg.V, cfg.Vp, cfg.T);
  log0("| %-22s | %-30s |\n", "setting", "value");
  log0("| %-22s | %-30d |\n", "ranks", W);
  char shard[64];
  snprintf(shard, sizeof shard, "%s (F=%d, %d replica%s)", fsdp_strategy_name(o.fsdp.strategy), fs.F, fs.replicas, fs.replicas > 1 ? "s" : "");
  log0("| %-22s | %-30s |\n", "sharding", shard);
  log0("| %-22s | %-30d |\n", "limit all-gathers", o.fsdp.limit_all_gathers);
  log0("| %-22s | %-30s |\n", "prefetch", o.fsdp.prefetch_forward ? (o.fsdp.prefetch_backward ? "both" : "forward") : (o.fsdp.prefetch_backward ? "backward" : "none"));
  log0("| %-22s | %-30s |\n", "gradient accumulation", o.fsdp.sync_accum ? "reduce every micro-step" : "no sync (reduce on last)");
  log0("| %-22s | %-30d |\n", "micro-batch (B)", B);
  if (t5) {
    log0("| %-22s | %-30d |\n", "encoder length", Te);
    log0("| %-22s | %-30d |\n", "decoder length", T);
  } else {
    log0("| %-22s | %-30d |\n", "sequence (T)", T);
  }
  log0("| %-22s | %-30d |\n", "accumulation (A)", A);
  log0("| %-22s | %-30lld |\n", "sequences per step", (long long)M * B);
  log0("| %-22s | %-30d |\n", "steps", o.steps);
  log0("| %-22s | %-30g |\n", "learning rate", o.lr);
  log0("| %-22s | %-30d |\n", "warmup", o.warmup);
  log0("| %-22s | %-30g |\n", "weight decay", o.weight_decay);
  log0("| %-22s | %-30g |\n", "grad clip", o.grad_clip);
  log0("| %-22s | %-30llu |\n", "seed", (unsigned long long)o.seed);
  log0("| %-22s | %-30lld |\n", "parameters", (long long)fsdp_num_params(&fs));
  log0("| %-22s | %-30lld |\n", "padded flat elements", (long long)fsdp_num_padded(&fs));
  log0("| %-22s | %-30d |\n", "units", fs.nunits);
  double flops_step = M * model_flops(&cfg, B, T, Te);
  log0("| %-22s | %-30.4g |\n", "matmul FLOPs per step", flops_step);
  if (t5) log0("| %-22s | %-30.4g |\n", "IBM T5 formula (s=enc)", M * t5_flops_ibm(&cfg, B, Te));
  log0("| %-22s | %-30lld |\n", "train tokens", (long long)train.total);
  if (o.val_data) log0("| %-22s | %-30lld |\n", "val tokens", (long long)val.total);
  memplan_print(&fs.plan);

  FILE* logf = NULL;
  if (o.log_path && rank == 0) {
    logf = fopen(o.log_path, "w");
    if (!logf) fatal("--log: cannot open '%s' for writing", o.log_path);
  }

  int eval_now;
  for (int step = 0; step < o.steps; step++) {
    double t0 = now_seconds();
    fsdp_begin_step(&fs, A);
    // Loss gradients are scaled by 1 / (the step's valid target tokens over all ranks); with
    // T5's padded targets that count varies, so it is agreed on before any backward.
    double global_tokens = (double)M * B * T;
    if (t5) {
      int64_t valid = 0;
      for (int j = 0; j < A; j++) {
        batch_load(&batch, &train, (int64_t)step * M + (int64_t)j * W + rank);
        valid += batch_valid_targets(&batch);
      }
      comm_all_reduce(fs.world, &valid, 1, DT_I64);
      global_tokens = (double)valid;
    }
    double loss_sum = 0.0;
    for (int j = 0; j < A; j++) {
      // Micro-batch number j*W + rank of this step: rank r reads micro-batches r, r+W, ...
      batch_load(&batch, &train, (int64_t)step * M + (int64_t)j * W + rank);
      batch_to_model(&batch, &model);
      fsdp_begin_forward(&fs, j, 1);
      loss_sum += model_forward(&model, 1, (float)(1.0 / global_tokens));
      model_backward(&model);
    }
    comm_all_reduce(fs.world, &loss_sum, 1, DT_F64);
    double loss = loss_sum / global_tokens;
    double norm = fsdp_grad_norm(&fs);
    // Clip as torch.nn.utils.clip_grad_norm_: scale by C / (norm + 1e-6) when that is below 1.
    float scale = 1.0f;
    if (o.grad_clip > 0 && norm + 1e-6 > o.grad_clip) scale = (float)(o.grad_clip / (norm + 1e-6));
    float lr = learning_rate(&o, step);
    AdamWArgs args = {.lr = lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.adam_eps,
                      .weight_decay = o.weight_decay, .grad_scale = scale, .step = step + 1};
    fsdp_adamw_step(&fs, args);
    device_synchronize();
    double ms = (now_seconds() - t0) * 1e3;
    double tok_s = global_tokens / (ms / 1e3);
    log0("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s\n", step + 1, o.steps, loss, lr, norm, ms, tok_s);
    if (logf) {
      fprintf(logf, "{\"step\": %d, \"loss\": %.17g, \"lr\": %.9g, \"grad_norm\": %.17g, \"ms\": %.3f, \"tokens_per_s\": %.1f}\n",
              step + 1, loss, lr, norm, ms, tok_s);
      fflush(logf);
    }
    if (!isfinite(loss)) fatal("loss is %f at step %d; lower --lr or check the data", loss, step + 1);
    eval_now = (o.eval_every && (step + 1) % o.eval_every == 0) || step + 1 == o.steps;
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
    if (o.sample_every && (step + 1) % o.sample_every == 0)
      sample_text(&model, &batch, o.val_data ? &val : &train, o.sample_tokens, o.seed + step);
  }
  if (o.digest) {
    uint64_t d = fsdp_params_digest(&fs);
    log0("params_digest %016llx\n", (unsigned long long)d);
  }
  if (o.dump_params) dump_params(&fs, o.dump_params);
  if (logf) fclose(logf);
  dist_finalize();
  return 0;
}
