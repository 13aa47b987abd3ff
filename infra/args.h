// args.h: long options are taken whole. GNU getopt_long accepts any unambiguous prefix of a
// long option (--step for --steps), so a typo can silently become another option; every binary
// checks its command line with long_options_exact before getopt_long reads it.
#ifndef FSDP_ARGS_H
#define FSDP_ARGS_H
#include <getopt.h>
#include <stddef.h>

// 0 when every "--name" (or "--name=value") in argv[1..] is exactly one of opts' names, or is no
// prefix of any of them (getopt_long then refuses it as unknown); -1 with the reason in err for
// the first that is only a prefix ("--step: options are not abbreviated; did you mean --steps?").
// The value of an option that takes one is skipped, as getopt_long reads it; "--" ends options.
int long_options_exact(int argc, char** argv, const struct option* opts, char* err, size_t errlen);
#endif
