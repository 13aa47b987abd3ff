// outputs.c: every file the run will write, checked at start-up, before the first step: a
// typo in an output path, or a name too long for the file system, must not cost a finished
// run. Each rank checks what it will write (rank 0 the logs and dumps, every rank its own
// trace file and its part of a checkpoint), and all ranks agree before going on. Rank 0 then
// locks the --save and --export directories for the run (infra/files.h), so a second run given
// one of them is refused here rather than overwriting this one's files.
#include <errno.h>
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
    char note[4400] = "";
    if (o->save_dir) bad = bad || dir_lock("--save", o->save_dir, note, sizeof note, err, sizeof err);
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
  dist_finalize();
  exit(2);
}
