// test.h: a tiny test harness. Every check prints one line; a test program exits non-zero
// when any check failed, and prints "<passed> passed, <failed> failed" as its last line.
// test/run_tests.sh adds the counts of all programs into the suite's closing line.
#ifndef FSDP_TEST_H
#define FSDP_TEST_H
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed_ = 0, test_failed_ = 0;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (cond) {                                           \
      test_passed_++;                                     \
    } else {                                              \
      test_failed_++;                                     \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);         \
      printf(__VA_ARGS__);                                \
      printf("\n");                                       \
    }                                                     \
  } while (0)

// Reports one named check with a line "ok <name>" or "FAIL <name>: <details>".
#define EXPECT(name, cond, ...)                              \
  do {                                                       \
    if (cond) {                                              \
      test_passed_++;                                        \
      printf("ok   %s\n", name);                             \
    } else {                                                 \
      test_failed_++;                                        \
      printf("FAIL %s: ", name);                             \
      printf(__VA_ARGS__);                                   \
      printf("\n");                                          \
    }                                                        \
  } while (0)

// Relative error of a against b with a floor on the denominator; NaN compares as infinite.
static inline double rel_err(double a, double b, double floor_) {
  double d = fabs(a - b), s = fmax(fmax(fabs(a), fabs(b)), floor_);
  double r = d / s;
  return (r == r) ? r : INFINITY;
}

// TEST_FILTER (`make test F=REGEX`): whether the case `name` runs. An extended regular
// expression, case-insensitive, searched in the name; every case runs without one.
static inline int test_wanted(const char* name) {
  static int ready = 0, filtered = 0;
  static regex_t re;
  if (!ready) {
    const char* f = getenv("TEST_FILTER");
    if (f && *f) {
      if (regcomp(&re, f, REG_EXTENDED | REG_ICASE | REG_NOSUB)) {
        fprintf(stderr, "TEST_FILTER='%s' is not an extended regular expression\n", f);
        exit(2);
      }
      filtered = 1;
    }
    ready = 1;
  }
  return !filtered || regexec(&re, name, 0, NULL, 0) == 0;
}

// TEST_RUN(test_x(args)): runs the call when its text matches TEST_FILTER (the function and its
// arguments: F=matmul picks every test_matmul call, F='attention.*causal' some of them).
#define TEST_RUN(call)                \
  do {                                \
    if (test_wanted(#call)) { call; } \
  } while (0)

static inline int test_summary(void) {
  printf("%d passed, %d failed\n", test_passed_, test_failed_);
  return test_failed_ ? 1 : 0;
}
#endif
