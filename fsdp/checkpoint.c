// checkpoint.c: checkpoints that any world size can resume.
//
// A checkpoint is a directory: meta.json (model, step, the per-unit parameter tables) and three
// flat fp32 arrays, params.bin, adam_m.bin and adam_v.bin, holding every parameter's live
// elements in global order (units, then table order), without alignment gaps or padding. The
// layout of the files does not depend on F, so a run on any number of ranks reads them back.
//
// Each rank writes and reads only its own byte ranges (the parts of parameters its shard
// holds); replicas (hybrid, none) leave the writing to the first replica. Writes go to
// DIR.tmp, which is renamed to DIR once every rank has finished, so a crash never leaves a
// partial checkpoint under the final name.
#include "fsdp/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsdp/dist.h"

static const char* ARRAYS[3] = {"params.bin", "adam_m.bin", "adam_v.bin"};

static int64_t live_total(const FSDP* fs) {
  int64_t n = 0;
  for (int u = 0; u < fs->nunits; u++)
    for (int i = 0; i < fs->units[u].nparams; i++) n += fs->units[u].params[i].live;
  return n;
}

// Calls fn for every piece of this rank's shard that holds live elements: the shard-local
// start, the element index in the checkpoint's arrays, and the count.
typedef void (*PieceFn)(void* ctx, const Unit* U, int64_t local, int64_t global, int64_t n);
static void for_each_piece(const FSDP* fs, PieceFn fn, void* ctx) {
  int64_t base = 0;  // checkpoint index of the current parameter's first element
  for (int u = 0; u < fs->nunits; u++) {
    const Unit* U = &fs->units[u];
    int64_t lo = (int64_t)fs->shard_rank * U->shard, hi = lo + U->shard;
    for (int i = 0; i < U->nparams; i++) {
      const ParamInfo* p = &U->params[i];
      int64_t a = p->offset > lo ? p->offset : lo;
      int64_t b = p->offset + p->live < hi ? p->offset + p->live : hi;
      if (a < b) fn(ctx, U, a - lo, base + (a - p->offset), b - a);
      base += p->live;
    }
  }
}

typedef struct {
  int fd[3];
  int writing;
  const char* dir;
  float* host;  // host staging for one piece: the device arrays are copied through it
} IoCtx;

static void io_piece(void* vctx, const Unit* U, int64_t local, int64_t global, int64_t n) {
  IoCtx* c = vctx;
  float* arrays[3] = {U->master, U->m, U->v};
  for (int k = 0; k < 3; k++) {
    size_t bytes = (size_t)n * sizeof(float);
    off_t at = (off_t)global * (off_t)sizeof(float);
    if (c->writing) {
      device_copy_to_host(c->host, arrays[k] + local, bytes);
      if (pwrite(c->fd[k], c->host, bytes, at) != (ssize_t)bytes)
        fatal("checkpoint %s: writing %s failed: %s", c->dir, ARRAYS[k], strerror(errno));
    } else {
      ssize_t got = pread(c->fd[k], c->host, bytes, at);
      if (got != (ssize_t)bytes)
        fatal("checkpoint %s: %s is truncated (needed %zu bytes at offset %lld, read %zd); it does not match "
              "meta.json", c->dir, ARRAYS[k], bytes, (long long)at, got);
      device_copy_to_device(arrays[k] + local, c->host, bytes);
    }
  }
}

// Removes a checkpoint directory: its four files, then the directory (which fails, and is
// reported, if it holds anything else: nothing but our own files is ever deleted).
static int remove_checkpoint_dir(const char* dir) {
  struct stat st;
  if (stat(dir, &st) != 0) return 0;  // nothing there
  static const char* files[4] = {"meta.json", "params.bin", "adam_m.bin", "adam_v.bin"};
  for (int i = 0; i < 4; i++) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  return rmdir(dir);
}

static float* staging(const FSDP* fs) {
  int64_t largest = 0;
  for (int u = 0; u < fs->nunits; u++)
    if (fs->units[u].shard > largest) largest = fs->units[u].shard;
  return xmalloc((size_t)largest * sizeof(float), "checkpoint staging");
}

static void write_meta(const FSDP* fs, const char* dir, const char* model, int step, uint64_t seed, int64_t total) {
  char path[4400];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  FILE* f = fopen(path, "w");
  if (!f) fatal("checkpoint: cannot write %s: %s", path, strerror(errno));
  fprintf(f, "{\"format\": \"fsdp.c checkpoint 1\", \"model\": \"%s\", \"step\": %d, \"seed\": %llu, "
             "\"elements\": %lld, \"saved_by_world_size\": %d,\n \"units\": [", model, step,
          (unsigned long long)seed, (long long)total, fs->world_size);
  for (int u = 0; u < fs->nunits; u++) {
    const Unit* U = &fs->units[u];
    fprintf(f, "%s\n  {\"name\": \"%s\", \"params\": [", u ? "," : "", U->name);
    for (int i = 0; i < U->nparams; i++)
      fprintf(f, "%s[\"%s\", %lld]", i ? ", " : "", U->params[i].name, (long long)U->params[i].live);
    fprintf(f, "]}");
  }
  fprintf(f, "\n]}\n");
  if (fclose(f)) fatal("checkpoint: writing %s failed", path);
}

