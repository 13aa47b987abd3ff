// checkpoint.h: saving and resuming training state in a format independent of the world size
// (see checkpoint.c): any number of ranks can resume any checkpoint, every array is verified
// against its checksums, and a save killed at any moment never loses the last complete one.
#ifndef FSDP_CHECKPOINT_H
#define FSDP_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>

#include "fsdp/fsdp.h"

// At start-up, before any step: -1 with the reason when --save DIR could not be saved to or
// would clobber something that is not a checkpoint ('' or '/', a file, a directory of other
// files, a missing or read-only parent). keep: --keep-checkpoints N (DIR holds step_NNNNNNNN).
int checkpoint_check_target(const char* dir, int keep, char* err, size_t errlen);
// Collective: every rank calls it. Writes DIR (keep = 0) or DIR/step_NNNNNNNN (keep = N, the N
// newest kept) with the parameters and AdamW state after `step` completed optimizer steps, and
// the loss scaler's state when it is dynamic (scaler may be NULL).
// Refuses (fatal) to save a non-finite value; the previous checkpoint is then untouched.
// settings: the run's options as a JSON object (meta.json's "options", which --resume restores),
// or NULL.
void checkpoint_save(FSDP* fs, const char* dir, int keep, const char* model, int step, uint64_t seed,
                     const LossScaler* scaler, const char* settings);
// Collective: loads the newest complete, intact checkpoint of DIR (DIR itself, DIR.tmp or DIR.old
// left by an interrupted save, or the newest step_NNNNNNNN inside DIR) into the shards (master,
// m, v; gradients zeroed), names it in `used`, and returns its step; *scaler (unless NULL) gets
// the saved dynamic scaler's state, or .dynamic = 0 when none was saved. Refuses, with the reason,
// a checkpoint of another model, a parameter table that differs, a meta.json field that is
// missing or out of range, truncated arrays, or bytes that do not match their checksums.
int checkpoint_load(FSDP* fs, const char* dir, const char* model, char* used, size_t usedlen, LossScaler* scaler);
// Not collective, before a model exists: the nth checkpoint of DIR that checkpoint_load would
// try (0: the newest complete one), into path. Returns 1; 0 when there is no nth (for nth 0:
// DIR holds no checkpoint at all, nor DIR.tmp, DIR.old or step_NNNNNNNN); -1 with the reason in
// err (when not NULL) when there are only interrupted saves.
int checkpoint_newest(const char* dir, int nth, char* path, size_t len, char* err, size_t errlen);
#endif
