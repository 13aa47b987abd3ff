// checkpoint.h: saving and resuming training state in a format independent of the world size
// (see checkpoint.c): any number of ranks can resume any checkpoint.
#ifndef FSDP_CHECKPOINT_H
#define FSDP_CHECKPOINT_H
#include <stdint.h>

#include "fsdp/fsdp.h"

// Collective: every rank calls it. Writes DIR (through DIR.tmp) with the parameters and AdamW
// state after `step` completed optimizer steps.
void checkpoint_save(FSDP* fs, const char* dir, const char* model, int step, uint64_t seed);
// Collective: reads this rank's part of DIR into the shards (master, m, v; gradients zeroed)
// and returns the number of completed steps. Refuses, with the reason, a checkpoint of another
// model, a parameter table that differs, or truncated arrays.
int checkpoint_load(FSDP* fs, const char* dir, const char* model);
#endif