void checkpoint_save(FSDP* fs, const char* dir, const char* model, int step, uint64_t seed) {
  char tmp[4200], old[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", dir);
  snprintf(old, sizeof old, "%s.old", dir);
  int64_t total = live_total(fs);
  int ok = 1;
  if (fs->world_rank == 0) {
    // A fresh temporary directory with full-size arrays that every rank fills by pwrite.
    if (remove_checkpoint_dir(tmp) != 0 || mkdir(tmp, 0755) != 0) ok = 0;
    for (int k = 0; k < 3 && ok; k++) {
      char path[4300];
      snprintf(path, sizeof path, "%s/%s", tmp, ARRAYS[k]);
      int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
      if (fd < 0 || ftruncate(fd, (off_t)total * (off_t)sizeof(float)) != 0) ok = 0;
      if (fd >= 0) close(fd);
    }
    if (ok) write_meta(fs, tmp, model, step, seed, total);
  }
  if (!comm_all_true(fs->world, ok)) fatal("checkpoint: cannot create %s (%s)", tmp, strerror(errno));
  if (comm_rank(fs->replica_group) == 0) {  // one replica of every shard writes it
    IoCtx c = {.writing = 1, .dir = tmp, .host = staging(fs)};
    for (int k = 0; k < 3; k++) {
      char path[4300];
      snprintf(path, sizeof path, "%s/%s", tmp, ARRAYS[k]);
      c.fd[k] = open(path, O_WRONLY);
      if (c.fd[k] < 0) fatal("checkpoint: cannot open %s: %s", path, strerror(errno));
    }
    for_each_piece(fs, io_piece, &c);
    for (int k = 0; k < 3; k++)
      if (fsync(c.fd[k]) != 0 || close(c.fd[k]) != 0) fatal("checkpoint: finishing %s failed", ARRAYS[k]);
    free(c.host);
  }
  comm_barrier(fs->world);
  if (fs->world_rank == 0) {
    // Replace any older checkpoint of that name only now that the new one is complete.
    struct stat st;
    int rc = remove_checkpoint_dir(old);
    if (rc == 0 && stat(dir, &st) == 0) rc = rename(dir, old);
    if (rc != 0 || rename(tmp, dir) != 0) fatal("checkpoint: cannot rename %s to %s: %s", tmp, dir, strerror(errno));
    if (remove_checkpoint_dir(old) != 0) fprintf(stderr, "warning: could not remove %s\n", old);
  }
  comm_barrier(fs->world);
}

// The value of "key": in a small JSON text we wrote ourselves (no general parser needed).
static const char* json_field(const char* text, const char* key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char* p = strstr(text, pat);
  return p ? p + strlen(pat) : NULL;
}

int checkpoint_load(FSDP* fs, const char* dir, const char* model) {
  char path[4300];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  FILE* f = fopen(path, "r");
  if (!f) fatal("--resume: %s has no readable meta.json (%s); is it a checkpoint written by --save?", dir, strerror(errno));
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  const char *fmt = json_field(text, "format"), *mdl = json_field(text, "model"), *st = json_field(text, "step"),
             *el = json_field(text, "elements");
  if (!fmt || strncmp(fmt, "\"fsdp.c checkpoint 1\"", 21) || !mdl || !st || !el)
    fatal("--resume: %s is not an fsdp.c checkpoint (format, model, step or elements missing)", path);
  char saved_model[256] = "";
  sscanf(mdl, "\"%255[^\"]\"", saved_model);
  if (strcmp(saved_model, model))
    fatal("--resume: %s holds model '%s' but this run is --model %s; resume with the same model", dir, saved_model, model);
  // Every parameter's name and size must match this run's table, in order.
  const char* q = strstr(text, "\"units\"");
  for (int u = 0; u < fs->nunits; u++)
    for (int i = 0; i < fs->units[u].nparams; i++) {
      const ParamInfo* p = &fs->units[u].params[i];
      char name[FSDP_NAME_LEN + 8];
      snprintf(name, sizeof name, "[\"%s\", ", p->name);
      q = q ? strstr(q, name) : NULL;
      long long live = q ? atoll(q + strlen(name)) : -1;
      if (live != p->live)
        fatal("--resume: %s does not match this model's parameter table at %s.%s (size %lld, checkpoint %lld)",
              dir, fs->units[u].name, p->name, (long long)p->live, live);
    }
  if (atoll(el) != live_total(fs)) fatal("--resume: %s has %lld elements, this model %lld", dir, atoll(el), (long long)live_total(fs));
  IoCtx c = {.writing = 0, .dir = dir, .host = staging(fs)};
  for (int k = 0; k < 3; k++) {
    snprintf(path, sizeof path, "%s/%s", dir, ARRAYS[k]);
    c.fd[k] = open(path, O_RDONLY);
    if (c.fd[k] < 0) fatal("--resume: cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(c.fd[k], &sb) != 0 || sb.st_size != (off_t)live_total(fs) * (off_t)sizeof(float))
      fatal("--resume: %s has %lld bytes, meta.json says %lld (truncated or from another model)", path,
            (long long)sb.st_size, (long long)live_total(fs) * 4);
  }
  for_each_piece(fs, io_piece, &c);
  for (int k = 0; k < 3; k++) close(c.fd[k]);
  free(c.host);
  for (int u = 0; u < fs->nunits; u++) fill_zero_f32(fs->kctx, fs->units[u].grad, fs->units[u].shard);
  device_event_record(fs->params_updated, STREAM_COMPUTE);
  return atoi(st);
}
