// resume.c: a run's settings in its checkpoints. Every checkpoint's meta.json records the options
// that say what the run trains and how it is evaluated ("options": {"lr": "0.003", ...}, each
// value a command-line word); --resume DIR takes them back for every option not given again, so
// `--resume DIR` alone continues the run. An option given again must agree with the checkpoint,
// except the few that may change, which are named with both values. The options that say how
// to run it (--shard, --recompute, --offload, ...) and where to write (--save, --log, ...) are
// the resumed run's own: any of them resumes any checkpoint.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp/checkpoint.h"
#include "fsdp/checkpoint_format.h"
#include "infra/dist.h"
#include "train/train.h"

typedef enum {
  AGREE,       // what is trained: the model, its data windows, the optimizer and its schedule's shape
  MAY_CHANGE,  // more steps, another batch split over other ranks, other data, evaluation
} Rule;

// A recorded option: its value in an Options as the word that --NAME takes ("" when unset; a
// flag's word is "on").
typedef struct {
  const char* name;
  Rule rule;
  void (*word)(const Options* o, const ModelConfig* cfg, int world, char* out, size_t len);
} Setting;

#define WORD(fn, fmt, expr)                                                                  \
  static void fn(const Options* o, const ModelConfig* cfg, int world, char* out, size_t len) { \
    (void)cfg, (void)world;                                                                  \
    snprintf(out, len, fmt, expr);                                                           \
  }
// Floats as the shortest word that reads back as the same float.
#define FLOAT_WORD(fn, expr)                                                                 \
  static void fn(const Options* o, const ModelConfig* cfg, int world, char* out, size_t len) { \
    (void)cfg, (void)world;                                                                  \
    float_word(expr, out, len);                                                              \
  }
static void float_word(float v, char* out, size_t len) {
  for (int digits = 1; digits <= 9; digits++) {
    snprintf(out, len, "%.*g", digits, v);
    if (strtof(out, NULL) == v) return;
  }
}
WORD(w_data, "%s", o->data ? o->data : "")
WORD(w_val_data, "%s", o->val_data ? o->val_data : "")
WORD(w_batch, "%d", o->batch)
WORD(w_steps, "%d", o->steps)
FLOAT_WORD(w_lr, o->lr)
WORD(w_warmup, "%d", o->warmup)
FLOAT_WORD(w_lr_final_frac, o->lr_final_frac)
FLOAT_WORD(w_weight_decay, o->weight_decay)
WORD(w_decay_embeddings, "%s", o->fsdp.decay_embeddings ? "on" : "")
FLOAT_WORD(w_beta1, o->beta1)
FLOAT_WORD(w_beta2, o->beta2)
FLOAT_WORD(w_adam_eps, o->adam_eps)
FLOAT_WORD(w_grad_clip, o->grad_clip)
WORD(w_seed, "%llu", (unsigned long long)o->seed)
WORD(w_loss_scale_window, "%d", o->loss_scale_window)
WORD(w_max_bad_steps, "%d", o->max_bad_steps)
WORD(w_eval_every, "%d", o->eval_every)
WORD(w_eval_batches, "%d", o->eval_batches)
WORD(w_eval_prompts, "%s", o->eval_prompts ? o->eval_prompts : "")
WORD(w_eval_choices, "%s", o->eval_choices ? o->eval_choices : "")
WORD(w_sample_every, "%d", o->sample_every)
WORD(w_sample_tokens, "%d", o->sample_tokens)
#undef WORD
#undef FLOAT_WORD
// The sequence lengths the model runs at: GPT's --seq (the model's T when not given), T5's
// encoder and decoder lengths; "" for the other family's.
static void w_seq(const Options* o, const ModelConfig* cfg, int world, char* out, size_t len) {
  (void)world;
  if (cfg->kind == MODEL_T5) snprintf(out, len, "%s", "");
  else snprintf(out, len, "%d", o->seq ? o->seq : cfg->T);
}
static void w_enc_len(const Options* o, const ModelConfig* cfg, int world, char* out, size_t len) {
  (void)world;
  if (cfg->kind == MODEL_T5) snprintf(out, len, "%d", o->enc_len);
  else snprintf(out, len, "%s", "");
}
static void w_dec_len(const Options* o, const ModelConfig* cfg, int world, char* out, size_t len) {
  (void)world;
  if (cfg->kind == MODEL_T5) snprintf(out, len, "%d", o->dec_len);
  else snprintf(out, len, "%s", "");
}
// Sequences per optimizer step: what --accum or --global-batch and the world size make of it,
// recorded as --global-batch so that another world size keeps it (with --accum given instead,
// the resumed run splits its own).
static void w_global_batch(const Options* o, const ModelConfig* cfg, int world, char* out, size_t len) {
  (void)cfg;
  snprintf(out, len, "%lld", (long long)o->batch * o->accum * world);
}
// A dynamic scale's state is the checkpoint's (loss_scale, loss_scale_good): "dynamic" resumes
// it; a static scale is its number.
static void w_loss_scale(const Options* o, const ModelConfig* cfg, int world, char* out, size_t len) {
  (void)cfg, (void)world;
  if (o->loss_scale_dynamic) snprintf(out, len, "dynamic");
  else snprintf(out, len, "%.17g", o->loss_scale);
}

