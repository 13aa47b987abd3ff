// shard.h: llm.c token shards and the distributed batch sampler.
//
// A shard file is a header of 256 int32 (magic, version, token count, rest 0) followed by
// `token count` tokens, in one of llm.c's two formats: GPT-2's (magic 20240520, version 1,
// uint16 tokens) or Llama 3's (magic 20240801, version 7, uint32 tokens: vocabularies past
// 65536). A dataset is a glob of shards of one format, read as one stream in sorted file-name
// order.
//
// Sampling (what makes W ranks equal one rank with W times the accumulation):
// the global batch of optimizer step s is M = W * A micro-batches, micro-batch j of it is
// the window of B*T+1 tokens that starts at token ((s*M + j) mod n_windows) * B*T of the
// stream. Micro-batch j is read by rank j mod W at micro-step j div W. The sampler takes
// the global micro-batch number g = s*M + j, so it knows nothing of ranks.
#ifndef FSDP_DATA_SHARD_H
#define FSDP_DATA_SHARD_H
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD32_MAGIC 20240801
#define SHARD32_VERSION 7
#define SHARD_HEADER_INTS 256

// Writes a shard atomically (temporary name, then rename): GPT-2's uint16 format, or Llama 3's
// uint32 one. Returns 0, or -1 with a message in err.
int shard_write(const char* path, const uint16_t* tokens, size_t ntokens, char* err, size_t errlen);
int shard_write32(const char* path, const uint32_t* tokens, size_t ntokens, char* err, size_t errlen);

#include "infra/files.h"

typedef struct {
  int nfiles;
  char** paths;
  FileId* ids;        // each file as it was opened and checked: every later open must find it so
  int64_t* ntokens;   // tokens per file
  int64_t* start;     // offset of each file in the stream
  int64_t total;      // tokens in the stream
  int vocab;          // ids must stay below it (checked on open and on every read); <= 0: unchecked
  int token_bytes;    // 2 (GPT-2's shards) or 4 (Llama 3's), the same for every file
} TokenStream;

// Opens every shard matching the glob and validates it: magic and version (either format, one
// for all files), token count against the file size (truncated or oversized), and every token
// id < vocab (vocab <= 0 skips that check; an id past INT32_MAX is refused whatever the vocab);
// records each file's identity. On failure returns -1 and err names the file and the problem.
int token_stream_open(TokenStream* ts, const char* glob_pattern, int vocab, char* err, size_t errlen);
void token_stream_close(TokenStream* ts);
// Reads tokens [pos, pos+n) of the stream into out (crossing file boundaries as needed); a file
// that changed since it was opened (rewritten in place, or replaced) is refused, naming it.
int token_stream_read(const TokenStream* ts, int64_t pos, int64_t n, int32_t* out, char* err, size_t errlen);
// What identifies the stream's data for a checkpoint (its files' sizes and first bytes, in order,
// not their names or times: a copy elsewhere is the same data), as text of at most 80 bytes.
void token_stream_identity(const TokenStream* ts, char* out, size_t cap);

// Number of whole micro-batch windows of B*T+1 tokens (0 if the stream is too short).
int64_t sampler_windows(const TokenStream* ts, int B, int T);
// Fills inputs[B*T] and targets[B*T] (targets are inputs shifted by one) for global
// micro-batch number g. Returns 0 or -1 with err.
int sampler_micro_batch(const TokenStream* ts, int64_t g, int B, int T, int32_t* inputs,
                        int32_t* targets, char* err, size_t errlen);
#endif
