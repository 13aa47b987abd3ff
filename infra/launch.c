// launch.c: rank and world size from a launcher's environment, the run id, and the NCCL id
// handed from rank 0 to the other ranks through a file in a shared directory. See launch.h.
#include "infra/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "infra/clock.h"
#include "infra/files.h"

static const char* get_nonempty(LaunchGetenv get, void* ctx, const char* name) {
  const char* v = get(name, ctx);
  return (v && v[0]) ? v : NULL;
}

static const char* from_getenv(const char* name, void* ctx) {
  (void)ctx;
  return getenv(name);
}

// ---- launcher environment -----------------------------------------------------------------

typedef struct {
  const char* name;  // LaunchEnv.source
  const char* what;  // for messages
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
  int local_world_optional;
  int local_world_is_max;  // local_world is a per-node maximum: clamped to the world size
} Launcher;

static const Launcher kLaunchers[] = {
    {"openmpi", "OpenMPI (mpirun) launch", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", 0, 0},
    {"slurm", "Slurm (srun) launch", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
     "SLURM_NTASKS_PER_NODE", 1, 1},
    {"torchrun", "torchrun-style launch", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
     1, 0},
};

static const char kOrderHint[] =
    "(the first launcher whose variables are set is used, in the order OpenMPI, Slurm, "
    "torchrun; unset any left over from another launch)";

// A decimal integer that fits an int, with an optional sign and nothing else around it.
static int parse_int(const char* s, int* out) {
  const char* p = s;
  if (*p == '+' || *p == '-') p++;
  if (*p < '0' || *p > '9') return -1;
  for (const char* q = p; *q; q++)
    if (*q < '0' || *q > '9') return -1;
  errno = 0;
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < INT_MIN || v > INT_MAX) return -1;
  *out = (int)v;
  return 0;
}

int launch_env_detect_from(LaunchEnv* out, LaunchGetenv get, void* ctx, char* err,
                           size_t errlen) {
  if (!out || !get) return set_error(err, errlen, "launch_env_detect: no output or no getter");
  const size_t nl = sizeof kLaunchers / sizeof kLaunchers[0];
  for (size_t i = 0; i < nl; i++) {
    const Launcher* L = &kLaunchers[i];
    const char* names[4] = {L->rank, L->world, L->local_rank, L->local_world};
    const char* vals[4];
    int required[4] = {1, 1, 1, !L->local_world_optional};
    int any = 0;
    for (int k = 0; k < 4; k++) {
      vals[k] = get_nonempty(get, ctx, names[k]);
      if (vals[k] && required[k]) any = 1;
    }
    if (!any) continue;

    // A partial set: name what is set and what is missing.
    char set_list[512] = "", missing[256] = "";
    int nmissing = 0, nset = 0;
    for (int k = 0; k < 4; k++) {
      char* dst = vals[k] ? set_list : missing;
      size_t cap = vals[k] ? sizeof set_list : sizeof missing;
      size_t used = strlen(dst);
      if (vals[k]) {
        snprintf(dst + used, cap - used, "%s%s=%s", used ? ", " : "", names[k], vals[k]);
        nset++;
      } else if (required[k]) {
        snprintf(dst + used, cap - used, "%s%s", used ? ", " : "", names[k]);
        nmissing++;
      }
    }
    if (nmissing) {
      char all[256];
      if (L->local_world_optional)
        snprintf(all, sizeof all, "%s, %s and %s (%s optional)", L->rank, L->world,
                 L->local_rank, L->local_world);
      else
        snprintf(all, sizeof all, "all of %s, %s, %s and %s", L->rank, L->world, L->local_rank,
                 L->local_world);
      return set_error(err, errlen,
                       "%s: incomplete environment: %s %s set but %s %s not; a launch sets %s. Set "
                       "the missing variable%s, or unset the others %s",
                       L->what, set_list, nset > 1 ? "are" : "is", missing,
                       nmissing > 1 ? "are" : "is", all, nmissing > 1 ? "s" : "", kOrderHint);
    }

    int v[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) {
      if (!vals[k]) continue;
      if (parse_int(vals[k], &v[k]))
        return set_error(err, errlen,
                         "%s: %s='%s' is not a decimal integer; set it to a whole number or unset "
                         "it %s",
                         L->what, names[k], vals[k], kOrderHint);
    }
    int rank = v[0], world = v[1], lrank = v[2], lworld = vals[3] ? v[3] : 0;
    if (world < 1)
      return set_error(err, errlen, "%s: %s=%d is not a valid world size (it must be at least 1)",
                       L->what, L->world, world);
    if (rank < 0)
      return set_error(err, errlen, "%s: %s=%d is negative; ranks count from 0 to %s-1 (%d)",
                       L->what, L->rank, rank, L->world, world - 1);
    if (rank >= world)
      return set_error(err, errlen,
                       "%s: %s=%d is not below %s=%d; every process needs a distinct %s in 0..%d "
                       "(raise %s or fix %s)",
                       L->what, L->rank, rank, L->world, world, L->rank, world - 1, L->world,
                       L->rank);
    if (lrank < 0)
      return set_error(err, errlen, "%s: %s=%d is negative; local ranks count from 0", L->what,
                       L->local_rank, lrank);
    if (lrank >= world)
      return set_error(err, errlen, "%s: %s=%d is not below %s=%d; a local rank is below the world "
                       "size", L->what, L->local_rank, lrank, L->world, world);
    if (vals[3]) {
      if (lworld < 1)
        return set_error(err, errlen, "%s: %s=%d is not a valid local size (it must be at least 1)",
                         L->what, L->local_world, lworld);
      // Slurm's --ntasks-per-node is a maximum when --ntasks is smaller (and an sbatch value
      // is inherited by srun steps), so it may exceed SLURM_NTASKS: no node runs more than all.
      if (lworld > world && L->local_world_is_max) lworld = world;
      if (lworld > world)
        return set_error(err, errlen,
                         "%s: %s=%d is above %s=%d; a node cannot run more ranks than the whole job",
                         L->what, L->local_world, lworld, L->world, world);
      if (lrank >= lworld)
        return set_error(err, errlen,
                         "%s: %s=%d is not below %s=%d; local ranks on a node run 0..%d (fix %s or "
                         "%s)",
                         L->what, L->local_rank, lrank, L->local_world, lworld, lworld - 1,
                         L->local_rank, L->local_world);
    }
    out->rank = rank;
    out->world = world;
    out->local_rank = lrank;
    out->local_world = lworld;
    out->source = L->name;
    return 0;
  }
  out->rank = 0;
  out->world = 1;
  out->local_rank = 0;
  out->local_world = 1;
  out->source = "none";
  return 0;
}

