// test_files.c: the strict JSON reader (infra/json.c) and the rules for input files, output
// names and directory locks (infra/files.c).
//
// JSON: documents RFC 8259 accepts are read with their values; everything else is refused
// with the place and the reason: grammar errors, a key twice in one object (also nested),
// invalid UTF-8, unpaired surrogates, a NUL, nesting past the limit, text after the value.
// Typed access refuses 32.5, 1e3, true and "32" for a whole number. Files: a FIFO is refused
// at once (not waited on), a file above its bound is refused by its size, a name component
// above NAME_MAX and a path above PATH_MAX are refused, a held lock is refused naming the
// holder, a lock left by a dead process is taken over, a foreign file at the lock's name and
// a symbolic link there are never written.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "infra/files.h"
#include "infra/json.h"
#include "test/test.h"

static char g_err[8192], g_dir[256];

static int has(const char* s, const char* sub) { return strstr(s, sub) != NULL; }

static const char* tpath(const char* name) {
  static char buf[4][512];
  static int k = 0;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static void write_text(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f)) {
    printf("cannot write %s\n", path);
    exit(1);
  }
}

static int parse(const char* text, JsonDoc* d) { return json_parse(text, strlen(text), "t.json", d, g_err, sizeof g_err); }

static void test_valid(void) {
  JsonDoc d;
  const char* text =
      " {\"a\": 1, \"b\": [true, false, null, -0, 2.5e-3, \"x\\u00e9\\ud83d\\ude00\\n\"], \"c\": {\"a\": {}},"
      " \"s\": \"caf\xc3\xa9\", \"e\": []}\r\n";
  int rc = parse(text, &d);
  EXPECT("json: a document with every kind of value is read", rc == 0, "%s", g_err);
  if (rc) return;
  int32_t b = json_get(&d, 0, "b"), c = json_get(&d, 0, "c");
  long long a = 0;
  EXPECT("json: members are found by key, arrays keep their order and count",
         json_member_int(&d, 0, "a", 0, 9, &a, g_err, sizeof g_err) == 0 && a == 1 && d.nodes[b].count == 6 &&
             json_type(&d, d.nodes[b].child) == JSON_TRUE && d.nodes[json_get(&d, 0, "e")].count == 0,
         "a %lld, count %d: %s", a, d.nodes[b].count, g_err);
  int32_t str = d.nodes[b].child;
  for (int i = 0; i < 5; i++) str = d.nodes[str].next;
  EXPECT("json: escapes decode to UTF-8 (\\u00e9, a surrogate pair, \\n)",
         json_type(&d, str) == JSON_STRING && !strcmp(json_str(&d, str), "x\xc3\xa9\xf0\x9f\x98\x80\n"), "'%s'",
         json_str(&d, str));
  EXPECT("json: raw UTF-8 is kept", !strcmp(json_str(&d, json_get(&d, 0, "s")), "caf\xc3\xa9"), "'%s'",
         json_str(&d, json_get(&d, 0, "s")));
  EXPECT("json: a key of a nested object is not a member of the top level",
         json_get(&d, c, "a") >= 0 && json_get(&d, 0, "x") < 0 && json_get(&d, json_get(&d, c, "a"), "a") < 0, "-");
  json_free(&d);
}

