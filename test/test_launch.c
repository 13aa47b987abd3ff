// test_launch.c: launcher environments (OpenMPI, Slurm, torchrun), the run id, and the NCCL id
// handed from rank 0 to other ranks through a file (infra/launch.c).
//
// Environments are injected through the getter, never setenv. The id exchange runs ranks
// 1..3 as forked child processes of this one (rank 0); files go to a fresh temporary
// directory (mkdtemp) that must be empty, and is removed, at the end.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "infra/launch.h"
#include "test/test.h"

static char g_err[4096];
static char g_dir[256];

// ---- injected environments: NULL-terminated "NAME=VALUE" lists --------------------------

static const char* env_get(const char* name, void* ctx) {
  const char* const* kv = ctx;
  size_t n = strlen(name);
  for (; *kv; kv++)
    if (!strncmp(*kv, name, n) && (*kv)[n] == '=') return *kv + n + 1;
  return NULL;
}

static int detect(const char* const* kv, LaunchEnv* e) {
  g_err[0] = '\0';
  memset(e, 0xff, sizeof *e);
  return launch_env_detect_from(e, env_get, (void*)kv, g_err, sizeof g_err);
}

#define ENV(...) ((const char* const[]){__VA_ARGS__, NULL})

static int has(const char* s, const char* sub) { return strstr(s, sub) != NULL; }

static int env_is(const LaunchEnv* e, int r, int w, int lr, int lw, const char* src) {
  return e->rank == r && e->world == w && e->local_rank == lr && e->local_world == lw &&
         e->source && !strcmp(e->source, src);
}

// Expects an error whose message holds each of the given substrings.
static void expect_env_error(const char* name, const char* const* kv, const char* s1,
                             const char* s2) {
  LaunchEnv e;
  int rc = detect(kv, &e);
  EXPECT(name, rc == -1 && has(g_err, s1) && (!s2 || has(g_err, s2)),
         "rc %d, message \"%s\" (wanted \"%s\"%s%s)", rc, g_err, s1, s2 ? " and " : "",
         s2 ? s2 : "");
}

