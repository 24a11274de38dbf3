/* Helpers shared by the C tests: fixture manifests, file reading, checks. */
#ifndef TVM_RT_C_TESTS_FIXTURE_H_
#define TVM_RT_C_TESTS_FIXTURE_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef USE_UPSTREAM_HEADERS
#include <tvm/runtime/c_runtime_api.h>
/* Exported by upstream's runtime (Python uses it) but not declared in its header. */
int TVMArrayGetTypeIndex(TVMArrayHandle handle, unsigned* out_tindex);
#else
#include "tvm_runtime.h"
#endif

#define MAX_TENSORS 16
#define MAX_DIMS 8

typedef struct {
  char name[128];
  char dtype[16];
  int ndim;
  int64_t shape[MAX_DIMS];
  char file[512];
} FixtureTensor;

typedef struct {
  char dir[512];
  int factory_weights;
  int num_inputs, num_outputs;
  FixtureTensor inputs[MAX_TENSORS];
  FixtureTensor outputs[MAX_TENSORS];
} Fixture;

static _Atomic int g_failures = 0;

#define CHECK(cond, ...)                                           \
  do {                                                             \
    if (!(cond)) {                                                 \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                \
      fprintf(stderr, "\n");                                       \
      g_failures++;                                                \
    }                                                              \
  } while (0)

/* A call that must succeed; on failure prints TVMGetLastError and counts it. */
#define OK(call)                                                            \
  do {                                                                      \
    if ((call) != 0) {                                                      \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, \
              TVMGetLastError());                                           \
      g_failures++;                                                         \
    }                                                                       \
  } while (0)

static inline void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* buf = malloc(n > 0 ? (size_t)n : 1);
  if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    fclose(f);
    return NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return buf;
}

static inline void parse_tensor(char* rest, FixtureTensor* t, const char* dir, int has_name) {
  char* tok = strtok(rest, " \n");
  if (has_name) {
    snprintf(t->name, sizeof t->name, "%s", tok);
    tok = strtok(NULL, " \n");
  }
  snprintf(t->dtype, sizeof t->dtype, "%s", tok);
  t->ndim = atoi(strtok(NULL, " \n"));
  for (int i = 0; i < t->ndim; i++) t->shape[i] = atoll(strtok(NULL, " \n"));
  snprintf(t->file, sizeof t->file, "%s/%s", dir, strtok(NULL, " \n"));
}

static inline int load_fixture(const char* dir, Fixture* fx) {
  char path[640], line[1024];
  memset(fx, 0, sizeof *fx);
  snprintf(fx->dir, sizeof fx->dir, "%s", dir);
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "factory_weights ", 16)) fx->factory_weights = !strncmp(line + 16, "yes", 3);
    else if (!strncmp(line, "input ", 6)) parse_tensor(line + 6, &fx->inputs[fx->num_inputs++], dir, 1);
    else if (!strncmp(line, "output ", 7)) parse_tensor(line + 7, &fx->outputs[fx->num_outputs++], dir, 0);
  }
  fclose(f);
  return 0;
}

/* dtype string -> (code, bits) */
static inline void dtype_of(const char* s, int* code, int* bits) {
  if (!strcmp(s, "bool")) { *code = 1; *bits = 1; return; }
  if (!strncmp(s, "float", 5)) { *code = 2; *bits = atoi(s + 5); return; }
  if (!strncmp(s, "bfloat", 6)) { *code = 4; *bits = atoi(s + 6); return; } /* kDLBfloat */
  if (!strncmp(s, "uint", 4)) { *code = 1; *bits = atoi(s + 4); return; }
  if (!strncmp(s, "int", 3)) { *code = 0; *bits = atoi(s + 3); return; }
  *code = -1; *bits = 0;
}

static inline int64_t num_bytes(const FixtureTensor* t) {
  int code, bits;
  dtype_of(t->dtype, &code, &bits);
  int64_t n = (bits + 7) / 8;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

/* Calls a packed function with the given values; returns the status. */
static inline int call(TVMFunctionHandle f, TVMValue* v, int* c, int n, TVMValue* ret, int* ret_code) {
  return TVMFuncCall(f, v, c, n, ret, ret_code);
}

/* Calls function `name` of module `m` (or the global `name` when `m` is NULL); returns the
 * status. The function handle is released after the call. */
static inline int call_named(TVMModuleHandle m, const char* name, TVMValue* v, int* codes, int n, TVMValue* r,
                             int* rc) {
  TVMFunctionHandle f = NULL;
  if (m) {
    OK(TVMModGetFunction(m, name, 0, &f));
  } else {
    OK(TVMFuncGetGlobal(name, &f));
  }
  CHECK(f != NULL, "no function %s", name);
  if (!f) return -1;
  int status = TVMFuncCall(f, v, codes, n, r, rc);
  TVMFuncFree(f);
  return status;
}

#endif
