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

#endif
