// choices.c: llm.c's multiple-choice evaluation files (choices.h), read whole and validated
// before anything is evaluated: a file that is not one of them, or an example that cannot be
// run, is refused naming the example, never scored as a silent 0%.
#include "data/choices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/files.h"

static uint16_t u16(const unsigned char* p) { return (uint16_t)(p[0] | p[1] << 8); }
static int32_t i32(const unsigned char* p) { return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24); }

void choices_free(ChoiceSet* cs) {
  free(cs->label), free(cs->first), free(cs->context), free(cs->context_len);
  free(cs->completion), free(cs->completion_len), free(cs->tokens);
  memset(cs, 0, sizeof *cs);
}

int choices_load(const char* path, int vocab, int T, ChoiceSet* cs, char* err, size_t errlen) {
  memset(cs, 0, sizeof *cs);
  char* data;
  size_t size;
  if (file_read_all(path, CHOICES_MAX_BYTES, &data, &size, err, errlen)) return -1;
  const unsigned char* b = (const unsigned char*)data;
  const size_t header = 256 * 4;
  if (size < header || i32(b) != CHOICES_MAGIC || i32(b + 4) != CHOICES_VERSION) {
    free(data);
    return set_error(err, errlen, "%s is not a multiple-choice evaluation file (llm.c's format: magic %d, version %d%s)",
                     path, CHOICES_MAGIC, CHOICES_VERSION, size < header ? "; shorter than its header" : "");
  }
  int32_t n = i32(b + 8), longest = i32(b + 12);
  if (n < 1 || n > 65536 || longest < 18 || longest > 65535) {
    free(data);
    return set_error(err, errlen, "%s: its header says %d examples of at most %d bytes; the format holds 1 to 65536 "
                     "examples of 18 to 65535 bytes", path, n, longest);
  }
  // The tokens as uint16 in host order, for the evaluation to read in place.
  size_t words = (size - header) / 2;
  cs->tokens = malloc((words ? words : 1) * sizeof(uint16_t));
  cs->label = malloc((size_t)n * sizeof(int));
  cs->first = malloc(((size_t)n + 1) * sizeof(int));
  cs->context = malloc((size_t)n * sizeof(int));
  cs->context_len = malloc((size_t)n * sizeof(int));
  size_t cap = (size_t)n * 4;
  cs->completion = malloc(cap * sizeof(int));
  cs->completion_len = malloc(cap * sizeof(int));
  if (!cs->tokens || !cs->label || !cs->first || !cs->context || !cs->context_len || !cs->completion ||
      !cs->completion_len) {
    free(data);
    choices_free(cs);
    return set_error(err, errlen, "out of memory reading %s", path);
  }
  for (size_t w = 0; w < words; w++) cs->tokens[w] = u16(b + header + 2 * w);
  int odd = (size - header) % 2;
  free(data);
  const uint16_t* t = cs->tokens;
  size_t at = 0;  // in words
  int rc = -1;
  for (int i = 0; i < n; i++) {
    char where[128];
    snprintf(where, sizeof where, "%s: example %d (at byte %zu)", path, i, header + 2 * at);
    if (at + 6 > words) {
      set_error(err, errlen, "%s: the file ends inside it (the header says %d examples)", where, n);
      goto done;
    }
    size_t bytes = t[at + 1];
    if (t[at] != CHOICES_START || t[at + 2] != i) {
      set_error(err, errlen, "%s does not start with %d and its index %d (found %d and %d)", where, CHOICES_START, i, t[at],
                t[at + 2]);
      goto done;
    }
    if (bytes % 2 || bytes < 18 || (int)bytes > longest || at + bytes / 2 > words) {
      set_error(err, errlen, "%s is %zu bytes: not an even count from 18 to the header's longest %d within the file", where,
                bytes, longest);
      goto done;
    }
    size_t end = at + bytes / 2, k = at + 3;
    int label = t[k++], count = t[k++], ctx = t[k++];
    if (count < 1 || label >= count) {
      set_error(err, errlen, "%s: label %d of %d completions", where, label, count);
      goto done;
    }
    if (ctx < 1 || k + ctx > end) {
      set_error(err, errlen, "%s: a context of %d tokens (it needs at least one, within the example)", where, ctx);
      goto done;
    }
    cs->label[i] = label;
    cs->context[i] = (int)k, cs->context_len[i] = ctx;
    cs->first[i] = cs->ncompletions;
    k += ctx;
    for (int c = 0; c < count; c++) {
      if (k >= end || t[k] < 1 || k + 1 + t[k] > end) {
        set_error(err, errlen, "%s: completion %d's length %d does not fit the example's %zu bytes", where, c,
                  k < end ? t[k] : -1, bytes);
        goto done;
      }
      int len = t[k];
      if (ctx + len > T) {
        set_error(err, errlen, "%s: its context and completion %d are %d tokens, more than a sequence of %d (--seq)", where,
                  c, ctx + len, T);
        goto done;
      }
      if ((size_t)cs->ncompletions == cap) {
        cap *= 2;
        int* a = realloc(cs->completion, cap * sizeof(int));
        if (a) cs->completion = a;
        int* l = realloc(cs->completion_len, cap * sizeof(int));
        if (l) cs->completion_len = l;
        if (!a || !l) {
          set_error(err, errlen, "out of memory reading %s", path);
          goto done;
        }
      }
      cs->completion[cs->ncompletions] = (int)k + 1, cs->completion_len[cs->ncompletions] = len;
      cs->ncompletions++;
      k += 1 + len;
    }
    if (k != end) {
      set_error(err, errlen, "%s: its fields end at byte %zu but it says it is %zu bytes", where, 2 * (k - at), bytes);
      goto done;
    }
    for (int c = cs->first[i] - 1; c < cs->ncompletions; c++) {  // the context (c = first - 1), then each completion
      int from = c < cs->first[i] ? cs->context[i] : cs->completion[c];
      int len = c < cs->first[i] ? ctx : cs->completion_len[c];
      for (int j = from; j < from + len; j++)
        if (t[j] >= vocab) {
          set_error(err, errlen, "%s: token id %d is not in the model's vocabulary of %d (is the file tokenized for "
                    "another model?)", where, t[j], vocab);
          goto done;
        }
    }
    if (count > cs->max_completions) cs->max_completions = count;
    at = end;
  }
  if (at != words || odd) {
    set_error(err, errlen, "%s: %zu bytes follow its %d examples (the header's count is not the file's)", path,
              2 * (words - at) + odd, n);
    goto done;
  }
  cs->first[n] = cs->ncompletions;
  cs->n = n;
  rc = 0;
done:
  if (rc) choices_free(cs);
  return rc;
}
