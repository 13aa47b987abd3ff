// checkpoint.c: checkpoints that any world size can resume, and that survive a crash at any
// moment of a save.
//
// A checkpoint is a directory (files: see checkpoint_format.h) holding every parameter's live
// elements in global order (units, then table order), without alignment gaps or padding, so
// the layout of the files does not depend on F and a run on any number of ranks reads them
// back. Each rank writes and reads only its own byte ranges (the parts of parameters its shard
// holds); replicas (hybrid, none) leave the writing to the first replica.
//
// Saving to DIR, crash-safe: the new checkpoint is written to DIR.tmp and gets its completion
// marker last; only then is the old DIR moved to DIR.old, DIR.tmp renamed to DIR and DIR.old
// removed. Killed at any point, the newest complete checkpoint is one of DIR, DIR.tmp and
// DIR.old; --resume DIR looks at all three (marker and checksums) and says which it used, and
// the next save first settles them so that nothing complete is deleted before a newer complete
// one exists. With --keep-checkpoints N, DIR instead holds step-numbered checkpoints
// DIR/step_00000100, ..., each written through its own .tmp, the N newest kept.
#include "fsdp/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsdp/checkpoint_format.h"
#include "infra/dist.h"
#include "infra/files.h"

#define PATH_CAP 1024  // checkpoint paths are refused at start-up beyond PATH_CAP - 64
#define ERR_CAP 4096
// Paths are at most PATH_CAP - 64 characters (checked at start-up), so the buffers below, sized
// for a path plus a suffix, never truncate; GCC cannot see that bound.
#pragma GCC diagnostic ignored "-Wformat-truncation"

static int64_t live_total(const FSDP* fs) {
  int64_t n = 0;
  for (int u = 0; u < fs->nunits; u++)
    for (int i = 0; i < fs->units[u].nparams; i++) n += fs->units[u].params[i].live;
  return n;
}

// ---- which directories are checkpoints ------------------------------------------------------

// Names a checkpoint directory may hold: our files and the .part files of an interrupted write.
static int ours(const char* name) {
  static const char* known[] = {"meta.json", "params.bin", "adam_m.bin", "adam_v.bin", CKPT_MARKER,
                                "meta.json.part", CKPT_MARKER ".part"};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(name, known[i])) return 1;
  return 0;
}

// The first entry of dir that a checkpoint would not hold (into what), 0 if there is none.
static int foreign_entry(const char* dir, char* what, size_t cap) {
  DIR* d = opendir(dir);
  if (!d) return 0;
  struct dirent* e;
  int found = 0;
  while (!found && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || ours(e->d_name)) continue;
    snprintf(what, cap, "%s", e->d_name);
    found = 1;
  }
  closedir(d);
  return found;
}

// Removes a checkpoint directory: only our own files, then the directory (which fails, and is
// reported, if it holds anything else: nothing but our own files is ever deleted).
static int remove_checkpoint_dir(const char* dir) {
  static const char* const files[] = {CKPT_MARKER, "meta.json", "params.bin", "adam_m.bin", "adam_v.bin",
                                      "meta.json.part", CKPT_MARKER ".part"};  // the marker first
  return dir_remove_named(dir, files, sizeof files / sizeof files[0]);
}

typedef enum { CK_ABSENT, CK_INCOMPLETE, CK_COMPLETE } CkState;
static CkState classify(const char* dir, int* step) {
  if (!file_exists(dir)) return CK_ABSENT;
  char err[512];
  *step = -1;
  return ckpt_read_marker(dir, step, 0, NULL, err, sizeof err) == 0 ? CK_COMPLETE : CK_INCOMPLETE;
}

// A step-numbered checkpoint name inside a --keep-checkpoints directory: "step_%08d" with an
// optional ".tmp"; the step, or -1 when name is not one.
static int keep_name_step(const char* name, int* tmp) {
  int step = -1, used = 0;
  if (sscanf(name, "step_%8d%n", &step, &used) != 1 || used != 13 || step < 0) return -1;
  if (!strcmp(name + used, "")) *tmp = 0;
  else if (!strcmp(name + used, ".tmp")) *tmp = 1;
  else return -1;
  return step;
}

