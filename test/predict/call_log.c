// call_log.c: the CPU backend's call log, for comparing its call sequence with the timeline's.
// Linked into build/calls/train_gpt_cpu, whose kernels/cpu/*.c, fsdp/device_cpu.c and
// fsdp/comm_mpi.c are compiled with -finstrument-functions: every function entry calls
// __cyg_profile_func_enter below, which writes the name of each exported function (the
// kernels.h, device.h and comm.h entry points: those files export nothing else) to the file
// FSDP_CALL_LOG names (.rank<r> appended under mpirun). Calls made inside a logged call are the
// backend's own composition (the CPU's matmul_forward_gelu calls matmul_forward) and are not
// logged; the timeline logs the same entry points (timeline_call).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NO_TRACE __attribute__((no_instrument_function))
#define CACHE 4096

static FILE* log_file;
static int opened, depth;
// fn -> its exported name (NULL: not exported), an open-addressed cache of dladdr's answers
static struct {
  void* fn;
  const char* name;
} cache[CACHE];

NO_TRACE static int on_main_thread(void) { return syscall(SYS_gettid) == getpid(); }

NO_TRACE static const char* exported_name(void* fn) {
  size_t h = ((size_t)fn >> 4) % CACHE;
  while (cache[h].fn && cache[h].fn != fn) h = (h + 1) % CACHE;
  if (cache[h].fn) return cache[h].name;
  Dl_info info;
  const char* name = NULL;
  if (dladdr(fn, &info) && info.dli_sname && info.dli_saddr == fn) name = info.dli_sname;
  cache[h].fn = fn;
  cache[h].name = name;
  return name;
}

NO_TRACE static void open_log(void) {
  opened = 1;
  const char* path = getenv("FSDP_CALL_LOG");
  if (!path || !*path) return;
  char name[4096];
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  if (rank) snprintf(name, sizeof name, "%s.rank%s", path, rank);
  else snprintf(name, sizeof name, "%s", path);
  log_file = fopen(name, "w");
  if (!log_file) {
    fprintf(stderr, "error: FSDP_CALL_LOG: cannot open '%s'\n", name);
    exit(2);
  }
}

NO_TRACE void __cyg_profile_func_enter(void* fn, void* site) {
  (void)site;
  if (!on_main_thread()) return;  // OpenMP workers run parts of a call, never a call
  if (!opened) open_log();
  const char* name = exported_name(fn);
  if (!name) return;
  if (depth++ == 0 && log_file) {
    fputs(name, log_file);
    fputc('\n', log_file);
    fflush(log_file);
  }
}

NO_TRACE void __cyg_profile_func_exit(void* fn, void* site) {
  (void)site;
  if (!on_main_thread()) return;
  if (exported_name(fn)) depth--;
}
