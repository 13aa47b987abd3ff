// json.h: the one JSON reader of fsdp.c, for every JSON file it reads: a model's config.json,
// the header of a model.safetensors, a checkpoint's meta.json and complete.json, an export's
// header.
//
// Strict on purpose: these files decide what is allocated and loaded, so a file is read as
// RFC 8259 says or refused, with the file, the place and the reason. Nesting is respected (a
// key inside a nested object is never the top-level one), a key twice in one object is
// refused, and a field meant to be a whole number must be written as one (32.5, 1e3, true
// and "32" are refused, not read as 32 or 1). Limits: JSON_MAX_DEPTH levels of nesting and
// JSON_MAX_BYTES of text (each file's own, smaller bound is the caller's).
#ifndef FSDP_JSON_H
#define FSDP_JSON_H
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 64
#define JSON_MAX_BYTES ((size_t)1 << 30)

typedef enum { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

// One value of a parsed document. Arrays and objects list their elements (members) through
// `child` and each element's `next`; values are named by their index in JsonDoc.nodes.
typedef struct {
  JsonType type;
  int32_t child, next;  // first element or member, next sibling; -1 at the end
  int32_t count;        // elements or members
  uint32_t key;         // a member's key: offset in JsonDoc.strings
  uint32_t text;        // a string's decoded bytes, a number as written: offset in JsonDoc.strings
  uint32_t len;         // their length (without the terminating NUL)
  uint32_t pos;         // byte offset of the value in the document, for messages
  int integer;          // a number written without fraction or exponent
} JsonNode;

typedef struct {
  char what[4096];   // the file's name, for messages
  JsonNode* nodes;   // nodes[0] is the document's value
  int32_t nnodes, cap;
  char* strings;     // keys, strings and numbers, each NUL-terminated
} JsonDoc;

// Parses text[0..len) (what names it in messages). Returns 0, or -1 with the reason in err:
// "<what> is not valid JSON: line L, column C (byte B): <what was expected>".
int json_parse(const char* text, size_t len, const char* what, JsonDoc* doc, char* err, size_t errlen);
// Reads a regular file of at most max_bytes (infra/files.h) and parses it.
int json_read_file(const char* path, size_t max_bytes, JsonDoc* doc, char* err, size_t errlen);
// The same, for a file whose top level must be an object (config.json, meta.json, complete.json).
int json_read_object(const char* path, size_t max_bytes, JsonDoc* doc, char* err, size_t errlen);
void json_free(JsonDoc* doc);

// The member `key` of object v, or -1 (also when v is not an object).
int32_t json_get(const JsonDoc* d, int32_t v, const char* key);
static inline const char* json_key(const JsonDoc* d, int32_t member) { return d->strings + d->nodes[member].key; }
static inline const char* json_str(const JsonDoc* d, int32_t v) { return d->strings + d->nodes[v].text; }
static inline JsonType json_type(const JsonDoc* d, int32_t v) { return d->nodes[v].type; }
// A short rendering of value v for messages: a number or string as written (cut at 40 bytes),
// true, false, null, [...] or {...}.
const char* json_show(const JsonDoc* d, int32_t v, char* buf, size_t cap);

// Typed access for the readers of each file; `name` is how the value is named in messages
// (a key, or "shape[1]"). Each returns 0, or -1 with "<what>: \"<name>\" is <value>, <reason>".
// A whole number in [lo, hi], written as an integer.
int json_int(const JsonDoc* d, int32_t v, const char* name, long long lo, long long hi, long long* out, char* err,
             size_t errlen);
// A number in [lo, hi], written any way JSON allows (500000.0, 1e-05).
int json_number(const JsonDoc* d, int32_t v, const char* name, double lo, double hi, double* out, char* err,
                size_t errlen);
int json_bool(const JsonDoc* d, int32_t v, const char* name, int* out, char* err, size_t errlen);
// A string of fewer than cap bytes, copied into out.
int json_string(const JsonDoc* d, int32_t v, const char* name, char* out, size_t cap, char* err, size_t errlen);
// The same for a member of object obj; a missing member is an error ("<what> has no \"key\"").
int json_member_int(const JsonDoc* d, int32_t obj, const char* key, long long lo, long long hi, long long* out,
                    char* err, size_t errlen);
int json_member_string(const JsonDoc* d, int32_t obj, const char* key, char* out, size_t cap, char* err, size_t errlen);
#endif
