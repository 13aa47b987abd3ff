// evaluate.c: validation loss, greedy exact-match accuracy on prompts, text samples.
// Every forward here is collective (it all-gathers units), so all ranks run the same number
// of forwards, each on its own share of the work.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "infra/dist.h"
#include "infra/files.h"
#include "train/train.h"

// Validation loss over eval_batches micro-batches, spread over ranks like training batches
// (every rank runs the same number of forwards: the collectives must match).
double evaluate(Model* m, Batch* b, const TokenStream* val, int eval_batches) {
  FSDP* fs = m->fs;
  int W = fs->world_size, rounds = (eval_batches + W - 1) / W;
  double sums[2] = {0, 0};  // loss sum, token count
  for (int i = 0; i < rounds; i++) {
    int64_t g = (int64_t)i * W + fs->world_rank;
    batch_load(b, val, g % eval_batches);
    batch_to_model(b, m);
    fsdp_begin_forward(fs, 0, 0);
    double s = model_forward(m, 1, NULL);
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
    model_forward(m, 0, NULL);
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

PromptSet load_prompts(const char* path, int T, int V) {
  PromptSet ps = {0};
  char err[4400];
  int fd = file_open_regular(path, err, sizeof err);
  FILE* f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) fatal("--eval-prompts: %s", fd >= 0 ? strerror(errno) : err);
  char* line = NULL;
  size_t cap_line = 0;
  ssize_t got;
  int cap = 0;
  // Every line is checked as it is read, naming the file and the line: a prompt that cannot be
  // run must not become a silent 0% (an empty prompt would read the logits before position 0).
  for (int lineno = 1; (got = getline(&line, &cap_line, f)) >= 0; lineno++) {
    if ((size_t)got != strlen(line))
      fatal("--eval-prompts %s: line %d holds a NUL byte; prompts are text", path, lineno);
    line[strcspn(line, "\r\n")] = 0;
    if (!*line) continue;
    char* tab = strchr(line, '\t');
    if (!tab) fatal("--eval-prompts %s: line %d has no TAB between prompt and answer", path, lineno);
    *tab = 0;
    const char* answer = tab + 1;
    if (!line[0]) fatal("--eval-prompts %s: line %d has an empty prompt (a prompt needs at least one token)", path, lineno);
    if (!answer[0]) fatal("--eval-prompts %s: line %d has an empty answer", path, lineno);
    if (strlen(line) + strlen(answer) + 1 > (size_t)T)
      fatal("--eval-prompts %s: line %d does not fit in a sequence of %d tokens (prompt %zu + answer %zu bytes + 1)", path,
            lineno, T, strlen(line), strlen(answer));
    for (const char* part = line; part; part = part == line ? answer : NULL)
      for (const unsigned char* c = (const unsigned char*)part; *c; c++)
        if (*c >= V)
          fatal("--eval-prompts %s: line %d: byte %d of the %s is not a token of the model's vocabulary of %d", path,
                lineno, *c, part == line ? "prompt" : "answer", V);
    if (ps.n == cap) {
      cap = cap ? 2 * cap : 256;
      ps.prompt = realloc(ps.prompt, cap * sizeof(char*));
      ps.answer = realloc(ps.answer, cap * sizeof(char*));
      if (!ps.prompt || !ps.answer) fatal("out of memory reading %s", path);
    }
    ps.prompt[ps.n] = strdup(line);
    ps.answer[ps.n] = strdup(answer);
    if (!ps.prompt[ps.n] || !ps.answer[ps.n]) fatal("out of memory reading %s", path);
    if ((int)strlen(answer) > ps.max_answer) ps.max_answer = (int)strlen(answer);
    ps.n++;
  }
  int failed = ferror(f);
  free(line);
  fclose(f);
  if (failed) fatal("--eval-prompts %s: reading failed", path);
  if (!ps.n) fatal("--eval-prompts %s: no prompts", path);
  return ps;
}

// Exact-match accuracy: each prompt starts a sequence (position 0) and is extended greedily by
// as many tokens as the longest answer; its answer must match byte for byte. Chunks of B prompts are spread over ranks; every rank decodes the same number of
// rounds and steps, since the forwards are collective.
double exact_match(Model* m, Batch* bt, const PromptSet* ps) {
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

// Multiple-choice accuracy, as llm.c evaluates its HellaSwag and MMLU files: each completion is a
// row, the example's context then the completion, scored by its mean loss per token over the
// completion (the loss at each position whose next token is the completion's); an example is
// right when its label's score is the lowest (the first of equal scores wins, as in llm.c). Each
// rank takes llm.c's share of the examples (ceil(n / W) consecutive ones) and packs their
// completions B rows to a forward; since forwards are collective, every rank runs as many as the
// rank with the most rows. The counts are summed over the ranks.
double choice_accuracy(Model* m, Batch* bt, const ChoiceSet* cs) {
  FSDP* fs = m->fs;
  int B = m->B, T = m->T, W = fs->world_size;
  int per = (cs->n + W - 1) / W, most = 0;
  for (int q = 0; q < W; q++) {
    int lo = q * per < cs->n ? q * per : cs->n, hi = (q + 1) * per < cs->n ? (q + 1) * per : cs->n;
    if (cs->first[hi] - cs->first[lo] > most) most = cs->first[hi] - cs->first[lo];
  }
  int lo = fs->world_rank * per < cs->n ? fs->world_rank * per : cs->n;
  int hi = (fs->world_rank + 1) * per < cs->n ? (fs->world_rank + 1) * per : cs->n;
  int row0 = cs->first[lo], rows = cs->first[hi] - row0;
  double* score = xcalloc(rows > 0 ? rows : 1, sizeof(double), "completion scores");
  float* losses = xmalloc((size_t)B * T * sizeof(float), "per-token losses");
  int e = lo;  // the example of the next row
  for (int f = 0; f < (most + B - 1) / B; f++) {
    for (int b = 0; b < B; b++) {
      int32_t *in = bt->inputs + (size_t)b * T, *tg = bt->targets + (size_t)b * T;
      for (int t = 0; t < T; t++) in[t] = 0, tg[t] = -1;
      int k = f * B + b, c = row0 + k;
      if (k >= rows) continue;
      while (c >= cs->first[e + 1]) e++;
      const uint16_t* ctx = cs->tokens + cs->context[e];
      const uint16_t* comp = cs->tokens + cs->completion[c];
      int n = cs->context_len[e], len = cs->completion_len[c];
      for (int t = 0; t < n; t++) in[t] = ctx[t];
      for (int t = 0; t < len; t++) in[n + t] = comp[t], tg[n + t - 1] = comp[t];  // the last context token predicts the first
    }
    batch_to_model(bt, m);
    fsdp_begin_forward(fs, 0, 0);
    model_forward(m, 1, NULL);
    device_copy_to_host(losses, m->losses, (size_t)B * T * sizeof(float));
    for (int b = 0; b < B && f * B + b < rows; b++) {
      double sum = 0;
      int count = 0;
      for (int t = 0; t < T; t++)
        if (bt->targets[(size_t)b * T + t] >= 0) sum += losses[(size_t)b * T + t], count++;
      score[f * B + b] = sum / count;
    }
  }
  double counts[2] = {0, 0};  // right, examples
  for (int i = lo; i < hi; i++) {
    int best = cs->first[i];
    for (int c = cs->first[i] + 1; c < cs->first[i + 1]; c++)
      if (score[c - row0] < score[best - row0]) best = c;
    counts[0] += best - cs->first[i] == cs->label[i];
    counts[1] += 1;
  }
  free(score);
  free(losses);
  comm_all_reduce(fs->world, counts, 2, DT_F64);
  return counts[0] / counts[1];
}

// Samples a continuation of the first token of `ts` with a fixed-seed generator (the same on
// all ranks, so the collective forwards stay in step) and prints it on rank 0.
void sample_text(Model* m, Batch* bt, const TokenStream* ts, int ntokens, uint64_t seed) {
  int T = m->T, V = m->cfg.V, Vp = m->cfg.Vp;
  int32_t first;
  char err[256];
  if (token_stream_read(ts, 0, 1, &first, err, sizeof err)) fatal("%s", err);
  for (int i = 0; i < m->B * T; i++) bt->inputs[i] = first;
  int n = ntokens < T - 1 ? ntokens : T - 1;  // (resolve_options refused more)
  act_t* row = xmalloc((size_t)V * sizeof(act_t), "logits row");
  float* probs = xmalloc((size_t)V * sizeof(float), "probabilities");
  uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (int t = 1; t <= n; t++) {
    batch_to_model(bt, m);
    fsdp_begin_forward(m->fs, 0, 0);
    model_forward(m, 0, NULL);
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
  // Decoded with the tokenizer.bin beside the shards (scripts/prepare_text.py) when there is
  // one; else bytes for a byte-level vocabulary, ids otherwise.
  Tokenizer tok;
  int decode = ts->nfiles > 0 && tokenizer_beside(ts->paths[0], &tok) == 0;
  log0("sample: ");
  for (int t = 0; t <= n; t++) {
    int id = bt->inputs[t];
    if (decode) {
      if (dist_rank() == 0) tokenizer_print(&tok, id, stdout);
    } else if (V <= 256) log0("%c", (id >= 32 && id < 127) || id == '\n' ? id : '?');
    else log0("%d ", id);
  }
  log0("\n");
  if (decode) tokenizer_free(&tok);
  free(row);
  free(probs);
}

