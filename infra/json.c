// json.c: the strict JSON reader of json.h.
//
// Why a reader of our own: `make run` needs nothing but a C compiler on a fresh machine, so no
// JSON library can be assumed installed, and fsdp.c copies in no other project's code; the
// grammar is small (RFC 8259, section 2 to 8), and one reader serves every file.
//
// What it accepts is RFC 8259 JSON text in UTF-8: the six structural characters, the four
// whitespace bytes, true, false, null, numbers -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
// and strings whose bytes are valid UTF-8 with the escapes \" \\ \/ \b \f \n \r \t \uXXXX
// (surrogates only in pairs). Beyond the RFC, it refuses what no file of ours may hold: a key
// twice in one object (the RFC leaves it open; readers disagree on which one wins), a NUL in a
// string (\u0000: names are C strings here), nesting deeper than JSON_MAX_DEPTH.
//
// The document becomes an array of nodes, each listing its elements through sibling links,
// and one buffer of decoded strings: the decoded text of a string never exceeds its quoted
// source, and a number's copy never exceeds its source plus the delimiter after it, so one
// buffer of the document's size plus two bytes holds them all.
#include "infra/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infra/files.h"

typedef struct {
  const char* key;
  uint32_t len, pos;
} Member;

typedef struct {
  const char *start, *p, *end;
  JsonDoc* d;
  uint32_t used;       // bytes of d->strings taken
  Member* members;     // scratch for the duplicate-key check of one object
  size_t nmembers_cap;
  char* err;
  size_t errlen;
} Parser;

