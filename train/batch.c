// batch.c: the data of a step: token streams and host micro-batches (GPT windows or T5
// span-corrupted examples), copied into the model's own buffers.
#include <stdio.h>

#include "infra/dist.h"
#include "train/train.h"

void open_stream(TokenStream* ts, const char* glob, const char* what, int vocab, int B, int T) {
  char err[1024];
  if (token_stream_open(ts, glob, vocab, err, sizeof err)) fatal("%s: %s", what, err);
  if (sampler_windows(ts, B, T) < 1)
    fatal("%s '%s' has %lld tokens, fewer than one micro-batch of B*T+1 = %lld; lower --batch or --seq",
          what, glob, (long long)ts->total, (long long)B * T + 1);
}

void batch_load(Batch* b, const TokenStream* ts, int64_t g) {
  char err[1024];
  int rc = b->t5 ? span_micro_batch(ts, &b->span, b->seed, g, b->B, b->enc, b->inputs, b->targets, err, sizeof err)
                 : sampler_micro_batch(ts, g, b->B, b->T, b->inputs, b->targets, err, sizeof err);
  if (rc) fatal("%s", err);
}

int64_t batch_valid_targets(const Batch* b) {
  int64_t n = 0;
  for (int i = 0; i < b->B * b->T; i++) n += b->targets[i] >= 0;
  return n;
}

// Asynchronous copies on the compute stream, before the forward that reads them, from the step's
// pinned micro-batch buffers (train/step.c), the batch's only memory: they run without the host
// waiting. Evaluation and samples write the same buffers between steps, when no copy of a step
// is in flight (the trainer has read the last step's outcome), and each of their forwards ends
// in a read of its result, after which the buffer may be written again.
void batch_to_model(const Batch* b, Model* m) {
  size_t n = (size_t)b->B * b->T * sizeof(int32_t);
  device_copy_async(m->inputs, b->inputs, n, STREAM_COMPUTE);
  device_copy_async(m->targets, b->targets, n, STREAM_COMPUTE);
  if (b->t5) device_copy_async(m->enc_inputs, b->enc, (size_t)b->B * b->Te * sizeof(int32_t), STREAM_COMPUTE);
}