static void test_invalid(void) {
  struct {
    const char* name;
    const char* text;
    const char* want;
  } bad[] = {
      {"empty", "", "empty"},
      {"trailing comma in an object", "{\"a\": 1,}", "expected a key"},
      {"trailing comma in an array", "[1,]", "expected a value"},
      {"single quotes", "{'a': 1}", "expected a key"},
      {"a bare word", "{\"a\": tru}", "expected a value"},
      {"NaN", "[NaN]", "expected a value"},
      {"a leading zero", "[012]", "leading zero"},
      {"a leading plus", "[+1]", "expected a value"},
      {"a fraction without digits", "[1.]", "decimal point"},
      {"an exponent without digits", "[1e]", "exponent"},
      {"two values", "{} {}", "more text after"},
      {"an unclosed string", "[\"abc", "never closed"},
      {"an unclosed object", "{\"a\": 1", "expected ',' or '}'"},
      {"a raw control character", "[\"a\tb\"]", "control character"},
      {"an unknown escape", "[\"\\x41\"]", "unknown escape"},
      {"a short \\u escape", "[\"\\u12\"]", "four hex digits"},
      {"an unpaired high surrogate", "[\"\\ud83d\"]", "unpaired surrogate"},
      {"an unpaired low surrogate", "[\"\\ude00x\"]", "unpaired surrogate"},
      {"a NUL escape", "[\"a\\u0000b\"]", "NUL"},
      {"invalid UTF-8", "[\"\xff\"]", "not valid UTF-8"},
      {"an overlong UTF-8 form", "[\"\xc0\xaf\"]", "not valid UTF-8"},
      {"an encoded surrogate", "[\"\xed\xa0\x80\"]", "not valid UTF-8"},
      {"a BOM", "\xef\xbb\xbf{}", "expected a value"},
      {"a duplicate key", "{\"n_head\": 2, \"x\": 0, \"n_head\": 4}", "\"n_head\" appears twice"},
      {"a duplicate key in a nested object", "{\"a\": {\"k\": 1, \"k\": 1}}", "\"k\" appears twice"},
      {"a vertical tab as whitespace", "{\v}", "expected a key"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    JsonDoc d;
    char name[128];
    snprintf(name, sizeof name, "json: refused: %s", bad[i].name);
    int rc = parse(bad[i].text, &d);
    EXPECT(name, rc == -1 && has(g_err, "t.json") && has(g_err, bad[i].want), "rc %d: %s", rc, g_err);
    if (rc == 0) json_free(&d);
  }
  // Where: line and column.
  JsonDoc d;
  int rc = parse("{\n  \"a\": 1\n  \"b\": 2}", &d);
  EXPECT("json: an error names its line and column", rc == -1 && has(g_err, "line 3, column 3"), "%s", g_err);
  // Nesting: the limit, and one past it.
  char deep[2 * JSON_MAX_DEPTH + 8];
  for (int depth = JSON_MAX_DEPTH; depth <= JSON_MAX_DEPTH + 1; depth++) {
    int n = 0;
    for (int i = 0; i < depth; i++) deep[n++] = '[';
    for (int i = 0; i < depth; i++) deep[n++] = ']';
    deep[n] = 0;
    rc = parse(deep, &d);
    if (depth == JSON_MAX_DEPTH) {
      EXPECT("json: nesting up to the limit is read", rc == 0, "%s", g_err);
      if (!rc) json_free(&d);
    } else {
      EXPECT("json: nesting past the limit is refused", rc == -1 && has(g_err, "nested deeper"), "%s", g_err);
    }
  }
}

static void test_typed(void) {
  JsonDoc d;
  int rc = parse("{\"i\": 32, \"f\": 32.5, \"e\": 1e3, \"t\": true, \"s\": \"32\", \"big\": 99999999999999999999,"
                 " \"neg\": -3, \"long\": \"abcdefghij\"}", &d);
  CHECK(rc == 0, "%s", g_err);
  if (rc) return;
  long long v = 0;
  EXPECT("json_int: a whole number is read", json_member_int(&d, 0, "i", 1, 100, &v, g_err, sizeof g_err) == 0 && v == 32,
         "%s", g_err);
  const char* keys[] = {"f", "e", "t", "s"};
  const char* shown[] = {"32.5", "1e3", "true", "\"32\""};
  for (int i = 0; i < 4; i++) {
    char name[96], want[64];
    snprintf(name, sizeof name, "json_int: %s is not a whole number", shown[i]);
    snprintf(want, sizeof want, "\"%s\" is %s, not a whole number", keys[i], shown[i]);
    rc = json_member_int(&d, 0, keys[i], 0, 100, &v, g_err, sizeof g_err);
    EXPECT(name, rc == -1 && has(g_err, want), "rc %d: %s", rc, g_err);
  }
  rc = json_member_int(&d, 0, "big", 0, INT64_MAX, &v, g_err, sizeof g_err);
  EXPECT("json_int: beyond int64 is out of range, not wrapped", rc == -1 && has(g_err, "out of range"), "%s", g_err);
  rc = json_member_int(&d, 0, "neg", 0, 100, &v, g_err, sizeof g_err);
  EXPECT("json_int: below the range is refused", rc == -1 && has(g_err, "\"neg\" is -3, out of range [0, 100]"), "%s", g_err);
  rc = json_member_int(&d, 0, "missing", 0, 100, &v, g_err, sizeof g_err);
  EXPECT("json_int: a missing member is named", rc == -1 && has(g_err, "t.json has no \"missing\""), "%s", g_err);
  char s[8];
  rc = json_member_string(&d, 0, "long", s, sizeof s, g_err, sizeof g_err);
  EXPECT("json_string: too long for its buffer is refused", rc == -1 && has(g_err, "longer than"), "%s", g_err);
  int b;
  rc = json_bool(&d, json_get(&d, 0, "i"), "i", &b, g_err, sizeof g_err);
  EXPECT("json_bool: 32 is not true or false", rc == -1 && has(g_err, "not true or false"), "%s", g_err);
  double x = 0;
  rc = json_number(&d, json_get(&d, 0, "f"), "f", 0, 100, &x, g_err, sizeof g_err) ||
       json_number(&d, json_get(&d, 0, "i"), "i", 0, 100, &x, g_err, sizeof g_err);
  int ok = rc == 0 && x == 32.0 && json_number(&d, json_get(&d, 0, "e"), "e", 0, 1e4, &x, g_err, sizeof g_err) == 0 &&
           x == 1000.0;
  EXPECT("json_number: 32.5, 32 and 1e3 are read", ok, "%s", g_err);
  rc = json_number(&d, json_get(&d, 0, "e"), "e", 0, 100, &x, g_err, sizeof g_err);
  EXPECT("json_number: above the range is refused", rc == -1 && has(g_err, "\"e\" is 1e3, out of range [0, 100]"), "%s", g_err);
  rc = json_number(&d, json_get(&d, 0, "s"), "s", 0, 100, &x, g_err, sizeof g_err);
  EXPECT("json_number: a string is not a number", rc == -1 && has(g_err, "\"s\" is \"32\", not a number"), "%s", g_err);
  json_free(&d);
}

static void test_inputs(void) {
  // A FIFO nobody writes: refused at once.
  const char* fifo = tpath("fifo.json");
  CHECK(mkfifo(fifo, 0600) == 0, "mkfifo: %s", strerror(errno));
  pid_t pid = fork();
  if (pid == 0) {  // the child would block forever in a reader that waited on the FIFO
    JsonDoc d;
    int rc = json_read_file(fifo, 1 << 20, &d, g_err, sizeof g_err);
    _exit(rc == -1 && has(g_err, "FIFO") ? 0 : 1);
  }
  int status = -1, waited = 0;
  for (; waited < 50 && waitpid(pid, &status, WNOHANG) == 0; waited++) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (waited == 50) kill(pid, SIGKILL), waitpid(pid, &status, 0);
  EXPECT("files: a FIFO is refused at once, not waited on", WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "status %d after %d tries", status, waited);
  unlink(fifo);
  int fd = file_open_regular(g_dir, g_err, sizeof g_err);
  EXPECT("files: a directory is not a file", fd == -1 && has(g_err, "is a directory, not a regular file"), "%s", g_err);
  // A size bound: refused by its size, naming the file.
  write_text(tpath("big.json"), "{\"pad\": \"0123456789\"}");
  JsonDoc d;
  int rc = json_read_file(tpath("big.json"), 10, &d, g_err, sizeof g_err);
  EXPECT("files: a file above its bound is refused by its size",
         rc == -1 && has(g_err, "big.json is 21 bytes, more than the 10"), "%s", g_err);
  rc = json_read_file(tpath("big.json"), 21, &d, g_err, sizeof g_err);
  EXPECT("files: at its bound it is read", rc == 0, "%s", g_err);
  if (!rc) json_free(&d);
}

static void test_names(void) {
  char longname[NAME_MAX + 2];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;  // NAME_MAX + 1 bytes
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", g_dir, longname);
  int rc = path_fits("--log", path, "", g_err, sizeof g_err);
  EXPECT("names: a component of NAME_MAX + 1 bytes is refused", rc == -1 && has(g_err, "NAME_MAX") && has(g_err, "--log"),
         "%s", g_err);
  longname[NAME_MAX - 4] = 0;  // 251 bytes: fits, but not with ".lock"
  snprintf(path, sizeof path, "%s/%s", g_dir, longname);
  EXPECT("names: NAME_MAX - 4 bytes fit", path_fits("--save", path, "", g_err, sizeof g_err) == 0, "%s", g_err);
  rc = path_fits("--save", path, ".lock", g_err, sizeof g_err);
  EXPECT("names: ... but not with a 5-byte suffix the run adds", rc == -1 && has(g_err, "derives"), "%s", g_err);
  char deep[PATH_MAX + 16];
  size_t n = 0;
  while (n + 3 < sizeof deep - 1) deep[n++] = 'd', deep[n++] = '/';
  deep[n] = 0;
  rc = path_fits("--trace", deep, "", g_err, sizeof g_err);
  EXPECT("names: a path above PATH_MAX is refused", rc == -1 && has(g_err, "PATH_MAX"), "%s", g_err);
}

static void test_locks(void) {
  const char* dir = tpath("ck");
  // Held by another process: refused, naming it.
  int fds[2];
  CHECK(pipe(fds) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    char err[1024];
    int rc = dir_lock("--save", dir, NULL, 0, err, sizeof err);
    char c = rc == 0 ? 'y' : 'n';
    if (write(fds[1], &c, 1) != 1) _exit(2);
    pause();  // holds the lock until killed
    _exit(0);
  }
  char c = 0;
  CHECK(read(fds[0], &c, 1) == 1 && c == 'y', "the child could not take the lock");
  char note[1024] = "", want[64];
  int rc = dir_lock("--save", dir, note, sizeof note, g_err, sizeof g_err);
  snprintf(want, sizeof want, "pid %ld on host", (long)pid);
  EXPECT("lock: a directory locked by another process is refused, naming its pid and host",
         rc == -1 && has(g_err, "in use by another run") && has(g_err, want) && has(g_err, "ck.lock"), "%s", g_err);
  // The holder dies without cleaning up (SIGKILL): the lock is free, its file is taken over.
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  struct stat st;
  EXPECT("lock: a killed holder leaves its lock file", stat(tpath("ck.lock"), &st) == 0, "no file");
  rc = dir_lock("--save", dir, note, sizeof note, g_err, sizeof g_err);
  EXPECT("lock: the lock of a dead process is taken over, with a note naming it",
         rc == 0 && has(note, "did not end cleanly") && has(note, want), "rc %d: %s / note: %s", rc, g_err, note);
  // A file of someone else's at the lock's name is never written.
  write_text(tpath("notes.lock"), "my notes\n");
  rc = dir_lock("--export", tpath("notes"), NULL, 0, g_err, sizeof g_err);
  FILE* f = fopen(tpath("notes.lock"), "r");
  char text[64] = "";
  if (f) {
    if (!fgets(text, sizeof text, f)) text[0] = 0;
    fclose(f);
  }
  EXPECT("lock: a foreign file at the lock's name is refused and left as it was",
         rc == -1 && has(g_err, "not a lock file of fsdp.c") && !strcmp(text, "my notes\n"), "rc %d: %s / '%s'", rc, g_err,
         text);
  // A symbolic link there is refused, its target untouched.
  write_text(tpath("target"), "keep\n");
  CHECK(symlink(tpath("target"), tpath("link.lock")) == 0, "symlink");
  rc = dir_lock("--save", tpath("link"), NULL, 0, g_err, sizeof g_err);
  f = fopen(tpath("target"), "r");
  text[0] = 0;
  if (f) {
    if (!fgets(text, sizeof text, f)) text[0] = 0;
    fclose(f);
  }
  EXPECT("lock: a symbolic link at the lock's name is refused, its target untouched",
         rc == -1 && !strcmp(text, "keep\n"), "rc %d: %s / '%s'", rc, g_err, text);
  unlink(tpath("link.lock"));
  unlink(tpath("target"));
  unlink(tpath("notes.lock"));
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/fsdp_test_files_XXXXXX");
  if (!mkdtemp(g_dir)) {
    printf("mkdtemp failed\n");
    return 1;
  }
  TEST_RUN(test_valid());
  TEST_RUN(test_invalid());
  TEST_RUN(test_typed());
  TEST_RUN(test_inputs());
  TEST_RUN(test_names());
  TEST_RUN(test_locks());
  unlink(tpath("big.json"));
  // ck.lock is held by this process; at its exit the lock file is removed (checked by the
  // trainer's tests: no DIR.lock left after a run).
  unlink(tpath("ck.lock"));
  rmdir(g_dir);
  return test_summary();
}