// "<what> is not valid JSON: line L, column C (byte B): <reason>", at the byte `at`.
__attribute__((format(printf, 3, 4))) static int bad(Parser* P, const char* at, const char* fmt, ...) {
  int line = 1, col = 1;
  for (const char* q = P->start; q < at; q++)
    if (*q == '\n') line++, col = 1;
    else col++;
  char reason[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  return set_error(P->err, P->errlen, "%s is not valid JSON: line %d, column %d (byte %lld): %s", P->d->what, line, col,
                   (long long)(at - P->start), reason);
}

static void skip_ws(Parser* P) {
  while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r')) P->p++;
}

static int32_t new_node(Parser* P, JsonType type, const char* at) {
  JsonDoc* d = P->d;
  if (d->nnodes == d->cap) {
    int32_t cap = d->cap ? (d->cap > INT32_MAX / 2 ? INT32_MAX : 2 * d->cap) : 64;
    if (cap == d->nnodes) return bad(P, at, "too many values");
    JsonNode* n = realloc(d->nodes, (size_t)cap * sizeof *n);
    if (!n) return bad(P, at, "out of memory for %d values", cap);
    d->nodes = n, d->cap = cap;
  }
  JsonNode* n = &d->nodes[d->nnodes];
  memset(n, 0, sizeof *n);
  n->type = type;
  n->child = n->next = -1;
  n->pos = (uint32_t)(at - P->start);
  return d->nnodes++;
}

static int hex4(const char* p, unsigned* out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

// The length of the UTF-8 sequence at p (Unicode 15, table 3-7: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when it is not one.
static int utf8_length(const unsigned char* p, const unsigned char* end) {
  unsigned c = p[0];
  int n;
  unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (end - p < n || p[1] < lo || p[1] > hi) return 0;
  for (int i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return n;
}

// A string at P->p (its opening quote), decoded into d->strings: *off and *len.
static int parse_string(Parser* P, uint32_t* off, uint32_t* len) {
  const char* open = P->p++;
  char* out = P->d->strings + P->used;
  uint32_t n = 0;
  for (;;) {
    if (P->p >= P->end) return bad(P, open, "a string that is never closed");
    unsigned char c = (unsigned char)*P->p;
    if (c == '"') break;
    if (c < 0x20) return bad(P, P->p, "a control character (byte 0x%02x) inside a string: write it as an escape", c);
    if (c == '\\') {
      if (P->end - P->p < 2) return bad(P, P->p, "an escape at the end of the text");
      char e = P->p[1], plain = 0;
      switch (e) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
      }
      if (plain) {
        out[n++] = plain;
        P->p += 2;
        continue;
      }
      unsigned cp, low;
      if (e != 'u') return bad(P, P->p, "an unknown escape \\%c", e);
      if (P->end - P->p < 6 || hex4(P->p + 2, &cp)) return bad(P, P->p, "\\u needs four hex digits");
      const char* esc = P->p;
      P->p += 6;
      if (cp >= 0xDC00 && cp <= 0xDFFF) return bad(P, esc, "an unpaired surrogate \\u%04X", cp);
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (P->end - P->p < 6 || P->p[0] != '\\' || P->p[1] != 'u' || hex4(P->p + 2, &low) || low < 0xDC00 || low > 0xDFFF)
          return bad(P, esc, "an unpaired surrogate \\u%04X", cp);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        P->p += 6;
      }
      if (cp == 0) return bad(P, esc, "\\u0000: a NUL inside a string is not accepted");
      if (cp < 0x80) out[n++] = (char)cp;
      else if (cp < 0x800) out[n++] = (char)(0xC0 | cp >> 6), out[n++] = (char)(0x80 | (cp & 63));
      else if (cp < 0x10000)
        out[n++] = (char)(0xE0 | cp >> 12), out[n++] = (char)(0x80 | (cp >> 6 & 63)), out[n++] = (char)(0x80 | (cp & 63));
      else
        out[n++] = (char)(0xF0 | cp >> 18), out[n++] = (char)(0x80 | (cp >> 12 & 63)),
        out[n++] = (char)(0x80 | (cp >> 6 & 63)), out[n++] = (char)(0x80 | (cp & 63));
      continue;
    }
    int k = c < 0x80 ? 1 : utf8_length((const unsigned char*)P->p, (const unsigned char*)P->end);
    if (!k) return bad(P, P->p, "a byte (0x%02x) that is not valid UTF-8", c);
    memcpy(out + n, P->p, (size_t)k);
    n += (uint32_t)k, P->p += k;
  }
  P->p++;  // the closing quote
  out[n] = 0;
  *off = P->used, *len = n;
  P->used += n + 1;
  return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int32_t parse_number(Parser* P) {
  const char* s = P->p;
  int integer = 1;
  if (P->p < P->end && *P->p == '-') P->p++;
  if (P->p >= P->end || !is_digit(*P->p)) return bad(P, s, "a number needs a digit after its sign");
  if (*P->p == '0') {
    P->p++;
    if (P->p < P->end && is_digit(*P->p)) return bad(P, s, "a number with a leading zero");
  } else {
    while (P->p < P->end && is_digit(*P->p)) P->p++;
  }
  if (P->p < P->end && *P->p == '.') {
    integer = 0, P->p++;
    if (P->p >= P->end || !is_digit(*P->p)) return bad(P, s, "a number needs a digit after its decimal point");
    while (P->p < P->end && is_digit(*P->p)) P->p++;
  }
  if (P->p < P->end && (*P->p == 'e' || *P->p == 'E')) {
    integer = 0, P->p++;
    if (P->p < P->end && (*P->p == '+' || *P->p == '-')) P->p++;
    if (P->p >= P->end || !is_digit(*P->p)) return bad(P, s, "a number needs a digit in its exponent");
    while (P->p < P->end && is_digit(*P->p)) P->p++;
  }
  int32_t v = new_node(P, JSON_NUMBER, s);
  if (v < 0) return -1;
  JsonNode* n = &P->d->nodes[v];
  n->integer = integer;
  n->text = P->used, n->len = (uint32_t)(P->p - s);
  memcpy(P->d->strings + P->used, s, n->len);
  P->d->strings[P->used + n->len] = 0;
  P->used += n->len + 1;
  return v;
}

static int by_key(const void* a, const void* b) {
  const Member *x = a, *y = b;
  int c = memcmp(x->key, y->key, x->len < y->len ? x->len : y->len);
  if (c) return c;
  return x->len < y->len ? -1 : x->len > y->len ? 1 : (x->pos > y->pos) - (x->pos < y->pos);
}

// A key twice in object v is refused, naming the key and both places.
static int check_duplicates(Parser* P, int32_t v) {
  const JsonDoc* d = P->d;
  size_t n = (size_t)d->nodes[v].count;
  if (n < 2) return 0;
  if (n > P->nmembers_cap) {
    Member* m = realloc(P->members, n * sizeof *m);
    if (!m) return set_error(P->err, P->errlen, "%s: out of memory for an object of %zu members", d->what, n);
    P->members = m, P->nmembers_cap = n;
  }
  size_t i = 0;
  for (int32_t c = d->nodes[v].child; c >= 0; c = d->nodes[c].next, i++)
    P->members[i] = (Member){d->strings + d->nodes[c].key, (uint32_t)strlen(d->strings + d->nodes[c].key), d->nodes[c].pos};
  qsort(P->members, n, sizeof *P->members, by_key);
  for (i = 1; i < n; i++)
    if (P->members[i].len == P->members[i - 1].len && !memcmp(P->members[i].key, P->members[i - 1].key, P->members[i].len))
      return bad(P, P->start + P->members[i].pos, "the key \"%.80s\" appears twice in one object (its first value is at "
                 "byte %u); which one counts is ambiguous, so neither is taken", P->members[i].key, P->members[i - 1].pos);
  return 0;
}

static int32_t parse_value(Parser* P, int depth);

// An array or object at P->p; close is ']' or '}'.
static int32_t parse_container(Parser* P, int depth) {
  const char* open = P->p;
  int object = *open == '{';
  if (depth >= JSON_MAX_DEPTH) return bad(P, open, "nested deeper than %d levels", JSON_MAX_DEPTH);
  int32_t v = new_node(P, object ? JSON_OBJECT : JSON_ARRAY, open);
  if (v < 0) return -1;
  P->p++;
  skip_ws(P);
  char close = object ? '}' : ']';
  if (P->p < P->end && *P->p == close) {
    P->p++;
    return v;
  }
  int32_t last = -1;
  for (;;) {
    uint32_t key = 0, keylen = 0;
    const char* key_at = P->p;
    if (object) {
      if (P->p >= P->end || *P->p != '"') return bad(P, P->p, "expected a key (a string in double quotes)");
      if (parse_string(P, &key, &keylen)) return -1;
      skip_ws(P);
      if (P->p >= P->end || *P->p != ':') return bad(P, P->p, "expected ':' after the key \"%.80s\"", P->d->strings + key);
      P->p++;
    }
    int32_t c = parse_value(P, depth + 1);
    if (c < 0) return -1;
    JsonNode* n = &P->d->nodes[c];
    if (object) n->key = key, n->pos = (uint32_t)(key_at - P->start);
    if (last < 0) P->d->nodes[v].child = c;
    else P->d->nodes[last].next = c;
    last = c;
    P->d->nodes[v].count++;
    skip_ws(P);
    if (P->p < P->end && *P->p == ',') {
      P->p++;
      skip_ws(P);
      continue;
    }
    if (P->p < P->end && *P->p == close) break;
    return bad(P, P->p, "expected ',' or '%c' after %s", close, object ? "a member" : "an element");
  }
  P->p++;
  return object && check_duplicates(P, v) ? -1 : v;
}

static int32_t parse_value(Parser* P, int depth) {
  skip_ws(P);
  if (P->p >= P->end) return bad(P, P->p, "expected a value, found the end of the text");
  char c = *P->p;
  if (c == '{' || c == '[') return parse_container(P, depth);
  if (c == '"') {
    int32_t v = new_node(P, JSON_STRING, P->p);
    if (v < 0) return -1;
    uint32_t off, len;
    if (parse_string(P, &off, &len)) return -1;
    P->d->nodes[v].text = off, P->d->nodes[v].len = len;
    return v;
  }
  if (c == '-' || is_digit(c)) return parse_number(P);
  static const struct { const char* word; JsonType type; } words[] = {{"true", JSON_TRUE}, {"false", JSON_FALSE},
                                                                       {"null", JSON_NULL}};
  for (size_t i = 0; i < 3; i++) {
    size_t n = strlen(words[i].word);
    if ((size_t)(P->end - P->p) >= n && !memcmp(P->p, words[i].word, n)) {
      int32_t v = new_node(P, words[i].type, P->p);
      P->p += n;
      return v;
    }
  }
  if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f) return bad(P, P->p, "expected a value, found byte 0x%02x", (unsigned char)c);
  return bad(P, P->p, "expected a value, found '%c'", c);
}

int json_parse(const char* text, size_t len, const char* what, JsonDoc* d, char* err, size_t errlen) {
  memset(d, 0, sizeof *d);
  snprintf(d->what, sizeof d->what, "%s", what);
  if (len > JSON_MAX_BYTES) return set_error(err, errlen, "%s: %zu bytes of JSON, more than the %zu read", what, len, JSON_MAX_BYTES);
  d->strings = malloc(len + 2);
  if (!d->strings) return set_error(err, errlen, "%s: out of memory for %zu bytes of JSON", what, len);
  Parser P = {.start = text, .p = text, .end = text + len, .d = d, .err = err, .errlen = errlen};
  int rc = 0;
  skip_ws(&P);
  if (P.p == P.end) rc = set_error(err, errlen, "%s is empty or only whitespace, not a JSON value", what);
  else if (parse_value(&P, 0) < 0) rc = -1;
  else {
    skip_ws(&P);
    if (P.p != P.end) rc = bad(&P, P.p, "more text after the end of the JSON value");
  }
  free(P.members);
  if (rc) json_free(d);
  return rc;
}

int json_read_file(const char* path, size_t max_bytes, JsonDoc* doc, char* err, size_t errlen) {
  char* text;
  size_t len;
  if (file_read_all(path, max_bytes, &text, &len, err, errlen)) return -1;
  int rc = json_parse(text, len, path, doc, err, errlen);
  free(text);
  return rc;
}

int json_read_object(const char* path, size_t max_bytes, JsonDoc* doc, char* err, size_t errlen) {
  if (json_read_file(path, max_bytes, doc, err, errlen)) return -1;
  if (json_type(doc, 0) == JSON_OBJECT) return 0;
  json_free(doc);
  return set_error(err, errlen, "%s is not a JSON object", path);
}

void json_free(JsonDoc* d) {
  free(d->nodes);
  free(d->strings);
  d->nodes = NULL, d->strings = NULL;
  d->nnodes = d->cap = 0;
}

int32_t json_get(const JsonDoc* d, int32_t v, const char* key) {
  if (v < 0 || d->nodes[v].type != JSON_OBJECT) return -1;
  for (int32_t c = d->nodes[v].child; c >= 0; c = d->nodes[c].next)
    if (!strcmp(d->strings + d->nodes[c].key, key)) return c;
  return -1;
}

const char* json_show(const JsonDoc* d, int32_t v, char* buf, size_t cap) {
  const JsonNode* n = &d->nodes[v];
  const char* cut = n->len > 40 ? "..." : "";
  switch (n->type) {
    case JSON_NULL: snprintf(buf, cap, "null"); break;
    case JSON_TRUE: snprintf(buf, cap, "true"); break;
    case JSON_FALSE: snprintf(buf, cap, "false"); break;
    case JSON_NUMBER: snprintf(buf, cap, "%.40s%s", d->strings + n->text, cut); break;
    case JSON_STRING: snprintf(buf, cap, "\"%.40s%s\"", d->strings + n->text, cut); break;
    case JSON_ARRAY: snprintf(buf, cap, "[...]"); break;
    case JSON_OBJECT: snprintf(buf, cap, "{...}"); break;
  }
  return buf;
}

int json_int(const JsonDoc* d, int32_t v, const char* name, long long lo, long long hi, long long* out, char* err,
             size_t errlen) {
  char shown[64];
  const JsonNode* n = &d->nodes[v];
  if (n->type != JSON_NUMBER || !n->integer)
    return set_error(err, errlen, "%s: \"%s\" is %s, not a whole number", d->what, name, json_show(d, v, shown, sizeof shown));
  errno = 0;
  long long x = strtoll(d->strings + n->text, NULL, 10);
  if (errno == ERANGE || x < lo || x > hi)
    return set_error(err, errlen, "%s: \"%s\" is %s, out of range [%lld, %lld]", d->what, name,
                     json_show(d, v, shown, sizeof shown), lo, hi);
  *out = x;
  return 0;
}

int json_number(const JsonDoc* d, int32_t v, const char* name, double lo, double hi, double* out, char* err,
                size_t errlen) {
  char shown[64];
  const JsonNode* n = &d->nodes[v];
  if (n->type != JSON_NUMBER)
    return set_error(err, errlen, "%s: \"%s\" is %s, not a number", d->what, name, json_show(d, v, shown, sizeof shown));
  errno = 0;
  double x = strtod(d->strings + n->text, NULL);  // the text is a JSON number, so strtod reads all of it
  if (errno == ERANGE || !(x >= lo && x <= hi))
    return set_error(err, errlen, "%s: \"%s\" is %s, out of range [%g, %g]", d->what, name,
                     json_show(d, v, shown, sizeof shown), lo, hi);
  *out = x;
  return 0;
}

int json_bool(const JsonDoc* d, int32_t v, const char* name, int* out, char* err, size_t errlen) {
  char shown[64];
  JsonType t = d->nodes[v].type;
  if (t != JSON_TRUE && t != JSON_FALSE)
    return set_error(err, errlen, "%s: \"%s\" is %s, not true or false", d->what, name, json_show(d, v, shown, sizeof shown));
  *out = t == JSON_TRUE;
  return 0;
}

int json_string(const JsonDoc* d, int32_t v, const char* name, char* out, size_t cap, char* err, size_t errlen) {
  char shown[64];
  const JsonNode* n = &d->nodes[v];
  if (n->type != JSON_STRING)
    return set_error(err, errlen, "%s: \"%s\" is %s, not a string", d->what, name, json_show(d, v, shown, sizeof shown));
  if (n->len >= cap)
    return set_error(err, errlen, "%s: \"%s\" is %s, longer than the %zu bytes it may have", d->what, name,
                     json_show(d, v, shown, sizeof shown), cap - 1);
  memcpy(out, d->strings + n->text, (size_t)n->len + 1);
  return 0;
}

int json_member_int(const JsonDoc* d, int32_t obj, const char* key, long long lo, long long hi, long long* out,
                    char* err, size_t errlen) {
  int32_t v = json_get(d, obj, key);
  if (v < 0) return set_error(err, errlen, "%s has no \"%s\"", d->what, key);
  return json_int(d, v, key, lo, hi, out, err, errlen);
}

int json_member_string(const JsonDoc* d, int32_t obj, const char* key, char* out, size_t cap, char* err, size_t errlen) {
  int32_t v = json_get(d, obj, key);
  if (v < 0) return set_error(err, errlen, "%s has no \"%s\"", d->what, key);
  return json_string(d, v, key, out, cap, err, errlen);
}
