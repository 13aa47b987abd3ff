// choices.h: llm.c's multiple-choice evaluation files (its HellaSwag and MMLU files).
//
// A header of 256 little-endian int32 (magic 20240522, version 1, the number of examples, the
// bytes of the longest example), then the examples, each a stream of uint16:
//   65535 (the start of an example), the example's bytes (these fields included), its index
//   (0, 1, ... in file order), the label (the correct completion), the number of completions,
//   the context's length and tokens, then each completion's length and tokens.
// A model scores each completion by its mean loss per token after the context; the example is
// right when the lowest is the label's (train/evaluate.c, choice_accuracy).
#ifndef FSDP_DATA_CHOICES_H
#define FSDP_DATA_CHOICES_H
#include <stddef.h>
#include <stdint.h>

#define CHOICES_MAGIC 20240522
#define CHOICES_VERSION 1
#define CHOICES_START 65535   // <START_EXAMPLE>: never a token
#define CHOICES_MAX_BYTES ((size_t)1 << 30)

typedef struct {
  int n;                 // examples
  int ncompletions;      // completions of all examples
  int max_completions;   // of one example
  int* label;            // [n] the correct completion of each example
  int* first;            // [n + 1] example i's completions are first[i] .. first[i + 1] - 1
  int* context;          // [n] where example i's context starts in tokens, ...
  int* context_len;      // ... and its length (> 0)
  int* completion;       // [ncompletions] where each completion starts in tokens, ...
  int* completion_len;   // ... and its length (> 0)
  uint16_t* tokens;      // the file's uint16 fields after the header (the positions above index it)
} ChoiceSet;

// Reads and validates path for a model of vocab tokens and sequences of T tokens: the header,
// every example's delimiter, size, index, label and lengths against the file's size, every
// token < vocab, and every context + completion within T tokens. Returns 0, or -1 with the file,
// the example and the problem in err.
int choices_load(const char* path, int vocab, int T, ChoiceSet* cs, char* err, size_t errlen);
void choices_free(ChoiceSet* cs);
#endif