static const Setting SETTINGS[] = {
    {"data", MAY_CHANGE, w_data},
    {"val-data", MAY_CHANGE, w_val_data},
    {"batch", MAY_CHANGE, w_batch},
    {"global-batch", MAY_CHANGE, w_global_batch},
    {"seq", AGREE, w_seq},
    {"enc-len", AGREE, w_enc_len},
    {"dec-len", AGREE, w_dec_len},
    {"steps", MAY_CHANGE, w_steps},
    {"lr", AGREE, w_lr},
    {"warmup", AGREE, w_warmup},
    {"lr-final-frac", AGREE, w_lr_final_frac},
    {"weight-decay", AGREE, w_weight_decay},
    {"decay-embeddings", AGREE, w_decay_embeddings},
    {"beta1", AGREE, w_beta1},
    {"beta2", AGREE, w_beta2},
    {"adam-eps", AGREE, w_adam_eps},
    {"grad-clip", AGREE, w_grad_clip},
    {"seed", AGREE, w_seed},
    {"loss-scale", MAY_CHANGE, w_loss_scale},
    {"loss-scale-window", MAY_CHANGE, w_loss_scale_window},
    {"max-bad-steps", MAY_CHANGE, w_max_bad_steps},
    {"eval-every", MAY_CHANGE, w_eval_every},
    {"eval-batches", MAY_CHANGE, w_eval_batches},
    {"eval-prompts", MAY_CHANGE, w_eval_prompts},
    {"eval-choices", MAY_CHANGE, w_eval_choices},
    {"sample-every", MAY_CHANGE, w_sample_every},
    {"sample-tokens", MAY_CHANGE, w_sample_tokens},
};
#define NUM_SETTINGS ((int)(sizeof SETTINGS / sizeof *SETTINGS))

// Appends s to out as a JSON string.
static size_t json_quote(char* out, size_t at, size_t cap, const char* s) {
  if (at < cap) out[at] = '"';
  at++;
  for (const unsigned char* c = (const unsigned char*)s; *c; c++) {
    if (*c == '"' || *c == '\\') at += (size_t)snprintf(out + (at < cap ? at : cap), at < cap ? cap - at : 0, "\\%c", *c);
    else if (*c < 0x20) at += (size_t)snprintf(out + (at < cap ? at : cap), at < cap ? cap - at : 0, "\\u%04x", *c);
    else if (at < cap) out[at++] = (char)*c;
    else at++;
  }
  if (at < cap) out[at] = '"';
  return at + 1;
}

