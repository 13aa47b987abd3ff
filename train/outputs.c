// outputs.c: every file the run will write, checked at start-up, before the first step: a
// typo in an output path, or a name too long for the file system, must not cost a finished
// run. Each rank checks what it will write (rank 0 the logs and dumps, every rank its own
// trace file and its part of a checkpoint), and all ranks agree before going on. Rank 0 then
// locks the --save and --export directories for the run (infra/files.h), so a second run given
// one of them is refused here rather than overwriting this one's files. First of all, no output
// may be, hold or lie inside an input of the run (compared by device and inode: a link or
// another spelling of a path is the same file) or another output.
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsdp/checkpoint.h"
#include "infra/dist.h"
#include "infra/files.h"
#include "train/train.h"
#include "weights/weights.h"

// -1 with the reason when a file could not be created or replaced at `path`.
static int check_file(const char* opt, const char* path, char* err, size_t errlen) {
  if (!path[0]) return snprintf(err, errlen, "%s needs a file name, got ''", opt), -1;
  if (path_fits(opt, path, "", err, errlen)) return -1;
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return snprintf(err, errlen, "%s %s is a directory; give a file name", opt, path), -1;
    if (access(path, W_OK) != 0) return snprintf(err, errlen, "%s %s: cannot write it (%s)", opt, path, strerror(errno)), -1;
    if (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode)) return 0;  // a file, or a device such as /dev/null
    return snprintf(err, errlen, "%s %s exists and is not a regular file", opt, path), -1;
  }
  char dir[4096];
  const char* slash = strrchr(path, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return snprintf(err, errlen, "%s %s: the directory %s does not exist; create it first", opt, path, dir), -1;
  if (access(dir, W_OK | X_OK) != 0)
    return snprintf(err, errlen, "%s %s: cannot create files in %s (%s)", opt, path, dir, strerror(errno)), -1;
  return 0;
}

// ---- no output is, holds or lies inside an input, or another output ----------------------

typedef struct {
  const char* opt;
  char path[4200];
  int checkpoint;  // --save's names, or --resume's: a run resumes from and saves to one directory
} Named;
typedef struct {
  int n, cap;
  Named* v;
} NamedList;

static void add_named(NamedList* l, const char* opt, const char* path, const char* suffix, int checkpoint) {
  if (l->n == l->cap && !(l->v = realloc(l->v, (size_t)(l->cap = l->cap ? 2 * l->cap : 16) * sizeof *l->v)))
    fatal("out of host memory checking the output paths");
  Named* x = &l->v[l->n++];
  x->opt = opt, x->checkpoint = checkpoint;
  snprintf(x->path, sizeof x->path, "%s%s", path, suffix);
}

static void add_glob(NamedList* l, const char* opt, const char* pattern) {
  glob_t g;
  if (glob(pattern, 0, NULL, &g) != 0) return;
  for (size_t i = 0; i < g.gl_pathc; i++) add_named(l, opt, g.gl_pathv[i], "", 0);
  globfree(&g);
}

// Every name rank 0 writes (with the names derived from them), and every file the run reads.
static void outputs_and_inputs(const Options* o, NamedList* out, NamedList* in) {
  if (o->log_path) add_named(out, "--log", o->log_path, "", 0);
  if (o->bench_json) add_named(out, "--bench-json", o->bench_json, "", 0);
  if (o->trace_path) add_named(out, "--trace", o->trace_path, "", 0);
  if (o->dump_params) {
    const char* derived[4] = {"", ".json", ".tmp", ".json.tmp"};
    for (int i = 0; i < 4; i++) add_named(out, "--dump-params", o->dump_params, derived[i], 0);
  }
  const char* dir_names[3] = {"", ".tmp", ".old"};
  for (int i = 0; i < 3; i++) {
    if (o->save_dir && o->save_dir[0]) add_named(out, "--save", o->save_dir, dir_names[i], 1);
    if (o->export_dir && o->export_dir[0]) add_named(out, "--export", o->export_dir, dir_names[i], 0);
  }
  if (o->data) add_glob(in, "--data", o->data);
  if (o->val_data) add_glob(in, "--val-data", o->val_data);
  if (o->init_from) add_named(in, "--init-from", o->init_from, "", 0);
  if (o->eval_prompts) add_named(in, "--eval-prompts", o->eval_prompts, "", 0);
  if (o->resume_dir)
    for (int i = 0; i < 3; i++) add_named(in, "--resume", o->resume_dir, dir_names[i], 1);
}

