/* Small helpers shared by the benchmark drivers. */
#ifndef TVM_RT_BENCH_UTIL_H_
#define TVM_RT_BENCH_UTIL_H_

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

/* tvm.graph_executor.create(json, lib, cpu 0): a new executor, weights not loaded. */
static inline TVMModuleHandle create_graph_executor(const char* json, TVMModuleHandle lib) {
  TVMFunctionHandle create;
  CHECK(TVMFuncGetGlobal("tvm.graph_executor.create", &create));
  TVMValue v[4], r;
  int c[4] = {kTVMStr, kTVMModuleHandle, kDLInt, kDLInt}, rc;
  v[0].v_str = json;
  v[1].v_handle = lib;
  v[2].v_int64 = 1;
  v[3].v_int64 = 0;
  CHECK(TVMFuncCall(create, v, c, 4, &r, &rc));
  TVMFuncFree(create);
  return r.v_handle;
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

#endif
