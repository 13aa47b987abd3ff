// generate.c: a continuation of a prompt from a trained model (generate_cpu / generate).
//
//   generate_cpu SRC [--prompt-ids "IDS"] [--prompt TEXT] [--tokens N] [--temperature T]
//                    [--top-k K] [--seed S] [--tokenizer FILE]
//
// SRC: an fsdp.c checkpoint (--save), a Hugging Face directory (--export, or GPT-2 / T5 from
// the hub) or an llm.c .bin (weights/source.c). GPT samples with temperature and top-k
// (temperature 0: greedy); T5 decodes greedily from decoder start id 0 until its end id 1.
// Each new token costs one full forward over the sequence (no key/value cache: the point is
// to show what a model learned, not to serve it). Runs under mpirun as the trainer does:
// every rank holds its shards, rank 0 draws each token and broadcasts it.
// Text: --prompt is read as bytes for a byte-level model (V <= 256); for BPE or SentencePiece
// prompts, scripts/generate.py encodes the text and passes --prompt-ids. The output is
// decoded with --tokenizer FILE, or SRC/tokenizer.bin, when given (data/tokenizer.h), and
// printed as ids otherwise.
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/tokenizer.h"
#include "infra/args.h"
#include "infra/dist.h"
#include "layers/model.h"
#include "weights/weights.h"

static const char* USAGE_TEXT =
    "usage: generate_cpu SRC [--prompt-ids \"IDS\"] [--prompt TEXT] [--tokens N] [--temperature T]\n"
    "                    [--top-k K] [--seed S] [--tokenizer FILE]\n"
    "  SRC             an fsdp.c checkpoint dir, a Hugging Face dir (GPT-2, T5) or an llm.c .bin\n"
    "  --prompt-ids    token ids, separated by spaces or commas\n"
    "  --prompt TEXT   bytes as ids (byte-level models, V <= 256); scripts/generate.py encodes\n"
    "                  text for GPT-2 BPE and SentencePiece models\n"
    "  --tokens N      new tokens (default 32; GPT: at most what the context has left, T5: at most 4096)\n"
    "  --temperature T GPT sampling temperature (default 1; 0 = greedy)\n"
    "  --top-k K       GPT: sample among the K likeliest tokens (default 0 = all)\n"
    "  --seed S        sampling seed (default 1337)\n"
    "  --tokenizer F   decode the output with F (llm.c tokenizer format; default SRC/tokenizer.bin)\n";

#define MAX_NEW_TOKENS (1 << 16)
#define MAX_T5_TOKENS 4096  // T5's decoder length: each new token runs it again, over all of it

static void usage(const char* msg, const char* arg) __attribute__((noreturn));
static void usage(const char* msg, const char* arg) {
  if (dist_rank() == 0) {
    fprintf(stderr, "error: ");
    fprintf(stderr, msg, arg);
    fprintf(stderr, "\n%s", USAGE_TEXT);
  }
  dist_finalize();
  exit(2);
}

// One logit as a float: act_t is fp32 on the CPU backend and bf16 bits on CUDA.
static float logit(act_t a) {
#ifdef FSDP_CUDA
  uint32_t bits = (uint32_t)a << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
#else
  return a;
#endif
}

static int cmp_desc(const void* a, const void* b) {
  float x = *(const float*)a, y = *(const float*)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

// The next token from one row of logits: argmax when temperature <= 0, else a draw from the
// softmax at that temperature restricted to the top_k likeliest tokens.
static int next_token(const act_t* row, int V, float temperature, int top_k, float* probs, float* sorted,
                      uint64_t* state) {
  if (temperature <= 0.0f) {
    int best = 0;
    for (int v = 1; v < V; v++)
      if (logit(row[v]) > logit(row[best])) best = v;
    return best;
  }
  softmax_row(NULL, probs, row, V, temperature);
  if (top_k > 0 && top_k < V) {
    memcpy(sorted, probs, (size_t)V * sizeof(float));
    qsort(sorted, V, sizeof(float), cmp_desc);
    float cut = sorted[top_k - 1];
    double kept = 0.0;
    for (int v = 0; v < V; v++) kept += probs[v] >= cut ? probs[v] : (probs[v] = 0.0f);
    for (int v = 0; v < V; v++) probs[v] = (float)(probs[v] / kept);
  }
  *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;  // xorshift64
  double u = (*state >> 11) * (1.0 / 9007199254740992.0), acc = 0.0;
  int last = 0;
  for (int v = 0; v < V; v++) {
    if (probs[v] > 0) last = v;
    if ((acc += probs[v]) > u && probs[v] > 0) return v;
  }
  return last;
}

// Strict numbers for the options: the whole argument, in range, or a usage error naming it.
static long long int_option(const char* opt, const char* arg, long long lo, long long hi) {
  char* end;
  errno = 0;
  long long v = strtoll(arg, &end, 10);
  if (end == arg || *end || errno == ERANGE || v < lo || v > hi) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s '%%s': expected a whole number from %lld to %lld", opt, lo, hi);
    usage(msg, arg);
  }
  return v;
}