char* run_settings_json(const Options* o, const ModelConfig* cfg, int world) {
  size_t cap = 1024;
  for (int i = 0; i < NUM_SETTINGS; i++) cap += 64;
  if (o->data) cap += 2 * 6 * strlen(o->data);
  if (o->val_data) cap += 2 * 6 * strlen(o->val_data);
  if (o->eval_prompts) cap += 2 * 6 * strlen(o->eval_prompts);
  if (o->eval_choices) cap += 2 * 6 * strlen(o->eval_choices);
  char* out = xmalloc(cap, "the run's settings");
  size_t at = (size_t)snprintf(out, cap, "{");
  char word[64];
  for (int i = 0; i < NUM_SETTINGS; i++) {
    const Setting* s = &SETTINGS[i];
    char* w = word;
    size_t wcap = sizeof word;
    char* big = NULL;
    if (s->word == w_data || s->word == w_val_data || s->word == w_eval_prompts || s->word == w_eval_choices) {  // paths
      wcap = 4 + (o->data ? strlen(o->data) : 0) + (o->val_data ? strlen(o->val_data) : 0) +
             (o->eval_prompts ? strlen(o->eval_prompts) : 0) + (o->eval_choices ? strlen(o->eval_choices) : 0);
      w = big = xmalloc(wcap, "the run's settings");
    }
    s->word(o, cfg, world, w, wcap);
    if (w[0]) {
      at += (size_t)snprintf(out + at, cap - at, "%s\"%s\": ", at > 1 ? ", " : "", s->name);
      at = json_quote(out, at, cap, w);
    }
    free(big);
  }
  if (at + 2 > cap) fatal("the run's settings do not fit %zu bytes", cap);
  snprintf(out + at, cap - at, "}");
  return out;
}

static const Setting* find_setting(const char* name) {
  for (int i = 0; i < NUM_SETTINGS; i++)
    if (!strcmp(SETTINGS[i].name, name)) return &SETTINGS[i];
  return NULL;
}

// The settings of the checkpoint --resume DIR tries first, or of the next newest whose meta.json
// reads (the loader then skips the one that does not, and says why): 1 with *s and the
// checkpoint in from; 0 when DIR holds no checkpoint; -1 when it holds only interrupted saves,
// -2 when no complete one's meta.json reads, with the reason in err.
static int read_settings(const char* dir, CkptSettings* s, char* from, size_t fromlen, char* err, size_t errlen) {
  for (int nth = 0;; nth++) {
    int rc = checkpoint_newest(dir, nth, from, fromlen, nth ? NULL : err, errlen);
    if (rc <= 0) return nth ? -2 : rc;
    if (ckpt_read_settings(from, s, err, errlen) == 0) return 1;
  }
}

