// tokenizer.h: turning token ids back into text, for samples and generation.
//
// A decode table in llm.c's tokenizer file format (256 x uint32 header: magic 20240328,
// version 2, vocabulary size, end-of-text id; then per token a uint8 length and its bytes).
// scripts/prepare_text.py writes one (tokenizer.bin) beside the shards it makes: GPT-2's BPE
// bytes from tiktoken, or a SentencePiece model's pieces. Encoding stays in Python
// (scripts/generate.py); C only decodes.
#ifndef FSDP_TOKENIZER_H
#define FSDP_TOKENIZER_H
#include <stddef.h>
#include <stdio.h>

typedef struct {
  int vocab, eot;
  char** piece;  // piece[i]: the bytes of token i, NUL-terminated
} Tokenizer;

// Returns 0, or -1 with the reason in err: not a regular file, not a tokenizer, an end-of-text
// id that is not one of its tokens, or a table shorter or longer than its header says.
int tokenizer_load(const char* path, Tokenizer* t, char* err, size_t errlen);
// The directory a shard glob's files are in ("data/x/train_*.bin" -> "data/x", "train_*.bin" ->
// "."): where scripts/prepare_text.py writes the shards' tokenizer files.
void tokenizer_dir_of(const char* shard_glob, char* dir, size_t len);
// The tokenizer.bin in that directory; returns 0 when there is one, -1 when not (no error: ids
// are printed instead).
int tokenizer_beside(const char* shard_glob, Tokenizer* t);
// Writes token id's text (control bytes left out), or "<id>" for an id outside the table.
void tokenizer_print(const Tokenizer* t, int id, FILE* f);
void tokenizer_free(Tokenizer* t);
#endif