// The tokenizer that decodes the output: --tokenizer FILE, else SRC/tokenizer.bin when there is
// one. Either way it must be this model's: its ids within the model's vocabulary.
static int load_tokenizer(const char* tok_path, const char* src, int V, Tokenizer* tok) {
  char path[4200], err[4400];
  struct stat st;
  if (tok_path) snprintf(path, sizeof path, "%s", tok_path);
  else snprintf(path, sizeof path, "%s/tokenizer.bin", src);
  if (!tok_path && stat(path, &st) != 0) return 0;
  if (tokenizer_load(path, tok, err, sizeof err)) usage("%s", err);
  if (tok->vocab > V || tok->eot >= V) {
    snprintf(err, sizeof err, "the tokenizer %s has %d tokens (end-of-text id %d) but the model's vocabulary has %d: it "
             "is not this model's tokenizer; pass the model's own with --tokenizer", path, tok->vocab, tok->eot, V);
    usage("%s", err);
  }
  return 1;
}

int main(int argc, char** argv) {
  dist_init(&argc, &argv);
  const char *prompt_ids = NULL, *prompt_text = NULL, *tok_path = NULL;
  int ntokens = 32, top_k = 0;
  float temperature = 1.0f;
  uint64_t seed = 1337;
  static struct option longopts[] = {{"prompt-ids", required_argument, 0, 'i'}, {"prompt", required_argument, 0, 'p'},
                                     {"tokens", required_argument, 0, 'n'},     {"temperature", required_argument, 0, 't'},
                                     {"top-k", required_argument, 0, 'k'},      {"seed", required_argument, 0, 's'},
                                     {"tokenizer", required_argument, 0, 'z'},  {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  char err[4096];
  if (long_options_exact(argc, argv, longopts, err, sizeof err)) usage("%s", err);
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    char* end = NULL;
    switch (c) {
      case 'i': prompt_ids = optarg; break;
      case 'p': prompt_text = optarg; break;
      case 'z': tok_path = optarg; break;
      case 'n': ntokens = (int)int_option("--tokens", optarg, 1, MAX_NEW_TOKENS); break;
      case 'k': top_k = (int)int_option("--top-k", optarg, 0, INT32_MAX); break;
      case 's': seed = (uint64_t)int_option("--seed", optarg, 0, INT64_MAX); break;
      case 't':
        temperature = strtof(optarg, &end);
        if (end == optarg || *end || !isfinite(temperature) || temperature < 0)
          usage("--temperature '%s': expected a finite number >= 0 (0: greedy)", optarg);
        break;
      case 'h':
        if (dist_rank() == 0) printf("%s", USAGE_TEXT);
        dist_finalize();
        return 0;
      default: usage("unknown option or missing value: %s", argv[optind - 1]);
    }
  }
  if (optind != argc - 1) usage("%s", "give one SRC");
  if (prompt_ids && prompt_text) usage("%s", "give --prompt-ids or --prompt, not both");
  const char* src = argv[optind];
  ModelConfig cfg;
  if (model_source_config(src, &cfg, err, sizeof err)) usage("%s", err);
  int t5 = cfg.kind == MODEL_T5, V = cfg.V;
  Tokenizer tok = {0};
  int decode = load_tokenizer(tok_path, src, V, &tok);

  // The prompt: every id checked against the model's vocabulary, naming where it came from.
  int cap = 1 << 16, n = 0;
  int32_t* prompt = xmalloc((size_t)cap * sizeof(int32_t), "prompt");
  if (prompt_ids) {
    for (const char* p = prompt_ids; *p;) {
      char* end;
      errno = 0;
      long long id = strtoll(p, &end, 10);
      if (end == p) usage("--prompt-ids: '%s' is not a list of token ids", prompt_ids);
      if (errno == ERANGE || id < 0 || id >= V) {
        snprintf(err, sizeof err, "--prompt-ids: id %.*s (the %d%s) is not in the model's vocabulary 0..%d", (int)(end - p),
                 p, n + 1, n == 0 ? "st" : n == 1 ? "nd" : n == 2 ? "rd" : "th", V - 1);
        usage("%s", err);
      }
      if (n == cap) usage("--prompt-ids: more than 65536 ids (%.20s...)", prompt_ids);
      prompt[n++] = (int32_t)id;
      p = end;
      while (*p == ' ' || *p == ',') p++;
    }
  } else if (prompt_text) {
    if (V > 256) usage("--prompt TEXT is for byte-level models; encode with scripts/generate.py for %s", cfg.name);
    for (const unsigned char* p = (const unsigned char*)prompt_text; *p; p++) {
      if (*p >= V) {
        snprintf(err, sizeof err, "--prompt: byte %d (at position %d) is not a token of the model's vocabulary of %d", *p,
                 n, V);
        usage("%s", err);
      }
      if (n == cap) usage("--prompt: more than 65536 bytes (%.20s...)", prompt_text);
      prompt[n++] = *p;
    }
  }
  if (n == 0) {
    if (t5) usage("%s", "T5 needs a prompt (the encoder input)");
    if (cfg.kind == MODEL_LLAMA) {
      // A Llama 3 text starts with <|begin_of_text|>; a Llama of another vocabulary names none.
      if (V != LLAMA3_VOCAB) {
        snprintf(err, sizeof err, "a Llama of vocabulary %d (Llama 3's is %d) has no known begin-of-text id: give the "
                 "prompt's ids with --prompt-ids", V, LLAMA3_VOCAB);
        usage("%s", err);
      }
      prompt[n++] = LLAMA3_BEGIN_OF_TEXT;
    } else {
      // A GPT text starts after an end-of-text: the tokenizer's (checked above), or GPT-2's.
      prompt[n++] = decode ? tok.eot : (V > 50256 ? 50256 : 0);
    }
  }
  if (!t5 && n >= cfg.T) usage("the prompt fills the model's %s positions", "T");
  if (t5 && ntokens > MAX_T5_TOKENS) usage("%s", "--tokens: T5 decodes at most 4096 tokens here (each one runs the decoder again)");
  int T = t5 ? ntokens : (n + ntokens < cfg.T ? n + ntokens : cfg.T), Te = t5 ? n : 0;

  KernelCtx* kctx = kernels_init(dist_local_rank());
  FSDPOptions opt = {.strategy = SHARD_FULL, .limit_all_gathers = 2, .sync_accum = 1,
                     .prefetch_forward = 1, .prefetch_backward = 1, .reduce_dtype = DT_F32};
  FSDP fs;
  fsdp_init(&fs, model_num_units(&cfg, opt.wrap), opt, comm_world(), kctx);
  Model m;
  model_plan(&m, &cfg, &fs, 1, T, Te);
  if (model_source_check(&fs, src, "SRC", err, sizeof err)) fatal("%s", err);
  model_allocate(&m, seed);
  model_source_load(&fs, &cfg, src, "SRC");

  int32_t* seq = xcalloc((size_t)T + 1, sizeof(int32_t), "sequence");
  act_t* row = xmalloc((size_t)V * sizeof(act_t), "logits row");
  float* probs = xmalloc((size_t)V * 2 * sizeof(float), "probabilities");
  uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 1;
  int first, produced = 0;
  if (t5) {
    device_copy_to_device(m.enc_inputs, prompt, (size_t)n * sizeof(int32_t));
    seq[0] = 0;  // decoder start
    first = 1;
  } else {
    memcpy(seq, prompt, (size_t)n * sizeof(int32_t));
    first = n;
  }
  int limit = t5 ? T + 1 : T;
  for (int t = first; t < limit; t++) {
    device_copy_to_device(m.inputs, seq, (size_t)T * sizeof(int32_t));
    fsdp_begin_forward(&fs, 0, 0);
    model_forward(&m, 0, NULL);
    device_copy_to_host(row, m.logits + (size_t)(t - 1) * cfg.Vp, (size_t)V * sizeof(act_t));
    int next = next_token(row, V, t5 ? 0.0f : temperature, top_k, probs, probs + V, &state);
    comm_broadcast(fs.world, &next, sizeof next, 0);  // rank 0's draw for everyone
    seq[t] = next;
    produced++;
    if (t5 && next == 1) break;  // T5's end of sequence
  }
  if (dist_rank() == 0) {
    const int32_t* out = t5 ? seq + 1 : seq + n;
    printf("prompt ids:");
    for (int i = 0; i < n; i++) printf(" %d", prompt[i]);
    printf("\nids:");
    for (int i = 0; i < produced; i++) printf(" %d", out[i]);
    printf("\n");
    if (decode || V <= 256) {
      printf("text: ");
      for (int i = 0; i < produced; i++) {
        if (decode) tokenizer_print(&tok, out[i], stdout);
        else if ((out[i] >= 32 && out[i] < 127) || out[i] == '\n') putchar(out[i]);
      }
      printf("\n");
    }
  }
  if (decode) tokenizer_free(&tok);
  free(seq);
  free(row);
  free(probs);
  free(prompt);
  comm_shutdown();
  kernels_shutdown(kctx);
  dist_finalize();
  return 0;
}
