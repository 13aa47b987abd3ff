// report.cpp: how the simulator tells a user what it found. A finding (an out-of-bounds
// access, a race, a divergent barrier, a bad API argument) is printed as
//   cudasim: <kind>: <message>
// on stderr, and the process exits with status 86, as compute-sanitizer ends a run at the
// first error. CUDASIM_KEEP_GOING=1 prints every finding instead and exits 86 at the end.
#include <cxxabi.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/cudasim/sim.h"

namespace cudasim {

static int findings = 0;

static int keep_going() {
  static int v = -1;
  if (v < 0) {
    const char* e = getenv("CUDASIM_KEEP_GOING");
    v = e && e[0] == '1';
  }
  return v;
}

static void exit_with_findings() {
  if (findings) _exit(86);
}

// With CUDASIM_KEEP_GOING, a fault repeated by every thread would print thousands of lines:
// the first kMaxPrinted are printed, the rest only counted.
static const int kMaxPrinted = 50;

static void vreport(const char* kind, const char* fmt, va_list ap) {
  if (findings >= kMaxPrinted) {
    if (findings++ == kMaxPrinted) fprintf(stderr, "cudasim: (further findings are not printed)\n");
    return;
  }
  fflush(stdout);
  fprintf(stderr, "cudasim: %s: ", kind);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  if (findings++ == 0 && keep_going()) atexit(exit_with_findings);
}

void report(const char* kind, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(kind, fmt, ap);
  va_end(ap);
  if (!keep_going()) _exit(86);
}

void fatal(const char* kind, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(kind, fmt, ap);
  va_end(ap);
  _exit(86);
}

// "file:line (function)" of a code address, through addr2line on the running binary; the bare
// symbol when addr2line is missing. Only on the reporting path, so its cost does not matter.
void describe_pc(const void* pc, char* out, size_t n) {
  Dl_info info;
  if (findings >= kMaxPrinted) {  // not printed anyway: skip the addr2line call
    snprintf(out, n, "pc %p", pc);
    return;
  }
  if (!pc || !dladdr(pc, &info) || !info.dli_fname) {
    snprintf(out, n, "pc %p", pc);
    return;
  }
  // Return addresses point after the call; step back one byte to stay inside its line.
  uintptr_t off = (uintptr_t)pc - (uintptr_t)info.dli_fbase - 1;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e '%s' 0x%lx 2>/dev/null", info.dli_fname, (unsigned long)off);
  FILE* p = popen(cmd, "r");
  // With -i, addr2line prints (function, file:line) pairs from the innermost inlined frame out;
  // report the innermost one in the project's code (not in the simulator's CUDA headers).
  char fn[512], loc[512], best_fn[512] = "", best_loc[512] = "";
  while (p && fgets(fn, sizeof fn, p) && fgets(loc, sizeof loc, p)) {
    fn[strcspn(fn, "\n")] = 0;
    loc[strcspn(loc, "\n")] = 0;
    if (loc[0] == '?') continue;
    if (!best_loc[0] || strstr(best_loc, "test/cudasim/include/")) {
      snprintf(best_fn, sizeof best_fn, "%s", fn);
      snprintf(best_loc, sizeof best_loc, "%s", loc);
    }
  }
  if (p) pclose(p);
  if (best_loc[0]) {
    const char* rel = strstr(best_loc, "kernels/");
    if (!rel) rel = strstr(best_loc, "test/");
    if (!rel) rel = strstr(best_loc, "build/");
    snprintf(out, n, "%s (in %s)", rel ? rel : best_loc, best_fn);
    return;
  }
  const char* sym = info.dli_sname;
  int st = 1;
  char* dem = sym ? abi::__cxa_demangle(sym, NULL, NULL, &st) : NULL;
  snprintf(out, n, "%s+0x%lx", st == 0 && dem ? dem : (sym ? sym : "?"),
           (unsigned long)((uintptr_t)pc - (uintptr_t)info.dli_saddr));
  free(dem);
}

}  // namespace cudasim
