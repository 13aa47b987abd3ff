// agreement.c: one run on every rank. A launcher wrapper that adds an option on some ranks, or a
// node whose copy of the data differs, would train a different model on each rank and exit 0,
// or end in a truncated message or a collective's timeout that names the collective, not the
// cause. So at start-up, before anything is built, every rank compares what it was given (its
// options, and the identity of every input file it opened) with rank 0's, and a rank that
// differs names the option or the file.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infra/dist.h"
#include "infra/files.h"
#include "train/train.h"

typedef struct {
  char* text;
  size_t len, cap;
} Text;

static void append(Text* t, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(Text* t, const char* fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->text ? t->text + t->len : NULL, t->text ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (t->text && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    t->cap = 2 * (t->cap + (size_t)n + 64);
    if (!(t->text = realloc(t->text, t->cap))) fatal("out of host memory comparing the ranks' options");
  }
}

// One input file's line: "F <option> <index> <size> <mtime> <digest> <path>" (tab-separated).
static void add_file(Text* t, const char* opt, int index, const FileId* id, const char* path) {
  append(t, "F\t%s\t%d\t%lld\t%lld\t%016llx\t%s\n", opt, index, (long long)id->size, (long long)id->mtime_ns,
         (unsigned long long)id->digest, path);
}

static void add_path(Text* t, const char* opt, const char* path) {
  FileId id;
  int fd = file_open_regular(path, NULL, 0);
  if (fd < 0) return;  // not a file here: what reads it says why
  if (!file_identity(fd, &id)) add_file(t, opt, 0, &id, path);
  close(fd);
}

// The outputs that rank 0 alone writes, or each rank for itself (--trace, as PATH.rankN): their
// paths may differ between ranks (a launcher giving each process its own names changes nothing
// trained), so only whether they are given is compared (a dump gathers on every rank).
static const char* const OWN_PATHS[] = {"--log ", "--dump-params ", "--bench-json ", "--trace "};

// This rank's account: its options ("O <line>"), then its input files.
static void account(const Options* o, const TokenStream* train, const TokenStream* val, Text* t) {
  const char* opts = options_given();
  for (const char* p = opts; *p;) {
    size_t n = strcspn(p, "\n"), keep = n;
    for (size_t i = 0; i < sizeof OWN_PATHS / sizeof OWN_PATHS[0]; i++)
      if (!strncmp(p, OWN_PATHS[i], strlen(OWN_PATHS[i]))) keep = strlen(OWN_PATHS[i]) - 1;  // the name alone
    append(t, "O\t%.*s\n", (int)keep, p);
    p += n + (p[n] != 0);
  }
  for (int i = 0; i < train->nfiles; i++) add_file(t, "--data", i, &train->ids[i], train->paths[i]);
  if (o->val_data)
    for (int i = 0; i < val->nfiles; i++) add_file(t, "--val-data", i, &val->ids[i], val->paths[i]);
  if (o->init_from) {
    char path[4200];
    if (file_is_dir(o->init_from)) {
      snprintf(path, sizeof path, "%s/config.json", o->init_from);
      add_path(t, "--init-from", path);
      snprintf(path, sizeof path, "%s/model.safetensors", o->init_from);
      add_path(t, "--init-from", path);
    } else {
      add_path(t, "--init-from", o->init_from);
    }
  }
  if (o->eval_prompts) add_path(t, "--eval-prompts", o->eval_prompts);
}

// The next line of text at *at (cut at its newline), or NULL at the end.
static char* next_line(char** at) {
  if (!*at || !**at) return NULL;
  char* line = *at;
  char* nl = strchr(line, '\n');
  if (nl) *nl = 0, *at = nl + 1;
  else *at = line + strlen(line);
  return line;
}

static int parse_file(char* line, char** opt, int* index, FileId* id, char** path) {
  long long size, mtime;
  unsigned long long digest;
  int used = 0;
  char* tab = strchr(line + 2, '\t');
  if (line[0] != 'F' || !tab) return -1;
  *tab = 0;
  *opt = line + 2;
  if (sscanf(tab + 1, "%d\t%lld\t%lld\t%llx\t%n", index, &size, &mtime, &digest, &used) != 4 || !used) return -1;
  *id = (FileId){.size = size, .mtime_ns = mtime, .digest = digest};
  *path = tab + 1 + used;
  return 0;
}

// Why this rank's account (mine) is not rank 0's (theirs): 0 when it is.
static int differs(char* mine, char* theirs, char* err, size_t errlen) {
  char *a = mine, *b = theirs, *x, *y;
  for (;;) {
    x = next_line(&a), y = next_line(&b);
    if (!x && !y) return 0;
    if (x && y && !strcmp(x, y)) continue;
    break;
  }
  const char* fix = "start every rank with the same command line and the same files";
  if (y && y[0] == 'O' && (!x || x[0] != 'O'))
    return set_error(err, errlen, "rank 0 was given '%s', which this rank was not: %s", y + 2, fix);
  if (x && x[0] == 'O' && (!y || y[0] != 'O'))
    return set_error(err, errlen, "this rank was given '%s', which rank 0 was not: %s", x + 2, fix);
  if (x && y && x[0] == 'O') {  // both sorted by name: the first name of the two is missing on the other rank
    size_t nx = strcspn(x + 2, " "), ny = strcspn(y + 2, " ");
    int order = strncmp(x + 2, y + 2, nx < ny ? nx : ny);
    if (nx == ny && !order)
      return set_error(err, errlen, "%.*s differs: '%s' here, '%s' on rank 0: %s", (int)nx, x + 2, x + 2, y + 2, fix);
    if (order > 0 || (!order && nx > ny))
      return set_error(err, errlen, "rank 0 was given '%s', which this rank was not: %s", y + 2, fix);
    return set_error(err, errlen, "this rank was given '%s', which rank 0 was not: %s", x + 2, fix);
  }
  char *opt_x = NULL, *opt_y = NULL, *path_x = NULL, *path_y = NULL, why[256];
  int ix = -1, iy = -1;
  FileId idx, idy;
  if (!x || parse_file(x, &opt_x, &ix, &idx, &path_x))
    return set_error(err, errlen, "rank 0 opened %s, which this rank did not: %s", y && !parse_file(y, &opt_y, &iy, &idy, &path_y)
                     ? path_y : "an input", fix);
  if (!y || parse_file(y, &opt_y, &iy, &idy, &path_y))
    return set_error(err, errlen, "this rank opened %s %s, which rank 0 did not (%s matched more files here?): %s", opt_x,
                     path_x, opt_x, fix);
  if (strcmp(opt_x, opt_y) || ix != iy)
    return set_error(err, errlen, "%s matched other files here than on rank 0 (here %s, on rank 0 %s): %s", opt_x, path_x,
                     path_y, fix);
  if (file_identity_compare(&idx, &idy, why, sizeof why) == 0)  // the same contents under another path
    return set_error(err, errlen, "%s is %s here but %s on rank 0: %s", opt_x, path_x, path_y, fix);
  return set_error(err, errlen, "%s %s is not rank 0's file of that name: %s. Give every rank the same data", opt_x, path_x,
                   why);
}

void check_agreement(const Options* o, const TokenStream* train, const TokenStream* val, Comm* world) {
  int W = comm_size(world), rank = comm_rank(world);
  if (W == 1) return;
  Text mine = {0};
  account(o, train, val, &mine);
  append(&mine, "%s", "");
  int64_t len = (int64_t)mine.len + 1;
  comm_broadcast(world, &len, sizeof len, 0);
  char* theirs = rank == 0 ? mine.text : xmalloc((size_t)len, "rank 0's options");
  comm_broadcast(world, theirs, (size_t)len, 0);
  char err[8192] = "";
  int bad = rank != 0 && differs(mine.text, theirs, err, sizeof err);
  if (bad) fprintf(stderr, "[rank %d] error: %s (checked at start-up; nothing was built)\n", rank, err);
  int ok = comm_all_true(world, !bad);
  if (rank != 0) free(theirs);
  free(mine.text);
  if (ok) return;
  fflush(stderr);
  if (rank == 0)
    fprintf(stderr, "error: the ranks were not started alike (options or input files differ from rank 0's; see the "
                    "messages above)\n");
  dist_exit(2, NULL);
}
