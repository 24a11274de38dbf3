#define _GNU_SOURCE /* RTLD_DEFAULT */
/* A host that opens the runtime RTLD_LOCAL, as Triton opens its backends: its names are not in
 * the global scope, so a TVM 0.22+ library's direct import of TVMFFIErrorSetRaisedFromCStrParts
 * has nothing to bind to there. The library must still load, run, and report a kernel's own error
 * as -1 and the message, the process alive (upstream's runtime dies, rc 127, at that first error).
 * usage: test_relax_local LIBTVM_RUNTIME.so RELAX_FIXTURES_DIR */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "tvm_runtime.h"

typedef int (*LoadFn)(const char*, const char*, TVMModuleHandle*);
typedef int (*GetFn)(TVMModuleHandle, const char*, int, TVMFunctionHandle*);
typedef int (*CallFn)(TVMFunctionHandle, TVMValue*, int*, int, TVMValue*, int*);
typedef const char* (*ErrFn)(void);
typedef int (*FreeFn)(void*);

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  void* rt = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!rt) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  if (dlsym(RTLD_DEFAULT, "TVMFFIErrorSetRaisedFromCStrParts")) {
    fprintf(stderr, "the runtime's names are global: this test proves nothing\n");
    return 1;
  }
  LoadFn load = (LoadFn)dlsym(rt, "TVMModLoadFromFile");
  GetFn get = (GetFn)dlsym(rt, "TVMModGetFunction");
  CallFn call = (CallFn)dlsym(rt, "TVMFuncCall");
  ErrFn last = (ErrFn)dlsym(rt, "TVMGetLastError");
  FreeFn free_mod = (FreeFn)dlsym(rt, "TVMModFree");
  FreeFn free_func = (FreeFn)dlsym(rt, "TVMFuncFree");
  char path[1024];
  snprintf(path, sizeof path, "%s/0.27/mlp_bound/model.so", argv[2]);
  TVMModuleHandle exe = NULL;
  if (load(path, "", &exe) != 0) {
    fprintf(stderr, "a 0.27 library in an RTLD_LOCAL host does not load: %s\n", last());
    return 1;
  }
  TVMFunctionHandle matmul = NULL;
  if (get(exe, "matmul", 1, &matmul) != 0 || !matmul) {
    fprintf(stderr, "no matmul kernel: %s\n", last());
    return 1;
  }
  int64_t shape[2] = {2, 16};
  float data[32] = {0};
  DLTensor t = {data, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  TVMValue v, r;
  int code = kTVMDLTensorHandle, rc = 0;
  v.v_handle = &t;
  /* One argument where the kernel takes three: its own check raises. */
  int status = call(matmul, &v, &code, 1, &r, &rc);
  if (status != -1 || !strstr(last(), "matmul")) {
    fprintf(stderr, "a kernel's error: status %d, message '%s'\n", status, last());
    return 1;
  }
  printf("the kernel's error, in an RTLD_LOCAL host: %s\n", last());
  free_func(matmul);
  free_mod(exe);
  printf("relax local ok\n");
  return 0;
}
