// Linked only into builds with a static libstdc++ for an old glibc (TVM_RT_CXX_STATIC: the release
// wheels, which ask glibc for nothing newer than 2.28). libstdc++.a was compiled against a newer
// glibc, and its objects name two of that glibc's symbols; both are defined here, hidden in the
// library, with the meaning glibc gives them.
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

// glibc 2.32: whether the process has only ever had one thread. "No" keeps libstdc++'s reference
// counts atomic, as they were before 2.32.
extern "C" __attribute__((visibility("hidden"))) char __libc_single_threaded = 0;

// glibc 2.36: random bits from the kernel (libstdc++'s std::random_device, which this runtime does
// not use, reads them here).
extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random(void) {
  uint32_t v = 0;
  while (syscall(SYS_getrandom, &v, sizeof v, 0) != static_cast<long>(sizeof v)) {
  }
  return v;
}