static void test_env(void) {
  LaunchEnv e;
  int rc = detect(ENV("HOME=/root", "PATH=/bin"), &e);
  EXPECT("env: no launcher is one rank", rc == 0 && env_is(&e, 0, 1, 0, 1, "none"),
         "rc %d r%d w%d lr%d lw%d %s", rc, e.rank, e.world, e.local_rank, e.local_world, g_err);

  rc = detect(ENV("OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8",
                  "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=4"),
              &e);
  EXPECT("env: openmpi", rc == 0 && env_is(&e, 5, 8, 1, 4, "openmpi"), "rc %d %s", rc, g_err);

  rc = detect(ENV("SLURM_PROCID=6", "SLURM_NTASKS=16", "SLURM_LOCALID=2",
                  "SLURM_NTASKS_PER_NODE=8", "SLURM_JOB_ID=123"),
              &e);
  EXPECT("env: slurm", rc == 0 && env_is(&e, 6, 16, 2, 8, "slurm"), "rc %d %s", rc, g_err);
  rc = detect(ENV("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=3"), &e);
  EXPECT("env: slurm without SLURM_NTASKS_PER_NODE (local size unknown: 0)",
         rc == 0 && env_is(&e, 3, 4, 3, 0, "slurm"), "rc %d lw %d %s", rc, e.local_world, g_err);

  rc = detect(ENV("RANK=2", "WORLD_SIZE=4", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2"), &e);
  EXPECT("env: torchrun", rc == 0 && env_is(&e, 2, 4, 0, 2, "torchrun"), "rc %d %s", rc, g_err);
  rc = detect(ENV("RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1"), &e);
  EXPECT("env: torchrun without LOCAL_WORLD_SIZE", rc == 0 && env_is(&e, 1, 2, 1, 0, "torchrun"),
         "rc %d %s", rc, g_err);
  rc = detect(ENV("RANK=+1", "WORLD_SIZE=02", "LOCAL_RANK=0"), &e);
  EXPECT("env: signs and leading zeros are integers", rc == 0 && env_is(&e, 1, 2, 0, 0, "torchrun"),
         "rc %d %s", rc, g_err);

  // Priority: OpenMPI, then Slurm, then torchrun.
  rc = detect(ENV("RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "SLURM_PROCID=3", "SLURM_NTASKS=4",
                  "SLURM_LOCALID=3", "OMPI_COMM_WORLD_RANK=7", "OMPI_COMM_WORLD_SIZE=8",
                  "OMPI_COMM_WORLD_LOCAL_RANK=7", "OMPI_COMM_WORLD_LOCAL_SIZE=8"),
              &e);
  EXPECT("env: openmpi before slurm and torchrun", rc == 0 && env_is(&e, 7, 8, 7, 8, "openmpi"),
         "rc %d src %s %s", rc, rc == 0 ? e.source : "-", g_err);
  rc = detect(ENV("RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "SLURM_PROCID=3", "SLURM_NTASKS=4",
                  "SLURM_LOCALID=3"),
              &e);
  EXPECT("env: slurm before torchrun", rc == 0 && env_is(&e, 3, 4, 3, 0, "slurm"),
         "rc %d src %s %s", rc, rc == 0 ? e.source : "-", g_err);
  // Empty values count as unset; an optional variable alone makes no launcher.
  rc = detect(ENV("SLURM_PROCID=", "SLURM_NTASKS=", "RANK=0", "WORLD_SIZE=3", "LOCAL_RANK=0"), &e);
  EXPECT("env: empty values are unset", rc == 0 && env_is(&e, 0, 3, 0, 0, "torchrun"),
         "rc %d %s", rc, g_err);
  rc = detect(ENV("LOCAL_WORLD_SIZE=4", "SLURM_NTASKS_PER_NODE=4"), &e);
  EXPECT("env: optional variables alone are no launcher", rc == 0 && env_is(&e, 0, 1, 0, 1, "none"),
         "rc %d %s", rc, g_err);

  // Inconsistent settings.
  expect_env_error("env error: non-integer RANK", ENV("RANK=abc", "WORLD_SIZE=2", "LOCAL_RANK=0"),
                   "RANK='abc'", "not a decimal integer");
  expect_env_error("env error: trailing junk", ENV("RANK=1", "WORLD_SIZE=2x", "LOCAL_RANK=0"),
                   "WORLD_SIZE='2x'", "integer");
  expect_env_error("env error: blank inside", ENV("RANK= 1", "WORLD_SIZE=2", "LOCAL_RANK=0"),
                   "RANK=' 1'", "integer");
  expect_env_error("env error: overflow",
                   ENV("RANK=0", "WORLD_SIZE=99999999999", "LOCAL_RANK=0"),
                   "WORLD_SIZE='99999999999'", "integer");
  expect_env_error("env error: non-integer SLURM_NTASKS_PER_NODE",
                   ENV("SLURM_PROCID=0", "SLURM_NTASKS=8", "SLURM_LOCALID=0",
                       "SLURM_NTASKS_PER_NODE=4(x2)"),
                   "SLURM_NTASKS_PER_NODE='4(x2)'", NULL);
  expect_env_error("env error: rank >= world", ENV("RANK=4", "WORLD_SIZE=4", "LOCAL_RANK=0"),
                   "RANK=4 is not below WORLD_SIZE=4", NULL);
  expect_env_error("env error: rank >= world (openmpi)",
                   ENV("OMPI_COMM_WORLD_RANK=9", "OMPI_COMM_WORLD_SIZE=8",
                       "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=8"),
                   "OMPI_COMM_WORLD_RANK=9", "OMPI_COMM_WORLD_SIZE=8");
  expect_env_error("env error: negative rank",
                   ENV("SLURM_PROCID=-1", "SLURM_NTASKS=4", "SLURM_LOCALID=0"),
                   "SLURM_PROCID=-1", "negative");
  expect_env_error("env error: negative local rank",
                   ENV("RANK=0", "WORLD_SIZE=4", "LOCAL_RANK=-2"), "LOCAL_RANK=-2", "negative");
  expect_env_error("env error: world < 1", ENV("RANK=0", "WORLD_SIZE=0", "LOCAL_RANK=0"),
                   "WORLD_SIZE=0", "at least 1");
  expect_env_error("env error: local size < 1",
                   ENV("RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=0"),
                   "LOCAL_WORLD_SIZE=0", "at least 1");
  expect_env_error("env error: local_rank >= local_world",
                   ENV("RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"),
                   "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2", NULL);
  expect_env_error("env error: local_rank >= local_world (openmpi)",
                   ENV("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=8",
                       "OMPI_COMM_WORLD_LOCAL_RANK=4", "OMPI_COMM_WORLD_LOCAL_SIZE=4"),
                   "OMPI_COMM_WORLD_LOCAL_RANK=4", "OMPI_COMM_WORLD_LOCAL_SIZE=4");
  expect_env_error("env error: local_rank >= world",
                   ENV("SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=2"), "SLURM_LOCALID=2",
                   "SLURM_NTASKS=2");
  expect_env_error("env error: local size above world",
                   ENV("RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4"),
                   "LOCAL_WORLD_SIZE=4 is above WORLD_SIZE=2", NULL);
  expect_env_error("env error: local size above world (openmpi)",
                   ENV("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                       "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=3"),
                   "OMPI_COMM_WORLD_LOCAL_SIZE=3 is above OMPI_COMM_WORLD_SIZE=2", NULL);
  // Slurm's --ntasks-per-node is a maximum: above SLURM_NTASKS it is clamped, not an error.
  rc = detect(ENV("SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=1",
                  "SLURM_NTASKS_PER_NODE=8"),
              &e);
  EXPECT("env: SLURM_NTASKS_PER_NODE above SLURM_NTASKS is clamped",
         rc == 0 && env_is(&e, 1, 2, 1, 2, "slurm"), "rc %d lw %d %s", rc, e.local_world, g_err);
  expect_env_error("env error: SLURM_LOCALID >= SLURM_NTASKS_PER_NODE",
                   ENV("SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=4",
                       "SLURM_NTASKS_PER_NODE=4"),
                   "SLURM_LOCALID=4 is not below SLURM_NTASKS_PER_NODE=4", NULL);
  expect_env_error("env error: RANK without WORLD_SIZE", ENV("RANK=3"), "RANK=3",
                   "WORLD_SIZE, LOCAL_RANK are not");
  expect_env_error("env error: torchrun without LOCAL_RANK", ENV("RANK=1", "WORLD_SIZE=2"),
                   "LOCAL_RANK is not", "unset");
  expect_env_error("env error: partial openmpi (no local size)",
                   ENV("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2",
                       "OMPI_COMM_WORLD_LOCAL_RANK=0"),
                   "OMPI_COMM_WORLD_LOCAL_SIZE is not", "OpenMPI");
  // A partial higher launcher is an error, not skipped for a complete lower one.
  expect_env_error("env error: partial slurm is not skipped for torchrun",
                   ENV("SLURM_PROCID=0", "RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0"),
                   "SLURM_PROCID=0", "SLURM_NTASKS, SLURM_LOCALID are not");

  // The real environment: whatever it holds, detection must not crash and must be coherent.
  rc = launch_env_detect(&e, g_err, sizeof g_err);
  EXPECT("env: real environment", rc == -1 || (e.world >= 1 && e.rank >= 0 && e.rank < e.world),
         "rc %d %s", rc, g_err);
}

// ---- run id -------------------------------------------------------------------------------

static int run_id(const char* const* kv, int world, char* out, size_t len) {
  g_err[0] = '\0';
  return launch_run_id_from(out, len, world, env_get, (void*)kv, g_err, sizeof g_err);
}

static void test_run_id(void) {
  char id[LAUNCH_RUN_ID_MAX + 1];
  int rc = run_id(ENV("FSDP_RUN_ID=exp-7", "SLURM_JOB_ID=99", "TORCHELASTIC_RUN_ID=abc"), 4, id,
                  sizeof id);
  EXPECT("run id: FSDP_RUN_ID first", rc == 0 && !strcmp(id, "exp-7"), "rc %d '%s' %s", rc, id,
         g_err);
  rc = run_id(ENV("SLURM_JOB_ID=99", "TORCHELASTIC_RUN_ID=abc"), 4, id, sizeof id);
  EXPECT("run id: SLURM_JOB_ID next", rc == 0 && !strcmp(id, "99"), "rc %d '%s' %s", rc, id, g_err);
  rc = run_id(ENV("SLURM_JOB_ID=99", "SLURM_STEP_ID=2", "SLURM_RESTART_COUNT=1"), 4, id,
              sizeof id);
  EXPECT("run id: slurm step and requeue count", rc == 0 && !strcmp(id, "99.2.r1"), "rc %d '%s' %s",
         rc, id, g_err);
  rc = run_id(ENV("TORCHELASTIC_RUN_ID=3f2a-b1", "TORCHELASTIC_RESTART_COUNT=0"), 4, id,
              sizeof id);
  EXPECT("run id: TORCHELASTIC_RUN_ID with restart count", rc == 0 && !strcmp(id, "3f2a-b1.r0"),
         "rc %d '%s' %s", rc, id, g_err);
  rc = run_id(ENV("TORCHELASTIC_RUN_ID=none"), 4, id, sizeof id);
  EXPECT("run id: torchrun's default 'none' is no run id, error names FSDP_RUN_ID",
         rc == -1 && has(g_err, "FSDP_RUN_ID") && has(g_err, "4-rank"), "rc %d %s", rc, g_err);
  rc = run_id(ENV("HOME=/"), 2, id, sizeof id);
  EXPECT("run id: none set for 2 ranks is an error", rc == -1 && has(g_err, "Set FSDP_RUN_ID"), "rc %d %s",
         rc, g_err);
  rc = run_id(ENV("HOME=/"), 1, id, sizeof id);
  EXPECT("run id: one rank needs none", rc == 0 && !strncmp(id, "single.", 7), "rc %d '%s' %s", rc,
         id, g_err);
  rc = run_id(ENV("FSDP_RUN_ID=../etc/x", "SLURM_JOB_ID=5"), 2, id, sizeof id);
  EXPECT("run id: a '/' is refused, not skipped", rc == -1 && has(g_err, "FSDP_RUN_ID") &&
         has(g_err, "../etc/x"), "rc %d %s", rc, g_err);
  rc = run_id(ENV("FSDP_RUN_ID=abcdefgh"), 2, id, 5);
  EXPECT("run id: too small a buffer", rc == -1 && has(g_err, "abcdefgh"), "rc %d %s", rc, g_err);
}

// ---- id exchange --------------------------------------------------------------------------

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char* tpath(const char* name) {
  static char buf[4][512];
  static int k = 0;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static void write_file(const char* path, const void* p, size_t n) {
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) {
    printf("cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

static int count_entries(const char* prefix) {
  DIR* d = opendir(g_dir);
  if (!d) return -1;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        !strncmp(e->d_name, prefix, strlen(prefix)))
      n++;
  closedir(d);
  return n;
}

enum { IDLEN = 128, NCHILD = 3 };

static void test_exchange_fork(void) {
  int fds[NCHILD][2];
  pid_t pids[NCHILD];
  fflush(stdout);  // no buffered output duplicated into the children
  for (int c = 0; c < NCHILD; c++) {
    if (pipe(fds[c])) {
      printf("pipe failed\n");
      exit(1);
    }
    pids[c] = fork();
    if (pids[c] < 0) {
      printf("fork failed\n");
      exit(1);
    }
    if (pids[c] == 0) {  // rank c+1
      close(fds[c][0]);
      unsigned char id[IDLEN];
      memset(id, 0, sizeof id);
      char err[2048] = "";
      double t0 = now_s();
      int rc = launch_exchange_id(g_dir, "job42", c + 1, id, IDLEN, 5.0, err, sizeof err);
      double waited = now_s() - t0;
      if (write(fds[c][1], &rc, sizeof rc) < 0 || write(fds[c][1], &waited, sizeof waited) < 0 ||
          write(fds[c][1], id, IDLEN) < 0 || write(fds[c][1], err, sizeof err) < 0)
        _exit(3);
      _exit(rc == 0 ? 0 : 2);
    }
    close(fds[c][1]);
  }
  // Rank 0 makes its id only now, so the children cannot know it, and writes it late.
  unsigned char id0[IDLEN];
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  for (int i = 0; i < IDLEN; i++) id0[i] = (unsigned char)(rand() & 0xff);
  id0[0] = '\n', id0[1] = 0, id0[2] = 0xff;  // bytes a text reader would trip over
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  unsigned char id0_copy[IDLEN];
  memcpy(id0_copy, id0, IDLEN);
  int rc0 = launch_exchange_id(g_dir, "job42", 0, id0, IDLEN, 5.0, g_err, sizeof g_err);
  EXPECT("exchange: rank 0 writes the id", rc0 == 0 && !memcmp(id0, id0_copy, IDLEN), "rc %d %s",
         rc0, g_err);

  for (int c = 0; c < NCHILD; c++) {
    int rc = -9;
    double waited = 0;
    unsigned char id[IDLEN];
    char err[2048] = "";
    FILE* f = fdopen(fds[c][0], "rb");
    size_t got = fread(&rc, sizeof rc, 1, f) + fread(&waited, sizeof waited, 1, f) +
                 fread(id, IDLEN, 1, f) + fread(err, sizeof err, 1, f);
    fclose(f);
    int status = -1;
    waitpid(pids[c], &status, 0);
    char name[96];
    snprintf(name, sizeof name, "exchange: rank %d gets rank 0's id after waiting", c + 1);
    EXPECT(name,
           got == 4 && rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
               !memcmp(id, id0, IDLEN) && waited >= 0.15 && waited < 2.0,
           "got %zu rc %d status %d waited %.3f s, same bytes %d, err: %s", got, rc, status,
           waited, got == 4 && !memcmp(id, id0, IDLEN), err);
  }
  EXPECT("exchange: the id file is there, no temp file left",
         count_entries("fsdp_id.job42") == 1 && count_entries(".fsdp_id") == 0,
         "%d id files, %d temp files", count_entries("fsdp_id.job42"), count_entries(".fsdp_id"));

  // A late rank finds the file at once.
  unsigned char id[IDLEN] = {0};
  double t0 = now_s();
  int rc = launch_exchange_id(g_dir, "job42", 7, id, IDLEN, 1.0, g_err, sizeof g_err);
  EXPECT("exchange: a late rank reads it at once",
         rc == 0 && !memcmp(id, id0, IDLEN) && now_s() - t0 < 0.1, "rc %d %s", rc, g_err);

  // Rank 0 of a second launch with the same run id refuses to replace it.
  rc = launch_exchange_id(g_dir, "job42", 0, id0, IDLEN, 1.0, g_err, sizeof g_err);
  EXPECT("exchange: rank 0 refuses an existing file for its run id",
         rc == -1 && has(g_err, tpath("fsdp_id.job42")) && has(g_err, "already exists") &&
             has(g_err, "FSDP_RUN_ID"),
         "rc %d %s", rc, g_err);

  rc = launch_id_cleanup(g_dir, "job42", g_err, sizeof g_err);
  EXPECT("exchange: cleanup removes the file", rc == 0 && count_entries("fsdp_id.job42") == 0,
         "rc %d %s", rc, g_err);
  rc = launch_id_cleanup(g_dir, "job42", g_err, sizeof g_err);
  EXPECT("exchange: cleanup of a missing file is fine", rc == 0, "rc %d %s", rc, g_err);
}

static void test_exchange_errors(void) {
  unsigned char id[IDLEN], keep[IDLEN];
  for (int i = 0; i < IDLEN; i++) id[i] = keep[i] = (unsigned char)(i * 7);

  // No rank 0: a timeout within its time plus a little, naming the file and the run id.
  double t0 = now_s();
  int rc = launch_exchange_id(g_dir, "lonely", 1, id, IDLEN, 0.3, g_err, sizeof g_err);
  double dt = now_s() - t0;
  EXPECT("timeout: no rank 0",
         rc == -1 && dt >= 0.29 && dt < 0.3 + 0.25 && has(g_err, tpath("fsdp_id.lonely")) &&
             has(g_err, "'lonely'") && has(g_err, "timed out after 0.3 s") &&
             has(g_err, "--init-dir") && has(g_err, "rank 0 is alive"),
         "rc %d after %.3f s: %s", rc, dt, g_err);
  EXPECT("timeout: the id is left alone", !memcmp(id, keep, IDLEN), "id changed");

  // A stale file of another launch, under its own name: not looked at.
  unsigned char old[IDLEN];
  memset(old, 0x5a, sizeof old);
  rc = launch_exchange_id(g_dir, "old-run", 0, old, IDLEN, 1.0, g_err, sizeof g_err);
  CHECK(rc == 0, "writing old-run: %s", g_err);
  t0 = now_s();
  rc = launch_exchange_id(g_dir, "new-run", 2, id, IDLEN, 0.2, g_err, sizeof g_err);
  dt = now_s() - t0;
  EXPECT("stale: another run id's file is ignored (times out)",
         rc == -1 && dt >= 0.19 && has(g_err, "timed out") && !memcmp(id, keep, IDLEN),
         "rc %d after %.3f s: %s", rc, dt, g_err);
  // The same file under this run's name (its header names the old run): never accepted.
  if (rename(tpath("fsdp_id.old-run"), tpath("fsdp_id.new-run"))) printf("rename failed\n");
  rc = launch_exchange_id(g_dir, "new-run", 2, id, IDLEN, 0.2, g_err, sizeof g_err);
  EXPECT("stale: a file whose header names another run id is never accepted",
         rc == -1 && has(g_err, "timed out") && has(g_err, "'old-run'") &&
             has(g_err, "stale") && !memcmp(id, keep, IDLEN),
         "rc %d: %s", rc, g_err);
  unlink(tpath("fsdp_id.new-run"));

  // Malformed files: refused at once, with the path.
  struct {
    const char* name;
    const char* content;
    int len;  // -1: strlen
    int extra;  // id bytes appended after the content
    const char* want;
  } bad[] = {
      {"malformed: garbage", "hello world\n", -1, 0, "not a valid NCCL id file"},
      {"malformed: empty file", "", 0, 0, "empty"},
      {"malformed: no header line", "fsdp_nccl_id v1 run=bad", -1, 0, "no header line"},
      {"malformed: other version", "fsdp_nccl_id v2 run=bad len=128 fnv=0\n", -1, IDLEN,
       "wrong magic"},
      {"malformed: header fields", "fsdp_nccl_id v1 run=bad length=128\n", -1, IDLEN,
       "malformed header"},
      {"malformed: trailing junk in header", "fsdp_nccl_id v1 run=bad len=128 fnv=0 x\n", -1,
       IDLEN, "malformed header"},
      {"malformed: id length differs", "fsdp_nccl_id v1 run=bad len=64 fnv=0\n", -1, 64,
       "64-byte id"},
      {"malformed: truncated", "fsdp_nccl_id v1 run=bad len=128 fnv=0\n", -1, 100, "truncated"},
      {"malformed: too long", "fsdp_nccl_id v1 run=bad len=128 fnv=0\n", -1, IDLEN + 3,
       "longer than"},
      {"malformed: checksum", "fsdp_nccl_id v1 run=bad len=128 fnv=0123456789abcdef\n", -1, IDLEN,
       "checksum"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t n = bad[i].len < 0 ? strlen(bad[i].content) : (size_t)bad[i].len;
    unsigned char buf[1024];
    memcpy(buf, bad[i].content, n);
    memset(buf + n, 0x33, (size_t)bad[i].extra);
    write_file(tpath("fsdp_id.bad"), buf, n + (size_t)bad[i].extra);
    t0 = now_s();
    rc = launch_exchange_id(g_dir, "bad", 1, id, IDLEN, 2.0, g_err, sizeof g_err);
    dt = now_s() - t0;
    EXPECT(bad[i].name,
           rc == -1 && dt < 0.5 && has(g_err, tpath("fsdp_id.bad")) && has(g_err, bad[i].want) &&
               !memcmp(id, keep, IDLEN),
           "rc %d after %.3f s: %s (wanted \"%s\")", rc, dt, g_err, bad[i].want);
  }
  unlink(tpath("fsdp_id.bad"));

  // Arguments.
  rc = launch_exchange_id(NULL, "x", 1, id, IDLEN, 1.0, g_err, sizeof g_err);
  EXPECT("args: no directory", rc == -1 && has(g_err, "--init-dir"), "rc %d %s", rc, g_err);
  rc = launch_exchange_id("/nonexistent/fsdp_dir", "x", 1, id, IDLEN, 1.0, g_err, sizeof g_err);
  EXPECT("args: missing directory", rc == -1 && has(g_err, "/nonexistent/fsdp_dir") &&
         has(g_err, "shared"), "rc %d %s", rc, g_err);
  rc = launch_exchange_id(g_dir, "a/b", 0, id, IDLEN, 1.0, g_err, sizeof g_err);
  EXPECT("args: a run id with '/'", rc == -1 && has(g_err, "a/b"), "rc %d %s", rc, g_err);
  rc = launch_exchange_id(g_dir, "x", 0, id, 0, 1.0, g_err, sizeof g_err);
  EXPECT("args: id length 0", rc == -1 && has(g_err, "length"), "rc %d %s", rc, g_err);

  // One more round trip at an odd length, with timeout <= 0 meaning a single look.
  unsigned char small[5] = {1, 2, 3, 4, 5}, got[5] = {0};
  rc = launch_exchange_id(g_dir, "r.2_x-y", 0, small, 5, 0, g_err, sizeof g_err);
  int rc1 = launch_exchange_id(g_dir, "r.2_x-y", 1, got, 5, 0, g_err, sizeof g_err);
  EXPECT("exchange: 5-byte id, no wait", rc == 0 && rc1 == 0 && !memcmp(small, got, 5),
         "rc %d/%d %s", rc, rc1, g_err);
  CHECK(launch_id_cleanup(g_dir, "r.2_x-y", g_err, sizeof g_err) == 0, "%s", g_err);
  rc = launch_exchange_id(g_dir, "r.2_x-y", 1, got, 5, 0, g_err, sizeof g_err);
  EXPECT("exchange: timeout 0 is one look", rc == -1 && has(g_err, "timed out"), "rc %d %s", rc,
         g_err);
}

// Another user's files in the exchange directory: a planted id file, links at the names rank 0
// writes and the ranks read, a stale file, and a directory others can write.
static void read_text(const char* path, char* out, size_t cap) {
  FILE* f = fopen(path, "r");
  out[0] = 0;
  if (f) {
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    fclose(f);
  }
}

static void test_planted(void) {
  unsigned char id[IDLEN], got[IDLEN];
  for (int i = 0; i < IDLEN; i++) id[i] = (unsigned char)(i * 13 + 1), got[i] = 0;
  char text[256];

  // A link planted at rank 0's temporary name: refused, never written through.
  write_file(tpath("victim"), "keep\n", 5);
  char tmpname[128];
  snprintf(tmpname, sizeof tmpname, ".fsdp_id.linkrun.tmp.%ld", (long)getpid());
  CHECK(symlink(tpath("victim"), tpath(tmpname)) == 0, "symlink: %s", strerror(errno));
  int rc = launch_exchange_id(g_dir, "linkrun", 0, id, IDLEN, 1.0, g_err, sizeof g_err);
  read_text(tpath("victim"), text, sizeof text);
  EXPECT("planted: a link at rank 0's temporary name is refused, its target untouched",
         rc == -1 && has(g_err, tmpname) && !strcmp(text, "keep\n") && count_entries("fsdp_id.linkrun") == 0,
         "rc %d, target now '%s': %s", rc, text, g_err);
  unlink(tpath(tmpname));

  // A link at the id file's name: rank 0 does not write through it, and no rank reads through it.
  rc = launch_exchange_id(g_dir, "good", 0, id, IDLEN, 1.0, g_err, sizeof g_err);
  CHECK(rc == 0, "writing good: %s", g_err);
  CHECK(symlink(tpath("fsdp_id.good"), tpath("fsdp_id.linked")) == 0, "symlink: %s", strerror(errno));
  rc = launch_exchange_id(g_dir, "linked", 1, got, IDLEN, 0.2, g_err, sizeof g_err);
  EXPECT("planted: a link at the id file's name is not read", rc == -1 && has(g_err, "symbolic link") &&
         memcmp(got, id, IDLEN), "rc %d: %s", rc, g_err);
  rc = launch_exchange_id(g_dir, "linked", 0, id, IDLEN, 1.0, g_err, sizeof g_err);
  EXPECT("planted: rank 0 refuses a link at the id file's name", rc == -1 && has(g_err, "already exists"), "rc %d: %s",
         rc, g_err);
  unlink(tpath("fsdp_id.linked"));

  // A stale file: written (by its mtime) long before this rank started.
  struct timespec times[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
  CHECK(utimensat(AT_FDCWD, tpath("fsdp_id.good"), times, 0) == 0, "utimensat: %s", strerror(errno));
  rc = launch_exchange_id(g_dir, "good", 1, got, IDLEN, 0.2, g_err, sizeof g_err);
  EXPECT("planted: an id file written an hour before this rank started is refused as stale",
         rc == -1 && has(g_err, "stale") && has(g_err, "3600 s before") && memcmp(got, id, IDLEN), "rc %d: %s", rc, g_err);

  // Another user's id file (root can make one): refused at once.
  if (geteuid() == 0) {
    CHECK(utimensat(AT_FDCWD, tpath("fsdp_id.good"), NULL, 0) == 0, "utimensat: %s", strerror(errno));
    CHECK(chown(tpath("fsdp_id.good"), 65534, 65534) == 0, "chown: %s", strerror(errno));
    rc = launch_exchange_id(g_dir, "good", 1, got, IDLEN, 0.2, g_err, sizeof g_err);
    EXPECT("planted: an id file owned by another user is refused",
           rc == -1 && has(g_err, "owned by uid 65534") && memcmp(got, id, IDLEN), "rc %d: %s", rc, g_err);
  } else {
    printf("note: not root, so no file of another user can be made: the planted-owner case is not run\n");
  }
  unlink(tpath("fsdp_id.good"));
  unlink(tpath("victim"));

  // A directory other users can write: refused on every rank, with the fix.
  char open_dir[512];
  snprintf(open_dir, sizeof open_dir, "%s/shared", g_dir);
  CHECK(mkdir(open_dir, 0700) == 0 && chmod(open_dir, 0777) == 0, "mkdir: %s", strerror(errno));
  rc = launch_exchange_id(open_dir, "x", 0, id, IDLEN, 0.2, g_err, sizeof g_err);
  int rc1 = launch_exchange_id(open_dir, "x", 1, got, IDLEN, 0.2, g_err, sizeof g_err);
  EXPECT("planted: a directory writable by others is refused, saying how to make one",
         rc == -1 && rc1 == -1 && has(g_err, "writable by other users") && has(g_err, "mkdir -m 700"), "rc %d/%d: %s", rc,
         rc1, g_err);
  rmdir(open_dir);
}

int main(void) {
  TEST_RUN(test_env());
  TEST_RUN(test_run_id());

  snprintf(g_dir, sizeof g_dir, "/tmp/fsdp_test_launch_XXXXXX");
  if (!mkdtemp(g_dir)) {
    printf("mkdtemp failed\n");
    return 1;
  }
  TEST_RUN(test_exchange_fork());
  TEST_RUN(test_exchange_errors());
  TEST_RUN(test_planted());
  launch_id_cleanup(g_dir, "old-run", g_err, sizeof g_err);
  EXPECT("no files left behind (no temp files either)", count_entries("") == 0,
         "%d entries left in %s", count_entries(""), g_dir);
  if (rmdir(g_dir)) printf("could not remove %s\n", g_dir);
  return test_summary();
}