Options resume_settings(const Options* given, int argc, char** argv) {
  const char* dir = given->resume_dir;
  const char* opt = given->resume_optional ? "--resume-if-present" : "--resume";
  CkptSettings s;
  char from[4400], err[20000];
  int rc = read_settings(dir, &s, from, sizeof from, err, sizeof err);
  if ((rc == 0 || rc == -1) && given->resume_optional) {  // nothing to continue: a new run
    Options o = *given;
    log0("%s %s: %s: a new run\n", opt, dir, rc ? err : "no checkpoint there yet");
    o.resume_dir = NULL;
    return o;
  }
  if (rc == 0)
    fatal("--resume %s: no checkpoint there (none of %s, %s.tmp, %s.old exists, and it holds no step_NNNNNNNN "
          "checkpoints); is it the --save directory of an earlier run?", dir, dir, dir, dir);
  if (rc < 0) fatal("%s %s: %s", opt, dir, err);

  // The command line again, with the checkpoint's words for what it does not give in front.
  char** args = xcalloc((size_t)argc + 2 * CKPT_MAX_SETTINGS + 4, sizeof(char*), "the resumed command line");
  int n = 0;
  args[n++] = argv[0];
  char restored[4096] = "", word[4096];
  size_t used = 0;
#define ADD(...) used += (size_t)snprintf(restored + used, used < sizeof restored ? sizeof restored - used : 0, __VA_ARGS__)
  ModelConfig cfg;  // the checkpoint's (the model's T and family decide the sequence lengths' words)
  if (model_config_parse(s.model, &cfg, err, sizeof err)) fatal("%s %s: %s/meta.json: %s", opt, dir, from, err);
  if (given->model && strcmp(given->model, s.model)) {
    snprintf(err, sizeof err, "%s %s: %s holds model '%s' but --model is %s; leave --model out (the checkpoint names "
             "its model) or give the same one", opt, dir, from, s.model, given->model);
    usage_error("%s", err);
  }
  if (!given->model) {
    args[n++] = "--model", args[n++] = s.model;
    ADD(" --model %s", s.model);
  }
  for (int i = 0; i < s.n; i++) {
    const Setting* set = find_setting(s.name[i]);
    if (!set) continue;  // an option this version does not record: the run goes on without it
    if (option_given(given, set->name)) {
      if (set->word == w_global_batch) snprintf(word, sizeof word, "%d", given->global_batch);  // as given
      else set->word(given, &cfg, dist_world(), word, sizeof word);
      if (!strcmp(word, s.value[i])) continue;
      if (set->rule == AGREE) {
        snprintf(err, sizeof err, "%s %s: --%s %s disagrees with the checkpoint's --%s %s (%s/meta.json): a resumed run "
                 "trains the model, data and optimizer of the run it continues; leave --%s out, or start a new run "
                 "from these weights with --init-from %s", opt, dir, set->name, word[0] ? word : "(not given)",
                 set->name, s.value[i], from, set->name, from);
        usage_error("%s", err);
      }
      log0("%s %s: --%s %s (the checkpoint's run: %s)%s\n", opt, dir, set->name, word[0] ? word : "off", s.value[i],
           !strcmp(set->name, "steps") ? "; the learning-rate schedule spans the new --steps" : "");
      continue;
    }
    if (set->word == w_global_batch && (option_given(given, "accum") || option_given(given, "global-batch"))) {
      log0("%s %s: --accum given: the checkpoint's %d sequences per step (--global-batch %s) are not kept\n", opt, dir,
           atoi(s.value[i]), s.value[i]);
      continue;
    }
    if (set->word == w_decay_embeddings) {  // a flag: "on", or not recorded
      if (!strcmp(s.value[i], "on")) args[n++] = "--decay-embeddings", ADD(" --decay-embeddings");
      continue;
    }
    char* name = xmalloc(strlen(set->name) + 3, "the resumed command line");
    snprintf(name, strlen(set->name) + 3, "--%s", set->name);
    args[n++] = name, args[n++] = s.value[i];
    ADD(" %s %s", name, s.value[i]);
  }
#undef ADD
  for (int i = 1; i < argc; i++) args[n++] = argv[i];
  if (restored[0]) log0("%s %s: the run's settings from %s/meta.json:%s\n", opt, dir, from, restored);
  Options o = parse_command_line(n, args);
  // The words stay referenced by o (as optarg pointers): s and args live as long as the run.
  int W = dist_world();
  if (!option_given(given, "global-batch") && !option_given(given, "accum") && o.global_batch &&
      o.global_batch % (o.batch * W)) {
    snprintf(err, sizeof err, "%s %s: the checkpoint's run took %d sequences per optimizer step (--global-batch %d), "
             "which %d rank%s with --batch %d cannot split into whole micro-batches; choose how this run splits it: "
             "--batch B with %d a multiple of B x %d, or --accum A (%d x %d x A sequences per step)", opt, dir,
             o.global_batch, o.global_batch, W, W == 1 ? "" : "s", o.batch, o.global_batch, W, W, o.batch);
    usage_error("%s", err);
  }
  return o;
}
