// test.h: a tiny test harness. Every check prints one line; a test program exits non-zero
// when any check failed, and prints "<passed> passed, <failed> failed" as its last line.
// test/run_tests.sh adds the counts of all programs into the suite's closing line.
#ifndef FSDP_TEST_H
#define FSDP_TEST_H
#include <math.h>
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

static inline int test_summary(void) {
  printf("%d passed, %d failed\n", test_passed_, test_failed_);
  return test_failed_ ? 1 : 0;
}
#endif
