// checkpoint.h: saving and resuming training state in a format independent of the world size
// (see checkpoint.c): any number of ranks can resume any checkpoint, every array is verified
// against its checksums, and a save killed at any moment never loses the last complete one.
#ifndef FSDP_CHECKPOINT_H
#define FSDP_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>

#include "fsdp/fsdp.h"

// Collective, at start-up: draws this run's identity (fs->run_id), which its checkpoints record.
void checkpoint_begin_run(FSDP* fs);
// At start-up, before any step: -1 with the reason when --save DIR could not be saved to or
// would clobber something that is not a checkpoint: '' or '/', a file, a directory of other
// files, a missing or read-only parent, a symbolic link at DIR, DIR.tmp, DIR.old or DIR/step_*.
// keep: --keep-checkpoints N (DIR holds step_NNNNNNNN).
int checkpoint_check_target(const char* dir, int keep, char* err, size_t errlen);
// At start-up, once DIR is locked for this run: -1 with the reason when DIR holds a complete
// checkpoint of another run, one that resume_dir (the --resume directory, or NULL for a new run)
// does not hold: saving there would replace it or, with keep, rotate it out.
int checkpoint_check_owner(const char* dir, int keep, const char* resume_dir, char* err, size_t errlen);
// Collective: every rank calls it. Writes DIR (keep = 0) or DIR/step_NNNNNNNN (keep = N: this
// run's N newest kept, the older verified ones rotated out) with the parameters and AdamW state
// after `step` completed optimizer steps, the run's identity, and the loss scaler's state when it
// is dynamic (scaler may be NULL).
// Refuses (fatal) to save a non-finite value; the previous checkpoint is then untouched.
// settings: the run's options as a JSON object (meta.json's "options", which --resume restores),
// or NULL.
void checkpoint_save(FSDP* fs, const char* dir, int keep, const char* model, int step, uint64_t seed,
                     const LossScaler* scaler, const char* settings);
// Collective: loads the newest complete, intact checkpoint of DIR (DIR itself, DIR.tmp or DIR.old
// left by an interrupted save, or the newest step_NNNNNNNN inside DIR) into the shards (master,
// m, v; gradients zeroed), names it in `used`, takes over its run identity (and leaves its data's
// in fs->data_id, "" when it has none), and returns its step;
// *scaler (unless NULL) gets the saved dynamic scaler's state, or .dynamic = 0 when none was
// saved. Refuses, with the reason, a checkpoint of another model, a parameter table that
// differs, a meta.json field that is missing or out of range, truncated arrays, bytes that do
// not match their checksums, or a non-finite value. opt names DIR in messages ("--resume").
int checkpoint_load(FSDP* fs, const char* opt, const char* dir, const char* model, char* used, size_t usedlen,
                    LossScaler* scaler);
// Before anything of the model's size is allocated (after model_plan laid it out): whether DIR
// holds a complete checkpoint whose meta.json matches this layout and whose arrays have its
// size; 0, or -1 with the reason (a meta.json naming a large model beside small files, say).
int checkpoint_check_source(const FSDP* fs, const char* opt, const char* dir, const char* model, char* err, size_t errlen);
// The model recorded in the newest readable checkpoint of DIR (as checkpoint_load would look for
// it), so a caller can tell another spelling of its own model; 0, or -1 when there is none.
int checkpoint_recorded_model(const char* dir, char* model, size_t cap);
// Not collective, before a model exists: the nth checkpoint of DIR that checkpoint_load would
// try (0: the newest complete one), into path. Returns 1; 0 when there is no nth (for nth 0:
// DIR holds no checkpoint at all, nor DIR.tmp, DIR.old or step_NNNNNNNN); -1 with the reason in
// err (when not NULL) when there are only interrupted saves.
int checkpoint_newest(const char* dir, int nth, char* path, size_t len, char* err, size_t errlen);
#endif
