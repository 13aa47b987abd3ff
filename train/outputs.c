// outputs.c: every file the run will write, checked at start-up, before the first step: a
// typo in an output path must not cost a finished run. Each rank checks what it will write
// (rank 0 the logs and dumps, every rank its own trace file and its part of a checkpoint), and
// all ranks agree before going on.
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsdp/checkpoint.h"
#include "fsdp/dist.h"
#include "train/train.h"

// -1 with the reason when a file could not be created or replaced at `path`.
static int check_file(const char* opt, const char* path, char* err, size_t errlen) {
  if (!path[0]) return snprintf(err, errlen, "%s needs a file name, got ''", opt), -1;
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

// --export DIR is replaced as a whole when the export is complete: it must be a new name or an
// earlier export (config.json and model.safetensors only), under a writable parent.
static int check_export_dir(const char* dir, char* err, size_t errlen) {
  const char* base = strrchr(dir, '/');
  base = base ? base + 1 : dir;
  if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
    return snprintf(err, errlen, "--export '%s': name the directory to write (e.g. out/hf), not '', '/', '.' or '..'", dir), -1;
  struct stat st;
  if (stat(dir, &st) != 0) return check_file("--export", dir, err, errlen);  // a new name: its parent must take it
  if (!S_ISDIR(st.st_mode))
    return snprintf(err, errlen, "--export %s: a file of that name exists; choose another path", dir), -1;
  DIR* d = opendir(dir);
  struct dirent* e;
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "config.json") &&
        strcmp(e->d_name, "model.safetensors")) {
      snprintf(err, errlen, "--export %s holds '%s', so it is not an earlier export; choose another path", dir, e->d_name);
      closedir(d);
      return -1;
    }
  if (d) closedir(d);
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
    if (o->export_dir) bad = bad || check_export_dir(o->export_dir, err, sizeof err);
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
