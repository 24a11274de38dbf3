// The check macro of the C++ hosts: a failed check prints where and why, and counts; the host
// reports the count at the end (ExitStatus), so one run shows every failure.
#ifndef TVM_RT_C_TESTS_CXX_EXPECT_H_
#define TVM_RT_C_TESTS_CXX_EXPECT_H_

#include <cstdio>

static int failures = 0;
#define EXPECT(cond, what)                                                     \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #cond, what); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

// 0 and `ok` on stdout when every check held, else 1 and the count on stderr.
static inline int ExitStatus(const char* ok) {
  if (failures) {
    std::fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  std::printf("%s\n", ok);
  return 0;
}

#endif  // TVM_RT_C_TESTS_CXX_EXPECT_H_
