// weights.h: pretrained weights in and out of the sharded layout.
//
// Concept -> home:
//   safetensors and llm.c file tables (parse, check)   weights/tensor_file.c
//   our parameters <-> GPT-2 / T5 / Llama / llm.c names weights/names.c
//   --init-from: each rank reads its shard's bytes      weights/load.c
//   --export: each rank writes its shard's bytes        weights/export.c
//   a model from any of those or a checkpoint           weights/source.c
//
// Formats read: llm.c GPT-2 checkpoints (a 256 x int32 header, magic 20240326, version 3 fp32 or
// 5 bf16, then the tensors in llm.c's order) and Hugging Face directories (config.json +
// model.safetensors, or a sharded model's model.safetensors.index.json and its shards; fp32,
// bf16 or fp16 tensors) of GPT-2, of T5 v1.0 / v1.1 and of Llama. Written: Hugging Face
// directories (one fp32 model.safetensors) that transformers' from_pretrained loads. No rank
// ever holds more than its own shards.
#ifndef FSDP_WEIGHTS_H
#define FSDP_WEIGHTS_H
#include <stddef.h>

#include "layers/model.h"

// The model a weights file or directory holds (llm.c header or config.json), as a custom
// model spec in cfg. Returns 0, or -1 with the reason in err.
int weights_model_config(const char* path, ModelConfig* cfg, char* err, size_t errlen);
// The model of a run: --model (spec, may be NULL) and/or --init-from (path, may be NULL);
// with both, they must agree. Returns 0, or -1 with the reason in err.
int weights_resolve_model(const char* spec, const char* init_from, ModelConfig* cfg, char* err, size_t errlen);
// Checks that the model of --model (given) is the one the file holds (found); returns 0 or -1
// with the first difference in err.
int weights_config_match(const ModelConfig* given, const ModelConfig* found, char* err, size_t errlen);
// Collective: replaces this rank's master shards by the weights of path (AdamW state and
// gradients zeroed). Every missing, extra or misshapen tensor is named in one error, before
// anything is read into the shards; a non-finite value is refused, naming its tensor, as it is
// read. opt names path in messages ("--init-from").
void weights_load(FSDP* fs, const ModelConfig* cfg, const char* path, const char* opt);
// Collective: writes a Hugging Face directory (config.json, model.safetensors) for the
// model's current parameters: rank 0 writes the header, every rank its own byte ranges. Goes
// through DIR.tmp (config.json written last), renamed when complete; an earlier export of
// fsdp.c at DIR is replaced only then. A failure names the file and the system's reason. The
// tokenizer files of tokenizer_dir (tokenizer.json, tokenizer.bin; NULL: none) go with it.
void weights_export(FSDP* fs, const ModelConfig* cfg, const char* dir, const char* tokenizer_dir);
// At start-up, before anything is written: -1 with the reason when DIR cannot be exported to
// or would clobber what is not ours: a name that does not fit, a missing or read-only parent,
// a DIR.tmp or DIR.old already there, or a DIR that is neither empty nor an earlier export of
// fsdp.c (exactly config.json and model.safetensors, its header naming fsdp.c as the writer). opt
// names the option in messages ("--export", or the tool's argument).
int weights_export_check(const char* opt, const char* dir, char* err, size_t errlen);

// A model source for tools that run a trained model (generate, export_weights) and for
// --init-from: an fsdp.c checkpoint directory (meta.json, written by --save), a Hugging Face
// directory or an llm.c .bin. model_source_config gives its model; model_source_load
// (collective) its weights, with AdamW's state zeroed (a checkpoint's is not taken).
// model_source_check, between model_plan and model_allocate, refuses a source whose files do not
// hold that model before anything of its size is allocated (0, or -1 with the reason). opt
// names the source in messages ("SRC", "--init-from").
int model_source_config(const char* src, ModelConfig* cfg, char* err, size_t errlen);
int model_source_check(const FSDP* fs, const char* src, const char* opt, char* err, size_t errlen);
void model_source_load(FSDP* fs, const ModelConfig* cfg, const char* src, const char* opt);
// Where the source's tokenizer files are (into dir): a directory that holds tokenizer.json or
// tokenizer.bin itself (an export), else beside the training data a checkpoint's meta.json
// records; 0, or -1 when none is known.
int model_source_tokenizer_dir(const char* src, char* dir, size_t len);
#endif