int checkpoint_check_target(const char* dir, int keep, char* err, size_t errlen) {
  if (!dir[0]) return snprintf(err, errlen, "--save needs a directory name, got ''"), -1;
  if (strlen(dir) > PATH_CAP - 64) return snprintf(err, errlen, "--save %s: the path is too long", dir), -1;
  const char* base = strrchr(dir, '/');
  base = base ? base + 1 : dir;
  if (!base[0] || !strcmp(base, ".") || !strcmp(base, ".."))
    return snprintf(err, errlen,
                    "--save %s: name the checkpoint directory itself (e.g. %s%sckpt), not '/', '.' or '..': "
                    "saving renames it", dir, dir, dir[strlen(dir) - 1] == '/' ? "" : "/"), -1;
  // The longest names a save derives from DIR, and its lock file beside it.
  if (path_fits("--save", dir, keep ? "/step_00000000.tmp/" CKPT_MARKER ".part" : ".tmp/" CKPT_MARKER ".part", err, errlen) ||
      path_fits("--save", dir, ".lock", err, errlen))
    return -1;
  char parent[PATH_CAP];
  snprintf(parent, sizeof parent, "%.*s", (int)(base - dir), dir);
  if (!parent[0]) snprintf(parent, sizeof parent, ".");
  if (!file_is_dir(parent))
    return snprintf(err, errlen, "--save %s: the directory %s does not exist; create it first", dir, parent), -1;
  if (access(parent, W_OK | X_OK) != 0)
    return snprintf(err, errlen, "--save %s: cannot write in %s (%s)", dir, parent, strerror(errno)), -1;
  char what[512];
  if (file_exists(dir) && !file_is_dir(dir))
    return snprintf(err, errlen, "--save %s: a file of that name exists and is not a checkpoint directory; "
                    "choose another path", dir), -1;
  if (keep) {
    DIR* d = opendir(dir);
    struct dirent* e;
    int bad = 0, tmpflag;
    while (d && !bad && (e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && keep_name_step(e->d_name, &tmpflag) < 0)
        bad = 1, snprintf(what, sizeof what, "%s", e->d_name);
    if (d) closedir(d);
    if (bad)
      return snprintf(err, errlen, "--save %s --keep-checkpoints: %s holds '%s', which is not a step_NNNNNNNN "
                      "checkpoint; choose an empty or new directory", dir, dir, what), -1;
    return 0;
  }
  const char* suffixes[3] = {"", ".tmp", ".old"};
  for (int i = 0; i < 3; i++) {
    char path[PATH_CAP + 8];
    snprintf(path, sizeof path, "%s%s", dir, suffixes[i]);
    if (file_exists(path) && !file_is_dir(path))
      return snprintf(err, errlen, "--save %s: %s exists and is not a checkpoint directory; move it away",
                      dir, path), -1;
    if (file_is_dir(path) && foreign_entry(path, what, sizeof what))
      return snprintf(err, errlen, "--save %s: %s is not an fsdp.c checkpoint (it holds '%s'); choose another "
                      "path", dir, path, what), -1;
  }
  return 0;
}

// ---- saving ---------------------------------------------------------------------------------

typedef struct {
  int fd[CKPT_ARRAYS];
  const char* dir;
  float* host;  // staging for one piece: the device arrays are copied through it
  CkptSums sums;
  char err[ERR_CAP];  // the first failure, empty when none
} SaveCtx;

// Calls fn for every piece of this rank's shard that holds live elements: the shard-local
// start, the element index in the checkpoint's arrays, the count, and the parameter.
typedef void (*PieceFn)(void* ctx, const Unit* U, const ParamInfo* p, int64_t local, int64_t global, int64_t n);
static void for_each_piece(const FSDP* fs, PieceFn fn, void* ctx) {
  int64_t base = 0;  // checkpoint index of the current parameter's first element
  for (int u = 0; u < fs->nunits; u++) {
    const Unit* U = &fs->units[u];
    for (int i = 0; i < U->nparams; i++) {
      const ParamInfo* p = &U->params[i];
      ShardPart s;
      if (fsdp_shard_part(fs, U, p, p->live, &s)) fn(ctx, U, p, s.local, base + s.first, s.end - s.first);
      base += p->live;
    }
  }
}

static void save_piece(void* vctx, const Unit* U, const ParamInfo* p, int64_t local, int64_t global, int64_t n) {
  SaveCtx* c = vctx;
  float* arrays[CKPT_ARRAYS] = {U->master, U->m, U->v};
  for (int k = 0; k < CKPT_ARRAYS && !c->err[0]; k++) {
    size_t bytes = (size_t)n * sizeof(float);
    device_copy_to_host(c->host, arrays[k] + local, bytes);
    // A checkpoint never holds a non-finite value: the save stops before its marker.
    for (int64_t j = 0; j < n; j++)
      if (!isfinite(c->host[j])) {
        snprintf(c->err, sizeof c->err, "%s.%s holds a non-finite value (%g) in %s at element %lld; not saving it",
                 U->name, p->name, c->host[j], CKPT_ARRAY_NAMES[k], (long long)(global + j));
        return;
      }
    if (file_pwrite_all(c->fd[k], c->host, bytes, (off_t)global * 4) != 0) {
      snprintf(c->err, sizeof c->err, "writing %s/%s failed: %s", c->dir, CKPT_ARRAY_NAMES[k], strerror(errno));
      return;
    }
    ckpt_sums_add(&c->sums, k, global, c->host, n);
  }
}

static float* staging(const FSDP* fs) {
  int64_t largest = 0;
  for (int u = 0; u < fs->nunits; u++)
    if (fs->units[u].shard > largest) largest = fs->units[u].shard;
  return xmalloc((size_t)largest * sizeof(float), "checkpoint staging");
}

// Rank 0, before a save to DIR: make the newest complete checkpoint among DIR, DIR.tmp and
// DIR.old be DIR, and remove what is older or incomplete, in an order that never deletes a
// complete checkpoint before a newer complete one exists under DIR.
static void settle(const char* dir) {
  char tmp[PATH_CAP + 8], old[PATH_CAP + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", dir);
  snprintf(old, sizeof old, "%s.old", dir);
  int sd = -1, st = -1, so = -1;
  CkState d = classify(dir, &sd), t = classify(tmp, &st), o = classify(old, &so);
  int rc = 0;
  if (t == CK_COMPLETE && (d != CK_COMPLETE || st > sd) && (o != CK_COMPLETE || st >= so)) {
    rc |= remove_checkpoint_dir(old);  // older than DIR.tmp
    if (d != CK_ABSENT) rc |= rename(dir, old);
    rc |= rename(tmp, dir);
    dir_sync_parent(dir);
    rc |= remove_checkpoint_dir(old);
  } else if (o == CK_COMPLETE && (d != CK_COMPLETE || so > sd)) {
    rc |= remove_checkpoint_dir(tmp);  // older than DIR.old, or incomplete
    rc |= remove_checkpoint_dir(dir);  // incomplete or older
    rc |= rename(old, dir);
    dir_sync_parent(dir);
  } else {
    rc |= remove_checkpoint_dir(tmp);
    rc |= remove_checkpoint_dir(old);
  }
  if (rc) fatal("checkpoint %s: cannot settle %s and %s: %s", dir, tmp, old, strerror(errno));
}

// Rank 0, after the save of `name` in a --keep-checkpoints directory: keep the newest `keep`
// complete checkpoints and no incomplete ones.
static void prune(const char* dir, int keep, const char* just_written) {
  DIR* d = opendir(dir);
  if (!d) return;
  int cap = 64, n = 0, *steps = xmalloc(cap * sizeof(int), "checkpoint list");
  struct dirent* e;
  while ((e = readdir(d))) {
    int tmpflag, s = keep_name_step(e->d_name, &tmpflag);
    char path[PATH_CAP + 300];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (s < 0 || !strcmp(path, just_written)) continue;
    int ms;
    if (tmpflag || classify(path, &ms) != CK_COMPLETE) {
      remove_checkpoint_dir(path);
      continue;
    }
    if (n == cap) steps = realloc(steps, (cap *= 2) * sizeof(int));
    steps[n++] = s;
  }
  closedir(d);
  // The just-written one counts as one of the kept: remove all but the newest keep-1 others.
  for (int kept = 0; kept < n; kept++) {
    int newest = -1, at = -1;
    for (int i = 0; i < n; i++)
      if (steps[i] > newest) newest = steps[i], at = i;
    if (at < 0) break;
    steps[at] = -1;
    if (kept >= keep - 1) {
      char path[PATH_CAP + 32];
      snprintf(path, sizeof path, "%s/step_%08d", dir, newest);
      if (remove_checkpoint_dir(path) != 0) fprintf(stderr, "warning: could not remove %s\n", path);
    }
  }
  free(steps);
}

void checkpoint_save(FSDP* fs, const char* dir, int keep, const char* model, int step, uint64_t seed,
                     const LossScaler* scaler, const char* settings) {
  char final[PATH_CAP + 32], tmp[PATH_CAP + 40], err[ERR_CAP] = "";
  if (keep) snprintf(final, sizeof final, "%s/step_%08d", dir, step);
  else snprintf(final, sizeof final, "%s", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", final);
  int64_t total = live_total(fs);
  int ok = 1;
  if (fs->world_rank == 0) {
    if (keep) {
      if (!file_is_dir(dir) && mkdir(dir, 0755) != 0) ok = 0, snprintf(err, sizeof err, "cannot create %s: %s", dir, strerror(errno));
      if (ok && remove_checkpoint_dir(tmp) != 0) ok = 0, snprintf(err, sizeof err, "cannot remove %s: %s", tmp, strerror(errno));
    } else {
      settle(dir);
    }
    // A fresh temporary directory with full-size arrays that every rank fills by pwrite.
    if (ok && mkdir(tmp, 0755) != 0) ok = 0, snprintf(err, sizeof err, "cannot create %s: %s", tmp, strerror(errno));
    for (int k = 0; k < CKPT_ARRAYS && ok; k++) {
      char path[PATH_CAP + 64];
      snprintf(path, sizeof path, "%s/%s", tmp, CKPT_ARRAY_NAMES[k]);
      int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
      if (fd < 0 || ftruncate(fd, (off_t)total * (off_t)sizeof(float)) != 0)
        ok = 0, snprintf(err, sizeof err, "cannot create %s: %s", path, strerror(errno));
      if (fd >= 0) close(fd);
    }
    if (ok && ckpt_write_meta(fs, tmp, model, step, seed, scaler, settings, total, err, sizeof err)) ok = 0;
  }
  if (!comm_all_true(fs->world, ok)) fatal("checkpoint %s: %s", final, err[0] ? err : "rank 0 could not start the save");

  SaveCtx c = {.dir = tmp};
  ckpt_sums_init(&c.sums, total);
  if (comm_rank(fs->replica_group) == 0) {  // one replica of every shard writes it
    c.host = staging(fs);
    for (int k = 0; k < CKPT_ARRAYS; k++) {
      char path[PATH_CAP + 64];
      snprintf(path, sizeof path, "%s/%s", tmp, CKPT_ARRAY_NAMES[k]);
      c.fd[k] = open(path, O_WRONLY);
      if (c.fd[k] < 0 && !c.err[0]) snprintf(c.err, sizeof c.err, "cannot open %s: %s", path, strerror(errno));
    }
    if (!c.err[0]) for_each_piece(fs, save_piece, &c);
    for (int k = 0; k < CKPT_ARRAYS; k++)
      if (c.fd[k] >= 0 && (fsync(c.fd[k]) != 0 || close(c.fd[k]) != 0) && !c.err[0])
        snprintf(c.err, sizeof c.err, "finishing %s/%s failed: %s", tmp, CKPT_ARRAY_NAMES[k], strerror(errno));
    free(c.host);
  }
  ckpt_sums_combine(&c.sums, fs->world);
  // A failed save leaves DIR.tmp without its marker: never loaded, and the previous checkpoint
  // stays where it was.
  if (!comm_all_true(fs->world, !c.err[0])) {
    if (c.err[0]) fatal("checkpoint %s: %s (the previous checkpoint, if any, is untouched)", final, c.err);
    fatal("checkpoint %s: another rank failed to write its part (the previous checkpoint, if any, is untouched)", final);
  }
  ok = 1;
  if (fs->world_rank == 0) {
    if (ckpt_write_marker(tmp, step, &c.sums, err, sizeof err)) ok = 0;
    dir_sync_parent(tmp);
    // The new checkpoint is complete: only now does it replace the older one.
    if (ok && !keep) {
      char old[PATH_CAP + 8];
      snprintf(old, sizeof old, "%s.old", final);
      if ((file_exists(final) && rename(final, old) != 0) || rename(tmp, final) != 0)
        ok = 0, snprintf(err, sizeof err, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
      dir_sync_parent(final);
      if (ok && remove_checkpoint_dir(old) != 0) fprintf(stderr, "warning: could not remove %s\n", old);
    } else if (ok) {
      if (remove_checkpoint_dir(final) != 0 || rename(tmp, final) != 0)  // the same step saved again
        ok = 0, snprintf(err, sizeof err, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
      dir_sync_parent(final);
      if (ok) prune(dir, keep, final);
    }
  }
  ckpt_sums_free(&c.sums);
  if (!comm_all_true(fs->world, ok)) fatal("checkpoint %s: %s", final, err[0] ? err : "rank 0 could not finish the save");
}

// ---- loading --------------------------------------------------------------------------------

typedef struct {
  int fd[CKPT_ARRAYS];
  const char* dir;
  float* host;
  CkptSums sums;
  int add;          // this rank's pieces count toward the checksums (one replica of each)
  char err[ERR_CAP];
} LoadCtx;

static void load_piece(void* vctx, const Unit* U, const ParamInfo* p, int64_t local, int64_t global, int64_t n) {
  (void)p;
  LoadCtx* c = vctx;
  float* arrays[CKPT_ARRAYS] = {U->master, U->m, U->v};
  for (int k = 0; k < CKPT_ARRAYS && !c->err[0]; k++) {
    size_t bytes = (size_t)n * sizeof(float);
    off_t at = (off_t)global * 4;
    if (file_pread_all(c->fd[k], c->host, bytes, at) != 0) {
      snprintf(c->err, sizeof c->err, "%s/%s is truncated or unreadable at bytes [%lld, %lld): %s", c->dir,
               CKPT_ARRAY_NAMES[k], (long long)at, (long long)(at + (off_t)bytes), errno ? strerror(errno) : "end of file");
      return;
    }
    if (c->add) ckpt_sums_add(&c->sums, k, global, c->host, n);
    device_copy_to_device(arrays[k] + local, c->host, bytes);
  }
}

// Collective: loads DIR into the shards and verifies it; 0 with *step and *scaler, or -1 with the
// reason (the same decision on every rank).
static int try_load(FSDP* fs, const char* dir, const char* model, int* step, LossScaler* scaler, char* err,
                    size_t errlen) {
  CkptMeta meta;
  CkptSums expected = {0};
  LoadCtx c = {.dir = dir, .fd = {-1, -1, -1}, .add = comm_rank(fs->replica_group) == 0};
  int64_t total = live_total(fs);
  int marker_step = -1, ok = 1;
  if (ckpt_read_meta(fs, dir, model, &meta, c.err, sizeof c.err) == 0 &&
      ckpt_read_marker(dir, &marker_step, total, &expected, c.err, sizeof c.err) == 0 && marker_step != meta.step)
    snprintf(c.err, sizeof c.err, "%s: meta.json says step %d, %s says %d", dir, meta.step, CKPT_MARKER, marker_step);
  for (int k = 0; k < CKPT_ARRAYS && !c.err[0]; k++) {
    char path[PATH_CAP + 64];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_ARRAY_NAMES[k]);
    struct stat sb;
    c.fd[k] = open(path, O_RDONLY);
    if (c.fd[k] < 0) snprintf(c.err, sizeof c.err, "cannot open %s: %s", path, strerror(errno));
    else if (fstat(c.fd[k], &sb) != 0 || sb.st_size != (off_t)total * 4)
      snprintf(c.err, sizeof c.err, "%s has %lld bytes, meta.json says %lld (truncated or from another model)", path,
               (long long)sb.st_size, (long long)total * 4);
  }
  ok = comm_all_true(fs->world, !c.err[0]);
  if (ok) {
    ckpt_sums_init(&c.sums, total);
    c.host = staging(fs);
    for_each_piece(fs, load_piece, &c);
    free(c.host);
    ckpt_sums_combine(&c.sums, fs->world);
    ok = comm_all_true(fs->world, !c.err[0]);
    for (int k = 0; k < CKPT_ARRAYS && ok; k++)
      for (int64_t ch = 0; ch < c.sums.nchunks && ok; ch++)
        if (c.sums.sum[k][ch] != expected.sum[k][ch]) {
          int64_t lo = ch * CKPT_CHUNK * 4, hi = (ch + 1) * CKPT_CHUNK * 4;
          if (hi > total * 4) hi = total * 4;
          snprintf(c.err, sizeof c.err, "%s/%s: bytes [%lld, %lld) do not match their checksum in %s (chunk %lld): "
                   "the file is corrupt", dir, CKPT_ARRAY_NAMES[k], (long long)lo, (long long)hi, CKPT_MARKER, (long long)ch);
          ok = 0;
        }
    ckpt_sums_free(&c.sums);
  }
  for (int k = 0; k < CKPT_ARRAYS; k++)
    if (c.fd[k] >= 0) close(c.fd[k]);
  ckpt_sums_free(&expected);
  if (!ok) {
    snprintf(err, errlen, "%s", c.err[0] ? c.err : "another rank could not read its part (see its message)");
    if (c.err[0] && fs->world_rank != 0) fprintf(stderr, "[rank %d] %s\n", fs->world_rank, c.err);
    return -1;
  }
  *step = meta.step;
  *scaler = meta.scaler;
  return 0;
}

// The candidates for --resume DIR, newest complete first: DIR, DIR.tmp and DIR.old, or the
// step-numbered checkpoints inside a --keep-checkpoints directory. Rank 0 looks; the list is
// broadcast so every rank tries the same ones in the same order.
#define MAX_CANDIDATES 32
typedef struct {
  int n;
  char path[MAX_CANDIDATES][PATH_CAP + 40];
  char note[ERR_CAP];  // what was found but is not a candidate (incomplete saves), for messages
} Candidates;

static void add_candidate(Candidates* c, int* steps, const char* path) {
  int step = -1;
  CkState s = classify(path, &step);
  if (s == CK_ABSENT) return;
  if (s == CK_INCOMPLETE) {
    size_t used = strlen(c->note);
    snprintf(c->note + used, sizeof c->note - used, "%s%s is an interrupted save (no %s)", used ? "; " : "", path, CKPT_MARKER);
    return;
  }
  int at = c->n < MAX_CANDIDATES ? c->n++ : MAX_CANDIDATES - 1;  // keeps the newest
  if (at == MAX_CANDIDATES - 1 && steps[at] > step) return;
  // Insertion by step, newest first; equal steps keep the order added (DIR before .tmp, .old).
  while (at > 0 && steps[at - 1] < step) {
    steps[at] = steps[at - 1];
    memcpy(c->path[at], c->path[at - 1], sizeof c->path[at]);
    at--;
  }
  steps[at] = step;
  snprintf(c->path[at], sizeof c->path[at], "%s", path);
}

static void find_candidates(const char* dir, Candidates* c) {
  int steps[MAX_CANDIDATES];
  char meta[PATH_CAP + 16];
  snprintf(meta, sizeof meta, "%s/meta.json", dir);
  int tmpflag;
  DIR* d = file_exists(meta) ? NULL : opendir(dir);
  struct dirent* e;
  int keep_dir = 0;
  while (d && (e = readdir(d)))
    if (keep_name_step(e->d_name, &tmpflag) >= 0) {
      char path[PATH_CAP + 300];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      add_candidate(c, steps, path);
      keep_dir = 1;
    }
  if (d) closedir(d);
  if (keep_dir) return;
  const char* suffixes[3] = {"", ".tmp", ".old"};
  for (int i = 0; i < 3; i++) {
    char path[PATH_CAP + 8];
    snprintf(path, sizeof path, "%s%s", dir, suffixes[i]);
    add_candidate(c, steps, path);
  }
}

int checkpoint_newest(const char* dir, int nth, char* path, size_t len, char* err, size_t errlen) {
  Candidates* c = xcalloc(1, sizeof(Candidates), "checkpoint candidates");
  find_candidates(dir, c);
  int rc = nth < c->n ? 1 : !c->n && c->note[0] ? -1 : 0;
  if (rc == 1) snprintf(path, len, "%s", c->path[nth]);
  if (rc == -1 && err) snprintf(err, errlen, "no complete, intact checkpoint: %s", c->note);
  free(c);
  return rc;
}

int checkpoint_load(FSDP* fs, const char* dir, const char* model, char* used, size_t usedlen, LossScaler* scaler) {
  Candidates* c = xcalloc(1, sizeof(Candidates), "checkpoint candidates");
  if (fs->world_rank == 0) find_candidates(dir, c);
  comm_broadcast(fs->world, c, sizeof *c, 0);
  char reasons[3 * ERR_CAP] = "", err[ERR_CAP];
  int step = -1;
  LossScaler saved;
  for (int i = 0; i < c->n; i++) {
    if (try_load(fs, c->path[i], model, &step, &saved, err, sizeof err) == 0) {
      if (scaler) *scaler = saved;
      snprintf(used, usedlen, "%s", c->path[i]);
      if (strcmp(c->path[i], dir)) log0("--resume %s: using %s, the newest complete checkpoint there\n", dir, c->path[i]);
      if (reasons[0] || c->note[0]) log0("--resume %s: skipped: %s%s%s\n", dir, reasons, reasons[0] && c->note[0] ? "; " : "", c->note);
      break;
    }
    size_t u = strlen(reasons);
    snprintf(reasons + u, sizeof reasons - u, "%s%s", u ? "; " : "", err);
    step = -1;
  }
  if (step < 0) {
    if (!c->n && !c->note[0])
      fatal("--resume %s: no checkpoint there (none of %s, %s.tmp, %s.old exists, and it holds no step_NNNNNNNN "
            "checkpoints); is it the --save directory of an earlier run?", dir, dir, dir, dir);
    fatal("--resume %s: no complete, intact checkpoint: %s%s%s", dir, reasons, reasons[0] && c->note[0] ? "; " : "", c->note);
  }
  free(c);
  for (int u = 0; u < fs->nunits; u++) fill_zero_f32(fs->kctx, fs->units[u].grad, fs->units[u].shard);
  fsdp_masters_changed(fs);
  device_event_record(fs->params_updated, STREAM_COMPUTE);
  return step;
}
