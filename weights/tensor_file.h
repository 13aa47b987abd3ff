// tensor_file.h: what weights/load.c and weights/export.c share: the table of tensors in a
// file (where each one's bytes are), and the map from our parameters to external tensors.
#ifndef FSDP_WEIGHTS_TENSOR_FILE_H
#define FSDP_WEIGHTS_TENSOR_FILE_H
#include <stddef.h>
#include <stdint.h>

#include "infra/json.h"
#include "layers/model.h"

typedef enum { WT_F32, WT_BF16, WT_F16 } WeightDType;
typedef enum { FMT_LLMC, FMT_HF_GPT2, FMT_HF_T5, FMT_HF_LLAMA } WeightsFormat;

#define TENSOR_NAME_LEN 128

typedef struct {
  char name[TENSOR_NAME_LEN];
  WeightDType dtype;
  int ndim;
  int64_t shape[4];
  int64_t start;  // byte offset of the first element in its file
  int64_t bytes;
  int file;       // which of the table's files holds it (0 unless the model is sharded)
  int used;       // claimed by one of our parameters
} FileTensor;

typedef struct {
  char path[4096];      // the file, or a sharded model's index (what messages name)
  WeightsFormat format;
  int64_t size;         // file size in bytes (of a single file)
  int ntensors;
  FileTensor* tensors;
  char prefix[32];      // HF GPT-2: "transformer." when the names carry it, else ""
  int nfiles;           // the files the tensors are in: path itself, or a sharded model's shards
  char** files;
} TensorFile;

int weight_dtype_size(WeightDType t);
// Reads the tensor table of an llm.c checkpoint or a model.safetensors and checks it (magic,
// version, offsets inside the file and without overlaps or holes, sizes that match the
// shapes). Returns 0, or -1 with the reason in err (naming the file and the tensor).
int tensor_file_open_llmc(const char* path, TensorFile* tf, char* err, size_t errlen);
int tensor_file_open_safetensors(const char* path, WeightsFormat format, TensorFile* tf, char* err, size_t errlen);
// A Hugging Face model's tensors: path is a model.safetensors, or the model.safetensors.index.json
// of a sharded one (model-0000X-of-0000N.safetensors beside it, each read and checked as one
// file; the index's weight_map must name every tensor of every shard with the shard it is in,
// and nothing else).
#define SAFETENSORS_INDEX "model.safetensors.index.json"
int tensor_file_open_hf(const char* path, WeightsFormat format, TensorFile* tf, char* err, size_t errlen);
// Only the JSON header of a safetensors file, into *doc (json_free it); -1 with the reason.
int safetensors_read_header(const char* path, JsonDoc* doc, char* err, size_t errlen);
// The table is sorted by name; tensor_file_find looks a name up (NULL when absent).
void tensor_file_close(TensorFile* tf);
FileTensor* tensor_file_find(TensorFile* tf, const char* name);
// config.json of a Hugging Face model, beside its tensors file: a JSON object of at most
// CONFIG_MAX_BYTES (cpath gets its path). Returns 0, or -1 with the reason.
#define CONFIG_MAX_BYTES (1 << 20)
int weights_read_config(const char* tensors_path, char* cpath, size_t cpathlen, JsonDoc* doc, char* err, size_t errlen);
// Finds model.safetensors or a sharded model's index (DIR or a file) and the model's format
// from config.json / the magic. Returns 0, or -1 with the reason in err.
int weights_locate(const char* path, WeightsFormat* format, char* tensors_path, size_t tensors_len, char* err,
                   size_t errlen);

// One external tensor that fills rows [row0, row0 + rows) of one of our parameters (a
// rows x cols matrix, or a vector when cols == 1 and ndim == 1).
typedef struct {
  char name[TENSOR_NAME_LEN];
  int64_t row0, rows, cols;
  int ndim;        // 1 or 2, of the external tensor
  int transposed;  // stored as [cols, rows] (GPT-2's Conv1D weights: [in, out])
} Piece;

#define MAX_PIECES 3
typedef struct {
  int npieces;
  Piece piece[MAX_PIECES];
} ParamMap;

// The external tensors of parameter p of unit u (its live elements), for a format. Returns 0,
// or -1 when the parameter has no counterpart (a bug: every parameter has one).
int weights_map_param(WeightsFormat format, const ModelConfig* cfg, const char* prefix, int unit,
                      const ParamInfo* p, ParamMap* map);
// External tensors a file may hold that are not parameters of ours: buffers (GPT-2's attention
// masks) and copies of tied weights (T5's embed_tokens, a tied lm_head).
int weights_ignorable(WeightsFormat format, const ModelConfig* cfg, const char* name);
// The shape the external tensor of a piece has.
void piece_shape(const Piece* pc, int* ndim, int64_t shape[2]);

// A list of what is wrong with a file, for one message: the first PROBLEMS_SHOWN lines, and
// how many there are.
#define PROBLEMS_SHOWN 40
typedef struct {
  int count;
  char text[16384];
} ProblemList;
void problem_add(ProblemList* pl, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void shape_text(char* out, size_t cap, int ndim, const int64_t* shape);
// Whether the tensors of a Hugging Face file are exactly those a model of cfg needs (names
// and shapes; tensors the format may carry besides, weights_ignorable, are allowed): checked
// from cfg alone, before anything of the model's size exists. Returns 0, or -1 with every
// problem (up to PROBLEMS_SHOWN) in err.
int weights_table_fits(TensorFile* tf, const ModelConfig* cfg, char* err, size_t errlen);
#endif
