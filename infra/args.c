// args.c: long options taken whole (args.h).
#include "infra/args.h"

#include <stdio.h>
#include <string.h>

#include "infra/files.h"

int long_options_exact(int argc, char** argv, const struct option* opts, char* err, size_t errlen) {
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (strncmp(a, "--", 2)) continue;  // a value or a stray argument: getopt_long's to judge
    if (!a[2]) return 0;                // "--": the rest are arguments
    size_t n = strcspn(a + 2, "=");
    const struct option* exact = NULL;
    char candidates[512] = "";
    size_t used = 0;
    for (const struct option* o = opts; o->name; o++) {
      if (strncmp(o->name, a + 2, n)) continue;
      if (!o->name[n]) exact = o;
      else if (used < sizeof candidates)
        used += (size_t)snprintf(candidates + used, sizeof candidates - used, "%s--%s", used ? " or " : "", o->name);
    }
    if (exact) {
      if (exact->has_arg == required_argument && !a[2 + n]) i++;  // its value follows
      continue;
    }
    if (used)
      return set_error(err, errlen, "unknown option '%.*s': options are not abbreviated; did you mean %s?", (int)(n + 2), a,
                       candidates);
  }
  return 0;
}
