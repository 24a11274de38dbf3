// Calls into code this runtime did not compile (operators, BYOC entries and their `__init_`, host
// callbacks) made from C++, so that a C++ exception they throw stops here as a status and the
// thread's last error. Rust cannot catch a foreign exception: one reaching a Rust frame aborts the
// whole process. Upstream, written in C++, returns such errors; so do we. The non-throwing path
// costs one direct call (the try block itself is free with table-based unwinding).

#include <exception>
#include <string>

#include "bridge.h"

namespace {

// The message of the exception being handled, as the last error; always returns -1.
int Caught(const char* what, const char* who) {
  std::string msg = what ? what : "";
  if (msg.empty()) msg = std::string("a C++ exception without a message escaped ") + who;
  TVMAPISetLastError(msg.c_str());
  return -1;
}

}  // namespace

extern "C" int tvmrt_cxx_guarded_kernel(TVMBackendPackedCFunc func, TVMValue* args, int* codes, int num_args,
                                        TVMValue* ret, int* ret_code, void* resource) {
  try {
    return func(args, codes, num_args, ret, ret_code, resource);
  } catch (const std::exception& e) {
    return Caught(e.what(), "an operator library's function");
  } catch (...) {
    return Caught(nullptr, "an operator library's function (not a std::exception)");
  }
}

extern "C" int tvmrt_cxx_guarded_callback(TVMPackedCFunc func, TVMValue* args, int* codes, int num_args,
                                          TVMRetValueHandle ret, void* resource) {
  try {
    return func(args, codes, num_args, ret, resource);
  } catch (const std::exception& e) {
    return Caught(e.what(), "a host's callback");
  } catch (...) {
    return Caught(nullptr, "a host's callback (not a std::exception)");
  }
}

// A kernel of TVM 0.21 and later (tvm-ffi's safe-call signature), likewise.
typedef struct {
  int32_t type_index;
  uint32_t small_len;
  uint64_t value;
} TVMRTFFIAny;
typedef int (*TVMRTFFISafeCall)(void* self, const TVMRTFFIAny* args, int32_t num_args, TVMRTFFIAny* result);

extern "C" int tvmrt_cxx_guarded_ffi_kernel(TVMRTFFISafeCall func, void* self, const TVMRTFFIAny* args,
                                            int32_t num_args, TVMRTFFIAny* result) {
  try {
    return func(self, args, num_args, result);
  } catch (const std::exception& e) {
    return Caught(e.what(), "an operator library's function");
  } catch (...) {
    return Caught(nullptr, "an operator library's function (not a std::exception)");
  }
}
