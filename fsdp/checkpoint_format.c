// checkpoint_format.c: meta.json, the completion marker and the chunk checksums (see
// checkpoint_format.h). Every reader here validates, through the strict JSON reader
// (infra/json.h): a file that is not JSON, or a field that is missing, twice, not a whole
// number, out of range or inconsistent is refused with the file, the field and the reason.
#include "fsdp/checkpoint_format.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infra/dist.h"
#include "infra/json.h"
#include "infra/files.h"

#define ERR_CAP 4096

const char* const CKPT_ARRAY_NAMES[CKPT_ARRAYS] = {"params.bin", "adam_m.bin", "adam_v.bin"};

// ---- checksums ------------------------------------------------------------------------------

static uint64_t mix64(uint64_t z) {  // splitmix64's finalizer: a bijection of 64 bits
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void ckpt_sums_init(CkptSums* s, int64_t elements) {
  s->elements = elements;
  s->nchunks = (elements + CKPT_CHUNK - 1) / CKPT_CHUNK;
  for (int k = 0; k < CKPT_ARRAYS; k++)
    s->sum[k] = xcalloc(s->nchunks ? s->nchunks : 1, sizeof(uint64_t), "checkpoint checksums");
}

void ckpt_sums_free(CkptSums* s) {
  for (int k = 0; k < CKPT_ARRAYS; k++) free(s->sum[k]);
  memset(s, 0, sizeof *s);
}

void ckpt_sums_add(CkptSums* s, int k, int64_t global, const float* values, int64_t n) {
  int64_t i = 0;
  while (i < n) {  // one chunk at a time
    int64_t e0 = global + i, c = e0 / CKPT_CHUNK, end = (c + 1) * CKPT_CHUNK - global;
    if (end > n) end = n;
    uint64_t acc = 0;  // unsigned: wraps mod 2^64, so the order of the additions never matters
#pragma omp parallel for reduction(+ : acc) schedule(static)
    for (int64_t j = i; j < end; j++) {
      uint32_t bits;
      memcpy(&bits, &values[j], 4);
      acc += mix64(((uint64_t)(global + j) << 32) ^ bits);
    }
    s->sum[k][c] += acc;
    i = end;
  }
}

void ckpt_sums_combine(CkptSums* s, Comm* world) {
  // Summed as 32-bit halves in int64 words: no signed overflow for any number of ranks below
  // 2^31, and (sum of highs) << 32 + (sum of lows) is the sum mod 2^64.
  int64_t n = s->nchunks * CKPT_ARRAYS;
  int64_t* halves = xmalloc((size_t)(2 * n > 0 ? 2 * n : 1) * sizeof(int64_t), "checkpoint checksums");
  for (int k = 0; k < CKPT_ARRAYS; k++)
    for (int64_t c = 0; c < s->nchunks; c++) {
      halves[2 * (k * s->nchunks + c)] = (int64_t)(s->sum[k][c] & 0xffffffffu);
      halves[2 * (k * s->nchunks + c) + 1] = (int64_t)(s->sum[k][c] >> 32);
    }
  comm_all_reduce(world, halves, (size_t)(2 * n), DT_I64);
  for (int k = 0; k < CKPT_ARRAYS; k++)
    for (int64_t c = 0; c < s->nchunks; c++)
      s->sum[k][c] = (uint64_t)halves[2 * (k * s->nchunks + c)] + ((uint64_t)halves[2 * (k * s->nchunks + c) + 1] << 32);
  free(halves);
}

// ---- small files ----------------------------------------------------------------------------

// Writes text to path through path.part, fsynced, then renamed: a reader sees all or nothing.
static int write_file_atomic(const char* path, const char* text, char* err, size_t errlen) {
  char tmp[4400];
  snprintf(tmp, sizeof tmp, "%s.part", path);
  int fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) return set_error(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
  if (file_pwrite_all(fd, text, strlen(text), 0)) {
    int e = errno;
    close(fd);
    unlink(tmp);
    return set_error(err, errlen, "writing %s failed: %s", tmp, strerror(e));
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    int e = errno;
    unlink(tmp);
    return set_error(err, errlen, "writing %s failed: %s", tmp, strerror(e));
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return set_error(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(e));
  }
  return 0;
}

// ---- meta.json ------------------------------------------------------------------------------

int ckpt_write_meta(const FSDP* fs, const char* dir, const char* model, int step, uint64_t seed,
                    const LossScaler* scaler, const char* settings, int64_t elements, char* err, size_t errlen) {
  size_t cap = 4096 + (settings ? strlen(settings) : 0), len = 0;
  for (int u = 0; u < fs->nunits; u++) cap += 64 + (size_t)fs->units[u].nparams * (FSDP_NAME_LEN + 32);
  char* text = xmalloc(cap, "checkpoint meta.json");
  len += (size_t)snprintf(text + len, cap - len,
                          "{\"format\": \"%s\", \"model\": \"%s\", \"step\": %d, \"seed\": %llu, "
                          "\"elements\": %lld, \"saved_by_world_size\": %d,",
                          CKPT_FORMAT, model, step, (unsigned long long)seed, (long long)elements, fs->world_size);
  // A dynamic scale is whole (a power of two from 1 to 2^24), so it is written as an integer.
  if (scaler && scaler->dynamic)
    len += (size_t)snprintf(text + len, cap - len, "\n \"loss_scale\": %lld, \"loss_scale_good\": %d,",
                            (long long)scaler->scale, scaler->good);
  if (settings) len += (size_t)snprintf(text + len, cap - len, "\n \"options\": %s,", settings);
  len += (size_t)snprintf(text + len, cap - len, "\n \"units\": [");
  for (int u = 0; u < fs->nunits; u++) {
    const Unit* U = &fs->units[u];
    len += (size_t)snprintf(text + len, cap - len, "%s\n  {\"name\": \"%s\", \"params\": [", u ? "," : "", U->name);
    for (int i = 0; i < U->nparams; i++)
      len += (size_t)snprintf(text + len, cap - len, "%s[\"%s\", %lld]", i ? ", " : "", U->params[i].name,
                              (long long)U->params[i].live);
    len += (size_t)snprintf(text + len, cap - len, "]}");
  }
  snprintf(text + len, cap - len, "\n]}\n");
  char path[4300];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  int rc = write_file_atomic(path, text, err, errlen);
  free(text);
  return rc;
}

// The parameters of meta.json's unit list, flattened in order: [name, live elements] pairs.
// The list is compared with this run's table parameter by parameter, not unit by unit, so a
// checkpoint moves between wrapping policies (the same parameters, grouped differently).
static int check_param_table(const FSDP* fs, const JsonDoc* d, const char* path, char* err, size_t errlen) {
  int32_t units = json_get(d, 0, "units");
  if (units < 0 || json_type(d, units) != JSON_ARRAY) return set_error(err, errlen, "%s has no \"units\" list", path);
  int32_t unit = d->nodes[units].child, param = -1;
  for (int u = 0; u < fs->nunits; u++)
    for (int i = 0; i < fs->units[u].nparams; i++) {
      const ParamInfo* p = &fs->units[u].params[i];
      while (param < 0 && unit >= 0) {  // the next unit's first parameter
        int32_t list = json_get(d, unit, "params");
        if (json_type(d, unit) != JSON_OBJECT || list < 0 || json_type(d, list) != JSON_ARRAY)
          return set_error(err, errlen, "%s: an entry of \"units\" has no \"params\" list", path);
        param = d->nodes[list].child;
        unit = d->nodes[unit].next;
      }
      long long live = -1;
      char name[FSDP_NAME_LEN] = "";
      if (param >= 0) {
        int32_t n = d->nodes[param].child, l = n >= 0 ? d->nodes[n].next : -1;
        if (json_type(d, param) != JSON_ARRAY || d->nodes[param].count != 2 ||
            json_string(d, n, "params[0]", name, sizeof name, err, errlen) ||
            json_int(d, l, name, 0, INT64_MAX, &live, err, errlen))
          return set_error(err, errlen, "%s: a parameter entry is not [\"name\", elements]", path);
        param = d->nodes[param].next;
      }
      if (strcmp(name, p->name) || live != p->live)
        return set_error(err, errlen, "%s does not match this model's parameter table at %s.%s (size %lld; checkpoint: %s%s%lld)",
                         path, fs->units[u].name, p->name, (long long)p->live, name[0] ? name : "nothing", name[0] ? " of size " : " ",
                         live);
    }
  if (param >= 0 || unit >= 0) return set_error(err, errlen, "%s lists more parameters than this model has", path);
  return 0;
}

int ckpt_read_meta(const FSDP* fs, const char* dir, const char* model, CkptMeta* m, char* err, size_t errlen) {
  char path[4300];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  size_t cap = 1 << 20;
  for (int u = 0; u < fs->nunits; u++) cap += 256 + (size_t)fs->units[u].nparams * 4 * (FSDP_NAME_LEN + 32);
  JsonDoc d;
  char reason[ERR_CAP];
  if (json_read_object(path, cap, &d, reason, sizeof reason))
    return set_error(err, errlen, "%s (is %s a checkpoint written by --save?)", reason, dir);
  char format[64];
  long long step, seed, elements, world;
  int rc = -1;
  if (json_member_string(&d, 0, "format", format, sizeof format, err, errlen)) goto done;
  if (strcmp(format, CKPT_FORMAT)) {
    set_error(err, errlen, "%s: format \"%s\" is not \"%s\"%s", path, format, CKPT_FORMAT,
              strcmp(format, "fsdp.c checkpoint 1") ? "" : " (an older checkpoint without checksums: it cannot be verified)");
    goto done;
  }
  if (json_member_string(&d, 0, "model", m->model, sizeof m->model, err, errlen) ||
      json_member_int(&d, 0, "step", 0, CKPT_MAX_STEP, &step, err, errlen) ||
      json_member_int(&d, 0, "seed", 0, INT64_MAX, &seed, err, errlen) ||
      json_member_int(&d, 0, "elements", 0, INT64_MAX, &elements, err, errlen) ||
      json_member_int(&d, 0, "saved_by_world_size", 1, 1 << 24, &world, err, errlen))
    goto done;
  m->step = (int)step, m->seed = (uint64_t)seed, m->elements = elements, m->saved_by_world_size = (int)world;
  // The scaler's state is there only when the saving run scaled dynamically.
  memset(&m->scaler, 0, sizeof m->scaler);
  if (json_get(&d, 0, "loss_scale") >= 0) {
    long long scale, good;
    if (json_member_int(&d, 0, "loss_scale", (long long)LOSS_SCALE_MIN, (long long)LOSS_SCALE_MAX, &scale, err, errlen) ||
        json_member_int(&d, 0, "loss_scale_good", 0, 1 << 30, &good, err, errlen))
      goto done;
    if (scale & (scale - 1)) {
      set_error(err, errlen, "%s: \"loss_scale\" is %lld, not a power of two (a dynamic scale only halves and doubles)", path, scale);
      goto done;
    }
    m->scaler = (LossScaler){.scale = (double)scale, .dynamic = 1, .good = (int)good};
  }
  if (strcmp(m->model, model)) {
    set_error(err, errlen, "%s holds model '%s' but this run is --model %s; resume with the same model", dir, m->model, model);
    goto done;
  }
  if (check_param_table(fs, &d, path, err, errlen)) goto done;
  int64_t total = 0;
  for (int u = 0; u < fs->nunits; u++)
    for (int i = 0; i < fs->units[u].nparams; i++) total += fs->units[u].params[i].live;
  if (elements != total) {
    set_error(err, errlen, "%s: \"elements\" is %lld, this model has %lld", path, elements, (long long)total);
    goto done;
  }
  rc = 0;
done:
  json_free(&d);
  return rc;
}

int ckpt_read_settings(const char* dir, CkptSettings* s, char* err, size_t errlen) {
  char path[4300];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  memset(s, 0, sizeof *s);
  JsonDoc d;
  char reason[ERR_CAP];
  // The parameter table makes the file grow with the model: a bound well above any model's.
  if (json_read_object(path, (size_t)256 << 20, &d, reason, sizeof reason))
    return set_error(err, errlen, "%s (is %s a checkpoint written by --save?)", reason, dir);
  int rc = -1;
  if (json_member_string(&d, 0, "model", s->model, sizeof s->model, err, errlen)) goto done;
  int32_t opts = json_get(&d, 0, "options");
  if (opts >= 0 && json_type(&d, opts) != JSON_OBJECT) {
    set_error(err, errlen, "%s: \"options\" is not an object of option names and values", path);
    goto done;
  }
  for (int32_t m = opts >= 0 ? d.nodes[opts].child : -1; m >= 0; m = d.nodes[m].next) {
    char value[4096];
    const char* name = json_key(&d, m);
    if (s->n == CKPT_MAX_SETTINGS || strlen(name) > 32 || !name[0]) {
      set_error(err, errlen, "%s: \"options\" holds more than %d options or a name that is not an option's", path,
                CKPT_MAX_SETTINGS);
      goto done;
    }
    if (json_string(&d, m, name, value, sizeof value, err, errlen)) goto done;
    s->name[s->n] = strdup(name);
    s->value[s->n] = strdup(value);
    if (!s->name[s->n] || !s->value[s->n]) fatal("out of host memory reading %s", path);
    s->n++;
  }
  rc = 0;
done:
  json_free(&d);
  if (rc) ckpt_settings_free(s);
  return rc;
}

void ckpt_settings_free(CkptSettings* s) {
  for (int i = 0; i < s->n; i++) free(s->name[i]), free(s->value[i]);
  s->n = 0;
}

// ---- the completion marker ------------------------------------------------------------------

int ckpt_write_marker(const char* dir, int step, const CkptSums* s, char* err, size_t errlen) {
  size_t cap = 512 + (size_t)s->nchunks * CKPT_ARRAYS * 24, len = 0;
  char* text = xmalloc(cap, "checkpoint marker");
  len += (size_t)snprintf(text + len, cap - len, "{\"format\": \"%s\", \"step\": %d, \"elements\": %lld, \"chunk_elements\": %lld",
                          CKPT_FORMAT, step, (long long)s->elements, (long long)CKPT_CHUNK);
  for (int k = 0; k < CKPT_ARRAYS; k++) {
    len += (size_t)snprintf(text + len, cap - len, ",\n \"%s\": [", CKPT_ARRAY_NAMES[k]);
    for (int64_t c = 0; c < s->nchunks; c++)
      len += (size_t)snprintf(text + len, cap - len, "%s\"%016llx\"", c ? ", " : "", (unsigned long long)s->sum[k][c]);
    len += (size_t)snprintf(text + len, cap - len, "]");
  }
  snprintf(text + len, cap - len, "}\n");
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", dir, CKPT_MARKER);
  int rc = write_file_atomic(path, text, err, errlen);
  free(text);
  return rc;
}

int ckpt_read_marker(const char* dir, int* step, int64_t elements, CkptSums* sums, char* err, size_t errlen) {
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", dir, CKPT_MARKER);
  // Ours: 4 KiB and about 20 bytes per chunk checksum. Without sums only the step is read (to
  // order candidates), from a marker of any size up to the reader's bound.
  size_t cap = sums ? 4096 + (size_t)((elements + CKPT_CHUNK - 1) / CKPT_CHUNK) * CKPT_ARRAYS * 32 : JSON_MAX_BYTES;
  JsonDoc d;
  char reason[ERR_CAP], format[64];
  long long st, el, chunk;
  if (json_read_object(path, cap, &d, reason, sizeof reason))
    return set_error(err, errlen, "%s has no intact completion marker %s (%s): the save that wrote it did not finish", dir,
                     CKPT_MARKER, reason);
  int rc = -1;
  if (json_member_string(&d, 0, "format", format, sizeof format, err, errlen)) goto done;
  if (strcmp(format, CKPT_FORMAT)) {
    set_error(err, errlen, "%s: format \"%s\" is not \"%s\"", path, format, CKPT_FORMAT);
    goto done;
  }
  if (json_member_int(&d, 0, "step", 0, CKPT_MAX_STEP, &st, err, errlen)) goto done;
  *step = (int)st;
  if (!sums) {
    rc = 0;
    goto done;
  }
  if (json_member_int(&d, 0, "elements", 0, INT64_MAX, &el, err, errlen) ||
      json_member_int(&d, 0, "chunk_elements", 1, INT64_MAX, &chunk, err, errlen))
    goto done;
  if (el != elements || chunk != CKPT_CHUNK) {
    set_error(err, errlen, "%s describes %lld elements in chunks of %lld; meta.json and this version need %lld in chunks of %lld",
              path, el, chunk, (long long)elements, (long long)CKPT_CHUNK);
    goto done;
  }
  ckpt_sums_init(sums, elements);
  for (int k = 0; k < CKPT_ARRAYS; k++) {
    int32_t list = json_get(&d, 0, CKPT_ARRAY_NAMES[k]);
    if (list < 0 || json_type(&d, list) != JSON_ARRAY) {
      set_error(err, errlen, "%s has no checksum list for %s", path, CKPT_ARRAY_NAMES[k]);
      goto done;
    }
    if (d.nodes[list].count != sums->nchunks) {
      set_error(err, errlen, "%s: the checksum list of %s has %d entries, not the %lld of its chunks", path,
                CKPT_ARRAY_NAMES[k], d.nodes[list].count, (long long)sums->nchunks);
      goto done;
    }
    int64_t c = 0;
    for (int32_t v = d.nodes[list].child; v >= 0; v = d.nodes[v].next, c++) {
      const char* hex = json_str(&d, v);
      char* end = NULL;
      if (json_type(&d, v) == JSON_STRING && d.nodes[v].len == 16 && strspn(hex, "0123456789abcdef") == 16)
        sums->sum[k][c] = strtoull(hex, &end, 16);
      if (!end || *end) {
        set_error(err, errlen, "%s: checksum %lld of %s is not 16 hex digits in quotes", path, (long long)c, CKPT_ARRAY_NAMES[k]);
        goto done;
      }
    }
  }
  rc = 0;
done:
  json_free(&d);
  return rc;
}
