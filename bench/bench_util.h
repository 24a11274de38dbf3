/* Small helpers shared by the benchmark drivers. */
#ifndef TVM_RT_BENCH_UTIL_H_
#define TVM_RT_BENCH_UTIL_H_

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <tvm/runtime/c_runtime_api.h>

#define CHECK(x) do { if ((x) != 0) { fprintf(stderr, "%s: %s\n", #x, TVMGetLastError()); exit(1); } } while (0)

/* The whole file dir/name (NUL-terminated); exits if it cannot be read. */
static inline char* slurp(const char* dir, const char* name, size_t* n) {
  char path[1024];
  if (name) snprintf(path, sizeof path, "%s/%s", dir, name);
  else snprintf(path, sizeof path, "%s", dir);
  FILE* f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(1); }
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc(*n + 1);
  if (fread(buf, 1, *n, f) != *n) exit(1);
  buf[*n] = 0;
  fclose(f);
  return buf;
}

static inline double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static inline int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* tvm.graph_executor.create(json, lib, device_type 0): a new executor, weights not loaded. */
static inline TVMModuleHandle create_graph_executor_on(const char* json, TVMModuleHandle lib, int device_type) {
  TVMFunctionHandle create;
  CHECK(TVMFuncGetGlobal("tvm.graph_executor.create", &create));
  TVMValue v[4], r;
  int c[4] = {kTVMStr, kTVMModuleHandle, kDLInt, kDLInt}, rc;
  v[0].v_str = json;
  v[1].v_handle = lib;
  v[2].v_int64 = device_type;
  v[3].v_int64 = 0;
  CHECK(TVMFuncCall(create, v, c, 4, &r, &rc));
  TVMFuncFree(create);
  return r.v_handle;
}

/* The same on cpu 0. */
static inline TVMModuleHandle create_graph_executor(const char* json, TVMModuleHandle lib) {
  return create_graph_executor_on(json, lib, kDLCPU);
}

/* dir/lib.so, loaded; exits if it cannot be. */
static inline TVMModuleHandle load_lib(const char* dir) {
  char path[1024];
  TVMModuleHandle lib;
  snprintf(path, sizeof path, "%s/lib.so", dir);
  CHECK(TVMModLoadFromFile(path, "so", &lib));
  return lib;
}

/* Calls module function `name` with n arguments; exits on failure. */
static inline void call_packed(TVMModuleHandle m, const char* name, TVMValue* v, int* c, int n) {
  TVMFunctionHandle f;
  TVMValue r;
  int rc;
  CHECK(TVMModGetFunction(m, name, 0, &f));
  CHECK(TVMFuncCall(f, v, c, n, &r, &rc));
  TVMFuncFree(f);
}

/* Gives executor ex its weights: load_params(blob) when src is NULL, else share_params(src, blob). */
static inline void bind_weights(TVMModuleHandle ex, TVMModuleHandle src, TVMByteArray* blob) {
  TVMValue v[2];
  int c[2] = {kTVMModuleHandle, kTVMBytes};
  v[0].v_handle = src;
  v[1].v_handle = blob;
  if (src) call_packed(ex, "share_params", v, c, 2);
  else call_packed(ex, "load_params", v + 1, c + 1, 1);
}

/* VmRSS and VmData of this process, in kB. */
static inline void vm_kb(long* rss, long* data) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  *rss = *data = 0;
  while (fgets(line, sizeof line, f)) {
    sscanf(line, "VmRSS: %ld", rss);
    sscanf(line, "VmData: %ld", data);
  }
  fclose(f);
}

/* The memory a figure counts, in kB: VmData, or with DEVICE_BYTES=<the OpenCL shim the runtime
 * loaded> (c_tests/opencl_shim.c) the live bytes of every buffer and image on the device, what a
 * GPU would hold (pocl allocates lazily, so VmData hides device memory). */
static inline long memory_kb(void) {
  const char* shim = getenv("DEVICE_BYTES");
  if (shim && *shim) {
    /* The same file the runtime opened: the same instance, its counter. */
    void* h = dlopen(shim, RTLD_NOW | RTLD_LOCAL);
    size_t (*live)(void) = h ? (size_t(*)(void))dlsym(h, "tvm_rt_cl_shim_live_bytes") : NULL;
    if (!live) {
      fprintf(stderr, "DEVICE_BYTES: %s\n", dlerror());
      exit(1);
    }
    long kb = (long)(live() / 1024);
    dlclose(h);
    return kb;
  }
  long rss, data;
  vm_kb(&rss, &data);
  return data;
}

#endif