// path as the directory that will hold it, links resolved, and its last name: how two outputs
// that may not exist yet are compared.
static void output_name(const char* path, char* out, size_t cap) {
  char parent[PATH_MAX], real[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", path);
  char* slash = strrchr(parent, '/');
  const char* base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  if (!slash) snprintf(parent, sizeof parent, ".");
  else if (slash == parent) parent[1] = 0;
  else *slash = 0;
  if (!realpath(parent, real)) snprintf(real, sizeof real, "%s", parent);
  snprintf(out, cap, "%s/%s", strcmp(real, "/") ? real : "", base);
}

// -1 with the reason when an output could destroy an input or another output.
static int check_overlaps(const Options* o, char* err, size_t errlen) {
  NamedList out = {0}, in = {0};
  outputs_and_inputs(o, &out, &in);
  int rc = 0;
  for (int i = 0; i < out.n && !rc; i++)
    for (int j = 0; j < in.n && !rc; j++) {
      if (out.v[i].checkpoint && in.v[j].checkpoint) continue;  // --resume D --save D: saving replaces it by design
      int how = path_overlap(out.v[i].path, in.v[j].path);
      static const char* words[4] = {"", "is", "holds", "lies inside"};
      if (how)
        rc = set_error(err, errlen, "%s %s %s %s %s (compared by device and inode, links resolved): writing it "
                      "would destroy what the run reads. Give %s another path", out.v[i].opt, out.v[i].path, words[how],
                      in.v[j].opt, in.v[j].path, out.v[i].opt);
    }
  for (int i = 0; i < out.n && !rc; i++)
    for (int j = 0; j < out.n && !rc; j++) {
      if (i == j || !strcmp(out.v[i].opt, out.v[j].opt)) continue;
      char a[4400], b[4400];
      output_name(out.v[i].path, a, sizeof a);
      output_name(out.v[j].path, b, sizeof b);
      size_t la = strlen(a);
      if (!strcmp(a, b))
        rc = set_error(err, errlen, "%s %s and %s %s name the same path: one would overwrite the other. Give each its own",
                      out.v[i].opt, out.v[i].path, out.v[j].opt, out.v[j].path);
      else if (!strncmp(a, b, la) && b[la] == '/')
        rc = set_error(err, errlen, "%s %s lies inside %s %s, which the run replaces as a whole. Give %s a path outside it",
                      out.v[j].opt, out.v[j].path, out.v[i].opt, out.v[i].path, out.v[j].opt);
    }
  free(out.v);
  free(in.v);
  return rc;
}

void check_outputs(const Options* o, Comm* world) {
  char err[4400] = "";
  int rank = comm_rank(world), W = comm_size(world), bad = 0;
  if (rank == 0) {
    if (o->log_path) bad = bad || check_file("--log", o->log_path, err, sizeof err);
    if (o->bench_json) bad = bad || check_file("--bench-json", o->bench_json, err, sizeof err);
    if (o->dump_params) {
      char meta[4200];
      snprintf(meta, sizeof meta, "%s.json", o->dump_params);
      bad = bad || check_file("--dump-params", o->dump_params, err, sizeof err) ||
            check_file("--dump-params", meta, err, sizeof err);
    }
    if (o->save_dir) bad = bad || checkpoint_check_target(o->save_dir, o->keep_checkpoints, err, sizeof err);
    if (o->export_dir) bad = bad || weights_export_check("--export", o->export_dir, err, sizeof err);
    bad = bad || check_overlaps(o, err, sizeof err);
    char note[4400] = "";
    if (o->save_dir) bad = bad || dir_lock("--save", o->save_dir, note, sizeof note, err, sizeof err) ||
                           checkpoint_check_owner(o->save_dir, o->keep_checkpoints, o->resume_dir, err, sizeof err);
    if (note[0]) log0("note: %s\n", note);
    note[0] = 0;
    if (o->export_dir) bad = bad || dir_lock("--export", o->export_dir, note, sizeof note, err, sizeof err);
    if (note[0]) log0("note: %s\n", note);
  }
  if (o->trace_path && !bad) {
    char name[4200];
    if (W > 1) snprintf(name, sizeof name, "%s.rank%d", o->trace_path, rank);
    else snprintf(name, sizeof name, "%s", o->trace_path);
    bad = check_file("--trace", name, err, sizeof err);
  }
  if (comm_all_true(world, !bad)) return;
  if (bad && W > 1) fprintf(stderr, "[rank %d] error: %s (checked before the first step; nothing was written)\n", rank, err);
  else if (bad) fprintf(stderr, "error: %s (checked before the first step; nothing was written)\n", err);
  dist_exit(2, NULL);
}
