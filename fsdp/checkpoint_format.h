// checkpoint_format.h: what is inside a checkpoint directory, and how it is verified.
//
//   meta.json      written first: format, model, step, seed, element count, the parameter table,
//                  a dynamic loss scaler's state (loss_scale, loss_scale_good) when one ran, and
//                  the run's options ("options": {"lr": "0.003", ...}) that --resume restores
//   params.bin, adam_m.bin, adam_v.bin
//                  flat fp32 arrays in global order (see checkpoint.c)
//   complete.json  written last, after every array is on disk: the completion marker, with
//                  a checksum per chunk of CKPT_CHUNK elements of every array
//
// A directory without complete.json is an interrupted save and is never loaded. The checksum of
// a chunk is the sum (mod 2^64) over its elements e of mix64(e << 32 ^ bits(value)): a sum, so
// every rank adds the elements of its own byte ranges and the parts combine by addition in any
// order, giving the same value for any world size; and for a fixed position the term is a
// bijection of the value's bits, so any changed element changes the chunk's sum.
#ifndef FSDP_CHECKPOINT_FORMAT_H
#define FSDP_CHECKPOINT_FORMAT_H
#include <stddef.h>
#include <stdint.h>

#include "fsdp/fsdp.h"

#define CKPT_FORMAT "fsdp.c checkpoint 2"
#define CKPT_MARKER "complete.json"
#define CKPT_CHUNK ((int64_t)1 << 20)  // elements per checksum chunk: 4 MiB of fp32
#define CKPT_MAX_STEP (1 << 30)
enum { CKPT_ARRAYS = 3 };
extern const char* const CKPT_ARRAY_NAMES[CKPT_ARRAYS];  // params.bin, adam_m.bin, adam_v.bin

typedef struct {
  int64_t elements, nchunks;
  uint64_t* sum[CKPT_ARRAYS];  // nchunks per array
} CkptSums;

void ckpt_sums_init(CkptSums* s, int64_t elements);
void ckpt_sums_free(CkptSums* s);
// Adds n consecutive values of array k starting at global element index `global`.
void ckpt_sums_add(CkptSums* s, int k, int64_t global, const float* values, int64_t n);
// Collective over `world`: every rank ends with the sums of all ranks' parts.
void ckpt_sums_combine(CkptSums* s, Comm* world);

// What meta.json and complete.json hold, parsed and validated (every field, with the reason
// in err when one is missing or wrong). Return 0 or -1.
typedef struct {
  char model[256];
  int step, saved_by_world_size;
  uint64_t seed;
  int64_t elements;
  LossScaler scaler;  // .dynamic = 0 when the run that saved it had no dynamic scale
} CkptMeta;
// scaler: the run's loss scaler; its state is written when it is dynamic (NULL: none).
// settings: the "options" object as JSON text (NULL: none).
int ckpt_write_meta(const FSDP* fs, const char* dir, const char* model, int step, uint64_t seed,
                    const LossScaler* scaler, const char* settings, int64_t elements, char* err, size_t errlen);
// Reads DIR/meta.json and checks it against this run's model name and parameter table.
int ckpt_read_meta(const FSDP* fs, const char* dir, const char* model, CkptMeta* m, char* err, size_t errlen);
// The run's options in DIR/meta.json, read before any model exists: the model, and the
// "options" object's members as option names and values (n = 0 for a checkpoint written without
// them). Every value must be a string, every name a short word. Free with ckpt_settings_free.
#define CKPT_MAX_SETTINGS 64
typedef struct {
  char model[256];
  int n;
  char* name[CKPT_MAX_SETTINGS];
  char* value[CKPT_MAX_SETTINGS];
} CkptSettings;
int ckpt_read_settings(const char* dir, CkptSettings* s, char* err, size_t errlen);
void ckpt_settings_free(CkptSettings* s);
int ckpt_write_marker(const char* dir, int step, const CkptSums* s, char* err, size_t errlen);
// Reads DIR/complete.json; sums NULL reads only the step (to order candidates).
int ckpt_read_marker(const char* dir, int* step, int64_t elements, CkptSums* sums, char* err, size_t errlen);

#endif