int launch_env_detect(LaunchEnv* out, char* err, size_t errlen) {
  return launch_env_detect_from(out, from_getenv, NULL, err, errlen);
}

// ---- run id -------------------------------------------------------------------------------

// Letters, digits, '.', '_', '-'; 1..LAUNCH_RUN_ID_MAX characters; not "." or "..".
static int run_id_ok(const char* s) {
  size_t n = strlen(s);
  if (n == 0 || n > LAUNCH_RUN_ID_MAX) return 0;
  if (!strcmp(s, ".") || !strcmp(s, "..")) return 0;
  for (const char* p = s; *p; p++) {
    char c = *p;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

static int bad_run_id(char* err, size_t errlen, const char* from, const char* value) {
  return set_error(err, errlen,
                   "run id '%s' (from %s) cannot name the id file: use 1 to %d letters, digits, '.', "
                   "'_' or '-' (set FSDP_RUN_ID to such a value)",
                   value, from, LAUNCH_RUN_ID_MAX);
}

int launch_run_id_from(char* out, size_t len, int world, LaunchGetenv get, void* ctx, char* err,
                       size_t errlen) {
  if (!out || !len || !get) return set_error(err, errlen, "launch_run_id: no output or no getter");
  char buf[4 * LAUNCH_RUN_ID_MAX];
  const char* from = NULL;
  const char* v;
  if ((v = get_nonempty(get, ctx, "FSDP_RUN_ID"))) {
    from = "FSDP_RUN_ID";
    snprintf(buf, sizeof buf, "%s", v);
  } else if ((v = get_nonempty(get, ctx, "SLURM_JOB_ID"))) {
    // One job runs several srun steps, and a requeued job keeps its id: both go into the id.
    from = "SLURM_JOB_ID, SLURM_STEP_ID, SLURM_RESTART_COUNT";
    const char* step = get_nonempty(get, ctx, "SLURM_STEP_ID");
    const char* restart = get_nonempty(get, ctx, "SLURM_RESTART_COUNT");
    snprintf(buf, sizeof buf, "%.*s%s%.*s%s%.*s", LAUNCH_RUN_ID_MAX + 1, v, step ? "." : "",
             LAUNCH_RUN_ID_MAX, step ? step : "", restart ? ".r" : "", LAUNCH_RUN_ID_MAX,
             restart ? restart : "");
  } else if ((v = get_nonempty(get, ctx, "TORCHELASTIC_RUN_ID")) && strcmp(v, "none") != 0) {
    // "none" is torchrun's default --rdzv-id: the same for every launch, so no use here.
    from = "TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT";
    const char* restart = get_nonempty(get, ctx, "TORCHELASTIC_RESTART_COUNT");
    snprintf(buf, sizeof buf, "%.*s%s%.*s", LAUNCH_RUN_ID_MAX + 1, v, restart ? ".r" : "",
             LAUNCH_RUN_ID_MAX, restart ? restart : "");
  } else if (world <= 1) {
    from = "this process";
    snprintf(buf, sizeof buf, "single.%ld", (long)getpid());
  } else {
    return set_error(err, errlen,
                     "no run id for a %d-rank launch: the ranks must agree on one to find rank 0's "
                     "NCCL id file, and none of FSDP_RUN_ID, SLURM_JOB_ID, TORCHELASTIC_RUN_ID (other "
                     "than \"none\") is set. Set FSDP_RUN_ID to the same value on every rank, unique "
                     "to this launch (e.g. FSDP_RUN_ID=$(date +%%s)-$$ exported before the launcher)",
                     world);
  }
  if (!run_id_ok(buf)) return bad_run_id(err, errlen, from, buf);
  if (strlen(buf) + 1 > len)
    return set_error(err, errlen, "launch_run_id: run id '%s' does not fit %zu bytes", buf, len);
  memcpy(out, buf, strlen(buf) + 1);
  return 0;
}

int launch_run_id(char* out, size_t len, int world, char* err, size_t errlen) {
  return launch_run_id_from(out, len, world, from_getenv, NULL, err, errlen);
}

// ---- id file ------------------------------------------------------------------------------

#define ID_MAGIC "fsdp_nccl_id v1 "
#define ID_HEADER_MAX (64 + LAUNCH_RUN_ID_MAX)

int launch_id_path(char* out, size_t len, const char* dir, const char* run_id) {
  int n = snprintf(out, len, "%s/fsdp_id.%s", dir, run_id);
  return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

static uint64_t fnv1a64(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}


static void sleep_s(double s) {
  if (s <= 0) return;
  struct timespec ts;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// Checks the arguments common to writer and readers; fills path.
static int check_args(const char* dir, const char* run_id, int rank, const unsigned char* id,
                      size_t idlen, char* path, size_t pathlen, char* err, size_t errlen) {
  if (!dir || !dir[0])
    return set_error(err, errlen, "no directory for the NCCL id exchange: give --init-dir DIR "
                             "(a directory every rank sees) or set NCCL_COMM_ID");
  if (!run_id || !run_id_ok(run_id))
    return bad_run_id(err, errlen, "the caller", run_id ? run_id : "(null)");
  if (rank < 0) return set_error(err, errlen, "id exchange: rank %d is negative", rank);
  if (!id || idlen == 0 || idlen > LAUNCH_ID_MAX)
    return set_error(err, errlen, "id exchange: id length %zu is not in 1..%d", idlen, LAUNCH_ID_MAX);
  struct stat st;
  if (stat(dir, &st) != 0)
    return set_error(err, errlen,
                     "--init-dir %s: %s (rank %d); it must exist and be the same shared directory on "
                     "every rank",
                     dir, strerror(errno), rank);
  if (!S_ISDIR(st.st_mode))
    return set_error(err, errlen, "--init-dir %s is not a directory (rank %d)", dir, rank);
  // Only this user may create files there: anyone else could plant an id file the ranks would
  // take, or a link at the name rank 0 writes.
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
    return set_error(err, errlen,
                     "--init-dir %s (rank %d) is %s: another user could plant an id file or a link there. Give "
                     "a directory of your own that only you can write, e.g. mkdir -m 700 ~/fsdp-init on a file "
                     "system every node sees",
                     dir, rank, st.st_uid != geteuid() ? "owned by another user" : "writable by other users");
  if (launch_id_path(path, pathlen, dir, run_id))
    return set_error(err, errlen, "--init-dir %s: path too long", dir);
  return 0;
}

static int write_id(const char* dir, const char* run_id, const char* path,
                    const unsigned char* id, size_t idlen, char* err, size_t errlen) {
  struct stat st;
  if (lstat(path, &st) == 0)
    return set_error(err, errlen,
                     "NCCL id file %s already exists: a launch with the same run id '%s' left it (or "
                     "is running), and other ranks may have read its stale id. Remove the file, and "
                     "give every launch its own run id (FSDP_RUN_ID)",
                     path, run_id);
  char tmp[PATH_MAX + 64];
  int n = snprintf(tmp, sizeof tmp, "%s/.fsdp_id.%s.tmp.%ld", dir, run_id, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof tmp) return set_error(err, errlen, "--init-dir %s: path too long", dir);

  size_t total = ID_HEADER_MAX + idlen;
  unsigned char* buf = malloc(total);
  if (!buf) return set_error(err, errlen, "out of host memory for the NCCL id file");
  int h = snprintf((char*)buf, ID_HEADER_MAX, ID_MAGIC "run=%s len=%zu fnv=%016llx\n", run_id,
                   idlen, (unsigned long long)fnv1a64(id, idlen));
  memcpy(buf + h, id, idlen);

  // O_EXCL | O_NOFOLLOW: a file or link already at this name is refused, never written
  // through; 0600: the id lets a process join the job, so only this user reads it.
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    free(buf);
    return set_error(err, errlen, "cannot create %s for the NCCL id: %s (%s)", tmp, strerror(e),
                     e == EEXIST ? "something is already at that name; it is not touched: remove it"
                            : "is --init-dir writable?");
  }
  const char* step = "write";
  int bad = file_pwrite_all(fd, buf, (size_t)h + idlen, 0);
  if (!bad) step = "fsync", bad = fsync(fd);
  int e = errno;
  if (close(fd) != 0 && !bad) step = "close", bad = -1, e = errno;
  free(buf);
  if (!bad) {
    step = "rename";
    if (rename_noreplace(tmp, path) != 0) bad = -1, e = errno;
  }
  if (bad) {
    unlink(tmp);
    return set_error(err, errlen, "writing the NCCL id file %s: %s failed: %s", path, step,
                     strerror(e));
  }
  dir_sync(dir);  // makes the rename itself durable
  return 0;
}

// One look at the file. 1: the id for run_id was read into id. 0: not there yet, or it holds
// another run id (copied into other). -1: an error (message in err). Only a regular file of
// this user, written after `oldest` (wall-clock seconds), is read: a link, another user's
// file or a file older than this launch is refused.
static int try_read(const char* path, const char* run_id, unsigned char* id, size_t idlen,
                    double oldest, char* other, size_t otherlen, char* err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    return set_error(err, errlen, "cannot open the NCCL id file %s: %s%s", path, strerror(errno),
                     errno == ELOOP ? " (a symbolic link is there, not an id file rank 0 wrote: remove it)" : "");
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    int regular = S_ISREG(st.st_mode);
    close(fd);
    if (!regular)
      return set_error(err, errlen, "the NCCL id file %s is not a regular file: remove it", path);
    return set_error(err, errlen,
                     "the NCCL id file %s is owned by uid %ld, not by this user (uid %ld): rank 0 of this "
                     "launch did not write it. Remove it, and give --init-dir a directory only you can write",
                     path, (long)st.st_uid, (long)geteuid());
  }
  if ((double)st.st_mtime < oldest) {
    close(fd);
    return set_error(err, errlen,
                     "the NCCL id file %s is stale: it was written %.0f s before this rank started, by an "
                     "earlier launch with the same run id '%s'. Remove it, and give every launch its own "
                     "run id (FSDP_RUN_ID)",
                     path, oldest - (double)st.st_mtime + LAUNCH_STALE_S, run_id);
  }
  size_t cap = ID_HEADER_MAX + idlen + 1;  // one more byte: a longer file shows as such
  unsigned char* buf = malloc(cap);
  if (!buf) {
    close(fd);
    return set_error(err, errlen, "out of host memory for the NCCL id file");
  }
  size_t got = 0;
  while (got < cap) {
    ssize_t r = read(fd, buf + got, cap - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      free(buf);
      return set_error(err, errlen, "reading the NCCL id file %s: %s", path, strerror(e));
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  close(fd);

  int rc = -1;
  const size_t magic_len = strlen(ID_MAGIC);
  unsigned char* nl = memchr(buf, '\n', got < ID_HEADER_MAX ? got : ID_HEADER_MAX);
  if (got < magic_len || memcmp(buf, ID_MAGIC, magic_len) != 0 || !nl) {
    set_error(err, errlen,
              "%s is not a valid NCCL id file (%s; expected a first line \"%srun=<run id> len=<n> "
              "fnv=<hex>\"): remove it, and keep --init-dir for this purpose",
              path, got == 0 ? "it is empty" : !nl ? "no header line" : "wrong magic", ID_MAGIC);
    goto done;
  }
  *nl = '\0';
  const char* hdr = (const char*)buf + magic_len;
  char frun[LAUNCH_RUN_ID_MAX + 2];
  unsigned long long flen = 0, fsum = 0;
  int consumed = -1;
  if (strncmp(hdr, "run=", 4) != 0 ||
      sscanf(hdr, "run=%129[^ ] len=%llu fnv=%16llx%n", frun, &flen, &fsum, &consumed) != 3 ||
      consumed < 0 || hdr[consumed] != '\0') {
    set_error(err, errlen,
              "%s is not a valid NCCL id file: malformed header \"%.200s\" (expected \"%srun=<run "
              "id> len=<n> fnv=<hex>\"); remove it",
              path, (const char*)buf, ID_MAGIC);
    goto done;
  }
  if (strcmp(frun, run_id) != 0) {  // another launch's file: never ours
    snprintf(other, otherlen, "%s", frun);
    rc = 0;
    goto done;
  }
  if (flen != idlen) {
    set_error(err, errlen,
              "NCCL id file %s (run id '%s') holds a %llu-byte id, this rank expects %zu bytes: do "
              "all ranks run the same build?",
              path, run_id, flen, idlen);
    goto done;
  }
  size_t body = got - (size_t)(nl + 1 - buf);
  if (body != idlen) {
    set_error(err, errlen,
              "NCCL id file %s (run id '%s') is %s: the header says %zu id bytes, the file has %s%zu; "
              "remove it and restart the launch",
              path, run_id, body < idlen ? "truncated" : "longer than its header says", idlen,
              body > idlen ? "more than " : "", body > idlen ? idlen : body);
    goto done;
  }
  if (fnv1a64(nl + 1, idlen) != (uint64_t)fsum) {
    set_error(err, errlen,
              "NCCL id file %s (run id '%s') fails its checksum: it is corrupted; remove it and "
              "restart the launch",
              path, run_id);
    goto done;
  }
  memcpy(id, nl + 1, idlen);
  rc = 1;
done:
  free(buf);
  return rc;
}

int launch_exchange_id(const char* dir, const char* run_id, int rank, unsigned char* id,
                       size_t idlen, double timeout_s, char* err, size_t errlen) {
  char path[PATH_MAX + 64];
  if (check_args(dir, run_id, rank, id, idlen, path, sizeof path, err, errlen)) return -1;
  if (rank == 0) return write_id(dir, run_id, path, id, idlen, err, errlen);

  const double t0 = now_seconds();
  const double deadline = t0 + (timeout_s > 0 ? timeout_s : 0);
  // Rank 0 writes the file at most about as long before this rank starts as the launch's ranks
  // start apart; a file written LAUNCH_STALE_S before this rank started is another launch's.
  const double oldest = (double)time(NULL) - LAUNCH_STALE_S;
  double delay = 0.010;
  char other[LAUNCH_RUN_ID_MAX + 2] = "";
  for (;;) {
    int r = try_read(path, run_id, id, idlen, oldest, other, sizeof other, err, errlen);
    if (r == 1) return 0;
    if (r < 0) return -1;
    double left = deadline - now_seconds();
    if (left <= 0) break;
    sleep_s(delay < left ? delay : left);
    delay = delay * 1.5 < 0.050 ? delay * 1.5 : 0.050;
  }
  char seen[LAUNCH_RUN_ID_MAX + 160] = "";
  if (other[0])
    snprintf(seen, sizeof seen,
             " (the file there is for another run id, '%s': a stale file from an earlier "
             "launch, which is never used)",
             other);
  return set_error(err, errlen,
                   "rank %d timed out after %g s waiting for rank 0's NCCL id file %s (run id "
                   "'%s')%s. Check that every rank has the same --init-dir and that it is one "
                   "directory shared by all nodes; that every rank has the same run id (FSDP_RUN_ID, "
                   "else SLURM_JOB_ID, else TORCHELASTIC_RUN_ID); that rank 0 is alive and got this "
                   "far (see its output); on a network file system new files can take a while to "
                   "show, so a longer timeout may help",
                   rank, timeout_s > 0 ? timeout_s : 0.0, path, run_id, seen);
}

int launch_id_cleanup(const char* dir, const char* run_id, char* err, size_t errlen) {
  char path[PATH_MAX + 64];
  if (!dir || !dir[0] || !run_id || !run_id_ok(run_id))
    return set_error(err, errlen, "launch_id_cleanup: no directory or an invalid run id");
  if (launch_id_path(path, sizeof path, dir, run_id))
    return set_error(err, errlen, "--init-dir %s: path too long", dir);
  if (unlink(path) != 0 && errno != ENOENT)
    return set_error(err, errlen, "cannot remove the NCCL id file %s: %s", path, strerror(errno));
  return 0;
}
